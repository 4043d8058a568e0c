"""compile_fn compiles into caches of the process's own, so a compiled cell's first call is a full
compilation even where an earlier process compiled the same graph into the machine's shared cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import json, os, sys, torch
from cs336report.compiling import compile_fn, first_call
f = lambda x: (x.sin() * 2 + 1).sum()
g = compile_fn(f) if sys.argv[1] == "private" else torch.compile(f)
x = torch.randn(64)
info = first_call(lambda: (g(x), None)[1], "cpu")
print(json.dumps({**info, "inductor_dir": os.environ["TORCHINDUCTOR_CACHE_DIR"]}))
"""


def _compile_in_fresh_process(mode: str, shared: Path) -> dict:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(shared), "TRITON_CACHE_DIR": str(shared / "triton"),
           "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, env=env,
                         cwd=REPO_ROOT, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_compiled_cells_do_not_read_the_machines_shared_cache(tmp_path):
    shared = tmp_path / "shared-inductor-cache"
    first = _compile_in_fresh_process("plain", shared)  # an earlier job fills the shared cache
    assert first["inductor_cache_misses"] >= 1 and not first["private_caches"]

    private = _compile_in_fresh_process("private", shared)
    assert private["private_caches"] is True
    assert private["inductor_cache_hits"] == 0 and private["inductor_cache_misses"] >= 1
    assert not private["inductor_dir"].startswith(str(shared))
    assert not Path(private["inductor_dir"]).exists()  # the private folder went with its process

    control = _compile_in_fresh_process("plain", shared)  # without compile_fn the same graph is a cache hit
    assert control["inductor_cache_hits"] >= 1


THREADS_PROBE = """
import json, sys, torch
from cs336report.compiling import compile_fn, first_call
f = lambda x: (x.cos() * 3 - 1).sum()
threads = None if sys.argv[1] == "default" else int(sys.argv[1])
g = compile_fn(f, threads=threads)
x = torch.randn(64)
one = first_call(lambda: (g(x), None)[1], "cpu")
two = first_call(lambda: (g(x + 1), None)[1], "cpu")  # no compile_fn before it: no set-up to report
print(json.dumps({"one": one, "two": two}))
"""


def test_compile_fn_sets_compile_threads_and_the_first_call_reports_the_set_up_once(tmp_path):
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "c"),
           "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    out = {}
    for mode in ("1", "default"):
        res = subprocess.run([sys.executable, "-c", THREADS_PROBE, mode], capture_output=True, text=True, env=env,
                             cwd=REPO_ROOT, timeout=300)
        assert res.returncode == 0, res.stderr[-3000:]
        out[mode] = json.loads(res.stdout.strip().splitlines()[-1])
    one, two = out["1"]["one"], out["1"]["two"]
    assert one["compile_threads"] == 1 and two["compile_threads"] == 1
    assert 0 < one["setup_s"] < one["first_call_s"] + 60 and "setup_s" not in two
    # without a setting, Inductor's own default stands
    import torch._inductor.config as inductor_config

    assert out["default"]["one"]["compile_threads"] == inductor_config.compile_threads


def test_compiled_attention_cells_carry_compile_threads_only_where_configured():
    import yaml

    from cs336report import experiments
    from cs336report.config import DEFAULT_CONFIG, Config

    raw = yaml.safe_load(Path(DEFAULT_CONFIG).read_text())
    gpu = experiments.cells("compiled_attention", Config.from_dict(raw, cuda_available=True))
    cpu = experiments.cells("compiled_attention", Config.from_dict(raw, cuda_available=False))
    assert gpu and all(c["compile_threads"] == 1 for c in gpu.values())
    assert cpu and not any("compile_threads" in c for c in cpu.values())
