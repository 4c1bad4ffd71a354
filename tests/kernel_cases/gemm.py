"""Cases for ptx/src/gemm.cu (prefill GEMM); the builder and tolerances are gemv.py's."""
from fixedgraph.ops.gemm import gemm
from tests.kernel_cases import kernel_case
from tests.kernel_cases.gemv import linear_case

# M: just above the GEMV range, one small tile, a tail past 2 tiles, a multi-tile prefill.
# N: the common hidden size (tail of 64x64 tiles: 9 tiles exactly; of 128: 4.5), an N tail,
# a wide layer. K: 18 k32 tiles, an odd K (scalar path), 32 k32 tiles.
MS = [9, 64, 130, 512]
NS = [576, 1000, 2048]
KS = [576, 1003, 1024]


def _register(M: int, N: int, K: int, i: int) -> None:
    bias, out_f32 = bool(i & 1), bool((i >> 1) & 1)
    name = f"gemm_{M}x{N}x{K}" + ("_bias" if bias else "") + ("_f32out" if out_f32 else "")

    @kernel_case(name)
    def factory(rng):
        return linear_case(name, rng, gemm, M, N, K, bias=bias, out_f32=out_f32)


_i = 0
for _m in MS:
    for _n in NS:
        for _k in KS:
            _register(_m, _n, _k, _i)
            _i += 1


# The 128x128-tile configuration (>= 264 tiles) with tails in M, N and K, on both load paths;
# an odd N (no paired stores); a misaligned x.
@kernel_case("gemm_large_tiles_tails")
def large_tails_case(rng):
    return linear_case("gemm_large_tiles_tails", rng, gemm, 1100, 4100, 40, bias=True, out_f32=False)


@kernel_case("gemm_large_tiles_odd_k")
def large_odd_k_case(rng):
    return linear_case("gemm_large_tiles_odd_k", rng, gemm, 2050, 2100, 37, bias=False, out_f32=True)


@kernel_case("gemm_odd_n")
def odd_n_case(rng):
    return linear_case("gemm_odd_n", rng, gemm, 77, 999, 256, bias=True, out_f32=False)


@kernel_case("gemm_odd_n_f32out")
def odd_n_f32_case(rng):
    return linear_case("gemm_odd_n_f32out", rng, gemm, 33, 131, 512, bias=True, out_f32=True)


@kernel_case("gemm_unaligned_x")
def unaligned_case(rng):
    return linear_case("gemm_unaligned_x", rng, gemm, 40, 300, 264, bias=False, out_f32=False, x_skew=1)


@kernel_case("gemm_short_grid")
def short_grid_case(rng):
    """The launcher's program with its grid cut to 7 CTAs: each CTA strides over many tiles."""
    case = linear_case("gemm_short_grid", rng, gemm, 300, 700, 200, bias=True, out_f32=False)
    case.program.ops[0].grid = (7, 1, 1)
    return case


@kernel_case("gemm_random_shape")
def random_case(rng):
    """A fresh shape each run, M above the GEMV range, K often not a multiple of 8."""
    M, N, K = int(rng.integers(9, 400)), int(rng.integers(1, 700)), int(rng.integers(1, 700))
    return linear_case("gemm_random_shape", rng, gemm, M, N, K,
                       bias=bool(rng.integers(2)), out_f32=bool(rng.integers(2)))
