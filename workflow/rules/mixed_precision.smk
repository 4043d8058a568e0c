# mixed_precision_accumulation and benchmarking_mixed_precision: the accumulation loops, the
# dtypes autocast produces, LayerNorm/RMSNorm in low precision, the benchmarking grid under
# bf16 autocast, and peak memory of fp32 against bf16 for both model implementations.
PRECISION_CODE = code("experiments/precision.py", "runner.py")
AUTOCAST_CODE = code(
    "experiments/autocast_benchmarking.py", "experiments/benchmarking.py", "model.py", "models.py", "measure.py", "runner.py"
)


def cell_gpu(experiment):
    """resources function: a GPU for the cells that run on CUDA (a CPU cell needs none)."""

    def gpu(wildcards):
        return int(CELLS[experiment][wildcards.cell]["device"].startswith("cuda"))

    return gpu


rule mixed_precision_accumulation:
    input:
        PRECISION_CODE,
    output:
        "results/mixed_precision_accumulation/{cell}.json",
    params:
        cell=cell_json("mixed_precision_accumulation"),
    log:
        "logs/mixed_precision_accumulation/{cell}.log",
    threads: TIMED
    resources:
        gpu=cell_gpu("mixed_precision_accumulation"),
    shell:
        RUN_CELL


rule autocast_dtypes:
    input:
        PRECISION_CODE,
    output:
        "results/autocast_dtypes/{cell}.json",
    params:
        cell=cell_json("autocast_dtypes"),
    log:
        "logs/autocast_dtypes/{cell}.log",
    threads: TIMED
    resources:
        gpu=cell_gpu("autocast_dtypes"),
    shell:
        RUN_CELL


rule norm_sensitivity:
    input:
        PRECISION_CODE,
    output:
        "results/norm_sensitivity/{cell}.json",
    params:
        cell=cell_json("norm_sensitivity"),
    log:
        "logs/norm_sensitivity/{cell}.log",
    threads: TIMED
    resources:
        gpu=cell_gpu("norm_sensitivity"),
    shell:
        RUN_CELL


# Cells of these two are timed by benchmarking's own code, so they depend on it, not on the
# module that lists them (a changed cell reruns through its params).
rule benchmarking_bf16:
    input:
        BENCH_CODE + code("experiments/autocast_benchmarking.py"),
    output:
        "results/benchmarking_bf16/{cell}.json",
    params:
        cell=cell_json("benchmarking_bf16"),
    log:
        "logs/benchmarking_bf16/{cell}.log",
    benchmark:
        "benchmarks/benchmarking_bf16/{cell}.tsv"
    threads: TIMED
    resources:
        gpu=GPU,
    shell:
        RUN_CELL


rule autocast_memory:
    input:
        BENCH_CODE + code("experiments/autocast_benchmarking.py"),
    output:
        "results/autocast_memory/{cell}.json",
    params:
        cell=cell_json("autocast_memory"),
    log:
        "logs/autocast_memory/{cell}.log",
    benchmark:
        "benchmarks/autocast_memory/{cell}.tsv"
    threads: TIMED
    resources:
        gpu=GPU,
    shell:
        RUN_CELL


rule autocast_saved_tensors:
    input:
        AUTOCAST_CODE,
    output:
        "results/autocast_saved_tensors/{cell}.json",
    params:
        cell=cell_json("autocast_saved_tensors"),
    log:
        "logs/autocast_saved_tensors/{cell}.log",
    threads: TIMED
    resources:
        gpu=GPU,
    shell:
        RUN_CELL


REPORT_INPUTS["mixed_precision_accumulation"] = result_files("mixed_precision_accumulation")
REPORT_INPUTS["benchmarking_mixed_precision"] = (
    result_files("autocast_dtypes")
    + result_files("norm_sensitivity")
    + result_files("benchmarking")
    + result_files("benchmarking_bf16")
    + result_files("autocast_memory")
    + result_files("autocast_saved_tensors")
)
