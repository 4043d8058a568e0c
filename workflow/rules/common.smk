# Shared by every rules file: the resolved config, the cells of each experiment, and the
# command that runs one cell. Nothing here measures anything.
# The package is installed (README: pip install -e .), or PYTHONPATH names the checkout: building
# the DAG imports no torch and runs no student or user code.
import hashlib
import json
import os
import sys
from importlib import metadata

from cs336report import editions, experiments
from cs336report.machine import bytecode, gpu_slots
from cs336report.machine.cuda import gpus_present
from cs336report.run.codeinputs import closure
from cs336report.config import Config, merged_source
from cs336report.config.checkout import CHECK_RECORD
from snakemake.exceptions import WorkflowError

# Config files in the order Snakemake merged them (the Snakefile's, then --configfile's): an error
# names the file that set the key. device: cuda must find CUDA here, unless the jobs run elsewhere
# (jobs_elsewhere, set by the SLURM profile).
_CLI_CONFIGFILES = [str(f) for f in workflow.config_settings.configfiles]
_CONFIGFILES = [
    str(f) for f in workflow.configfiles if str(f) not in _CLI_CONFIGFILES
] + _CLI_CONFIGFILES
CFG = Config.from_dict(
    config,
    source=merged_source(_CONFIGFILES),
    files=_CONFIGFILES,
    require_cuda=not config.get("jobs_elsewhere", False),
)
# The handout the report answers (config `handout`, resolved): its problems name the records'
# categories in Snakemake's report.
EDITION = editions.get(CFG.edition)
PY = sys.executable
GPU = 1 if CFG.device == "cuda" else 0
# One GPU job at a time unless --resources gpu=K says otherwise, so a run with more cores needs
# no --resources (which takes several values, and would swallow a target after it). On a
# cluster each job has its own GPU: no limit here.
if "gpu" not in workflow.global_resources and not config.get("jobs_elsewhere", False):
    workflow.register_resource("gpu", 1)
# GPU slots (cs336report/machine/gpu_slots.py): with --resources gpu=K (K > 1, at most the GPUs present)
# each GPU job runs on GPUs and cores of its own; with one slot nothing is bound, and a job that
# measures takes every core Snakemake is given (threads: TIMED), so no parse or render job runs
# beside a timed cell: Snakemake schedules by cores. With K slots a timed job takes its slots'
# cores, and the jobs that time nothing run on the cores left over. Commands that run no job
# (--unlock, --report, --lint) give no --cores: one thread stands in.
try:
    CORES = workflow.cores
except WorkflowError:
    CORES = 1
GPU_SLOTS = 1
if CFG.device == "cuda" and not config.get("jobs_elsewhere", False):
    GPU_SLOTS = max(1, min(workflow.global_resources["gpu"].value, gpus_present()))
TIMED = gpu_slots.timed_threads(CORES, GPU_SLOTS)
os.environ.update(
    {
        gpu_slots.SLOTS_ENV: str(GPU_SLOTS),
        gpu_slots.CPUS_ENV: gpu_slots.format_cpus(
            sorted(os.sched_getaffinity(0))[: max(1, CORES)]
        ),
    }
)
CELLS = {name: experiments.cells(name, CFG) for name in experiments.names()}
# Snakemake starts the ready jobs of highest priority first. With several GPU slots the rules whose
# jobs last longest start first, so that a run does not end on one long job started last (mean job
# time in the published records: compiled_model 81 s, the leaderboard and the optimized step 75 s,
# handout_tests 57 s, flash_benchmarking 55 s, compiled_attention 33 s; most other jobs 5-20 s).
LONG_JOBS_FIRST = {
    "compiled_model": 3,
    "optimized_step": 3,
    "flash_leaderboard": 3,
    "handout_tests": 2,
    "flash_benchmarking": 2,
    "compiled_attention": 1,
}
REPORT_INPUTS = {}

# Every rule runs this interpreter (the one running Snakemake, or the conda environment's python
# under --sdm conda), named in the environment so that its path is in no command line.
_CONDA = "conda" in {
    str(m).lower() for m in workflow.deployment_settings.deployment_method
}
os.environ.update(CS336REPORT_PYTHON="python" if _CONDA else PY)
CONDA_ENV = "../envs/cs336report.yaml"

# A warm worker process runs the cell (cs336report/run/worker.py); `worker: false` runs each cell in
# its own process. The choice reaches the jobs through the environment, so switching it reruns
# nothing.
os.environ.update(CS336REPORT_WORKER="1" if CFG.data["worker"] else "0")

# Where torch's installation has no bytecode and may not be given it, every job's Python reads the
# bytecode the first one compiled (cs336report/machine/bytecode.py) instead of compiling torch's again.
bytecode.apply(os.environ, os.getcwd())


# What changes a job's result beyond its cell and its code is an input or a param of its rule: the
# student's code travels in the cells (student.checkout's source hash), and the Triton that the
# jobs' Python imports is a param of the rules that run Triton (the handout's tests skip the
# Triton cases without it; the flash rules time its kernels), so installing, upgrading or removing
# Triton reruns them. Under --sdm conda the environment file pins it (Snakemake's software-env
# trigger). Not every installed package: torch and the rest are in each record's provenance.
def package_version(*names):
    """``name version`` of the first of ``names`` installed, or "not installed"."""
    for name in names:
        try:
            return f"{name} {metadata.version(name)}"
        except metadata.PackageNotFoundError:
            continue
    return "not installed"


TRITON = package_version("triton", "pytorch-triton")

# Each cell's resolved settings are a file named by their hash (written when a job needs it), so
# the command line stays short and a changed cell, which gets a new file, reruns that cell only.
SETTINGS_DIR = ".snakemake/cs336report/settings"


def settings_file(kind, name, value):
    """Path of a JSON file holding ``value``, named by its content; written once."""
    text = json.dumps(value, sort_keys=True)
    path = f"{SETTINGS_DIR}/{kind}/{name}-{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    return path


def cell_file(experiment):
    """params function: the file of the resolved cell (a new name when the cell changes)."""

    def cell(wildcards):
        return settings_file(
            experiment, wildcards.cell, CELLS[experiment][wildcards.cell]
        )

    return cell


def run_cell(experiment, command="run", out="{output}", worker=True):
    """The shell command of a rule that runs one cell of ``experiment`` (its settings in
    params.cell); ``worker=False`` runs it in a process of its own."""
    return (
        f'"$CS336REPORT_PYTHON" -m cs336report {command} {experiment} --name {{wildcards.cell}}'
        f" --cell @{{params.cell}} --out {out} --log {{log}}"
        + ("" if worker else " --no-worker")
        + " --gpus {resources.gpu} > {log} 2>&1"
    )


def cell_gpu(experiment):
    """resources function: a GPU for the cells that run on CUDA (a CPU cell needs none)."""

    def gpu(wildcards):
        return int(CELLS[experiment][wildcards.cell]["device"].startswith("cuda"))

    return gpu


def compiled_job_cells(wildcards):
    """params function of compiled_model (workflow/rules/torch_compile.smk): the file of the job's cells as [name, resolved cell] in run order (a new name
    when a cell changes, so a changed cell reruns its job)."""
    job = f"{wildcards.prefix}-compiled"
    return settings_file(
        "compiled_model",
        job,
        [[n, CELLS["compiled_model"][n]] for n in COMPILED_JOBS[job]],
    )


def nsys_job_cells(wildcards):
    """params function of nsys_profile (workflow/rules/nsys_profile.smk): the file of the job's cells as [name, resolved cell] in run order (a new
    name when a cell changes, so a changed cell reruns its job)."""
    return settings_file(
        "nsys_profile",
        wildcards.job,
        [[n, CELLS["nsys_profile"][n]] for n in NSYS_JOBS[wildcards.job]],
    )


def nsys_job_dir(wildcards):
    """input function of a cell's export and parse: the folder of the job that profiled it."""
    return f"results/nsys_profile/{NSYS_JOB_OF[wildcards.cell]}"


def nsys_profile_dir(wildcards):
    """The cell's own folder inside it."""
    return f"results/nsys_profile/{NSYS_JOB_OF[wildcards.cell]}/{wildcards.cell}"


# The problems graded by the handout's tests (rule handout_tests) rather than by a measurement.
HANDOUT_TESTED = [str(p.number) for p in EDITION.problems if p.rule == "handout_tests"]


def record(path, problem, **labels):
    """A result file registered in Snakemake's report (snakemake --report report/workflow.html):
    grouped under the handout problem it answers, with that problem's caption
    (workflow/report/<problem>.rst), one row per cell. The handout's tests grade several problems
    and have a category of their own; a problem the edition lacks (2026 has no ddp_bucketed_benchmarking)
    is named as such."""
    experiment = path.split("/")[1]
    if problem in EDITION.order:
        category = f"{EDITION.problem(problem).number:02d} {problem}"
    elif problem == "handout_tests":
        category = f"{problem} (problems {', '.join(HANDOUT_TESTED)})"
    else:
        category = f"{problem} (not a problem of the {EDITION.id} handout)"
    return report(
        path,
        caption=f"../report/{problem}.rst",
        category=category,
        subcategory=experiment,
        labels=labels or {"cell": "{cell}"},
    )


def result_files(experiment):
    return expand(f"results/{experiment}/{{cell}}.json", cell=sorted(CELLS[experiment]))


def code(*modules):
    """Source files of the modules named (cs336report.<module>) and of every package module they
    import: editing any of them reruns the rule (cs336report/run/codeinputs.py)."""
    return closure([f"cs336report.{m}" for m in modules])


# The probes of a student's checkout and a user's model (rule check_student,
# workflow/rules/check_student.smk) write this file; the cells wait for it.
STUDENT_CHECK = CHECK_RECORD


def student_check(experiment):
    """The check_student rule's output where the cells of ``experiment`` wait for it: every cell
    where the config names a student's checkout; where it names only a user's model, the cells that
    run the model (they carry ``model_source``), so that switching models reruns those and reuses
    the rest. The cells start once the probes passed. Their code and hash are in the cells, so a
    file that exists does not rerun them (ancient)."""
    waits = CFG.student or (
        CFG.model_source
        and any("model_source" in c for c in CELLS[experiment].values())
    )
    return [ancient(STUDENT_CHECK)] if waits else []


def cell_code(experiment, entry="run.runner"):
    """Source files a cell of ``experiment`` runs: ``entry`` (the runner), the modules of the
    experiment's cells and run function (named, not imported: cs336report.experiments.code_modules),
    and their imports; and the check of the student's checkout and model (:func:`student_check`).
    """
    modules = [
        m.removeprefix("cs336report.") for m in experiments.code_modules(experiment)
    ]
    return code(entry, *modules) + student_check(experiment)


def resolved_config():
    """The config the report renders (and publish records); `worker` and `jobs_elsewhere` change no
    result, so they are left out."""
    data = {
        key: value
        for key, value in CFG.data.items()
        if key not in ("worker", "jobs_elsewhere")
    }
    return {
        **data,
        "_device": CFG.device,
        "_grid": CFG.grid_name,
        "_handout": CFG.edition,
    }


def distributed_gpus(experiment):
    """resources function: the GPUs a distributed cell's processes hold
    (cs336report.machine.gpu_slots.distributed_gpus)."""

    def gpus(wildcards):
        cell = CELLS[experiment][wildcards.cell]
        limit = (
            workflow.global_resources["gpu"].value
            if "gpu" in workflow.global_resources
            else None
        )
        return gpu_slots.distributed_gpus(
            cell["backend"], cell["world_size"], gpus_present(), limit, GPU_SLOTS
        )

    return gpus


def distributed_threads(experiment):
    """threads function: a distributed cell's ranks run on the cores of the GPU slots they hold (with
    one slot, every core)."""
    gpus = distributed_gpus(experiment)

    def threads(wildcards):
        return gpu_slots.timed_threads(CORES, GPU_SLOTS, max(1, gpus(wildcards)))

    return threads
