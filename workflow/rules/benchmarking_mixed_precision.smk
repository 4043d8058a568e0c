# benchmarking_mixed_precision: the dtypes autocast produces, LayerNorm/RMSNorm in low precision,
# the benchmarking grid under bf16 autocast, fp32 and bf16 timed side by side in one process, and
# peak memory of fp32 against bf16 for both model implementations.


rule autocast_dtypes:
    input:
        cell_code("autocast_dtypes"),
    output:
        record("results/autocast_dtypes/{cell}.json", "benchmarking_mixed_precision"),
    log:
        "logs/autocast_dtypes/{cell}.log",
    conda:
        CONDA_ENV
    threads: TIMED
    resources:
        gpu=cell_gpu("autocast_dtypes"),
    params:
        cell=cell_file("autocast_dtypes"),
    shell:
        run_cell("autocast_dtypes")


rule norm_sensitivity:
    input:
        cell_code("norm_sensitivity"),
    output:
        record("results/norm_sensitivity/{cell}.json", "benchmarking_mixed_precision"),
    log:
        "logs/norm_sensitivity/{cell}.log",
    conda:
        CONDA_ENV
    threads: TIMED
    resources:
        gpu=cell_gpu("norm_sensitivity"),
    params:
        cell=cell_file("norm_sensitivity"),
    shell:
        run_cell("norm_sensitivity")


# Cells of these two are timed by benchmarking's own code, so they depend on it, not on the
# module that lists them (a changed cell reruns through its params).
rule benchmarking_bf16:
    input:
        cell_code("benchmarking_bf16"),
    output:
        "results/benchmarking_bf16/{cell}.json",
    log:
        "logs/benchmarking_bf16/{cell}.log",
    benchmark:
        "benchmarks/benchmarking_bf16/{cell}.tsv"
    conda:
        CONDA_ENV
    threads: TIMED
    resources:
        gpu=GPU,
    params:
        cell=cell_file("benchmarking_bf16"),
    shell:
        run_cell("benchmarking_bf16")


# fp32 and bf16 of one model timed side by side, in one process (cs336report.experiments.
# benchmarking_mixed_precision.pairs).
rule benchmarking_bf16_pairs:
    input:
        cell_code("benchmarking_bf16_pairs"),
    output:
        record(
            "results/benchmarking_bf16_pairs/{cell}.json",
            "benchmarking_mixed_precision",
        ),
    log:
        "logs/benchmarking_bf16_pairs/{cell}.log",
    benchmark:
        "benchmarks/benchmarking_bf16_pairs/{cell}.tsv"
    conda:
        CONDA_ENV
    threads: TIMED
    resources:
        gpu=cell_gpu("benchmarking_bf16_pairs"),
    params:
        cell=cell_file("benchmarking_bf16_pairs"),
    shell:
        run_cell("benchmarking_bf16_pairs")


rule autocast_memory:
    input:
        cell_code("autocast_memory"),
    output:
        record("results/autocast_memory/{cell}.json", "benchmarking_mixed_precision"),
    log:
        "logs/autocast_memory/{cell}.log",
    benchmark:
        "benchmarks/autocast_memory/{cell}.tsv"
    conda:
        CONDA_ENV
    threads: TIMED
    resources:
        gpu=GPU,
    params:
        cell=cell_file("autocast_memory"),
    shell:
        run_cell("autocast_memory")


rule autocast_saved_tensors:
    input:
        cell_code("autocast_saved_tensors"),
    output:
        record(
            "results/autocast_saved_tensors/{cell}.json",
            "benchmarking_mixed_precision",
        ),
    log:
        "logs/autocast_saved_tensors/{cell}.log",
    conda:
        CONDA_ENV
    threads: TIMED
    resources:
        gpu=GPU,
    params:
        cell=cell_file("autocast_saved_tensors"),
    shell:
        run_cell("autocast_saved_tensors")


REPORT_INPUTS["benchmarking_mixed_precision"] = (
    result_files("autocast_dtypes")
    + result_files("norm_sensitivity")
    + result_files("benchmarking")
    + result_files("benchmarking_bf16")
    + result_files("benchmarking_bf16_pairs")
    + result_files("autocast_memory")
    + result_files("autocast_saved_tensors")
)
