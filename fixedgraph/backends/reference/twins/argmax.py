"""Numpy twin of ptx/src/argmax.cu: argmax_rows."""
from __future__ import annotations

import numpy as np

from fixedgraph.backends.reference.twins import twin


def argmax_nan_low(x: np.ndarray) -> np.ndarray:
    """Row-wise argmax of x [rows, V]: ties to the lowest index, NaN below every number."""
    nan = np.isnan(x)
    idx = np.argmax(np.where(nan, -np.inf, x), axis=1)
    # Rows whose best is -inf: NaN must lose to -inf, so take the first non-NaN entry (if any;
    # argmax of an all-False row is 0, the answer for an all-NaN row).
    picked = x[np.arange(x.shape[0]), idx]
    low = np.isnan(picked) | np.isneginf(picked)
    if low.any():
        idx[low] = np.argmax(~nan[low], axis=1)
    return idx.astype(np.int32)


@twin("argmax_rows")
def argmax_rows(mem, grid, block, tokens, ring, step, ring_len, logits, rows, V):
    if block[0] % 32:
        return  # the kernel refuses partial warps and writes nothing
    tok = argmax_nan_low(mem.view(logits, np.float32, rows * V).reshape(rows, V))
    mem.view(tokens, np.int32, rows)[:] = tok
    if ring and ring_len:
        s = int(mem.view(step, np.uint32, 1)[0]) if step else 0
        mem.view(ring, np.int32, ring_len * rows)[(s % ring_len) * rows:][:rows] = tok
