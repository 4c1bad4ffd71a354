// Sampling: repetition penalty, temperature, top-k, top-p, min-p and a seeded Gumbel-max draw,
// one 1024-thread CTA per row, no sort and no global scratch.
// Launcher: fixedgraph/ops/sample.py. Twin: fixedgraph/backends/reference/twins/sample.py.
//
// Per row, z_i = penalized(logit_i) * (1 / temperature) in f32 (NaN -> -inf). Every filter keeps
// an upper set of z, so each is a threshold on the order-preserving key of z (float_key); the
// thresholds are found by MSB-first radix selection (11 + 11 + 10 bits) with shared-memory
// histograms, one pass over the row per level, stopping early when the chosen bin decides.
// Passes over V: 1 (max / argmax, plus top-k level 0), top-k levels 1-2 (0-2), top-p levels
// 0-2 (1-3), 1 (draw). Greedy rows stop after the first; plain temperature rows take two.
#include <cuda_bf16.h>
#include <stdint.h>

#include "sample.cuh"
#include "pdl.cuh"

using namespace sample;

constexpr unsigned kBins = 2048;             // 11-bit digits
constexpr unsigned kNoBin = 0xffffffffu;     // an element that is not histogrammed
constexpr float kMassScale = 1099511627776.0f;  // 2^40: p / p_max as fixed point
constexpr unsigned kParamWords = 8;

struct Sel {
    unsigned bin;              // chosen bin of this level
    unsigned cnt;              // elements in it
    unsigned long long excl;   // count or mass of the bins above it (in this bucket)
    unsigned long long need;   // what the selection was looking for at this level
};

// Calls f(i, valid, x_i) for this thread's elements of the row. Every thread makes the same
// number of calls (invalid ones carry valid = false), so f may use full-warp intrinsics.
template <class F>
__device__ __forceinline__ void for_each(const float* __restrict__ x, unsigned V, F&& f) {
    const unsigned tid = threadIdx.x;
    if ((reinterpret_cast<uintptr_t>(x) & 15u) == 0) {  // 16-byte loads
        const float4* xv = reinterpret_cast<const float4*>(x);
        const unsigned nvec = V / 4;
        for (unsigned base = 0; base < nvec; base += kThreads) {
            const unsigned k = base + tid;
            const bool ok = k < nvec;
            const float4 a = ok ? __ldg(xv + k) : make_float4(0.f, 0.f, 0.f, 0.f);
            f(4 * k, ok, a.x); f(4 * k + 1, ok, a.y); f(4 * k + 2, ok, a.z); f(4 * k + 3, ok, a.w);
        }
        if (4 * nvec < V) {  // the last V % 4 elements
            const unsigned i = 4 * nvec + tid;
            f(i, i < V, i < V ? __ldg(x + i) : 0.f);
        }
    } else {  // rows of a vocabulary that is not a multiple of 4 start unaligned
        for (unsigned base = 0; base < V; base += kThreads) {
            const unsigned i = base + tid;
            f(i, i < V, i < V ? __ldg(x + i) : 0.f);
        }
    }
}

// Histogram one element per lane: lanes of a warp with the same bin combine first, so that a
// crowded bin (LLM logits cluster) costs one shared atomic per warp, not 32.
__device__ __forceinline__ void add_count(unsigned* cnt, unsigned bin) {
    if (!__any_sync(kFull, bin != kNoBin)) return;  // common on deeper levels: a cheap vote
    const unsigned grp = __match_any_sync(kFull, bin);
    if (bin != kNoBin && (threadIdx.x & 31u) == (unsigned)__ffs(grp) - 1u)
        atomicAdd(cnt + bin, (unsigned)__popc(grp));
}

// Same, with a mass (<= 2^40) summed exactly in integers: deterministic on every run.
__device__ __forceinline__ void add_mass(unsigned* cnt, unsigned long long* mass, unsigned bin,
                                         unsigned long long m) {
    if (!__any_sync(kFull, bin != kNoBin)) return;
    const unsigned grp = __match_any_sync(kFull, bin);
    const unsigned lo = __reduce_add_sync(grp, (unsigned)(m & 0xfffffu));  // <= 32 * 2^20
    const unsigned hi = __reduce_add_sync(grp, (unsigned)(m >> 20));       // <= 32 * 2^20
    if (bin != kNoBin && (threadIdx.x & 31u) == (unsigned)__ffs(grp) - 1u) {
        atomicAdd(cnt + bin, (unsigned)__popc(grp));
        atomicAdd(mass + bin, ((unsigned long long)hi << 20) + lo);
    }
}

// Scanning bins from the highest down, picks the bin d with above(d) < need <= above(d) +
// val(d), val = count or mass. With frac >= 0, need = max(1, floor(frac * total)) (top-p's
// target mass, from this level's total). Writes *out; the caller syncs before reading it.
template <bool kByMass>
__device__ __forceinline__ void select_bin(const unsigned* cnt, const unsigned long long* mass,
                                           unsigned long long need, float frac, Sel* out,
                                           unsigned long long* sw) {
    const unsigned b0 = kBins - 1 - 2 * threadIdx.x, b1 = b0 - 1;
    const unsigned long long v0 = kByMass ? mass[b0] : cnt[b0];
    const unsigned long long v1 = kByMass ? mass[b1] : cnt[b1];
    if (threadIdx.x == 0) *out = Sel{0u, 0u, 0ull, need};  // never kept: a winner overwrites
    unsigned long long total;
    const unsigned long long above = block_exclusive_scan(v0 + v1, total, sw);
    if (frac >= 0.f) {
        need = (unsigned long long)((double)frac * (double)total);
        if (need == 0) need = 1;  // the largest token always survives
    }
    if (above < need && need <= above + v0) *out = Sel{b0, cnt[b0], above, need};
    else if (above + v0 < need && need <= above + v0 + v1) *out = Sel{b1, cnt[b1], above + v0, need};
}

__device__ __forceinline__ unsigned level_shift(int level) { return level == 0 ? 21u : level == 1 ? 10u : 0u; }
__device__ __forceinline__ unsigned level_bits(int level) { return level == 2 ? 10u : 11u; }

extern "C" __global__ void __launch_bounds__(1024) sample_rows(
    int* __restrict__ tokens,              // [rows] i32, written
    int* __restrict__ ring,                // [ring_len, rows] i32 token ring, or NULL
    const unsigned* __restrict__ step,     // [1] u32 decode step counter (ring slot), or NULL (0)
    unsigned ring_len,                     // ring depth in steps; 0 disables the ring
    const float* __restrict__ logits,      // [rows, V] f32, read only
    const unsigned* __restrict__ params,   // [rows, 8] u32 words: T, top_p, min_p, rep_pen (f32),
                                           //   top_k (i32), seed_lo, seed_hi, step (u32)
    unsigned* seen,                        // [rows, ceil(V/32)] u32 bitmask of ids in the sequence, or NULL
    unsigned rows,                         // rows to sample
    unsigned V)                            // vocabulary size
{ FG_KERNEL_BEGIN();
    FG_PDL_WAIT();  // PDL: wait for the predecessor grid before any global read
    __shared__ unsigned s_cnt[kBins];
    __shared__ unsigned long long s_mass[kBins];
    __shared__ float s_v[kWarps];
    __shared__ unsigned s_i[kWarps];
    __shared__ unsigned long long s_w[kWarps];
    __shared__ Sel s_sel;
    if (blockDim.x != kThreads || V == 0) return;  // the launcher never does this
    const float kInf = __int_as_float(0x7f800000);
    const unsigned words = (V + 31) / 32;

    for (unsigned r = blockIdx.x; r < rows; r += gridDim.x) {
        const unsigned* pr = params + (size_t)r * kParamWords;
        const float temp = __uint_as_float(pr[0]), top_p = __uint_as_float(pr[1]);
        const float min_p = __uint_as_float(pr[2]), rp = __uint_as_float(pr[3]);
        const int top_k = (int)pr[4];
        const float* x = logits + (size_t)r * V;
        unsigned* seen_row = seen ? seen + (size_t)r * words : nullptr;
        const unsigned* pen = (seen_row && rp != 1.0f) ? seen_row : nullptr;
        const bool greedy = !(temp > 0.f) || isinf(1.0f / temp);
        const float inv_t = greedy ? 1.0f : 1.0f / temp;
        const bool do_topk = !greedy && top_k > 0 && (unsigned)top_k < V;
        const bool do_topp = !greedy && top_p < 1.0f;
        const bool do_minp = !greedy && min_p > 0.f;

        // HF's repetition penalty on the raw logit, then the temperature (as a reciprocal).
        auto zval = [&](unsigned i, float xi) {
            if (pen && ((pen[i >> 5] >> (i & 31u)) & 1u)) xi = xi < 0.f ? xi * rp : xi / rp;
            const float z = xi * inv_t;
            return z != z ? -kInf : z;
        };

        // Pass 1: max and argmax of z (the greedy answer), with top-k's first histogram.
        if (do_topk) {
            for (unsigned b = threadIdx.x; b < kBins; b += kThreads) s_cnt[b] = 0;
            __syncthreads();
        }
        float m = -kInf;
        unsigned amax = kNoBin;
        for_each(x, V, [&](unsigned i, bool valid, float xi) {
            const float z = valid ? zval(i, xi) : -kInf;
            if (valid && beats(z, i, m, amax)) { m = z; amax = i; }
            if (do_topk) add_count(s_cnt, valid ? float_key(z) >> 21 : kNoBin);
        });
        block_argmax(m, amax, s_v, s_i);
        unsigned token = amax;

        if (!greedy && isfinite(m)) {
            unsigned thresh = 0;  // survivors of top-k and top-p: float_key(z) >= thresh

            // top-k: the k-th largest key; ties with it are kept.
            if (do_topk) {
                unsigned long long need = (unsigned)top_k;
                unsigned prefix = 0;
                for (int level = 0;; ++level) {
                    const unsigned shift = level_shift(level), bits = level_bits(level);
                    if (level > 0) {
                        for (unsigned b = threadIdx.x; b < kBins; b += kThreads) s_cnt[b] = 0;
                        __syncthreads();
                        const unsigned hi_shift = shift + bits;
                        for_each(x, V, [&](unsigned i, bool valid, float xi) {
                            unsigned bin = kNoBin;
                            if (valid) {
                                const unsigned key = float_key(zval(i, xi));
                                if ((key >> hi_shift) == prefix) bin = (key >> shift) & ((1u << bits) - 1u);
                            }
                            add_count(s_cnt, bin);
                        });
                    }
                    __syncthreads();
                    select_bin<false>(s_cnt, s_mass, need, -1.f, &s_sel, s_w);
                    __syncthreads();
                    const Sel sel = s_sel;
                    __syncthreads();  // s_sel and s_cnt are rewritten by the next level
                    prefix = (prefix << bits) | sel.bin;
                    need -= sel.excl;
                    if (sel.cnt == need || level == 2) { thresh = prefix << shift; break; }
                }
            }

            // top-p (HF): keep a token when the mass of strictly larger survivors is below
            // top_p * (survivor mass), i.e. the largest keys up to and including the one where
            // the descending cumulative mass first reaches the target. Masses are p / p_max in
            // 2^-40 fixed point, so sums are exact and the same on every run.
            if (do_topp) {
                unsigned long long need = 0;
                unsigned prefix = 0;
                for (int level = 0;; ++level) {
                    const unsigned shift = level_shift(level), bits = level_bits(level);
                    for (unsigned b = threadIdx.x; b < kBins; b += kThreads) { s_cnt[b] = 0; s_mass[b] = 0; }
                    __syncthreads();
                    const unsigned hi_shift = shift + bits;
                    for_each(x, V, [&](unsigned i, bool valid, float xi) {
                        unsigned bin = kNoBin;
                        unsigned long long w = 0;
                        if (valid) {
                            const float z = zval(i, xi);
                            const unsigned key = float_key(z);
                            if (key >= thresh && (level == 0 || (key >> hi_shift) == prefix)) {
                                bin = (key >> shift) & ((1u << bits) - 1u);
                                // e^-28 * 2^40 = 0.76 truncates to 0: skip the expf.
                                if (z - m >= -28.f) w = (unsigned long long)(expf(z - m) * kMassScale);
                            }
                        }
                        add_mass(s_cnt, s_mass, bin, w);
                    });
                    __syncthreads();
                    select_bin<true>(s_cnt, s_mass, need, level == 0 ? fmaxf(top_p, 0.f) : -1.f, &s_sel, s_w);
                    __syncthreads();
                    const Sel sel = s_sel;
                    __syncthreads();
                    prefix = (prefix << bits) | sel.bin;
                    need = sel.need - sel.excl;
                    // NOTE: max, not assignment: a bin that decides early may also hold keys
                    // below top-k's threshold (not counted above, as they are no survivors).
                    if (sel.cnt == 1 || level == 2) { thresh = max(thresh, prefix << shift); break; }
                }
            }

            // The draw: argmax over survivors of z + Gumbel noise (= log p + noise up to a
            // constant). The argmax token always survives, so its key is a lower bound of the
            // winner's and every token with z + kGumbelMax below the best so far is skipped
            // without hashing: exact, and most of a peaked vocabulary is skipped.
            const unsigned long long origin = stream_origin(pr[5], pr[6], pr[7]);
            float best = m + gumbel(origin, amax);
            unsigned best_i = amax;
            for_each(x, V, [&](unsigned i, bool valid, float xi) {
                if (!valid) return;
                const float z = zval(i, xi);
                if (z + kGumbelMax < best || float_key(z) < thresh) return;
                if (do_minp && !(expf(z - m) >= min_p || z == m)) return;  // min_p: p >= min_p * p_max
                const float g = z + gumbel(origin, i);
                if (beats(g, i, best, best_i)) { best = g; best_i = i; }
            });
            block_argmax(best, best_i, s_v, s_i);
            token = best_i;
        }

        if (threadIdx.x == 0) {
            tokens[r] = (int)token;
            if (ring && ring_len) ring[(size_t)((step ? step[0] : 0u) % ring_len) * rows + r] = (int)token;
            if (seen_row) seen_row[token >> 5] |= 1u << (token & 31u);
        }
        __syncthreads();  // the next row reuses the shared histograms
    }
}
