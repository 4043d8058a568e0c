"""Snakemake's timing of the jobs that wrote the records: the ``benchmark:`` file of each job
(``benchmarks/<rule>/<cell or job>.tsv``), summed over a chain of jobs, for the cost appendix and
for publishing a run (which keeps it in each record).

    benchmark_of("results/nsys_parse/small-ctx128-forward.json", job="small-nsys")  # {"wall_s": ..., ...}
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .store import result_stem

BENCHMARK_COLUMNS = {"s": "wall_s", "max_rss": "max_rss_mib", "cpu_time": "cpu_time_s"}

# A result written by the last job of a chain costs the whole chain: the nsys_parse record stands
# for the profiled run, its stats export and the parse.
JOB_CHAINS = {"nsys_parse": ("nsys_profile", "nsys_stats", "nsys_parse"),
              "ddp_overlap_parse": ("ddp_overlap_profile", "ddp_overlap_stats", "ddp_overlap_parse")}


def _benchmark_row(tsv: Path) -> dict:
    row = pd.read_csv(tsv, sep="\t").iloc[-1]
    return {new: float(row[old]) for old, new in BENCHMARK_COLUMNS.items() if old in row and row[old] != "-"}


def job_of(record: dict) -> str | None:
    """The name of the job of several cells that wrote ``record``, if one did (see :func:`cs336report.run.runner.run_job`)."""
    return (record.get("job") or {}).get("name")


def benchmark_of(result_path: str | Path, root: str | Path = "benchmarks", job: str | None = None) -> dict | None:
    """Snakemake's ``benchmark:`` measurement of the job(s) that wrote ``results/<rule>/<cell>.json``:
    wall and CPU time summed over a chain of jobs, the largest resident memory of them. A result
    written by a job of several cells (its record's ``job``) has the job's measurement, named
    after ``job``; every cell of that job gets the same one. In a chain whose first job ran several
    cells (nsys_profile's job of one size's contexts), that job's wall time is also given apart
    (``job_wall_s``), and the later jobs of the chain are the cell's own."""
    path = Path(result_path)
    chain = JOB_CHAINS.get(path.parent.name)
    if chain and job:  # the chain's first job ran the cells of ``job``; the later ones are the cell's own
        stems = [job] + [result_stem(path)] * (len(chain) - 1)
    else:
        chain, stems = chain or (path.parent.name,), [job or result_stem(path)] * len(chain or (path.parent.name,))
    rows = [(i, _benchmark_row(tsv)) for i, (rule, stem) in enumerate(zip(chain, stems))
            if (tsv := Path(root) / rule / f"{stem}.tsv").exists()]
    if not rows:
        return None
    out: dict = {}
    for _, row in rows:
        for key, value in row.items():
            out[key] = max(out.get(key, value), value) if key == "max_rss_mib" else out.get(key, 0.0) + value
    if len(rows) > 1:
        out["jobs"] = len(rows)
    if job and len(chain) > 1 and rows[0][0] == 0:  # the job's share, which its cells count once
        out["job_wall_s"] = rows[0][1].get("wall_s", 0.0)
    return out
