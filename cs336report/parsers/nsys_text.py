"""The text of an nsys stats export: its encoding, its line endings, and its lines, cut when asked for.

:func:`decode` reads UTF-8 (with or without a byte-order mark), UTF-16 and UTF-32 (as a Windows
shell's redirect writes them: with a byte-order mark, or told by the reading that gives ASCII text) and
turns ``\\r\\n`` and ``\\r`` line ends into ``\\n``; :func:`read_text` also decompresses a gzip file. Bytes that are not UTF-8 become U+FFFD: they can
only be in names, never in numbers, which are ASCII. :class:`Lines` holds the offset of every
line, so that a million-row export is never held as a million strings: a line is cut out of the
text when it is read, and a table's body is handed on as one slice.
"""

from __future__ import annotations

import codecs
import gzip
import re
import zlib
from pathlib import Path

import numpy as np

from .nsys_columns import NsysParseError

__all__ = ["decode", "read_text", "Lines"]

_BOMS = (  # longest first: UTF-32-LE's mark begins with UTF-16-LE's
    (codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF32_BE, "utf-32-be"), (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_NEWLINE = re.compile("\n")


def _ascii_score(text: str) -> int:
    """Printable ASCII characters (and tabs and line ends) less NULs and other control characters: high
    for the reading of an export that puts its ASCII header and numbers back together."""
    printable = sum(1 for ch in text if " " <= ch <= "~" or ch in "\t\n\r")
    controls = sum(1 for ch in text if ch < " " and ch not in "\t\n\r")
    return printable - controls


def _sniff(head: bytes) -> str | None:
    """The UTF-16 or UTF-32 encoding of text without a byte-order mark: of UTF-8 and the four readings,
    the one that gives the most ASCII text (an export's header and numbers are ASCII in any encoding;
    its names need not be, and a name of many U+0100-like characters puts NULs where ASCII has none)."""
    head = head[:len(head) - len(head) % 4]
    if len(head) < 4 or b"\x00" not in head:
        return None
    readings = ("utf-8", "utf-32-le", "utf-32-be", "utf-16-le", "utf-16-be")  # a tie keeps the earlier
    scores = [_ascii_score(head.decode(name, errors="replace")) for name in readings]
    best = readings[scores.index(max(scores))]
    return None if best == "utf-8" else best


def decode(data: bytes) -> tuple[str, str]:
    """(the text of ``data`` with ``\\n`` line ends, the encoding it was read in)."""
    encoding = None
    for bom, name in _BOMS:
        if data.startswith(bom):
            data, encoding = data[len(bom):], name
            break
    if encoding is None:
        encoding = _sniff(data[:4096]) or "utf-8"
    text = data.decode(encoding, errors="replace")
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text, encoding


def read_text(path: str | Path) -> tuple[str, str]:
    """:func:`decode` of a file's bytes, decompressed first when they are gzip's."""
    data = Path(path).read_bytes()
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (EOFError, OSError, zlib.error) as exc:
            raise NsysParseError(str(path), 1, "a complete gzip stream", f"truncated or corrupt: {exc}") from exc
    return decode(data)


def _line_starts(text: str, chunk: int = 1 << 24) -> np.ndarray:
    """The offset of every line of ``text`` (split at ``\\n``), found a chunk at a time: by numpy where the
    chunk is ASCII, whose characters are its bytes, else by a regular expression."""
    parts = [np.zeros(1, dtype=np.int64)]
    for at in range(0, len(text), chunk):
        part = text[at:at + chunk]
        if part.isascii():
            ends = np.flatnonzero(np.frombuffer(part.encode("ascii"), dtype=np.uint8) == 10)
        else:
            ends = np.fromiter((m.start() for m in _NEWLINE.finditer(part)), dtype=np.int64)
        parts.append(ends.astype(np.int64) + (at + 1))
    starts = np.concatenate(parts)
    return starts[:-1] if len(starts) > 1 and starts[-1] == len(text) else starts  # a final line end opens none


class Lines:
    """The lines of a text (split at ``\\n`` only), each cut out, tabs expanded and trailing space
    removed, when it is read."""

    def __init__(self, text: str):
        self.text = text
        self.starts = _line_starts(text)

    def __len__(self) -> int:
        return len(self.starts) if self.text else 0

    def end(self, i: int) -> int:
        """The offset just past line ``i`` (its line end excluded)."""
        if i + 1 < len(self.starts):
            return int(self.starts[i + 1]) - 1
        return len(self.text) - self.text.endswith("\n")

    def __getitem__(self, i: int) -> str:
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self.text[int(self.starts[i]):self.end(i)].expandtabs(8).rstrip()

    def index_at(self, offset: int) -> int:
        """The line holding the character at ``offset``."""
        return int(np.searchsorted(self.starts, offset, side="right")) - 1
