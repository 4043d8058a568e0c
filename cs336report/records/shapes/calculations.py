"""The shapes of the problems answered by calculation rather than measurement: the communication
accounting's parts (:class:`CommunicationAccounting`) and a calculation problem of the 2026 handout
derived in code (:class:`Derivation`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class CommunicationAccounting:
    a: list
    b: list
    c: list
    d: list
    setting: dict


@dataclass(frozen=True, kw_only=True)
class Derivation:
    """A calculation problem of the 2026 handout derived in code (cs336report.accounting.parallelism)."""

    problem: str
    section: str
    setting: dict
    parts: list
