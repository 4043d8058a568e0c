# The writeup: every result file in, report.md and a self-contained index.html out.
REPORT_DIR = CFG.report_dir


rule report:
    input:
        results=[f for files in REPORT_INPUTS.values() for f in files],
        code=code("report/render.py", "report/tables.py", "report/plots.py")
        + [os.path.join("cs336report/report/sections", f) for f in sorted(os.listdir(os.path.join(workflow.basedir, "cs336report/report/sections"))) if f.endswith(".py")],
        templates=[os.path.join(d, f) for d, _, fs in os.walk(os.path.join(workflow.basedir, "templates")) for f in sorted(fs) if f.endswith(".j2")],
    output:
        md=f"{REPORT_DIR}/report.md",
        html=f"{REPORT_DIR}/index.html",
    params:
        config=resolved_config(),
        out=REPORT_DIR,
    log:
        "logs/report.log",
    shell:
        "{PY} -m cs336report render {input.results} --config-json {params.config:q} --out {params.out} > {log} 2>&1"
