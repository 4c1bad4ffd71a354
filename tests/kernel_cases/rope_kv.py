"""Kernel cases of qk_norm_rope_kv (ptx/src/rope_kv.cu)."""
from __future__ import annotations

import numpy as np

from fixedgraph import bf16
from fixedgraph.ops import rope_kv as ops
from fixedgraph.program import Program, Ref
from tests.kernel_cases import Buffer, Check, KernelCase, kernel_case, poison, rand_bf16

EPS = 1e-6
MAX_POS = 4096
BLOCK_SIZE = 16  # tokens per KV block in these cases


def _rb(x: np.ndarray) -> np.ndarray:
    return bf16.round_f32(np.asarray(x, dtype=np.float32)).astype(np.float64)


def _table(D: int) -> np.ndarray:
    """(cos, sin) of pos * theta^(-2i/D): [MAX_POS, D/2, 2] f32."""
    inv = 1e6 ** (-np.arange(0, D, 2, dtype=np.float64) / D)
    ang = np.arange(MAX_POS, dtype=np.float64)[:, None] * inv[None, :]
    return np.stack([np.cos(ang), np.sin(ang)], axis=-1).astype(np.float32)


def _case(name: str, rows: int, Hq: int, Hkv: int, D: int, q_norm: bool, k_norm: bool,
          skip_row: int | None):
    @kernel_case(name)
    def make(rng: np.random.Generator) -> KernelCase:
        heads = Hq + 2 * Hkv
        num_blocks = -(-(rows + 5) // BLOCK_SIZE)
        pool_shape = (num_blocks, BLOCK_SIZE, Hkv, D)
        slots = rng.choice(num_blocks * BLOCK_SIZE, rows, replace=False).astype(np.int64)
        if skip_row is not None:
            slots[skip_row] = -1  # this row writes q but no KV
        buffers = {
            "qkv": rand_bf16(rng, (rows, heads * D), scale=2.0),
            "q_out": poison((rows, Hq * D), "bf16"),
            "rope": Buffer(_table(D), "f32"),
            "positions": Buffer(rng.integers(0, 4000, rows).astype(np.uint32), "u32"),
            "slots": Buffer(slots, "i64"),
            "k_pool": poison(pool_shape, "bf16"),
            "v_pool": poison(pool_shape, "bf16"),
        }
        if q_norm:
            buffers["q_norm"] = Buffer(bf16.from_f32(1.0 + 0.3 * rng.standard_normal(D)), "bf16")
        if k_norm:
            buffers["k_norm"] = Buffer(bf16.from_f32(1.0 + 0.3 * rng.standard_normal(D)), "bf16")
        prog = Program(name)
        ops.qk_norm_rope_kv(prog, Ref("qkv"), Ref("q_out"), Ref("q_norm") if q_norm else None,
                            Ref("k_norm") if k_norm else None, Ref("rope"), Ref("positions"),
                            Ref("slots"), Ref("k_pool"), Ref("v_pool"), rows, Hq, Hkv, D, EPS)

        def reference(v: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            x = v["qkv"].astype(np.float64).reshape(rows, heads, D)
            q, k, val = x[:, :Hq], x[:, Hq:Hq + Hkv], x[:, Hq + Hkv:]

            def norm(t, w):
                rms = np.sqrt(np.mean(t * t, axis=-1, keepdims=True) + EPS)
                return _rb(w.astype(np.float64) * _rb(t / rms))

            if q_norm:
                q = norm(q, v["q_norm"])
            if k_norm:
                k = norm(k, v["k_norm"])
            cs = v["rope"].astype(np.float64)[v["positions"].astype(np.int64)]  # [rows, D/2, 2]
            cos, sin = cs[:, None, :, 0], cs[:, None, :, 1]

            def rotate(t):
                t1, t2 = t[..., : D // 2], t[..., D // 2:]
                return np.concatenate([t1 * cos - t2 * sin, t2 * cos + t1 * sin], axis=-1)

            kp = v["k_pool"].astype(np.float64).reshape(-1, Hkv, D).copy()
            vp = v["v_pool"].astype(np.float64).reshape(-1, Hkv, D).copy()
            k_rot = _rb(rotate(k))
            for r, s in enumerate(v["slots"]):
                if s >= 0:
                    kp[s], vp[s] = k_rot[r], val[r]
            return {"q_out": _rb(rotate(q)).reshape(rows, Hq * D), "k_pool": kp.reshape(pool_shape),
                    "v_pool": vp.reshape(pool_shape)}

        # Without a norm only the final bf16 rounding can differ (<= 1 ulp). With one, a normed
        # value may round the other way before the rotation: up to ~2^-6 * |x| absolute.
        q_chk = Check(atol=0.04, rtol=2e-2) if q_norm else Check(atol=1e-4, rtol=1e-2)
        k_chk = Check(atol=0.04, rtol=2e-2) if k_norm else Check(atol=1e-4, rtol=1e-2)
        return KernelCase(name, prog, buffers, {"q_out": q_chk, "k_pool": k_chk, "v_pool": Check()},
                          reference)

    return make


_case("qk_norm_rope_kv_1x32_8x128_norm", 1, 32, 8, 128, True, True, None)
_case("qk_norm_rope_kv_3x9_3x64", 3, 9, 3, 64, False, False, 1)
_case("qk_norm_rope_kv_8x16_16x128", 8, 16, 16, 128, False, False, 5)
_case("qk_norm_rope_kv_8x16_16x128_norm", 8, 16, 16, 128, True, True, 0)
_case("qk_norm_rope_kv_33x9_3x64_norm", 33, 9, 3, 64, True, True, 32)
_case("qk_norm_rope_kv_4x4_2x256_norm", 4, 4, 2, 256, True, True, 2)  # widest head
_case("qk_norm_rope_kv_5x6_2x80_qnorm", 5, 6, 2, 80, True, False, 3)  # D/2 = 40: scalar lanes
_case("qk_norm_rope_kv_2x2_1x96", 2, 2, 1, 96, False, False, None)  # D/2 = 48
