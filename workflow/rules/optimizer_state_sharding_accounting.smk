# optimizer_state_sharding_accounting: one job per optimizer, which launches its world_size ranks
# itself (NCCL, one GPU each; Gloo on the CPU) and so declares world_size GPUs (at most the run's gpu limit). The ranks are fresh
# processes whatever runs the job, so it runs in its own process (--no-worker): a warm worker would
# save nothing and would keep its CUDA cache on the first GPU.


rule optimizer_state_sharding_accounting:
    input:
        cell_code("optimizer_state_sharding_accounting"),
    output:
        record(
            "results/optimizer_state_sharding_accounting/{cell}.json",
            "optimizer_state_sharding_accounting",
        ),
    log:
        "logs/optimizer_state_sharding_accounting/{cell}.log",
    benchmark:
        "benchmarks/optimizer_state_sharding_accounting/{cell}.tsv"
    conda:
        CONDA_ENV
    threads: distributed_threads("optimizer_state_sharding_accounting")
    resources:
        gpu=distributed_gpus("optimizer_state_sharding_accounting"),
    params:
        cell=cell_file("optimizer_state_sharding_accounting"),
    shell:
        run_cell("optimizer_state_sharding_accounting", worker=False)


REPORT_INPUTS["optimizer_state_sharding_accounting"] = result_files(
    "optimizer_state_sharding_accounting"
)
