"""The shapes of the handout_tests record: the tests that ran and their outcomes
(:class:`HandoutTests`), the student's conftest files (:class:`ConftestFile`) and the student's tests
that are not the handout's (:class:`StudentTests`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class ConftestFile:
    """One conftest of a student's checkout, as the handout_tests record names it."""
    file: str
    outcome_hooks: list | None = None  # the pytest hooks it defines that can change outcomes
    ran: bool | None = None  # whether it ran beside the tests (a course clone's run runs none)
    hooks_removed: list | None = None  # the outcome hooks taken out of the copy that ran


@dataclass(frozen=True, kw_only=True)
class StudentTests:
    """A student's tests that are not the handout's: extra cases, extra and modified files."""
    extra: list | None = None
    extra_files: list | None = None
    modified_files: list | None = None


@dataclass(frozen=True, kw_only=True)
class HandoutTests:
    tests: list
    checkout: str | None = None
    command: list | None = None
    environment: dict | None = None
    implementation: str | None = None
    outcomes: dict | None = None
    pytest_exit_code: int | None = None
    suite: str | None = None
    tests_source: dict | None = None  # whose tests ran: the course's clone, the student's copies or ours
    conftest: dict | None = None  # the student's conftest files, their outcome-changing hooks, whether they ran
    student_tests: dict | None = None  # the student's tests that are not the handout's: extra, extra/modified files
    classes: dict | None = None  # by piece, the class the student's adapter returned (the check's probe)
