"""README.md's commands are the ones CI runs."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

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
    commands = [c for c, how in HOW.items() if how == "ci"]
    assert len(commands) == 2, commands  # the CPU torch line and the test line
    for command in commands:
        for part in command.split(" && "):
            assert part in ci or f"{part} -p no:cacheprovider".replace(" -q", "") in ci, part


def test_the_cpu_install_line_names_pytorchs_cpu_index():
    commands = _commands(_quick_start())
    torch = [c for c in commands if c.startswith("pip install torch")]
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in torch
    assert "pip install torch==2.13.0" in torch  # the GPU line, separate


# How each command of the README is run by a test: "ci" (.ci/run runs it, checked above), "dry"
# (a dry run, -n, in a copy of the repository), "run" (run as it is, in that copy), "built" (run in
# a copy of a built CPU workflow), "gpu-dry" (a dry run as on a GPU machine: device=cuda, with
# jobs_elsewhere as this one has none), "slurm" (the profile, with the local executor: the plugin and a
# cluster are not here), "pip" (resolved by pip without installing).
HOW = {
    "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu": "ci",
    "pip install -e . && snakemake --cores 1 report": "dry",
    "pip install torch==2.13.0": "pip",
    "pip install -e '.[test]' && python -m pytest -q -n auto --dist loadgroup": "ci",
    "snakemake report --cores 64 --resources gpu=4": "gpu-dry",
    "snakemake report --cores 1 --config grid=handout": "gpu-dry",
    "snakemake --report report/workflow.html": "built",
    "model: {factory: cs336_basics.model:BasicsTransformerLM}": "config",
    "python -m cs336report check-config workflow/config/default.yaml my-settings.yaml": "run",
    "snakemake --unlock && snakemake --cores 1 report --rerun-incomplete": "dry",
    "pip install -e '.[slurm]'": "pip",
    "snakemake --profile workflow/profiles/slurm report": "slurm",
    "snakemake --cores 1 report --configfile workflow/config/default.yaml workflow/config/published.yaml": "dry",
}


def test_every_readme_command_has_a_test():
    commands = _commands((REPO / "README.md").read_text())
    assert sorted(commands) == sorted(HOW), set(commands) ^ set(HOW)


@pytest.fixture
def repo_copy(tmp_path):
    """The working tree (tracked and not ignored files), as a fresh clone has it."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.split("\n")
    for rel in filter(None, files):
        if (REPO / rel).is_file():
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, tmp_path / rel)
    (tmp_path / "my-settings.yaml").write_text("run: {measured_steps: 3}\n")
    return tmp_path


def _shell(command: str, cwd: Path) -> subprocess.CompletedProcess:
    """``command`` in bash, with this interpreter's folder first on PATH (its snakemake and pip)."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True)


def _dry(command: str) -> str:
    """The snakemake parts of ``command`` as dry runs (pip parts left out: CI runs them)."""
    parts = [p for p in command.split(" && ") if p.startswith("snakemake")]
    return " && ".join(p if p == "snakemake --unlock" else p.replace("snakemake", "snakemake -n", 1) for p in parts)


@pytest.mark.slow
def test_readme_commands_dry_run_and_run(repo_copy):
    for command, how in HOW.items():
        if how == "dry":
            run = _shell(_dry(command), repo_copy)
            out = run.stdout + run.stderr  # the committed report is up to date with its records: nothing to do
            assert run.returncode == 0 and ("Job stats" in out or "Nothing to be done" in out), (command, out[-2000:])
        elif how == "gpu-dry":
            gpu = "device=cuda jobs_elsewhere=True"
            line = (_dry(command).replace("--config", f"--config {gpu}") if "--config" in command
                    else _dry(command) + f" --config {gpu}")
            run = _shell(line, repo_copy)
            out = run.stdout + run.stderr  # the published report/ does not stand in for the run's
            assert run.returncode == 0 and "Job stats" in out and "rule benchmarking:" in out, (command, out[-2000:])
        elif how == "run":
            run = _shell(command, repo_copy)
            assert run.returncode == 0 and "ok (device" in run.stdout, (command, run.stderr[-2000:])
        elif how == "config":
            from cs336report.config import ConfigError, load_files, validate

            (repo_copy / "line.yaml").write_text(command + "\n")
            validate(load_files([repo_copy / "workflow/config/default.yaml", repo_copy / "line.yaml"]))
            with pytest.raises(ConfigError, match="key 'model.factory'"):  # the model is checked, not imported here
                validate(load_files([repo_copy / "workflow/config/default.yaml", repo_copy / "line.yaml"])
                         | {"model": {"factory": "not a path"}})


@pytest.mark.slow
def test_readme_slurm_profile_builds_the_gpu_grid(repo_copy):
    profile = repo_copy / "workflow/profiles/slurm/config.yaml"
    text = profile.read_text()
    assert "executor: slurm" in text and "--gres" not in text
    local = repo_copy / "local-profile"
    local.mkdir()
    (local / "config.yaml").write_text(text.replace("executor: slurm\n", ""))
    run = _shell(f"snakemake -n --profile {local} report", repo_copy)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "flash_leaderboard" in run.stdout  # the GPU grid, on a machine without a GPU


def test_readme_pip_lines_resolve():
    for command, how in HOW.items():
        if how == "pip" and "[slurm]" not in command:
            run = _shell(command.replace("pip install", f"{sys.executable} -m pip install --dry-run --no-deps -q"),
                         REPO)
            assert run.returncode == 0, run.stderr[-2000:]
    extras = (REPO / "pyproject.toml").read_text()
    assert 'slurm = ["snakemake-executor-plugin-slurm"]' in extras


@pytest.mark.slow
def test_readme_workflow_report(workdir, tmp_path):
    work = shutil.copytree(workdir, tmp_path / "work", symlinks=True)
    run = _shell("snakemake --report report/workflow.html", work)
    assert run.returncode == 0, run.stderr[-2000:]
    html = (work / "report/workflow.html").read_text(errors="replace")
    assert "Writeup" in html and "report.md" in html
    # every record under the handout problem it answers, with that problem's caption
    assert "01 benchmarking_script" in html and "benchmarking_warmup" in html
    assert "handout_tests (problems 8, 9, 12, 15, 17, 20)" in html
    caption = (REPO / "workflow/report/nsys_profile.rst").read_text().split()
    assert " ".join(caption[:6]) in " ".join(html.split())
