"""Reading the config's files and its schema.

A YAML config file is read into its mapping (:func:`load_file`; a broken or empty file is a
:class:`ConfigError` naming it), several are merged in order as Snakemake merges its
``--configfile`` list (:func:`merge`, :func:`load_files`), and the JSON schema of
workflow/schemas/config.schema.yaml is read once per process while the file is unchanged
(:func:`load_schema`). The paths of the schema and of the default config live here, and so does
:class:`ConfigError`, the error every check of the config raises.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent.parent
SCHEMA_PATH = ROOT / "workflow" / "schemas" / "config.schema.yaml"
DEFAULT_CONFIG = ROOT / "workflow" / "config" / "default.yaml"


class ConfigError(ValueError):
    """A config value that cannot be run; the message starts with the key's path."""


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
