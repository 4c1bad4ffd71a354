"""Kernel cases of argmax_rows (ptx/src/argmax.cu)."""
from __future__ import annotations

import numpy as np

from fixedgraph.ops import argmax as ops
from fixedgraph.program import HostPtr, Program, Ref
from tests.kernel_cases import Buffer, Check, KernelCase, kernel_case, poison

RING_LEN = 4


def _expected(logits: np.ndarray) -> np.ndarray:
    """Lowest index of each row's maximum, NaN below every number; all-NaN rows give 0."""
    out = np.zeros(logits.shape[0], dtype=np.int32)
    for r, row in enumerate(logits.astype(np.float64)):
        finite = ~np.isnan(row)
        if finite.any():
            out[r] = np.flatnonzero(finite & (row == row[finite].max()))[0]
    return out


def _case(name: str, rows: int, V: int, ring: str | None, step: int = 0, special: bool = False):
    @kernel_case(name)
    def make(rng: np.random.Generator) -> KernelCase:
        logits = (rng.standard_normal((rows, V)) * 3.0).astype(np.float32)
        for r in range(rows):  # a planted tie at the max, with a NaN somewhere before it
            i, j = np.sort(rng.choice(V, 2, replace=False))
            logits[r, i] = logits[r, j] = logits[r].max() + 1.0
            if i > 0:
                logits[r, rng.integers(0, i)] = np.nan
        if special:
            _plant_special(logits)
        buffers = {"tokens": poison(rows, "i32"), "logits": Buffer(logits, "f32"),
                   "step": Buffer(np.array([step], dtype=np.uint32), "u32")}
        host_buffers = {}
        ring_buf, ring_arg = poison((RING_LEN, rows), "i32"), None
        ring_init = ring_buf.data.copy()  # untouched steps must keep their poison
        if ring == "ref":
            buffers["ring"], ring_arg = ring_buf, Ref("ring")
        elif ring == "host":
            host_buffers["ring"], ring_arg = ring_buf, HostPtr("ring")
        prog = Program(name)
        ops.argmax_rows(prog, Ref("tokens"), ring_arg, Ref("step") if ring else None, RING_LEN,
                        Ref("logits"), rows, V)

        def reference(v: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            tok = _expected(v["logits"].reshape(rows, V))
            out = {"tokens": tok}
            if ring:
                expect = ring_init.copy()
                expect[step % RING_LEN] = tok
                out["ring"] = expect
            return out

        outputs = {"tokens": Check()}
        if ring:
            outputs["ring"] = Check()
        return KernelCase(name, prog, buffers, outputs, reference, host_buffers=host_buffers)

    return make


def _plant_special(x: np.ndarray) -> None:
    """Rows that only the slow (-inf / NaN) path and the tie rule decide."""
    V = x.shape[1]
    x[0] = np.nan  # all NaN -> 0
    x[1] = np.nan
    x[1, V - 2] = -np.inf  # -inf beats NaN -> V - 2
    x[2] = -np.inf  # all -inf -> 0
    x[3, :] = -1.0
    x[3, 7] = x[3, 19] = 5.0  # tie -> 7
    x[3, 2] = np.nan
    x[4, 30] = x[4, 31] = np.inf  # +inf ties -> 30
    x[5, 0] = np.nan
    x[5, V - 1] = 1e30  # the very last element wins


_case("argmax_rows_1x151936_ring", 1, 151936, "ref", step=13)
_case("argmax_rows_3x49152_hostring", 3, 49152, "host", step=6)
_case("argmax_rows_8x1000", 8, 1000, None)
_case("argmax_rows_33x1001_unaligned", 33, 1001, None)  # odd V: rows start misaligned
_case("argmax_rows_2x262144", 2, 262144, "ref", step=3)
_case("argmax_rows_6x37_special", 6, 37, None, special=True)
_case("argmax_rows_7x4099_special", 7, 4099, None, special=True)
