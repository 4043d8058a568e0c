# torch_compile: (a) the attention grid compiled, (b) the Transformer compiled against the
# same cells uncompiled, (c) the optimized training step (native, bf16, compile, fused AdamW).
import re

from cs336report.experiments import torch_compile

COMPILE_CODE = code("experiments/torch_compile.py", "compiling.py", "measure.py", "runner.py")


rule compiled_attention:
    input:
        COMPILE_CODE + code("experiments/attention.py", "model.py"),
    output:
        "results/compiled_attention/{cell}.json",
    params:
        cell=cell_json("compiled_attention"),
    log:
        "logs/compiled_attention/{cell}.log",
    benchmark:
        "benchmarks/compiled_attention/{cell}.tsv"
    threads: TIMED
    resources:
        gpu=GPU,
    shell:
        RUN_CELL


# The compiled cells of one size and context are one job (one process, one compiled model): the
# forward cell compiles the forward graph, the train step then compiles the backward only.
# A job's results are named {prefix}-{mode}-compiled.json; the job is {prefix}-compiled.
COMPILED_JOBS = torch_compile.compiled_model_jobs(CELLS["compiled_model"])
COMPILED_MODES = torch_compile.compiled_model_modes(CELLS["compiled_model"]) or ["forward"]


def compiled_job_cells(wildcards):
    """params function: the job's cells as [name, resolved cell] in run order, so a changed cell reruns its job."""
    names = COMPILED_JOBS[f"{wildcards.prefix}-compiled"]
    return json.dumps([[n, CELLS["compiled_model"][n]] for n in names], sort_keys=True)


rule compiled_model:
    input:
        COMPILE_CODE + code("experiments/benchmarking.py", "model.py", "models.py", "annotate.py", "accounting.py"),
    output:
        expand("results/compiled_model/{{prefix}}-{mode}-compiled.json", mode=COMPILED_MODES),
    wildcard_constraints:
        prefix="|".join(re.escape(job.removesuffix("-compiled")) for job in COMPILED_JOBS) or "(?!)",
    params:
        cells=compiled_job_cells,
    log:
        "logs/compiled_model/{prefix}-compiled.log",
    benchmark:
        "benchmarks/compiled_model/{prefix}-compiled.tsv"
    threads: TIMED
    resources:
        gpu=GPU,
    shell:
        "{PY} -m cs336report run-job compiled_model --job {wildcards.prefix}-compiled --cells {params.cells:q} "
        "--out {output} > {log} 2>&1"


# The uncompiled twins that benchmarking does not run (none on the shipped grids): one job each.
rule compiled_model_eager:
    input:
        COMPILE_CODE + code("experiments/benchmarking.py", "model.py", "models.py", "annotate.py", "accounting.py"),
    output:
        "results/compiled_model/{cell}.json",
    wildcard_constraints:
        cell="|".join(re.escape(n) for n, c in CELLS["compiled_model"].items() if not c.get("compile")) or "(?!)",
    params:
        cell=cell_json("compiled_model"),
    log:
        "logs/compiled_model/{cell}.log",
    benchmark:
        "benchmarks/compiled_model/{cell}.tsv"
    threads: TIMED
    resources:
        gpu=GPU,
    shell:
        RUN_CELL.replace("{rule}", "compiled_model")


# Its CUDA cells also time each kernel (kernel_steps), through cs336report.kernel_times.
rule optimized_step:
    input:
        COMPILE_CODE + code("experiments/benchmarking.py", "model.py", "models.py", "annotate.py", "accounting.py",
                            "kernel_times.py"),
    output:
        "results/optimized_step/{cell}.json",
    params:
        cell=cell_json("optimized_step"),
    log:
        "logs/optimized_step/{cell}.log",
    benchmark:
        "benchmarks/optimized_step/{cell}.tsv"
    threads: TIMED
    resources:
        gpu=GPU,
    shell:
        RUN_CELL


REPORT_INPUTS["torch_compile"] = (
    result_files("compiled_attention") + result_files("compiled_model") + result_files("optimized_step")
)
