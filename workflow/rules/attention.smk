# pytorch_attention: the hand-written attention alone on every d_head x seq, and the SDPA
# backends on the same grid; one job and one result per cell, OOM included.
# compiling.py is left out: the eager cells import it but never compile (compiled_attention depends on it)
ATTENTION_CODE = code("experiments/attention.py", "model.py", "measure.py", "runner.py")


rule pytorch_attention:
    input:
        ATTENTION_CODE,
    output:
        "results/pytorch_attention/{cell}.json",
    params:
        cell=cell_json("pytorch_attention"),
    log:
        "logs/pytorch_attention/{cell}.log",
    benchmark:
        "benchmarks/pytorch_attention/{cell}.tsv"
    threads: TIMED
    resources:
        gpu=GPU,
    shell:
        RUN_CELL


REPORT_INPUTS["pytorch_attention"] = result_files("pytorch_attention")
