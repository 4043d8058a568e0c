"""Every third-party module the package imports is installed by `pip install -e .` (pyproject's
[project] dependencies) and by the workflow's conda environment: the tests run with the [test]
extra, which would hide a runtime dependency declared only there (handout_tests runs pytest)."""

import ast
import re
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
DISTRIBUTION = {"yaml": "pyyaml"}  # import name -> distribution, where they differ
# Imported but not declared, each for a reason: installed with a declared distribution, or optional
# and imported only where it is present.
NOT_DECLARED = {
    "markupsafe": "installed with jinja2, which renders with it",
    "numpy": "installed with torch, pandas and matplotlib",
    "triton": "optional: the CUDA build of torch brings it; without it the Triton paths say so",
    "pynvml": "optional: contention reads GPU processes with it where present, else nvidia-smi",
    "cs336_basics": "optional: the course's model package, whose layers the FSDP cases use where present",
}
# Imported only in the Snakemake process, never in a job: declared in pyproject, left out of the jobs'
# conda environment (which runs no Snakemake).
WORKFLOW_PROCESS = {"snakemake": "cs336report/machine/console.py sets up the console of Snakemake's own process"}


def _imported() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in (REPO / "cs336report").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                     else [])
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in ("cs336report", "__future__"):
                    found.setdefault(top, set()).add(str(path.relative_to(REPO)))
    return found


def _names(requirements) -> set[str]:
    return {re.split(r"[<>=!~; \[]", r.strip(), maxsplit=1)[0].lower() for r in requirements}


def test_every_imported_module_is_a_declared_dependency():
    project = re.search(r"\[project\].*?dependencies = \[(.*?)\]", (REPO / "pyproject.toml").read_text(), re.S)
    declared = _names(re.findall(r'"([^"]+)"', project.group(1)))
    env = yaml.safe_load((REPO / "workflow/envs/cs336report.yaml").read_text())
    conda = _names(next(d["pip"] for d in env["dependencies"] if isinstance(d, dict)))
    imported = _imported()
    assert {"torch", "pandas", "pytest"} <= set(imported)  # the scan sees the package's imports
    for module, files in sorted(imported.items()):
        if module in NOT_DECLARED:
            continue
        distribution = DISTRIBUTION.get(module, module)
        assert distribution in declared, f"{module} (imported by {sorted(files)[0]}) is not in pyproject's dependencies"
        assert distribution in conda or module in WORKFLOW_PROCESS, f"{module} is not in workflow/envs/cs336report.yaml"
