# cs336report: every experiment of the CS336 Systems writeup, then the report.
#   snakemake --cores 1 report
from snakemake.utils import min_version

min_version("9.0")


configfile: "workflow/config/default.yaml"


# validated against workflow/schemas/config.schema.yaml in common.smk (errors name the file and key)


include: "workflow/rules/common.smk"
include: "workflow/rules/benchmarking.smk"
include: "workflow/rules/flash_benchmarking.smk"
include: "workflow/rules/nsys_profile.smk"
include: "workflow/rules/attention.smk"
include: "workflow/rules/torch_compile.smk"
include: "workflow/rules/memory_profiling.smk"
include: "workflow/rules/mixed_precision.smk"
include: "workflow/rules/report.smk"


# The default target: the rendered writeup (an included file cannot set the default).
rule all:
    default_target: True
    input:
        rules.report.output,


# After a successful run: the warm workers that ran the cells exit, and Snakemake's own report
# (rule graph, run times) is written beside the writeup.
onsuccess:
    shell(f"{PY} -m cs336report worker-stop || true")
    html, wf = rules.report.output.html, f"{REPORT_DIR}/workflow.html"
    if (
        not CFG.render_published
        and os.path.exists(html)
        and (
            not os.path.exists(wf) or os.path.getmtime(wf) < os.path.getmtime(html)
        )
    ):
        try:
            shell(
                f"{PY} -m snakemake --nolock all --report {wf} > logs/workflow-report.log 2>&1"
            )
        except Exception:
            with open("logs/workflow-report.log") as fh:
                last = [line.rstrip() for line in fh if line.strip()][-2:]
            print(
                f"{wf} was not written (logs/workflow-report.log): {' '.join(last)}",
                file=sys.stderr,
            )


# After a failed run the warm workers exit too (they would otherwise wait for their idle timeout).
onerror:
    shell(f"{PY} -m cs336report worker-stop || true")
