"""Which edition a student's checkout of the assignment is, and which release of its code.

The edition comes from the names its ``tests/adapters.py`` defines: each edition has adapters no
other edition has (2025: ``get_ddp_bucketed``, ...; 2026: ``get_fsdp``, ...), and a checkout is
the one edition whose own names it defines. The file is parsed, not imported: detection needs
neither torch nor the student's packages. The release comes from the newest version heading of
the checkout's ``CHANGELOG.md`` (``## [26.1.1] - ...``), else from ``pyproject.toml``'s
``[project].version`` where that is a release of the edition (the course has left it behind the
changelog, and a student may have made it their own), else it is unknown. A changelog whose
release belongs to another edition than the adapters is an error.

    edition, release = detect("../assignment2-systems")        # (Edition 2026, "26.1.1")
    detect("../assignment2-systems", expected=2025)             # DetectionError: it is 2026
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

from .entries import Edition

ADAPTERS_FILE = Path("tests") / "adapters.py"
CHANGELOG = "CHANGELOG.md"
PYPROJECT = "pyproject.toml"
_HEADING = re.compile(r"^##\s*\[v?(?P<version>[0-9]+(?:\.[0-9]+)+)\]", re.MULTILINE)


class DetectionError(ValueError):
    """A checkout whose edition cannot be told, or is not the one asked for; the message names the file."""


def defined_names(path: Path) -> set[str]:
    """The names a Python file binds at its top level: functions, classes, assignments and imports
    (a checkout may re-export an adapter from its own package)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except SyntaxError as exc:
        raise DetectionError(f"{path}: line {exc.lineno}: not valid Python ({exc.msg})") from None
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def read_release(checkout: str | Path) -> tuple[str | None, str | None]:
    """(release, the file it was read from) of a checkout's code, or (None, None) where neither
    CHANGELOG.md nor pyproject.toml gives one."""
    root = Path(checkout)
    changelog = root / CHANGELOG
    if changelog.is_file():
        found = _HEADING.search(changelog.read_text(encoding="utf-8", errors="replace"))
        if found:
            return found["version"], CHANGELOG
    pyproject = root / PYPROJECT
    if pyproject.is_file():
        try:
            version = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {}).get("version")
        except tomllib.TOMLDecodeError as exc:
            raise DetectionError(f"{pyproject}: not valid TOML ({exc})") from None
        if isinstance(version, str) and re.fullmatch(r"[0-9]+(\.[0-9]+)+", version):
            return version, PYPROJECT
    return None, None


def own_names(editions: tuple[Edition, ...]) -> dict[int, tuple[str, ...]]:
    """For each edition, its adapters that no other edition has, in file order."""
    out = {}
    for e in editions:
        others = {a.name for o in editions if o.id != e.id for a in o.adapters}
        out[e.id] = tuple(a.name for a in e.adapters if a.name not in others)
    return out


def _listing(names: dict[int, tuple[str, ...]]) -> str:
    return "; ".join(f"{year}: {', '.join(n)}" for year, n in names.items())


def detect_in(checkout: str | Path, editions: tuple[Edition, ...],
              expected: int | None = None) -> tuple[Edition, str | None]:
    """(edition, release) of ``checkout`` among ``editions``; see :func:`cs336report.editions.detect`."""
    root = Path(checkout)
    adapters = root / ADAPTERS_FILE
    if not adapters.is_file():
        raise DetectionError(f"{adapters}: not found; a checkout of the assignment has its adapters there")
    defined = defined_names(adapters)
    own = own_names(editions)
    matches = [e for e in editions if defined & set(own[e.id])]
    if not matches:
        raise DetectionError(f"{adapters} matches no edition: it defines none of the adapters that tell one "
                             f"({_listing(own)})")
    if len(matches) > 1:
        found = {e.id: tuple(n for n in own[e.id] if n in defined) for e in matches}
        raise DetectionError(f"{adapters} defines adapters of several editions ({_listing(found)}); keep those of "
                             "the edition you are doing")
    edition = matches[0]
    release, source = read_release(root)
    if source == PYPROJECT and not edition.holds(release):
        release = None  # the checkout's own package version (students rename it), not the course's
    if release is not None and not edition.holds(release):
        raise DetectionError(f"{root / source} says {release}, but {adapters} defines the {edition.id} adapters "
                             f"({', '.join(n for n in own[edition.id] if n in defined)}), whose releases are "
                             f"{edition.version_line}.x")
    if expected is not None and edition.id != expected:
        raise DetectionError(f"{adapters} is the {edition.id} edition (it defines "
                             f"{', '.join(n for n in own[edition.id] if n in defined)}), not the {expected} edition "
                             f"the config names; set handout: {edition.id} or point student.checkout at a "
                             f"{expected} checkout")
    return edition, release
