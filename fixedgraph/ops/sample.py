"""Launcher of ptx/src/sample.cu: seeded sampling of one token per row, and its params rows.

The kernel needs no scratch memory: thresholds are found in shared memory, one CTA per row.
"""
from __future__ import annotations

import struct

import numpy as np

from fixedgraph.program import Arg, Null, Program

PARAM_WORDS = 8  # u32 words of one params row
# Same layout as fixedgraph.sampling.DEVICE_ROW_FORMAT (engine side; tests keep them equal).
PARAM_FORMAT = "<ffffiIII"
STEP_WORD = 7  # the params row's RNG counter word (u32): the decode step it samples for
MAX_V = 1 << 24  # top-p masses: V * 2^40 must fit in u64
THREADS = 1024  # the kernel's CTA size (it returns at once on any other)


def pack_params(rows: list[tuple]) -> np.ndarray:
    """[len(rows), 8] uint32 params rows for `sample_rows` from tuples
    `(temperature, top_p, min_p, repetition_penalty, top_k, seed_lo, seed_hi, step)`:
    four f32, one i32 (0 = top-k off), three u32. Temperature 0 means greedy.
    """
    out = np.empty((len(rows), PARAM_WORDS), dtype=np.uint32)
    for r, row in enumerate(rows):
        if len(row) != PARAM_WORDS:
            raise ValueError(f"params row {r} has {len(row)} fields, expected {PARAM_WORDS}: "
                             "(temperature, top_p, min_p, repetition_penalty, top_k, seed_lo, seed_hi, step)")
        t, p, mp, rp, k, lo, hi, step = row
        out[r] = np.frombuffer(struct.pack(PARAM_FORMAT, t, p, mp, rp, int(k), int(lo), int(hi), int(step)),
                               dtype="<u4")
    return out


def sample_rows(prog: Program, tokens: Arg, ring: Arg | None, step: Arg | None, ring_len: int,
                logits: Arg, params: Arg, seen: Arg | None, rows: int, V: int,
                label: str = "sample") -> int:
    """Pick one token per row (HF / vLLM semantics) and record it.

    tokens: [rows] i32, written.
    ring: [ring_len, rows] i32 (usually a HostPtr to host-mapped memory) or None; when given,
      ring[(step[0] % ring_len) * rows + r] = tokens[r] too.
    step: [1] u32 decode step counter or None (reads as 0). ring_len: ring depth, >= 1 with a ring.
    logits: [rows, V] f32, read only.
    params: [rows, 8] u32, one `pack_params` row per row (the values of
      `SamplingParams.device_row`): temperature, top_p, min_p, repetition_penalty (f32),
      top_k (i32, 0 = off), seed_lo, seed_hi, step (u32: the RNG counter of this token).
    seen: [rows, ceil(V/32)] u32 bitmask of the token ids already in each sequence, or None.
      The host fills it at admission; the kernel sets the bit of the token it picks.

    Per row: repetition penalty on seen ids (logit < 0 ? logit * p : logit / p, when p != 1),
    then temperature 0 -> argmax (ties to the lowest id); else z = logit * (1/T), p = softmax(z),
    top_k (ties at the k-th value kept), top_p (drop a token when the mass of strictly larger
    ones reaches top_p of the top-k mass), min_p (drop p < min_p * p_max), and the Gumbel-max
    draw argmax(z + -log(-log u_i)) over survivors with u_i from the (seed, step, i) counter
    hash. The largest token always survives. One 1024-thread CTA per row; returns the op index.
    """
    if rows < 1 or not 1 <= V <= MAX_V:
        raise ValueError(f"sample_rows needs rows >= 1 and 1 <= V <= 2^24; got rows={rows}, V={V}")
    if ring is not None and ring_len < 1:
        raise ValueError(f"sample_rows with a token ring needs ring_len >= 1, got {ring_len}")
    args = (tokens, Null() if ring is None else ring, Null() if step is None else step, int(ring_len),
            logits, params, Null() if seen is None else seen, int(rows), int(V))
    return prog.launch("sample_rows", (rows, 1, 1), (THREADS, 1, 1), args, label=label)
