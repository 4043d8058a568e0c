"""The language model a cell runs: the CS336 Transformer LM (model), the choice between it and a
user's own model with its profiler ranges and provenance (build), the check of a user's model
before any cell (check), finding a configured model's objects by name (model_paths), and fp32
master weights with bf16 working copies (master_weights)."""
