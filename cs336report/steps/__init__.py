"""The steps after a cell's run: the parse steps that turn a profiler's files into a record
(nsys_step, snapshot_step, ddp_timeline) and publishing a run's records (publish)."""
