# distributed_communication_single_node: all-reduce latency and bandwidth, one job per backend x
# world size; the job starts its processes itself and holds one GPU per NCCL rank.
rule distributed_communication_single_node:
    input:
        code(
            "experiments/distributed_communication_single_node.py",
            "distributed/launch.py",
            "distributed/link.py",
            "measure.py",
            "runner.py",
        ),
    output:
        "results/distributed_communication_single_node/{cell}.json",
    params:
        cell=cell_json("distributed_communication_single_node"),
    log:
        "logs/distributed_communication_single_node/{cell}.log",
    benchmark:
        "benchmarks/distributed_communication_single_node/{cell}.tsv"
    resources:
        gpu=distributed_gpus("distributed_communication_single_node"),
    shell:
        RUN_CELL


REPORT_INPUTS["distributed_communication_single_node"] = result_files("distributed_communication_single_node")
