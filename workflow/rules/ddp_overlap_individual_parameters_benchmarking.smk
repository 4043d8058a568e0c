# ddp_overlap_individual_parameters_benchmarking: training steps with per-parameter asynchronous
# all-reduce, timed; then the overlap evidence: a few steps of each profiled variant under nsys,
# the trace exported by nsys stats and parsed into each rank's kernels per stream. One job per
# cell, holding one GPU per NCCL rank.


rule ddp_overlap_individual_parameters_benchmarking:
    input:
        cell_code("ddp_overlap_individual_parameters_benchmarking"),
    output:
        record(
            "results/ddp_overlap_individual_parameters_benchmarking/{cell}.json",
            "ddp_overlap_individual_parameters_benchmarking",
        ),
    log:
        "logs/ddp_overlap_individual_parameters_benchmarking/{cell}.log",
    benchmark:
        "benchmarks/ddp_overlap_individual_parameters_benchmarking/{cell}.tsv"
    conda:
        CONDA_ENV
    threads: distributed_threads("ddp_overlap_individual_parameters_benchmarking")
    resources:
        gpu=distributed_gpus("ddp_overlap_individual_parameters_benchmarking"),
    params:
        cell=cell_file("ddp_overlap_individual_parameters_benchmarking"),
    shell:
        run_cell("ddp_overlap_individual_parameters_benchmarking")


rule ddp_overlap_profile:
    input:
        cell_code("ddp_overlap_profile", entry="run.profiling"),
    output:
        directory("results/ddp_overlap_profile/{cell}"),
    log:
        "logs/ddp_overlap_profile/{cell}.log",
    benchmark:
        "benchmarks/ddp_overlap_profile/{cell}.tsv"
    conda:
        CONDA_ENV
    threads: distributed_threads("ddp_overlap_profile")
    resources:
        gpu=distributed_gpus("ddp_overlap_profile"),
    params:
        cell=cell_file("ddp_overlap_profile"),
    shell:
        '"$CS336REPORT_PYTHON" -m cs336report profile ddp_overlap_profile --name {wildcards.cell} '
        "--cell @{params.cell} --out-dir {output} --gpus {resources.gpu} > {log} 2>&1"


rule ddp_overlap_stats:
    input:
        profile=rules.ddp_overlap_profile.output,
        code=code("run.profiling"),
    output:
        directory("results/ddp_overlap_stats/{cell}"),
    log:
        "logs/ddp_overlap_stats/{cell}.log",
    benchmark:
        "benchmarks/ddp_overlap_stats/{cell}.tsv"
    conda:
        CONDA_ENV
    shell:
        '"$CS336REPORT_PYTHON" -m cs336report nsys-stats {input.profile} --out-dir {output} '
        "--reports cuda_gpu_trace,nvtx_gpu_proj_trace > {log} 2>&1"


rule ddp_overlap_parse:
    input:
        stats=rules.ddp_overlap_stats.output,
        profile=rules.ddp_overlap_profile.output,
        code=code("steps.ddp_timeline"),
    output:
        record(
            "results/ddp_overlap_parse/{cell}.json",
            "ddp_overlap_individual_parameters_benchmarking",
        ),
    log:
        "logs/ddp_overlap_parse/{cell}.log",
    benchmark:
        "benchmarks/ddp_overlap_parse/{cell}.tsv"
    conda:
        CONDA_ENV
    shell:
        '"$CS336REPORT_PYTHON" -m cs336report parse-ddp-timeline {input.stats} --run {input.profile}/run.json '
        "--out {output} > {log} 2>&1"


REPORT_INPUTS["ddp_overlap_individual_parameters_benchmarking"] = result_files(
    "ddp_overlap_individual_parameters_benchmarking"
) + expand(
    "results/ddp_overlap_parse/{cell}.json", cell=sorted(CELLS["ddp_overlap_profile"])
)
