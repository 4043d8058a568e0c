"""A rule's code inputs: the import closure of the modules it runs."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cs336report.run.codeinputs import closure

REPO = Path(__file__).resolve().parent.parent


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))


def test_closure_follows_every_kind_of_import(tmp_path):
    _write(tmp_path, {
        "cs336report/__init__.py": "",
        "cs336report/a.py": "from . import b\nfrom .sub.c import thing\n",
        "cs336report/b.py": "def f():\n    from .lazy import x  # imported only when called\n",
        "cs336report/lazy.py": "import importlib\nK = importlib.import_module('.kern', 'cs336report')\n",
        "cs336report/kern.py": "",
        "cs336report/sub/__init__.py": "",
        "cs336report/sub/c.py": "import json\nimport cs336report.d\nthing = 1\n",
        "cs336report/d.py": "",
        "cs336report/unused.py": "",
        # a package importing its submodules by computed names brings them all
        "cs336report/sections/__init__.py": "import importlib\nM = [importlib.import_module(f'{__name__}.{n}') for n in 'xy']\n",
        "cs336report/sections/x.py": "",
        "cs336report/sections/y.py": "from .. import d\n",
        "cs336report/uses_sections.py": "from .sections import M\n",
        # the experiments package discovers its modules too, but each rule names its own
        "cs336report/experiments/__init__.py": "import importlib\nimport pkgutil\nM = [importlib.import_module(f'{__name__}.{i.name}') for i in pkgutil.iter_modules(__path__)]\n",
        "cs336report/experiments/one.py": "from .. import d\n",
        "cs336report/experiments/two.py": "from .. import unused\n",
    })
    assert closure(["cs336report.a"], root=tmp_path) == [
        "cs336report/__init__.py", "cs336report/a.py", "cs336report/b.py", "cs336report/d.py",
        "cs336report/kern.py", "cs336report/lazy.py", "cs336report/sub/__init__.py", "cs336report/sub/c.py"]
    assert "cs336report/sections/y.py" in closure(["cs336report.uses_sections"], root=tmp_path)
    one = closure(["cs336report.experiments.one"], root=tmp_path)
    assert "cs336report/experiments/__init__.py" in one and "cs336report/experiments/two.py" not in one
    with pytest.raises(ValueError, match="not modules of cs336report: cs336report.nothing"):
        closure(["cs336report.nothing"], root=tmp_path)


# One interpreter imports torch once, then forks a child per set of modules, which imports them and
# prints the package files it has loaded (a fresh interpreter each would take minutes).
_PROBE = """
import importlib, json, os, sys
import torch
for modules in json.loads(sys.argv[1]):
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        for m in modules:
            importlib.import_module(m)
        files = sorted(getattr(mod, "__file__", None) or "" for n, mod in list(sys.modules.items())
                       if n == "cs336report" or n.startswith("cs336report."))
        print(json.dumps([modules, files]), flush=True)
        os._exit(0)
    os.waitpid(pid, 0)
"""


def test_every_module_an_experiment_imports_is_among_its_rules_code_inputs():
    """What the rules list (workflow/rules/common.smk: cell_code) against what Python actually loads."""
    from cs336report import experiments

    roots = sorted({tuple(sorted({"cs336report.run.runner", *experiments.code_modules(name)}))
                    for name in experiments.names()})
    assert len(roots) >= 8
    run = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(roots)], cwd=REPO, capture_output=True,
                         text=True, check=True)
    seen = 0
    for line in run.stdout.splitlines():
        modules, files = json.loads(line)
        loaded = {str(Path(f).resolve().relative_to(REPO)) for f in files if f}
        assert "cs336report/run/runner.py" in loaded
        missing = loaded - set(closure(modules))
        assert not missing, (modules, sorted(missing))
        seen += 1
    assert seen == len(roots)


def test_the_rules_take_their_code_inputs_from_the_closure():
    rules = {p.name: p.read_text() for p in (REPO / "workflow/rules").glob("*.smk")}
    assert "closure(" in rules["common.smk"]
    for name, text in rules.items():
        assert ".py\"" not in text, f"{name} lists source files by hand"
