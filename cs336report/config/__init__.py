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

The package's modules: reading and merging the files and the schema, and ConfigError
(:mod:`.files`); the edition's model sizes and grids (:mod:`.grids`); validation and the messages
naming the key and its file (:mod:`.validation`); the Config class (:mod:`.resolve`); the student's
checkout and a user's model as files (:mod:`.checkout`), the course's clone (:mod:`.course`) and the
student's notes (:mod:`.notes`). The public names of the first four are importable from the package.
"""

from __future__ import annotations

from .files import DEFAULT_CONFIG, ROOT, SCHEMA_PATH, ConfigError, load_file, load_files, load_schema, merge
from .grids import (EDITION_KEYS, GPU_GRID_EDITION, edition_grids, edition_id, edition_sizes, handout_grid,
                    reference_grids)
from .resolve import Config
from .validation import merged_source, named, validate

__all__ = [
    "Config", "ConfigError", "DEFAULT_CONFIG", "EDITION_KEYS", "GPU_GRID_EDITION", "ROOT", "SCHEMA_PATH",
    "edition_grids", "edition_id", "edition_sizes", "handout_grid", "load_file", "load_files", "load_schema",
    "merge", "merged_source", "named", "reference_grids", "validate",
]
