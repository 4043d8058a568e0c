# memory_profiling: a CUDA memory snapshot of each configured cell (capture, on the GPU),
# each snapshot parsed into a result JSON (parse, any machine). No cells without CUDA.


rule memory_profiling:
    input:
        cell_code("memory_profiling"),
    output:
        result=record("results/memory_profiling/{cell}.json", "memory_profiling"),
        snapshot="results/memory_profiling/{cell}.pickle",
    log:
        "logs/memory_profiling/{cell}.log",
    benchmark:
        "benchmarks/memory_profiling/{cell}.tsv"
    conda:
        CONDA_ENV
    threads: TIMED
    resources:
        gpu=GPU,
    params:
        cell=cell_file("memory_profiling"),
    shell:
        run_cell("memory_profiling", out="{output.result}")


rule memory_profiling_parse:
    input:
        result=rules.memory_profiling.output.result,
        snapshot=rules.memory_profiling.output.snapshot,
        code=code("steps.snapshot_step"),
    output:
        record("results/memory_profiling_parse/{cell}.json", "memory_profiling"),
    log:
        "logs/memory_profiling_parse/{cell}.log",
    benchmark:
        "benchmarks/memory_profiling_parse/{cell}.tsv"
    conda:
        CONDA_ENV
    shell:
        '"$CS336REPORT_PYTHON" -m cs336report parse-snapshot {input.snapshot} --result {input.result} --out {output} > {log} 2>&1'


REPORT_INPUTS["memory_profiling"] = result_files("memory_profiling") + expand(
    "results/memory_profiling_parse/{cell}.json", cell=sorted(CELLS["memory_profiling"])
)
