"""Check and time the Triton FlashAttention-2 paths on one GPU, for choosing their defaults.

    python -m cs336report.experiments.flash_benchmarking.tune --out DIR [--phases warm,check,harness,variants,e2e,sweep]

On the leaderboard shape (16 × 16384 × 64, bf16, causal; ``--shape``), in this order:

* ``warm``: compile every variant in a pool of processes (they share Triton's cache), so that the
  timings below start warm and the whole run fits a short lease;
* ``check``: the defaults against the float32 reference on the first two heads, with the harness's
  bound |x − ref| ≤ 0.03 + 0.03·|ref| (a worst ratio ≤ 1 passes), and how far two runs of the
  backward differ (dQ's atomic adds change its summation order);
* ``harness``: the leaderboard harness itself (:func:`cs336report.experiments.flash_benchmarking.leaderboard.run_leaderboard`)
  for ``--harness`` implementations, its do_bench mean being the leaderboard's number;
* ``variants``: each forward and backward variant (kernel path, tiles, warps, stages) alone with
  ``triton.testing.do_bench``: median ms, and the same check;
* ``e2e``: eager forward + backward of ours (fused and two-pass) against SDPA's cuDNN and flash
  backends, and their passes alone;
* ``sweep``: the default tiles on a ragged causal shape for every head size and dtype, against the
  reference.

Writes ``tune.json`` (and ``harness.json``, the harness's record) under ``--out`` as it goes.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import traceback

import torch

from ...flash import triton_kernels as tk
from ...flash.precompile import inputs, precompile, variant_call
from ...flash.reference import reference_attention

LEADERBOARD = (16, 16384, 64)
# Variants beyond the defaults and the autotuner's candidates: (Q tile, K tile, warps, stages).
FWD_TILES = ((128, 64, 8, 3), (128, 64, 8, 4), (128, 128, 8, 2), (128, 128, 8, 3), (64, 64, 4, 3))
BWD_TILES = ((64, 128, 8, 2), (64, 128, 8, 3), (64, 64, 4, 2), (64, 64, 4, 3), (64, 64, 8, 2), (128, 64, 8, 2))
TOLERANCE = 0.03  # the harness's rtol = atol
CHECK_HEADS = 2


def variants() -> dict[str, dict]:
    """name -> spec: pass ("fwd" | "bwd"), backward kind, tiles, and the tile path (tma, tma_reduce)."""
    out = {}
    for t in dict.fromkeys((tk.default_tiles("fwd", 128), *FWD_TILES, *tk.AUTOTUNE_TILES["fwd"])):
        out[f"fwd {t} tma"] = {"pass": "fwd", "tiles": t, "tma": True}
    out[f"fwd {tk.default_tiles('fwd', 128)} ptr"] = {"pass": "fwd", "tiles": tk.default_tiles("fwd", 128), "tma": False}
    for t in dict.fromkeys((tk.default_tiles("bwd", 128), *BWD_TILES, *tk.AUTOTUNE_TILES["bwd"])):
        out[f"bwd fused {t} tma+reduce"] = {"pass": "bwd", "backward": "fused", "tiles": t, "tma": True,
                                            "tma_reduce": True}
    for t in ((64, 128, 8, 2), (64, 64, 4, 2)):
        for tma in (True, False):
            out[f"bwd fused {t} {'tma' if tma else 'ptr'}"] = {"pass": "bwd", "backward": "fused", "tiles": t,
                                                               "tma": tma, "tma_reduce": False}
    for tma in (True, False):  # the two-pass backward at its defaults, both kernels
        out[f"bwd two_pass default {'tma' if tma else 'ptr'}"] = {"pass": "bwd", "backward": "two_pass", "tiles": None,
                                                                  "tma": tma, "tma_reduce": False}
    return out


SWEEP_DS = (16, 32, 64, 128)
SWEEP_SHAPE = (2, 1000)  # a ragged length: every kernel's bounds checks run


def bound_ratios(pairs) -> dict:
    """Worst |x − ref| / (tol + tol·|ref|) per named (got, want) pair: at most 1 passes."""
    return {name: round(float(((got.float() - want).abs() / (TOLERANCE + TOLERANCE * want.abs())).max()), 4)
            for name, got, want in pairs}


class Tuner:
    def __init__(self, out_dir: str, shape, workers: int):
        self.out_dir, self.shape, self.workers = out_dir, tuple(shape), workers
        self.results: dict = {"device": torch.cuda.get_device_name(), "shape": list(self.shape), "phases": {}}
        self.data = None

    def save(self):
        os.makedirs(self.out_dir, exist_ok=True)
        with open(os.path.join(self.out_dir, "tune.json"), "w") as fh:
            json.dump(self.results, fh, indent=1, default=str)

    def warm(self):
        items = [(name, spec, self.shape, "bfloat16", True) for name, spec in variants().items()]
        items += [(f"sweep {dtype} d{d}", None, (*SWEEP_SHAPE, d), dtype, True) for dtype in ("bfloat16", "float32")
                  for d in SWEEP_DS]
        done = precompile(items, self.workers) or {"kernels": 0, "failed": []}
        return {"variants": done["kernels"], "failed": done["failed"]}

    def _inputs(self):
        if self.data is None:
            q, k, v, do = inputs(self.shape)
            leaves = [t[:CHECK_HEADS].float().requires_grad_(True) for t in (q, k, v)]
            ref = reference_attention(*leaves, is_causal=True)
            ref.backward(do[:CHECK_HEADS].float())
            self.data = (q, k, v, do), (ref.detach(), *(leaf.grad for leaf in leaves))
        return self.data

    def check(self):
        (q, k, v, do), (ref_o, ref_dq, ref_dk, ref_dv) = self._inputs()
        o, lse = tk.flash_forward_triton(q, k, v, True)
        dq, dk, dv = tk.flash_backward_triton(q, k, v, o, do, lse, True)
        h = CHECK_HEADS
        ratios = bound_ratios([("o", o[:h], ref_o), ("dq", dq[:h], ref_dq), ("dk", dk[:h], ref_dk),
                               ("dv", dv[:h], ref_dv)])
        again = tk.flash_backward_triton(q, k, v, o, do, lse, True)[0]
        return {"worst_ratio": ratios, "config": tk.last_triton_config(),
                "dq_rerun_max_abs_diff": float((again.float() - dq.float()).abs().max())}

    def harness(self, implementations, warmup_ms, rep_ms):
        from . import leaderboard as fl

        b, n, d = self.shape
        cell = {"device": "cuda", "seed": 0, "tf32": False, "heads": b, "seq": n, "d": d, "dtype": "bf16",
                "causal": True, "compile": True, "implementations": list(implementations), "warmup_ms": warmup_ms,
                "rep_ms": rep_ms, "check_heads": CHECK_HEADS, "tolerance": TOLERANCE}
        data = fl.run_leaderboard(cell)
        with open(os.path.join(self.out_dir, "harness.json"), "w") as fh:
            json.dump({"cell": cell, "data": data}, fh, default=str)
        rows = []
        for row in data["rows"]:
            if row.get("status") != "ok":
                rows.append({"impl": row["implementation"], "status": row.get("status"), "error": row.get("error")})
                continue
            tiles = {k: {kk: vv for kk, vv in t.items() if kk != "candidates"} for k, t in (row.get("tiles") or {}).items()}
            kernels = sorted(((k["name"][:60], round(k["ms"], 4), k["pass"]) for k in row.get("kernels", [])),
                             key=lambda x: -x[1])
            rows.append({"impl": row["implementation"], "mean_ms": round(row["stats_s"]["mean"] * 1e3, 4),
                         "median_ms": round(row["stats_s"]["median"] * 1e3, 4), "calls": row["stats_s"]["n"],
                         "compiled": row["compiled"], "check": row["check"]["worst_ratio"], "tiles": tiles,
                         "kernels": kernels})
        return {"cell": cell, "rows": rows}

    def variants(self):
        from triton.testing import do_bench

        (q, k, v, do), (ref_o, ref_dq, ref_dk, ref_dv) = self._inputs()
        o, lse = tk.flash_forward_triton(q, k, v, True)
        h, rows = CHECK_HEADS, []
        for name, spec in variants().items():
            row = {"name": name}
            try:
                call = variant_call(spec, q, k, v, do, o, lse)
                got = call()
                row["check"] = bound_ratios([("o", got[0][:h], ref_o)] if spec["pass"] == "fwd" else
                                            [("dq", got[0][:h], ref_dq), ("dk", got[1][:h], ref_dk),
                                             ("dv", got[2][:h], ref_dv)])
                del got
                row["ms"] = round(do_bench(call, warmup=25, rep=250, return_mode="median"), 4)
            except Exception as exc:
                row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            rows.append(row)
            self.results["phases"]["variants"] = rows
            self.save()
        return rows

    def e2e(self):
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from triton.testing import do_bench

        (q0, k0, v0, do), _ = self._inputs()
        q, k, v = (t.detach().clone().requires_grad_(True) for t in (q0, k0, v0))
        out = {}
        for kind in tk.BACKWARDS:
            tk.set_triton_backward(kind)
            step = lambda: tk.FlashAttention2Triton.apply(q, k, v, True).backward(do)  # noqa: E731
            out[f"ours {kind} forward+backward"] = do_bench(step, warmup=50, rep=500, grad_to_none=[q, k, v],
                                                            return_mode="median")
        tk.set_triton_backward("fused")
        for backend in ("CUDNN_ATTENTION", "FLASH_ATTENTION"):
            def forward(backend=getattr(SDPBackend, backend)):
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(q[:, None], k[:, None], v[:, None], is_causal=True)

            o = forward()
            out[f"sdpa {backend} forward"] = do_bench(forward, warmup=25, rep=250, return_mode="median")
            out[f"sdpa {backend} backward"] = do_bench(
                lambda: torch.autograd.grad(o, (q, k, v), do[:, None], retain_graph=True), warmup=25, rep=250,
                return_mode="median")
            out[f"sdpa {backend} forward+backward"] = do_bench(lambda: forward().backward(do[:, None]), warmup=50,
                                                               rep=500, grad_to_none=[q, k, v], return_mode="median")
        return {key: round(ms, 4) for key, ms in out.items()}

    def sweep(self):
        rows = {}
        for dtype in (torch.bfloat16, torch.float32):
            tol = 3e-2 if dtype == torch.bfloat16 else 1e-2
            for d in SWEEP_DS:
                q, k, v, do = inputs((*SWEEP_SHAPE, d), dtype, seed=d)
                o, lse = tk.flash_forward_triton(q, k, v, True)
                dq, dk, dv = tk.flash_backward_triton(q, k, v, o, do, lse, True)
                leaves = [t.float().requires_grad_(True) for t in (q, k, v)]
                ref = reference_attention(*leaves, is_causal=True)
                ref.backward(do.float())
                worst = {name: round(float(((got.float() - want).abs() / (tol + tol * want.abs())).max()), 3)
                         for name, got, want in (("o", o, ref.detach()), ("dq", dq, leaves[0].grad),
                                                 ("dk", dk, leaves[1].grad), ("dv", dv, leaves[2].grad))}
                rows[f"{str(dtype)[6:]} d{d}"] = {"worst_ratio": worst, "passed": max(worst.values()) <= 1,
                                                  "config": tk.last_triton_config()}
        return rows

    def run(self, phases, args):
        start = time.perf_counter()
        calls = {"warm": self.warm, "check": self.check, "variants": self.variants, "e2e": self.e2e,
                 "sweep": self.sweep,
                 "harness": lambda: self.harness(args.harness.split(","), args.harness_warmup_ms, args.harness_rep_ms)}
        for phase in phases:
            try:
                self.results["phases"][phase] = calls[phase]()
            except Exception as exc:
                traceback.print_exc()
                self.results["phases"][phase] = {"error": f"{type(exc).__name__}: {exc}"}
            print(f"[{phase}: {time.perf_counter() - start:.0f} s] "
                  f"{json.dumps(self.results['phases'][phase], default=str)[:3000]}", flush=True)
            self.save()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "tune-out"))
    parser.add_argument("--phases", default="warm,check,harness,variants,e2e,sweep")
    parser.add_argument("--shape", default=",".join(map(str, LEADERBOARD)), help="batch,seq,d")
    parser.add_argument("--harness", default="triton,triton_fixed,sdpa_cudnn", help="implementations")
    parser.add_argument("--harness-warmup-ms", type=int, default=1000)
    parser.add_argument("--harness-rep-ms", type=int, default=10000)
    parser.add_argument("--workers", type=int, default=min(14, os.cpu_count() or 4))
    args = parser.parse_args(argv)
    tuner = Tuner(args.out, [int(x) for x in args.shape.split(",")], args.workers)
    print(tuner.results["device"], "torch", torch.__version__, flush=True)
    tuner.run([p for p in args.phases.split(",") if p], args)


if __name__ == "__main__":
    main()
