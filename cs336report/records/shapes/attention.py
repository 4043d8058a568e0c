"""The shapes of the attention experiments: an attention layer timed forward and backward with
its memory (:class:`Attention`: pytorch_attention, compiled_attention) and the naive attention's
calls eager and compiled, profiled one by one (:class:`CallOverhead`:
compiled_attention_overhead)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Attention:
    """An attention layer timed forward and backward, with its memory (pytorch_attention, compiled_attention)."""

    backward_s: dict
    backward_stats_s: dict
    flops_forward: int
    forward_s: dict
    forward_stats_s: dict
    matrix_bytes: int
    saved_activation_bytes: int
    saved_input_bytes: int
    saved_tensors: int
    activation_bytes_before_backward: int | None = None
    attention_saved_matrices: int | None = None
    backward_graph: str | None = None
    compile: dict | None = None
    forward_peak: dict | None = None
    memory_after_inputs_bytes: int | None = None
    memory_baseline_bytes: int | None = None
    memory_before_backward_bytes: int | None = None
    memory_before_forward_bytes: int | None = None
    oom_phase: str | None = None
    peak: dict | None = None


@dataclass(frozen=True, kw_only=True)
class CallOverhead:
    """compiled_attention_overhead: the naive attention's calls eager and compiled, in one process.

    ``calls[implementation][mode]`` (implementation ``eager`` or ``compiled``, mode ``forward`` or
    ``forward_backward``) holds ``times_s`` (time_steps' raw samples: ``measured_s``, ``issue_s``,
    ``gpu_s`` on CUDA), ``profiled`` (one dict per profiled call: ``host_s``, ``wall_s``,
    ``cache_lookup_s``, ``compiled_region_s``, ``compiled_function_s``, ``compiled_backward_s``,
    ``inductor_call_s``, ``launches``, ``launch_api_s``, ``kernels``, ``kernels_s``, each None where
    the profile held no such event) and ``event_names`` (the profiler's names each quantity matched);
    ``events`` the names searched."""

    calls: dict
    events: dict
    flops_forward: int
    compile: dict | None = None
