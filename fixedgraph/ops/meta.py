"""Launchers for ptx/src/meta.cu: staging the per-pass metadata, and row gathers."""
from __future__ import annotations

from fixedgraph.program import Arg, Program

STAGE_META_SRC_PARAM = 1  # index of the `src` parameter, patched per step


def stage_meta(prog: Program, dst: Arg, src: Arg, nbytes: int, label: str = "stage metadata") -> int:
    """Copy ``nbytes`` (a multiple of 4) of host staging (device-mapped) into ``dst``.

    Returns the op index: the decode loop patches its ``src`` to the step's staging slot.
    """
    if nbytes % 4:
        raise ValueError(f"metadata blob of {nbytes} bytes is not a whole number of 32-bit words")
    return prog.launch("stage_meta", 1, 256, [dst, src, nbytes // 4], label=label)


def gather_rows_bf16(prog: Program, out: Arg, inp: Arg, idx: Arg, n: int, T: int, H: int,
                     label: str = "gather rows") -> int:
    """out [n, H] bf16 = inp [T, H] bf16 at rows idx [n] i32 (clamped to 0 when out of range)."""
    return prog.launch("gather_rows_bf16", n, min(1024, max(32, (H // 8 + 31) // 32 * 32)),
                       [out, inp, idx, T, H], label=label)


def _check_ring(op: str, slot_bytes: int, num_slots: int, nbytes: int) -> None:
    if nbytes % 4 or slot_bytes % 16 or nbytes > slot_bytes or num_slots < 1:
        raise ValueError(f"{op}: {nbytes} bytes in slots of {slot_bytes} bytes x {num_slots} "
                         "(need whole words, 16-byte slots, and the blob to fit a slot)")


def stage_meta_ring(prog: Program, dst: Arg, staging: Arg, counter: Arg, slot_bytes: int, num_slots: int,
                    nbytes: int, label: str = "stage metadata") -> int:
    """Copy ``nbytes`` of staging slot (counter % num_slots) into ``dst`` and advance the counter.

    staging: [num_slots, slot_bytes] u8, device-mapped host memory; counter: [1] u32 in the arena.
    The graph never changes per step: the host fills the slot the counter will pick.
    """
    _check_ring("stage_meta_ring", slot_bytes, num_slots, nbytes)
    return prog.launch("stage_meta_ring", 1, 256, [dst, staging, counter, slot_bytes // 4, num_slots, nbytes // 4],
                       label=label)


def stage_meta_ring_embed(prog: Program, dst: Arg, staging: Arg, counter: Arg, slot_bytes: int, num_slots: int,
                          nbytes: int, hidden: Arg, table: Arg, tokens: Arg, rows: int, H: int, V: int,
                          label: str = "stage metadata+embed") -> int:
    """``stage_meta_ring`` and then ``embed_gather`` (hidden[r] = float(table[tokens[r]]), NaN for a
    token outside [0, V)) in one launch: a decode step's first op. The slot is read before the PDL
    wait (its PCIe round trip overlaps the previous step's head); the rest after it.

    The launch after it must signal late (``fixedgraph.pdl``: it is a staged writer, and the
    decode attention reads the region before its wait).
    """
    _check_ring("stage_meta_ring_embed", slot_bytes, num_slots, nbytes)
    if rows < 1 or H < 1 or V < 1:
        raise ValueError(f"stage_meta_ring_embed needs rows, H, V >= 1; got rows={rows}, H={H}, V={V}")
    return prog.launch("stage_meta_ring_embed", 1, 256,
                       [dst, staging, counter, slot_bytes // 4, num_slots, nbytes // 4, hidden, table, tokens,
                        int(rows), int(H), int(V)], shared=-(-nbytes // 16) * 16, label=label)
