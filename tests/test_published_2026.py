"""The published 2026 report (report/2026/, rendered from the records in report/2026/data by
workflow/config/published-2026.yaml): every problem and sub-question of the 2026 handout in the
registry's order, with the registry's points, from one run of the handout grid on one GPU."""

import json
import re
from pathlib import Path

from test_answers import answer_blocks

from cs336report import editions
from cs336report.records.store import load

REPO = Path(__file__).resolve().parents[1]
FOLDER = REPO / "report/2026"
E2026 = editions.get(2026)


def _records() -> list[dict]:
    manifest = json.loads((FOLDER / "data/manifest.json").read_text())
    return [load(REPO / f) for f in manifest["files"]]


def test_the_published_2026_answers_cover_every_problem_and_sub_question_in_order():
    md = (FOLDER / "answers.md").read_text()
    blocks = answer_blocks(md)
    assert list(blocks) == list(E2026.order)  # all 27, in the registry's order
    for p in E2026.problems:
        text = blocks[p.id]
        heading = re.search(r"## (\d+)\. .*\((\d+) pts?\)", text)
        assert heading and (int(heading.group(1)), int(heading.group(2))) == (p.number, p.points), p.id
        assert "does not answer it yet" not in text, p.id
        has_parts = all(f'<a id="{p.id}-{letter}"></a>' in text for letter in p.subquestions)
        assert has_parts or "Not run:" in text, p.id
    assert f"{len(E2026.problems)} problems, {E2026.points} points" in md.split("\n\n")[1]
    assert "Spring 2026" in md.split("\n\n")[1]


def test_the_2026_records_come_from_one_card_and_its_rerun_lines_name_the_edition():
    records = _records()
    cards = {r["provenance"].get("gpu") for r in records if r["provenance"].get("gpu")}
    assert len(cards) == 1 and len(records) > 100
    md = (FOLDER / "answers.md").read_text()
    commands = re.findall(r"`(snakemake [^`]*)`", md)
    assert commands and all("handout=2026" in c for c in commands)  # else it would run the 2025 handout
    assert next(iter(cards)) in md.split("\n\n")[1]  # the header names the card


def test_a_published_2026_number_is_its_records():
    """The xl full training step of benchmarking_script (b), as the answer prints it, is the mean of the
    record's raw step times."""
    from cs336report.report.tables import sig

    record = next(r for r in _records() if r["experiment"] == "benchmarking"
                  and r["cell"] == "naive-fp32-xl-ctx512-train_step")
    steps = record["data"]["times_s"]["measured_s"]
    assert len(steps) == record["config"]["measured_steps"]
    mean_ms = 1000 * sum(steps) / len(steps)
    row = next(line for line in answer_blocks((FOLDER / "answers.md").read_text())["benchmarking_script"].splitlines()
               if line.startswith("| xl |"))
    assert f"[{sig(mean_ms)} ±" in row


def test_the_published_capture_sizes_each_blocks_gradients():
    """memory_profiling (f): every block's backward range holds its parameters' fp32 gradient bytes,
    counted here from the model the cell ran, and the answer prints that size against the 400 MiB."""
    record = next(r for r in _records() if r["experiment"] == "memory_profiling_nsys")
    model = record["config"]["model"]
    d, d_ff = model["d_model"], model["d_ff"]
    block_bytes = 4 * (4 * d * d + 3 * d * d_ff + 2 * d)  # q, k, v, o; w1, w2, w3; two RMSNorm gains
    grads = record["data"]["nsys_memory"]["gradient_bytes"]
    assert len(grads) == model["num_layers"] and set(grads.values()) == {block_bytes}
    text = answer_blocks((FOLDER / "answers.md").read_text())["memory_profiling"]
    mib = block_bytes / 2**20
    assert re.search(rf"Its gradients take \[{mib:.0f} MiB\]\([^)]*\), 1\.00× the 400 MiB", text)
