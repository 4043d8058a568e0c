# mixed_precision_accumulation: 0.01 added up repeatedly with different accumulator and addend
# dtypes (the handout's four loops, and their bfloat16 variants).


rule mixed_precision_accumulation:
    input:
        cell_code("mixed_precision_accumulation"),
    output:
        record(
            "results/mixed_precision_accumulation/{cell}.json",
            "mixed_precision_accumulation",
        ),
    log:
        "logs/mixed_precision_accumulation/{cell}.log",
    conda:
        CONDA_ENV
    threads: TIMED
    resources:
        gpu=cell_gpu("mixed_precision_accumulation"),
    params:
        cell=cell_file("mixed_precision_accumulation"),
    shell:
        run_cell("mixed_precision_accumulation")


REPORT_INPUTS["mixed_precision_accumulation"] = result_files(
    "mixed_precision_accumulation"
)
