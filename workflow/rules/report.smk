# The writeup: every result file in, report.md and a self-contained index.html out.
# With published.render the results are the published ones and no experiment runs.
from cs336report.coverage import with_expected_cells
from cs336report.publish import published_files

REPORT_DIR = CFG.report_dir
PUBLISHED_DIR = CFG.data["published"]["dir"]
RUN_RESULTS = list(dict.fromkeys(f for files in REPORT_INPUTS.values() for f in files))
if CFG.render_published:
    REPORT_RESULTS, _published_config = published_files(PUBLISHED_DIR)
    REPORT_CONFIG = json.dumps(_published_config, sort_keys=True)
else:
    REPORT_RESULTS, REPORT_CONFIG = RUN_RESULTS, resolved_config()
# the configured cells travel with the config, so that rendering imports no experiment (nor torch)
REPORT_CONFIG = json.dumps(with_expected_cells(json.loads(REPORT_CONFIG)), sort_keys=True)


rule report:
    input:
        results=REPORT_RESULTS,
        # every module of the report package (render, tables, plots, targets, sections), and the
        # package modules it imports: the coverage of configured cells, the formulas of accounting,
        # the model's shapes, kernel classes, result loading, the job timings of publish and the
        # names and constants of the flash experiments and the nsys range parser
        code=[os.path.relpath(os.path.join(d, f), workflow.basedir)
              for d, _, fs in sorted(os.walk(os.path.join(workflow.basedir, "cs336report/report")))
              for f in sorted(fs) if f.endswith(".py")]
        + code("coverage.py", "accounting.py", "spec.py", "kernels.py", "results.py", "publish.py",
               "experiments/flash_names.py", "parsers/kernel_ranges.py"),
        templates=[os.path.join(d, f) for d, _, fs in os.walk(os.path.join(workflow.basedir, "templates")) for f in sorted(fs) if f.endswith(".j2")],
    output:
        md=f"{REPORT_DIR}/report.md",
        html=f"{REPORT_DIR}/index.html",
    params:
        config=REPORT_CONFIG,
        out=REPORT_DIR,
    log:
        "logs/report.log",
    shell:
        "{PY} -m cs336report render {input.results} --config-json {params.config:q} --out {params.out} > {log} 2>&1"


rule publish:
    input:
        results=RUN_RESULTS,
        html=rules.report.output.html,
    output:
        f"{PUBLISHED_DIR}/manifest.json",
    params:
        config=resolved_config(),
        out=PUBLISHED_DIR,
    log:
        "logs/publish.log",
    shell:
        "{PY} -m cs336report publish {input.results} --config-json {params.config:q} --out {params.out} > {log} 2>&1"


# The writeup for upload: the answers (summary and answers; the print stylesheet leaves out the
# evidence and the appendix) printed to PDF by headless Chromium.
rule writeup_pdf:
    input:
        html=rules.report.output.html,
        code=code("report/pdf.py"),
    output:
        pdf=f"{REPORT_DIR}/writeup.pdf",
    params:
        py=PY,
    log:
        "logs/writeup_pdf.log",
    shell:
        "{params.py} -m cs336report.report.pdf {input.html} {output.pdf} > {log} 2>&1"
