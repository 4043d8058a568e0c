# flash_benchmarking: FlashAttention-2 (Triton) against PyTorch attention and SDPA backends,
# one job per implementation and dtype, and the leaderboard harness in one job.
FLASH_CODE = code(
    "experiments/flash_benchmarking.py",
    "flash/__init__.py",
    "flash/pytorch.py",
    "flash/reference.py",
    "flash/triton_kernels.py",
    "model.py",
    "measure.py",
    "kernel_times.py",
    "runner.py",
)
LEADERBOARD_CODE = FLASH_CODE + code("experiments/flash_leaderboard.py")


rule flash_benchmarking:
    input:
        FLASH_CODE,
    output:
        "results/flash_benchmarking/{cell}.json",
    params:
        cell=cell_json("flash_benchmarking"),
    log:
        "logs/flash_benchmarking/{cell}.log",
    benchmark:
        "benchmarks/flash_benchmarking/{cell}.tsv"
    threads: TIMED
    resources:
        gpu=GPU,
    shell:
        RUN_CELL


rule flash_leaderboard:
    input:
        LEADERBOARD_CODE,
    output:
        "results/flash_leaderboard/{cell}.json",
    params:
        cell=cell_json("flash_leaderboard"),
    log:
        "logs/flash_leaderboard/{cell}.log",
    benchmark:
        "benchmarks/flash_leaderboard/{cell}.tsv"
    threads: TIMED
    resources:
        gpu=GPU,
    shell:
        RUN_CELL


REPORT_INPUTS["flash_benchmarking"] = result_files("flash_benchmarking") + result_files("flash_leaderboard")
