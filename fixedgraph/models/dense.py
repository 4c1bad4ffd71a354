"""Programs for the dense decoder family (Llama 2/3, Mistral, Qwen2/2.5, Qwen3, SmolLM2).

The model knows programs, not sequences: from a ``ModelConfig`` and the boot sizes it lays out
the arena (weights, KV pools, activations, per-pass metadata) and emits the decode program of
each padded width and the prefill program of each chunk bucket. Every kernel is reached through
the launchers in ``fixedgraph.ops``; every address is a region of the one arena.
"""
from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass

from fixedgraph.errors import UnsupportedModel
from fixedgraph.layout import ArenaPlan
from fixedgraph.models.config import ModelConfig
from fixedgraph.models.meta import MetaLayout
from fixedgraph.ops import act, argmax, attention, embed_norm, gemv, mega, meta as meta_ops, rope_kv, sample
from fixedgraph.ops.linear import linear
from fixedgraph.program import HostPtr, Program, Ref

STAGING = "staging"  # host buffer names the programs bind to
RING = "ring"
# A decode step's staged bytes up to which its first op stages them and gathers the embedding in
# one launch (stage_meta_ring_embed holds the slot in shared memory); larger blobs (long contexts
# at wide batches) take stage_meta_ring and embed_gather.
STAGE_EMBED_MAX_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class Sizes:
    """Boot-time sizing: fixed for the life of the arena."""

    widths: tuple[int, ...]  # decode graph widths (padded batch sizes), ascending
    chunk_buckets: tuple[int, ...]  # prefill chunk lengths with a program each, ascending
    block_size: int  # tokens per KV block
    num_blocks: int  # KV blocks per layer pool, block 0 being the padding rows' dummy
    max_model_len: int  # longest sequence (prompt + output)
    ring_len: int  # steps the mapped token ring holds
    staging_slots: int = 6  # metadata slots in pinned staging (passes in flight + 2)
    # Decode graphs per context bucket. 6144: with 8 kv heads of 128 its 24 MiB of K/V a launch
    # is the most that plans one attention CTA per SM on 132 SMs (ops.attention.choose_num_splits);
    # at 5k keys it ran Qwen3-0.6B 6.1% a token faster than the 8192 bucket's two per SM (session 32).
    ctx_buckets: tuple[int, ...] = (128, 512, 2048, 4096, 6144, 8192)
    num_sms: int = 132  # the GPU's SMs (the engine sets the device's): the attention's split plans

    def __post_init__(self) -> None:
        assert self.widths and list(self.widths) == sorted(set(self.widths)) and self.widths[0] >= 1
        assert self.chunk_buckets and list(self.chunk_buckets) == sorted(set(self.chunk_buckets))
        assert self.block_size >= 1 and self.num_blocks >= 2 and self.ring_len >= 2
        assert self.max_model_len >= 1 and self.num_sms >= 1

    @property
    def max_rows(self) -> int:
        return max(self.widths[-1], self.chunk_buckets[-1])

    @property
    def max_blocks(self) -> int:
        return -(-self.max_model_len // self.block_size)


def mega_wanted() -> bool:
    """FIXEDGRAPH_MEGA: 1 runs batch-1 greedy decode steps as one persistent launch (ptx/src/mega.cu)."""
    v = os.environ.get("FIXEDGRAPH_MEGA", "0")
    if v not in ("0", "1"):
        raise ValueError(f"FIXEDGRAPH_MEGA must be 0 or 1, got {v!r}")
    return v == "1"


def mega_quiet() -> int:
    """FIXEDGRAPH_MEGA_QUIET: decode_mega's quiet policy bits (ops/mega.py QUIET_*), 0-3."""
    v = os.environ.get("FIXEDGRAPH_MEGA_QUIET", "0")
    if v not in ("0", "1", "2", "3"):
        raise ValueError(f"FIXEDGRAPH_MEGA_QUIET must be 0, 1, 2 or 3 (bits: 1 quiet through the attention, "
                         f"2 through norm + qkv), got {v!r}")
    return int(v)


class DenseDecoder:
    def __init__(self, cfg: ModelConfig, sizes: Sizes) -> None:
        self.cfg, self.sizes = cfg, sizes
        c = cfg
        self.H, self.V, self.I = c.hidden_size, c.vocab_size, c.intermediate_size
        self.Hq, self.Hkv, self.D = c.num_heads, c.num_kv_heads, c.head_dim
        self.QKV = (self.Hq + 2 * self.Hkv) * self.D
        dims = sorted(set(attention.DECODE_ROPE_HEAD_DIMS) & set(attention.PREFILL_HEAD_DIMS))
        if self.D not in dims:
            raise UnsupportedModel(f"head_dim {self.D} is not supported by the attention kernels (supported: "
                                   f"{', '.join(map(str, dims))}); add an entry in ptx/src/attention.cu")
        if self.Hq % self.Hkv:
            raise UnsupportedModel(f"{self.Hq} query heads are not a multiple of {self.Hkv} kv heads")
        self.scale = 1.0 / math.sqrt(self.D)
        # Greedy decode ends in one launch (final norm + lm_head + argmax) when the kernel's
        # 16-byte path applies; otherwise gemv_rmsnorm + argmax_rows.
        self._fused_head = self.H % 8 == 0
        self.decode_meta = {w: MetaLayout(w, w, sizes.max_blocks) for w in sizes.widths}
        self.prefill_meta = {t: MetaLayout(t, 1, sizes.max_blocks) for t in sizes.chunk_buckets}
        # Decode graphs exist per (width, context bucket): a graph's attention split count is fixed,
        # and the best count grows with the context (few keys: one CTA per kv head, no merge).
        self.ctx_buckets = tuple(sorted({b for b in sizes.ctx_buckets if b < sizes.max_model_len}
                                        | {sizes.max_model_len}))
        self.splits = {(w, c): self._num_splits(w, c) for w in sizes.widths for c in self.ctx_buckets}
        layouts = list(self.decode_meta.values()) + list(self.prefill_meta.values())
        self.slot_bytes = (max(l.nbytes for l in layouts) + 255) // 256 * 256  # one staging slot
        # The persistent decode step (ptx/src/mega.cu) for batch-1 greedy steps: FIXEDGRAPH_MEGA=1
        # where the model fits it (mega.unsupported); otherwise the graph of launches.
        self.mega = None
        if mega_wanted():
            why = mega.unsupported(cfg)
            if why:
                warnings.warn(f"FIXEDGRAPH_MEGA=1: this model's decode steps stay graphs of launches: {why}",
                              stacklevel=2)
            else:
                self.mega = mega.shape_of(cfg, sizes.num_sms)

    # ---- arena ----------------------------------------------------------------------------

    def plan(self) -> ArenaPlan:
        c, s, p = self.cfg, self.sizes, ArenaPlan()
        H, I, D = self.H, self.I, self.D
        p.add("embed", (self.V, H), "bf16")  # [vocab, hidden]
        for i in range(c.num_layers):
            p.add(f"L{i}.in_norm", (H,), "bf16")
            p.add(f"L{i}.qkv_w", (self.QKV, H), "bf16")  # rows: q heads, k heads, v heads
            if c.attention_bias:
                p.add(f"L{i}.qkv_b", (self.QKV,), "bf16")
            if c.qk_norm:
                p.add(f"L{i}.q_norm", (D,), "bf16")
                p.add(f"L{i}.k_norm", (D,), "bf16")
            p.add(f"L{i}.o_w", (H, self.Hq * D), "bf16")
            p.add(f"L{i}.post_norm", (H,), "bf16")
            p.add(f"L{i}.gate_up_w", (2 * I, H), "bf16")  # rows: gate, then up
            p.add(f"L{i}.down_w", (H, I), "bf16")
        p.add("final_norm", (H,), "bf16")
        if not c.tie_word_embeddings:
            p.add("lm_head", (self.V, H), "bf16")
        p.add("rope", (s.max_model_len, D // 2, 2), "f32")  # (cos, sin) per position, pair
        for i in range(c.num_layers):  # [num_blocks, block_size, kv_heads, head_dim]
            p.add(f"L{i}.k_pool", (s.num_blocks, s.block_size, self.Hkv, D), "bf16")
            p.add(f"L{i}.v_pool", (s.num_blocks, s.block_size, self.Hkv, D), "bf16")
        R = s.max_rows
        p.add("hidden", (R, H), "f32")  # the residual stream (Fixed.hidden)
        p.add("hidden2", (s.widths[-1], H), "f32")  # its ping-pong partner in the fused decode path
        p.add("residual", (R, H), "bf16")  # the normed stream the norms write (Fixed.residual)
        p.add("qkv", (R, self.QKV), "bf16")
        p.add("q", (R, self.Hq * D), "bf16")
        p.add("attn", (R, self.Hq * D), "bf16")
        p.add("delta", (R, H), "bf16")  # output of o_proj / down_proj, added by the next norm
        p.add("gate_up", (R, 2 * I), "bf16")
        p.add("act", (R, I), "bf16")
        p.add("last", (1, H), "bf16")  # prefill: the normed last row
        p.add("logits", (s.widths[-1], self.V), "f32")  # Fixed.logits
        p.add("tokens", (s.widths[-1],), "i32")  # Fixed.tokens: each row's latest token
        p.add("seen", (s.widths[-1], -(-self.V // 32)), "u32")  # repetition-penalty bitmask
        p.add("stage_counter", (1,), "u32")  # passes launched so far: picks the staging slot
        for w in s.widths:
            p.add(f"meta.decode.{w}", (self.decode_meta[w].nbytes,), "u8")
            S = max(self.splits[(w, c)] for c in self.ctx_buckets)  # one scratch serves every bucket
            for name, (shape, dtype) in attention.decode_scratch(w, self.Hq, D, S, self.Hkv).items():
                p.add(f"scratch.{w}.{name}", shape, dtype)
        if self._fused_head:  # gemv_rmsnorm_argmax's CTA partials and arrival counter
            p.add("scratch.head.part", (max(gemv.argmax_part_bytes(w, self.V, H) for w in s.widths),), "u8")
            p.add("scratch.head.count", (1,), "u32")
        for t in s.chunk_buckets:
            p.add(f"meta.prefill.{t}", (self.prefill_meta[t].nbytes,), "u8")
        if self.mega is not None:
            for name, (shape, dtype) in mega.arena_regions(self.mega).items():
                p.add(name, shape, dtype)
        return p

    def boot_tables(self, plan: ArenaPlan) -> dict[str, object]:
        """Regions the loader writes once at boot besides the weights: the persistent decode
        step's op table (its addresses are ``plan``'s offsets)."""
        if self.mega is None:
            return {}
        c, w = self.cfg, self.sizes.widths[0]
        if plan["embed"].offset != 0:  # decode_mega's base pointer: table addresses are offsets from it
            raise ValueError(f"decode_mega needs region 'embed' at the arena's start, not at {plan['embed'].offset}")
        layout = self.decode_meta[w]
        fields = {f: layout.offset(f) for f in ("positions", "slot", "seq_len", "block_table", "step")}
        table = mega.build_table(
            self.mega, plan, meta_region=f"meta.decode.{w}", meta_fields=fields, counter="stage_counter",
            hidden="hidden", logits="logits", tokens="tokens", rope="rope", block_size=self.sizes.block_size,
            max_blocks=self.sizes.max_blocks, eps=c.rms_norm_eps, scale=self.scale, ring_len=self.sizes.ring_len,
            qk_norm=c.qk_norm, bias=c.attention_bias, head="embed" if c.tie_word_embeddings else "lm_head",
            quiet=mega_quiet())
        return {"mega.table": table}

    def weight_targets(self) -> dict[str, tuple[str, int]]:
        """HF tensor name -> (region, row offset) where its rows go in the arena."""
        c, out = self.cfg, {"model.embed_tokens.weight": ("embed", 0), "model.norm.weight": ("final_norm", 0)}
        if not c.tie_word_embeddings:
            out["lm_head.weight"] = ("lm_head", 0)
        q, kv = self.Hq * self.D, self.Hkv * self.D
        for i in range(c.num_layers):
            a, m = f"model.layers.{i}.self_attn.", f"model.layers.{i}.mlp."
            out[f"model.layers.{i}.input_layernorm.weight"] = (f"L{i}.in_norm", 0)
            out[f"model.layers.{i}.post_attention_layernorm.weight"] = (f"L{i}.post_norm", 0)
            for proj, row in (("q", 0), ("k", q), ("v", q + kv)):
                out[a + f"{proj}_proj.weight"] = (f"L{i}.qkv_w", row)
                if c.attention_bias:
                    out[a + f"{proj}_proj.bias"] = (f"L{i}.qkv_b", row)
            if c.qk_norm:
                out[a + "q_norm.weight"] = (f"L{i}.q_norm", 0)
                out[a + "k_norm.weight"] = (f"L{i}.k_norm", 0)
            out[a + "o_proj.weight"] = (f"L{i}.o_w", 0)
            out[m + "gate_proj.weight"] = (f"L{i}.gate_up_w", 0)
            out[m + "up_proj.weight"] = (f"L{i}.gate_up_w", self.I)
            out[m + "down_proj.weight"] = (f"L{i}.down_w", 0)
        return out

    # ---- programs --------------------------------------------------------------------------

    def _layers(self, prog: Program, rows: int, mref, attend) -> None:
        """Every transformer layer over ``rows`` rows (prefill: GEMM path, separate norms);
        leaves the last MLP output in ``delta`` and the residual stream in ``hidden``."""
        c, H, I, D = self.cfg, self.H, self.I, self.D
        for i in range(c.num_layers):
            L = f"L{i}."
            embed_norm.add_rmsnorm(prog, Ref("hidden"), Ref("delta") if i else None, Ref(L + "in_norm"),
                                   Ref("residual"), rows, H, c.rms_norm_eps, label=f"{L}input_norm")
            linear(prog, Ref("qkv"), Ref("residual"), Ref(L + "qkv_w"),
                   Ref(L + "qkv_b") if c.attention_bias else None, rows, self.QKV, H, label=f"{L}qkv_proj")
            self._rope(prog, L, rows, mref)
            attend(prog, i)
            linear(prog, Ref("delta"), Ref("attn"), Ref(L + "o_w"), None, rows, H, self.Hq * D, label=f"{L}o_proj")
            embed_norm.add_rmsnorm(prog, Ref("hidden"), Ref("delta"), Ref(L + "post_norm"), Ref("residual"),
                                   rows, H, c.rms_norm_eps, label=f"{L}post_attention_norm")
            linear(prog, Ref("gate_up"), Ref("residual"), Ref(L + "gate_up_w"), None, rows, 2 * I, H,
                   label=f"{L}gate_up_proj")
            act.silu_mul(prog, Ref("act"), Ref("gate_up"), rows, I, label=f"{L}silu_mul")
            linear(prog, Ref("delta"), Ref("act"), Ref(L + "down_w"), None, rows, H, I, label=f"{L}down_proj")

    def _rope(self, prog: Program, L: str, rows: int, mref) -> None:
        c = self.cfg
        rope_kv.qk_norm_rope_kv(prog, Ref("qkv"), Ref("q"), Ref(L + "q_norm") if c.qk_norm else None,
                                Ref(L + "k_norm") if c.qk_norm else None, Ref("rope"), mref("positions"),
                                mref("slot"), Ref(L + "k_pool"), Ref(L + "v_pool"), rows, self.Hq,
                                self.Hkv, self.D, c.rms_norm_eps, label=f"{L}qk_norm_rope_kv")

    def _num_splits(self, width: int, ctx: int) -> int:
        return 1 if ctx <= 128 else attention.choose_num_splits(ctx, width, self.Hkv, self.sizes.num_sms, self.D)

    def ctx_bucket(self, num_keys: int) -> int:
        """The smallest context bucket holding ``num_keys`` keys (the decode graph to launch)."""
        for b in self.ctx_buckets:
            if num_keys <= b:
                return b
        raise ValueError(f"{num_keys} keys exceed the context of {self.sizes.max_model_len}")

    def _attend_rope(self, prog: Program, L: str, i: int, rows: int, mref, S: int) -> None:
        """QK-norm + RoPE + KV write + decode attention of layer ``i`` in one launch, with ``S``
        key splits (merged in-kernel by the last CTA to arrive)."""
        c, s = self.cfg, self.sizes
        scratch = {n: Ref(f"scratch.{rows}.{n}") for n in attention.decode_scratch(rows, self.Hq, self.D, S, self.Hkv)}
        attention.attention_decode_rope(
            prog, Ref("attn"), Ref("qkv"), Ref(L + "q_norm") if c.qk_norm else None,
            Ref(L + "k_norm") if c.qk_norm else None, Ref("rope"), mref("positions"), mref("slot"),
            Ref(L + "k_pool"), Ref(L + "v_pool"), mref("block_table"), mref("seq_len"), scratch or None, rows,
            s.max_blocks, s.block_size, self.Hq, self.Hkv, self.D, self.scale, c.rms_norm_eps, S,
            label=f"{L}qk_norm_rope+attention")

    def _fused_layers(self, prog: Program, rows: int, mref, S: int, first_late: bool = False) -> str:
        """The decode layers with each norm folded into the GEMV after it and SiLU*up into the
        gate_up GEMV's epilogue (rows <= 8): five launches per layer. The residual stream ping-pongs between ``hidden`` and
        ``hidden2`` (a fused GEMV reads one and one CTA writes the other); returns the region
        holding it at the end, with the last MLP output still in ``delta``. ``first_late``: layer
        0's norm + qkv signals late (after ``stage_meta_ring_embed``, see ``_decode_step``)."""
        c, H, I, D = self.cfg, self.H, self.I, self.D
        cur, other = "hidden", "hidden2"
        for i in range(c.num_layers):
            L = f"L{i}."
            # layer 0 has no delta to add: the stream stays where the embedding put it
            gemv.gemv_rmsnorm(prog, Ref("qkv"), Ref(cur), Ref("delta") if i else None, Ref(other) if i else None,
                              Ref(L + "in_norm"), Ref(L + "qkv_w"), Ref(L + "qkv_b") if c.attention_bias else None,
                              rows, self.QKV, H, c.rms_norm_eps, label=f"{L}norm+qkv_proj",
                              lean=False if first_late and i == 0 else None)
            if i:
                cur, other = other, cur
            self._attend_rope(prog, L, i, rows, mref, S)
            gemv.gemv(prog, Ref("delta"), Ref("attn"), Ref(L + "o_w"), None, rows, H, self.Hq * D, label=f"{L}o_proj")
            gemv.gemv_rmsnorm_silu(prog, Ref("act"), Ref(cur), Ref("delta"), Ref(other), Ref(L + "post_norm"),
                                   Ref(L + "gate_up_w"), None, rows, I, H, c.rms_norm_eps,
                                   label=f"{L}norm+gate_up_proj+silu")
            cur, other = other, cur
            # The last down_proj signals late (the generic entry, same bits): the head's CTAs
            # then launch once norm + gate_up has left its SMs idle, so each SM takes the head's
            # own L1 / shared split. Launched early, they landed beside exiting gate_up CTAs on
            # SMs split for three 77 KiB CTAs (28 KiB of L1 for the head's streamed loads) and
            # ran 1.8x slower there (docs/BENCHMARKS.md, session 20).
            last = i == c.num_layers - 1
            gemv.gemv(prog, Ref("delta"), Ref("act"), Ref(L + "down_w"), None, rows, H, I,
                      label=f"{L}down_proj", lean=False if last else None)
        return cur

    def _head(self, prog: Program, x: Ref, rows: int, mref, sampling: bool) -> None:
        head = Ref("embed") if self.cfg.tie_word_embeddings else Ref("lm_head")
        linear(prog, Ref("logits"), x, head, None, rows, self.V, self.H, out_f32=True, label="lm_head")
        self._pick(prog, rows, mref, sampling)

    def _pick(self, prog: Program, rows: int, mref, sampling: bool) -> None:
        """Argmax or sampling over ``logits``: the token goes to ``tokens`` and the mapped ring."""
        if sampling:
            sample.sample_rows(prog, Ref("tokens"), HostPtr(RING), mref("step"), self.sizes.ring_len,
                               Ref("logits"), mref("sample"), Ref("seen"), rows, self.V, label="sample")
        else:
            argmax.argmax_rows(prog, Ref("tokens"), HostPtr(RING), mref("step"), self.sizes.ring_len,
                               Ref("logits"), rows, self.V, label="argmax")

    def _stage(self, prog: Program, region: str, nbytes: int) -> None:
        """Op 0 of every pass: bring this pass's staging slot into its fixed metadata region."""
        meta_ops.stage_meta_ring(prog, Ref(region), HostPtr(STAGING), Ref("stage_counter"), self.slot_bytes,
                                 self.sizes.staging_slots, nbytes)

    def decode_program(self, width: int, sampling: bool, ctx: int | None = None, steps: int = 1) -> Program:
        """``steps`` decode steps (default one) for ``width`` rows (one token per sequence;
        padding rows included) whose sequences hold at most ``ctx`` keys (a context bucket;
        default: the whole context), as one program.

        Each step opens with an op that copies staging slot (passes launched % staging_slots) to
        the metadata region: the fields and the block-table entries that ``ctx`` keys can use
        (MetaLayout.staged_bytes); the device's pass counter advances once per step, so a
        program of k steps reads k consecutive slots, and each step's embedding reads the token
        the step before it picked.
        """
        if steps < 1:
            raise ValueError(f"decode_program: steps must be >= 1, got {steps}")
        layout, region = self.decode_meta[width], f"meta.decode.{width}"
        ctx = ctx or self.ctx_buckets[-1]

        def mref(name: str) -> Ref:
            return Ref(region, layout.offset(name))

        group = f".x{steps}" if steps > 1 else ""
        prog = Program(f"decode.w{width}.c{ctx}.{'sample' if sampling else 'greedy'}{group}")
        for _ in range(steps):
            self._decode_step(prog, width, sampling, ctx, region, layout, mref)
        return prog

    def _decode_step(self, prog: Program, width: int, sampling: bool, ctx: int, region: str, layout, mref) -> None:
        nbytes = layout.staged_bytes(ctx, self.sizes.block_size)
        fused_stage = nbytes <= STAGE_EMBED_MAX_BYTES
        if fused_stage:
            # One launch instead of two, the slot's PCIe read overlapping the previous head. It
            # writes the region the attention reads before its wait, so layer 0's norm + qkv
            # after it signals late (fixedgraph/pdl.py).
            meta_ops.stage_meta_ring_embed(prog, Ref(region), HostPtr(STAGING), Ref("stage_counter"), self.slot_bytes,
                                           self.sizes.staging_slots, nbytes, Ref("hidden"), Ref("embed"),
                                           Ref("tokens"), width, self.H, self.V)
        else:
            self._stage(prog, region, nbytes)
            embed_norm.embed_gather(prog, Ref("hidden"), Ref("embed"), Ref("tokens"), width, self.H, self.V,
                                    label="embed")
        if self.mega is not None and width == 1 and not sampling:  # the whole step in one launch
            mega.decode_mega(prog, Ref("embed"), Ref("mega.table"), HostPtr(RING), self.mega)
            return
        cur = self._fused_layers(prog, width, mref, self.splits[(width, ctx)], first_late=fused_stage)
        head = Ref("embed") if self.cfg.tie_word_embeddings else Ref("lm_head")
        if self._fused_head and not sampling:  # final norm + lm_head + argmax in one launch
            gemv.gemv_rmsnorm_argmax(prog, Ref("logits"), Ref("tokens"), HostPtr(RING), mref("step"),
                                     self.sizes.ring_len, Ref("scratch.head.part"), Ref("scratch.head.count"),
                                     Ref(cur), Ref("delta"), None, Ref("final_norm"), head, None, width, self.V,
                                     self.H, self.cfg.rms_norm_eps, label="final_norm+lm_head+argmax")
            return
        gemv.gemv_rmsnorm(prog, Ref("logits"), Ref(cur), Ref("delta"), None, Ref("final_norm"), head, None, width,
                          self.V, self.H, self.cfg.rms_norm_eps, out_f32=True, label="final_norm+lm_head")
        self._pick(prog, width, mref, sampling)

    def prefill_program(self, chunk: int, sampling: bool, head: bool = True) -> Program:
        """One prefill chunk of up to ``chunk`` tokens of one sequence (padding rows have slot -1),
        ending with the first generated token written to row 0 of ``tokens`` and the ring.
        ``head=False``: a chunk before the prompt's last, which only writes its K/V (no final
        norm, lm_head or pick: nothing published; ``sampling`` is then ignored)."""
        layout, region = self.prefill_meta[chunk], f"meta.prefill.{chunk}"
        s = self.sizes

        def mref(name: str) -> Ref:
            return Ref(region, layout.offset(name))

        kind = ('sample' if sampling else 'greedy') if head else 'body'
        prog = Program(f"prefill.t{chunk}.{kind}")
        self._stage(prog, region, layout.nbytes)
        embed_norm.embed_gather(prog, Ref("hidden"), Ref("embed"), mref("tokens"), chunk, self.H, self.V,
                                label="embed")

        def attend(p: Program, i: int) -> None:
            attention.attention_prefill(p, Ref("attn"), Ref("q"), Ref(f"L{i}.k_pool"), Ref(f"L{i}.v_pool"),
                                        mref("block_table"), mref("positions"), chunk, s.max_blocks,
                                        s.block_size, self.Hq, self.Hkv, self.D, self.scale,
                                        label=f"L{i}.attention")

        self._layers(prog, chunk, mref, attend)
        if not head:
            return prog
        embed_norm.add_rmsnorm(prog, Ref("hidden"), Ref("delta"), Ref("final_norm"), Ref("residual"), chunk,
                               self.H, self.cfg.rms_norm_eps, label="final_norm")
        meta_ops.gather_rows_bf16(prog, Ref("last"), Ref("residual"), mref("last_row"), 1, chunk, self.H,
                                  label="last_row")
        self._head(prog, Ref("last"), 1, mref, sampling)
        return prog
