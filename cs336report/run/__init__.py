"""Running a cell: the runner that measures one cell and writes its record whatever happens
(runner), the warm worker that runs many in one process and its client (worker, worker_client),
the profiled runs of nsys_profile and ddp_overlap_profile (profiling), and the source files a
rule's cells depend on (codeinputs)."""
