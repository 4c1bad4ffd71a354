// One decode layer's norm + QKV projection + QK-norm + RoPE + KV write + paged attention, batch 1,
// in ONE launch of thread-block clusters: the cluster is one kv head, its CTA c (of C) computes
// rows [c * ceil(R / C), ...) of the head group's R = (G + 2) * D q / k / v projection rows, hands
// them to every CTA of the cluster in distributed shared memory, and then attends key split c
// (the split layout of attention_decode.cuh with S = C); the C split partials merge over
// distributed shared memory too. Against the two-launch path (norm + qkv GEMV, then the fused
// RoPE attention) no qkv vector, split partial or arrival counter makes a global round trip and
// one grid-wide PDL handoff is gone (fixedgraph/ops/attention.py: qkv_attention_decode).
//
// Grid (C, Hkv, 1), cluster (C, 1, 1), block 128 (4 warps), rows = 1. Phases of a CTA:
//   before its PDL wait: its W rows (the first pre_rows of them; the rest stream after the wait)
//     and its split's first K/V tile go to shared memory by cp.async, with the block-table
//     window and the bias of its rows (all constants, staged metadata or old K/V: pdl.cuh's rule,
//     the same pre-wait reads as the fused RoPE attention, which signals late as this one does);
//   after it: x = rmsnorm(hidden_in + delta) (gemv.cuh's prologue, the same bits), the CTA's
//     rows of qkv = x W^T (+ bias), each rounded once to bf16 and stored into every cluster CTA's
//     s_qkv; cluster barrier; every CTA rotates the group's q heads and k itself (rope_head: the
//     bits of qk_norm_rope_kv), the CTA holding the current key writes the pools; the keys of its
//     split through attn::swap_tile (query heads on the MMA's N, G <= 8) in two stages, stage 1
//     reusing the W area; its normalised partial (o, m, l) goes to the CTAs that own each output
//     element; cluster barrier; each owner merges its elements over the used splits into out.
// Dynamic shared memory (the launcher's qkv_attention_smem): [stage 0: K tile, V tile]
// [area A: max(stage, pre_rows W rows)] [tail: max(x row, merge inputs)]. x lives only until
// the CTA's own cluster-barrier arrival and the merge inputs are written by other CTAs only after
// that barrier completes, so they share the tail.
#include <cuda_bf16.h>
#include <stdint.h>

#include "attention_decode.cuh"
#include "gemv.cuh"
#include "pdl.cuh"

namespace qa {

constexpr int kThreads = attn::kDecThreads;  // 4 warps
constexpr int kWarps = kThreads / 32;
constexpr int kMaxGroup = 8;                 // query heads of a kv head: one swap_tile pass
constexpr int kMaxCluster = 16;
constexpr int kMaxRows = 128;                // qkv rows a CTA computes (s_bias)
constexpr int kRowUnroll = 4;                // rows a warp reduces together (loads in flight)

__device__ __forceinline__ uint32_t cluster_rank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ uint32_t cluster_ctas() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
    return r;
}
// The shared::cluster address of shared::cta address `addr` in cluster CTA `rank`.
__device__ __forceinline__ uint32_t map_rank(uint32_t addr, uint32_t rank) {
    uint32_t r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
    return r;
}
__device__ __forceinline__ void st_cluster_u16(uint32_t addr, unsigned short v) {
    asm volatile("st.shared::cluster.u16 [%0], %1;" ::"r"(addr), "h"(v) : "memory");
}
__device__ __forceinline__ void st_cluster_f4(uint32_t addr, float4 v) {
    asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "f"(v.x), "f"(v.y), "f"(v.z),
                 "f"(v.w)
                 : "memory");
}
__device__ __forceinline__ void st_cluster_f2(uint32_t addr, float2 v) {
    asm volatile("st.shared::cluster.v2.f32 [%0], {%1, %2};" ::"r"(addr), "f"(v.x), "f"(v.y) : "memory");
}
// Every thread of every CTA of the cluster; arrive (release) then wait (acquire): what any CTA
// stored to shared memory (its own or a peer's) before it arrived is visible after the wait.
__device__ __forceinline__ void cluster_arrive_relaxed() {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// rmsnorm_prologue's grid policy: hidden_out is written by the grid's first CTA.
struct ClusterGrid : HwGrid {
    static __device__ __forceinline__ uint32_t bid() { return blockIdx.x + blockIdx.y * gridDim.x; }
};

// W row of group row j of kv head kvh: q heads kvh*G.., then its k head, then its v head.
__device__ __forceinline__ unsigned w_row(unsigned j, unsigned kvh, unsigned G, unsigned Hq, unsigned Hkv,
                                          unsigned D) {
    const unsigned gd = G * D;
    if (j < gd) return kvh * gd + j;
    if (j < gd + D) return Hq * D + kvh * D + (j - gd);
    return (Hq + Hkv) * D + kvh * D + (j - gd - D);
}

__device__ __forceinline__ float dot8(const uint4 &a, const uint4 &b, float acc) {
    float fa[8], fb[8];
    attn::unpack8(a, fa);
    attn::unpack8(b, fb);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc = fmaf(fa[e], fb[e], acc);
    return acc;
}

// Bytes of the merge inputs in a CTA's tail: [C splits][ceil(G * D/4 / C)] float4 partial
// elements, then [C][kMaxGroup] float2 (m, l). fixedgraph/ops/attention.py mirrors it.
__device__ __forceinline__ uint32_t merge_bytes(uint32_t C, uint32_t G, uint32_t D) {
    const uint32_t per_owner = (G * (D / 4) + C - 1) / C;
    return C * per_owner * 16u + C * kMaxGroup * 8u;
}

template <int D>
__device__ __forceinline__ void qkv_attention(
    bf16 *__restrict__ out,             // [1, Hq*D] bf16, written
    const float *__restrict__ hin,      // [1, K] f32 residual stream
    const bf16 *__restrict__ delta,     // [1, K] bf16 or NULL
    float *__restrict__ hout,           // [1, K] f32 or NULL: hin + delta (the grid's first CTA)
    const bf16 *__restrict__ norm_w,    // [K] bf16
    const bf16 *__restrict__ W,         // [(Hq + 2 Hkv) * D, K] bf16: q rows, k rows, v rows
    const bf16 *__restrict__ bias,      // [(Hq + 2 Hkv) * D] bf16 or NULL
    const attn::RopeArgs &rp, const int *__restrict__ block_table, const int *__restrict__ seq_len,
    unsigned max_blocks, unsigned block_size, unsigned K, unsigned Hq, unsigned Hkv, unsigned pre_rows,
    float scale) {
    using namespace attn;
    constexpr int LD = D + 8, TK = kDecTileKeys, MT = D / 16, C4 = D / 4, C8 = D / 8;
    constexpr uint32_t TILE_BYTES = TK * LD * 2, STAGE_BYTES = 2 * TILE_BYTES;
    constexpr int SO = D + 8;  // s_o row stride in floats (decode_tc's)
    static_assert(kWarps * 16 * SO * 4 <= (int)STAGE_BYTES, "s_o must fit in stage 0");

    extern __shared__ __align__(16) unsigned char qa_dyn[];
    __shared__ __align__(16) bf16 s_qkv[(kMaxGroup + 2) * D];  // the group's q, k, v (bf16)
    __shared__ __align__(16) bf16 s_q[kMaxGroup * LD];         // rotated q heads (swap_tile's B)
    __shared__ __align__(16) bf16 s_cur[2][D];                 // the current token's rotated k, raw v
    __shared__ float s_m[kWarps][kMaxGroup], s_l[kWarps][kMaxGroup];
    __shared__ int s_bt[kDecBtWindow];
    __shared__ float s_red[9][GEMV_MAX_WARPS];
    __shared__ float s_bias[kMaxRows];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const uint32_t C = cluster_ctas(), c = cluster_rank();
    const unsigned kvh = blockIdx.y, G = Hq / Hkv, R = (G + 2) * D;
    const unsigned rows_c = (R + C - 1) / C, r0 = min(R, c * rows_c), r1 = min(R, r0 + rows_c);
    const unsigned n_pre = min(pre_rows, r1 - r0);
    const uint32_t a_bytes = max(STAGE_BYTES, (pre_rows * K * 2 + 15u) & ~15u);
    unsigned char *area_a = qa_dyn + STAGE_BYTES;
    bf16 *xs = reinterpret_cast<bf16 *>(area_a + a_bytes);                 // tail: x row (GEMV)
    float4 *s_po = reinterpret_cast<float4 *>(area_a + a_bytes);          // tail: merge inputs
    const uint32_t per_owner = (G * C4 + C - 1) / C;
    float2 *s_pml = reinterpret_cast<float2 *>(s_po + C * per_owner);      // [C][kMaxGroup]
    const uint32_t smem0 = smem_addr(qa_dyn), smem_a = smem_addr(area_a);
    __nv_bfloat16 *s_ck = s_cur[0], *s_cv = s_cur[1];

    cluster_arrive_relaxed();  // paired with the wait before the first DSMEM store (peers started)

    // ---- before the PDL wait: constants, staged metadata and old K/V only (pdl.cuh) ----
    const unsigned nch = K / 8;  // 16-byte chunks of a row
    for (unsigned i = tid; i < n_pre * nch; i += kThreads) {
        const unsigned j = i / nch, ch = i % nch;
        cp_async16(smem_a + (j * K + ch * 8) * 2, W + (size_t)w_row(r0 + j, kvh, G, Hq, Hkv, D) * K + ch * 8, 16);
    }
    cp_async_commit();  // group 0: W
    for (unsigned j = tid; j < r1 - r0; j += kThreads)
        s_bias[j] = bias ? __bfloat162float(bias[w_row(r0 + j, kvh, G, Hq, Hkv, D)]) : 0.f;
    const long long cap = (long long)max_blocks * block_size;
    const int seq = __ldcg(seq_len);
    const int len = (int)max(0LL, min((long long)seq, cap));
    const SplitRange sr = split_range(len, C, block_size, c);
    const bool has_keys = c < (unsigned)sr.used;
    const int n_tiles = has_keys ? (sr.end - sr.start + TK - 1) / TK : 0;
    long long kv_slot = -1;  // >= 0: this CTA writes the current token's K/V there
    int sub_key = -1;        // >= 0: key taken from s_ck/s_cv, never from the pools
    if (c == (unsigned)max(sr.used, 1) - 1) {  // holds key seq - 1 (or len == 0: split 0)
        kv_slot = __ldcg(rp.slots);
        if (kv_slot >= 0 && seq >= 1 && seq <= cap) sub_key = seq - 1;
    }
    const size_t tok_stride = (size_t)Hkv * D;
    const DivBy bs = div_by(block_size);
    const int *bt = block_table;
    int win0 = has_keys ? sr.start / (int)block_size : 0;
    if (has_keys) bt_window(s_bt, bt, win0, (sr.end - 1) / (int)block_size);
    if (n_tiles > 0)  // keys [sr.start, +TK); sub_key's rows are patched in after the RoPE
        load_kv_tile<D, true>(reinterpret_cast<bf16 *>(qa_dyn), reinterpret_cast<bf16 *>(qa_dyn + TILE_BYTES),
                              rp.k_pool, rp.v_pool, s_bt, win0, sr.start, sr.end, bs, tok_stride, kvh, sub_key);
    else
        cp_async_commit();  // group 1: K/V tile 0
    FG_PDL_WAIT();  // late: o_proj launches once every CTA is past here
    FG_TRACE_MARK(0);

    // ---- norm + this CTA's qkv rows ----
    rmsnorm_prologue<false, ClusterGrid>(xs, hin, delta, hout, norm_w, 1, K, rp.eps, s_red);  // ends in a barrier
    cp_async_wait<1>();  // W landed (tile 0 may still fly)
    __syncthreads();
    cluster_wait();  // every peer started: its shared memory may be written
    const bf16 *w_smem = reinterpret_cast<const bf16 *>(area_a);
    const uint32_t qkv_addr = smem_addr(s_qkv);
    for (unsigned j0 = r0 + warp; j0 < r1; j0 += kWarps * kRowUnroll) {  // warp-uniform
        float acc[kRowUnroll];
#pragma unroll
        for (int u = 0; u < kRowUnroll; ++u) {
            acc[u] = 0.f;
            const unsigned j = j0 + u * kWarps;
            if (j >= r1) continue;
            const bool pre = j - r0 < n_pre;
            const bf16 *wr = pre ? w_smem + (size_t)(j - r0) * K : W + (size_t)w_row(j, kvh, G, Hq, Hkv, D) * K;
            for (unsigned ch = lane; ch < nch; ch += 32) {
                const uint4 wv = pre ? *reinterpret_cast<const uint4 *>(wr + ch * 8) : ld_stream16(wr + ch * 8);
                acc[u] = dot8(wv, *reinterpret_cast<const uint4 *>(xs + ch * 8), acc[u]);
            }
        }
#pragma unroll
        for (int u = 0; u < kRowUnroll; ++u) acc[u] = warp_sum(acc[u]);
#pragma unroll
        for (int u = 0; u < kRowUnroll; ++u) {
            const unsigned j = j0 + u * kWarps;
            if (j >= r1) continue;
            const unsigned short bits = __bfloat16_as_ushort(__float2bfloat16_rn(acc[u] + s_bias[j - r0]));
            if ((unsigned)lane < C) st_cluster_u16(map_rank(qkv_addr + j * 2, lane), bits);
        }
    }
    FG_TRACE_MARK(1);
    __syncthreads();  // every warp is done with the W rows: area A becomes K/V stage 1
    if (n_tiles > 1)
        load_kv_tile<D, true>(reinterpret_cast<bf16 *>(area_a), reinterpret_cast<bf16 *>(area_a + TILE_BYTES),
                              rp.k_pool, rp.v_pool, s_bt, win0, sr.start + TK, sr.end, bs, tok_stride, kvh, sub_key);
    else
        cp_async_commit();  // group 2: K/V tile 1
    cluster_sync();  // every CTA's qkv rows are in every s_qkv
    FG_TRACE_MARK(2);

    // ---- QK-norm + RoPE of the group (every CTA), the KV write (the current key's CTA) ----
    {
        const float *cs = rp.rope + (size_t)__ldcg(rp.positions) * D;  // [D/2, 2]
        const size_t pool_off = kv_slot >= 0 ? (size_t)kv_slot * tok_stride + (size_t)kvh * D : 0;
        for (unsigned it = warp; it < G + 2; it += kWarps) {  // warp-uniform
            if (it == 1) {  // v: bits unchanged
                const bf16 *x = s_qkv + (G + 1) * D;
                for (unsigned cc = lane; cc < C8; cc += 32) {
                    const uint4 v = *reinterpret_cast<const uint4 *>(x + cc * 8);
                    *reinterpret_cast<uint4 *>(s_cv + cc * 8) = v;
                    if (kv_slot >= 0) *reinterpret_cast<uint4 *>(rp.v_pool + pool_off + cc * 8) = v;
                }
                continue;
            }
            const bool is_k = it == 0;  // else query head it - 2
            rope_head<D>(s_qkv + (is_k ? G : it - 2) * D, is_k ? rp.k_norm : rp.q_norm, cs, rp.eps,
                         is_k ? s_ck : s_q + (it - 2) * LD, is_k && kv_slot >= 0 ? rp.k_pool + pool_off : nullptr,
                         nullptr);
        }
        for (unsigned i = tid; i < (kMaxGroup - G) * C8; i += kThreads)  // swap_tile's unused heads
            *reinterpret_cast<uint4 *>(s_q + (G + i / C8) * LD + (i % C8) * 8) = make_uint4(0u, 0u, 0u, 0u);
        __syncthreads();
        // the current key's rows in the first two tiles, whose copies skipped them
        if (sub_key >= 0 && sub_key < sr.start + 2 * TK && tid < 2 * C8) {
            const int st = (sub_key - sr.start) / TK, kl = sub_key - sr.start - st * TK;
            bf16 *tile = reinterpret_cast<bf16 *>(st ? area_a : qa_dyn) + (tid >= C8 ? TK * LD : 0);
            const unsigned cc = tid % C8;
            *reinterpret_cast<uint4 *>(tile + kl * LD + cc * 8) =
                *reinterpret_cast<const uint4 *>((tid >= C8 ? s_cv : s_ck) + cc * 8);
        }
    }
    FG_TRACE_MARK(3);

    // ---- the split's keys: swap_tile over two stages (stage 0 at the start, stage 1 = area A) ----
    const float qscale = scale * ATTN_LOG2E;
    float o[MT][4];
#pragma unroll
    for (int n = 0; n < MT; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
    for (int kt = 0; kt < n_tiles; ++kt) {
        const int st = kt & 1;
        const uint32_t base = st ? smem_a : smem0;
        const int kb = sr.start + kt * TK + warp * 16;
        cp_async_wait<1>();  // tile kt landed (tile kt + 1 may still fly)
        __syncthreads();
        if (kb < sr.end) swap_tile<D>(o, m0, m1, l0, l1, base, s_q, kb, sr.end, qscale);
        __syncthreads();  // every warp is done with stage st before it is refilled
        if (kt + 2 < n_tiles) {
            bf16 *sk = reinterpret_cast<bf16 *>(st ? area_a : qa_dyn);
            const int kb0 = sr.start + (kt + 2) * TK;
            const int last = (min(kb0 + TK, sr.end) - 1) / (int)block_size;
            if (last >= win0 + kDecBtWindow) {  // CTA-uniform
                win0 = kb0 / (int)block_size;
                bt_window(s_bt, bt, win0, (sr.end - 1) / (int)block_size);
            }
            load_kv_tile<D, true>(sk, sk + TK * LD, rp.k_pool, rp.v_pool, s_bt, win0, kb0, sr.end, bs, tok_stride,
                                  kvh, sub_key, s_ck, s_cv);
        } else {
            cp_async_commit();
        }
    }
    cp_async_wait<0>();
    __syncthreads();  // NOTE: s_o aliases stage 0
    FG_TRACE_MARK(4);

    // ---- the split's partial to its owners ----
    if (has_keys) {
#pragma unroll
        for (int x = 4; x < 32; x <<= 1) {  // l over the 8 lanes of a head column
            l0 += __shfl_xor_sync(0xFFFFFFFFu, l0, x);
            l1 += __shfl_xor_sync(0xFFFFFFFFu, l1, x);
        }
        float *s_o = reinterpret_cast<float *>(qa_dyn);
        const int gid = lane >> 2, tig = lane & 3;
        float *so = s_o + (size_t)warp * 16 * SO;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            so[(tig * 2) * SO + mt * 16 + gid] = o[mt][0];
            so[(tig * 2 + 1) * SO + mt * 16 + gid] = o[mt][1];
            so[(tig * 2) * SO + mt * 16 + gid + 8] = o[mt][2];
            so[(tig * 2 + 1) * SO + mt * 16 + gid + 8] = o[mt][3];
        }
        if (gid == 0) {
            s_m[warp][tig * 2] = m0;
            s_m[warp][tig * 2 + 1] = m1;
            s_l[warp][tig * 2] = l0;
            s_l[warp][tig * 2 + 1] = l1;
        }
        __syncthreads();
        const uint32_t po_addr = smem_addr(s_po), pml_addr = smem_addr(s_pml);
        for (unsigned i = tid; i < G * C4; i += kThreads) {  // element i = (head r, float4 column c4)
            const unsigned r = i / C4, c4 = i % C4;
            float M = -INFINITY;
#pragma unroll
            for (int w = 0; w < kWarps; ++w) M = fmaxf(M, s_m[w][r]);
            float L = 0.f;
            float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
            for (int w = 0; w < kWarps; ++w) {
                const float wt = fast_exp2(s_m[w][r] - M);  // M finite: the split holds keys
                const float4 v = *reinterpret_cast<const float4 *>(s_o + ((size_t)w * 16 + r) * SO + c4 * 4);
                L = fmaf(s_l[w][r], wt, L);
                a.x = fmaf(v.x, wt, a.x);
                a.y = fmaf(v.y, wt, a.y);
                a.z = fmaf(v.z, wt, a.z);
                a.w = fmaf(v.w, wt, a.w);
            }
            const float inv = 1.f / L;
            a.x *= inv; a.y *= inv; a.z *= inv; a.w *= inv;
            st_cluster_f4(map_rank(po_addr + (c * per_owner + i / C) * 16, i % C), a);
            if (c4 == 0)
                for (unsigned p = 0; p < C; ++p) st_cluster_f2(map_rank(pml_addr + (c * kMaxGroup + r) * 8, p), make_float2(M, L));
        }
    }
    cluster_sync();  // every used split's partial is with its owners
    FG_TRACE_MARK(5);

    // ---- the owned elements merged over the used splits ----
    const int used = sr.used;
    for (unsigned slot = tid; slot < per_owner; slot += kThreads) {
        const unsigned i = c + slot * C;
        if (i >= G * C4) break;
        const unsigned r = i / C4, c4 = i % C4;
        float M = -INFINITY;
        for (int s = 0; s < used; ++s) M = fmaxf(M, s_pml[s * kMaxGroup + r].x);
        float L = 0.f;
        float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int s = 0; s < used; ++s) {
            const float2 ml = s_pml[s * kMaxGroup + r];
            const float wt = ml.y * fast_exp2(ml.x - M);
            const float4 v = s_po[s * per_owner + slot];
            L += wt;
            a.x = fmaf(wt, v.x, a.x);
            a.y = fmaf(wt, v.y, a.y);
            a.z = fmaf(wt, v.z, a.z);
            a.w = fmaf(wt, v.w, a.w);
        }
        const float inv = L > 0.f ? 1.f / L : 0.f;  // no key at all (len == 0): zeros
        uint2 packed;
        packed.x = pack_bf16x2(a.x * inv, a.y * inv);
        packed.y = pack_bf16x2(a.z * inv, a.w * inv);
        *reinterpret_cast<uint2 *>(out + ((size_t)kvh * G + r) * D + c4 * 4) = packed;
    }
    FG_TRACE_MARK(6);
}

}  // namespace qa

// The launcher (fixedgraph/ops/attention.py: qkv_attention_decode) guarantees what is checked
// here; a launch that does not fit still waits (completion stays transitive) and writes nothing.
#define QKV_ATTENTION_ENTRY(DIM)                                                                          \
    extern "C" __global__ void __launch_bounds__(qa::kThreads, 1) decode_qkv_attention_d##DIM(             \
        bf16 *out, const float *hidden_in, const bf16 *delta, float *hidden_out, const bf16 *norm_w,     \
        const bf16 *w, const bf16 *bias, const bf16 *q_norm, const bf16 *k_norm, const float *rope,      \
        const unsigned *positions, const long long *slots, bf16 *k_pool, bf16 *v_pool,                   \
        const int *block_table, const int *seq_len, unsigned max_blocks, unsigned block_size, unsigned K, \
        unsigned Hq, unsigned Hkv, unsigned D, unsigned pre_rows, float scale, float eps) { FG_KERNEL_BEGIN(); \
        auto al = [](const void *p) { return p == nullptr || aligned_to(p, 16); };                       \
        const unsigned G = Hkv ? Hq / Hkv : 0, C = qa::cluster_ctas();                                    \
        const unsigned R = (G + 2) * DIM, rows_c = (R + C - 1) / C;                                        \
        const uint32_t stage = 4u * attn::kDecTileKeys * (DIM + 8);                                       \
        const uint32_t a_bytes = max(stage, (pre_rows * K * 2 + 15u) & ~15u);                             \
        const uint32_t tail = max(xs_stride(K) * 2u, qa::merge_bytes(C, G, DIM));                         \
        if (D != DIM || blockDim.x != qa::kThreads || Hkv == 0 || Hq % Hkv != 0 || G > qa::kMaxGroup ||   \
            gridDim.x != C || gridDim.y != Hkv || C > qa::kMaxCluster || K % 8 != 0 || K == 0 ||          \
            rows_c > qa::kMaxRows || dynamic_smem_bytes() < stage + a_bytes + tail || !al(hidden_in) ||    \
            !al(w) || !al(q_norm) || !al(k_norm) || !al(rope) || !al(k_pool) || !al(v_pool)) {           \
            FG_PDL_WAIT();                                                                                \
            return;                                                                                       \
        }                                                                                                 \
        attn::RopeArgs rp{nullptr, q_norm, k_norm, rope, positions, slots, k_pool, v_pool, eps};          \
        qa::qkv_attention<DIM>(out, hidden_in, delta, hidden_out, norm_w, w, bias, rp, block_table,       \
                               seq_len, max_blocks, block_size, K, Hq, Hkv, pre_rows, scale);            \
    }

QKV_ATTENTION_ENTRY(64)
QKV_ATTENTION_ENTRY(96)
QKV_ATTENTION_ENTRY(128)
