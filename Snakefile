# cs336report: every experiment of the CS336 Systems writeup, then the report.
#   snakemake --cores 1 report
# Snakemake's report of the run, with the writeup in it:  snakemake --report report/workflow.html
import sys

from snakemake.utils import min_version

min_version("9.0")
sys.path.insert(0, workflow.basedir)
from cs336report.config import load_file

# An empty or broken config file stops the run with a line that names it (Snakemake's own message
# does not; a file given with --configfile is read by Snakemake before this line:
# `python -m cs336report check-config FILE` names it).
load_file("workflow/config/default.yaml")


configfile: "workflow/config/default.yaml"


# validated against workflow/schemas/config.schema.yaml in common.smk (errors name the file and key)


include: "workflow/rules/common.smk"
include: "workflow/rules/check_student.smk"
include: "workflow/rules/benchmarking_script.smk"
include: "workflow/rules/flash_benchmarking.smk"
include: "workflow/rules/nsys_profile.smk"
include: "workflow/rules/pytorch_attention.smk"
include: "workflow/rules/torch_compile.smk"
include: "workflow/rules/memory_profiling.smk"
include: "workflow/rules/mixed_precision_accumulation.smk"
include: "workflow/rules/benchmarking_mixed_precision.smk"
include: "workflow/rules/handout_tests.smk"
include: "workflow/rules/distributed_communication_single_node.smk"
include: "workflow/rules/naive_ddp_benchmarking.smk"
include: "workflow/rules/minimal_ddp_flat_benchmarking.smk"
include: "workflow/rules/ddp_overlap_individual_parameters_benchmarking.smk"
include: "workflow/rules/ddp_bucketed_benchmarking.smk"
include: "workflow/rules/communication_accounting.smk"
include: "workflow/rules/optimizer_state_sharding_accounting.smk"
include: "workflow/rules/parallelism_calcs.smk"
include: "workflow/rules/gradient_checkpointing.smk"
include: "workflow/rules/fsdp_accounting.smk"
include: "workflow/rules/leaderboard.smk"
include: "workflow/rules/report.smk"


# The default target: the rendered writeup (an included file cannot set the default).
rule all:
    default_target: True
    input:
        rules.report.output,


# After a run the warm workers that ran the cells exit (they would otherwise wait for their idle
# timeout). Snakemake's own report (rule graph, run times, the writeup registered with report()):
#   snakemake --report report/workflow.html
onsuccess:
    shell(f"{PY} -m cs336report worker-stop > logs/worker-stop.log 2>&1 || true")


onerror:
    shell(f"{PY} -m cs336report worker-stop > logs/worker-stop.log 2>&1 || true")
