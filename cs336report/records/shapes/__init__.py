"""The declared shape of each experiment's ``data``: one frozen dataclass per kind of record.

A field without a default is in every ``ok`` record of its experiment; a field with a default
(``None``) is optional: records written before it existed lack it, or only some cells write it.
An annotation says which JSON values the field may hold (``int`` admits no bool, ``float`` admits
an int, ``| None`` admits null); a nested object is a ``dict`` and a JSON array a ``list``.

:func:`check` compares a record's ``data`` with its experiment's shape; records.store checks every
record it saves and loads with it. A record that failed (any status but ``ok``) keeps what it measured
before failing: its fields are checked where declared, none is required and others may be present.
:func:`typed` reads ``data`` into its dataclass, the absent optional fields ``None``:

    shape = typed(record)          # e.g. StepTimes(stats_s={...}, repeats=None, ...)
    shape.stats_s["mean"]

The shapes live in modules by what they describe: a timed step (:mod:`.timing`), the cell, model and
provenance the report reads beside it (:mod:`.cells`), attention (:mod:`.attention`), the numerics of
mixed precision (:mod:`.numerics`), memory (:mod:`.memory`), distributed training (:mod:`.distributed`),
FlashAttention-2 (:mod:`.flash`), the handout's tests (:mod:`.handout_tests`), profiled runs
(:mod:`.profiles`) and calculations (:mod:`.calculations`). ``SHAPES`` (:mod:`.registry`) names each
experiment's shape, :mod:`.checking` checks a record against it and :mod:`.reading` reads one; every
name is importable from this package.
"""

from __future__ import annotations

from ..pair_shapes import StepPairs
from .attention import Attention, CallOverhead
from .calculations import CommunicationAccounting, Derivation
from .cells import ModelInfo, Provenance, StepConfig
from .checking import ShapeError, check
from .distributed import (Collectives, DDPCell, DDPOverlapProfile, DDPTraining, FsdpAccounting, FsdpForwardProfile,
                          LeaderboardStep, Link, OptimizerSharding)
from .flash import FlashCell, FlashLeaderboard, FlashPass, FlashShape, FlashTimes, LeaderboardRow, ReferenceCheck
from .handout_tests import ConftestFile, HandoutTests, StudentTests
from .memory import CheckpointPeaks, MemoryCapture, MemoryParse, NsysMemory, SavedTensors, Snapshot
from .numerics import Accumulation, AutocastDtypes, DeviceRun, NormSensitivity
from .profiles import NsysChecks, NsysProfile, Roofline
from .reading import phase_stats, read_as, typed
from .registry import SHAPES
from .timing import OptimizedStep, Stats, StepTimes

__all__ = [
    "Accumulation", "Attention", "AutocastDtypes", "CallOverhead", "CheckpointPeaks", "Collectives",
    "CommunicationAccounting", "ConftestFile", "DDPCell", "DDPOverlapProfile", "DDPTraining", "Derivation",
    "DeviceRun", "FlashCell", "FlashLeaderboard", "FlashPass", "FlashShape", "FlashTimes", "FsdpAccounting",
    "FsdpForwardProfile",
    "HandoutTests", "LeaderboardRow", "LeaderboardStep", "Link", "MemoryCapture", "MemoryParse", "ModelInfo",
    "NormSensitivity", "NsysChecks", "NsysMemory", "NsysProfile", "OptimizedStep", "OptimizerSharding",
    "Provenance", "ReferenceCheck", "Roofline", "SHAPES", "SavedTensors", "ShapeError", "Snapshot", "Stats",
    "StepConfig", "StepPairs", "StepTimes", "StudentTests", "check", "phase_stats", "read_as", "typed",
]
