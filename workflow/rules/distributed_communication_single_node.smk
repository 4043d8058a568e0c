# distributed_communication_single_node: all-reduce latency and bandwidth, one job per backend x
# world size; the job starts its processes itself and holds one GPU per NCCL rank.


rule distributed_communication_single_node:
    input:
        cell_code("distributed_communication_single_node"),
    output:
        record(
            "results/distributed_communication_single_node/{cell}.json",
            "distributed_communication_single_node",
        ),
    log:
        "logs/distributed_communication_single_node/{cell}.log",
    benchmark:
        "benchmarks/distributed_communication_single_node/{cell}.tsv"
    conda:
        CONDA_ENV
    threads: distributed_threads("distributed_communication_single_node")
    resources:
        gpu=distributed_gpus("distributed_communication_single_node"),
    params:
        cell=cell_file("distributed_communication_single_node"),
    shell:
        run_cell("distributed_communication_single_node")


REPORT_INPUTS["distributed_communication_single_node"] = result_files(
    "distributed_communication_single_node"
)
