"""Numpy twin of ptx/src/act.cu: silu_mul."""
from __future__ import annotations

import numpy as np

from fixedgraph import bf16
from fixedgraph.backends.reference.twins import twin


@twin("silu_mul")
def silu_mul(mem, grid, block, out, gate_up, rows, I):
    gu = bf16.to_f32(mem.view(gate_up, np.uint16, rows * 2 * I).reshape(rows, 2 * I))
    gate, up = gu[:, :I], gu[:, I:]
    with np.errstate(over="ignore"):  # exp(-gate) overflows to inf for gate < -88: silu -> -0
        act = bf16.round_f32(gate / (np.float32(1.0) + np.exp(-gate)))
    mem.view(out, np.uint16, rows * I)[:] = bf16.from_f32(act * up).ravel()
