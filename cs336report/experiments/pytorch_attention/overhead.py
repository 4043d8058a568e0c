"""compiled_attention_overhead: where the host time of an eager and a compiled attention call goes.

One cell is one (d_head, seq) of the naive attention, run in one process eagerly and under
``torch.compile`` (:func:`cs336report.experiments.pytorch_attention.timing.attention_function`,
the functions compiled_attention times), on the same random Q, K and V. For each of the two and each
of two calls -- the forward alone, and forward then backward -- it keeps:

* ``times_s``: ``warmup`` untimed and ``calls`` timed calls, each synchronized at its end
  (:func:`cs336report.measure.timing.time_steps`: wall, host (issue) and, on CUDA, event time per call);
* ``profiled``: ``profiled_calls`` more calls, each under torch.profiler on its own
  (:func:`cs336report.measure.call_overhead.profile_calls`): per call, its host time, TorchDynamo's
  guard check and cache lookup, AOTAutograd's compiled function and Inductor's graph call, the
  kernel launches and their API time, and the GPU kernels' own time; and the event names matched.

The compiled function's first call (forward and backward, which compiles both) runs before its
timed calls and is kept under ``compile``. The record answers why compiled attention is slower than
eager at short sequences: a call whose kernels take less time than the host takes to issue them is
timed by its host cost, and the compiled call adds guards and wrappers to it.

    python -m cs336report run compiled_attention_overhead --name overhead-fp32-d64-s256 --cell '{...}' --out r.json
"""

from __future__ import annotations

import torch

from ...measure.call_overhead import profile_calls, searched
from ...measure.compiling import first_call
from ...measure.timing import synchronize, time_steps
from .timing import DTYPES, attention_function

MODES = ("forward", "forward_backward")
IMPLEMENTATIONS = ("eager", "compiled")  # the cell's two functions: the naive attention, and it compiled


def run(cell: dict) -> dict:
    """Measure one cell; returns the ``data`` of its result record."""
    device, dtype = cell["device"], DTYPES[cell["dtype"]]
    B, T, d = cell["batch_size"], cell["seq"], cell["d_head"]
    torch.backends.cuda.matmul.allow_tf32 = cell.get("tf32", False)
    torch.manual_seed(cell["seed"])
    Q, K, V = (torch.randn(B, T, d, device=device, dtype=dtype, requires_grad=True) for _ in range(3))  # (B, T, d)
    grad_out = torch.randn(B, T, d, device=device, dtype=dtype)  # upstream gradient dO, (B, T, d)
    functions = {"eager": attention_function({**cell, "implementation": "naive"}),
                 "compiled": attention_function({**cell, "implementation": "compiled"})}
    synchronize(device)
    data: dict = {"calls": {}, "events": searched(), "flops_forward": 4 * B * T * T * d}
    for impl in IMPLEMENTATIONS:
        fn = functions[impl]

        def forward() -> None:
            fn(Q, K, V)  # the output and its graph are freed on return

        def forward_backward() -> None:
            fn(Q, K, V).backward(grad_out)
            Q.grad = K.grad = V.grad = None

        if impl == "compiled":
            data["compile"] = first_call(forward_backward, device)
        data["calls"][impl] = {}
        for mode, step in zip(MODES, (forward, forward_backward)):
            times = time_steps(step, cell["warmup"], cell["calls"], device)
            profiled = profile_calls(step, cell["profiled_calls"], device)
            data["calls"][impl][mode] = {"times_s": times, "profiled": profiled["calls"],
                                         "event_names": profiled["event_names"]}
    return data
