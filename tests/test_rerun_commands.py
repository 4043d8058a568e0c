"""Every command the report gives to run a missing answer works as typed: a rule of one job per
cell has a wildcard and cannot be a Snakemake target, so each command forces its rules and builds
the report (cs336report.names.handout.rerun_command)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from cs336report import editions
from cs336report.names.handout import rerun_command

HANDOUT = editions.get(2025).problems
from cs336report.report.render import render_report

REPO = Path(__file__).resolve().parent.parent
COMMAND = re.compile(r"snakemake --cores 1 --forcerun ([a-z0-9_ ]+) -- report")


def _rules() -> set[str]:
    return {m for f in (REPO / "workflow/rules").glob("*.smk")
            for m in re.findall(r"^rule (\w+):", f.read_text(), re.M)}


def test_a_run_with_no_records_names_only_commands_that_snakemake_accepts(tmp_path):
    render_report([], {"_device": "cpu", "_grid": "cpu"}, tmp_path / "out")
    text = "\n".join((tmp_path / "out" / name).read_text() for name in ("report.md", "answers.md", "index.html"))
    assert "snakemake --cores 1 handout_tests" not in text  # a wildcard rule alone is no target
    given = set(re.findall(r"snakemake --cores 1 [^`<\n]*", text))
    assert len(given) > 10
    rules = _rules()
    named = set()
    for command in given:
        if command.startswith("snakemake --cores 1 --forcerun") and "-- report" in command:
            match = COMMAND.match(command)
            assert match, command
            named |= set(match.group(1).split())
        else:
            assert command.split()[3:4] in (["report"], ["publish"]) or "--configfile" in command, command
    assert named and named <= rules, sorted(named - rules)
    assert {p.id for p in HANDOUT if p.rule == p.id} & named  # the problems' own rules


@pytest.mark.slow
def test_snakemake_plans_the_forced_rules_and_the_report(tmp_path):
    """One dry run of every rule the report may name: Snakemake accepts the form and the names."""
    rules = sorted(r for r in _rules() if r not in ("all", "report", "publish", "writeup_pdf"))
    command = [sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--forcerun", *rules, "--", "report"]
    run = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    assert "Job stats" in run.stdout and "report" in run.stdout
