"""Cases for ptx/src/gemv.cu (decode GEMV), plus ``linear_case``, which gemm.py shares.

Inputs are scaled so every output is ~N(0, 1): x ~ N(0, 1), W ~ N(0, 1/K), bias ~ N(0, 1).
bf16 outputs may differ from the float64 formula by one bf16 rounding step (the fp32 sums
land on either side of a rounding boundary), hence rtol 1e-2 plus atol 1e-2 for values near 0;
f32 outputs only by fp32 summation order.
"""
import numpy as np

from fixedgraph import bf16
from fixedgraph.ops.gemv import (argmax_part_bytes, gemv, gemv_rmsnorm, gemv_rmsnorm_argmax, gemv_rmsnorm_silu,
                                 gemv_silu)
from fixedgraph.program import HostPtr, Program, Ref
from tests.kernel_cases import Buffer, Check, KernelCase, kernel_case, poison, rand_bf16

BF16_OUT = Check(atol=1e-2, rtol=1e-2)
F32_OUT = Check(atol=2e-4, rtol=1e-4)


def linear_case(name: str, rng: np.random.Generator, launcher, rows: int, N: int, K: int, *,
                bias: bool, out_f32: bool, x_skew: int = 0, **launch_kw) -> KernelCase:
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
             rows, N, K, out_f32=out_f32, label=name, **launch_kw)

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


@kernel_case("gemv_no_preload")
def no_preload_case(rng):
    """The 16-byte path without the W preload area (what a launch gets when it would not fit
    shared memory): the first batch streams like the rest. Rows 8 cover two k slices per tile."""
    return linear_case("gemv_no_preload", rng, gemv, 8, 1024, 2048, bias=False, out_f32=True, preload=False)


@kernel_case("gemv_random_shape")
def random_case(rng):
    """A fresh shape each run: any rows, N, K (K often not a multiple of 8)."""
    rows, N, K = int(rng.integers(1, 9)), int(rng.integers(1, 700)), int(rng.integers(1, 1500))
    return linear_case("gemv_random_shape", rng, gemv, rows, N, K,
                       bias=bool(rng.integers(2)), out_f32=bool(rng.integers(2)))


# ---- fused entries: x built in every CTA from the previous op's output -------------------
# The reference rounds x at the kernels' rounding points (in float64, then to bf16), so a few
# elements of x may sit one bf16 step from the kernel's (an fp32 vs float64 rms or exp right at
# a rounding boundary); each moves an f32 output by ~|w| * 2^-8 * |x|, hence FUSED_F32_OUT.
FUSED_F32_OUT = Check(atol=2e-3, rtol=1e-3)
# The SwiGLU epilogue rounds gate and up to bf16 from an f32 accumulation before silu(gate) * up:
# where the exact value lies near a bf16 rounding boundary, gate or up lands one ulp (0.4%) from
# the float64 reference's, and silu, the product and their roundings carry that to up to two
# output ulps (1.6% at the bottom of a binade; seen once in ~25000 outputs).
SILU_EPILOGUE_OUT = Check(atol=1e-2, rtol=2e-2)
EPS = 1e-6


def _rb(x: np.ndarray) -> np.ndarray:
    """float64 values rounded to bf16 (via float32), back as float64."""
    return bf16.round_f32(np.asarray(x, dtype=np.float32)).astype(np.float64)


def _finish(y: np.ndarray, v, bias: bool, out_f32: bool) -> np.ndarray:
    if bias:
        y = y + v["bias"].astype(np.float64)
    return y if out_f32 else _rb(y)


def rmsnorm_case(name: str, rng: np.random.Generator, rows: int, N: int, K: int, *, delta: bool,
                 hidden_out: bool, bias: bool, out_f32: bool, silu: bool = False, lean: bool | None = None,
                 defer: int = 0, **launch_kw) -> KernelCase:
    """gemv_rmsnorm; with ``silu``, gemv_rmsnorm_silu (N = 2I rows of W, out [rows, I]).
    defer: 1 / 2 the deferred-norm row entries (gemv_rmsnorm_bf16_row_dn / _dw), against their
    formula: x = bf16(norm_w * h), out = (x @ W.T) / rms(h) (+ bias). launch_kw: the launcher's
    split / preload."""
    hidden = rng.standard_normal((rows, K)) * 2
    if not delta:
        hidden[0] *= 1e-3  # mean(h^2) ~ 4e-6: eps = 1e-6 visibly changes row 0
    buffers = {
        "hidden_in": Buffer(hidden.astype(np.float32), "f32"),  # [rows, K] f32
        "norm_w": Buffer(bf16.from_f32(1 + 0.2 * rng.standard_normal(K)), "bf16"),  # [K] bf16
        "w": rand_bf16(rng, (N, K), scale=K ** -0.5),  # [N, K] bf16
        "out": poison((rows, N // 2 if silu else N), "f32" if out_f32 else "bf16"),  # [rows, N]
    }
    if delta:
        buffers["delta"] = rand_bf16(rng, (rows, K))  # [rows, K] bf16
    if hidden_out:
        buffers["hidden_out"] = poison((rows, K), "f32")  # [rows, K] f32
    if bias:
        buffers["bias"] = rand_bf16(rng, N)  # [N] bf16
    prog = Program(name)
    if silu:
        gemv_rmsnorm_silu(prog, Ref("out"), Ref("hidden_in"), Ref("delta") if delta else None,
                          Ref("hidden_out") if hidden_out else None, Ref("norm_w"), Ref("w"),
                          Ref("bias") if bias else None, rows, N // 2, K, EPS, label=name, lean=lean, defer=defer,
                          **launch_kw)
    else:
        gemv_rmsnorm(prog, Ref("out"), Ref("hidden_in"), Ref("delta") if delta else None,
                     Ref("hidden_out") if hidden_out else None, Ref("norm_w"), Ref("w"),
                     Ref("bias") if bias else None, rows, N, K, EPS, out_f32=out_f32, label=name, lean=lean,
                     defer=defer, **launch_kw)
    want_entry = {1: "gemv_rmsnorm_bf16_row_dn", 2: "gemv_rmsnorm_bf16_row_dw"}.get(defer)
    if want_entry and prog.launches[-1].entry != want_entry:
        raise AssertionError(f"{name}: the launch took {prog.launches[-1].entry}, not {want_entry}")

    def reference(v):
        h = v["hidden_in"].astype(np.float64)
        if delta:
            h = h + v["delta"].astype(np.float64)  # exact in float64; the kernel rounds once to f32
        h = h.astype(np.float32).astype(np.float64)
        inv_rms = 1.0 / np.sqrt(np.mean(h * h, axis=1, keepdims=True) + EPS)
        if defer:  # the scale after the multiply, before the bias
            x = _rb(v["norm_w"].astype(np.float64) * h)
            y = _finish((x @ v["w"].astype(np.float64).T) * inv_rms, v, bias, out_f32)
        else:
            x = _rb(v["norm_w"].astype(np.float64) * _rb(h * inv_rms))
            y = _finish(x @ v["w"].astype(np.float64).T, v, bias, out_f32)
        if silu:  # y is gate_up rounded to bf16: act.cu's silu_mul on its halves
            gate, up = y[:, : N // 2], y[:, N // 2:]
            y = _rb(_rb(gate / (1.0 + np.exp(-gate))) * up)
        want = {"out": y}
        if hidden_out:
            want["hidden_out"] = h
        return want

    checks = {"out": FUSED_F32_OUT if out_f32 else SILU_EPILOGUE_OUT if silu else BF16_OUT}
    if hidden_out:
        checks["hidden_out"] = Check()  # exactly hidden_in + delta in fp32
    notes = (f"rows={rows} N={N} K={K} delta={delta} hidden_out={hidden_out} bias={bias} f32out={out_f32}"
             + (f" deferred norm {defer}" if defer else ""))
    return KernelCase(name, prog, buffers, checks, reference=reference, notes=notes)


def silu_case(name: str, rng: np.random.Generator, rows: int, N: int, K: int, *, bias: bool) -> KernelCase:
    buffers = {
        "gate_up": rand_bf16(rng, (rows, 2 * K), scale=2.0),  # [rows, 2K] bf16: gate | up
        "w": rand_bf16(rng, (N, K), scale=K ** -0.5),  # [N, K] bf16
        "out": poison((rows, N), "bf16"),  # [rows, N] bf16
    }
    if bias:
        buffers["bias"] = rand_bf16(rng, N)
    prog = Program(name)
    gemv_silu(prog, Ref("out"), Ref("gate_up"), Ref("w"), Ref("bias") if bias else None, rows, N, K, label=name)

    def reference(v):
        gu = v["gate_up"].astype(np.float64)
        gate, up = gu[:, :K], gu[:, K:]
        x = _rb(_rb(gate / (1.0 + np.exp(-gate))) * up)
        return {"out": _finish(x @ v["w"].astype(np.float64).T, v, bias, False)}

    return KernelCase(name, prog, buffers, {"out": BF16_OUT}, reference=reference,
                      notes=f"rows={rows} N={N} K={K} bias={bias}")


# (N, K) before which an add_rmsnorm ran: 0.6B qkv / gate_up, 8B qkv with N cut to 384 (K real),
# a small lm_head-like f32 case, and K tails (1000: K % 32 != 0; 1003: odd, the scalar paths).
RMSNORM_SHAPES = [(4096, 1024), (6144, 1024), (384, 4096), (1000, 1024), (200, 1000), (72, 1003)]
# (N, K) of down_proj: 0.6B (1024, 3072), 8B with N cut to 256 (K = 12288 real), K tails.
SILU_SHAPES = [(1024, 3072), (256, 12288), (200, 1000), (40, 1003)]
FUSED_ROWS = [1, 3, 8]


def _register_rmsnorm(rows: int, N: int, K: int, i: int) -> None:
    delta, hidden_out, bias, out_f32 = bool(i & 1), bool(i & 2), bool(i & 4), N == 1000 or bool(i & 8)
    name = (f"gemv_rmsnorm_r{rows}_{N}x{K}" + ("_delta" if delta else "") + ("_hout" if hidden_out else "")
            + ("_bias" if bias else "") + ("_f32out" if out_f32 else ""))

    @kernel_case(name)
    def factory(rng):
        return rmsnorm_case(name, rng, rows, N, K, delta=delta, hidden_out=hidden_out, bias=bias, out_f32=out_f32)


def _register_silu(rows: int, N: int, K: int, bias: bool) -> None:
    name = f"gemv_silu_r{rows}_{N}x{K}" + ("_bias" if bias else "")

    @kernel_case(name)
    def factory(rng):
        return silu_case(name, rng, rows, N, K, bias=bias)


for _s, (_n, _k) in enumerate(RMSNORM_SHAPES):
    for _i, _r in enumerate(FUSED_ROWS):
        _register_rmsnorm(_r, _n, _k, 3 * _s + _i)  # every delta/hidden_out/bias combination appears
for _s, (_n, _k) in enumerate(SILU_SHAPES):
    for _i, _r in enumerate(FUSED_ROWS):
        _register_silu(_r, _n, _k, bool((_s + _i) & 1))


@kernel_case("gemv_rmsnorm_random_shape")
def rmsnorm_random_case(rng):
    """A fresh shape and option set each run."""
    rows, N, K = int(rng.integers(1, 9)), int(rng.integers(1, 700)), int(rng.integers(1, 1500))
    f = [bool(b) for b in rng.integers(0, 2, 4)]
    return rmsnorm_case("gemv_rmsnorm_random_shape", rng, rows, N, K, delta=f[0], hidden_out=f[1], bias=f[2],
                        out_f32=f[3])


@kernel_case("gemv_silu_random_shape")
def silu_random_case(rng):
    rows, N, K = int(rng.integers(1, 9)), int(rng.integers(1, 700)), int(rng.integers(1, 1500))
    return silu_case("gemv_silu_random_shape", rng, rows, N, K, bias=bool(rng.integers(2)))


# (I, K) of the SwiGLU activation from the stream: 0.6B (3072, 1024), 8B with I cut to 640 (K
# real), an I that is no multiple of 8 (a partial tile of pairs), K tails (scalar paths).
RMSNORM_SILU_SHAPES = [(3072, 1024), (640, 4096), (300, 1000), (20, 1003)]
for _s, (_i, _k) in enumerate(RMSNORM_SILU_SHAPES):
    for _j, _r in enumerate(FUSED_ROWS):
        def _register_rmsnorm_silu(rows=_r, I=_i, K=_k, f=3 * _s + _j):
            delta, hidden_out, bias = bool(f & 1), bool(f & 2), bool(f & 4)
            name = (f"gemv_rmsnorm_silu_r{rows}_{I}x{K}" + ("_delta" if delta else "") + ("_hout" if hidden_out else "")
                    + ("_bias" if bias else ""))

            @kernel_case(name)
            def factory(rng):
                return rmsnorm_case(name, rng, rows, 2 * I, K, delta=delta, hidden_out=hidden_out, bias=bias,
                                    out_f32=False, silu=True)

        _register_rmsnorm_silu()


# The generic entries on shapes the lean ones take by default (fixedgraph.ops.gemv.lean_enabled),
# so both forms keep cases on the decode shapes.
@kernel_case("gemv_generic_r1_1024x2048")
def generic_plain_case(rng):
    return linear_case("gemv_generic_r1_1024x2048", rng, gemv, 1, 1024, 2048, bias=False, out_f32=False, lean=False)


@kernel_case("gemv_rmsnorm_generic_r1_4096x1024_delta_hout")
def generic_rmsnorm_case(rng):
    return rmsnorm_case("gemv_rmsnorm_generic_r1_4096x1024_delta_hout", rng, 1, 4096, 1024, delta=True,
                        hidden_out=True, bias=False, out_f32=False, lean=False)


@kernel_case("gemv_rmsnorm_silu_generic_r1_3072x1024_delta_hout")
def generic_rmsnorm_silu_case(rng):
    return rmsnorm_case("gemv_rmsnorm_silu_generic_r1_3072x1024_delta_hout", rng, 1, 6144, 1024, delta=True,
                        hidden_out=True, bias=False, out_f32=False, silu=True, lean=False)


# ---- head + argmax in one launch ------------------------------------------------------------
# Row r gets a planted winner: column j_r whose W row is c * sign(x_r) (logit ~ 2.4 sqrt(K), far
# above the ~N(0, 1) rest), and a copy of it 16 * m columns later (same place in its 16-column
# tile, so the kernel computes both bit-identically): the tie must go to j_r. The program
# launches twice on one counter (two token buffers), so the counter must come back to 0.
ARGMAX_RING = 4


def argmax_case(name: str, rng: np.random.Generator, rows: int, N: int, K: int, *, bias: bool,
                step: int) -> KernelCase:
    hidden = (rng.standard_normal((rows, K)) * 2).astype(np.float32)
    norm_w = bf16.from_f32(1 + 0.2 * rng.standard_normal(K))
    h = hidden.astype(np.float64)
    x = _rb(bf16.to_f32(norm_w).astype(np.float64) * _rb(h / np.sqrt(np.mean(h * h, axis=1, keepdims=True) + EPS)))
    w = bf16.from_f32(rng.standard_normal((N, K)).astype(np.float32) * K ** -0.5)
    winners = []
    for r in range(rows):
        while True:
            j = int(rng.integers(0, N - 16))
            twin_j = j + 16 * int(rng.integers(1, (N - 1 - j) // 16 + 1))
            if not {j, twin_j} & {c for p in winners for c in p}:
                break
        plant = bf16.from_f32((np.sign(x[r]) * 3.0 * K ** -0.5).astype(np.float32))
        w[j] = w[twin_j] = plant
        winners.append((j, twin_j))
    buffers = {
        "hidden_in": Buffer(hidden, "f32"), "norm_w": Buffer(norm_w, "bf16"), "w": Buffer(w, "bf16"),
        "logits": poison((rows, N), "f32"), "tokens_a": poison(rows, "i32"), "tokens_b": poison(rows, "i32"),
        "step": Buffer(np.array([step], dtype=np.uint32), "u32"),
        "part": poison(argmax_part_bytes(rows, N, K) // 4, "i32"),
        "counter": Buffer(np.zeros(1, dtype=np.uint32), "u32"),
    }
    if bias:
        b = rng.standard_normal(N).astype(np.float32)
        for j, twin_j in winners:
            b[twin_j] = b[j]
        buffers["bias"] = Buffer(bf16.from_f32(b), "bf16")
    ring = poison((ARGMAX_RING, rows), "i32")
    ring_init = ring.data.copy()
    prog = Program(name)
    for out, ring_arg in (("tokens_a", None), ("tokens_b", HostPtr("ring"))):
        gemv_rmsnorm_argmax(prog, Ref("logits"), Ref(out), ring_arg, Ref("step") if ring_arg else None, ARGMAX_RING,
                            Ref("part"), Ref("counter"), Ref("hidden_in"), None, None, Ref("norm_w"), Ref("w"),
                            Ref("bias") if bias else None, rows, N, K, EPS, label=f"{name}.{out}")

    def reference(v):
        logits = x @ v["w"].astype(np.float64).T
        if bias:
            logits = logits + v["bias"].astype(np.float64)
        tok = np.array([j for j, _ in winners], dtype=np.int32)
        expect_ring = ring_init.copy()
        expect_ring[step % ARGMAX_RING] = tok
        return {"logits": logits, "tokens_a": tok, "tokens_b": tok, "ring": expect_ring,
                "counter": np.zeros(1, dtype=np.uint32)}

    checks = {"logits": FUSED_F32_OUT, "tokens_a": Check(), "tokens_b": Check(), "ring": Check(),
              "counter": Check()}
    return KernelCase(name, prog, buffers, checks, reference=reference, host_buffers={"ring": ring},
                      notes=f"rows={rows} N={N} K={K} bias={bias} winners={winners}")


# (rows, N, K): Qwen3-0.6B's head (a full grid of CTAs), SmolLM2's, 8 rows, a short K.
for _r, _n, _k, _b in [(1, 151936, 1024, False), (1, 49152, 576, True), (8, 3000, 2048, True), (3, 700, 64, False)]:
    def _register_argmax(rows=_r, N=_n, K=_k, bias=_b):
        name = f"gemv_rmsnorm_argmax_r{rows}_{N}x{K}" + ("_bias" if bias else "")

        @kernel_case(name)
        def factory(rng):
            return argmax_case(name, rng, rows, N, K, bias=bias, step=int(rng.integers(0, 100)))

    _register_argmax()


# ---- W preload depth (gemv.cu reads it off the launch's dynamic shared memory) ---------------
@kernel_case("gemv_preload_depth3_of_16")
def preload_depth3_case(rng):
    """Three preloaded batches of a 16-batch share (256-thread CTAs at split 1: every warp
    streams all K), then the rest streamed; 3 rows."""
    return linear_case("gemv_preload_depth3_of_16", rng, gemv, 3, 512, 4096, bias=True, out_f32=False,
                       split=1, preload=3, narrow=True)


@kernel_case("gemv_narrow_r1_1024x3072")
def narrow_case(rng):
    """0.6B down_proj as 256-thread CTAs (FIXEDGRAPH_GEMV_NARROW): the whole 12-block share of
    each warp preloaded (2 batches, the second half past its slice)."""
    return linear_case("gemv_narrow_r1_1024x3072", rng, gemv, 1, 1024, 3072, bias=False, out_f32=False,
                       narrow=True)


@kernel_case("gemv_rmsnorm_split4_r1_4096x1024_delta_hout")
def rmsnorm_split4_case(rng):
    """0.6B qkv at split 4 (FIXEDGRAPH_GEMV_FUSED_SPLIT=-1's choice): 128 CTAs, each warp's
    two batches preloaded (the lean row entry)."""
    return rmsnorm_case("gemv_rmsnorm_split4_r1_4096x1024_delta_hout", rng, 1, 4096, 1024, delta=True,
                        hidden_out=True, bias=False, out_f32=False, split=4)


@kernel_case("gemv_rmsnorm_silu_split4_r1_3072x1024_delta_hout")
def rmsnorm_silu_split4_case(rng):
    """0.6B gate_up + SiLU at split 4: 192 CTAs, two preloaded batches per warp."""
    return rmsnorm_case("gemv_rmsnorm_silu_split4_r1_3072x1024_delta_hout", rng, 1, 6144, 1024, delta=True,
                        hidden_out=True, bias=False, out_f32=False, silu=True, split=4)


@kernel_case("gemv_rmsnorm_preload_past_share_r2_200x1000")
def rmsnorm_preload_past_share_case(rng):
    """Three preloaded batches where each warp's share is one (generic entry, K % 32 != 0): the
    batches past the slice are zeros and add nothing."""
    return rmsnorm_case("gemv_rmsnorm_preload_past_share_r2_200x1000", rng, 2, 200, 1000, delta=False,
                        hidden_out=False, bias=True, out_f32=True, preload=3)



@kernel_case("gemv_rmsnorm_silu_rounds_r1_14336x512_delta_hout")
def rmsnorm_silu_rounds_case(rng):
    """Llama-3-8B's gate_up width (2I = 28672) at K = 512: more column groups than CTAs fit, so
    the launcher takes split 8 and each of its 359 CTAs takes five groups grid-stride (fused_split)."""
    return rmsnorm_case("gemv_rmsnorm_silu_rounds_r1_14336x512_delta_hout", rng, 1, 28672, 512, delta=True,
                        hidden_out=True, bias=False, out_f32=False, silu=True)


@kernel_case("gemv_rmsnorm_row_r1_1000x2048_delta_hout_bias")
def rmsnorm_row_partial_tile_case(rng):
    """gemv_rmsnorm_bf16_row (mode 0) on a width that leaves a partial 16-column tile, with bias."""
    return rmsnorm_case("gemv_rmsnorm_row_r1_1000x2048_delta_hout_bias", rng, 1, 1000, 2048, delta=True,
                        hidden_out=True, bias=True, out_f32=False)


# ---- the deferred-norm row entry (gemv_rmsnorm_bf16_row_dn, FIXEDGRAPH_NORM_DEFER=1) -----------
# Qwen3-0.6B's norm + qkv and norm + gate_up + SiLU (K = 1024: one register vector a thread),
# 8B-class K = 4096 with N cut (the wide register path, called out of line), a partial
# 16-column tile with bias, and no delta with a tiny row (eps visible).
DEFER_CASES = [  # (name, N, K, silu, delta, hidden_out, bias, defer, split)
    ("gemv_rmsnorm_row_dn_r1_4096x1024_delta_hout", 4096, 1024, False, True, True, False, 1, None),
    ("gemv_rmsnorm_silu_row_dn_r1_3072x1024_delta_hout", 6144, 1024, True, True, True, False, 1, None),
    ("gemv_rmsnorm_row_dn_r1_384x4096_delta_bias", 384, 4096, False, True, False, True, 1, None),
    ("gemv_rmsnorm_silu_row_dn_r1_640x4096_delta_hout_bias", 1280, 4096, True, True, True, True, 1, None),
    ("gemv_rmsnorm_row_dn_r1_1000x2048_hout_bias", 1000, 2048, False, False, True, True, 1, None),
    # _dw: Qwen3-0.6B's two (split 4: 8 k32 blocks a slice), K tails inside the last k32 block (K =
    # 1000: 31 blocks at split 4, the last 8 elements a zero tail; K = 72 at split 1: the whole row
    # in one warp, no k-split reduce), split 8 (4 blocks a slice, 8 warps a tile), a partial tile,
    # and 16-warp CTAs
    ("gemv_rmsnorm_row_dw_r1_4096x1024_delta_hout", 4096, 1024, False, True, True, False, 2, None),
    ("gemv_rmsnorm_silu_row_dw_r1_3072x1024_delta_hout", 6144, 1024, True, True, True, False, 2, None),
    ("gemv_rmsnorm_row_dw_r1_200x1000_delta_hout_bias_split4", 200, 1000, False, True, True, True, 2, 4),
    ("gemv_rmsnorm_silu_row_dw_r1_40x72_hout_split1", 80, 72, True, False, True, False, 2, 1),
    ("gemv_rmsnorm_row_dw_r1_1000x1024_delta_bias_split8", 1000, 1024, False, True, False, True, 2, 8),
    # 512-thread CTAs at their default split 16: a slice of exactly 8 k32 blocks (K = 4096)
    ("gemv_rmsnorm_row_dw_r1_128x4096_delta_hout", 128, 4096, False, True, True, False, 2, None),
]
for _c in DEFER_CASES:
    def _register_defer(name=_c[0], N=_c[1], K=_c[2], silu=_c[3], delta=_c[4], hidden_out=_c[5], bias=_c[6],
                        defer=_c[7], split=_c[8]):
        @kernel_case(name)
        def factory(rng):
            return rmsnorm_case(name, rng, 1, N, K, delta=delta, hidden_out=hidden_out, bias=bias, out_f32=False,
                                silu=silu, defer=defer, **({} if split is None else {"split": split}))

    _register_defer()


@kernel_case("gemv_rmsnorm_row_dn_random_shape")
def rmsnorm_row_dn_random_case(rng):
    """The deferred-norm row entries on a fresh one-row shape (K % 8 == 0, K <= 2048) and options:
    _dw where a warp's slice fits (FIXEDGRAPH_NORM_DEFER=2's choice), else _dn."""
    from fixedgraph.ops.gemv import _split_arg, fused_split, row_warp_fits

    silu = bool(rng.integers(2))
    N = 2 * int(rng.integers(1, 1200)) if silu else int(rng.integers(1, 2400))
    K = 8 * int(rng.integers(1, 257))
    f = [bool(b) for b in rng.integers(0, 2, 3)]
    defer = 2 if row_warp_fits(K, _split_arg(N, K, fused_split(N, K, 1))) else 1
    return rmsnorm_case("gemv_rmsnorm_row_dn_random_shape", rng, 1, N, K, delta=f[0], hidden_out=f[1], bias=f[2],
                        out_f32=False, silu=silu, defer=defer)
