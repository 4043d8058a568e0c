# The writeup: every result file in, report.md and a self-contained index.html out.
# With published.render the results are the published ones and no experiment runs.
from cs336report.publish import published_files

REPORT_DIR = CFG.report_dir
PUBLISHED_DIR = CFG.data["published"]["dir"]
RUN_RESULTS = list(dict.fromkeys(f for files in REPORT_INPUTS.values() for f in files))
if CFG.render_published:
    REPORT_RESULTS, _published_config = published_files(PUBLISHED_DIR)
    REPORT_CONFIG = json.dumps(_published_config, sort_keys=True)
else:
    REPORT_RESULTS, REPORT_CONFIG = RUN_RESULTS, resolved_config()


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
        + code("coverage.py", "accounting.py", "model.py", "kernels.py", "results.py", "publish.py",
               "experiments/flash_benchmarking.py", "experiments/flash_leaderboard.py", "parsers/kernel_ranges.py"),
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
        allow_dirty="--allow-dirty" if CFG.data["published"].get("allow_dirty") else "",
    log:
        "logs/publish.log",
    shell:
        "{PY} -m cs336report publish {input.results} --config-json {params.config:q} --out {params.out} "
        "{params.allow_dirty} > {log} 2>&1"
