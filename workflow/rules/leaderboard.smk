# leaderboard (2026): the leaderboard model's training step on two GPUs with our FSDP; one job per
# cell, holding one GPU per NCCL rank; on a host of fewer GPUs its record says not run.


rule leaderboard:
    input:
        cell_code("leaderboard"),
    output:
        record("results/leaderboard/{cell}.json", "leaderboard"),
    log:
        "logs/leaderboard/{cell}.log",
    benchmark:
        "benchmarks/leaderboard/{cell}.tsv"
    conda:
        CONDA_ENV
    threads: distributed_threads("leaderboard")
    resources:
        gpu=distributed_gpus("leaderboard"),
    params:
        cell=cell_file("leaderboard"),
    shell:
        run_cell("leaderboard")


REPORT_INPUTS["leaderboard"] = result_files("leaderboard")
