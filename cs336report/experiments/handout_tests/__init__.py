"""handout_tests: the handout's test cases, run with pytest, each test's outcome recorded.

One cell per suite of the grid that the config's edition has (2025: attention, ddp,
sharded_optimizer; 2026 adds fsdp, and its ddp suite is the one overlapping DDP of ``get_ddp``); a
cell of an edition other than 2025 carries its ``edition``. With ``course.checkout`` (a clone of the
course's repository) the clone's own tests run, isolated in a temporary folder, through the
adapters of the code under test: ours, or the student's ``tests/adapters.py`` with their
checkout's folders on PYTHONPATH (:mod:`.course`). Without a clone, with ``student.checkout`` the
student's own copy of the handout's tests runs (``<checkout>/tests/test_<...>.py``), from a copy of
the checkout's tests/ in a temporary folder, its conftest without the hooks that can change
outcomes; the student's tests the edition does not have are recorded apart
(:mod:`.student_copies`); without either, cs336report's suite of the same cases (:mod:`cs336report.handout_suite`)
runs through the built-in adapters. The record names whose tests ran (``data.tests_source``, with
its label). On a CPU, Triton runs
under ``TRITON_INTERPRET=1``. Our PyTorch FlashAttention backward runs eagerly in these tests on
every machine (``CS336_FLASH_BACKWARD=eager``): the handout's tests of it use CPU tensors, for
which compiling it is an Inductor C++ build (34-55 s on H200 hosts) that nothing times; the
benchmarks compile it. A student's code ignores the variable.

pytest writes the JUnit XML beside the record (``results/handout_tests/<suite>.xml``); the record
lists each test (:func:`.suite.parse_junit`) with the handout problem and sub-question it grades. A test
that fails because its adapter raises ``NotImplementedError``, or whose piece the config check found
not implemented (an adapter returning the wrong kind), is ``not_implemented`` with the adapter's
name. A suite whose every test is not implemented is a cell with status ``not_implemented``.

    python -m cs336report run handout_tests --name attention --cell '{...}' --out results/handout_tests/attention.json
"""

from __future__ import annotations

from pathlib import Path

from ... import editions

SUITES = ("attention", "ddp", "sharded_optimizer")
# The handout's test files of each suite (the course's names), and ours.
STUDENT_FILES = {"attention": ["test_attention.py"], "ddp": ["test_ddp_individual_parameters.py", "test_ddp.py"],
                 "sharded_optimizer": ["test_sharded_optimizer.py"]}
SUITE_PACKAGE = Path(__file__).resolve().parent.parent.parent / "handout_suite"
OUR_FILES = {"attention": ["test_attention.py"], "ddp": ["test_ddp.py", "test_naive_ddp.py"],
             "sharded_optimizer": ["test_sharded_optimizer.py"]}
OUR_FILES_BY_EDITION = {
    2025: OUR_FILES,
    2026: {"attention": ["test_attention.py"], "ddp": ["test_distributed_data_parallel.py"],
           "fsdp": ["test_fsdp.py"], "sharded_optimizer": ["test_sharded_optimizer.py"]},
}
DEFAULT_EDITION = editions.DEFAULT  # a cell without ``edition`` is of this one (its records predate the key)


def edition_of(cell: dict) -> int:
    """The edition whose tests a cell runs."""
    return int(cell.get("edition") or DEFAULT_EDITION)


def cells(cfg) -> dict[str, dict]:
    """One cell per suite of the grid's handout_tests."""
    grid = cfg.grid("handout_tests")
    if not grid:
        return {}
    has = {s.name for s in editions.get(cfg.edition).test_suites()}
    cells = {suite: {"suite": suite, "device": cfg.device, "student": cfg.student, "timeout_s": grid["timeout_s"],
                     "junitxml": f"results/handout_tests/{suite}.xml"} for suite in grid["suites"] if suite in has}
    if cfg.edition != DEFAULT_EDITION:  # a 2025 cell keeps its settings (and its published record)
        for cell in cells.values():
            cell["edition"] = cfg.edition
    if cfg.course:  # only then: a cell without a clone keeps its settings (and its published record)
        for cell in cells.values():
            cell["course"] = cfg.course
    elif cfg.student:  # the student's copies are compared with the edition's cases
        for cell in cells.values():
            cell["edition"] = cfg.edition
    return cells


EXPERIMENTS = {"handout_tests": (cells, ".suite:run")}
