# fsdp_accounting (2026): (a) bytes per rank of parameters, gradients and AdamW state without
# sharding, with optimizer state sharding and with FSDP (computed, no GPU). (b) FSDP steps on two
# NCCL ranks under nsys, the trace exported by nsys stats and each rank's last forward pass parsed
# into its all-gathers against compute; one job per cell, holding one GPU per rank (not run on a
# host of fewer). None for 2025.


rule fsdp_accounting:
    input:
        cell_code("fsdp_accounting"),
    output:
        record("results/fsdp_accounting/{cell}.json", "fsdp_accounting"),
    log:
        "logs/fsdp_accounting/{cell}.log",
    conda:
        CONDA_ENV
    resources:
        gpu=0,
    params:
        cell=cell_file("fsdp_accounting"),
    shell:
        run_cell("fsdp_accounting")


rule fsdp_accounting_profile:
    input:
        cell_code("fsdp_accounting_profile", entry="run.profiling"),
    output:
        directory("results/fsdp_accounting_profile/{cell}"),
    log:
        "logs/fsdp_accounting_profile/{cell}.log",
    benchmark:
        "benchmarks/fsdp_accounting_profile/{cell}.tsv"
    conda:
        CONDA_ENV
    threads: distributed_threads("fsdp_accounting_profile")
    resources:
        gpu=distributed_gpus("fsdp_accounting_profile"),
    params:
        cell=cell_file("fsdp_accounting_profile"),
    shell:
        '"$CS336REPORT_PYTHON" -m cs336report profile fsdp_accounting_profile --name {wildcards.cell} '
        "--cell @{params.cell} --out-dir {output} --gpus {resources.gpu} > {log} 2>&1"


rule fsdp_accounting_stats:
    input:
        profile=rules.fsdp_accounting_profile.output,
        code=code("run.profiling"),
    output:
        directory("results/fsdp_accounting_stats/{cell}"),
    log:
        "logs/fsdp_accounting_stats/{cell}.log",
    benchmark:
        "benchmarks/fsdp_accounting_stats/{cell}.tsv"
    conda:
        CONDA_ENV
    shell:
        '"$CS336REPORT_PYTHON" -m cs336report nsys-stats {input.profile} --out-dir {output} '
        "--reports cuda_gpu_trace,nvtx_gpu_proj_trace > {log} 2>&1"


rule fsdp_accounting_parse:
    input:
        stats=rules.fsdp_accounting_stats.output,
        profile=rules.fsdp_accounting_profile.output,
        code=code("steps.fsdp_forward"),
    output:
        record("results/fsdp_accounting_parse/{cell}.json", "fsdp_accounting"),
    log:
        "logs/fsdp_accounting_parse/{cell}.log",
    benchmark:
        "benchmarks/fsdp_accounting_parse/{cell}.tsv"
    conda:
        CONDA_ENV
    shell:
        '"$CS336REPORT_PYTHON" -m cs336report parse-fsdp-forward {input.stats} --run {input.profile}/run.json '
        "--out {output} > {log} 2>&1"


REPORT_INPUTS["fsdp_accounting"] = result_files("fsdp_accounting") + expand(
    "results/fsdp_accounting_parse/{cell}.json",
    cell=sorted(CELLS["fsdp_accounting_profile"]),
)
