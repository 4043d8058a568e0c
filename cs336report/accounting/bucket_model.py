"""ddp_bucketed_benchmarking (b): the time bucketed DDP adds after backward, as a model.

With ``s`` bytes of gradients in ``n_b`` equal buckets, an all-reduce of one bucket takes

    c = o + s / (n_b * w)                                            (1)

(``o``: the fixed cost of one call, ``w``: the algorithm bandwidth in bytes/s). Backward takes
``t_b`` and produces the buckets evenly, one every ``t_b / n_b``; a bucket's all-reduce starts
when it is ready and the previous one is done. The last all-reduce then ends, after backward, at

    overhead(n_b) = max(c, n_b * c - t_b * (1 - 1 / n_b))             (2)

the first term when communication keeps up with backward (only the last bucket is exposed), the
second when it does not (the queue of all-reduces outlasts backward). Under the handout's
assumption, that one bucket's communication takes as long as its computation (c = t_b / n_b), the
two are equal and the overhead is one bucket's all-reduce, o + s / (n_b * w). The first term falls
with n_b and the second is convex in n_b, lowest at sqrt(t_b / o); the first is the larger below the
crossing point

    n_c = (t_b - s / w) / o                                          (3)

and the second above it. So the best bucket count is

    n_b* = max(1, n_c, sqrt(t_b / o)),   bucket size b* = s / n_b*          (4)

the crossing point where the queue term already rises there ((t_b - s / w)^2 >= o * t_b), with an
overhead of t_b / n_c; else sqrt(t_b / o), where the queue's own minimum lies. Where t_b <= s / w
the queue outlasts backward at every n_b, and more buckets still hide up to t_b of it. ``o`` and
``w`` are fitted to the measured overheads of the bucket sweep by least squares (:func:`fit`).
"""

from __future__ import annotations

import numpy as np


def overhead(n_b, s: float, w: float, o: float, t_b: float):
    """Equation (2), elementwise over ``n_b``."""
    n_b = np.asarray(n_b, dtype=float)
    c = o + s / (n_b * w)
    return np.maximum(c, n_b * c - t_b * (1 - 1 / n_b))


def best(s: float, w: float, o: float, t_b: float) -> dict:
    """Equation (4): the best bucket count and size (bytes), the overhead there (s), and whether it is
    the crossing point of equation (3) (``at_crossing``) or the queue term's own minimum."""
    crossing = (t_b - s / w) / o
    queue_low = (t_b / o) ** 0.5
    n = max(1.0, crossing, queue_low)
    return {"n_buckets": n, "bucket_bytes": s / n, "overhead_s": float(overhead(n, s, w, o, t_b)),
            "at_crossing": bool(n == crossing)}


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
