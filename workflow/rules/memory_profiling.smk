# memory_profiling: a CUDA memory snapshot of each configured cell (capture, on the GPU),
# each snapshot parsed into a result JSON (parse, any machine). No cells without CUDA.
# memory_profiling_nsys (2026's (f)): one step under Nsight Systems with CUDA memory tracking,
# exported to SQLite and parsed by block in the same job (cs336report/steps/nsys_memory_step.py);
# without a GPU and nsys its record says not run.


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


rule memory_profiling_nsys:
    input:
        cell_code("memory_profiling_nsys", entry="steps.nsys_memory_step"),
    output:
        result=record("results/memory_profiling_nsys/{cell}.json", "memory_profiling"),
        files=directory("results/memory_profiling_nsys/{cell}"),
    log:
        "logs/memory_profiling_nsys/{cell}.log",
    benchmark:
        "benchmarks/memory_profiling_nsys/{cell}.tsv"
    conda:
        CONDA_ENV
    threads: TIMED
    resources:
        gpu=cell_gpu("memory_profiling_nsys"),
    params:
        cell=cell_file("memory_profiling_nsys"),
    shell:
        '"$CS336REPORT_PYTHON" -m cs336report capture-nsys-memory --name {wildcards.cell} --cell @{params.cell} '
        "--out-dir {output.files} --out {output.result} --gpus {resources.gpu} > {log} 2>&1"


REPORT_INPUTS["memory_profiling"] = (
    result_files("memory_profiling")
    + expand(
        "results/memory_profiling_parse/{cell}.json",
        cell=sorted(CELLS["memory_profiling"]),
    )
    + result_files("memory_profiling_nsys")
)
