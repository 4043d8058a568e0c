# naive_ddp_benchmarking: training steps with naive DDP (one all-reduce per gradient after
# backward); one job per cell, holding one GPU per NCCL rank.


rule naive_ddp_benchmarking:
    input:
        cell_code("naive_ddp_benchmarking"),
    output:
        record("results/naive_ddp_benchmarking/{cell}.json", "naive_ddp_benchmarking"),
    log:
        "logs/naive_ddp_benchmarking/{cell}.log",
    benchmark:
        "benchmarks/naive_ddp_benchmarking/{cell}.tsv"
    conda:
        CONDA_ENV
    threads: distributed_threads("naive_ddp_benchmarking")
    resources:
        gpu=distributed_gpus("naive_ddp_benchmarking"),
    params:
        cell=cell_file("naive_ddp_benchmarking"),
    shell:
        run_cell("naive_ddp_benchmarking")


REPORT_INPUTS["naive_ddp_benchmarking"] = result_files("naive_ddp_benchmarking")
