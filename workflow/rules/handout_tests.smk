# handout_tests: the handout's test cases with pytest, one job per suite (attention, ddp,
# sharded_optimizer): the student's own tests/ with student.checkout, else cs336report's suite of
# the same cases through the built-in adapters. Each test's outcome goes into the record, and the
# JUnit XML beside it.
HANDOUT_TESTS_CODE = code(
    "experiments/handout_tests.py",
    "handout_suite/__init__.py",
    "handout_suite/_distributed.py",
    "handout_suite/test_attention.py",
    "handout_suite/test_ddp.py",
    "handout_suite/test_sharded_optimizer.py",
    "adapters.py",
    "student.py",
    "flash/__init__.py",
    "flash/pytorch.py",
    "flash/reference.py",
    "flash/triton_kernels.py",
    "runner.py",
)


rule handout_tests:
    input:
        HANDOUT_TESTS_CODE,
    output:
        json="results/handout_tests/{cell}.json",
        xml="results/handout_tests/{cell}.xml",
    params:
        py=PY,
        cell=cell_json("handout_tests"),
    log:
        "logs/handout_tests/{cell}.log",
    benchmark:
        "benchmarks/handout_tests/{cell}.tsv"
    shell:
        "{params.py} -m cs336report run handout_tests --name {wildcards.cell} --cell {params.cell:q} "
        "--out {output.json} --no-worker > {log} 2>&1"


REPORT_INPUTS["handout_tests"] = result_files("handout_tests")
