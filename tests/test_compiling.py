"""compile_fn compiles into caches of the process's own, so a compiled cell's first call is a full
compilation even where an earlier process compiled the same graph into the machine's shared cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

# The probes compile a matrix product alone: Inductor hands it to an external kernel, so each compilation
# goes through TorchDynamo, AOTAutograd and Inductor's caches as any other, without a C++ build (which
# costs tens of seconds of a CPU core a graph and checks nothing more here).

PROBE = """
import json, os, sys, torch
import torch._inductor.config as inductor_config
from cs336report.measure.compiling import compile_fn, first_call
f = lambda x: x @ x
x = torch.randn(8, 8)
out = {"default_threads": inductor_config.compile_threads}
if sys.argv[1] == "private":  # compile_fn, with one compile thread; a second compiled call after it
    g = compile_fn(f, threads=1)
    out["two"] = None
else:
    g = torch.compile(f)
out.update(first_call(lambda: (g(x), None)[1], "cpu"))
if sys.argv[1] == "private":
    out["two"] = first_call(lambda: (g(x + 1), None)[1], "cpu")  # no compile_fn before it: no set-up to report
print(json.dumps({**out, "inductor_dir": os.environ["TORCHINDUCTOR_CACHE_DIR"]}))
"""


def _compile_in_fresh_process(mode: str, shared: Path) -> dict:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(shared), "TRITON_CACHE_DIR": str(shared / "triton"),
           "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, env=env,
                         cwd=REPO_ROOT, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_compiled_cells_do_not_read_the_machines_shared_cache_and_set_compile_threads(tmp_path):
    shared = tmp_path / "shared-inductor-cache"
    first = _compile_in_fresh_process("plain", shared)  # an earlier job fills the shared cache
    assert first["inductor_cache_misses"] >= 1 and not first["private_caches"]
    # without a setting, Inductor's own default stands
    assert first["compile_threads"] == first["default_threads"]

    private = _compile_in_fresh_process("private", shared)
    assert private["private_caches"] is True
    assert private["inductor_cache_hits"] == 0 and private["inductor_cache_misses"] >= 1
    assert not private["inductor_dir"].startswith(str(shared))
    assert not Path(private["inductor_dir"]).exists()  # the private folder went with its process
    # compile_fn(threads=1) sets Inductor's compile_threads; its set-up is reported by the first call only
    two = private["two"]
    assert private["compile_threads"] == 1 and two["compile_threads"] == 1
    assert 0 < private["setup_s"] < private["first_call_s"] + 60 and "setup_s" not in two

    control = _compile_in_fresh_process("plain", shared)  # without compile_fn the same graph is a cache hit
    assert control["inductor_cache_hits"] >= 1


def test_compiled_attention_cells_carry_compile_threads_only_where_configured():
    import yaml

    from cs336report import experiments
    from cs336report.config import DEFAULT_CONFIG, Config

    raw = yaml.safe_load(Path(DEFAULT_CONFIG).read_text())
    gpu = experiments.cells("compiled_attention", Config.from_dict(raw, cuda_available=True))
    cpu = experiments.cells("compiled_attention", Config.from_dict(raw, cuda_available=False))
    assert gpu and all(c["compile_threads"] == 1 for c in gpu.values())
    assert cpu and not any("compile_threads" in c for c in cpu.values())


WORKER_PROBE = """
import json, torch
import torch._inductor.async_compile as ac
from torch._inductor.codecache import PyCodeCache
from cs336report.measure.compiling import compile_fn, first_call
from cs336report.run.worker import global_state, reset_process_state
initial = global_state()
f = lambda x: x.t() @ x
x = torch.randn(8, 8)
calls = []
for reset in (True, False, False):  # two cells of a warm worker, then the control (no emptying before it)
    g = compile_fn(f, threads=2)
    ac.AsyncCompile.process_pool()  # its compile workers, which Inductor starts for Triton kernels on a GPU
    call = first_call(lambda: (g(x), None)[1], "cpu")
    call.update(ok=bool(torch.allclose(g(x), f(x))), loaded=len(PyCodeCache.modules), pools=len(ac._pool_set))
    reset_process_state(initial) if reset else torch._dynamo.reset()
    calls.append({**call, "loaded_after": len(PyCodeCache.modules), "pools_after": len(ac._pool_set)})
print(json.dumps(calls))
"""


def test_a_warm_workers_next_compiled_cell_compiles_from_scratch(tmp_path):
    """Between cells the worker empties the compile caches: the second cell's first call misses
    Inductor's cache as the first one did; after a TorchDynamo reset alone, the same graph hits it.
    What the process and its compile workers remember of the emptied folders goes too, or a later
    cell would get a kernel whose binary was deleted (on a GPU: "Cubin file saved by TritonBundler
    not found"): after the reset no module is loaded and no pool is left, and each cell computes
    the right value."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, "-c", WORKER_PROBE], capture_output=True, text=True, env=env,
                         cwd=REPO_ROOT, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    first, second, control = json.loads(res.stdout.strip().splitlines()[-1])
    for call in (first, second):
        assert call["private_caches"] and call["inductor_cache_misses"] >= 1 and call["inductor_cache_hits"] == 0
        assert call["ok"] and call["loaded"] >= 1 and call["pools"] == 1
    assert first["loaded_after"] == 0 and first["pools_after"] == 0  # the worker's reset
    assert second["pools_after"] == 1  # a TorchDynamo reset alone keeps the compile workers (and the cache)
    assert control["inductor_cache_hits"] >= 1 and control["ok"]



REPEAT = """
import json, os, subprocess, sys, torch
from cs336report.measure import compiling
f = lambda x: x @ x.t()
g = compiling.compile_fn(f, threads=1)
out = {"first": compiling.first_call(lambda: (g(torch.randn(8, 8)), None)[1], "cpu"), "dir": compiling.private_cache()}
if sys.argv[1] == "cell":  # the cell's first run; then its repeat, in a fresh process, as the runner starts it
    env = {**os.environ, compiling.REUSE_ENV: compiling.private_cache()}
    child = subprocess.run([sys.executable, "-c", sys.argv[2], "repeat", ""], env=env, capture_output=True,
                           text=True, timeout=300)
    assert child.returncode == 0, child.stderr[-3000:]
    out["repeat"] = json.loads(child.stdout.strip().splitlines()[-1])
    out["kept"] = os.path.isdir(compiling.private_cache())
print(json.dumps(out))
"""


def test_a_repeat_of_a_compiled_cell_loads_what_its_first_run_compiled(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("CS336REPORT_REUSE_COMPILE_CACHE", None)
    res = subprocess.run([sys.executable, "-c", REPEAT, "cell", REPEAT], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["first"]["inductor_cache_misses"] >= 1  # the cell compiled its graph
    repeat = out["repeat"]
    assert repeat["dir"] == out["dir"] and out["kept"]  # same folder, not removed by the repeat
    assert repeat["first"]["inductor_cache_hits"] >= 1 and repeat["first"]["inductor_cache_misses"] == 0


def test_the_runner_hands_a_repeat_the_cells_compile_folder(tmp_path, monkeypatch):
    from cs336report.measure import compiling
    from cs336report.run import runner

    seen = []

    def fake_run(cmd, **kwargs):
        seen.append(kwargs.get("env") or {})
        return subprocess.CompletedProcess(cmd, 1, "", "stopped here")

    monkeypatch.setattr(runner.subprocess, "run", fake_run)
    stats = {"mean": 1.0, "std": 0.2, "cv": 0.2, "n": 5}
    monkeypatch.setattr(compiling, "_private_cache", None)
    runner.repeat_in_fresh_processes("benchmarking", "c", {"repeats": 1, "noisy_cv": 0.05}, {"stats_s": stats})
    assert compiling.REUSE_ENV not in seen[-1]  # nothing compiled in this process: nothing to hand over
    monkeypatch.setattr(compiling, "_private_cache", str(tmp_path))
    runner.repeat_in_fresh_processes("benchmarking", "c", {"repeats": 1, "noisy_cv": 0.05}, {"stats_s": stats})
    assert seen[-1][compiling.REUSE_ENV] == str(tmp_path)
