"""The parse of an Nsight capture's memory by block, on a SQLite file of the two tables nsys exports
(our own minimal fixture, built here: the same table and column names, a handful of rows)."""

import sqlite3

import pytest

from cs336report.parsers.nsys_memory import block_memory

MiB = 2**20


def _capture(path, block_ops, grads):
    """Two blocks: each forward allocates ``block_ops`` (op -> [(MiB, kept for backward)]) inside op
    ranges; each backward allocates ``grads`` MiB kept to the end and 7 MiB freed at once."""
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    db.execute("CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER, "
               "rangeId INTEGER, text TEXT, textId INTEGER, globalTid INTEGER)")
    db.execute("CREATE TABLE CUDA_GPU_MEMORY_USAGE_EVENTS (start INTEGER NOT NULL, globalPid INTEGER, "
               "deviceId INTEGER, contextId INTEGER, address INTEGER NOT NULL, pc INTEGER, bytes INTEGER NOT NULL, "
               "memKind INTEGER, memoryOperationType INTEGER NOT NULL, name TEXT, correlationId INTEGER, streamId INTEGER)")
    t, address, strings = 0, 0x1000, {}

    def nvtx(start, end, text):
        if text.startswith("block"):  # block names through StringIds, op names inline, as exports mix them
            sid = strings.setdefault(text, len(strings) + 1)
            db.execute("INSERT OR IGNORE INTO StringIds VALUES (?, ?)", (sid, text))
            db.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, textId) VALUES (?, ?, 59, ?)", (start, end, sid))
        else:
            db.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text) VALUES (?, ?, 59, ?)", (start, end, text))

    def mem(when, addr, mib, op):
        db.execute("INSERT INTO CUDA_GPU_MEMORY_USAGE_EVENTS (start, address, bytes, memoryOperationType) "
                   "VALUES (?, ?, ?, ?)", (when, addr, mib * MiB, op))

    for block in range(2):
        begin = t
        for seq, (op, allocs) in enumerate(block_ops.items()):
            op_begin = t
            for mib, kept in allocs:
                t += 1
                mem(t, address, mib, 0)
                if not kept:
                    t += 1
                    mem(t, address, mib, 1)
                address += 0x100
            t += 1
            nvtx(op_begin, t, f"{op}, seq = {seq}, sizes = [[4, 512, 2560]]")
        t += 1
        nvtx(begin, t, f"block {block} forward")
    for block in (1, 0):
        begin = t
        t += 1
        mem(t, address, grads, 0)
        address += 0x100
        t += 1
        mem(t, address, 7, 0)
        t += 1
        mem(t, address, 7, 1)
        address += 0x100
        t += 1
        nvtx(begin, t, f"block {block} backward")
    db.commit()
    db.close()


def test_saved_bytes_ops_shares_and_gradients_per_block(tmp_path):
    ops = {"aten::mm": [(20, True), (20, True)], "aten::softmax": [(50, True), (30, False)],
           "aten::mul": [(5, True)], "aten::add": [(3, True)], "aten::rsqrt": [(2, True)], "aten::view": [(1, True)]}
    path = tmp_path / "capture.sqlite"
    _capture(path, ops, grads=400)
    out = block_memory(path)
    assert out["blocks"] == 2 and out["block"] == 1
    assert out["saved_bytes"] == {0: 101 * MiB, 1: 101 * MiB}  # the 30 MiB freed inside the block is not saved
    top = out["largest_ops"]
    assert [o["op"] for o in top] == ["aten::softmax", "aten::mm", "aten::mul", "aten::add", "aten::rsqrt"]
    assert top[0]["bytes"] == 50 * MiB and top[0]["share"] == pytest.approx(50 / 101)
    assert out["gradient_bytes"] == {0: 400 * MiB, 1: 400 * MiB}  # the 7 MiB freed in backward are not gradients


def test_a_capture_without_block_ranges_is_an_error_naming_the_file(tmp_path):
    path = tmp_path / "empty.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, text TEXT, textId INTEGER)")
    db.execute("CREATE TABLE CUDA_GPU_MEMORY_USAGE_EVENTS (start INTEGER, address INTEGER, bytes INTEGER, "
               "memoryOperationType INTEGER)")
    db.close()
    with pytest.raises(ValueError, match="empty.sqlite.*block"):
        block_memory(path)


def test_a_factory_range_gives_its_bytes_to_the_operator_around_it_and_host_memory_is_left_out(tmp_path):
    """An output allocated inside ``aten::empty_strided`` (nested in ``aten::clone``) counts for the clone;
    a pinned host allocation (memKind 1) inside the block is not device memory and is not counted."""
    path = tmp_path / "nested.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, text TEXT, textId INTEGER)")
    db.execute("CREATE TABLE CUDA_GPU_MEMORY_USAGE_EVENTS (start INTEGER NOT NULL, address INTEGER NOT NULL, "
               "bytes INTEGER NOT NULL, memKind INTEGER, memoryOperationType INTEGER NOT NULL)")
    ranges = [(0, 100, "block 0 forward"), (10, 40, "aten::clone, seq = 1"), (12, 20, "aten::empty_strided"),
              (50, 60, "aten::mm, seq = 2"), (200, 300, "block 0 backward")]
    db.executemany("INSERT INTO NVTX_EVENTS (start, end, text) VALUES (?, ?, ?)", ranges)
    events = [(15, 0x10, 8 * MiB, 2, 0), (55, 0x20, 3 * MiB, 2, 0), (56, 0x30, 50 * MiB, 1, 0),
              (250, 0x40, 4 * MiB, 2, 0)]
    db.executemany("INSERT INTO CUDA_GPU_MEMORY_USAGE_EVENTS VALUES (?, ?, ?, ?, ?)", events)
    db.commit()
    db.close()
    out = block_memory(path)
    assert out["saved_bytes"] == {0: 11 * MiB}
    assert [(o["op"], o["bytes"]) for o in out["largest_ops"]] == [("aten::clone", 8 * MiB), ("aten::mm", 3 * MiB)]
    assert out["gradient_bytes"] == {0: 4 * MiB}
