"""The shapes of the numerical experiments of mixed precision: a run on one device with its rows
(:class:`DeviceRun`) and its three kinds, autocast's dtypes (:class:`AutocastDtypes`), accumulation
in low precision (:class:`Accumulation`) and the norms' sensitivity to the dtype
(:class:`NormSensitivity`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class DeviceRun:
    """A numerical experiment's run: the device and torch it ran with, and its rows."""

    device: str
    device_type: str
    experiment: str
    rows: list
    torch_version: str
    device_name: str | None = None


@dataclass(frozen=True, kw_only=True)
class AutocastDtypes(DeviceRun):
    autocast_dtype: str
    autocast_enabled: bool
    batch: int
    error: str | None
    in_features: int
    out_features: int
    requested_dtype: str
    status: str
    warnings: list


@dataclass(frozen=True, kw_only=True)
class Accumulation(DeviceRun):
    n: int
    step: float


@dataclass(frozen=True, kw_only=True)
class NormSensitivity(DeviceRun):
    eps: float
    reference_dtype: str
    rows_per_case: int
    seed: int
    summary: list
