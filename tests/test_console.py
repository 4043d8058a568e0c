"""The console of a workflow run (cs336report.machine.console) on Snakemake's own console handler, fed the
records Snakemake logs: a line a job, its phases from its log, a failed job's log, the last line."""

import io
import logging
import time

import pytest
from snakemake.logging import ColorizingTextHandler, DefaultFilter, DefaultFormatter
from snakemake_interface_logger_plugins.common import LogEvent

from cs336report.machine import console


@pytest.fixture
def run(tmp_path):
    """A logger with Snakemake's console handler (no colours) and the console on it; its output."""
    out = io.StringIO()
    handler = ColorizingTextHandler(nocolor=True, stream=out, formatter=DefaultFormatter(set()),
                                    filter=DefaultFilter(set(), False, False, False, False))
    handler.name = "DefaultStreamHandler"
    log = logging.getLogger(f"test-console-{tmp_path.name}")
    log.propagate = False
    log.setLevel(logging.INFO)
    log.addHandler(handler)
    cons = console.install(str(tmp_path / "report"), logger=log)
    assert cons is not None and console.install(str(tmp_path / "report"), logger=log) is cons  # once only
    yield log, out, cons, tmp_path
    log.removeHandler(handler)


def job(log, jobid, rule, logfile, **wildcards):
    log.info(f" Rule: {rule}, Jobid: {jobid}", extra=dict(
        event=LogEvent.JOB_INFO, jobid=jobid, rule_msg=None, rule_name=rule, local=True,
        input=[f"cs336report/m{i}.py" for i in range(50)], output=[f"results/{rule}/x.json"], log=[str(logfile)],
        benchmark=None, wildcards=wildcards, reason="Missing output files", resources={}, priority=0, threads=1,
        indent=False, is_checkpoint=False, printshellcmd=True, is_handover=False, shellcmd="python -m cs336report run"))


def wait_for(out, text, timeout=10.0):
    end = time.monotonic() + timeout
    while text not in out.getvalue() and time.monotonic() < end:
        time.sleep(0.05)
    return text in out.getvalue()


def test_a_job_is_one_line_and_its_phases_follow_from_its_log(run):
    log, out, cons, tmp = run
    for chatter in ("Assuming unrestricted shared filesystem usage.", "Building DAG of jobs...", "Select jobs to execute...",
                    "Using shell: /usr/bin/bash"):
        log.info(chatter)
    log.info("Job stats: ...", extra=dict(event=LogEvent.RUN_INFO, stats={"benchmarking": 2, "report": 1, "total": 3}))
    logfile = tmp / "cell.log"
    logfile.write_text("[cs336report] worker: started\n[cs336report 12:00:01] warm-up: 5 steps\n")
    log.info("Execute 1 jobs...", extra=dict(event=LogEvent.JOB_STARTED, jobs=[7]))
    job(log, 7, "benchmarking", logfile, cell="naive-fp32-tiny-ctx32-forward")
    assert wait_for(out, "    warm-up: 5 steps")
    with logfile.open("a") as fh:  # written after the poll that read the first phase, before the job ends
        fh.write("[cs336report 12:00:02] timing 10 steps\n[cs336report 12:00:0")
    log.info("Finished jobid: 7 (Rule: benchmarking)", extra=dict(event=LogEvent.JOB_FINISHED, job_id=7))
    log.info(None, extra=dict(event=LogEvent.PROGRESS, done=1, total=3))
    lines = out.getvalue().splitlines()
    assert lines[0] == "3 jobs to run; each writes its output to logs/<rule>/<cell>.log"
    assert lines[1].endswith("] 1/3 benchmarking naive-fp32-tiny-ctx32-forward") and lines[1].startswith("[")
    assert lines[2:] == ["    warm-up: 5 steps", "    timing 10 steps"]  # the half-written line waits for its end
    assert cons.jobs == {}


def test_a_failed_job_shows_the_end_of_its_log_and_the_run_ends_saying_so(run):
    log, out, cons, tmp = run
    logfile = tmp / "report.log"
    logfile.write_text("Traceback (most recent call last):\n  ...\nerror: writing report/cpu/figures/a.png: "
                       "[Errno 28] No space left on device\n")
    job(log, 3, "report", logfile)
    log.error("Error in rule report, jobid: 3", extra=dict(
        event=LogEvent.JOB_ERROR, rule_name="report", rule_msg=None, jobid=3, input=["a"] * 40, output=["b"],
        log=[str(logfile)], conda_env=None, container_img=None, aux={}, indent=False, shellcmd="x"))
    log.info("Complete log(s): /somewhere/.snakemake/log/x.log")
    log.info("Elapsed time: 0:01:05.123456")
    text = out.getvalue()
    assert "No space left on device" in text and f"its log, {logfile}, ends:" in text
    assert "message: None" not in text and "input:" not in text
    assert "Complete log(s): /somewhere/.snakemake/log/x.log" in text  # kept where a job failed
    assert text.splitlines()[-1] == "Stopped after 1 min 5 s: 1 job failed (report); each one's log is named above."


def test_the_last_line_names_the_report_once_it_is_built(run):
    log, out, cons, tmp = run
    report = tmp / "report"
    log.info("Nothing to be done (all requested files are present and up to date).")
    assert "The answers" not in out.getvalue()  # no report yet: nothing to name
    report.mkdir()
    for name in ("index.html", "answers.md"):
        (report / name).write_text("x")
    log.info("Complete log(s): /somewhere/.snakemake/log/x.log")
    log.info("Elapsed time: 0:06:19.650186")
    log.warning("a warning passes as it is")
    lines = out.getvalue().splitlines()
    assert lines[-2] == f"Done in 6 min 19 s. The answers: {report}/answers.md; the whole report: {report}/index.html"
    assert lines[-1] == "a warning passes as it is" and not any("Complete log" in line for line in lines)


def test_elapsed_times_read_as_durations():
    assert [console._duration(e) for e in ("0:11:22.247377", "1 day, 2:00:05.1", "0:00:00.3", "soon")] == \
        ["11 min 22 s", "26 h 5 s", "0 s", "soon"]
