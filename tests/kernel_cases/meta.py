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
