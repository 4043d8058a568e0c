"""Names that several rooms share, without torch: the handout's problems, the shape of a model size,
and the names of the cells and implementations that the experiments, the parse steps and the report
all use (the report and the parse steps read them here, never in an experiment module)."""
