# parallelism_calcs: the 2026 calculation problems (22-26), derived with sympy (computed, no GPU).
# One cell per problem the edition answers with this rule, named for it (none in 2025).
CALCS_PROBLEMS = [p for p in EDITION.problems if p.rule == "parallelism_calcs"]


rule parallelism_calcs:
    input:
        cell_code("parallelism_calcs"),
    output:
        report(
            "results/parallelism_calcs/{cell}.json",
            caption="../report/parallelism_calcs.rst",
            category="parallelism_calcs (problems "
            + ", ".join(str(p.number) for p in CALCS_PROBLEMS)
            + ")",
            subcategory="parallelism_calcs",
            labels={"problem": "{cell}"},
        ),
    log:
        "logs/parallelism_calcs/{cell}.log",
    conda:
        CONDA_ENV
    resources:
        gpu=0,
    params:
        cell=cell_file("parallelism_calcs"),
    shell:
        run_cell("parallelism_calcs")


REPORT_INPUTS["parallelism_calcs"] = result_files("parallelism_calcs")
