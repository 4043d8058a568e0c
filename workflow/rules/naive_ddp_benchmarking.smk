# naive_ddp_benchmarking: training steps with naive DDP (one all-reduce per gradient after
# backward); one job per cell, holding one GPU per NCCL rank.
# The code every DDP benchmark runs (the experiment modules themselves are one line of it each).
DDP_CODE = code(
    "distributed/train.py",
    "distributed/ddp.py",
    "distributed/launch.py",
    "distributed/link.py",
    "experiments/benchmarking.py",
    "model.py",
    "models.py",
    "measure.py",
    "runner.py",
)


rule naive_ddp_benchmarking:
    input:
        DDP_CODE,
        code("experiments/naive_ddp_benchmarking.py"),
    output:
        "results/naive_ddp_benchmarking/{cell}.json",
    params:
        cell=cell_json("naive_ddp_benchmarking"),
    log:
        "logs/naive_ddp_benchmarking/{cell}.log",
    benchmark:
        "benchmarks/naive_ddp_benchmarking/{cell}.tsv"
    resources:
        gpu=distributed_gpus("naive_ddp_benchmarking"),
    shell:
        RUN_CELL


REPORT_INPUTS["naive_ddp_benchmarking"] = result_files("naive_ddp_benchmarking")
