# ddp_bucketed_benchmarking: training steps with bucketed DDP at each bucket size, and PyTorch's
# DDP as reference; one job per cell, holding one GPU per NCCL rank.


rule ddp_bucketed_benchmarking:
    input:
        cell_code("ddp_bucketed_benchmarking"),
    output:
        record(
            "results/ddp_bucketed_benchmarking/{cell}.json",
            "ddp_bucketed_benchmarking",
        ),
    log:
        "logs/ddp_bucketed_benchmarking/{cell}.log",
    benchmark:
        "benchmarks/ddp_bucketed_benchmarking/{cell}.tsv"
    conda:
        CONDA_ENV
    threads: distributed_threads("ddp_bucketed_benchmarking")
    resources:
        gpu=distributed_gpus("ddp_bucketed_benchmarking"),
    params:
        cell=cell_file("ddp_bucketed_benchmarking"),
    shell:
        run_cell("ddp_bucketed_benchmarking")


REPORT_INPUTS["ddp_bucketed_benchmarking"] = result_files("ddp_bucketed_benchmarking")
