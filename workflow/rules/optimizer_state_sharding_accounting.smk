# optimizer_state_sharding_accounting: one job per optimizer, which launches its world_size ranks
# itself (NCCL, one GPU each; Gloo on the CPU) and so declares world_size GPUs. The ranks are fresh
# processes whatever runs the job, so it runs in its own process (--no-worker): a warm worker would
# save nothing and would keep its CUDA cache on the first GPU.


# every cell of the grid runs world_size ranks, so the job needs that many GPUs (none on the CPU grid)
SHARDING_GPUS = GPU * (CFG.grid("optimizer_state_sharding_accounting") or {}).get("world_size", 2)


rule optimizer_state_sharding_accounting:
    input:
        code("experiments/optimizer_state_sharding_accounting.py", "distributed/sharded_optimizer.py",
             "distributed/launch.py", "accounting_distributed.py", "accounting.py", "measure.py", "model.py",
             "models.py", "runner.py"),
    output:
        "results/optimizer_state_sharding_accounting/{cell}.json",
    params:
        cell=cell_json("optimizer_state_sharding_accounting"),
    log:
        "logs/optimizer_state_sharding_accounting/{cell}.log",
    benchmark:
        "benchmarks/optimizer_state_sharding_accounting/{cell}.tsv"
    resources:
        gpu=SHARDING_GPUS,
    shell:
        RUN_CELL.replace("{WORKER_FLAG}", "--no-worker")


REPORT_INPUTS["optimizer_state_sharding_accounting"] = result_files("optimizer_state_sharding_accounting")
