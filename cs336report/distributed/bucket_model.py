"""ddp_bucketed_benchmarking (b): the time bucketed DDP adds after backward, as a model.

With ``s`` bytes of gradients in ``n_b`` equal buckets, an all-reduce of one bucket takes

    c = o + s / (n_b * w)                                            (1)

(``o``: the fixed cost of one call, ``w``: the algorithm bandwidth in bytes/s). Backward takes
``t_b`` and produces the buckets evenly, one every ``t_b / n_b``; a bucket's all-reduce starts
when it is ready and the previous one is done. The last all-reduce then ends, after backward, at

    overhead(n_b) = max(c, n_b * c - t_b * (1 - 1 / n_b))             (2)

the first term when communication keeps up with backward (only the last bucket is exposed), the
second when it does not (the queue of all-reduces outlasts backward). The two are equal where one
bucket's communication takes as long as its computation, c = t_b / n_b (the handout's
assumption), which is the best bucket count:

    n_b* = (t_b - s / w) / o,   bucket size b* = s / n_b* = s * o / (t_b - s / w)     (3)

with overhead(n_b*) = t_b / n_b*. Without t_b > s / w no bucketing hides the communication: one
bucket (n_b* = 1) is then best. ``o`` and ``w`` are fitted to the measured overheads of the bucket
sweep by least squares (:func:`fit`).
"""

from __future__ import annotations

import numpy as np


def overhead(n_b, s: float, w: float, o: float, t_b: float):
    """Equation (2), elementwise over ``n_b``."""
    n_b = np.asarray(n_b, dtype=float)
    c = o + s / (n_b * w)
    return np.maximum(c, n_b * c - t_b * (1 - 1 / n_b))


def best(s: float, w: float, o: float, t_b: float) -> dict:
    """Equation (3): the best bucket count and size (bytes) and the overhead there (s)."""
    n = max(1.0, (t_b - s / w) / o) if t_b > s / w else 1.0
    return {"n_buckets": n, "bucket_bytes": s / n, "overhead_s": float(overhead(n, s, w, o, t_b))}


def fit(n_b, measured_s, s: float, t_b: float, points: int = 161) -> dict:
    """``o`` (s) and ``w`` (bytes/s) minimising the squared error of log (2) against log ``measured_s``
    (relative errors: the overheads span orders of magnitude): a log-spaced grid search, refined
    three times around its best point."""
    n_b, y = np.asarray(n_b, dtype=float), np.asarray(measured_s, dtype=float)
    o_range, w_range = (-7.0, 0.0), (7.0, 13.0)  # log10: o from 100 ns to 1 s, w from 10 MB/s to 10 TB/s
    for _ in range(4):
        o = 10 ** np.linspace(*o_range, points)
        w = 10 ** np.linspace(*w_range, points)
        oo, ww = np.meshgrid(o, w, indexing="ij")  # (o, w)
        pred = overhead(n_b[None, None, :], s, ww[..., None], oo[..., None], t_b)  # (o, w, points)
        err = ((np.log(pred) - np.log(y)) ** 2).sum(axis=-1)
        i, j = np.unravel_index(np.argmin(err), err.shape)
        step_o = (o_range[1] - o_range[0]) / (points - 1) * 4
        step_w = (w_range[1] - w_range[0]) / (points - 1) * 4
        o_range = (np.log10(o[i]) - step_o, np.log10(o[i]) + step_o)
        w_range = (np.log10(w[j]) - step_w, np.log10(w[j]) + step_w)
    residual = overhead(n_b, s, w[j], o[i], t_b) - y
    return {"o_s": float(o[i]), "w_bytes_s": float(w[j]), "rmse_s": float(np.sqrt(np.mean(residual**2))),
            "predicted_s": overhead(n_b, s, w[j], o[i], t_b).tolist()}
