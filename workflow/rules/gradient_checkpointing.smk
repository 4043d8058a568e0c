# gradient_checkpointing (2026): peak memory of a forward and backward pass for each single-level
# grouping of the blocks under torch.utils.checkpoint (CUDA peak on a GPU, the CPU allocator's on a
# CPU), with the derivation beside it. No cells for an edition without the problem (2025).


rule gradient_checkpointing:
    input:
        cell_code("gradient_checkpointing"),
    output:
        record("results/gradient_checkpointing/{cell}.json", "gradient_checkpointing"),
    log:
        "logs/gradient_checkpointing/{cell}.log",
    benchmark:
        "benchmarks/gradient_checkpointing/{cell}.tsv"
    conda:
        CONDA_ENV
    threads: TIMED
    resources:
        gpu=cell_gpu("gradient_checkpointing"),
    params:
        cell=cell_file("gradient_checkpointing"),
    shell:
        run_cell("gradient_checkpointing")


REPORT_INPUTS["gradient_checkpointing"] = result_files("gradient_checkpointing")
