"""What a render is told besides its records: one frozen :class:`RenderSettings`, built once.

The report rule passes the resolved config with the keys the workflow adds (``_grid``, ``_device``,
``_expected``, ``_gpu_grid``, ``_reference_grids``; :func:`cs336report.experiments.with_expected_cells`);
:meth:`RenderSettings.from_config` is the one place that reads them. The renderer and the sections
read the records and this object, nothing else: no file of the workflow, no experiment.

    settings = RenderSettings.from_config(config)
    settings.grid, settings.device, settings.expected          # "cpu", "cpu", {"benchmarking": {...}}
    settings.grid_of("ddp_bucketed_benchmarking")              # that experiment's grid in this report
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from .. import editions



@dataclass(frozen=True)
class RenderSettings:
    """The grid and device of the report, the handout's edition, the configured cells, and the config.

    ``grid``: the grid the report's records ran on (the device's own where the config names none);
    ``expected``: the configured cells per experiment, with their settings where the caller resolved
    them, else by name (None: only what ran is known); ``gpu_grid``: for each experiment with no cells
    on this grid, the GPUs its cells of the gpu grid need; ``reference_grids``: the default config's
    grids, which a smaller grid is a cut-down of (None: not known, nothing is called cut down);
    ``config``: the config without the workflow's keys (its grids, run settings, student)."""

    grid: str = "cpu"
    device: str = "cpu"
    edition: int = editions.DEFAULT
    expected: Mapping[str, Mapping] | None = None
    gpu_grid: Mapping[str, int] = field(default_factory=dict)
    reference_grids: Mapping | None = None
    config: Mapping = field(default_factory=dict)

    @property
    def cuda(self) -> bool:
        return self.device == "cuda"

    @classmethod
    def from_config(cls, config: dict, expected: dict[str, dict] | None = None) -> RenderSettings:
        """The settings of a render of ``config``; ``expected``: the configured cells with their
        settings where the caller resolved them (:func:`cs336report.experiments.expected_cells`), else
        those the report rule passed by name (``_expected``)."""
        device = config.get("_device", "cpu")
        if expected is None and "_expected" in config:
            # the report rule's cells with their settings (a list: names alone, as older configs gave)
            expected = {name: dict(cells) if isinstance(cells, dict) else dict.fromkeys(cells)
                        for name, cells in config["_expected"].items()}
        # the edition the report rule resolved (_handout), else the config's own year, else the default
        edition = config.get("_handout", config.get("handout"))
        plain = {key: value for key, value in config.items() if not key.startswith("_")}
        return cls(grid=config.get("_grid") or ("gpu" if device == "cuda" else "cpu"), device=device,
                   edition=int(edition) if str(edition).isdigit() else editions.DEFAULT, expected=expected,
                   gpu_grid=MappingProxyType(dict(config.get("_gpu_grid") or {})),
                   reference_grids=config.get("_reference_grids"), config=MappingProxyType(plain))

    @property
    def grids(self) -> Mapping:
        """The config's grids, by name."""
        return self.config.get("grids") or {}

    def grid_of(self, experiment: str) -> dict | None:
        """``experiment``'s settings on the report's grid (None where the grid has none)."""
        return (self.grids.get(self.grid) or {}).get(experiment)
