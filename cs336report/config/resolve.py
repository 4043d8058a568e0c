"""The :class:`Config` class: a config validated (:mod:`.validation`) and resolved for a run.

:meth:`Config.from_dict` resolves ``device: auto`` to ``cuda`` or ``cpu``, the student's checkout
and the model as the cells carry them, ``handout`` to an edition of the registry (with ``auto``,
the one the checkout tells), and the course's clone and the student's notes against that edition,
and checks that the grid exists and names known sizes; the workflow and the experiments read the
active grid, a model size and the report folder through it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import editions
from ..machine.cuda import cuda_available as machine_cuda_available
from .checkout import checkout_entry, model_entry
from .course import course_entry
from .files import ConfigError, load_file
from .grids import edition_id
from .notes import check_notes
from .validation import _file_of, _require_cuda, _resolved, validate


@dataclass(frozen=True)
class Config:
    """A validated config with its device resolved."""

    data: dict
    device: str
    model_source: dict | None = None  # the ``model`` key as cells carry it; None = built-in model
    student: dict | None = None  # the ``student`` key as cells carry it; None = built-in implementations
    files: tuple[str, ...] = ()  # the config files merged, in order (an error names the one that set a key)
    edition: int = editions.DEFAULT  # the handout the report answers (``handout``, resolved)
    course: dict | None = None  # the course's clone as the handout_tests cells carry it; None = no clone
    notes: dict | None = None  # the student's notes folder and its notes' names; None = no notes

    @classmethod
    def from_dict(cls, raw: dict, source: str = "config", cuda_available: bool | None = None,
                  files=None, require_cuda: bool = False) -> "Config":
        """``files``: the config files merged into ``raw`` (errors name the one that set the key);
        ``require_cuda``: ``device: cuda`` must find a CUDA device here (the jobs run on this machine)."""
        data = validate(raw, source=source, files=files)
        device = data["device"]
        if device == "cuda" and require_cuda:
            _require_cuda(_file_of(["device"], files, source))
        if device == "auto":
            device = "cuda" if (machine_cuda_available() if cuda_available is None else cuda_available) else "cpu"
        cfg = cls(data=data, device=device, files=tuple(str(f) for f in files or ()))
        if data["grid"] in ("gpu", "handout") and device != "cuda":
            raise ConfigError(f"{_file_of(['grid'], files, source)}: key 'grid': {data['grid']!r} runs the "
                              f"handout's model sizes on a CUDA device; this run's device is {device} "
                              f"(use 'grid: auto' or 'grid: cpu')")
        if data["grid"] not in ("auto", *data["grids"]):
            raise ConfigError(f"{_file_of(['grid'], files, source)}: key 'grid': no grid {data['grid']!r} "
                              f"under 'grids' (there are {', '.join(data['grids'])})")
        cfg = cfg._with_student(source, files)._with_edition(source, files)
        if cfg.edition != edition_id(data):  # handout: auto, told by the student's checkout
            data = validate(raw, source=source, files=files, edition=cfg.edition)
            cfg = dataclasses.replace(cfg, data=data)
        cfg._check_sizes(source, files)
        return cfg._with_course(source, files)

    @classmethod
    def from_resolved(cls, data: dict, device: str) -> "Config":
        """The config of ``data`` that :meth:`from_dict` already validated and resolved (a report's or a
        published folder's config), taken as it is. Validating it again would merge ``grids.handout``
        over ``grids.gpu`` a second time and bring back the experiments the handout grid sets to null."""
        data = validate(data, source="resolved config", merge_handout=False)
        return (cls(data=data, device=device)._with_student("resolved config")._with_edition("resolved config")
                ._with_course("resolved config"))

    def _with_student(self, source: str, files=None) -> "Config":
        """This config with its ``student`` and ``model`` keys resolved as the cells carry them, without
        importing the student's or the user's code (the check_student rule runs it first); an error
        names the one of ``files`` that set the key."""
        student = _resolved(checkout_entry, (self.data.get("student"),), source, files)
        model = _resolved(model_entry, (self.data.get("model"), student), source, files)
        return dataclasses.replace(self, model_source=model, student=student)

    def _with_course(self, source: str, files=None) -> "Config":
        """This config with the course's clone (``course``) and the student's notes (``notes``) checked
        against its edition (:meth:`_with_edition` resolved it first)."""
        course = _resolved(course_entry, (self.data.get("course"), self.edition), source, files)
        notes = _resolved(check_notes, (self.data.get("notes"), editions.get(self.edition)), source, files)
        return dataclasses.replace(self, course=course, notes=notes)

    def _with_edition(self, source: str, files=None) -> "Config":
        """This config with ``handout`` resolved to an edition of the registry: the year it names, or
        with ``auto`` the edition that the named checkout's tests/adapters.py tells (parsed, not
        imported: :func:`cs336report.editions.detect`), else :data:`cs336report.editions.DEFAULT`. A
        year that the checkout contradicts, or a checkout of no known edition, is a ConfigError naming
        the config file and the key."""
        asked = self.data.get("handout", "auto")
        year = None if asked == "auto" else int(asked)
        if not self.student:
            return dataclasses.replace(self, edition=year or editions.DEFAULT)
        checkout = _file_of(["student", "checkout"], files, source)
        try:
            found, _ = editions.detect(self.student["checkout"])
        except editions.DetectionError as exc:
            raise ConfigError(f"{checkout}: key 'student.checkout': {exc}") from None
        if year is not None and found.id != year:
            where = _file_of(["handout"], files, source)
            also = "" if where == checkout else f" (set in {checkout})"
            raise ConfigError(f"{where}: key 'handout': {year}, but the checkout of 'student.checkout'{also}, "
                              f"{self.student['checkout']}, is of the {found.id} edition (its tests/adapters.py); "
                              f"set 'handout: {found.id}' or 'handout: auto'")
        return dataclasses.replace(self, edition=found.id)

    @classmethod
    def from_file(cls, path: str | Path, **kwargs) -> "Config":
        return cls.from_dict(load_file(path), source=str(path), **kwargs)

    @property
    def grid_name(self) -> str:
        """The grid this run measures: ``grid``, or with ``grid: auto`` the gpu grid on CUDA and
        the cpu grid otherwise."""
        if self.data["grid"] != "auto":
            return self.data["grid"]
        return "gpu" if self.device == "cuda" else "cpu"

    @property
    def run(self) -> dict[str, Any]:
        return self.data["run"]

    @property
    def report_dir(self) -> str:
        if self.data["report_dir"] != "auto":
            return self.data["report_dir"]
        # a run renders into a folder of its grid's own: the committed report/ holds the published
        # report, whose files, being present, would otherwise make Snakemake skip a fresh run
        return "report" if self.render_published else f"report/{self.grid_name}"

    @property
    def render_published(self) -> bool:
        return self.data["published"]["render"]

    def grid(self, section: str) -> dict[str, Any] | None:
        """The settings of ``section`` in the active grid, or None if it is not configured."""
        return self.data["grids"][self.grid_name].get(section)

    def size(self, name: str) -> dict[str, Any]:
        return dict(self.data["sizes"][name])

    def _check_sizes(self, source: str, files=None) -> None:
        known = self.data["sizes"]
        for grid_name, grid in self.data["grids"].items():
            for section, settings in grid.items():
                names = settings.get("sizes", [])
                for i, name in enumerate(names):
                    if name not in known:
                        where = _file_of(["grids", grid_name, section, "sizes", i], files, source)
                        raise ConfigError(
                            f"{where}: key 'grids.{grid_name}.{section}.sizes[{i}]': unknown size "
                            f"{name!r}; known sizes: {', '.join(known)}"
                        )
                if "size" in settings and settings["size"] not in known:
                    where = _file_of(["grids", grid_name, section, "size"], files, source)
                    raise ConfigError(
                        f"{where}: key 'grids.{grid_name}.{section}.size': unknown size "
                        f"{settings['size']!r}; known sizes: {', '.join(known)}"
                    )
