"""Validating a config against its schema, and the messages that name the key and its file.

:func:`validate` resolves the edition's grids and sizes (:mod:`.grids`), fills in the schema's
defaults and checks the rest; its error, a :class:`~.files.ConfigError`, starts with the config file
that set the key (the last of the merged files that sets it, :func:`_file_of`) and the key's path,
and an unknown key gets the nearest known name. :func:`named` and :func:`_resolved` turn an error
of the student's checkout, the model, the course or the notes into such a message,
:func:`merged_source` names a Snakemake run's merged config where no file sets the key, and
:func:`_require_cuda` refuses ``device: cuda`` on a machine without a CUDA device.
"""

from __future__ import annotations

import copy
import difflib

import jsonschema

from .. import editions
from ..machine.cuda import devices
from .checkout import ModelError, StudentError
from .course import CourseError
from .files import ConfigError, load_file, load_schema
from .grids import edition_grids, edition_id, edition_sizes
from .notes import NotesError


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
