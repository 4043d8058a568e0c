"""nsys_profile's search for the longest contexts that fit (2026): a job tries its contexts from the
longest down, an out-of-memory context is a result, the contexts below the K that fitted are skipped,
and the records, the launch record and the answer say which fitted."""

import pytest
import torch
import yaml

from cs336report import experiments
from cs336report.config import DEFAULT_CONFIG, Config
from cs336report.records.store import load
from cs336report.names.handout import Hint
from cs336report.report.render import environments
from cs336report.report.sections.nsys_profile.contexts import fit_searches
from cs336report.run import profiling, runner

TINY = {"d_model": 64, "d_ff": 256, "num_layers": 2, "num_heads": 4, "vocab_size": 10000, "rope_theta": 10000.0}


def _cells(contexts, keep, fits_up_to):
    return [(f"naive-fp32-tiny-ctx{t}-train_step", {"device": "cpu", "size": "tiny", "model": TINY, "context": t,
                                                    "mode": "train_step", "longest_fitting": keep,
                                                    "fits_up_to": fits_up_to}) for t in contexts]


def _run_job(tmp_path, monkeypatch, contexts, keep, fits_up_to, predicted=()):
    ran = []

    def run(cell):
        ran.append(cell["context"])
        if cell["context"] in predicted:
            raise RuntimeError("out of memory (predicted, not run): the step must hold 99 GiB at once")
        if cell["context"] > cell["fits_up_to"]:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 4.00 GiB")
        return {}

    monkeypatch.setattr(runner.experiments, "runner", lambda name: run)
    cells = _cells(contexts, keep, fits_up_to)
    records = runner.run_job("nsys_profile", "job", [(n, c, tmp_path / f"{n}.json") for n, c in cells], share=False)
    return cells, records, ran


def test_a_job_tries_the_longest_first_and_skips_what_it_no_longer_needs(tmp_path, monkeypatch):
    cells, records, ran = _run_job(tmp_path, monkeypatch, [4096, 2048, 1024, 512, 256], keep=2, fits_up_to=1024,
                                   predicted=(4096,))
    assert ran == [4096, 2048, 1024, 512]  # 256 is not run: two contexts already fitted
    assert [r["status"] for r in records] == ["oom", "oom", "ok", "ok", "skipped"]
    skipped = load(tmp_path / f"{cells[-1][0]}.json")
    assert skipped["status"] == "skipped" and "(1024, 512)" in skipped["error"]
    search = profiling.fit_search(cells, {n: load(tmp_path / f"{n}.json") for n, _ in cells})
    assert search["longest"] == 1024 and search["fitted"] == [1024, 512] and search["keep"] == 2
    assert [t["predicted"] for t in search["tried"]] == [True, False, False, False, False]


def test_a_size_where_fewer_fit_than_asked_runs_every_context(tmp_path, monkeypatch):
    cells, records, ran = _run_job(tmp_path, monkeypatch, [1024, 512, 256], keep=3, fits_up_to=512)
    assert ran == [1024, 512, 256] and [r["status"] for r in records] == ["oom", "ok", "ok"]


@pytest.mark.parametrize("mode", ["md", "html"])
def test_the_answer_says_which_context_is_the_longest_that_fits(tmp_path, monkeypatch, mode):
    cells, records, _ = _run_job(tmp_path, monkeypatch, [2048, 1024, 512, 256], keep=2, fits_up_to=512,
                                 predicted=(2048,))
    searches = fit_searches(records)
    assert searches == [{"size": "tiny", "keep": 2, "profiled": [512, 256], "longest": 512, "oom_measured": [1024],
                         "oom_predicted": [2048], "skipped": [], "failed": []}]
    info = {"id": "nsys_profile", "title": "nsys_profile", "rules": ["nsys_profile"], "subquestions": ["a"], "command": Hint("snakemake nsys_profile"),
            "headings": {"a": "A"}}
    text = environments()[mode].get_template("answers/nsys_profile.j2").render(
        fmt_lib=f"_{mode}.j2", d={"fit_searches": searches}, section=info)
    assert "For tiny the longest context that fits is 512, found by the run from the longest down" in text
    assert "1024 ran out of memory; 2048 cannot fit by the accounting and were not run" in text
    assert "Profiled: 512, 256." in text


def test_the_2026_grids_search_and_the_2025_grid_profiles_every_context():
    raw = yaml.safe_load(DEFAULT_CONFIG.read_text())
    for handout, grid in [(2026, "gpu"), (2026, "handout")]:
        cfg = Config.from_dict({**raw, "handout": handout, "grid": grid, "device": "cuda"}, source="t",
                               require_cuda=False)
        nsys = experiments.cells("nsys_profile", cfg)
        assert {c["context"] for c in nsys.values()} == {256, 512, 1024, 2048, 4096, 8192}
        assert {c["size"] for c in nsys.values()} == {"small", "xl"}
        assert {c["longest_fitting"] for c in nsys.values()} == {3}
    cfg = Config.from_dict({**raw, "handout": 2025, "grid": "gpu", "device": "cuda"}, source="t", require_cuda=False)
    assert not any("longest_fitting" in c for c in experiments.cells("nsys_profile", cfg).values())
