# benchmarking_script: step times of every size x context x mode, the warm-up study,
# and the roofline probe that gives each row's fraction of peak.


rule benchmarking:
    input:
        cell_code("benchmarking"),
    output:
        record("results/benchmarking/{cell}.json", "benchmarking_script"),
    log:
        "logs/benchmarking/{cell}.log",
    benchmark:
        "benchmarks/benchmarking/{cell}.tsv"
    conda:
        CONDA_ENV
    threads: TIMED
    resources:
        gpu=GPU,
    params:
        cell=cell_file("benchmarking"),
    shell:
        run_cell("benchmarking")


rule benchmarking_warmup:
    input:
        cell_code("benchmarking_warmup"),
    output:
        record("results/benchmarking_warmup/{cell}.json", "benchmarking_script"),
    log:
        "logs/benchmarking_warmup/{cell}.log",
    benchmark:
        "benchmarks/benchmarking_warmup/{cell}.tsv"
    conda:
        CONDA_ENV
    threads: TIMED
    resources:
        gpu=GPU,
    params:
        cell=cell_file("benchmarking_warmup"),
    shell:
        run_cell("benchmarking_warmup")


rule roofline:
    input:
        cell_code("roofline"),
    output:
        record("results/roofline/{cell}.json", "benchmarking_script"),
    log:
        "logs/roofline/{cell}.log",
    benchmark:
        "benchmarks/roofline/{cell}.tsv"
    conda:
        CONDA_ENV
    threads: TIMED
    resources:
        gpu=GPU,
    params:
        cell=cell_file("roofline"),
    shell:
        run_cell("roofline")


REPORT_INPUTS["benchmarking_script"] = (
    result_files("benchmarking")
    + result_files("benchmarking_warmup")
    + result_files("roofline")
)
