"""The report's one name for each memory quantity it quotes, and what each name measures.

Table columns, titles, notes and sentences take these names from here, so a number called
"peak allocated" anywhere in the report is torch.cuda.max_memory_allocated and nothing else;
``tests/test_memory_labels.py`` checks the rendered report against them.
"""

from __future__ import annotations

PEAK_ALLOCATED = "peak allocated"
PEAK_RESERVED = "peak reserved"
SNAPSHOT_PEAK = "snapshot peak (requested)"
ALLOCATED = "allocated"
PEAK_HOST = "peak host memory"
PREDICTED = "predicted"

MEMORY_LABELS = {
    PEAK_ALLOCATED: ("torch.cuda.max_memory_allocated since the last reset: the largest total of the caching "
                     "allocator's blocks in use, each request counted at its block (rounded up to 512 bytes, and "
                     "up to 1 MiB more for a request of 10 MiB or more)"),
    PEAK_RESERVED: ("torch.cuda.max_memory_reserved: the largest total of the segments the caching allocator "
                    "held from the driver, free blocks included"),
    SNAPSHOT_PEAK: ("the largest total of live allocations in a memory snapshot's trace, each counted at the "
                    "size requested: the tensors' own bytes"),
    ALLOCATED: "torch.cuda.memory_allocated at one moment, such as before backward",
    PEAK_HOST: "the peak resident set size of a process on the host",
    PREDICTED: "the analytic formula's bytes (cs336report.accounting)",
}

# The same, in a few words, for table notes (the section text gives the long form once)
SHORT = {
    PEAK_ALLOCATED: "torch.cuda.max_memory_allocated",
    PEAK_RESERVED: "torch.cuda.max_memory_reserved",
    SNAPSHOT_PEAK: "the snapshot's largest total of live allocations, at their requested sizes",
    ALLOCATED: "torch.cuda.memory_allocated",
    PEAK_HOST: "peak resident set size",
    PREDICTED: "the formula's bytes (cs336report.accounting)",
}

# Names a peak of GPU memory must not go by: each leaves open which of the quantities above it is.
AMBIGUOUS_PEAK_NAMES = ("peak memory", "allocator peak", "memory in use", "gpu peak")


def legend(*labels: str, short: bool = True) -> str:
    """'name: what it measures' for ``labels``, joined for a table note (``short``) or a sentence."""
    meaning = SHORT if short else MEMORY_LABELS
    return "; ".join(f"{label}: {meaning[label]}" for label in labels)
