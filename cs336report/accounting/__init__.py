"""Analytic counts and the formulas the report applies to records, without torch: a Transformer's
parameters, FLOPs and memory (transformer, compiled, peak), the handout's distributed accounting
(distributed), and for the distributed problems the overlap of communication with compute
(overlap), the bucketed DDP overhead model (bucket_model) and the interconnect's figures read from
nvidia-smi's text (interconnect)."""
