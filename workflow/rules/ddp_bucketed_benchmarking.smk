# ddp_bucketed_benchmarking: training steps with bucketed DDP at each bucket size, and PyTorch's
# DDP as reference; one job per cell, holding one GPU per NCCL rank.
rule ddp_bucketed_benchmarking:
    input:
        DDP_CODE,
        code("experiments/ddp_bucketed_benchmarking.py"),
    output:
        "results/ddp_bucketed_benchmarking/{cell}.json",
    params:
        cell=cell_json("ddp_bucketed_benchmarking"),
    log:
        "logs/ddp_bucketed_benchmarking/{cell}.log",
    benchmark:
        "benchmarks/ddp_bucketed_benchmarking/{cell}.tsv"
    resources:
        gpu=distributed_gpus("ddp_bucketed_benchmarking"),
    shell:
        RUN_CELL


REPORT_INPUTS["ddp_bucketed_benchmarking"] = result_files("ddp_bucketed_benchmarking")
