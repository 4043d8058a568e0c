# Shared by every rules file: the resolved config, the cells of each experiment, and the
# command that runs one cell. Nothing here measures anything.
import json
import os
import sys

sys.path.insert(0, workflow.basedir)
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [workflow.basedir, os.environ.get("PYTHONPATH")]))

from cs336report import experiments
from cs336report.config import Config

# Config files in the order Snakemake merged them (the Snakefile's, then --configfile's): an error
# names the file that set the key. device: cuda must find CUDA here, unless the jobs run elsewhere
# (jobs_elsewhere, set by the SLURM profile).
_CLI_CONFIGFILES = [str(f) for f in workflow.config_settings.configfiles]
CFG = Config.from_dict(
    config,
    source="--config",
    files=[str(f) for f in workflow.configfiles if str(f) not in _CLI_CONFIGFILES] + _CLI_CONFIGFILES,
    require_cuda=not config.get("jobs_elsewhere", False),
)
PY = sys.executable
GPU = 1 if CFG.device == "cuda" else 0
CELLS = {name: experiments.cells(name, CFG) for name in experiments.names()}
REPORT_INPUTS = {}

# A warm worker process runs the cell (cs336report/worker.py) and writes its output to {log};
# `worker: false` runs each cell in its own process. The flag is a name in the command, so
# switching it reruns nothing.
WORKER_FLAG = "" if CFG.data["worker"] else "--no-worker"
RUN_CELL = (
    "{PY} -m cs336report run {rule} --name {wildcards.cell} --cell {params.cell:q} --out {output}"
    " --log {log} {WORKER_FLAG} > {log} 2>&1"
)


def cell_json(experiment):
    """params function: the resolved cell as JSON, so a changed cell reruns."""

    def cell(wildcards):
        return json.dumps(CELLS[experiment][wildcards.cell], sort_keys=True)

    return cell


def result_files(experiment):
    return expand(f"results/{experiment}/{{cell}}.json", cell=sorted(CELLS[experiment]))


def code(*modules):
    """Source files a rule's results depend on: editing one reruns the rule."""
    return [os.path.join("cs336report", m) for m in modules]


def resolved_config():
    """The config the report renders (and publish records); `worker` and `jobs_elsewhere` change no
    result, so they are left out."""
    data = {key: value for key, value in CFG.data.items() if key not in ("worker", "jobs_elsewhere")}
    return json.dumps({**data, "_device": CFG.device, "_grid": CFG.grid_name}, sort_keys=True)
