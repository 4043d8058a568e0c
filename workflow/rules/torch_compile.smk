# torch_compile: (a) the attention grid compiled, and the host time of its short sequences split;
# (b) the Transformer compiled against the same cells uncompiled; (c) the optimized training
# step (native, bf16, compile, fused AdamW).
import re

from cs336report.experiments import torch_compile


rule compiled_attention:
    input:
        cell_code("compiled_attention"),
    output:
        record("results/compiled_attention/{cell}.json", "torch_compile"),
    log:
        "logs/compiled_attention/{cell}.log",
    benchmark:
        "benchmarks/compiled_attention/{cell}.tsv"
    priority: LONG_JOBS_FIRST["compiled_attention"]
    conda:
        CONDA_ENV
    threads: TIMED
    resources:
        gpu=GPU,
    params:
        cell=cell_file("compiled_attention"),
    shell:
        run_cell("compiled_attention")


# (a) diagnosed: each cell times and profiles the naive attention eager and compiled in one process.
rule compiled_attention_overhead:
    input:
        cell_code("compiled_attention_overhead"),
    output:
        record("results/compiled_attention_overhead/{cell}.json", "torch_compile"),
    log:
        "logs/compiled_attention_overhead/{cell}.log",
    benchmark:
        "benchmarks/compiled_attention_overhead/{cell}.tsv"
    conda:
        CONDA_ENV
    threads: TIMED
    resources:
        gpu=GPU,
    params:
        cell=cell_file("compiled_attention_overhead"),
    shell:
        run_cell("compiled_attention_overhead")


# The compiled cells of one size and context are one job (one process, one compiled model): the
# forward cell compiles the forward graph, the train step then compiles the backward only.
# A job's results are named {prefix}-{mode}-compiled.json; the job is {prefix}-compiled.
COMPILED_JOBS = torch_compile.compiled_model_jobs(CELLS["compiled_model"])
COMPILED_MODES = torch_compile.compiled_model_modes(CELLS["compiled_model"]) or [
    "forward"
]


rule compiled_model:
    input:
        cell_code("compiled_model"),
    output:
        [
            record(
                f"results/compiled_model/{{prefix}}-{mode}-compiled.json",
                "torch_compile",
                cell=f"{{prefix}}-{mode}-compiled",
            )
            for mode in COMPILED_MODES
        ],
    log:
        "logs/compiled_model/{prefix}-compiled.log",
    benchmark:
        "benchmarks/compiled_model/{prefix}-compiled.tsv"
    wildcard_constraints:
        prefix="|".join(
            re.escape(job.removesuffix("-compiled")) for job in COMPILED_JOBS
        )
        or "(?!)",
    priority: LONG_JOBS_FIRST["compiled_model"]
    conda:
        CONDA_ENV
    threads: TIMED
    resources:
        gpu=GPU,
    params:
        cells=compiled_job_cells,
    shell:
        '"$CS336REPORT_PYTHON" -m cs336report run-job compiled_model --job {wildcards.prefix}-compiled --cells @{params.cells} '
        "--out {output} --gpus {resources.gpu} > {log} 2>&1"


# The uncompiled twins that benchmarking does not run (none on the shipped grids): one job each.
rule compiled_model_eager:
    input:
        cell_code("compiled_model"),
    output:
        record("results/compiled_model/{cell}.json", "torch_compile"),
    log:
        "logs/compiled_model/{cell}.log",
    benchmark:
        "benchmarks/compiled_model/{cell}.tsv"
    wildcard_constraints:
        cell="|".join(
            re.escape(n)
            for n, c in CELLS["compiled_model"].items()
            if not c.get("compile")
        )
        or "(?!)",
    conda:
        CONDA_ENV
    threads: TIMED
    resources:
        gpu=GPU,
    params:
        cell=cell_file("compiled_model"),
    shell:
        run_cell("compiled_model")


# Its CUDA cells also time each kernel (kernel_steps), through cs336report.measure.kernel_times.
rule optimized_step:
    input:
        cell_code("optimized_step"),
    output:
        record("results/optimized_step/{cell}.json", "torch_compile"),
    log:
        "logs/optimized_step/{cell}.log",
    benchmark:
        "benchmarks/optimized_step/{cell}.tsv"
    priority: LONG_JOBS_FIRST["optimized_step"]
    conda:
        CONDA_ENV
    threads: TIMED
    resources:
        gpu=GPU,
    params:
        cell=cell_file("optimized_step"),
    shell:
        run_cell("optimized_step")


REPORT_INPUTS["torch_compile"] = (
    result_files("compiled_attention")
    + result_files("compiled_attention_overhead")
    + result_files("compiled_model")
    + result_files("optimized_step")
)
