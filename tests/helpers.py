"""Small builders shared by the tests: a tiny config and its cells."""

import re

import yaml

from cs336report import experiments
from cs336report.config import DEFAULT_CONFIG, Config


def tiny_config(**run) -> Config:
    with open(DEFAULT_CONFIG) as fh:
        raw = yaml.safe_load(fh)
    raw["sizes"]["micro"] = {"d_model": 32, "d_ff": 64, "num_layers": 1, "num_heads": 2, "vocab_size": 100}
    raw["run"].update(warmup_steps=1, measured_steps=3, **{"repeats": 0, **run})
    raw["grids"]["cpu"]["benchmarking"].update(sizes=["micro"], contexts=[8, 16])
    raw["grids"]["cpu"]["benchmarking_warmup"].update(size="micro", context=8, warmups=[0, 2])
    raw["grids"]["cpu"]["roofline"] = {"matmul_size": 64, "copy_mib": 1, "repeats": 2}
    return Config.from_dict(raw, cuda_available=False)


def cell(experiment: str, name: str | None = None, **run) -> tuple[str, dict]:
    cells = experiments.cells(experiment, tiny_config(**run))
    name = name or sorted(cells)[0]
    return name, cells[name]


_RECORD_LINKS = (re.compile(r'<a class="rec" href="[^"]*">(.*?)</a>'),  # HTML
                 re.compile(r"(?<!\\)\[((?:\\.|[^\]\\\n])*)\]\([^)\s]*\.json(?:\.gz)?\)"))  # Markdown


def without_record_links(text: str) -> str:
    """Rendered text with each number's link to its record replaced by the number (as it reads)."""
    for pattern in _RECORD_LINKS:
        text = pattern.sub(r"\1", text)
    return text


def run_config(checkout) -> dict:
    """The config the report rule of a checkout's workflow renders with (its default config, resolved
    here as workflow/rules/common.smk resolves it), with the cells it asks for."""
    import json

    from cs336report.config import Config
    from cs336report.experiments import with_expected_cells

    cfg = Config.from_file(checkout / "workflow" / "config" / "default.yaml")
    data = {k: v for k, v in cfg.data.items() if k not in ("worker", "jobs_elsewhere")}
    return with_expected_cells(json.loads(json.dumps({**data, "_device": cfg.device, "_grid": cfg.grid_name})))
