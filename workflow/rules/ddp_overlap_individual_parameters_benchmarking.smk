# ddp_overlap_individual_parameters_benchmarking: training steps with per-parameter asynchronous
# all-reduce, and the profiled overlap; one job per cell, holding one GPU per NCCL rank.


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
    threads: TIMED
    resources:
        gpu=distributed_gpus("ddp_overlap_individual_parameters_benchmarking"),
    params:
        cell=cell_file("ddp_overlap_individual_parameters_benchmarking"),
    shell:
        run_cell("ddp_overlap_individual_parameters_benchmarking")


REPORT_INPUTS["ddp_overlap_individual_parameters_benchmarking"] = result_files(
    "ddp_overlap_individual_parameters_benchmarking"
)
