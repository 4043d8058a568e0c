# handout_tests: the handout's test cases with pytest, one job per suite of the edition (attention,
# ddp, sharded_optimizer; 2026 adds fsdp): the student's own tests/ with student.checkout, else
# cs336report's suite of the same cases through the built-in adapters. Each test's outcome goes into the record, and the
# JUnit XML beside it.
from pathlib import Path

from cs336report.experiments.handout_tests import OUR_FILES_BY_EDITION

# pytest runs the suite's test modules without the cell's code importing them: they, and the
# modules they import, are inputs of their own (the suite of the edition the report answers).
HANDOUT_SUITE = code(
    *sorted(
        {
            f"handout_suite.{Path(f).stem}"
            for files in OUR_FILES_BY_EDITION[EDITION.id].values()
            for f in files
        }
    )
)


rule handout_tests:
    input:
        cell_code("handout_tests"),
        HANDOUT_SUITE,
    output:
        json=record("results/handout_tests/{cell}.json", "handout_tests"),
        xml="results/handout_tests/{cell}.xml",
    log:
        "logs/handout_tests/{cell}.log",
    benchmark:
        "benchmarks/handout_tests/{cell}.tsv"
    priority: LONG_JOBS_FIRST["handout_tests"]
    conda:
        CONDA_ENV
    resources:
        gpu=cell_gpu("handout_tests"),
    params:
        cell=cell_file("handout_tests"),
        triton=TRITON,
    shell:
        run_cell("handout_tests", out="{output.json}", worker=False)


REPORT_INPUTS["handout_tests"] = result_files("handout_tests")
