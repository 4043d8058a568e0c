# nsys_profile: each cell profiled under Nsight Systems (torch.profiler where nsys is not
# found), its stats exported to CSV, and the CSV parsed into the per-phase kernel tables the
# report reads. Three rules, each cached on its own: re-parsing never re-profiles.
PROFILE_CODE = code(
    "experiments/nsys_profile.py",
    "experiments/benchmarking.py",
    "model.py",
    "models.py",
    "annotate.py",
    "accounting.py",
    "measure.py",
    "runner.py",
    "profiling.py",
)


rule nsys_profile:
    input:
        PROFILE_CODE,
    output:
        directory("results/nsys_profile/{cell}"),
    params:
        cell=cell_json("nsys_profile"),
    log:
        "logs/nsys_profile/{cell}.log",
    benchmark:
        "benchmarks/nsys_profile/{cell}.tsv"
    threads: TIMED
    resources:
        gpu=GPU,
    shell:
        "{PY} -m cs336report profile nsys_profile --name {wildcards.cell} --cell {params.cell:q} "
        "--out-dir {output} > {log} 2>&1"


rule nsys_stats:
    input:
        profile=rules.nsys_profile.output,
        code=code("profiling.py", "parsers/torchprof.py"),
    output:
        directory("results/nsys_stats/{cell}"),
    log:
        "logs/nsys_stats/{cell}.log",
    benchmark:
        "benchmarks/nsys_stats/{cell}.tsv"
    shell:
        "{PY} -m cs336report nsys-stats {input.profile} --out-dir {output} > {log} 2>&1"


rule nsys_parse:
    input:
        stats=rules.nsys_stats.output,
        profile=rules.nsys_profile.output,
        code=code("parsers/nsys.py", "parsers/kernel_ranges.py", "kernels.py"),
    output:
        "results/nsys_parse/{cell}.json",
    log:
        "logs/nsys_parse/{cell}.log",
    benchmark:
        "benchmarks/nsys_parse/{cell}.tsv"
    shell:
        "{PY} -m cs336report parse-nsys {input.stats}/stats --run {input.profile}/run.json "
        "--name {wildcards.cell} --out {output} > {log} 2>&1"


REPORT_INPUTS["nsys_profile"] = expand("results/nsys_parse/{cell}.json", cell=sorted(CELLS["nsys_profile"]))
