"""Cases for ptx/src/sample.cu: greedy, seeded draws and every filter, with ring and seen bits.

`reference` is written plainly in float64 from the definitions (HF / vLLM): repetition penalty,
logits / T, softmax, top-k (ties kept), top-p on the renormalised top-k distribution (drop a
token when the mass of strictly larger ones reaches top_p), min-p, then Gumbel-max with the
counter-based uniform the kernel defines (SplitMix64; see sample.cuh). Temperatures are mostly
powers of two so that f32 and f64 order the scaled logits alike; other near-ties (within float
rounding of a filter boundary or between the two best Gumbel keys) have probability ~1e-5.
"""
import numpy as np

from fixedgraph.ops.sample import pack_params, sample_rows
from fixedgraph.program import Program, Ref
from tests.kernel_cases import Buffer, Check, KernelCase, kernel_case, poison

_GOLD = 0x9E3779B97F4A7C15
_U64 = (1 << 64) - 1


def _splitmix(z: np.ndarray) -> np.ndarray:
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def ref_uniform(seed: int, step: int, ids: np.ndarray) -> np.ndarray:
    """u_i for token ids `ids`: SplitMix64 seeded with mix(seed), counter (step << 32) | i."""
    a = int(_splitmix(np.array([seed], dtype=np.uint64))[0])
    counter = (np.uint64(step) << np.uint64(32)) | ids.astype(np.uint64)
    state = np.uint64(a) + counter * np.uint64(_GOLD)
    k = (_splitmix(state) >> np.uint64(41)).astype(np.float64)
    return (2.0 * k + 1.0) / 2.0**24


def ref_token(x: np.ndarray, words: np.ndarray, seen: np.ndarray | None) -> int:
    """Expected token of one row. x: [V] logits; words: [8] u32 params; seen: bitmask or None."""
    V = x.size
    t, top_p, min_p, rp = (float(v) for v in words[:4].astype(np.uint32).view(np.float32))
    top_k = int(words[4].astype(np.uint32).view(np.int32))
    seed = int(words[5]) | (int(words[6]) << 32)
    step = int(words[7])
    x = x.astype(np.float64)
    if seen is not None and rp != 1.0:
        ids = np.arange(V)
        hit = ((seen.astype(np.uint64)[ids // 32] >> (ids % 32).astype(np.uint64)) & 1) == 1
        x[hit] = np.where(x[hit] < 0, x[hit] * rp, x[hit] / rp)
    if t == 0.0:
        return int(np.argmax(x))
    z = x / t
    p = np.exp(z - z.max())
    keep = np.ones(V, dtype=bool)
    if 0 < top_k < V:
        keep = z >= np.sort(z)[V - top_k]
    q = np.where(keep, p, 0.0)
    q /= q.sum()
    if top_p < 1.0:
        order = np.argsort(-q, kind="stable")
        qs = q[order]
        above = np.cumsum(qs) - qs  # mass before each sorted position
        first = np.r_[True, qs[1:] != qs[:-1]]  # a tie group's mass above is its first's
        above = np.maximum.accumulate(np.where(first, above, 0.0))
        drop = np.zeros(V, dtype=bool)
        drop[order] = above >= top_p
        keep &= ~drop | (q == q.max())  # the largest always survives
    if min_p > 0.0:
        keep &= q >= min_p * q.max()
    ids = np.flatnonzero(keep)
    logq = np.log(q[ids])
    g = -np.log(-np.log(ref_uniform(seed, step, ids)))
    return int(ids[np.argmax(logq + g)])


def llm_logits(rng: np.random.Generator, rows: int, V: int, scale: float = 2.0) -> np.ndarray:
    """Logits shaped like a model's: a broad normal body and a few strong candidates."""
    x = rng.standard_normal((rows, V)) * scale
    for r in range(rows):
        top = rng.choice(V, size=min(V, 8), replace=False)
        x[r, top] += rng.uniform(2.0, 8.0, size=top.size)
    return x.astype(np.float32)


def build(name: str, rng: np.random.Generator, V: int, settings: list[tuple], *,
          with_seen: bool = True, ring_len: int = 0, logits: np.ndarray | None = None,
          seen_ids: list[list[int]] | None = None) -> KernelCase:
    """A case of one launch; `settings` rows are (temperature, top_p, min_p, rep_pen, top_k)."""
    rows = len(settings)
    x = llm_logits(rng, rows, V) if logits is None else logits
    seeds = rng.integers(0, 1 << 32, size=(rows, 2))
    steps = rng.integers(0, 1 << 32, size=rows)
    params = pack_params([(*s, int(seeds[r, 0]), int(seeds[r, 1]), int(steps[r]))
                          for r, s in enumerate(settings)])
    words = (V + 31) // 32
    bufs = {"tokens": poison(rows, "i32"), "logits": Buffer(x, "f32"), "params": Buffer(params, "u32")}
    outputs = {"tokens": Check()}
    if with_seen:
        seen = np.zeros((rows, words), dtype=np.uint32)
        for r in range(rows):
            ids = rng.choice(V, size=min(V, 40), replace=False) if seen_ids is None else seen_ids[r]
            for i in ids:
                seen[r, i // 32] |= np.uint32(1 << (i % 32))
        bufs["seen"] = Buffer(seen, "u32")
        outputs["seen"] = Check()
    if ring_len:
        bufs["ring"] = poison((ring_len, rows), "i32")
        bufs["step"] = Buffer(np.array([rng.integers(0, 1 << 32)], dtype=np.uint32), "u32")
        outputs["ring"] = Check()
    prog = Program(name)
    sample_rows(prog, Ref("tokens"), Ref("ring") if ring_len else None, Ref("step") if ring_len else None,
                ring_len, Ref("logits"), Ref("params"), Ref("seen") if with_seen else None, rows, V)

    def reference(v):
        seen_in = v["seen"].astype(np.uint32) if with_seen else None
        tok = np.array([ref_token(v["logits"][r], v["params"][r], None if seen_in is None else seen_in[r])
                        for r in range(rows)], dtype=np.int64)
        out = {"tokens": tok}
        if with_seen:
            after = seen_in.copy()
            for r, t in enumerate(tok):
                after[r, t // 32] |= np.uint32(1 << (t % 32))
            out["seen"] = after
        if ring_len:
            ring = v["ring"].astype(np.int64).copy()
            ring[int(v["step"][0]) % ring_len] = tok
            out["ring"] = ring
        return out

    return KernelCase(name, prog, bufs, outputs, reference=reference)


# Settings rows: (temperature, top_p, min_p, repetition_penalty, top_k).
PLAIN = (1.0, 1.0, 0.0, 1.0, 0)


@kernel_case("sample_greedy_v1000")
def greedy_case(rng):
    # Filters and penalty-free rows alike: temperature 0 is argmax whatever else is set.
    s = [(0.0, 1.0, 0.0, 1.0, 0), (0.0, 0.5, 0.1, 1.0, 40), (0.0, 1.0, 0.0, 1.3, 0), (0.0, 0.9, 0.0, 0.8, 5)]
    return build("sample_greedy_v1000", rng, 1000, s, ring_len=3)


@kernel_case("sample_seeded_v1000")
def seeded_case(rng):
    s = [PLAIN, (0.5, 1.0, 0.0, 1.0, 20), (2.0, 0.8, 0.0, 1.0, 0), (1.0, 1.0, 0.05, 1.0, 0),
         (1.0, 1.0, 0.0, 1.5, 0), (0.7, 0.9, 0.02, 1.2, 50), (4.0, 0.95, 0.0, 1.0, 200), (0.25, 1.0, 0.0, 1.0, 999)]
    return build("sample_seeded_v1000", rng, 1000, s, ring_len=4)


@kernel_case("sample_top_k1_is_argmax_v49152")
def top_k1_case(rng):
    s = [(t, 1.0, 0.0, 1.0, 1) for t in (0.25, 1.0, 3.0, 16.0)]
    return build("sample_top_k1_is_argmax_v49152", rng, 49152, s, with_seen=False)


@kernel_case("sample_top_p_tiny_is_argmax_v1000")
def top_p_tiny_case(rng):
    s = [(t, p, 0.0, 1.0, 0) for t, p in ((1.0, 1e-6), (8.0, 1e-9), (0.5, 0.0), (2.0, 1e-30))]
    return build("sample_top_p_tiny_is_argmax_v1000", rng, 1000, s)


@kernel_case("sample_min_p_v49152")
def min_p_case(rng):
    s = [(1.0, 1.0, m, 1.0, 0) for m in (0.001, 0.05, 0.3, 1.0)] + [(2.0, 0.9, 0.1, 1.0, 100)]
    return build("sample_min_p_v49152", rng, 49152, s, ring_len=2)


@kernel_case("sample_repetition_penalty_v1000")
def rep_penalty_case(rng):
    # Row maxima are seen: a strong penalty moves greedy and cold draws to the runner-up.
    rows, V = 4, 1000
    x = llm_logits(rng, rows, V)
    order = np.argsort(-x, axis=1)
    x[np.arange(rows), order[:, 0]] = np.array([6.0, 6.0, -0.5, 6.0], dtype=np.float32) + x.max()
    x[2] = np.minimum(x[2], -1.0)  # row 2: all negative, the penalty multiplies
    x[2, order[2, 0]] = -0.5
    seen = [[int(order[r, 0]), int(order[r, 5])] for r in range(rows)]
    s = [(0.0, 1.0, 0.0, 4.0, 0), (0.25, 1.0, 0.0, 16.0, 0), (0.0, 1.0, 0.0, 8.0, 0), (0.0, 1.0, 0.0, 1.0, 0)]
    return build("sample_repetition_penalty_v1000", rng, V, s, logits=x, seen_ids=seen)


@kernel_case("sample_mixed_v151936")
def mixed_case(rng):
    s = [(1.0, 0.9, 0.05, 1.1, 50), (0.5, 0.95, 0.0, 1.0, 0), (0.0, 1.0, 0.0, 1.3, 0), PLAIN]
    return build("sample_mixed_v151936", rng, 151936, s, ring_len=5)


@kernel_case("sample_top_k_top_p_v49152")
def top_k_top_p_case(rng):
    s = [(1.0, 0.5, 0.0, 1.0, 1000), (2.0, 0.99, 0.0, 1.0, 20000), (1.0, 0.7, 0.0, 1.0, 49151), (8.0, 0.3, 0.0, 1.0, 3)]
    return build("sample_top_k_top_p_v49152", rng, 49152, s)


@kernel_case("sample_odd_shapes")
def odd_case(rng):
    # Vocabularies that are not multiples of 4 (unaligned rows) or of 32 (partial seen words),
    # including a single-token one, and many rows.
    V = int(rng.choice([1, 3, 33, 777, 1001, 5003]))
    rows = int(rng.integers(1, 40))
    pick = [PLAIN, (0.0, 1.0, 0.0, 1.3, 0), (0.5, 0.9, 0.0, 1.0, 3), (2.0, 0.6, 0.1, 1.2, 0), (1.0, 1.0, 0.0, 1.0, V)]
    s = [pick[int(i)] for i in rng.integers(0, len(pick), size=rows)]
    return build("sample_odd_shapes", rng, V, s, ring_len=int(rng.integers(1, 4)))


@kernel_case("sample_topk_then_topp")
def topk_then_topp_case(rng):
    # top-k keeps 2 of 5 close logits (4.8-5.0), split over two radix bins at the first level:
    # 5.0 alone in its bin, 4.8-4.95 in the next. top-p's target falls in that next bin, where
    # 4.95 is the one survivor, so top-p decides at the first level; its threshold (the bin's
    # floor) must not readmit 4.8-4.9, which top-k dropped. Each draw picks them ~3/5 of the time.
    V, rows = 64, 16
    x = np.full((rows, V), -10.0, dtype=np.float32)
    for r in range(rows):
        ids = rng.choice(V, size=5, replace=False)
        x[r, ids] = [5.0, 4.95, 4.9, 4.85, 4.8]
    return build("sample_topk_then_topp", rng, V, [(1.0, 0.99, 0.0, 1.0, 2)] * rows, logits=x,
                 with_seen=False)


@kernel_case("sample_many_rows_v1000")
def many_rows_case(rng):
    # The widest batch: more rows than SMs, every setting mixed.
    pick = [PLAIN, (0.0, 1.0, 0.0, 1.2, 0), (0.5, 0.9, 0.05, 1.1, 40), (2.0, 0.7, 0.0, 1.0, 0),
            (1.0, 1.0, 0.2, 1.0, 0), (0.25, 1.0, 0.0, 1.0, 5)]
    s = [pick[int(i)] for i in rng.integers(0, len(pick), size=256)]
    return build("sample_many_rows_v1000", rng, 1000, s, ring_len=2)


@kernel_case("sample_v262144")
def widest_vocab_case(rng):
    s = [(1.0, 0.9, 0.02, 1.1, 64), PLAIN]
    return build("sample_v262144", rng, 262144, s, ring_len=1)
