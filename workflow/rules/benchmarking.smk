# benchmarking_script: step times of every size x context x mode, the warm-up study,
# and the roofline probe that gives each row's fraction of peak.
BENCH_CODE = code(
    "experiments/benchmarking.py", "model.py", "models.py", "measure.py", "annotate.py", "accounting.py", "runner.py"
)


rule benchmarking:
    input:
        BENCH_CODE,
    output:
        "results/benchmarking/{cell}.json",
    params:
        cell=cell_json("benchmarking"),
    log:
        "logs/benchmarking/{cell}.log",
    benchmark:
        "benchmarks/benchmarking/{cell}.tsv"
    threads: TIMED
    resources:
        gpu=GPU,
    shell:
        RUN_CELL


rule benchmarking_warmup:
    input:
        BENCH_CODE,
    output:
        "results/benchmarking_warmup/{cell}.json",
    params:
        cell=cell_json("benchmarking_warmup"),
    log:
        "logs/benchmarking_warmup/{cell}.log",
    benchmark:
        "benchmarks/benchmarking_warmup/{cell}.tsv"
    threads: TIMED
    resources:
        gpu=GPU,
    shell:
        RUN_CELL


rule roofline:
    input:
        code("experiments/roofline.py", "experiments/benchmarking.py", "measure.py", "runner.py"),
    output:
        "results/roofline/{cell}.json",
    params:
        cell=cell_json("roofline"),
    log:
        "logs/roofline/{cell}.log",
    benchmark:
        "benchmarks/roofline/{cell}.tsv"
    threads: TIMED
    resources:
        gpu=GPU,
    shell:
        RUN_CELL


REPORT_INPUTS["benchmarking_script"] = (
    result_files("benchmarking") + result_files("benchmarking_warmup") + result_files("roofline")
)
