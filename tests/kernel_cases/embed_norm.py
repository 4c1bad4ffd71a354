"""Kernel cases of embed_gather and add_rmsnorm (ptx/src/embed_norm.cu)."""
from __future__ import annotations

import numpy as np

from fixedgraph import bf16
from fixedgraph.ops import embed_norm as ops
from fixedgraph.program import Program, Ref
from tests.kernel_cases import Buffer, Check, KernelCase, kernel_case, poison, rand_bf16

EPS = 1e-6


def _rb(x: np.ndarray) -> np.ndarray:
    """Round float64 values to bf16, back as float64."""
    return bf16.round_f32(np.asarray(x, dtype=np.float32)).astype(np.float64)


def _embed_case(name: str, rows: int, H: int, V: int, bad: tuple[int, ...] = ()):
    @kernel_case(name)
    def make(rng: np.random.Generator) -> KernelCase:
        tokens = rng.integers(0, V, rows).astype(np.int32)
        for r, t in zip(range(0, rows, 2), bad):  # out-of-range ids on even rows
            tokens[r] = t
        prog = Program(name)
        ops.embed_gather(prog, Ref("hidden"), Ref("table"), Ref("tokens"), rows, H, V)

        def reference(v: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            table = v["table"].astype(np.float64).reshape(V, H)
            out = np.full((rows, H), np.nan)
            for r, t in enumerate(v["tokens"]):
                if 0 <= t < V:
                    out[r] = table[t]
            return {"hidden": out}

        return KernelCase(
            name, prog,
            {"hidden": poison((rows, H), "f32"), "table": rand_bf16(rng, (V, H)),
             "tokens": Buffer(tokens, "i32")},
            {"hidden": Check()}, reference,
            notes="out-of-range token rows must be all NaN" if bad else "")

    return make


_embed_case("embed_gather_1x4096", 1, 4096, 1000)
_embed_case("embed_gather_3x576", 3, 576, 517)
_embed_case("embed_gather_8x1024", 8, 1024, 300)
_embed_case("embed_gather_33x100", 33, 100, 250)  # 100 % 8 != 0: element path
_embed_case("embed_gather_5x99_odd", 5, 99, 77)
_embed_case("embed_gather_bad_tokens", 5, 128, 50, bad=(-1, 50, 1 << 30))


def _norm_case(name: str, rows: int, H: int, with_delta: bool):
    @kernel_case(name)
    def make(rng: np.random.Generator) -> KernelCase:
        hidden = (rng.standard_normal((rows, H)) * 3.0).astype(np.float32)
        weight = bf16.from_f32(1.0 + 0.2 * rng.standard_normal(H))
        buffers = {"hidden": Buffer(hidden, "f32"), "weight": Buffer(weight, "bf16"),
                   "out": poison((rows, H), "bf16")}
        if with_delta:
            buffers["delta"] = rand_bf16(rng, (rows, H), scale=2.0)
        prog = Program(name)
        ops.add_rmsnorm(prog, Ref("hidden"), Ref("delta") if with_delta else None, Ref("weight"),
                        Ref("out"), rows, H, EPS)

        def reference(v: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            h = v["hidden"].astype(np.float64).reshape(rows, H)
            if with_delta:
                h = h + v["delta"].astype(np.float64).reshape(rows, H)
            normed = _rb(h / np.sqrt(np.mean(h * h, axis=1, keepdims=True) + EPS))
            out = _rb(v["weight"].astype(np.float64)[None, :] * normed)
            return {"hidden": h, "out": out}

        # out: the kernel's fp32 rms may round the normed value the other way from float64,
        # then the product rounds again: up to ~2 bf16 ulps (2^-6 relative).
        return KernelCase(name, prog, buffers,
                          {"hidden": Check(atol=1e-6, rtol=1e-6), "out": Check(atol=1e-3, rtol=2e-2)},
                          reference)

    return make


_norm_case("add_rmsnorm_1x4096", 1, 4096, True)
_norm_case("add_rmsnorm_3x576", 3, 576, True)
_norm_case("add_rmsnorm_8x1024_nodelta", 8, 1024, False)
_norm_case("add_rmsnorm_33x100", 33, 100, True)
_norm_case("add_rmsnorm_2x16384", 2, 16384, True)  # widest row still held in registers
_norm_case("add_rmsnorm_5x99_odd", 5, 99, True)  # element path
_norm_case("add_rmsnorm_1x16383_odd_wide", 1, 16383, False)  # element path, re-read pass
_norm_case("add_rmsnorm_1x32772_wide", 1, 32772, True)  # vector path, re-read pass
