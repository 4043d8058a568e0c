# pytorch_attention: the hand-written attention alone on every d_head x seq, and the SDPA
# backends on the same grid; one job and one result per cell, OOM included.


rule pytorch_attention:
    input:
        cell_code("pytorch_attention"),
    output:
        record("results/pytorch_attention/{cell}.json", "pytorch_attention"),
    log:
        "logs/pytorch_attention/{cell}.log",
    benchmark:
        "benchmarks/pytorch_attention/{cell}.tsv"
    conda:
        CONDA_ENV
    threads: TIMED
    resources:
        gpu=GPU,
    params:
        cell=cell_file("pytorch_attention"),
    shell:
        run_cell("pytorch_attention")


REPORT_INPUTS["pytorch_attention"] = result_files("pytorch_attention")
