"""Launcher and op table of ptx/src/mega.cu: a batch-1 greedy decode step in one persistent launch.

The model lays out the kernel's LL word buffers (``arena_regions``) and writes its op table at
boot (``build_table``, from the arena plan's region offsets); each decode step is then the
staging kernel (metadata + embedding) and one ``decode_mega`` launch. The table's format and every
op's arithmetic are documented at the top of ptx/src/mega.cu; the twin
(fixedgraph/backends/reference/twins/mega.py) reads the same table.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from fixedgraph.layout import ArenaPlan
from fixedgraph.program import Arg, Program

HDR, OPW, NONE = 32, 16, 0xFFFFFFFF
MK_QKV, MK_ATTN, MK_MERGE, MK_ORES, MK_SILU, MK_HEAD, MK_PICK = range(1, 8)
KIND_NAMES = {MK_QKV: "norm+qkv", MK_ATTN: "attention", MK_MERGE: "split merge", MK_ORES: "gemv+residual",
              MK_SILU: "norm+gate_up+silu", MK_HEAD: "norm+lm_head+argmax", MK_PICK: "pick"}
FLAG_X_PLAIN, FLAG_RES_PLAIN = 1, 2
QUIET_ATTN, QUIET_QKV = 1, 2  # header word 26: mega.cu's MQ_* (when the loader issues no weight copy)
QUIET_WORD = 26
COMPUTE_WARPS = 15  # + 1 loader warp: 512 threads (116 registers, no spills)
THREADS = 32 * (COMPUTE_WARPS + 1)
MAX_STAGES = 16
HEAD_DIMS = (64, 128)
KEYS_PER_WARP = 3  # mega.cu MEGA_KEYS: keys a warp holds in registers a round
SPLIT_KEYS = COMPUTE_WARPS * KEYS_PER_WARP  # keys an attention split takes at least: one round of loads
SMEM_PER_BLOCK = 227 * 1024
STATIC_SMEM = 704  # the kernel's static shared memory (ptxas -v)
SLOTS = (32 * 1024, 64 * 1024)  # stage sizes tried, smallest first (session 40: 32K x 6 best on Qwen3-0.6B)


def unsupported(cfg) -> str | None:
    """Why ``decode_mega`` cannot run this model (None: it can)."""
    H, I, D = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    if D not in HEAD_DIMS:
        return f"head_dim {D} (decode_mega takes {HEAD_DIMS})"
    if H % 8 or I % 8 or (cfg.num_heads * D) % 8:
        return f"hidden {H}, intermediate {I} and q width {cfg.num_heads * D} must be multiples of 8"
    if cfg.num_heads % cfg.num_kv_heads:
        return f"{cfg.num_heads} query heads are not a multiple of {cfg.num_kv_heads} kv heads"
    return None


@dataclass(frozen=True)
class MegaShape:
    """Sizes of one model's decode_mega launch on a GPU of ``num_sms`` SMs."""

    H: int
    I: int
    V: int
    Hq: int
    Hkv: int
    D: int
    layers: int
    num_sms: int

    @property
    def QKV(self) -> int:
        return (self.Hq + 2 * self.Hkv) * self.D

    @property
    def smax(self) -> int:  # most key splits: one attention item a CTA
        return max(1, self.num_sms // self.Hkv)

    @property
    def kmax(self) -> int:
        return max(self.H, self.Hq * self.D, self.I)

    @property
    def xbytes(self) -> int:
        """Shared bytes before the ring: x (bf16 [kmax]) + the residual (f32 [H]), or the
        attention's q / k / v rows and each warp's running state, whichever is larger."""
        G = self.Hq // self.Hkv
        gemv = (2 * self.kmax + 15) // 16 * 16 + 4 * self.H
        attn = 4 * ((G + 2) * self.D + COMPUTE_WARPS * G * (self.D + 2))
        return (max(gemv, attn) + 15) // 16 * 16

    @property
    def tbytes(self) -> int:
        """The op table's bytes (the kernel copies it into shared memory, after the x area)."""
        return (4 * (HDR + OPW * num_ops(self)) + 15) // 16 * 16

    def ring(self) -> tuple[int, int]:
        """(stage bytes, stages): the smallest stage holding a row of every op (two for SiLU) with
        at least 2 stages; as many stages as shared memory takes."""
        row = max(2 * self.H * 2, 2 * self.Hq * self.D, 2 * self.I)  # SiLU: a gate and an up row
        free = SMEM_PER_BLOCK - STATIC_SMEM - self.xbytes - self.tbytes
        for slot in SLOTS:
            if slot >= row and free // slot >= 2:
                return slot, min(MAX_STAGES, free // slot)
        raise ValueError(f"decode_mega: rows of {row} bytes leave no ring of 2 stages in {free} bytes of shared memory")

    @property
    def shared(self) -> int:
        slot, stages = self.ring()
        return self.xbytes + self.tbytes + slot * stages


def shape_of(cfg, num_sms: int) -> MegaShape:
    return MegaShape(cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size, cfg.num_heads, cfg.num_kv_heads,
                     cfg.head_dim, cfg.num_layers, num_sms)


def arena_regions(s: MegaShape) -> dict[str, tuple[tuple[int, ...], str]]:
    """The LL word buffers (u64: epoch << 32 | f32 bits), one per op output and layer, and the table."""
    out: dict[str, tuple[tuple[int, ...], str]] = {}
    for i in range(s.layers):
        out[f"mega.L{i}.qkv"] = ((s.QKV,), "u64")
        out[f"mega.L{i}.part"] = ((s.Hq, s.smax, s.D + 2), "u64")
        out[f"mega.L{i}.attn"] = ((s.Hq * s.D,), "u64")
        out[f"mega.L{i}.h1"] = ((s.H,), "u64")
        out[f"mega.L{i}.act"] = ((s.I,), "u64")
        out[f"mega.L{i}.h2"] = ((s.H,), "u64")
    out["mega.head"] = ((2 * s.num_sms,), "u64")
    # per-op timestamps when turned on: a row an op, the PDL wait's, five an attention op
    out["mega.marks"] = ((6 * num_ops(s) + 1, s.num_sms), "u64")
    out["mega.table"] = ((s.tbytes // 4,), "u32")
    return out


def num_ops(s: MegaShape) -> int:
    return 6 * s.layers + 2


def _f32_bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def build_table(s: MegaShape, plan: ArenaPlan, *, meta_region: str, meta_fields: dict[str, int], counter: str,
                hidden: str, logits: str, tokens: str, rope: str, block_size: int, max_blocks: int, eps: float,
                scale: float, ring_len: int, qk_norm: bool, bias: bool, head: str, quiet: int = 0) -> np.ndarray:
    """The u32 op table of one decode step (ptx/src/mega.cu's header) over ``plan``'s regions:
    every address as its offset from the arena base in 16-byte units. Region names are the
    dense decoder's (``L{i}.qkv_w`` ...) and ``arena_regions``'. ``quiet``: QUIET_* bits (scheduling
    only: the results do not depend on them)."""
    if quiet & ~(QUIET_ATTN | QUIET_QKV):
        raise ValueError(f"decode_mega: quiet policy {quiet} has bits other than QUIET_ATTN (1) and QUIET_QKV (2)")
    def at(name: str, byte: int = 0) -> int:
        off = plan[name].offset + byte
        if off % 16:
            raise ValueError(f"decode_mega: region {name}+{byte} is not 16-byte aligned")
        return off // 16

    t = np.zeros(s.tbytes // 4, np.uint32)
    hdr = [num_ops(s), at(counter), at(meta_region), meta_fields["positions"], meta_fields["slot"],
           meta_fields["seq_len"], meta_fields["block_table"], meta_fields["step"], block_size, max_blocks,
           s.Hq, s.Hkv, s.D, _f32_bits(eps), _f32_bits(scale), s.smax, SPLIT_KEYS, at(rope), ring_len, s.kmax,
           s.H, s.xbytes, at(logits), at(tokens), NONE, s.tbytes, quiet]
    t[: len(hdr)] = hdr
    ops: list[list[int]] = []

    def op(kind: int, N: int = 0, K: int = 0, w: int = NONE, inp: int = NONE, a5: int = NONE, a6: int = NONE,
           out: int = NONE, a8: int = NONE, flags: int = 0, a10: int = NONE, a11: int = NONE) -> None:
        ops.append([kind, N, K, w, inp, a5, a6, out, a8, flags, a10, a11])

    for i in range(s.layers):
        L, M = f"L{i}.", f"mega.L{i}."
        h_in, first = (at(hidden), FLAG_X_PLAIN) if i == 0 else (at(f"mega.L{i - 1}.h2"), 0)
        op(MK_QKV, s.QKV, s.H, at(L + "qkv_w"), h_in, at(L + "in_norm"), at(L + "qkv_b") if bias else NONE,
           at(M + "qkv"), flags=first)
        op(MK_ATTN, inp=at(M + "qkv"), a5=at(L + "q_norm") if qk_norm else NONE,
           a6=at(L + "k_norm") if qk_norm else NONE, out=at(M + "part"), a8=at(M + "attn"), a10=at(L + "k_pool"),
           a11=at(L + "v_pool"))
        op(MK_MERGE, inp=at(M + "part"), out=at(M + "attn"))
        op(MK_ORES, s.H, s.Hq * s.D, at(L + "o_w"), at(M + "attn"), out=at(M + "h1"), a8=h_in,
           flags=FLAG_RES_PLAIN if i == 0 else 0)
        op(MK_SILU, s.I, s.H, at(L + "gate_up_w"), at(M + "h1"), at(L + "post_norm"), out=at(M + "act"))
        op(MK_ORES, s.H, s.I, at(L + "down_w"), at(M + "act"), out=at(M + "h2"), a8=at(M + "h1"))
    op(MK_HEAD, s.V, s.H, at(head), at(f"mega.L{s.layers - 1}.h2"), at("final_norm"), out=at("mega.head"))
    op(MK_PICK, inp=at("mega.head"))
    for j, words in enumerate(ops):
        t[HDR + OPW * j: HDR + OPW * j + len(words)] = words
    return t


MARKS_WORD = 24  # header word: the marks region (16-byte units), NONE when off


def with_marks(table: np.ndarray, plan: ArenaPlan, on: bool = True) -> np.ndarray:
    """A copy of ``table`` whose launch records when each CTA left each op (``mega.marks``:
    [6 nops + 1][G] u64 %globaltimer ns: row j op j, row nops the PDL wait, rows nops + 1 + 5 j + k
    the phases of an attention op j, see ptx/src/mega.cu)."""
    t = table.copy()
    t[MARKS_WORD] = plan["mega.marks"].offset // 16 if on else NONE
    return t


def decode_mega(prog: Program, base: Arg, table: Arg, ring: Arg, s: MegaShape, label: str = "decode step") -> int:
    """One decode step (batch 1, greedy) as one persistent launch: a CTA an SM. ``base`` is the
    arena's first byte (every table address is an offset from it), ``table`` the op table
    (``build_table``), ``ring`` the mapped token ring (or a region)."""
    slot, _ = s.ring()
    return prog.launch("decode_mega", (s.num_sms, 1, 1), (THREADS, 1, 1), [base, table, ring, slot],
                       shared=s.shared, label=label)


__all__ = ["MegaShape", "arena_regions", "build_table", "decode_mega", "shape_of", "unsupported"]
