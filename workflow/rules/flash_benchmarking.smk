# flash_benchmarking: FlashAttention-2 (Triton) against PyTorch attention and SDPA backends,
# one job per implementation and dtype, and the leaderboard harness in one job.


rule flash_benchmarking:
    input:
        cell_code("flash_benchmarking"),
    output:
        record("results/flash_benchmarking/{cell}.json", "flash_benchmarking"),
    log:
        "logs/flash_benchmarking/{cell}.log",
    benchmark:
        "benchmarks/flash_benchmarking/{cell}.tsv"
    priority: LONG_JOBS_FIRST["flash_benchmarking"]
    conda:
        CONDA_ENV
    threads: TIMED
    resources:
        gpu=GPU,
    params:
        cell=cell_file("flash_benchmarking"),
        triton=TRITON,
    shell:
        run_cell("flash_benchmarking")


rule flash_leaderboard:
    input:
        cell_code("flash_leaderboard"),
    output:
        record("results/flash_leaderboard/{cell}.json", "flash_benchmarking"),
    log:
        "logs/flash_leaderboard/{cell}.log",
    benchmark:
        "benchmarks/flash_leaderboard/{cell}.tsv"
    priority: LONG_JOBS_FIRST["flash_leaderboard"]
    conda:
        CONDA_ENV
    threads: TIMED
    resources:
        gpu=GPU,
    params:
        cell=cell_file("flash_leaderboard"),
        triton=TRITON,
    shell:
        run_cell("flash_leaderboard")


REPORT_INPUTS["flash_benchmarking"] = result_files("flash_benchmarking") + result_files(
    "flash_leaderboard"
)
