# memory_profiling: a CUDA memory snapshot of each configured cell (capture, on the GPU),
# each snapshot parsed into a result JSON (parse, any machine). No cells without CUDA.
MEMORY_CODE = code(
    "experiments/memory.py", "experiments/benchmarking.py", "model.py", "models.py", "measure.py", "accounting.py",
    "runner.py",
)


rule memory_profiling:
    input:
        MEMORY_CODE,
    output:
        result="results/memory_profiling/{cell}.json",
        snapshot="results/memory_profiling/{cell}.pickle",
    params:
        cell=cell_json("memory_profiling"),
    log:
        "logs/memory_profiling/{cell}.log",
    benchmark:
        "benchmarks/memory_profiling/{cell}.tsv"
    threads: TIMED
    resources:
        gpu=GPU,
    shell:
        "{PY} -m cs336report run memory_profiling --name {wildcards.cell} --cell {params.cell:q}"
        " --out {output.result} > {log} 2>&1"


rule memory_profiling_parse:
    input:
        result=rules.memory_profiling.output.result,
        snapshot=rules.memory_profiling.output.snapshot,
        code=code("snapshot_step.py", "parsers/snapshot.py", "models.py"),
    output:
        "results/memory_profiling_parse/{cell}.json",
    log:
        "logs/memory_profiling_parse/{cell}.log",
    benchmark:
        "benchmarks/memory_profiling_parse/{cell}.tsv"
    shell:
        "{PY} -m cs336report parse-snapshot {input.snapshot} --result {input.result} --out {output} > {log} 2>&1"


REPORT_INPUTS["memory_profiling"] = result_files("memory_profiling") + expand(
    "results/memory_profiling_parse/{cell}.json", cell=sorted(CELLS["memory_profiling"])
)
