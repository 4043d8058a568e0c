"""Load a PyTorch CUDA memory snapshot pickle without running anything in it.

A snapshot (``torch.cuda.memory._dump_snapshot``) holds only builtin containers and
scalars, so :func:`load_snapshot` unpickles with a ``find_class`` that refuses every
global: a pickle that names any callable or class is rejected before anything in it can
run. A gzip-compressed snapshot is decompressed as the unpickler reads it, up to a cap.
"""

from __future__ import annotations

import gzip
import os
import pickle
import zlib
from typing import Any

from .snapshot_check import SnapshotError, segments

__all__ = ["SnapshotError", "load_snapshot", "validate_snapshot", "max_decompressed_bytes", "MAX_RATIO",
           "MIN_MAX_BYTES"]

# Globals a snapshot may reference.  torch writes only builtin containers and
# scalars (see torch/csrc/cuda/Module.cpp and memory_snapshot.cpp), so none.
ALLOWED_GLOBALS: frozenset[tuple[str, str]] = frozenset()

_GZIP_MAGIC = b"\x1f\x8b"
_ZIP_MAGIC = b"PK\x03\x04"
# torch.save's legacy format (before its zip archives) pickles this number first
_TORCH_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
_PASS_INSTEAD = ("pass the file that torch.cuda.memory._dump_snapshot(path) wrote (a pickle of builtin "
                 "containers, optionally gzip-compressed)")
# Decompressed size allowed by default: this many times the compressed file, and never less
# than MIN_MAX_BYTES. Real snapshots compress about 10 to 15 times; a gzip bomb, a thousand.
MAX_RATIO = 100
MIN_MAX_BYTES = 8 << 20


# --------------------------------------------------------------------------- loading


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, file, source: str):
        super().__init__(file)
        self._source = source

    def find_class(self, module: str, name: str):
        if (module, name) in ALLOWED_GLOBALS:  # pragma: no cover - empty today
            return super().find_class(module, name)
        raise SnapshotError(
            f"{self._source}: refused to load global {module}.{name}; a memory snapshot "
            "holds only builtin containers and scalars, so this pickle is not one "
            "(loading it normally could run arbitrary code)"
        )

    def persistent_load(self, pid):
        raise SnapshotError(f"{self._source}: refused persistent id {pid!r} in pickle")


class _Capped:
    """A binary stream that refuses to give more than ``limit`` bytes in all, before reading them."""

    def __init__(self, stream, limit: int, source: str):
        self._stream, self._limit, self._source, self.count = stream, limit, source, 0

    def _take(self, n: int) -> None:
        if self.count + max(n, 0) > self._limit:
            raise SnapshotError(
                f"{self._source}: decompresses to more than {self._limit} bytes, the cap for this file "
                "(set max_bytes, CLI --max-snapshot-bytes, to allow a larger snapshot); refused before "
                "decompressing further")

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:  # the rest: at most one byte past the cap, to tell whether it is past
            data = self._stream.read(max(self._limit + 1 - self.count, 0))
            self.count += len(data)
            self._take(0)
            return data
        self._take(n)
        data = self._stream.read(n)
        self.count += len(data)
        return data

    def readinto(self, buffer) -> int:
        self._take(len(buffer))
        got = self._stream.readinto(buffer)
        self.count += got or 0
        return got

    def readline(self, size: int = -1) -> bytes:
        line = self._stream.readline(min(size, 1 << 20) if size and size > 0 else 1 << 20)
        self.count += len(line)
        self._take(0)
        return line


def max_decompressed_bytes(compressed_bytes: int, max_bytes: int | None = None) -> int:
    """The decompressed size allowed for a file of ``compressed_bytes``: ``max_bytes`` when given."""
    return int(max_bytes) if max_bytes is not None else max(MIN_MAX_BYTES, MAX_RATIO * compressed_bytes)


def _restricted_load(stream, source: str, compressed: bool) -> Any:
    """Unpickle from ``stream`` (read as it goes, never copied whole into memory)."""
    try:
        return _RestrictedUnpickler(stream, source).load()
    except SnapshotError:
        raise
    except (EOFError, OSError, zlib.error, pickle.UnpicklingError) as exc:
        what = "gzip stream (truncated or corrupt)" if compressed else "pickle (truncated or corrupt)"
        raise SnapshotError(f"{source}: not a complete {what}: {exc or type(exc).__name__}") from exc
    except Exception as exc:  # malformed opcode streams raise assorted errors
        raise SnapshotError(f"{source}: not a readable pickle: {type(exc).__name__}: {exc}") from exc


def load_snapshot(path: str | os.PathLike, max_bytes: int | None = None) -> dict:
    """Load a snapshot pickle (optionally gzip-compressed) without running code.

    The file is unpickled as it is read (through a gzip decoder when it starts with the
    gzip magic bytes), so neither the file's bytes nor the decompressed pickle are held in
    memory beside the loaded snapshot.

    A gzip file may decompress to at most ``max_bytes`` (default: :data:`MAX_RATIO` times its
    own size, at least :data:`MIN_MAX_BYTES`); past that it is refused as soon as the
    unpickler asks for more, without decompressing the rest.

    Raises :class:`SnapshotError` naming the file for an empty, truncated or
    non-pickle file, for a pickle that references any global, and for a pickle
    that does not have the shape of a snapshot.
    """
    source = os.fspath(path)
    try:
        fh = open(source, "rb")
    except OSError as exc:
        raise SnapshotError(f"{source}: cannot read file: {exc}") from exc
    with fh:
        head = fh.read(4)
        if not head:
            raise SnapshotError(f"{source}: file is empty (expected a pickled memory snapshot)")
        _refuse_archive(head, source)
        fh.seek(0)
        compressed = head[:2] == _GZIP_MAGIC
        if compressed:
            with gzip.GzipFile(fileobj=fh, mode="rb") as gz:
                try:
                    first = gz.peek(4)[:4]
                except (EOFError, OSError, zlib.error) as exc:
                    raise SnapshotError(f"{source}: truncated or corrupt gzip stream: {exc}") from exc
                if not first:
                    raise SnapshotError(f"{source}: gzip stream is empty")
                _refuse_archive(first, source)
                limit = max_decompressed_bytes(os.fstat(fh.fileno()).st_size, max_bytes)
                obj = _restricted_load(_Capped(gz, limit, source), source, compressed=True)
        else:
            obj = _restricted_load(fh, source, compressed=False)
    validate_snapshot(obj, source)
    return obj


def _refuse_archive(head: bytes, source: str) -> None:
    """A zip archive (what torch.save writes) is no snapshot: say so, and what to pass instead."""
    if head.startswith(_ZIP_MAGIC):
        raise SnapshotError(f"{source}: a zip archive, as torch.save writes (a model or tensors), not a memory "
                            f"snapshot; {_PASS_INSTEAD}")


def validate_snapshot(obj: Any, source: str = "<snapshot>") -> dict:
    """Check the top-level shape of a snapshot dict; raise :class:`SnapshotError`."""
    if isinstance(obj, int) and obj == _TORCH_LEGACY_MAGIC:
        raise SnapshotError(f"{source}: a torch.save file of the legacy format (it opens with torch's magic "
                            f"number), not a memory snapshot; {_PASS_INSTEAD}")
    if not isinstance(obj, dict):
        raise SnapshotError(
            f"{source}: pickle holds a {type(obj).__name__}, not a memory snapshot dict "
            "with 'segments' and 'device_traces'"
        )
    missing = [k for k in ("segments", "device_traces") if k not in obj]
    if missing:
        raise SnapshotError(
            f"{source}: not a memory snapshot: missing key(s) {', '.join(map(repr, missing))} "
            f"(found {sorted(map(str, obj))[:8]}); record with "
            "torch.cuda.memory._record_memory_history() and save with _dump_snapshot()"
        )
    if not isinstance(obj["segments"], list):
        raise SnapshotError(f"{source}: 'segments' is a {type(obj['segments']).__name__}, not a list")
    traces = obj["device_traces"]
    if not isinstance(traces, list) or not all(isinstance(t, list) for t in traces):
        raise SnapshotError(f"{source}: 'device_traces' must be a list of per-device lists")

    segments(obj["segments"], source)
    return obj
