"""Where a snapshot's bytes went: per category and allocation size, and the largest allocations.

Two accumulators fed by the replay of :mod:`.snapshot`: :class:`Categories` and :class:`Largest`.
"""

from __future__ import annotations

import heapq
from array import array
from typing import Sequence

from .snapshot_frames import CATEGORIES, PHASES, FrameView, Rule, categorize, chain, format_frame, operation

__all__ = ["Categories", "Largest", "PREEXISTING"]

PREEXISTING = "Preexisting"  # the baseline that is still live


class Categories:
    """Bytes per category (in all, by phase, the largest allocation), per allocation size, and the
    live bytes of every category at chosen events.

    ``category`` decides an allocation's category from its stack and phase (cached per stack
    ``key`` and phase). Every event that changes what is live is kept as a (category, bytes)
    pair, so that :meth:`live_at` can replay them without the trace.
    """

    def __init__(self, rules: Sequence[Rule], n: int = 0, free_action: str = "free_completed"):
        self.rules = list(rules)
        self.names = list(CATEGORIES) + sorted({r.category for r in self.rules} - set(CATEGORIES))
        self.code = {c: k for k, c in enumerate(self.names)}
        self.free_action = free_action
        self.per_category = {c: {"count": 0, "total_bytes": 0, "max_bytes": 0, "by_phase": {p: 0 for p in PHASES}}
                             for c in self.names}
        self.by_size: dict[int, list] = {}  # size -> [count, {category code: count}]
        self._cache: dict[tuple, str] = {}
        self._live: dict = {}  # addr -> (size, category code), allocated in the trace
        self._codes = array("h", bytes(2 * n))  # per event: category code, -1 for a preexisting block
        self._bytes = array("q", bytes(8 * n))  # per event: change of that category's live bytes

    def category(self, key, views: Sequence[FrameView], phase: str) -> str:
        cat = self._cache.get((key, phase))
        if cat is None:
            cat = self._cache[(key, phase)] = categorize(views, phase, self.rules)[0]
        return cat

    def event(self, i: int, action: str, addr, size: int, category: str | None = None, phase: str | None = None):
        """Record event ``i``; ``category`` and ``phase`` of an allocation."""
        if action == "alloc":
            code = self.code[category]
            pc = self.per_category[category]
            pc["count"] += 1
            pc["total_bytes"] += size
            pc["by_phase"][phase] += size
            pc["max_bytes"] = max(pc["max_bytes"], size)
            stat = self.by_size.setdefault(size, [0, {}])
            stat[0] += 1
            stat[1][code] = stat[1].get(code, 0) + 1
            self._live[addr] = (size, code)
            self._codes[i], self._bytes[i] = code, size
        elif action == self.free_action:
            got = self._live.pop(addr, None)
            self._codes[i], self._bytes[i] = (-1, -size) if got is None else (got[1], -got[0])

    def live_at(self, points: Sequence[int], peak: int | None, baseline: int, peak_bytes: int):
        """Live bytes of every category at the events ``points`` (sorted) and at ``peak`` (None: the peak is
        the memory live before the first event, all of it ``Preexisting``).

        Returns (series: {category: [bytes at each point]} for the categories ever live, with
        ``Preexisting`` the baseline still live; {category: bytes live at the peak}).
        """
        series: dict[str, list[int]] = {c: [] for c in self.names + [PREEXISTING]}
        at_peak = {**{c: 0 for c in self.names}, PREEXISTING: peak_bytes}  # a peak before the first event
        running = [0] * len(self.names)
        pre = baseline
        wanted = set(points)
        for i in range(len(self._codes)):
            code, delta = self._codes[i], self._bytes[i]
            if code >= 0:
                running[code] += delta
            elif delta:
                pre += delta
            if i in wanted:
                for k, c in enumerate(self.names):
                    series[c].append(running[k])
                series[PREEXISTING].append(pre)
            if i == peak:
                at_peak = {c: running[k] for k, c in enumerate(self.names)}
                at_peak[PREEXISTING] = peak_bytes - sum(running)
        return {c: v for c, v in series.items() if any(v)}, at_peak

    def finish(self, at_peak: dict[str, int], max_sizes: int) -> tuple[dict, list[dict]]:
        """(per-category totals with their live bytes at the peak, the ``max_sizes`` sizes of largest total)."""
        for c in self.names:
            self.per_category[c]["live_at_peak_bytes"] = at_peak.get(c, 0)
        sizes = []
        for size, (count, cats) in sorted(self.by_size.items(), key=lambda kv: (-kv[0] * kv[1][0], -kv[0]))[:max_sizes]:
            sizes.append({"size": size, "count": count, "total_bytes": size * count,
                          "categories": {self.names[c]: k for c, k in sorted(cats.items(), key=lambda ck: -ck[1])}})
        return {c: self.per_category[c] for c in self.names}, sizes


class Largest:
    """The ``top_n`` largest allocations (ties: the earliest), with what made them."""

    def __init__(self, top_n: int):
        self.top_n = top_n
        self._heap: list[tuple[int, int]] = []
        self._info: dict[int, tuple] = {}

    def event(self, i: int, size: int, **info) -> None:
        """An allocation of ``size`` bytes at event ``i``; ``info``: views, category, phase, step, time_us, addr."""
        if self.top_n <= 0:
            return
        item = (size, -i)
        if len(self._heap) < self.top_n:
            heapq.heappush(self._heap, item)
        elif item > self._heap[0]:
            dropped = heapq.heapreplace(self._heap, item)
            self._info.pop(-dropped[1], None)
        else:
            return
        self._info[i] = info

    def finish(self, rules: Sequence[Rule], chain_depth: int) -> list[dict]:
        top = []
        for rank, (size, neg_i) in enumerate(sorted(self._heap, reverse=True), start=1):
            i = -neg_i
            info = self._info[i]
            views = info["views"]
            _, decider = categorize(views, info["phase"], rules)
            top.append({"rank": rank, "size": size, "category": info["category"], "operation": operation(views),
                        "index": i, "time_us": info["time_us"], "phase": info["phase"], "step": info["step"],
                        "addr": info["addr"],
                        "decided_by": format_frame(views[decider]) if decider is not None else None,
                        "chain": chain(views, chain_depth)})
        return top
