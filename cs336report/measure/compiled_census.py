"""What a ``torch.compile``d model keeps for backward, counted from the graph Inductor would compile.

``torch.compile`` with the default backend hands the captured forward to AOTAutograd, which
traces forward and backward as one joint graph and splits it in two with Inductor's partition
function (Inductor's joint-graph passes, then
``torch._functorch.partitioners.min_cut_rematerialization_partition``): the forward graph returns
the model's outputs followed by the tensors the backward graph reads. The partitioner keeps the
fewest bytes it can, recomputing element-wise work in backward instead of saving its results.

:func:`compiled_saved_tensors` runs that same pipeline (Inductor's decompositions and partition
function) with a backend that stops short of generating kernels: its forward "compiler" records
the forward graph and runs it as it is, once, to see which saved outputs are new storages. That
makes it run in seconds on a CPU, for the formula in :mod:`cs336report.accounting.compiled`.

    saved = compiled_saved_tensors(model, tokens, "bf16")  # [{"name", "shape", "dtype", "bytes", "role"}, ...]
"""

from __future__ import annotations

from contextlib import nullcontext

import torch

ROLES = ("activation", "weight_copy", "input")


def _depends_on(graph: torch.fx.Graph, sources: set) -> set:
    """The nodes of ``graph`` that read, through any chain of nodes, one of ``sources``."""
    out: set = set()
    for node in graph.nodes:  # topological order
        if node in sources or any(a in out for a in node.all_input_nodes):
            out.add(node)
    return out


def compiled_saved_tensors(model: torch.nn.Module, tokens: torch.Tensor, precision: str = "fp32") -> list[dict]:
    """The tensors the compiled forward of ``model`` on ``tokens`` saves for backward, each storage once.

    ``precision``: fp32, or bf16 / fp16 under autocast on the tokens' device. Each item: the graph
    node's name, shape, dtype, ``bytes`` (its storage's; 0 for a view of a storage counted before
    it or of an input) and ``role``: ``input`` (a parameter, buffer or the tokens, or a view of
    one), ``weight_copy`` (computed from the parameters alone, such as a bf16 copy of a weight) or
    ``activation`` (computed from the tokens). The model must return one tensor.
    """
    from torch._dynamo.backends.common import aot_autograd
    from torch._inductor import compile_fx
    from torch._inductor.decomposition import select_decomp_table

    found: list[dict] = []

    def forward_compiler(gm: torch.fx.GraphModule, example_inputs):
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        token_nodes = {n for n in placeholders if not n.meta["val"].is_floating_point()}
        from_tokens = _depends_on(gm.graph, token_nodes)
        outputs = next(n for n in gm.graph.nodes if n.op == "output").args[0]

        def run(*args):
            results = gm(*args)
            if found:  # the first call tells
                return results
            inputs = {a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor)}
            seen: set = set()
            for node, value in zip(outputs[1:], results[1:]):  # the model's one output, then what is saved
                if not isinstance(value, torch.Tensor):
                    continue
                ptr = value.untyped_storage().data_ptr()
                role = "input" if ptr in inputs else "activation" if node in from_tokens else "weight_copy"
                new = role != "input" and ptr not in seen
                seen.add(ptr)
                found.append({"name": node.name, "shape": tuple(value.shape),
                              "dtype": str(value.dtype).removeprefix("torch."), "numel": value.numel(),
                              "bytes": value.untyped_storage().nbytes() if new else 0, "role": role})
            return results

        return run

    backend = aot_autograd(fw_compiler=forward_compiler, bw_compiler=lambda gm, example_inputs: gm,
                           decompositions=select_decomp_table(), partition_fn=compile_fx.partition_fn)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend, dynamic=False)
    autocast = (torch.autocast(tokens.device.type, dtype={"bf16": torch.bfloat16, "fp16": torch.float16}[precision])
                if precision != "fp32" else nullcontext())
    try:
        with autocast:
            compiled(tokens)
    finally:
        torch._dynamo.reset()
    return found
