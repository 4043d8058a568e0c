# fsdp_accounting (2026): bytes per rank of parameters, gradients and AdamW state without sharding,
# with optimizer state sharding and with FSDP (computed, no GPU). None for 2025.


rule fsdp_accounting:
    input:
        cell_code("fsdp_accounting"),
    output:
        record("results/fsdp_accounting/{cell}.json", "fsdp_accounting"),
    log:
        "logs/fsdp_accounting/{cell}.log",
    conda:
        CONDA_ENV
    resources:
        gpu=0,
    params:
        cell=cell_file("fsdp_accounting"),
    shell:
        run_cell("fsdp_accounting")


REPORT_INPUTS["fsdp_accounting"] = result_files("fsdp_accounting")
