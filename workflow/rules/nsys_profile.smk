# nsys_profile: each cell profiled under Nsight Systems (torch.profiler where nsys is not
# found), its stats exported to CSV, and the CSV parsed into the per-phase kernel tables the
# report reads. Three rules, each cached on its own: re-parsing never re-profiles.


rule nsys_profile:
    input:
        cell_code("nsys_profile", entry="profiling"),
    output:
        directory("results/nsys_profile/{cell}"),
    log:
        "logs/nsys_profile/{cell}.log",
    benchmark:
        "benchmarks/nsys_profile/{cell}.tsv"
    conda:
        CONDA_ENV
    threads: TIMED
    resources:
        gpu=GPU,
    params:
        cell=cell_file("nsys_profile"),
    shell:
        '"$CS336REPORT_PYTHON" -m cs336report profile nsys_profile --name {wildcards.cell} --cell @{params.cell} '
        "--out-dir {output} --gpus {resources.gpu} > {log} 2>&1"


rule nsys_stats:
    input:
        profile=rules.nsys_profile.output,
        code=code("profiling"),
    output:
        directory("results/nsys_stats/{cell}"),
    log:
        "logs/nsys_stats/{cell}.log",
    benchmark:
        "benchmarks/nsys_stats/{cell}.tsv"
    conda:
        CONDA_ENV
    shell:
        '"$CS336REPORT_PYTHON" -m cs336report nsys-stats {input.profile} --out-dir {output} > {log} 2>&1'


rule nsys_parse:
    input:
        stats=rules.nsys_stats.output,
        profile=rules.nsys_profile.output,
        code=code("nsys_step"),
    output:
        record("results/nsys_parse/{cell}.json", "nsys_profile"),
    log:
        "logs/nsys_parse/{cell}.log",
    benchmark:
        "benchmarks/nsys_parse/{cell}.tsv"
    conda:
        CONDA_ENV
    shell:
        '"$CS336REPORT_PYTHON" -m cs336report parse-nsys {input.stats}/stats --run {input.profile}/run.json '
        "--name {wildcards.cell} --out {output} > {log} 2>&1"


REPORT_INPUTS["nsys_profile"] = expand(
    "results/nsys_parse/{cell}.json", cell=sorted(CELLS["nsys_profile"])
)
