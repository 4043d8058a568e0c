# Shared by every rules file: the resolved config, the cells of each experiment, and the
# command that runs one cell. Nothing here measures anything.
import json
import os
import sys

sys.path.insert(0, workflow.basedir)
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [workflow.basedir, os.environ.get("PYTHONPATH")]))

from cs336report import experiments
from cs336report.config import Config

CFG = Config.from_dict(config, source="workflow config")
PY = sys.executable
GPU = 1 if CFG.device == "cuda" else 0
# A job that measures takes every core Snakemake is given (threads: TIMED), so however many
# cores it has, no parse or render job runs beside a timed cell: Snakemake schedules by cores.
TIMED = workflow.cores
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
    """The config the report renders (and publish records); `worker` changes no result, so it is left out."""
    data = {key: value for key, value in CFG.data.items() if key != "worker"}
    return json.dumps({**data, "_device": CFG.device, "_grid": CFG.grid_name}, sort_keys=True)
