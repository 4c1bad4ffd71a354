// The persistent decode step: one launch runs a whole batch-1 greedy decode step of a dense
// decoder (every layer's norm + qkv, QK-norm + RoPE + KV write + attention, o_proj + residual,
// norm + gate_up + SiLU, down + residual, then the final norm + lm_head + argmax), one CTA an SM.
// Launcher and op table: fixedgraph/ops/mega.py. Twin: fixedgraph/backends/reference/twins/mega.py.
//
// Design (HazyResearch's megakernel, 2025, measured for this runtime by runtime_test.cu's
// persist_probe, BENCHMARKS sessions 39-41):
// - The last warp of each CTA is a loader: its lane 0 streams this CTA's rows of every weight of
//   the step, in op order, through a ring of shared-memory stages by cp.async.bulk (evict-first
//   L2 policy), as far ahead as the ring allows. It starts before the PDL wait (weights are
//   constants). The other warps compute.
// - Ops hand over through LL words (NCCL's low-latency protocol): every activation element is
//   stored as one 8-byte word epoch << 32 | f32 bits, and a consumer re-reads its words until
//   they carry this step's epoch; no counter, no fence. The epoch is the pass counter that the
//   step's staging kernel (stage_meta_ring_embed) advanced; every buffer of words belongs to one
//   op of one layer, so a step never reads a word of its own from another op.
// - Quiet handovers: from when a CTA releases an op's last stages until it has read the next
//   op's input words, its loader issues no copy (an SM's own in-flight copies slow its L2 hits
//   ~4x: session 12's probe; session 41: 444.9 -> 357.8 us on the probe's chain).
// - GEMV rows: a warp takes row w of a stage's chunk and of the next chunk's, both in flight
//   (gate and up rows of one output together in the SiLU op); lane l sums its 16-byte units in
//   four fp32 chains (stream_row); a shfl_xor tree; fp32 epilogue.
// Numerics follow the decode graph's kernels rounding for rounding (bf16 wherever the graph
// stores bf16; the residual stream in fp32); summation orders (and the attention's online
// softmax) differ.
//
// Table (u32 words at `table`): a header of MEGA_HDR words, then nops ops of MEGA_OPW words.
// Every address is an offset from `base` in 16-byte units (MEGA_NONE: absent). Header:
//   [0] nops  [1] pass counter (u32; the epoch)  [2] metadata region  [3..7] byte offsets in it of
//   positions (u32), slot (i64), seq_len (i32), block_table (i32), step (u32)  [8] block_size
//   [9] max_blocks  [10] Hq  [11] Hkv  [12] D  [13] eps (f32 bits)  [14] scale (f32 bits)
//   [15] smax: most key splits  [16] keys a split takes at least  [17] rope table ([pos][D/2][2]
//   f32)  [18] ring_len  [19] kmax (the longest K)  [20] H  [21] xbytes (shared bytes before the
//   ring)  [22] logits (f32 [V])  [23] tokens (i32)  [24] marks (u64 [6 nops + 1][G], see the
//   kernel) or MEGA_NONE  [25] tbytes: the table's bytes, copied into shared memory at the start
//   (between the x area and the ring); the step's attention plan is read once, after the wait
//   [26] quiet policy bits (MQ_*; 0: the loader is quiet from an op's last stage release until the
//   next op's input is read)
// Op words: [0] kind  [1] N  [2] K  [3] W (bf16 [N, K]; MK_SILU: [2N, K], gate rows then up)
//   [4] input words (MK_QKV, MK_SILU, MK_HEAD: the residual stream h, or with [9] & 1 plain f32
//   at [4]; MK_ORES: x; MK_ATTN: qkv; MK_MERGE: partials; MK_PICK: the head's per-CTA words)
//   [5] norm weight (MK_ATTN: q_norm)  [6] bias (MK_ATTN: k_norm)  [7] output words (MK_HEAD:
//   the per-CTA argmax words; MK_ATTN: partials [Hq][smax][D + 2] = (m, l, o[D]))  [8] MK_ORES:
//   residual words (with [9] & 2 plain f32); MK_ATTN: output words when one split  [9] flags  [10] k_pool  [11] v_pool.
//   MK_QKV:   out[n] = bf16(W[n] . x + bias[n]), x = bf16(w * bf16(h * inv_rms(h)))
//   MK_ORES:  out[n] = res[n] + bf16(W[n] . x)           (fp32: the residual stream)
//   MK_SILU:  out[n] = bf16(bf16(silu(g)) * u), g = bf16(W[n] . x), u = bf16(W[N + n] . x)
//   MK_HEAD:  logits[n] = W[n] . x (x normed as MK_QKV), and each CTA's best (value, lowest index)
//   MK_ATTN:  S = clamp(ceil(seq_len / [16]), 1, smax) splits of the keys; CTA b < Hkv S takes kv
//             head b / S, split b % S: QK-norm + RoPE of its q heads and k (qk_norm_rope_kv's
//             rounding), the new k / v into the pools at slot (the split holding key seq_len - 1,
//             which uses them in place of the pools'), softmax(q K^T scale) V over its keys
//   MK_MERGE: when S > 1, CTA h < Hq merges head h's splits into out words
//   MK_PICK:  CTA 0 reduces the head's CTA words to the token: tokens[0] and ring[step % ring_len]
// Launch: grid = SMs (every CTA resident at once: a word nobody writes traps after seconds),
// block = 32 (cw + 1) threads (cw compute warps, at most 15), dynamic shared memory = xbytes + tbytes +
// stages x slot bytes (slot % 16 == 0, 2 <= stages <= MEGA_MAX_STAGES, a stage holding at least
// one row of every op, two for MK_SILU).
#include <cuda_bf16.h>
#include <stdint.h>

#include "common_ops.cuh"
#include "pdl.cuh"
#include "stream.cuh"

#define MEGA_HDR 32
#define MEGA_OPW 16
#define MEGA_NONE 0xFFFFFFFFu
#define MEGA_MAX_STAGES 16
#define MEGA_KEYS 3  // keys a warp holds in registers per round (the first round issued before the wait)
enum : unsigned { MK_QKV = 1, MK_ATTN = 2, MK_MERGE = 3, MK_ORES = 4, MK_SILU = 5, MK_HEAD = 6, MK_PICK = 7 };
enum : unsigned { MF_X_PLAIN = 1, MF_RES_PLAIN = 2 };  // op word 9 (ops/mega.py FLAG_*)
// Header word 26 (ops/mega.py QUIET_*): MQ_ATTN keeps the loader quiet from norm + qkv's last
// release through the attention and the merge until o_proj's x is read (no weight copy in flight
// beside the K/V loads); MQ_QKV keeps it quiet through norm + qkv too, except for norm + qkv's own
// stages (the loader may always issue a stage of the op the compute warps are in).
enum : unsigned { MQ_ATTN = 1, MQ_QKV = 2 };

// This step's attention plan, the same for every layer: read once after the PDL wait.
struct StepInfo {
    int n;                // keys, the new one included (seq_len)
    unsigned S, kps;      // splits, keys a split
    unsigned g, s, k0, k1;  // this CTA's item (kv head g, split s: keys [k0, k1)); g = MEGA_NONE: none
    unsigned pos, step;
    long long slot;
    unsigned cur;         // this item holds key n - 1 and writes it (slot >= 0)
    unsigned used;        // splits that hold keys
    unsigned krow[15][MEGA_KEYS];  // round 0's pool row of warp w's u-th key (MEGA_NONE: none / the new key)
};

// Outside the anonymous namespace: its PTX name must not depend on the source's path.
__shared__ StepInfo mega_si;  // this CTA's, written once a step after the PDL wait

namespace {

typedef unsigned long long u64;

struct Mega {
    unsigned char* base;
    const unsigned* hdr;  // the op table, copied into shared memory
    unsigned epoch, G, b, warp, lane, cw, nthreads;
    template <class T>
    __device__ __forceinline__ T* at(unsigned off16) const {
        return reinterpret_cast<T*>(base + 16ull * off16);
    }
};


// The marks region when marks are on (header word 24), else nullptr.
__device__ __forceinline__ unsigned long long* marks_of(const Mega& m) {
    return m.hdr[24] != MEGA_NONE ? m.at<unsigned long long>(m.hdr[24]) : nullptr;
}

__device__ __forceinline__ void ll_store(u64* p, unsigned epoch, float v) {
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"((u64)epoch << 32 | __float_as_uint(v)) : "memory");
}

__device__ __forceinline__ u64 ll_load(const u64* p) {
    u64 v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

// One word of this epoch (spins; traps after seconds: a word nobody writes).
__device__ __forceinline__ float ll_wait(const u64* p, unsigned epoch) {
    for (unsigned spins = 0;; ++spins) {
        const u64 v = ll_load(p);
        if ((unsigned)(v >> 32) == epoch) return __uint_as_float((unsigned)v);
        if (spins == (1u << 22)) __trap();
        __nanosleep(64);
    }
}

// f(i, value) for n words (n even), word pair p at src(p) (16-byte aligned), the compute threads
// striding over pairs, four pairs a thread in flight, each re-read until all carry the epoch.
template <class A, class F>
__device__ __forceinline__ void ll_read_map(const Mega& m, unsigned n, A src, F f) {
    const unsigned tid = threadIdx.x, nt = m.nthreads;
    for (unsigned p0 = tid; p0 < n / 2; p0 += 4 * nt) {
        u64 a[4], c[4];
        for (unsigned spins = 0;; ++spins) {
            bool ok = true;
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const unsigned pq = p0 + q * nt;
                a[q] = c[q] = (u64)m.epoch << 32;
                if (pq < n / 2)
                    asm volatile("ld.relaxed.gpu.global.v2.u64 {%0, %1}, [%2];"
                                 : "=l"(a[q]), "=l"(c[q]) : "l"(src(pq)) : "memory");
            }
#pragma unroll
            for (int q = 0; q < 4; ++q)
                ok = ok && (unsigned)(a[q] >> 32) == m.epoch && (unsigned)(c[q] >> 32) == m.epoch;
            if (ok) break;
            if (spins == (1u << 22)) __trap();
            __nanosleep(64);
        }
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const unsigned pq = p0 + q * nt;
            if (pq < n / 2) {
                f(2 * pq, __uint_as_float((unsigned)a[q]));
                f(2 * pq + 1, __uint_as_float((unsigned)c[q]));
            }
        }
    }
}

// The n words at src (contiguous).
template <class F>
__device__ __forceinline__ void ll_read(const Mega& m, const u64* src, unsigned n, F f) {
    ll_read_map(m, n, [&](unsigned p) { return src + 2 * p; }, f);
}

__device__ __forceinline__ void compute_bar(const Mega& m) {
    asm volatile("bar.sync 1, %0;" ::"r"(m.nthreads) : "memory");
}

// Sum of v over the compute threads (red: >= 16 floats of shared memory); every thread gets it.
__device__ __forceinline__ float compute_sum(const Mega& m, float v, float* red) {
    v = warp_sum(v);
    if (m.lane == 0) red[m.warp] = v;
    compute_bar(m);
    float t = 0.0f;
    for (unsigned w = 0; w < m.cw; ++w) t += red[w];
    compute_bar(m);
    return t;
}

// x (bf16, shared) = bf16(w * bf16(h * inv_rms(h))) for the H-element residual h: LL words, or
// plain fp32 (layer 0: the embedding the staging kernel wrote before this grid's wait).
__device__ __forceinline__ void read_normed(const Mega& m, const unsigned* op, bf16* xs, float* hf, float* red) {
    const unsigned H = op[2];
    const float eps = __uint_as_float(m.hdr[13]);
    const bf16* w = m.at<const bf16>(op[5]);
    // this thread's first norm weights, loaded before the wait for h (an L2 round trip fewer after it)
    constexpr int kW = 4;
    bf16 wr[kW];
#pragma unroll
    for (int q = 0; q < kW; ++q)
        if (threadIdx.x + q * m.nthreads < H) wr[q] = w[threadIdx.x + q * m.nthreads];
    float ss = 0.0f;
    if (op[9] & MF_X_PLAIN) {
        const float* h = m.at<const float>(op[4]);
        for (unsigned i = threadIdx.x; i < H; i += m.nthreads) {
            const float v = h[i];
            hf[i] = v;
            ss += v * v;
        }
    } else {
        ll_read(m, m.at<const u64>(op[4]), H, [&](unsigned i, float v) {
            hf[i] = v;
            ss += v * v;
        });
    }
    const float inv = 1.0f / sqrtf(compute_sum(m, ss, red) / (float)H + eps);
#pragma unroll
    for (int q = 0; q < kW; ++q) {
        const unsigned i = threadIdx.x + q * m.nthreads;
        if (i < H) xs[i] = __float2bfloat16_rn(__bfloat162float(wr[q]) * round_bf16(hf[i] * inv));
    }
    for (unsigned i = threadIdx.x + kW * m.nthreads; i < H; i += m.nthreads)
        xs[i] = __float2bfloat16_rn(__bfloat162float(w[i]) * round_bf16(hf[i] * inv));
}

// An order-preserving key of an fp32 logit with its index: the larger key wins, NaN below every
// number, ties to the lower index (argmax.cu's `better`).
__device__ __forceinline__ u64 argmax_key(float v, unsigned n) {
    const unsigned u = __float_as_uint(v);
    const unsigned k = v != v ? 0u : (u & 0x80000000u ? ~u : u | 0x80000000u);
    return (u64)k << 32 | (0xFFFFFFFFu - n);
}

// ---- attention ------------------------------------------------------------------------------

template <int DL>  // D / 32: a lane's dims [DL lane, DL lane + DL), kept as bf16 pairs
struct KvRow {
    unsigned w[DL / 2];
    // asm volatile: issued here, before the wait for this step's q / k / v that follows, rather
    // than where the compiler would sink it (its use); .nc: the pools' rows other than this step's
    // key were written by earlier launches, and this step's key is never read back from them
    __device__ __forceinline__ void load(const bf16* p) {
        if constexpr (DL == 4)
            asm volatile("ld.global.nc.v2.u32 {%0, %1}, [%2];" : "=r"(w[0]), "=r"(w[1]) : "l"(p));
        else
            asm volatile("ld.global.nc.u32 %0, [%1];" : "=r"(w[0]) : "l"(p));
    }
    __device__ __forceinline__ void set(const float* v) {  // bf16 values as fp32
#pragma unroll
        for (int i = 0; i < DL / 2; ++i) w[i] = (__float_as_uint(v[2 * i]) >> 16) | (__float_as_uint(v[2 * i + 1]) & 0xFFFF0000u);
    }
    __device__ __forceinline__ float operator[](int d) const { return d & 1 ? bf16_hi(w[d / 2]) : bf16_lo(w[d / 2]); }
};

// The attention item of this CTA (see the header). Shared: qs [G][D] f32 (q heads, then k, then v
// as rows G, G + 1), st [cw][G][D + 2] f32 (each warp's running m, l, acc).
template <int DL>
__device__ __forceinline__ void attention_op(const Mega& m, const unsigned* op, unsigned j, float* qs, float* st,
                                             volatile unsigned* quiet) {
    constexpr int D = 32 * DL;
    const unsigned* h = m.hdr;
    const StepInfo& si = mega_si;
    unsigned long long* const marks = marks_of(m);
    if (si.g == MEGA_NONE) return;
    const unsigned Hq = h[10], Hkv = h[11], G = Hq / Hkv, smax = h[15];
    const int n = si.n;
    const unsigned S = si.S, g = si.g, s = si.s, k0 = si.k0, k1 = si.k1, pos = si.pos;
    const long long slot = si.slot;
    const bool cur_here = si.cur;
    const unsigned lane = m.lane, warp = m.warp;
    const bf16* kp = m.at<const bf16>(op[10]) + (size_t)g * D + DL * lane;
    const bf16* vp = m.at<const bf16>(op[11]) + (size_t)g * D + DL * lane;
    const int* table = reinterpret_cast<const int*>(m.at<const unsigned char>(h[2]) + h[6]);
    const unsigned bs = h[8];
    auto row_of = [&](unsigned t) -> size_t {  // element offset of key t's row (later rounds)
        return ((size_t)table[t / bs] * bs + t % bs) * Hkv * D;
    };
    // Round 0's keys (rows precomputed once a step), issued before the wait for this step's q / k / v.
    KvRow<DL> kr[MEGA_KEYS], vr[MEGA_KEYS];
    const unsigned stride = m.cw * MEGA_KEYS;
#pragma unroll
    for (int u = 0; u < MEGA_KEYS; ++u) {
        const unsigned row = si.krow[warp][u];
        if (row != MEGA_NONE) {
            kr[u].load(kp + (size_t)row * Hkv * D);
            vr[u].load(vp + (size_t)row * Hkv * D);
        }
    }
    const unsigned jm = m.hdr[0] + 1 + 5 * j;  // this op's sub-mark rows (marks on)
    if (marks && threadIdx.x == 0) marks[(size_t)(jm + 0) * m.G + m.b] = global_ns();
    // This step's q heads of group g, its k and v: G + 2 rows of D words.
    // Round 0's RoPE rows and QK-norm weights for this lane's pairs (i = lane + 32 e), also before the wait.
    const float* cs = m.at<const float>(h[17]) + (size_t)pos * D;
    constexpr int E = D / 64;  // pairs a lane holds of a head (D / 2 pairs over 32 lanes)
    float2 csr[E];
    float wq[E][2], wk[E][2];
    const bool qn = op[5] != MEGA_NONE, kn = op[6] != MEGA_NONE;
#pragma unroll
    for (int e = 0; e < E; ++e) {
        const unsigned i = lane + 32 * e;
        csr[e] = *reinterpret_cast<const float2*>(cs + 2 * i);
        wq[e][0] = qn ? __bfloat162float(m.at<const bf16>(op[5])[i]) : 0.0f;
        wq[e][1] = qn ? __bfloat162float(m.at<const bf16>(op[5])[i + D / 2]) : 0.0f;
        wk[e][0] = kn ? __bfloat162float(m.at<const bf16>(op[6])[i]) : 0.0f;
        wk[e][1] = kn ? __bfloat162float(m.at<const bf16>(op[6])[i + D / 2]) : 0.0f;
    }
    const u64* qkv = m.at<const u64>(op[4]);
    ll_read_map(  // rows 0..G-1: q heads gG.., G: k head g, G + 1: v head g; all in flight at once
        m, (G + 2) * D,
        [&](unsigned p) {
            const unsigned r = 2 * p / D, head = r < G ? g * G + r : (r == G ? Hq + g : Hq + Hkv + g);
            return qkv + (size_t)head * D + 2 * p % D;
        },
        [&](unsigned i, float v) { qs[i] = v; });
    compute_bar(m);
    if (threadIdx.x == 0 && !(m.hdr[26] & MQ_ATTN)) *quiet = 0;  // the op's input is read: the loader may stream again
    if (marks && threadIdx.x == 0) marks[(size_t)(jm + 1) * m.G + m.b] = global_ns();
    // QK-norm + RoPE of rows 0..G (q heads, k), a warp a row (qk_norm_rope_kv's arithmetic:
    // bf16(w * bf16(x * inv_rms)), then o1 = x1 cos - x2 sin, o2 = x2 cos + x1 sin unfused, rounded)
    const float eps = __uint_as_float(h[13]);
    for (unsigned r = warp; r <= G; r += m.cw) {
        const bool norm = r < G ? qn : kn;
        float* x = qs + r * D;
        float ss = 0.0f;
#pragma unroll
        for (int e = 0; e < E; ++e) {
            const unsigned i = lane + 32 * e;
            ss += x[i] * x[i] + x[i + D / 2] * x[i + D / 2];
        }
        const float inv = norm ? 1.0f / sqrtf(warp_sum(ss) / (float)D + eps) : 0.0f;
        __syncwarp();
#pragma unroll
        for (int e = 0; e < E; ++e) {
            const unsigned i = lane + 32 * e;
            float a = x[i], b = x[i + D / 2];
            if (norm) {
                a = round_bf16((r < G ? wq[e][0] : wk[e][0]) * round_bf16(a * inv));
                b = round_bf16((r < G ? wq[e][1] : wk[e][1]) * round_bf16(b * inv));
            }
            x[i] = round_bf16(__fsub_rn(__fmul_rn(a, csr[e].x), __fmul_rn(b, csr[e].y)));
            x[i + D / 2] = round_bf16(__fadd_rn(__fmul_rn(b, csr[e].x), __fmul_rn(a, csr[e].y)));
        }
    }
    compute_bar(m);
    if (marks && threadIdx.x == 0) marks[(size_t)(jm + 2) * m.G + m.b] = global_ns();
    if (cur_here && warp == 0) {  // the new key and value into the pools
        bf16* kd = m.at<bf16>(op[10]) + ((size_t)slot * Hkv + g) * D;
        bf16* vd = m.at<bf16>(op[11]) + ((size_t)slot * Hkv + g) * D;
        for (unsigned i = lane; i < D; i += 32) {
            kd[i] = __float2bfloat16_rn(qs[G * D + i]);
            vd[i] = __float2bfloat16_rn(qs[(G + 1) * D + i]);
        }
    }
    // Each warp's running (m, l, acc) per q head, in shared memory across rounds.
    const float scale = __uint_as_float(h[14]);
    for (unsigned q = 0; q < G; ++q) {
        float* w = st + ((size_t)warp * G + q) * (D + 2);
        if (lane == 0) w[0] = -INFINITY, w[1] = 0.0f;
#pragma unroll
        for (int d = 0; d < DL; ++d) w[2 + DL * lane + d] = 0.0f;
    }
    __syncwarp();
    for (unsigned base = k0 + warp; base < k1; base += stride) {
        if (base != k0 + warp) {  // later rounds: loaded here
#pragma unroll
            for (int u = 0; u < MEGA_KEYS; ++u) {
                const unsigned t = base + m.cw * u;
                if (t < k1 && !(cur_here && t == (unsigned)n - 1)) {
                    kr[u].load(kp + row_of(t));
                    vr[u].load(vp + row_of(t));
                }
            }
        }
#pragma unroll
        for (int u = 0; u < MEGA_KEYS; ++u) {
            const unsigned t = base + m.cw * u;
            if (cur_here && t == (unsigned)n - 1) {
                kr[u].set(qs + G * D + DL * lane);
                vr[u].set(qs + (G + 1) * D + DL * lane);
            }
        }
        for (unsigned q = 0; q < G; ++q) {
            float* w = st + ((size_t)warp * G + q) * (D + 2);
            float qv[DL], acc[DL];
#pragma unroll
            for (int d = 0; d < DL; ++d) qv[d] = qs[q * D + DL * lane + d], acc[d] = w[2 + DL * lane + d];
            float mx = w[0], l = w[1];
            // the round's scores together (their warp sums interleaved), then one online update
            float sc[MEGA_KEYS];
#pragma unroll
            for (int u = 0; u < MEGA_KEYS; ++u) {
                sc[u] = 0.0f;
#pragma unroll
                for (int d = 0; d < DL; ++d) sc[u] = fmaf(qv[d], kr[u][d], sc[u]);
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1)
#pragma unroll
                for (int u = 0; u < MEGA_KEYS; ++u) sc[u] += __shfl_xor_sync(0xffffffffu, sc[u], o);
            float mn = mx;
#pragma unroll
            for (int u = 0; u < MEGA_KEYS; ++u) {
                sc[u] = base + m.cw * u < k1 ? sc[u] * scale : -INFINITY;  // key u of this round, if any
                mn = fmaxf(mn, sc[u]);
            }
            const float c = expf(mx - mn);  // mn is finite: key 0 of the round exists
            l *= c;
#pragma unroll
            for (int d = 0; d < DL; ++d) acc[d] *= c;
#pragma unroll
            for (int u = 0; u < MEGA_KEYS; ++u) {
                if (base + m.cw * u >= k1) break;  // a missing key's registers hold no value (NaN x 0 = NaN)
                const float p = expf(sc[u] - mn);
                l += p;
#pragma unroll
                for (int d = 0; d < DL; ++d) acc[d] = fmaf(p, vr[u][d], acc[d]);
            }
            mx = mn;
            __syncwarp();
            if (lane == 0) w[0] = mx, w[1] = l;
#pragma unroll
            for (int d = 0; d < DL; ++d) w[2 + DL * lane + d] = acc[d];
            __syncwarp();
        }
    }
    compute_bar(m);
    if (marks && threadIdx.x == 0) marks[(size_t)(jm + 3) * m.G + m.b] = global_ns();
    // The warps merged: per q head, (M, L, o = sum e^(m_w - M) acc_w / L).
    for (unsigned i = threadIdx.x; i < G * D; i += m.nthreads) {
        const unsigned q = i / D, d = i % D;
        float M = -INFINITY;
        for (unsigned w = 0; w < m.cw; ++w) M = fmaxf(M, st[((size_t)w * G + q) * (D + 2)]);
        float L = 0.0f, o = 0.0f;
        if (M != -INFINITY)
            for (unsigned w = 0; w < m.cw; ++w) {
                const float* sw = st + ((size_t)w * G + q) * (D + 2);
                const float e = expf(sw[0] - M);
                L = fmaf(sw[1], e, L);
                o = fmaf(sw[2 + d], e, o);
            }
        o = L > 0.0f ? o / L : 0.0f;
        const unsigned hq = g * G + q;
        if (S == 1) {
            ll_store(m.at<u64>(op[8]) + (size_t)hq * D + d, m.epoch, round_bf16(o));
        } else {
            u64* p = m.at<u64>(op[7]) + ((size_t)hq * smax + s) * (D + 2);
            if (d == 0) ll_store(p, m.epoch, M), ll_store(p + 1, m.epoch, L);
            ll_store(p + 2 + d, m.epoch, o);
        }
    }
    if (marks && threadIdx.x == 0) marks[(size_t)(jm + 4) * m.G + m.b] = global_ns();
}

// MK_MERGE: CTA h < Hq merges head h's S partials (the attention kernels' split merge).
__device__ __forceinline__ void merge_op(const Mega& m, const unsigned* op) {
    const unsigned* h = m.hdr;
    const unsigned smax = h[15], D = h[12], S = mega_si.S, used = mega_si.used;
    if (S == 1 || m.b >= h[10]) return;
    const u64* part = m.at<const u64>(op[4]) + (size_t)m.b * smax * (D + 2);
    for (unsigned d = threadIdx.x; d < D; d += m.nthreads) {
        float M = -INFINITY, L = 0.0f, o = 0.0f;
        for (unsigned s0 = 0; s0 < used; s0 += 8) {  // 8 splits' (m, l, o[d]) in flight, merged online
            u64 w[8][3];
            for (unsigned spins = 0;; ++spins) {
                bool ok = true;
#pragma unroll
                for (int q = 0; q < 8; ++q) {
                    const u64* p = part + (size_t)(s0 + q) * (D + 2);
                    w[q][0] = w[q][1] = w[q][2] = (u64)m.epoch << 32;
                    if (s0 + q < used) w[q][0] = ll_load(p), w[q][1] = ll_load(p + 1), w[q][2] = ll_load(p + 2 + d);
                }
#pragma unroll
                for (int q = 0; q < 8; ++q)
#pragma unroll
                    for (int e = 0; e < 3; ++e) ok = ok && (unsigned)(w[q][e] >> 32) == m.epoch;
                if (ok) break;
                if (spins == (1u << 22)) __trap();
                __nanosleep(64);
            }
#pragma unroll
            for (int q = 0; q < 8; ++q) {
                const float ms = __uint_as_float((unsigned)w[q][0]), ls = __uint_as_float((unsigned)w[q][1]);
                if (s0 + q >= used || !(ls > 0.0f)) continue;
                const float mn = fmaxf(M, ms), c = expf(M - mn), e = ls * expf(ms - mn);
                L = fmaf(L, c, e);
                o = fmaf(o, c, e * __uint_as_float((unsigned)w[q][2]));
                M = mn;
            }
        }
        ll_store(m.at<u64>(op[7]) + (size_t)m.b * D + d, m.epoch, round_bf16(L > 0.0f ? o / L : 0.0f));
    }
}

// MK_PICK: CTA 0 reduces the head's per-CTA (key, index) words to the token.
__device__ __forceinline__ void pick_op(const Mega& m, const unsigned* op, int* ring, u64* red) {
    if (m.b != 0) return;
    const u64* words = m.at<const u64>(op[4]);
    u64 best = 0;
    for (unsigned c = threadIdx.x; c < m.G; c += m.nthreads) {
        const unsigned k = __float_as_uint(ll_wait(words + 2 * c, m.epoch));
        const unsigned i = __float_as_uint(ll_wait(words + 2 * c + 1, m.epoch));
        best = max(best, (u64)k << 32 | i);
    }
    for (int o = 16; o > 0; o >>= 1) best = max(best, __shfl_xor_sync(0xffffffffu, best, o));
    if (m.lane == 0) red[m.warp] = best;
    compute_bar(m);
    if (threadIdx.x == 0) {
        for (unsigned w = 1; w < m.cw; ++w) best = max(best, red[w]);
        const int tok = (int)(0xFFFFFFFFu - (unsigned)best);
        *m.at<int>(m.hdr[23]) = tok;
        if (ring && m.hdr[18]) ring[mega_si.step % m.hdr[18]] = tok;
    }
}

__device__ __forceinline__ bool is_gemv(unsigned kind) {
    return kind == MK_QKV || kind == MK_ORES || kind == MK_SILU || kind == MK_HEAD;
}

// Rows [r0, r1) of N that CTA b of G owns.
__device__ __forceinline__ void own_rows(unsigned b, unsigned G, unsigned N, unsigned& r0, unsigned& r1) {
    r0 = (unsigned)((u64)b * N / G);
    r1 = (unsigned)((u64)(b + 1) * N / G);
}

}  // namespace

extern "C" __global__ void __launch_bounds__(512) decode_mega(unsigned char* base, const unsigned* __restrict__ table,
                                                              int* ring, unsigned slot) { FG_KERNEL_BEGIN();
    __shared__ __align__(8) u64 full[MEGA_MAX_STAGES], empty[MEGA_MAX_STAGES];
    __shared__ u64 red64[16];
    __shared__ float red[16];
    __shared__ volatile unsigned quiet;  // 1 from an op's last stage release until the next op's input is read
    __shared__ volatile unsigned cur_op;  // the op the compute warps are in (MQ_QKV's exception)
    StepInfo& si = mega_si;
    extern __shared__ __align__(16) unsigned char mega_smem[];
    unsigned dyn;
    asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
    const unsigned xbytes = table[21], tbytes = table[25];  // [x area][the op table][the ring]
    const unsigned stages = slot && dyn > xbytes + tbytes ? (dyn - xbytes - tbytes) / slot : 0;
    const unsigned cw = blockDim.x / 32 - 1;
    if (stages < 2 || stages > MEGA_MAX_STAGES || slot % 16 || cw < 1 || cw > 15 || blockDim.x % 32 ||
        tbytes < 4 * (MEGA_HDR + MEGA_OPW * table[0]) || tbytes % 16)
        __trap();
    unsigned* hdr = reinterpret_cast<unsigned*>(mega_smem + xbytes);  // the table, copied (constant: before the wait)
    for (unsigned i = threadIdx.x; i < tbytes / 16; i += blockDim.x)
        reinterpret_cast<uint4*>(hdr)[i] = __ldg(reinterpret_cast<const uint4*>(table) + i);
    Mega m{base, hdr, 0, gridDim.x, blockIdx.x, threadIdx.x / 32, threadIdx.x % 32, cw, 32 * cw};
    const unsigned nops = table[0];
    const unsigned char* stage0 = mega_smem + xbytes + tbytes;  // the ring (the loader's copies land here)
    const unsigned ring0 = (unsigned)__cvta_generic_to_shared(stage0);
    if (threadIdx.x == 0) {
        quiet = 0;
        cur_op = 0;
        for (unsigned s = 0; s < stages; ++s) {
            mbar_init1((unsigned)__cvta_generic_to_shared(&full[s]));
            asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"((unsigned)__cvta_generic_to_shared(&empty[s])),
                         "r"(cw));
        }
        mbar_init_fence();
    }
    __syncthreads();
    if (m.warp == cw) {  // the loader: every GEMV op's rows of this CTA, in op order
        if (m.lane == 0) {
            unsigned seq = 0;
            for (unsigned j = 0; j < nops; ++j) {
                const unsigned* op = hdr + MEGA_HDR + MEGA_OPW * j;
                if (!is_gemv(op[0])) continue;
                const unsigned N = op[1], K = op[2], pair = op[0] == MK_SILU ? 2 : 1;
                unsigned r0, r1;
                own_rows(m.b, m.G, N, r0, r1);
                const unsigned per = slot / (2 * K * pair);
                const unsigned char* w = m.at<const unsigned char>(op[3]);
                for (unsigned r = r0; r < r1; r += per, ++seq) {
                    const unsigned s = seq % stages, use = seq / stages;
                    if (use > 0) mbar_wait_parity((unsigned)__cvta_generic_to_shared(&empty[s]), (use - 1) & 1);
                    const unsigned rows = min(per, r1 - r), bytes = 2 * K * rows;
                    const unsigned bar = (unsigned)__cvta_generic_to_shared(&full[s]);
                    while (quiet && !(hdr[26] & MQ_QKV && j <= cur_op)) __nanosleep(32);
                    mbar_expect(bar, bytes * pair);
                    for (unsigned p = 0; p < pair; ++p)
                        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
                                     " [%0], [%1], %2, [%3], %4;"
                                     ::"r"(ring0 + s * slot + p * bytes), "l"(w + 2ull * K * (r + p * N)), "r"(bytes),
                                     "r"(bar), "l"(0x12F0000000000000ull)  // evict-first (gemm.cuh's immediate)
                                     : "memory");
                }
            }
        }
        return;
    }
    FG_PDL_WAIT();
    m.epoch = __ldcg(m.at<const unsigned>(hdr[1]));
    if (threadIdx.x == 0) {  // this step's attention plan (the same for every layer)
        const unsigned char* meta = m.at<const unsigned char>(hdr[2]);
        const int n = *reinterpret_cast<const int*>(meta + hdr[5]);
        const unsigned nn = (unsigned)max(n, 0), Hkv = hdr[11];
        si.n = n;
        si.S = n <= 0 ? 1u : min(hdr[15], max(1u, (nn + hdr[16] - 1) / hdr[16]));
        si.kps = (nn + si.S - 1) / si.S;
        si.used = si.kps ? (nn + si.kps - 1) / si.kps : 0;
        si.slot = *reinterpret_cast<const long long*>(meta + hdr[4]);
        si.pos = *reinterpret_cast<const unsigned*>(meta + hdr[3]);
        si.step = *reinterpret_cast<const unsigned*>(meta + hdr[7]);
        si.g = m.b < Hkv * si.S ? m.b / si.S : MEGA_NONE;
        si.s = m.b % si.S;
        si.k0 = min(nn, si.s * si.kps);
        si.k1 = min(nn, si.k0 + si.kps);
        si.cur = si.g != MEGA_NONE && si.slot >= 0 && n >= 1 && si.k0 <= nn - 1 && nn - 1 < si.k1;
    }
    compute_bar(m);
    if (m.lane < MEGA_KEYS) {  // warp w's round-0 keys: their pool rows through the block table
        const unsigned t = si.k0 + m.warp + cw * m.lane;
        const int* bt = reinterpret_cast<const int*>(m.at<const unsigned char>(hdr[2]) + hdr[6]);
        si.krow[m.warp][m.lane] = si.g != MEGA_NONE && t < si.k1 && !(si.cur && t == (unsigned)si.n - 1)
                                      ? (unsigned)bt[t / hdr[8]] * hdr[8] + t % hdr[8]
                                      : MEGA_NONE;
    }
    compute_bar(m);
    const unsigned kmax = hdr[19];
    bf16* xs = reinterpret_cast<bf16*>(mega_smem);
    float* hf = reinterpret_cast<float*>(mega_smem + ((2 * kmax + 15) & ~15u));  // H floats
    float* qs = reinterpret_cast<float*>(mega_smem);  // the attention's (shares the x area)
    // marks (hdr[24], or MEGA_NONE): [6 nops + 1][G] %globaltimer of CTA b's thread 0 when it left
    // op j (row j), when it passed the PDL wait (row nops), and inside an attention op j (rows
    // nops + 1 + 5 j + k: K/V loads issued, q / k / v read, RoPE done, keys done, partials
    // stored); tools/bench_mega.py turns them on
    u64* marks = hdr[24] != MEGA_NONE ? m.at<u64>(hdr[24]) : nullptr;
    if (marks && threadIdx.x == 0) marks[(size_t)nops * m.G + m.b] = global_ns();
    unsigned seq = 0;
    for (unsigned j = 0; j < nops; ++j) {
        const unsigned* op = hdr + MEGA_HDR + MEGA_OPW * j;
        const unsigned kind = op[0], N = op[1], K = op[2];
        if (marks && threadIdx.x == 0 && j > 0) marks[(size_t)(j - 1) * m.G + m.b] = global_ns();
        if (threadIdx.x == 0) quiet = 1, cur_op = j;  // quiet also when the op before had no rows here
        compute_bar(m);
        if (kind == MK_ATTN) {
            const unsigned G = hdr[10] / hdr[11];
            float* st = qs + (G + 2) * hdr[12];
            if (hdr[12] == 128) attention_op<4>(m, op, j, qs, st, &quiet);
            else attention_op<2>(m, op, j, qs, st, &quiet);
            if (threadIdx.x == 0 && !(hdr[26] & MQ_ATTN)) quiet = 0;  // (CTAs without an item)
            continue;
        }
        if (kind == MK_MERGE || kind == MK_PICK) {
            if (kind == MK_MERGE) merge_op(m, op);
            else pick_op(m, op, ring, red64);
            if (threadIdx.x == 0 && !(kind == MK_MERGE && hdr[26] & MQ_ATTN)) quiet = 0;
            continue;
        }
        // a GEMV: its x into shared memory, then this CTA's rows as the stages land
        unsigned r0, r1;
        own_rows(m.b, m.G, N, r0, r1);
        if (kind == MK_ORES) {  // x, and the residual of this CTA's rows into hf (issued first, checked after)
            const bool plain = op[9] & MF_RES_PLAIN;  // layer 0: the residual is the embedding, plain fp32
            const u64* res = m.at<const u64>(op[8]) + r0;
            const u64 rv = !plain && threadIdx.x < r1 - r0 ? ll_load(res + threadIdx.x) : 0;
            ll_read(m, m.at<const u64>(op[4]), K, [&](unsigned i, float v) { xs[i] = __float2bfloat16_rn(v); });
            for (unsigned i = threadIdx.x; i < r1 - r0; i += m.nthreads)
                hf[i] = plain ? m.at<const float>(op[8])[r0 + i]
                        : i == threadIdx.x && (unsigned)(rv >> 32) == m.epoch ? __uint_as_float((unsigned)rv)
                                                                              : ll_wait(res + i, m.epoch);
        } else {
            read_normed(m, op, xs, hf, red);
        }
        compute_bar(m);
        if (threadIdx.x == 0 && !(kind == MK_QKV && hdr[26] & MQ_QKV)) quiet = 0;
        const unsigned pair = kind == MK_SILU ? 2 : 1;
        const unsigned per = slot / (2 * K * pair);
        const uint4* x4 = reinterpret_cast<const uint4*>(xs);
        u64 best = 0;  // MK_HEAD: this warp's best (key, index)
        for (unsigned r = r0, nc = 1; r < r1; r += nc * per, seq += nc) {
            nc = pair == 1 && r + per < r1 ? 2 : 1;  // a warp takes a row of this chunk and the next
            for (unsigned c = 0; c < nc; ++c)
                mbar_wait_parity((unsigned)__cvta_generic_to_shared(&full[(seq + c) % stages]), ((seq + c) / stages) & 1);
            const unsigned s = seq % stages, s2 = (seq + 1) % stages;
            const unsigned rows = min(per, r1 - r), rows2 = nc == 2 ? min(per, r1 - r - per) : 0;
            const uint4* ws = reinterpret_cast<const uint4*>(stage0 + s * slot);
            const uint4* ws2 = reinterpret_cast<const uint4*>(stage0 + s2 * slot);
            for (unsigned rr = m.warp; rr < max(rows, rows2); rr += cw) {
                float sum[2];
                if (pair == 2)  // gate row rr and up row rr of this chunk
                    stream_row<2>(sum, ws + rr * (K / 8), ws + (rows + rr) * (K / 8), x4, K, m.lane);
                else if (rr < rows && rr < rows2)
                    stream_row<2>(sum, ws + rr * (K / 8), ws2 + rr * (K / 8), x4, K, m.lane);
                else
                    stream_row<1>(sum, rr < rows ? ws + rr * (K / 8) : ws2 + rr * (K / 8), nullptr, x4, K, m.lane);
                if (m.lane == 0) {
                    auto epilogue = [&](unsigned n, float v) {
                        if (kind == MK_QKV) {
                            if (op[6] != MEGA_NONE) v += __bfloat162float(m.at<const bf16>(op[6])[n]);
                            ll_store(m.at<u64>(op[7]) + n, m.epoch, round_bf16(v));
                        } else if (kind == MK_ORES) {
                            ll_store(m.at<u64>(op[7]) + n, m.epoch, hf[n - r0] + round_bf16(v));
                        } else {  // MK_HEAD
                            m.at<float>(hdr[22])[n] = v;
                            best = max(best, argmax_key(v, n));
                        }
                    };
                    if (pair == 2) {
                        ll_store(m.at<u64>(op[7]) + r + rr, m.epoch,
                                 round_bf16(silu_mul_one(round_bf16(sum[0]), round_bf16(sum[1]))));
                    } else {
                        if (rr < rows) epilogue(r + rr, sum[0]);
                        if (rr < rows2) epilogue(r + per + rr, rr < rows ? sum[1] : sum[0]);
                    }
                }
            }
            __syncwarp();
            if (threadIdx.x == 0 && r + nc * per >= r1) quiet = 1;  // the op's last release: quiet until the next x
            for (unsigned c = 0; c < nc && m.lane == 0; ++c)
                asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];"
                             ::"r"((unsigned)__cvta_generic_to_shared(&empty[c ? s2 : s])) : "memory");
        }
        if (kind == MK_HEAD) {  // this CTA's best of its rows: two words (key, index)
            if (m.lane == 0) red64[m.warp] = best;
            compute_bar(m);
            if (threadIdx.x == 0) {
                for (unsigned w = 1; w < cw; ++w) best = max(best, red64[w]);
                u64* out = m.at<u64>(op[7]) + 2 * m.b;
                ll_store(out, m.epoch, __uint_as_float((unsigned)(best >> 32)));
                ll_store(out + 1, m.epoch, __uint_as_float((unsigned)best));
            }
        }
    }
    if (marks && threadIdx.x == 0) marks[(size_t)(nops - 1) * m.G + m.b] = global_ns();
}
