# The writeup: every result file in, report.md and a self-contained index.html out.
# With published.render the results are the published ones and no experiment runs.
from cs336report.experiments import with_expected_cells
from cs336report.steps.publish import published_files

REPORT_DIR = CFG.report_dir
# The console of a run: a line a job and its phases, and a last line naming the report
# (cs336report/machine/console.py); a dry run (a plan of jobs) and --verbose keep Snakemake's own.
if not workflow.output_settings.dryrun and not workflow.output_settings.verbose:
    from cs336report.machine import console

    console.install(REPORT_DIR)
PUBLISHED_DIR = CFG.data["published"]["dir"]
RUN_RESULTS = list(dict.fromkeys(f for files in REPORT_INPUTS.values() for f in files))
if CFG.render_published:
    REPORT_RESULTS, REPORT_CONFIG = published_files(PUBLISHED_DIR)
else:
    REPORT_RESULTS, REPORT_CONFIG = RUN_RESULTS, resolved_config()
# the configured cells travel with the config, so that rendering imports no experiment (nor torch)
REPORT_CONFIG = with_expected_cells(REPORT_CONFIG)
# the student's notes (config key notes, checked when the config was loaded): inputs of this rule only,
# so that editing a note renders the report again and runs nothing else
NOTES = (
    []
    if CFG.render_published or not CFG.notes
    else [os.path.join(CFG.notes["folder"], f) for f in CFG.notes["files"]]
)


rule report:
    input:
        results=REPORT_RESULTS,
        code=code("report.render"),
        notes=NOTES,
        templates=[
            os.path.join(d, f)
            for d, _, fs in os.walk(os.path.join(workflow.basedir, "templates"))
            for f in sorted(fs)
            if f.endswith(".j2")
        ],
    output:
        md=report(
            f"{REPORT_DIR}/report.md",
            caption="../report/writeup.rst",
            category="Writeup",
            labels={"format": "Markdown (renders on GitHub; figures in figures/)"},
        ),
        html=report(
            f"{REPORT_DIR}/index.html",
            caption="../report/writeup.rst",
            category="Writeup",
            labels={"format": "HTML (self-contained)"},
        ),
        answers=f"{REPORT_DIR}/answers.md",
        evidence=f"{REPORT_DIR}/evidence.md",
    log:
        "logs/report.log",
    conda:
        CONDA_ENV
    params:
        # the config as a file named by its content: a changed config renders again
        config=settings_file("report", "config", REPORT_CONFIG),
        out=lambda wildcards, output: os.path.dirname(output.md),
    shell:
        '"$CS336REPORT_PYTHON" -m cs336report render {input.results} --config-json @{params.config} --out {params.out} > {log} 2>&1'


rule publish:
    input:
        results=RUN_RESULTS,
        html=rules.report.output.html,
    output:
        f"{PUBLISHED_DIR}/manifest.json",
    log:
        "logs/publish.log",
    conda:
        CONDA_ENV
    params:
        config=settings_file("publish", "config", resolved_config()),
        out=lambda wildcards, output: os.path.dirname(output[0]),
        allow_dirty="--allow-dirty" if CFG.data["published"].get("allow_dirty") else "",
    shell:
        '"$CS336REPORT_PYTHON" -m cs336report publish {input.results} --config-json @{params.config} --out {params.out} '
        "{params.allow_dirty} > {log} 2>&1"


# The writeup for upload: the answers (summary and answers; the print stylesheet leaves out the
# evidence and the appendix) printed to PDF by headless Chromium.
rule writeup_pdf:
    input:
        html=rules.report.output.html,
        code=code("report.pdf"),
    output:
        pdf=f"{REPORT_DIR}/writeup.pdf",
    log:
        "logs/writeup_pdf.log",
    conda:
        CONDA_ENV
    shell:
        '"$CS336REPORT_PYTHON" -m cs336report.report.pdf {input.html} {output.pdf} > {log} 2>&1'
