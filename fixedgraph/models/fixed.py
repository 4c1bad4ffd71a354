"""``Fixed`` and ``AttnMeta``: the device addresses that never move after boot (see DESIGN.md).

Built once from the arena after boot; every graph bakes these addresses in. Fields the dense
decoder does not use yet (verify, draft, adapters, quantized activations) are 0 / None.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class AttnMeta:
    positions: int  # u32 per token row
    positions_h: int  # MRoPE streams: alias `positions` (no MRoPE model yet)
    positions_w: int
    slot: int  # i64 KV write slot per row
    seq_len: int  # i32 per row, including the token being decoded
    block_table: int  # i32, row-major [num_seqs, max_blocks_per_seq]
    max_blocks_per_seq: int
    num_seqs: int  # rows, padding rows included
    seq_slot: int = 0  # LoRA slot per row: NULL (no adapters)
    moe_row_adapter: int = 0  # NULL (no MoE)


@dataclass(frozen=True, slots=True)
class Fixed:
    hidden: int  # f32 [rows, hidden]: the residual stream
    residual: int  # bf16 [rows, hidden]: what the norms write
    logits: int  # f32 [widest batch, vocab]
    tokens: int  # i32 per row: each row's latest token (device)
    token_ring: int  # i32 [ring_len, rows] device-mapped host memory the host reads tokens from
    meta: AttnMeta  # single-sequence decode
    batch_meta: dict[int, AttnMeta]  # decode metadata per padded width
    prefill_meta: dict[int, AttnMeta]  # per prefill chunk bucket
    k_pools: tuple[int, ...]  # per layer [num_blocks, block_size, kv_heads, head_dim] bf16
    v_pools: tuple[int, ...]
    block_size: int
    cache_stride: int  # elements between consecutive blocks of a pool
    verify_meta: AttnMeta | None = None
    draft: object | None = None
    act_q8: int = 0
    extra: dict[str, int] = field(default_factory=dict)

    def table(self) -> str:
        rows = [f"{'hidden':<14} 0x{self.hidden:x}", f"{'residual':<14} 0x{self.residual:x}",
                f"{'logits':<14} 0x{self.logits:x}", f"{'tokens':<14} 0x{self.tokens:x}",
                f"{'token_ring':<14} 0x{self.token_ring:x} (mapped host)",
                f"{'meta':<14} positions 0x{self.meta.positions:x} slot 0x{self.meta.slot:x} "
                f"seq_len 0x{self.meta.seq_len:x} block_table 0x{self.meta.block_table:x}",
                f"{'k/v pools':<14} {len(self.k_pools)} layers, block {self.block_size}, stride {self.cache_stride}"]
        return "\n".join(rows)


def _attn_meta(arena, region: str, layout, max_blocks: int) -> AttnMeta:
    base = arena.addr(region)
    pos = base + layout.offset("positions")
    return AttnMeta(pos, pos, pos, base + layout.offset("slot"), base + layout.offset("seq_len"),
                    base + layout.offset("block_table"), max_blocks, layout.rows)


def fixed_record(model, arena, token_ring_addr: int) -> Fixed:
    s = model.sizes
    batch = {w: _attn_meta(arena, f"meta.decode.{w}", model.decode_meta[w], s.max_blocks) for w in s.widths}
    prefill = {t: _attn_meta(arena, f"meta.prefill.{t}", model.prefill_meta[t], s.max_blocks)
               for t in s.chunk_buckets}
    L = model.cfg.num_layers
    return Fixed(
        hidden=arena.addr("hidden"), residual=arena.addr("residual"), logits=arena.addr("logits"),
        tokens=arena.addr("tokens"), token_ring=token_ring_addr, meta=batch[s.widths[0]], batch_meta=batch,
        prefill_meta=prefill, k_pools=tuple(arena.addr(f"L{i}.k_pool") for i in range(L)),
        v_pools=tuple(arena.addr(f"L{i}.v_pool") for i in range(L)), block_size=s.block_size,
        cache_stride=s.block_size * model.Hkv * model.D)
