"""The sample_rows twin: frequencies, determinism, params packing, NULL buffers, and a port of
the kernel's radix selection checked against the twin's sort-based thresholds."""
import numpy as np
import pytest

from fixedgraph.backends.reference.memory import RefMemory
from fixedgraph.backends.reference.twins import sample as tw
from fixedgraph.ops.sample import PARAM_FORMAT, pack_params
from fixedgraph.sampling import DEVICE_ROW_FORMAT, SamplingParams


def run_twin(logits: np.ndarray, params: np.ndarray, seen: np.ndarray | None = None,
             ring_len: int = 0, step: int = 0):
    """Call the twin on fresh RefMemory; returns (tokens, seen after, ring after)."""
    mem = RefMemory()
    rows, V = logits.shape

    def put(a):
        addr = mem.alloc(a.nbytes)
        mem.write(addr, a)
        return addr

    tokens = put(np.full(rows, -7, dtype=np.int32))
    ring = put(np.full((max(ring_len, 1), rows), -7, dtype=np.int32)) if ring_len else 0
    step_addr = put(np.array([step], dtype=np.uint32)) if ring_len else 0
    seen_addr = put(seen) if seen is not None else 0
    tw.sample_rows(mem, (rows, 1, 1), (1024, 1, 1), tokens, ring, step_addr, ring_len,
                   put(logits.astype(np.float32)), put(params), seen_addr, rows, V)
    toks = mem.view(tokens, np.int32, rows).copy()
    seen_out = mem.view(seen_addr, np.uint32, seen.size).reshape(seen.shape).copy() if seen is not None else None
    ring_out = mem.view(ring, np.int32, ring_len * rows).reshape(ring_len, rows).copy() if ring_len else None
    return toks, seen_out, ring_out


def filtered_probs(x, t, top_p, min_p, top_k):
    """softmax(x / t) after top-k, top-p (HF) and min-p, in float64."""
    p = np.exp(x / t - (x / t).max())
    p /= p.sum()
    order = np.argsort(-p)
    keep = np.zeros(x.size, dtype=bool)
    keep[order[:top_k] if top_k else order] = True
    q = np.where(keep, p, 0) / p[keep].sum()
    qs = q[order]
    keep[order] &= (np.cumsum(qs) - qs) < top_p
    keep &= q >= min_p * q.max()
    return np.where(keep, q, 0) / q[keep].sum()


@pytest.mark.parametrize("t,top_p,min_p,top_k,steps", [
    (1.0, 1.0, 0.0, 0, False), (0.8, 0.9, 0.0, 5, False), (1.7, 0.95, 0.08, 0, True), (0.5, 1.0, 0.2, 6, True)])
def test_frequencies_match_filtered_softmax(t, top_p, min_p, top_k, steps):
    x = np.array([2.0, 1.5, 1.2, 0.3, 0.0, -0.4, -1.0, -2.5], dtype=np.float32)
    n = 4000
    # Draws differ by seed (0, 1, 2, ...) or, for one request, by step: both must look random.
    rows = [(t, top_p, min_p, 1.0, top_k, 7 if steps else i, 0, i if steps else 3) for i in range(n)]
    toks, _, _ = run_twin(np.tile(x, (n, 1)), pack_params(rows))
    expected = filtered_probs(x.astype(np.float64), t, top_p, min_p, top_k) * n
    counts = np.bincount(toks, minlength=x.size)
    assert not counts[expected == 0].any(), f"filtered tokens drawn: {counts} vs {expected}"
    live = expected > 0
    chi2 = float((((counts - expected) ** 2)[live] / expected[live]).sum())
    dof = int(live.sum()) - 1
    assert chi2 < dof + 8 * np.sqrt(2 * max(dof, 1)) + 5, f"chi2 {chi2:.1f} (dof {dof}): {counts} vs {expected}"


def test_same_seed_and_step_same_token_and_steps_vary():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 1000)).astype(np.float32)
    a = [run_twin(x, pack_params([(1.0, 0.95, 0.0, 1.0, 0, 11, 22, s)]))[0][0] for s in range(40)]
    b = [run_twin(x, pack_params([(1.0, 0.95, 0.0, 1.0, 0, 11, 22, s)]))[0][0] for s in range(40)]
    assert a == b
    assert len(set(a)) > 10  # different steps draw different tokens


PINNED = [5156547, 7424509, 4476891, 13687655]


def test_uniforms_are_open_interval_and_pinned():
    ids = np.arange(1 << 16)
    u = tw.uniforms(0xDEADBEEF, 0x12345678, 99, ids)
    assert u.dtype == np.float32 and u.min() > 0 and u.max() < 1
    assert abs(float(u.mean()) - 0.5) < 0.01
    # SplitMix64's published first output for seed 0, and pinned draws: sample.cuh must agree.
    assert tw.mix64(np.array([tw.GOLDEN], dtype=np.uint64))[0] == np.uint64(0xE220A8397B1DCDAF)
    assert tw.stream_origin(0, 0, 0) == 0
    assert (tw.uniforms(1, 2, 3, np.arange(4)).astype(np.float64) * 2**24).astype(int).tolist() == PINNED


def test_pack_params_layout_matches_sampling_params():
    assert PARAM_FORMAT == DEVICE_ROW_FORMAT
    row = SamplingParams(temperature=0.7, top_p=0.9, top_k=40, min_p=0.05, repetition_penalty=1.1,
                         seed=(5 << 32) | 9).device_row(step=12, default_seed=0)
    w = pack_params([row])[0]
    assert w.shape == (8,) and w.dtype == np.uint32
    np.testing.assert_array_equal(w[:4].view(np.float32), np.float32([0.7, 0.9, 0.05, 1.1]))
    assert list(w[4:]) == [40, 9, 5, 12]
    assert pack_params([(1.0, 1.0, 0.0, 1.0, -1, 0, 0, 0)])[0, 4] == 0xFFFFFFFF  # i32 two's complement


def test_null_ring_and_seen_and_greedy_ties():
    x = np.array([[1.0, 3.0, 3.0, -1.0], [np.nan, -np.inf, 0.0, -0.0]], dtype=np.float32)
    toks, _, _ = run_twin(x, pack_params([(0.0, 1.0, 0.0, 1.0, 0, 0, 0, 0)] * 2))
    assert list(toks) == [1, 2]  # ties to the lowest index; NaN counts as -inf; -0 == +0


def test_ring_slot_and_seen_bit():
    x = np.zeros((3, 70), dtype=np.float32)
    x[np.arange(3), [5, 33, 69]] = 4.0
    seen = np.zeros((3, 3), dtype=np.uint32)
    toks, seen_out, ring = run_twin(x, pack_params([(0.0, 1.0, 0.0, 1.0, 0, 0, 0, 0)] * 3), seen, 4, 4 * 7 + 2)
    assert list(toks) == [5, 33, 69]
    assert (ring[2] == toks).all() and (ring[[0, 1, 3]] == -7).all()
    assert seen_out[0, 0] == 1 << 5 and seen_out[1, 1] == 1 << 1 and seen_out[2, 2] == 1 << 5


# A port of the kernel's radix selection (three levels of 11, 11, 10 bits, early exits).
SHIFT, BITS = (21, 10, 0), (11, 11, 10)


def _select(vals, cnt, need, frac):
    """select_bin: scanning bins downward, the bin with above < need <= above + val."""
    total = int(sum(int(v) for v in vals))
    if frac >= 0:
        need = max(1, int(float(frac) * float(total)))
    above = 0
    for b in range(2047, -1, -1):
        if above < need <= above + int(vals[b]):
            return b, int(cnt[b]), above, need
        above += int(vals[b])
    raise AssertionError("no bin selected")


def _radix(key, need, weight=None, frac=-1.0):
    prefix = 0
    for lvl in range(3):
        sh, bits = SHIFT[lvl], BITS[lvl]
        inb = np.ones(key.size, bool) if lvl == 0 else (key >> (sh + bits)) == prefix
        bins = (key[inb] >> sh) & ((1 << bits) - 1)
        cnt = np.bincount(bins, minlength=2048)
        vals = cnt if weight is None else np.bincount(bins, weights=weight[inb].astype(np.float64), minlength=2048)
        b, c, ex, need = _select(vals, cnt, need, frac if lvl == 0 else -1.0)
        prefix, need = (prefix << bits) | b, need - ex
        if (c == need if weight is None else c == 1) or lvl == 2:
            return prefix << sh


@pytest.mark.parametrize("seed", range(40))
def test_radix_selection_port_matches_twin_thresholds(seed):
    rng = np.random.default_rng(seed)
    V = int(rng.choice([2, 7, 300, 5000]))
    z = (rng.standard_normal(V) * rng.choice([0.01, 1.0, 30.0])).astype(np.float32)
    if seed % 3 == 0:
        z = np.round(z, 1).astype(np.float32)  # many ties
    key = tw.float_key(z).astype(np.int64)
    k = int(rng.integers(1, V))
    tk = _radix(key, k)
    assert (key >= tk).sum() == (key >= np.sort(key)[V - k]).sum()
    keep = key >= tk
    m = z.max()
    w = np.where(keep, (np.exp(z - m) * tw.MASS_SCALE).astype(np.uint64), 0)
    top_p = float(np.float32(rng.choice([1e-9, 0.3, 0.9, 0.999])))
    tp = _radix(key[keep], 0, weight=w[keep], frac=top_p)  # float64 bins: exact below 2^53
    twin_t = tw._top_p_threshold(key[keep].astype(np.uint32), z[keep], m, top_p)
    assert ((key >= tp) & keep).sum() == ((key >= twin_t) & keep).sum()
