"""The package's import contracts (pyproject.toml's [tool.importlinter], docs/architecture.md): the
layers from the machine up to the report, and the imports that never happen."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("importlinter")
REPO = Path(__file__).resolve().parent.parent
LINT = [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"]


def lint(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(LINT, cwd=root, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=300)


def test_every_import_contract_is_kept():
    run = lint(REPO)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout


def test_a_report_module_that_imports_an_experiment_breaks_a_contract(tmp_path):
    shutil.copytree(REPO / "cs336report", tmp_path / "cs336report", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    tables = tmp_path / "cs336report" / "report" / "tables.py"
    tables.write_text(tables.read_text() + "\nfrom ..experiments import names  # noqa: E402,F401\n")
    run = lint(tmp_path)
    assert run.returncode != 0
    assert "cs336report.report is not allowed to import cs336report.experiments" in run.stdout
