# communication_accounting: the XXL memory and communication arithmetic (computed, no GPU).


rule communication_accounting:
    input:
        code("experiments/communication_accounting.py", "accounting_distributed.py"),
    output:
        "results/communication_accounting/{cell}.json",
    params:
        cell=cell_json("communication_accounting"),
    log:
        "logs/communication_accounting/{cell}.log",
    shell:
        RUN_CELL


REPORT_INPUTS["communication_accounting"] = result_files("communication_accounting")
