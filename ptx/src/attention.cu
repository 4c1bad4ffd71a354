// Paged attention over the fixed KV pools.
//
// KV pools: bf16 [num_blocks, block_size, Hkv, D]; token t of a sequence lives in block
// block_table[t / block_size] at offset t % block_size. Query head h reads kv head h / (Hq/Hkv).
//
// decode  (one query token per row): split-K flash decoding in ONE launch. One CTA = (row, kv
//         head, split) and all G = Hq/Hkv query heads of that group, so each K/V vector is loaded
//         once per group. D <= 128: tensor cores (decode_tc, attention_decode.cuh); D = 256: the
//         fp32 CUDA-core body below. With several non-empty splits, the split that arrives last
//         on the (row, kv head) counter merges the partials (arrive_and_merge).
// decode_rope (D <= 128): the same, with qk_norm_rope_kv folded in: q is rotated in the CTA from
//         the raw QKV row, and the current token's K/V is written to the pools and used directly.
// combine merges per-split partials (o, m, l) into out; kept for compatibility, no longer
//         launched by fixedgraph.ops.attention.
// prefill (one sequence, T query tokens, causal): flash attention with bf16 mma.sync m16n8k16;
//         the M dimension packs (token, query head of the group) pairs, so K/V tiles are shared
//         by the whole GQA group. P is rounded to bf16 for the P.V MMA; l sums unrounded P.
//
// Softmax runs in the log2 domain: scores are pre-multiplied by scale*log2(e) and exp2 is used.
#include <cuda_bf16.h>
#include <stdint.h>

#include "attention.cuh"
#include "attention_decode.cuh"
#include "pdl.cuh"

using bf16 = __nv_bfloat16;

namespace {
constexpr int kDecWarps = 4;
constexpr int kDecThreads = attn::kDecThreads;
constexpr int kDecHeads = 8;   // query heads per pass over the keys (G > 8 makes several passes)
constexpr int kDecUnroll = 4;  // keys per lane per step: 8 independent 16-byte loads in flight
constexpr unsigned kFull = 0xFFFFFFFFu;
}  // namespace

// fp32 CUDA-core decode for head dims the MMA body does not take (256: its Q and O fragments
// would not fit in registers). Split layout and last-arrival merge as decode_tc.
// Lanes split a head vector into 16-byte chunks; LPK lanes (a power of two >= D/8) read one key,
// 32/LPK keys side by side per warp. Lanes with chunk >= D/8 (only D = 96) idle in the dot product.
template <int D>
__device__ __forceinline__ void decode_scalar(
    bf16 *__restrict__ out,            // [rows, Hq*D] bf16
    float *o_part,                     // [rows, Hq, num_splits, D] f32, softmax-normalised per split
    float *ml_part,                    // [rows, Hq, num_splits, 2] f32: (max score, sum exp)
    unsigned *counters,                // [rows, Hkv] u32, 0 at rest
    const bf16 *__restrict__ q,        // [rows, Hq*D] bf16
    const bf16 *__restrict__ k_pool,   // [num_blocks, block_size, Hkv, D] bf16
    const bf16 *__restrict__ v_pool,   // [num_blocks, block_size, Hkv, D] bf16
    const int *__restrict__ block_table,  // [rows, max_blocks] i32
    const int *__restrict__ seq_len,      // [rows] i32
    unsigned rows, unsigned max_blocks, unsigned block_size, unsigned Hq, unsigned Hkv,
    unsigned num_splits, float scale) {
    constexpr int CHUNKS = D / 8;
    constexpr int LPK = CHUNKS <= 8 ? 8 : (CHUNKS <= 16 ? 16 : 32);
    constexpr int KPW = 32 / LPK;
    constexpr int WARP_KEYS = KPW * kDecUnroll;
    constexpr int STEP = WARP_KEYS * kDecWarps;
    static_assert(D % 8 == 0 && CHUNKS <= 32, "head dim must be a multiple of 8, at most 256");

    __shared__ __align__(16) float s_q[kDecHeads][D];  // q * scale * log2e of one pass's heads
    __shared__ __align__(16) float s_acc[kDecWarps][kDecHeads][D];  // per-warp partial P.V
    __shared__ float s_m[kDecWarps][kDecHeads];
    __shared__ float s_l[kDecWarps][kDecHeads];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int slot = lane / LPK, c = lane % LPK;
    const bool chunk_ok = c < CHUNKS;
    const unsigned G = Hq / Hkv;
    const float qscale = scale * ATTN_LOG2E;
    const long long cap = (long long)max_blocks * block_size;  // keys a block table can address
    const size_t tok_stride = (size_t)Hkv * D;

    for (unsigned row = blockIdx.y; row < rows; row += gridDim.y)
    for (unsigned split = blockIdx.z; split < num_splits; split += gridDim.z)
    for (unsigned kvh = blockIdx.x; kvh < Hkv; kvh += gridDim.x) {
        // PDL: first dependent read below (seq_len, block_table, q and the pools)
        const int len = (int)max(0LL, min((long long)seq_len[row], cap));
        const attn::SplitRange sr = attn::split_range(len, num_splits, block_size, split);
        if (split >= (unsigned)max(sr.used, 1)) continue;  // empty split: costs one load
        const int kstart = sr.start, kend = sr.end;
        const int *bt = block_table + (size_t)row * max_blocks;

        for (unsigned h0 = 0; h0 < G; h0 += kDecHeads) {
            const int nh = (int)min(G - h0, (unsigned)kDecHeads);
            const unsigned head0 = kvh * G + h0;
            const bf16 *qrow = q + ((size_t)row * Hq + head0) * D;
            for (int i = tid; i < kDecHeads * D; i += kDecThreads)
                (&s_q[0][0])[i] = i / D < nh ? __bfloat162float(qrow[i]) * qscale : 0.f;
            __syncthreads();

            float m[kDecHeads], l[kDecHeads], acc[kDecHeads][8];
#pragma unroll
            for (int g = 0; g < kDecHeads; ++g) {
                m[g] = -INFINITY;
                l[g] = 0.f;
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[g][j] = 0.f;
            }

            for (int base = kstart + warp * WARP_KEYS; base < kend; base += STEP) {
                uint4 kr[kDecUnroll], vr[kDecUnroll];
                bool valid[kDecUnroll];
                unsigned blk[kDecUnroll];  // every block-table load issued before any is used
#pragma unroll
                for (int u = 0; u < kDecUnroll; ++u)
                    blk[u] = (unsigned)bt[(unsigned)min(base + u * KPW + slot, kend - 1) / block_size];
#pragma unroll
                for (int u = 0; u < kDecUnroll; ++u) {
                    const int key = base + u * KPW + slot;
                    valid[u] = key < kend;
                    kr[u] = vr[u] = make_uint4(0u, 0u, 0u, 0u);  // zeros: p * v must stay finite
                    if (valid[u] && chunk_ok) {
                        const size_t tok = (size_t)blk[u] * block_size + (unsigned)key % block_size;
                        const size_t off = tok * tok_stride + (size_t)kvh * D + c * 8;
                        kr[u] = attn::ld_stream16(k_pool + off);
                        vr[u] = attn::ld_stream16(v_pool + off);
                    }
                }
#pragma unroll
                for (int g = 0; g < kDecHeads; ++g) {
                    if (g >= nh) continue;  // uniform over the CTA
                    float qf[8];
                    if (chunk_ok) {
                        const float4 a = *reinterpret_cast<const float4 *>(&s_q[g][c * 8]);
                        const float4 b = *reinterpret_cast<const float4 *>(&s_q[g][c * 8 + 4]);
                        qf[0] = a.x; qf[1] = a.y; qf[2] = a.z; qf[3] = a.w;
                        qf[4] = b.x; qf[5] = b.y; qf[6] = b.z; qf[7] = b.w;
                    } else {
#pragma unroll
                        for (int j = 0; j < 8; ++j) qf[j] = 0.f;
                    }
                    float s[kDecUnroll];
#pragma unroll
                    for (int u = 0; u < kDecUnroll; ++u) {
                        float kf[8];
                        attn::unpack8(kr[u], kf);
                        s[u] = 0.f;
#pragma unroll
                        for (int j = 0; j < 8; ++j) s[u] = fmaf(qf[j], kf[j], s[u]);
                    }
#pragma unroll
                    for (int o = LPK / 2; o > 0; o >>= 1)  // stays inside one key's lanes
#pragma unroll
                        for (int u = 0; u < kDecUnroll; ++u) s[u] += __shfl_xor_sync(kFull, s[u], o);
                    float smax = -INFINITY;
#pragma unroll
                    for (int u = 0; u < kDecUnroll; ++u) {
                        s[u] = valid[u] ? s[u] : -INFINITY;
                        smax = fmaxf(smax, s[u]);
                    }
                    const float m_new = fmaxf(m[g], smax);
                    if (m_new != -INFINITY) {  // else no key seen yet by this lane group
                        const float corr = attn::fast_exp2(m[g] - m_new);
                        float p[kDecUnroll], psum = 0.f;
#pragma unroll
                        for (int u = 0; u < kDecUnroll; ++u) {
                            p[u] = attn::fast_exp2(s[u] - m_new);
                            psum += p[u];
                        }
                        l[g] = fmaf(l[g], corr, psum);
#pragma unroll
                        for (int j = 0; j < 8; ++j) acc[g][j] *= corr;
#pragma unroll
                        for (int u = 0; u < kDecUnroll; ++u) {
                            float vf[8];
                            attn::unpack8(vr[u], vf);
#pragma unroll
                            for (int j = 0; j < 8; ++j) acc[g][j] = fmaf(p[u], vf[j], acc[g][j]);
                        }
                        m[g] = m_new;
                    }
                }
            }

            // Merge the warp's key slots (lanes l and l ^ LPK*k hold the same chunk).
#pragma unroll
            for (int o = LPK; o < 32; o <<= 1) {
#pragma unroll
                for (int g = 0; g < kDecHeads; ++g) {
                    if (g >= nh) continue;
                    const float mo = __shfl_xor_sync(kFull, m[g], o);
                    const float lo = __shfl_xor_sync(kFull, l[g], o);
                    const float mn = fmaxf(m[g], mo);
                    const float mu = mn == -INFINITY ? 0.f : mn;
                    const float a = attn::fast_exp2(m[g] - mu), b = attn::fast_exp2(mo - mu);
                    l[g] = l[g] * a + lo * b;
                    m[g] = mn;
#pragma unroll
                    for (int j = 0; j < 8; ++j)
                        acc[g][j] = acc[g][j] * a + __shfl_xor_sync(kFull, acc[g][j], o) * b;
                }
            }
            if (slot == 0 && chunk_ok) {
#pragma unroll
                for (int g = 0; g < kDecHeads; ++g) {
                    if (g >= nh) continue;
                    float4 *dst = reinterpret_cast<float4 *>(&s_acc[warp][g][c * 8]);
                    dst[0] = make_float4(acc[g][0], acc[g][1], acc[g][2], acc[g][3]);
                    dst[1] = make_float4(acc[g][4], acc[g][5], acc[g][6], acc[g][7]);
                }
            }
            if (lane == 0) {
#pragma unroll
                for (int g = 0; g < kDecHeads; ++g) {
                    s_m[warp][g] = m[g];
                    s_l[warp][g] = l[g];
                }
            }
            __syncthreads();

            // Merge the warps; one thread per (head, 8-wide chunk).
            for (int i = tid; i < nh * CHUNKS; i += kDecThreads) {
                const int g = i / CHUNKS, cc = i % CHUNKS;
                float M = -INFINITY;
#pragma unroll
                for (int w = 0; w < kDecWarps; ++w) M = fmaxf(M, s_m[w][g]);
                const float Mu = M == -INFINITY ? 0.f : M;
                float L = 0.f, o[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
                for (int w = 0; w < kDecWarps; ++w) {
                    const float wt = attn::fast_exp2(s_m[w][g] - Mu);
                    L = fmaf(s_l[w][g], wt, L);
#pragma unroll
                    for (int j = 0; j < 8; ++j) o[j] = fmaf(s_acc[w][g][cc * 8 + j], wt, o[j]);
                }
                const float inv = L > 0.f ? 1.f / L : 0.f;  // empty split / empty sequence -> 0
#pragma unroll
                for (int j = 0; j < 8; ++j) o[j] *= inv;
                const size_t hrow = (size_t)row * Hq + head0 + g;
                if (sr.used <= 1) {
                    *reinterpret_cast<uint4 *>(out + hrow * D + cc * 8) = attn::pack8(o);
                } else {
                    const size_t pi = hrow * num_splits + split;
                    float4 *dst = reinterpret_cast<float4 *>(o_part + pi * D + cc * 8);
                    dst[0] = make_float4(o[0], o[1], o[2], o[3]);
                    dst[1] = make_float4(o[4], o[5], o[6], o[7]);
                    if (cc == 0) {
                        ml_part[pi * 2] = M * ATTN_LN2;  // back to natural-log units; -inf stays
                        ml_part[pi * 2 + 1] = L;
                    }
                }
            }
            __syncthreads();  // s_q, s_acc, s_m, s_l are rewritten by the next pass
        }
        if (sr.used >= 2)
            attn::arrive_and_merge<D>(out, o_part, ml_part, counters, row, kvh, Hq, Hkv, num_splits,
                                      sr.used);
    }
}

// Entry parameters (all decode head dims):
//   out [rows, Hq*D] bf16; o_part [rows, Hq, S, D] f32, ml_part [rows, Hq, S, 2] f32 and
//   counters [rows, Hkv] u32 (0 at rest) are scratch, NULL when num_splits == 1; q [rows, Hq*D]
//   bf16; pools [num_blocks, block_size, Hkv, D] bf16; block_table [rows, max_blocks] i32;
//   seq_len [rows] i32. Block must be 128 threads; D <= 128 needs attn::decode_tc_smem(D) bytes
//   of dynamic shared memory. Any grid: CTAs stride over (kv head, row, split) = (x, y, z).
//   Two CTAs per SM (launch bounds): about 225 registers for D = 128 without spills.
__device__ __forceinline__ unsigned dynamic_smem_bytes() {
    unsigned n;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(n));
    return n;
}

#define DECODE_ENTRY(DIM, BODY, SMEM) DECODE_ENTRY_N(DIM, , BODY<DIM>, SMEM)
// NAME: the entry's suffix before _d{DIM}; BODY: the function it calls (parenthesised when its
// template arguments hold commas)
#define DECODE_ENTRY_N(DIM, NAME, BODY, SMEM)                                                  \
    extern "C" __global__ void __launch_bounds__(kDecThreads, 2)                               \
        paged_attention_decode##NAME##_d##DIM(                                                 \
        bf16 *out, float *o_part, float *ml_part, unsigned *counters, const bf16 *q,            \
        const bf16 *k_pool, const bf16 *v_pool, const int *block_table, const int *seq_len,     \
        unsigned rows, unsigned max_blocks, unsigned block_size, unsigned Hq, unsigned Hkv,     \
        unsigned D, unsigned num_splits, float scale) { FG_KERNEL_BEGIN();                                         \
        FG_PDL_WAIT(); /* PDL: wait for the predecessor grid first */                           \
        if (D != DIM || blockDim.x != kDecThreads || Hkv == 0 || Hq % Hkv != 0 ||               \
            ((SMEM) > 0 && dynamic_smem_bytes() < (unsigned)(SMEM)))                            \
            return;                                                                             \
        BODY(out, o_part, ml_part, counters, q, k_pool, v_pool, block_table, seq_len, rows,     \
             max_blocks, block_size, Hq, Hkv, num_splits, scale);                              \
    }

DECODE_ENTRY(64, decode_tc, attn::decode_tc_smem(64))
DECODE_ENTRY(96, decode_tc, attn::decode_tc_smem(96))
DECODE_ENTRY(128, decode_tc, attn::decode_tc_smem(128))
DECODE_ENTRY(256, decode_scalar, 0)

// decode_tc's forms for tools/bench_kernels.py's kernel-alone timing of the fused entries'
// schemes: SWAP, the query heads on the MMA's N (the _sw entries' body); STEAL, the tiles shared
// out at run time (the _long_st entry's: one pass of up to 16 query heads, the row's block table
// in 4 max_blocks bytes of dynamic shared memory after the tiles; larger groups are refused).
template <int D, bool SWAP, bool STEAL>
__device__ __forceinline__ void decode_tc_form(bf16 *out, float *o_part, float *ml_part, unsigned *counters,
                                               const bf16 *q, const bf16 *k_pool, const bf16 *v_pool,
                                               const int *block_table, const int *seq_len, unsigned rows,
                                               unsigned max_blocks, unsigned block_size, unsigned Hq,
                                               unsigned Hkv, unsigned S, float scale) {
    if (STEAL && Hq / Hkv > (unsigned)kDecMaxHeads) return;
    decode_tc<D, false, 8, SWAP, 0, -1, STEAL>(out, o_part, ml_part, counters, q, k_pool, v_pool, block_table,
                                               seq_len, rows, max_blocks, block_size, Hq, Hkv, S, scale);
}
DECODE_ENTRY_N(128, _sw, (decode_tc_form<128, true, false>), attn::decode_tc_smem(128))
DECODE_ENTRY_N(128, _st, (decode_tc_form<128, false, true>), attn::decode_tc_smem(128) + 4u * max_blocks)

// Fused QK-norm + RoPE + KV write + decode attention: qk_norm_rope_kv followed by
// paged_attention_decode_d{D} in one launch (same splits, scratch, counters, merge and out).
//   qkv [rows, (Hq + 2*Hkv)*D] bf16 (q heads, k heads, v heads); q_norm, k_norm [D] bf16 or NULL;
//   rope [max_pos, D/2, 2] f32 (cos, sin); positions [rows] u32; slots [rows] i64 (< 0: no KV
//   write); the other parameters as paged_attention_decode. Each CTA computes its group's rotated
//   q (bits as qk_norm_rope_kv's q_out) into shared memory. The CTA of split n-1 (split 0 when
//   seq_len <= 0) of each (row, kv head) also computes the current token's rotated k and raw v and
//   writes them at slots[row] (element slots[row]*Hkv*D + kvh*D of each pool) when slots[row] >= 0.
// NOTE (ordering): nothing orders the pool writes of one CTA before the pool reads of another in
// the same launch, so no CTA may read a slot written here. It holds because (1) the writer of
// (row, kvh) is the one split whose key range contains key seq_len-1, the current token, and it
// takes that key from shared memory (load_kv_tile's sub_key) instead of the pool; (2) the split
// ranges of a row are disjoint, so no other split of the row reads key seq_len-1; (3) live slots
// of distinct rows are distinct and the engine maps key seq_len-1 of row r to slots[r]
// (slots[r] = block_table[r][(seq_len-1)/block_size]*block_size + (seq_len-1)%block_size), a
// block no other row reads. With slots[row] < 0 (padding row) nothing is written and key
// seq_len-1 is read from the pool as is; with seq_len > max_blocks*block_size (clamped) the
// current token is not attended and is read nowhere. Needs 16-byte aligned qkv, rope, norms and
// pools (the arena aligns regions to 256 B); the launch is refused otherwise.
// NOTE (PDL): the first K/V tiles are issued before griddepcontrol.wait, so the predecessor
// grid may write qkv but nothing else this entry reads (seq_len, block_table, positions, slots,
// pool keys); in the decode programs those come from the step's staging kernel and earlier
// steps (see decode_tc).
#define DECODE_ROPE_ENTRY(DIM) DECODE_ROPE_ENTRY_R(DIM, , 8, false)
#define DECODE_ROPE_ENTRY_R(DIM, NAME, R, SWAP) DECODE_ROPE_ENTRY_P(DIM, NAME, R, SWAP, 0, -1)
// NAME: the entry's suffix before _d{DIM}; R: the split merge's partials per round, SWAP: query
// heads on the MMA's N, PAD: idle registers, MTAG: the split merge's tag (decode_tc)
#define DECODE_ROPE_ENTRY_P(DIM, NAME, R, SWAP, PAD, MTAG) DECODE_ROPE_ENTRY_X(DIM, NAME, R, SWAP, PAD, MTAG, false)
// STEAL: decode_tc's tiles shared out at run time (the row's block table in dynamic shared memory
// after the tiles: 4 max_blocks bytes more; one pass of heads: G <= 8 with SWAP, else 16)
#define DECODE_ROPE_ENTRY_X(DIM, NAME, R, SWAP, PAD, MTAG, STEAL)                              \
    extern "C" __global__ void __launch_bounds__(kDecThreads, 2)                               \
        paged_attention_decode_rope##NAME##_d##DIM(                                            \
            bf16 *out, float *o_part, float *ml_part, unsigned *counters, const bf16 *qkv,     \
            const bf16 *q_norm, const bf16 *k_norm, const float *rope,                         \
            const unsigned *positions, const long long *slots, bf16 *k_pool, bf16 *v_pool,     \
            const int *block_table, const int *seq_len, unsigned rows, unsigned max_blocks,    \
            unsigned block_size, unsigned Hq, unsigned Hkv, unsigned D, unsigned num_splits,   \
            float scale, float eps) { FG_KERNEL_BEGIN();                                                          \
        auto al = [](const void *p) { return p == nullptr || aligned_to(p, 16); };             \
        if (D != DIM || blockDim.x != kDecThreads || Hkv == 0 || Hq % Hkv != 0 ||               \
            dynamic_smem_bytes() < (unsigned)attn::decode_tc_smem(DIM) + ((STEAL) ? 4u * max_blocks : 0u) || \
            ((STEAL) && Hq / Hkv > ((SWAP) ? 8u : (unsigned)kDecMaxHeads)) || !al(qkv) ||       \
            !al(q_norm) || !al(k_norm) || !al(rope) || !al(k_pool) || !al(v_pool)) {            \
            FG_PDL_WAIT(); /* refused: still completes only after the predecessor */            \
            return;                                                                             \
        }                                                                                       \
        /* decode_tc waits itself, once its first K/V tiles are in flight (PDL prefetch) */     \
        const attn::RopeArgs rp{qkv, q_norm, k_norm, rope, positions, slots, k_pool, v_pool, eps}; \
        decode_tc<DIM, true, R, SWAP, PAD, MTAG, STEAL>(out, o_part, ml_part, counters, nullptr, k_pool, v_pool, \
                             block_table, seq_len, rows, max_blocks, block_size, Hq, Hkv,       \
                             num_splits, scale, rp);                                            \
    }

DECODE_ROPE_ENTRY(64)
DECODE_ROPE_ENTRY(96)
DECODE_ROPE_ENTRY(128)
// Long contexts (24+ splits, fixedgraph/ops/attention.py): the same results, the merge loading
// 16 splits' partials a round (arrive_and_merge).
DECODE_ROPE_ENTRY_R(128, _long, 16, false)
// The same results with the query heads on the MMA's N in passes of 8 (decode_tc's SWAP: half the
// mma a tile for GQA groups of up to 8; fixedgraph.ops.attention.swap_heads).
DECODE_ROPE_ENTRY_R(64, _sw, 8, true)
DECODE_ROPE_ENTRY_R(96, _sw, 8, true)
DECODE_ROPE_ENTRY_R(128, _sw, 8, true)
DECODE_ROPE_ENTRY_R(128, _long_sw, 16, true)
// _sw holding idle registers up to the plain entry's footprint (ops.attention.choose_swap: a
// CTA's footprint decides which neighbouring CTAs start beside it, session 35; then d128 was 183
// + 48 = 230 registers against 225). Since load_kv_seq (session 48) d128 is 151 + 48 = 199 against
// 189; padding to 231 (FG_SWP128_PAD=80) measured the same (H100: the 4k-32k kernels within 0.2-0.9%,
// Qwen3-0.6B / 8B a token within 0.1%). The others (FIXEDGRAPH_ATTN_SWAP=3): long 231 against 189,
// d96 203 against 203, d64 163 against 163.
// FG_SWP128_PAD: an A/B build's own count
#ifndef FG_SWP128_PAD
#define FG_SWP128_PAD 48
#endif
DECODE_ROPE_ENTRY_P(128, _swp, 8, true, FG_SWP128_PAD, -1)
DECODE_ROPE_ENTRY_P(128, _long_swp, 16, true, 56, 2)
DECODE_ROPE_ENTRY_P(96, _swp, 8, true, 24, 2)
// FG_SWP64_PAD, FG_LONG_ST_PAD: A/B builds' counts. Session 48: _swp_d64 at 163 registers (three
// CTAs an SM alone) against 179 (FG_SWP64_PAD=32, two, its footprint before load_kv_seq):
// Llama-3.2-1B +0.5% a token at 128 + 256 and +0.3% at 8192 + 64 with the pad, so no pad back.
// FG_LONG_ST_PAD=24 puts _long_st back at 194 (170 since load_kv_seq). Session 49 (H100, same
// call, two rounds): Qwen3-0.6B +0.2 / +0.8% a token at an 8192-token prompt and +0.1% at 32768
// with the pad, so none.
#ifndef FG_SWP64_PAD
#define FG_SWP64_PAD 16
#endif
DECODE_ROPE_ENTRY_P(64, _swp, 8, true, FG_SWP64_PAD, 2)
// The entries with their tiles shared out at run time (decode_tc's STEAL; ops.attention.steal_mode:
// a split whose CTA starts late takes fewer tiles); heads on N, no idle registers. _long_st is
// the default from 24 splits at d128; _st (8 partials a merge round) is FIXEDGRAPH_ATTN_STEAL=2's.
#ifndef FG_LONG_ST_PAD
#define FG_LONG_ST_PAD 0
#endif
DECODE_ROPE_ENTRY_X(128, _long_st, 16, true, FG_LONG_ST_PAD, -1, true)
DECODE_ROPE_ENTRY_X(64, _st, 8, true, 0, -1, true)
DECODE_ROPE_ENTRY_X(96, _st, 8, true, 0, -1, true)
DECODE_ROPE_ENTRY_X(128, _st, 8, true, 0, -1, true)

// out[row, h, :] = sum_s o_part[row, h, s, :] * w_s / sum_s w_s, w_s = l_s * exp(m_s - max m).
// Any grid (x*y CTAs stride over the rows*Hq (row, head) pairs), any block size.
extern "C" __global__ void __launch_bounds__(256) paged_attention_combine(
    bf16 *out,              // [rows, Hq*D] bf16
    const float *o_part,    // [rows, Hq, num_splits, D] f32
    const float *ml_part,   // [rows, Hq, num_splits, 2] f32
    unsigned rows, unsigned Hq, unsigned D, unsigned num_splits) { FG_KERNEL_BEGIN();
    FG_PDL_WAIT();  /* PDL: wait for the predecessor grid before any global read */
    const size_t pairs = (size_t)rows * Hq;
    const size_t nctas = (size_t)gridDim.x * gridDim.y;
    for (size_t p = blockIdx.x + (size_t)blockIdx.y * gridDim.x; p < pairs; p += nctas) {
        const float *ml = ml_part + p * num_splits * 2;
        const float *op = o_part + p * num_splits * D;
        float M = -INFINITY;
        for (unsigned s = 0; s < num_splits; ++s) M = fmaxf(M, ml[2 * s]);
        const float Mu = M == -INFINITY ? 0.f : M;
        float L = 0.f;
        for (unsigned s = 0; s < num_splits; ++s) L += ml[2 * s + 1] * __expf(ml[2 * s] - Mu);
        const float inv = L > 0.f ? 1.f / L : 0.f;
        for (unsigned d = threadIdx.x; d < D; d += blockDim.x) {
            float o = 0.f;
            for (unsigned s = 0; s < num_splits; ++s)
                o = fmaf(op[(size_t)s * D + d], ml[2 * s + 1] * __expf(ml[2 * s] - Mu), o);
            out[p * D + d] = __float2bfloat16_rn(o * inv);
        }
    }
}

#define PREFILL_ENTRY(DIM)                                                                     \
    extern "C" __global__ void __launch_bounds__(kPreThreads, 1) paged_attention_prefill_d##DIM(  \
        bf16 *out, const bf16 *q, const bf16 *k_pool, const bf16 *v_pool,                      \
        const int *block_table, const unsigned *positions, unsigned T, unsigned max_blocks,    \
        unsigned block_size, unsigned Hq, unsigned Hkv, unsigned D, float scale) { FG_KERNEL_BEGIN();             \
        FG_PDL_WAIT(); /* PDL: wait for the predecessor grid first */                           \
        if (D != DIM || blockDim.x != kPreThreads || Hkv == 0 || Hq % Hkv != 0) return;        \
        prefill_impl<DIM>(out, q, k_pool, v_pool, block_table, positions, T, max_blocks,       \
                          block_size, Hq, Hkv, scale);                                         \
    }

PREFILL_ENTRY(64)
PREFILL_ENTRY(96)
PREFILL_ENTRY(128)
