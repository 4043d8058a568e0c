"""The machine a job runs on: its GPU slots and cores, who else used it while a cell was timed,
scratch folders, one clock for several processes, the progress lines of a job's log, one
bytecode cache for a run's processes, and whether torch finds a CUDA device here, asked without
importing torch. Nothing here imports another room of the package."""
