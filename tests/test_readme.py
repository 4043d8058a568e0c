"""README.md's commands are the ones CI runs."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _commands(text: str) -> list[str]:
    """The indented code lines of a Markdown text, continuation lines joined."""
    out, lines = [], text.splitlines()
    for line in lines:
        if line.startswith("    ") and line.strip():
            if out and out[-1].endswith("\\"):
                out[-1] = out[-1][:-1].rstrip() + " " + line.strip()
            else:
                out.append(line.strip())
    return out


def _quick_start() -> str:
    text = (REPO / "README.md").read_text()
    return text[text.index("## Quick start"):].split("\n## ", 1)[0]


def _ci_commands() -> set[str]:
    """.ci/run's command lines, the CI's quiet flags taken out."""
    lines = (REPO / ".ci/run").read_text().splitlines()
    return {re.sub(r" -q\b", "", line.strip()) for line in lines if line.strip() and not line.startswith("#")}


def test_ci_installs_what_the_quick_start_installs_and_runs_its_tests():
    ci = _ci_commands()
    commands = [c for c in _commands(_quick_start()) if "--index-url" in c or "[test]" in c]
    assert len(commands) == 2, commands  # the CPU torch line and the test line
    for command in commands:
        for part in command.split(" && "):
            assert part in ci or part.replace("python -m pytest -q", "python -m pytest -p no:cacheprovider") in ci, part


def test_the_cpu_install_line_names_pytorchs_cpu_index():
    commands = _commands(_quick_start())
    torch = [c for c in commands if c.startswith("pip install torch")]
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in torch
    assert "pip install torch==2.13.0" in torch  # the GPU line, separate
