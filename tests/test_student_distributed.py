"""The student's DDP wrappers and sharded optimizer in the timed experiments, beside ours: two Gloo
ranks on the CPU, a tiny model. Fixture tests/fixtures/student_repo: per-parameter DDP implemented
(cs336_systems.ddp.OverlapDDP), bucketed DDP raising NotImplementedError, the sharded optimizer
returning the class (not implemented); a copy of it gets a sharded optimizer of its own here."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cs336report.config import Config
from cs336report.experiments import ddp_bucketed_benchmarking as bucketed
from cs336report.experiments import ddp_overlap_individual_parameters_benchmarking as individual
from cs336report.experiments import optimizer_state_sharding_accounting as sharding
from cs336report.records.store import load
from cs336report.report.render import RenderContext, environments
from cs336report.report.settings import RenderSettings
from cs336report.report.sections import ddp_bucketed_benchmarking as bucketed_section
from cs336report.report.sections import ddp_overlap_individual_parameters_benchmarking as individual_section
from cs336report.report.sections import optimizer_state_sharding_accounting as sharding_section
from cs336report.report.student_rows import same_weights
from cs336report.run.runner import run_cell
from cs336report.student import resolve as student
from test_student import STUDENT_REPO, copy_repo, edit_adapter, entry, fresh_imports, raw_config  # noqa: F401

MICRO = {"d_model": 32, "d_ff": 64, "num_layers": 1, "num_heads": 2, "vocab_size": 100, "rope_theta": 10000.0}
SHARDING = "optimizer_state_sharding_accounting"
QUICK = {"model": MICRO, "context": 8, "warmup_steps": 1, "measured_steps": 2, "profile_steps": 0, "repeats": 0,
         "timeout_s": 120}

# A sharded optimizer of the student's own making: parameter i belongs to rank i mod world size,
# which steps it with its own optimizer_cls and then broadcasts it.
STUDENT_SHARDED = '''
import torch
import torch.distributed as dist


class RoundRobinSharded(torch.optim.Optimizer):
    def __init__(self, params, optimizer_cls, **kwargs):
        self.inner = None
        self.kwargs, self.optimizer_cls = kwargs, optimizer_cls
        super().__init__(params, kwargs)

    def add_param_group(self, group):
        super().add_param_group(group)
        rank, world = dist.get_rank(), dist.get_world_size()
        mine = [p for i, p in enumerate(self.param_groups[-1]["params"]) if i % world == rank]
        if self.inner is None:
            self.inner = self.optimizer_cls(mine, **self.kwargs)
        else:
            self.inner.add_param_group({"params": mine})

    def step(self, closure=None, **kwargs):
        self.inner.step(closure, **kwargs)
        world = dist.get_world_size()
        for group in self.param_groups:
            for i, p in enumerate(group["params"]):
                dist.broadcast(p.data, src=i % world)
'''


@pytest.fixture(scope="module")
def student_cfg() -> Config:
    raw = raw_config(STUDENT_REPO)
    raw["grids"]["cpu"]["ddp_bucketed_benchmarking"]["bucket_sizes_mb"] = [0.1, 1]  # two of the student's rows
    return Config.from_dict(raw, cuda_available=False)


def quick(cell: dict, **more) -> dict:
    return {**cell, **QUICK, **more}


def run(experiment: str, name: str, cell: dict, folder: Path) -> dict:
    """The record of one cell, as the renderer loads it."""
    run_cell(experiment, name, cell, folder / f"{name}.json")
    return load(folder / f"{name}.json")


def render(section, data: dict, mode: str = "md") -> str:
    env = environments()[mode]
    problem = section.__name__.rsplit(".", 1)[1]  # a section module is named for its problem
    info = {"id": problem, "title": problem, "rules": list(section.EXPERIMENTS)}
    fmt_lib = "_md.j2" if mode == "md" else "_html.j2"
    return env.get_template(f"answers/{problem}.j2").render(fmt_lib=fmt_lib, d=data, section=info)


def text_of(table) -> str:
    return " ".join(cell.text for row in table.rows for cell in row)


# ------------------------------------------------------------------ cells


def test_students_cells_beside_ours_and_only_with_a_checkout(student_cfg):
    cells = individual.cells(student_cfg)
    assert cells["student_individual-tiny-ctx32-w2"]["student"] == student_cfg.student  # its code's hash with it
    assert "student" not in cells["individual-tiny-ctx32-w2"]  # ours: the reference row, not rerun for theirs
    cells = bucketed.cells(student_cfg)
    assert {n for n in cells if n.startswith("student_")} == {"student_bucketed-0.1mb-tiny-ctx32-w2",
                                                             "student_bucketed-1mb-tiny-ctx32-w2"}
    cells = sharding.cells(student_cfg)
    assert [c["optimizer"] for c in cells.values()] == ["adamw", "sharded", "student", "zero"]
    assert cells["student-tiny-ctx32-b4-w2"]["student"]["sha256_16"] == student_cfg.student["sha256_16"]
    plain = Config.from_dict(raw_config(), cuda_available=False)
    for experiment in (individual, bucketed, sharding):
        assert not [n for n in experiment.cells(plain) if n.startswith("student")]


def test_the_workflow_schedules_the_students_cells():
    from test_student import dry_run

    code, output = dry_run("tests/fixtures/student_config.yaml")
    assert code == 0, output[-2000:]
    for path in ("ddp_overlap_individual_parameters_benchmarking/student_individual-tiny-ctx32-w2",
                 "ddp_bucketed_benchmarking/student_bucketed-1mb-tiny-ctx32-w2",
                 "optimizer_state_sharding_accounting/student-tiny-ctx32-b4-w2"):
        assert f"results/{path}.json" in output


def test_a_hook_that_raises_is_not_implemented_naming_it():
    impl = student.implementation("ddp_bucketed", entry(STUDENT_REPO))
    hook = student.hook(impl, "ddp_bucketed_on_after_backward")
    with pytest.raises(student.AdapterNotImplemented,
                       match=r"ddp_bucketed_on_after_backward raises NotImplementedError "
                             r"\(student_repo:ddp_bucketed_on_after_backward\)"):
        hook(torch.nn.Linear(1, 1), None)


def test_same_weights():
    assert same_weights([1.0, 1.0 + 1e-9]) and same_weights([2.0, 2.5]) is False and same_weights([1.0]) is None


# ------------------------------------------------------------------ DDP: the timed loop and the sections


@pytest.fixture(scope="module")
def ddp_records(student_cfg, tmp_path_factory) -> list[dict]:
    """Ours and the student's per-parameter DDP, and the student's bucketed DDP (not implemented)."""
    folder = tmp_path_factory.mktemp("ddp")
    cells = individual.cells(student_cfg)
    records = [run(individual.NAME, name, quick(cells[name]), folder)
               for name in ("individual-tiny-ctx32-w2", "student_individual-tiny-ctx32-w2")]
    name = "student_bucketed-0.1mb-tiny-ctx32-w2"
    records.append(run(bucketed.NAME, name, quick(bucketed.cells(student_cfg)[name]), folder))
    return records


def test_the_students_ddp_ran_in_the_timed_loop(ddp_records):
    ours, yours, _ = ddp_records
    assert ours["status"] == yours["status"] == "ok", (ours["error"], yours["error"])
    assert yours["data"]["wrapper"] == "cs336_systems.ddp.OverlapDDP"
    assert yours["data"]["provenance"] == "student_repo:get_ddp_individual_parameters"
    assert ours["data"]["wrapper"] == "cs336report.distributed.ddp.DDPIndividualParameters"
    assert ours["data"]["provenance"] == "built-in"
    for record in (ours, yours):  # the gradients were averaged: every rank ends with the same weights
        assert same_weights([r["param_checksum"] for r in record["data"]["ranks"]])
        assert len(record["data"]["ranks"][0]["measured"]) == 2 and record["data"]["stats_s"]["sync"]["n"] == 2


def test_a_raising_ddp_adapter_is_not_implemented(ddp_records):
    record = ddp_records[2]
    assert record["status"] == "not_implemented" and "get_ddp_bucketed" in record["error"]
    assert record["config"]["student"]["name"] == "student_repo"


def test_a_broken_ddp_adapter_is_an_error(tmp_path):
    repo = copy_repo(tmp_path)
    edit_adapter(repo, "    ddp_model.finish_gradient_synchronization()\n", "    1 / 0\n")
    cell = quick(individual.cells(Config.from_dict(raw_config(), cuda_available=False))["individual-tiny-ctx32-w2"],
                 variant="student_individual", student=entry(repo))
    record = run(individual.NAME, "student_individual-broken", cell, tmp_path)
    assert record["status"] == "error" and "ZeroDivisionError" in record["error"]


@pytest.mark.parametrize("mode", ["md", "html"])
def test_ddp_sections_show_the_students_rows(ddp_records, tmp_path, mode):
    ctx = RenderContext(ddp_records, RenderSettings.from_config({"_device": "cpu"}), tmp_path)
    data = individual_section.build(ctx)
    labels = [row[0].text for row in data["table"].rows]
    assert labels == ["overlapped, per parameter", "overlapped, per parameter (yours)"]
    [row] = data["student"]
    assert row["status"] == "ok" and row["same_weights"] and row["ours"]["step"] == data["individual"]["step"]
    text = render(individual_section, data, mode)
    assert "OverlapDDP" in text and "every rank ended with the same weights" in text
    data = bucketed_section.build(ctx)
    [row] = data["table"].rows
    assert row[0].text == "overlapped, bucketed (yours), 0.100 MiB buckets" and row[1].text == "not implemented"
    assert "get_ddp_bucketed" in row[2].text
    text = render(bucketed_section, data, mode)
    assert "0.100 MiB: not implemented (" in text and "get_ddp_bucketed raises NotImplementedError" in text


# ------------------------------------------------------------------ the sharded optimizer


def sharding_cell(student_cfg, optimizer: str, **more) -> dict:
    cell = sharding.cells(student_cfg)[f"{optimizer}-tiny-ctx32-b4-w2"]
    return {**cell, "model": MICRO, "context": 8, "warmup_steps": 1, "measured_steps": 2, "repeats": 0, **more}


def test_the_students_sharded_optimizer_ran_and_a_wrong_kind_is_not_implemented(student_cfg, tmp_path):
    repo = copy_repo(tmp_path)
    (repo / "cs336_systems" / "sharded.py").write_text(STUDENT_SHARDED)
    edit_adapter(repo, "    return optimizer_cls  # broken: the class, not an optimizer over params\n",
                 "    from cs336_systems.sharded import RoundRobinSharded\n\n"
                 "    return RoundRobinSharded(params, optimizer_cls, **kwargs)\n")
    records = [run(SHARDING, name, sharding_cell(student_cfg, optimizer, **more), tmp_path)
               for name, optimizer, more in (("adamw", "adamw", {}), ("sharded", "sharded", {}),
                                             ("student", "student", {"student": entry(repo)}))]
    adamw, ours, yours = records
    assert all(r["status"] == "ok" for r in records), [r["error"] for r in records]
    d = yours["data"]
    assert d["optimizer_class"] == "cs336_systems.sharded.RoundRobinSharded"
    assert d["provenance"] == f"{repo.name}:get_sharded_optimizer"
    # the state is the inner optimizer's: two fp32 moments of each element, each on exactly one rank
    assert sum(r["tensors"]["optimizer_state"] for r in d["ranks"]) == pytest.approx(8 * d["params"], rel=0.01)
    assert sum(r["owned_params"] for r in d["ranks"]) == d["params"]
    assert d["ranks"][0]["param_checksum"] == d["ranks"][1]["param_checksum"]
    assert d["ranks"][0]["issued_bytes"]["broadcast"] is None  # what it sends is its own: not counted
    assert ours["data"]["optimizer_class"] == "cs336report.distributed.sharded_optimizer.ShardedOptimizer"

    broken = run(SHARDING, "student-fixture", sharding_cell(student_cfg, "student"),
                 tmp_path)  # the fixture's adapter returns the class
    assert broken["status"] == "not_implemented" and "get_sharded_optimizer returned type" in broken["error"]

    for mode in ("md", "html"):  # the section: the student's row beside ours, or a row that says why not
        data = sharding_section.build(RenderContext(records, RenderSettings.from_config({"_device": "cpu"}), tmp_path))
        assert [row[0].text for row in data["time_table"].rows] == [
            "AdamW, not sharded", "AdamW, not sharded", "ShardedOptimizer (ours)", "ShardedOptimizer (ours)",
            "sharded optimizer (yours)", "sharded optimizer (yours)"]
        a = data["analysis"]  # its state measured as ours is (round robin by count: not balanced by size)
        assert a["student"]["expected"] == a["sharded"]["expected"] and a["student_same_weights"]
        assert a["student"]["state"] in text_of(data["memory_table"])
        text = render(sharding_section, data, mode)
        assert "RoundRobinSharded" in text and "your sharded optimizer takes" in text
        data = sharding_section.build(RenderContext([adamw, ours, broken], RenderSettings.from_config({"_device": "cpu"}), tmp_path))
        last = data["time_table"].rows[-1]
        assert [last[0].text, last[2].text] == ["sharded optimizer (yours)", "not implemented"]
        text = render(sharding_section, data, mode)
        assert "has no measurements: not implemented" in text and "get_sharded_optimizer returned type" in text


# ------------------------------------------------------------------ on GPUs

GPU_FIXTURE = Path(__file__).parent / "fixtures/student_ddp_h200"  # 2 × H200, NCCL, small model, context 128


@pytest.mark.parametrize("mode", ["md", "html"])
def test_the_students_ddp_and_sharded_optimizer_on_two_gpus(tmp_path, mode):
    """Records made on 2 H200s with NCCL from the fixture student repository: its per-parameter DDP ran
    in the timed loop beside ours, its bucketed and sharded adapters were not implemented."""
    records = []
    for path in sorted(GPU_FIXTURE.glob("*/*.json.gz")):
        record = load(path)
        record["_path"] = str(path.relative_to(GPU_FIXTURE))
        records.append(record)
    by_cell = {r["cell"]: r for r in records}
    yours = by_cell["student_individual-small-ctx128-w2"]
    assert yours["status"] == "ok" and yours["config"]["device"] == "cuda"
    assert yours["data"]["wrapper"] == "cs336_systems.ddp.OverlapDDP"
    assert same_weights([r["param_checksum"] for r in yours["data"]["ranks"]])
    assert "H200" in yours["provenance"]["gpu"] and yours["data"]["link"]["nccl_version"]
    ctx = RenderContext(records, RenderSettings.from_config({"_device": "cuda"}), tmp_path)
    data = individual_section.build(ctx)
    assert [row[0].text for row in data["table"].rows] == ["overlapped, per parameter",
                                                           "overlapped, per parameter (yours)"]
    ours_step = by_cell["individual-small-ctx128-w2"]["data"]["stats_s"]
    assert data["individual"]["step"] and ours_step
    text = render(individual_section, data, mode)
    assert "OverlapDDP" in text and "every rank ended with the same weights" in text
    text = render(bucketed_section, bucketed_section.build(ctx), mode)
    assert "100 MiB: not implemented (" in text and "get_ddp_bucketed raises NotImplementedError" in text
    data = sharding_section.build(ctx)
    assert by_cell["student-small-ctx128-b16-w2"]["status"] == "not_implemented"
    assert "get_sharded_optimizer" in render(sharding_section, data, mode)
