# communication_accounting: the XXL memory and communication arithmetic (computed, no GPU).


rule communication_accounting:
    input:
        cell_code("communication_accounting"),
    output:
        record(
            "results/communication_accounting/{cell}.json", "communication_accounting"
        ),
    log:
        "logs/communication_accounting/{cell}.log",
    conda:
        CONDA_ENV
    resources:
        gpu=0,
    params:
        cell=cell_file("communication_accounting"),
    shell:
        run_cell("communication_accounting")


REPORT_INPUTS["communication_accounting"] = result_files("communication_accounting")
