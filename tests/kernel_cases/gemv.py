"""Cases for ptx/src/gemv.cu (decode GEMV), plus ``linear_case``, which gemm.py shares.

Inputs are scaled so every output is ~N(0, 1): x ~ N(0, 1), W ~ N(0, 1/K), bias ~ N(0, 1).
bf16 outputs may differ from the float64 formula by one bf16 rounding step (the fp32 sums
land on either side of a rounding boundary), hence rtol 1e-2 plus atol 1e-2 for values near 0;
f32 outputs only by fp32 summation order.
"""
import numpy as np

from fixedgraph import bf16
from fixedgraph.ops.gemv import gemv
from fixedgraph.program import Program, Ref
from tests.kernel_cases import Check, KernelCase, kernel_case, poison, rand_bf16

BF16_OUT = Check(atol=1e-2, rtol=1e-2)
F32_OUT = Check(atol=2e-4, rtol=1e-4)


def linear_case(name: str, rng: np.random.Generator, launcher, rows: int, N: int, K: int, *,
                bias: bool, out_f32: bool, x_skew: int = 0) -> KernelCase:
    """One launch of ``launcher`` (gemv or gemm) on random inputs.

    x_skew > 0 places x that many bf16 elements into its buffer, so its rows are not
    16-byte aligned even when K % 8 == 0 (the kernels' scalar-load path).
    """
    x = rand_bf16(rng, rows * K + x_skew)  # [rows, K] bf16 after the skew
    buffers = {
        "x": x,
        "w": rand_bf16(rng, (N, K), scale=K ** -0.5),  # [N, K] bf16
        "out": poison((rows, N), "f32" if out_f32 else "bf16"),  # [rows, N]
    }
    if bias:
        buffers["bias"] = rand_bf16(rng, N)  # [N] bf16
    prog = Program(name)
    launcher(prog, Ref("out"), Ref("x", 2 * x_skew), Ref("w"), Ref("bias") if bias else None,
             rows, N, K, out_f32=out_f32, label=name)

    def reference(v):
        xs = v["x"][x_skew:].astype(np.float64).reshape(rows, K)
        y = xs @ v["w"].astype(np.float64).T
        if bias:
            y = y + v["bias"].astype(np.float64)
        return {"out": y if out_f32 else bf16.round_f32(y.astype(np.float32))}

    notes = f"rows={rows} N={N} K={K} bias={bias} out={'f32' if out_f32 else 'bf16'} x_skew={x_skew}"
    return KernelCase(name, prog, buffers, {"out": F32_OUT if out_f32 else BF16_OUT},
                      reference=reference, notes=notes)


# (N, K): square hidden, MLP up, LM head (K = 576), a big square layer, small tails in N
# (100 = 6 tiles + 4) and K (72 = 2 k32 blocks + 8), and 3 columns with an odd K (scalar path).
SHAPES = [(576, 576), (1536, 576), (49152, 576), (4096, 4096), (100, 72), (3, 1003)]
ROWS = [1, 2, 5, 8]


def _register(rows: int, N: int, K: int, i: int) -> None:
    bias, out_f32 = bool(i & 1), bool(i & 2)  # every shape sees each combination once
    name = f"gemv_r{rows}_{N}x{K}" + ("_bias" if bias else "") + ("_f32out" if out_f32 else "")

    @kernel_case(name)
    def factory(rng):
        return linear_case(name, rng, gemv, rows, N, K, bias=bias, out_f32=out_f32)


for _s, (_n, _k) in enumerate(SHAPES):
    for _i, _r in enumerate(ROWS):
        _register(_r, _n, _k, _i + _s)


@kernel_case("gemv_unaligned_x")
def unaligned_case(rng):
    """K % 8 == 0 but x starts 2 bytes past a 16-byte boundary: the scalar path, bf16 out."""
    return linear_case("gemv_unaligned_x", rng, gemv, 3, 200, 264, bias=True, out_f32=False, x_skew=1)


@kernel_case("gemv_random_shape")
def random_case(rng):
    """A fresh shape each run: any rows, N, K (K often not a multiple of 8)."""
    rows, N, K = int(rng.integers(1, 9)), int(rng.integers(1, 700)), int(rng.integers(1, 1500))
    return linear_case("gemv_random_shape", rng, gemv, rows, N, K,
                       bias=bool(rng.integers(2)), out_f32=bool(rng.integers(2)))
