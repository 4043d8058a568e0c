"""Result records: one JSON file per cell, saved atomically and loaded again with its status
(store), where and with what it was measured (provenance), which configured cells have one
(coverage), and Snakemake's timing of the jobs that wrote them (job_timing)."""
