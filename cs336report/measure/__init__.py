"""Measuring a step with torch: its time and memory (timing), the GPU time of its kernels
(kernel_times), torch.compile and its compile cost (compiling), a step captured as one CUDA graph
(step_graph), the named ranges profilers show (annotate), and what a compiled model saves for
backward (compiled_census)."""
