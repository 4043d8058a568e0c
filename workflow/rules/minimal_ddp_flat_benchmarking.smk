# minimal_ddp_flat_benchmarking: training steps with DDP with one all-reduce over the flattened
# gradients; one job per cell, holding one GPU per NCCL rank.
rule minimal_ddp_flat_benchmarking:
    input:
        DDP_CODE,
        code("experiments/minimal_ddp_flat_benchmarking.py"),
    output:
        "results/minimal_ddp_flat_benchmarking/{cell}.json",
    params:
        cell=cell_json("minimal_ddp_flat_benchmarking"),
    log:
        "logs/minimal_ddp_flat_benchmarking/{cell}.log",
    benchmark:
        "benchmarks/minimal_ddp_flat_benchmarking/{cell}.tsv"
    resources:
        gpu=distributed_gpus("minimal_ddp_flat_benchmarking"),
    shell:
        RUN_CELL


REPORT_INPUTS["minimal_ddp_flat_benchmarking"] = result_files("minimal_ddp_flat_benchmarking")
