"""The out-of-memory message parser: sizes in bytes from PyTorch's wording, nothing from other text."""

from cs336report.parsers.oom import fragmented, oom_bytes

GiB, MiB = 2**30, 2**20

FORWARD = ("OutOfMemoryError: out of memory in the timed forward passes: CUDA out of memory. Tried to allocate "
           "32.00 GiB. GPU 0 has a total capacity of 139.80 GiB of which 10.84 GiB is free. Including non-PyTorch "
           "memory, this process has 128.92 GiB memory in use. Of the allocated memory 96.16 GiB is allocated by "
           "PyTorch, and 32.00 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is "
           "large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.")
BACKWARD = FORWARD.replace("32.00 GiB is reserved", "31.95 GiB is reserved").replace("10.84 GiB is free",
                                                                                      "10.94 GiB is free")


def test_reads_every_size_of_the_message_in_bytes():
    sizes = oom_bytes(FORWARD)
    assert sizes == {"requested": 32 * GiB, "capacity": round(139.80 * GiB), "free": round(10.84 * GiB),
                     "in_use": round(128.92 * GiB), "allocated": round(96.16 * GiB), "unallocated": 32 * GiB}


def test_other_units_and_partial_messages():
    assert oom_bytes("CUDA out of memory. Tried to allocate 20.00 MiB.") == {"requested": 20 * MiB}
    assert oom_bytes("Tried to allocate 512 B") == {"requested": 512}


def test_other_messages_give_nothing():
    for text in (None, "", "RuntimeError: CUDA error: an illegal memory access was encountered",
                 "DefaultCPUAllocator: can't allocate memory: you tried to allocate 123 bytes"):
        assert oom_bytes(text) == {}
        assert fragmented(oom_bytes(text)) is None


def test_fragmented_when_the_cached_memory_held_the_request_but_not_in_one_block():
    assert fragmented(oom_bytes(FORWARD)) is True
    assert fragmented(oom_bytes(BACKWARD)) is False  # 31.95 GiB cached: short of the 32 GiB asked for
    roomy = FORWARD.replace("10.84 GiB is free", "40.00 GiB is free")
    assert fragmented(oom_bytes(roomy)) is False  # the card itself had room for a new block
