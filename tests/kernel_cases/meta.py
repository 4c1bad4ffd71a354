"""Cases for ptx/src/meta.cu."""
import numpy as np

from fixedgraph.ops import meta as ops
from fixedgraph.program import Program, Ref
from tests.kernel_cases import Buffer, Check, KernelCase, kernel_case, poison, rand_bf16


@kernel_case("stage_meta")
def stage_case(rng):
    words = int(rng.integers(1, 3000))
    p = Program("stage")
    ops.stage_meta(p, Ref("dst"), Ref("src"), 4 * words)
    src = Buffer(rng.integers(0, 1 << 32, size=words, dtype=np.uint32), "u32")
    return KernelCase("stage_meta", p, {"src": src, "dst": poison(words, "u32")}, {"dst": Check()},
                      reference=lambda v: {"dst": v["src"]})


@kernel_case("gather_rows_bf16")
def gather_case(rng):
    T, H, n = int(rng.integers(1, 600)), int(rng.integers(1, 3000)), int(rng.integers(1, 5))
    idx = rng.integers(0, T, size=n).astype(np.int32)
    idx[0] = T + 3 if n > 1 else idx[0]  # out of range: clamped to row 0
    p = Program("gather")
    ops.gather_rows_bf16(p, Ref("out"), Ref("inp"), Ref("idx"), n, T, H)
    bufs = {"inp": rand_bf16(rng, (T, H)), "idx": Buffer(idx, "i32"), "out": poison((n, H), "bf16")}

    def ref(v):
        rows = np.where((v["idx"] < 0) | (v["idx"] >= T), 0, v["idx"])
        return {"out": v["inp"][rows]}

    return KernelCase("gather_rows_bf16", p, bufs, {"out": Check()}, reference=ref)


@kernel_case("stage_meta_ring")
def stage_ring_case(rng):
    slots, words = int(rng.integers(1, 7)), int(rng.integers(1, 500))
    stride = (words + 3) // 4 * 4 + 4 * int(rng.integers(0, 3))
    c = int(rng.integers(0, 1 << 31))
    p = Program("stage_ring")
    ops.stage_meta_ring(p, Ref("dst"), Ref("staging"), Ref("counter"), stride * 4, slots, 4 * words)
    staging = Buffer(rng.integers(0, 1 << 32, size=slots * stride, dtype=np.uint32), "u32")
    bufs = {"staging": staging, "counter": Buffer(np.array([c], np.uint32), "u32"), "dst": poison(words, "u32")}

    def ref(v):
        k = c % slots
        return {"dst": v["staging"][k * stride : k * stride + words], "counter": np.array([c + 1])}

    return KernelCase("stage_meta_ring", p, bufs, {"dst": Check(), "counter": Check()}, reference=ref)


def _stage_embed_case(name: str, rows: int, H: int, V: int, bad: tuple[int, ...] = ()):
    @kernel_case(name)
    def make(rng):
        slots, words = int(rng.integers(1, 7)), int(rng.integers(1, 700))
        stride = (words + 3) // 4 * 4 + 4 * int(rng.integers(0, 3))
        c = int(rng.integers(0, 1 << 31))
        tokens = rng.integers(0, V, rows).astype(np.int32)
        for r, t in zip(range(0, rows, 2), bad):  # out-of-range ids on even rows: NaN rows
            tokens[r] = t
        p = Program(name)
        ops.stage_meta_ring_embed(p, Ref("dst"), Ref("staging"), Ref("counter"), stride * 4, slots, 4 * words,
                                  Ref("hidden"), Ref("table"), Ref("tokens"), rows, H, V)
        staging = Buffer(rng.integers(0, 1 << 32, size=slots * stride, dtype=np.uint32), "u32")
        bufs = {"staging": staging, "counter": Buffer(np.array([c], np.uint32), "u32"), "dst": poison(words, "u32"),
                "hidden": poison((rows, H), "f32"), "table": rand_bf16(rng, (V, H)), "tokens": Buffer(tokens, "i32")}

        def ref(v):
            k = c % slots
            table = v["table"].astype(np.float64).reshape(V, H)
            out = np.full((rows, H), np.nan)
            for r, t in enumerate(v["tokens"]):
                if 0 <= t < V:
                    out[r] = table[t]
            return {"dst": v["staging"][k * stride : k * stride + words], "counter": np.array([c + 1]),
                    "hidden": out}

        return KernelCase(name, p, bufs, {"dst": Check(), "counter": Check(), "hidden": Check()}, reference=ref)

    return make


_stage_embed_case("stage_meta_ring_embed_1x1024", 1, 1024, 500)
_stage_embed_case("stage_meta_ring_embed_8x4096", 8, 4096, 300)
_stage_embed_case("stage_meta_ring_embed_3x99_bad", 3, 99, 77, bad=(-1, 77))  # element path, NaN rows
