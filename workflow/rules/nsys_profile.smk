# nsys_profile: each cell profiled under Nsight Systems (torch.profiler where nsys is not
# found), its stats exported to CSV, and the CSV parsed into the per-phase kernel tables the
# report reads. Three rules, each cached on its own: re-parsing never re-profiles. The contexts of
# one size run as one job, in one process, a capture range and a report each
# (cs336report.run.profiling.profile_job): results/nsys_profile/{job}/{cell}/.
import re

from cs336report.experiments import nsys_profile as nsys_profile_experiment

NSYS_JOBS = nsys_profile_experiment.profile_jobs(CELLS["nsys_profile"])
NSYS_JOB_OF = {cell: job for job, cells in NSYS_JOBS.items() for cell in cells}


rule nsys_profile:
    input:
        cell_code("nsys_profile", entry="run.profiling"),
    output:
        directory("results/nsys_profile/{job}"),
    log:
        "logs/nsys_profile/{job}.log",
    benchmark:
        "benchmarks/nsys_profile/{job}.tsv"
    wildcard_constraints:
        job="|".join(re.escape(job) for job in NSYS_JOBS) or "(?!)",
    conda:
        CONDA_ENV
    threads: TIMED
    resources:
        gpu=GPU,
    params:
        cells=nsys_job_cells,
    shell:
        '"$CS336REPORT_PYTHON" -m cs336report profile-job nsys_profile --job {wildcards.job} --cells @{params.cells} '
        "--out-dir {output} --gpus {resources.gpu} > {log} 2>&1"


rule nsys_stats:
    input:
        profile=nsys_job_dir,
        code=code("run.profiling"),
    output:
        directory("results/nsys_stats/{cell}"),
    log:
        "logs/nsys_stats/{cell}.log",
    benchmark:
        "benchmarks/nsys_stats/{cell}.tsv"
    conda:
        CONDA_ENV
    params:
        profile=nsys_profile_dir,
    shell:
        '"$CS336REPORT_PYTHON" -m cs336report nsys-stats {params.profile} --out-dir {output} > {log} 2>&1'


rule nsys_parse:
    input:
        stats=rules.nsys_stats.output,
        profile=nsys_job_dir,
        code=code("steps.nsys_step"),
    output:
        record("results/nsys_parse/{cell}.json", "nsys_profile"),
    log:
        "logs/nsys_parse/{cell}.log",
    benchmark:
        "benchmarks/nsys_parse/{cell}.tsv"
    conda:
        CONDA_ENV
    params:
        profile=nsys_profile_dir,
    shell:
        '"$CS336REPORT_PYTHON" -m cs336report parse-nsys {input.stats}/stats --run {params.profile}/run.json '
        "--name {wildcards.cell} --out {output} > {log} 2>&1"


REPORT_INPUTS["nsys_profile"] = expand(
    "results/nsys_parse/{cell}.json", cell=sorted(CELLS["nsys_profile"])
)
