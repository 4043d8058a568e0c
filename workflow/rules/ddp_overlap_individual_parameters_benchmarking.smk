# ddp_overlap_individual_parameters_benchmarking: training steps with per-parameter asynchronous
# all-reduce, and the profiled overlap; one job per cell, holding one GPU per NCCL rank.
rule ddp_overlap_individual_parameters_benchmarking:
    input:
        DDP_CODE,
        code("experiments/ddp_overlap_individual_parameters_benchmarking.py"),
    output:
        "results/ddp_overlap_individual_parameters_benchmarking/{cell}.json",
    params:
        cell=cell_json("ddp_overlap_individual_parameters_benchmarking"),
    log:
        "logs/ddp_overlap_individual_parameters_benchmarking/{cell}.log",
    benchmark:
        "benchmarks/ddp_overlap_individual_parameters_benchmarking/{cell}.tsv"
    resources:
        gpu=distributed_gpus("ddp_overlap_individual_parameters_benchmarking"),
    shell:
        RUN_CELL


REPORT_INPUTS["ddp_overlap_individual_parameters_benchmarking"] = result_files("ddp_overlap_individual_parameters_benchmarking")
