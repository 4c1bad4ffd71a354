"""The decode loop's C staging (runtime_pyx/stepper.pyx) against the formulas it replaces, on
random block tables, prompt lengths, groups and slot counts; its token wait."""
import threading
import time

import numpy as np
import pytest

from fixedgraph._stepper import DecodeStager, RingWaiter, StepHistory
from fixedgraph.models.meta import MetaLayout
from fixedgraph.ops import sample as sample_ops


def _setup(rng, num_slots, block_size, max_blocks, ring_len):
    layout = MetaLayout(1, 1, max_blocks)
    slot_bytes = layout.nbytes
    staging = np.zeros(num_slots * slot_bytes + 24, np.uint8)  # a tail the stager must not touch
    staging[:] = rng.integers(0, 256, staging.size)
    ring = rng.integers(0, 1000, ring_len).astype(np.int32)
    offsets = {name: layout.offset(name) for name in ("positions", "slot", "seq_len", "step")}
    offsets["counter"] = layout.offset("sample") + 4 * sample_ops.STEP_WORD
    st = DecodeStager(staging, slot_bytes, num_slots, offsets, ring, block_size, max_blocks)
    return layout, slot_bytes, staging, ring, st


@pytest.mark.parametrize("sampling", [False, True])
def test_stage_writes_what_the_python_loop_wrote(sampling):
    rng = np.random.default_rng(7 + sampling)
    for trial in range(20):
        num_slots, bs = int(rng.integers(2, 9)), int(rng.choice([1, 4, 16, 32]))
        max_blocks, ring_len = 64, int(rng.integers(3, 12))
        layout, slot_bytes, staging, ring, st = _setup(rng, num_slots, bs, max_blocks, ring_len)
        n = int(rng.integers(1, 200 if bs > 1 else 40))
        first, k = int(rng.integers(1, 20)), int(rng.integers(1, 9))
        passes = int(rng.integers(0, 1000))
        blocks_needed = (n + first + k - 2) // bs + 1
        table = rng.permutation(5000)[:blocks_needed].tolist()
        st.set_table(table)
        want_blob, want_ring = staging.copy(), ring.copy()
        for step in range(first, first + k):  # the Python loop's formulas (runner, session 29)
            pos = n + step - 1
            off = ((passes + step - first) % num_slots) * slot_bytes
            v = layout.views(want_blob[off: off + slot_bytes])
            v["positions"][0] = pos
            v["slot"][0] = table[pos // bs] * bs + pos % bs
            v["seq_len"][0] = pos + 1
            v["step"][0] = step
            if sampling:
                v["sample"][0, sample_ops.STEP_WORD] = step
            want_ring[step % ring_len] = -1
        st.stage(passes, first, k, n, sampling)
        np.testing.assert_array_equal(staging, want_blob, err_msg=f"trial {trial}")
        np.testing.assert_array_equal(ring, want_ring, err_msg=f"trial {trial}")


def test_stage_refuses_a_step_past_the_table_and_writes_nothing():
    rng = np.random.default_rng(3)
    _, _, staging, ring, st = _setup(rng, 4, 16, 8, 6)
    st.set_table([5, 9])  # positions 0..31
    before, ring_before = staging.copy(), ring.copy()
    with pytest.raises(IndexError, match="position 32 needs block 2 but the table holds 2"):
        st.stage(0, 1, 4, 29, False)  # steps 1-4: positions 29..32
    np.testing.assert_array_equal(staging, before)
    np.testing.assert_array_equal(ring, ring_before)
    st.append_block(11)
    st.stage(0, 1, 4, 29, False)
    assert st.table_len == 3
    for bad in [(0, 0, 1, 5), (0, 1, 0, 5), (0, 1, 1, 0), (-1, 1, 1, 5)]:
        with pytest.raises(ValueError, match="bad decode steps"):
            st.stage(*bad, False)
    with pytest.raises(ValueError, match="exceeds max_blocks 8"):
        st.set_table(list(range(9)))
    st.set_table(list(range(8)))
    with pytest.raises(ValueError, match="block table is full"):
        st.append_block(1)


def test_stager_checks_its_layout():
    staging, ring = np.zeros(256, np.uint8), np.zeros(4, np.int32)
    offs = {"positions": 0, "slot": 8, "seq_len": 16, "step": 20, "counter": 24}
    with pytest.raises(ValueError, match="do not fit"):
        DecodeStager(staging, 64, 5, offs, ring, 16, 8)
    with pytest.raises(ValueError, match="'slot' at byte 60"):
        DecodeStager(staging, 64, 4, {**offs, "slot": 60}, ring, 16, 8)
    with pytest.raises(ValueError, match="no offset given for the metadata field 'counter'"):
        DecodeStager(staging, 64, 4, {k: v for k, v in offs.items() if k != "counter"}, ring, 16, 8)
    with pytest.raises(ValueError, match="token ring is empty"):
        DecodeStager(staging, 64, 4, offs, np.zeros(0, np.int32), 16, 8)


def test_step_history_records_k_steps_and_wraps():
    a, b, c = np.zeros(5), np.zeros(5), np.zeros(5)
    h = StepHistory(a, b, c)
    h.record(2e-6, 1e-6, 1.5e-6, 3)
    h.record(4e-6, 3e-6, 3.5e-6, 4)  # 7 steps into 5 entries: the last two wrap to the front
    assert h.count == 7
    assert h.step_total == pytest.approx(3 * 2e-6 + 4 * 4e-6) and h.cpu_total == pytest.approx(3 * 1.5e-6 + 4 * 3.5e-6)
    np.testing.assert_array_equal(a, [4e-6, 4e-6, 2e-6, 4e-6, 4e-6])
    np.testing.assert_array_equal(b, [3e-6, 3e-6, 1e-6, 3e-6, 3e-6])
    np.testing.assert_array_equal(c, [3.5e-6, 3.5e-6, 1.5e-6, 3.5e-6, 3.5e-6])
    h.reset()
    assert h.count == 0 and h.step_total == 0.0 and h.cpu_total == 0.0
    with pytest.raises(ValueError, match="same, positive length"):
        StepHistory(np.zeros(3), np.zeros(4), np.zeros(3))


def test_ring_waiter_returns_published_tokens_times_out_and_lets_other_threads_run():
    ring = np.full(8, -1, np.int32)
    w = RingWaiter(ring)
    ring[1] = 7
    assert w.wait(1, -1, 0.0) == 7  # already published
    t0 = time.perf_counter()
    assert w.wait(2, -1, 0.02) == -1  # never published: the pending value after the timeout
    assert time.perf_counter() - t0 >= 0.019

    def publish():
        time.sleep(0.02)
        ring[5] = 42

    # The writer is a Python thread: it runs only if the wait released the GIL. Were the GIL
    # held, the wait would end at its 10 s timeout with the pending value.
    th = threading.Thread(target=publish)
    t0 = time.perf_counter()
    th.start()
    assert w.wait(5, -1, 10.0) == 42
    assert time.perf_counter() - t0 < 5.0
    th.join()
    for bad in (8, -1):
        with pytest.raises(IndexError, match="outside the 8-entry ring"):
            w.wait(bad, -1, 0.0)
