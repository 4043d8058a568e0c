# minimal_ddp_flat_benchmarking: training steps with DDP with one all-reduce over the flattened
# gradients; one job per cell, holding one GPU per NCCL rank.


rule minimal_ddp_flat_benchmarking:
    input:
        cell_code("minimal_ddp_flat_benchmarking"),
    output:
        record(
            "results/minimal_ddp_flat_benchmarking/{cell}.json",
            "minimal_ddp_flat_benchmarking",
        ),
    log:
        "logs/minimal_ddp_flat_benchmarking/{cell}.log",
    benchmark:
        "benchmarks/minimal_ddp_flat_benchmarking/{cell}.tsv"
    conda:
        CONDA_ENV
    threads: distributed_threads("minimal_ddp_flat_benchmarking")
    resources:
        gpu=distributed_gpus("minimal_ddp_flat_benchmarking"),
    params:
        cell=cell_file("minimal_ddp_flat_benchmarking"),
    shell:
        run_cell("minimal_ddp_flat_benchmarking")


REPORT_INPUTS["minimal_ddp_flat_benchmarking"] = result_files(
    "minimal_ddp_flat_benchmarking"
)
