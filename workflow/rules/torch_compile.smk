# torch_compile: (a) the attention grid compiled, (b) the Transformer compiled against the
# same cells uncompiled, (c) the optimized training step (native, bf16, compile, fused AdamW).
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
    resources:
        gpu=GPU,
    shell:
        RUN_CELL


rule compiled_model:
    input:
        COMPILE_CODE + code("experiments/benchmarking.py", "model.py", "models.py", "annotate.py", "accounting.py"),
    output:
        "results/compiled_model/{cell}.json",
    params:
        cell=cell_json("compiled_model"),
    log:
        "logs/compiled_model/{cell}.log",
    benchmark:
        "benchmarks/compiled_model/{cell}.tsv"
    resources:
        gpu=GPU,
    shell:
        RUN_CELL


rule optimized_step:
    input:
        COMPILE_CODE + code("experiments/benchmarking.py", "model.py", "models.py", "annotate.py", "accounting.py"),
    output:
        "results/optimized_step/{cell}.json",
    params:
        cell=cell_json("optimized_step"),
    log:
        "logs/optimized_step/{cell}.log",
    benchmark:
        "benchmarks/optimized_step/{cell}.tsv"
    resources:
        gpu=GPU,
    shell:
        RUN_CELL


REPORT_INPUTS["torch_compile"] = (
    result_files("compiled_attention") + result_files("compiled_model") + result_files("optimized_step")
)
