"""Loading, validating and resolving the experiment configuration.

The YAML config (workflow/config/default.yaml) is checked against the JSON schema in
workflow/schemas/config.schema.yaml, defaults are filled in, and then the checks a schema
cannot express run: every size a grid names must exist, a student's checkout named by
``student.checkout`` must hold the handout's tests/adapters.py, ``handout: auto`` becomes the
edition of the handout that checkout's adapters tell (else :data:`cs336report.editions.DEFAULT`;
an explicit edition the checkout contradicts is an error), and ``device: auto`` becomes
``cuda`` or ``cpu`` (asked without importing torch, :mod:`cs336report.machine.cuda`). Every
error names the config key it is about. Loading a config imports and runs no student or user
code: the checkout and the model are resolved as files (:mod:`.checkout`), and their probes run
in the workflow's first rule, check_student, and in ``python -m cs336report check-config``
(:mod:`cs336report.student.check`).

    cfg = Config.from_dict(yaml.safe_load(open("workflow/config/default.yaml")))
    cfg.device          # "cuda" or "cpu"
    cfg.edition         # 2025 or 2026: the handout the report answers
    cfg.grid("benchmarking")
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from .. import editions
from ..machine.cuda import cuda_available as machine_cuda_available, devices
from .checkout import ModelError, StudentError, checkout_entry, model_entry
from .course import CourseError, course_entry
from .notes import NotesError, check_notes

ROOT = Path(__file__).resolve().parent.parent.parent
SCHEMA_PATH = ROOT / "workflow" / "schemas" / "config.schema.yaml"
DEFAULT_CONFIG = ROOT / "workflow" / "config" / "default.yaml"


class ConfigError(ValueError):
    """A config value that cannot be run; the message starts with the key's path."""


def _key_path(parts) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<top level>"


def _with_defaults(validator_cls):
    """A validator that also fills in ``default`` values of object properties."""
    validate_properties = validator_cls.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if "default" in sub and name not in instance:
                    instance[name] = copy.deepcopy(sub["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_cls, {"properties": set_defaults})


# libyaml's loader where PyYAML was built with it (several times faster on the schema), else PyYAML's own
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.lru_cache(maxsize=None)
def _schema_text(path: str, mtime_ns: int) -> dict:
    with open(path) as fh:
        return yaml.load(fh, Loader=_SAFE_LOADER)


def load_schema(path: Path = SCHEMA_PATH) -> dict:
    """The config schema (read once per process while the file is unchanged; a copy each call)."""
    return copy.deepcopy(_schema_text(str(path), Path(path).stat().st_mtime_ns))


def load_file(path: str | Path) -> dict:
    """The mapping of a YAML config file, or ConfigError naming the file (broken YAML, empty file)."""
    try:
        with open(path) as fh:
            raw = yaml.load(fh, Loader=_SAFE_LOADER)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}: not valid YAML{where}: {problem}") from None
    if raw is None:
        raise ConfigError(f"{path}: the file is empty; a config file holds a mapping of keys, "
                          f"e.g. 'run: {{measured_steps: 10}}'")
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of keys at the top level, got {type(raw).__name__}")
    return raw


def merge(base: dict, update: dict) -> dict:
    """``update`` merged into a copy of ``base``, mappings key by key (as Snakemake merges config files)."""
    out = copy.deepcopy(base)
    for key, value in update.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def load_files(paths) -> dict:
    """The config files ``paths`` merged in order, each read by :func:`load_file`."""
    out: dict = {}
    for path in paths:
        out = merge(out, load_file(path))
    return out


def _holds(data, parts) -> bool:
    for part in parts:
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and isinstance(part, int) and part < len(data):
            data = data[part]
        else:
            return False
    return True


def _file_of(parts, files, source: str) -> str:
    """The last of ``files`` (in the order they were merged) that sets the key at ``parts``."""
    for path in reversed(list(files or [])):
        try:
            if _holds(load_file(path), parts):
                return str(path)
        except (OSError, ConfigError):
            continue
    return source


def _unknown_key_message(err, files, source: str) -> str:
    parent = list(err.absolute_path)
    known = sorted(err.schema.get("properties", {}))
    unknown = [key for key in err.instance if key not in known]
    key = unknown[0]
    near = difflib.get_close_matches(key, known, n=1, cutoff=0.5)
    hint = f"; did you mean '{near[0]}'?" if near else (f"; valid keys here: {', '.join(known)}" if known else "")
    return f"{_file_of(parent + [key], files, source)}: unknown key '{_key_path(parent + [key])}'{hint}"


def reference_grids(edition: int | None = None) -> dict:
    """The default config's grids with the handout grid of ``edition`` (default
    :data:`cs336report.editions.DEFAULT`) resolved (:func:`edition_grids`): what a report's grid is
    compared with where the report says whether its grid was cut down (the report rule passes them in
    its config, ``_reference_grids``)."""
    grids = yaml.safe_load(DEFAULT_CONFIG.read_text()).get("grids") or {}
    return edition_grids(grids, editions.DEFAULT if edition is None else edition)


# The gpu grid of workflow/config/default.yaml names this edition's sizes (its extensions beyond the
# handout's cells were chosen on that model table).
GPU_GRID_EDITION = 2025


def handout_grid(grids: dict, edition: int | None = None) -> dict:
    """The handout grid of ``edition`` (default :data:`cs336report.editions.DEFAULT`): the cells its
    registry entry asks for (``Edition.handout_grid``) with the config's ``grids.handout`` changes
    merged in, key by key, lists replaced (an experiment set to null is not run)."""
    year = editions.DEFAULT if edition is None else edition
    return merge(editions.get(year).handout_grid, grids.get("handout") or {})


# Settings of the gpu grid that another edition's handout grid decides beside the sizes: 2026's
# nsys_profile searches its contexts for the longest that fit.
EDITION_KEYS = {"nsys_profile": ("contexts", "longest_fitting")}


def _gpu_grid(grids: dict, edition: int) -> dict:
    """The gpu grid for ``edition``: as written for :data:`GPU_GRID_EDITION`; for another edition, each
    experiment its handout grid holds takes that grid's model sizes (``sizes``, ``size``) and the
    settings of :data:`EDITION_KEYS`, and in the others the sizes the edition's table lacks are left
    out (an experiment left with none is not run)."""
    gpu = copy.deepcopy(grids.get("gpu") or {})
    if edition == GPU_GRID_EDITION:
        return gpu
    table = {m.name for m in editions.get(edition).models} | set(_SMALL_SIZES)
    handout = editions.get(edition).handout_grid
    out = {}
    for name, cell in gpu.items():
        if not isinstance(cell, dict):
            out[name] = cell
            continue
        theirs = handout.get(name) or {}
        cell.update({k: theirs[k] for k in ("sizes", "size", *EDITION_KEYS.get(name, ())) if k in theirs})
        if isinstance(cell.get("sizes"), list):
            cell["sizes"] = [s for s in cell["sizes"] if s in table]
            if not cell["sizes"]:
                continue
        if "size" in cell and cell["size"] not in table:
            continue
        out[name] = cell
    return out


# The sizes of workflow/config/default.yaml that no edition's table holds (the CPU grid's models).
_SMALL_SIZES = ("tiny", "mini")


def edition_grids(grids: dict, edition: int) -> dict:
    """``grids`` with the gpu and handout grids of ``edition`` resolved (:func:`_gpu_grid`,
    :func:`handout_grid`); the cpu grid and any other grid as written."""
    out = copy.deepcopy(grids)
    out["gpu"] = _gpu_grid(grids, edition)
    out["handout"] = handout_grid(grids, edition)
    return out


def edition_sizes(sizes: dict | None, edition: int) -> dict:
    """The model sizes of a run answering ``edition``: its registry table (``Edition.models``) in the
    table's order, then the config's ``sizes`` (the CPU grid's small models, and a user's overrides,
    which win)."""
    out = {m.name: m.as_config() for m in editions.get(edition).models}
    for name, dims in (sizes or {}).items():
        out[name] = dict(dims)
    return out


def validate(raw: dict, schema: dict | None = None, source: str = "config", files=None,
             merge_handout: bool = True, edition: int | None = None) -> dict:
    """Return a copy of ``raw`` with defaults filled in, or raise ConfigError naming the key.

    ``files`` are the config files merged into ``raw``, in order: an error names the one that set the key.
    ``merge_handout``: False for a config already resolved, whose sizes and grids are the edition's.
    ``edition``: the edition whose model table and grids the config takes (default: the year its
    ``handout`` key names, else :data:`cs336report.editions.DEFAULT`).
    """
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level, got {type(raw).__name__}")
    schema = schema or load_schema()
    instance = copy.deepcopy(raw)
    # The edition's model table and grids: the handout grid is its registry entry's with the config's
    # changes laid over it, the gpu grid takes its sizes (edition_grids, edition_sizes).
    grids = instance.get("grids")
    year = edition_id(instance) if edition is None else edition
    if merge_handout and isinstance(grids, dict) and year in editions.known():  # else the schema names the key
        instance["grids"] = edition_grids(grids, year)
        if isinstance(instance.get("sizes", {}), dict):
            instance["sizes"] = edition_sizes(instance.get("sizes"), year)
    # An experiment set to null in a grid is not run there: a config file laid over another (Snakemake's
    # --configfile merge) cannot delete a key, only give it a new value.
    for grid in (instance.get("grids") or {}).values():
        if isinstance(grid, dict):
            for name in [name for name, value in grid.items() if value is None]:
                del grid[name]
    validator = _with_defaults(jsonschema.Draft202012Validator)(schema)
    errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        if err.validator == "additionalProperties" and isinstance(err.instance, dict):
            raise ConfigError(_unknown_key_message(err, files, source))
        where = _file_of(list(err.absolute_path), files, source)
        raise ConfigError(f"{where}: key '{_key_path(err.absolute_path)}': {err.message}")
    return instance


def _require_cuda(source: str) -> None:
    found = devices()
    if not found.available:
        raise ConfigError(f"{source}: key 'device': 'cuda', but this machine has no usable CUDA device (torch "
                          f"{found.torch}, {found.build}); use 'device: auto' or 'device: cpu'")


def merged_source(files) -> str:
    """How an error of a Snakemake run names where a key came from when none of the config ``files``
    (in the order they were merged) sets it: a ``--config KEY=VALUE`` of the command line, or the
    files' merge as a whole."""
    files = [str(f) for f in files or ()]
    return f"the config merged from {', '.join(files)} and --config" if files else "--config"


def named(exc: Exception, files, source: str) -> ConfigError:
    """A model or checkout error (``key: message``) as a ConfigError naming the key and the one of
    ``files`` that set it, else the one that named the checkout (whose model it is), else ``source``."""
    key, _, message = str(exc).partition(": ")
    where = _file_of(key.split("."), files, _file_of(["student", "checkout"], files, source))
    return ConfigError(f"{where}: key '{key}': {message}")


def _resolved(entry, value, source: str, files=None):
    """``entry(*value)``: the student's or the model's entry as the cells carry it, or ConfigError
    naming the key and the file that set it (:func:`named`)."""
    try:
        return entry(*value)
    except (StudentError, ModelError, CourseError, NotesError) as exc:
        raise named(exc, files, source) from None


def edition_id(data: dict) -> int:
    """The year of the edition a config reports on: as resolved for the report (``_handout``), else its
    ``handout`` key where that names a year, else :data:`cs336report.editions.DEFAULT`."""
    value = data.get("_handout", data.get("handout"))
    return int(value) if isinstance(value, int) or (isinstance(value, str) and value.isdigit()) else editions.DEFAULT


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
