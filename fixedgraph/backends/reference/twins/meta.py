"""Twins of ptx/src/meta.cu."""
from __future__ import annotations

import numpy as np

from fixedgraph.backends.reference.twins import twin
from fixedgraph.backends.reference.twins.embed_norm import embed_gather


@twin("stage_meta")
def stage_meta(mem, grid, block, dst, src, words):
    mem.view(dst, np.uint32, words)[:] = mem.view(src, np.uint32, words)


@twin("gather_rows_bf16")
def gather_rows_bf16(mem, grid, block, out, inp, idx, T, H):
    n = grid[0]
    rows = mem.view(idx, np.int32, n).astype(np.int64)
    rows = np.where((rows < 0) | (rows >= T), 0, rows)
    src = mem.view(inp, np.uint16, T * H).reshape(T, H)
    mem.view(out, np.uint16, n * H).reshape(n, H)[:] = src[rows]


@twin("stage_meta_ring")
def stage_meta_ring(mem, grid, block, dst, staging, counter, stride_words, num_slots, words):
    cnt = mem.view(counter, np.uint32, 1)
    c = int(cnt[0])
    src = staging + (c % num_slots) * stride_words * 4
    mem.view(dst, np.uint32, words)[:] = mem.view(src, np.uint32, words)
    cnt[0] = (c + 1) & 0xFFFFFFFF


@twin("stage_meta_ring_embed")
def stage_meta_ring_embed(mem, grid, block, dst, staging, counter, stride_words, num_slots, words, hidden, table,
                          tokens, rows, H, V):
    stage_meta_ring(mem, grid, block, dst, staging, counter, stride_words, num_slots, words)
    embed_gather(mem, (rows, 1, 1), block, hidden, table, tokens, H, V)
