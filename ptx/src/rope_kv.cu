// After the QKV GEMV: optional per-head RMSNorm of q and k (Qwen3 QK-norm), rotary embedding of
// q and k, q written to its own buffer, k and v written into the paged KV pools.
//
// One warp per (row, head) item over the q, k and v heads of every row; warps stride over the
// items, so any grid works. Launcher: fixedgraph/ops/rope_kv.py. Twin: twins/rope_kv.py.
#include <cuda_bf16.h>
#include <stdint.h>

#include "common_ops.cuh"
#include "pdl.cuh"

constexpr unsigned kMaxHalf = 128;  // head_dim <= 256: a lane holds at most 4 pairs

// Raw copy of VP consecutive bf16 (bits unchanged); the caller guarantees 2*VP-byte alignment.
template <int VP>
__device__ __forceinline__ void copy_bf16(bf16* dst, const bf16* src) {
    if constexpr (VP == 4) {
        *reinterpret_cast<uint2*>(dst) = *reinterpret_cast<const uint2*>(src);
    } else if constexpr (VP == 2) {
        *reinterpret_cast<uint32_t*>(dst) = *reinterpret_cast<const uint32_t*>(src);
    } else {
        *reinterpret_cast<uint16_t*>(dst) = *reinterpret_cast<const uint16_t*>(src);
    }
}

// VP pairs (i, i + half) per lane per step. VP divides half; vectors are aligned (see entry).
template <int VP>
__device__ __forceinline__ void rope_items(
    const bf16* __restrict__ qkv, bf16* __restrict__ q_out, const bf16* __restrict__ q_norm,
    const bf16* __restrict__ k_norm, const float* __restrict__ rope,
    const unsigned* __restrict__ positions, const long long* __restrict__ slots,
    bf16* __restrict__ k_pool, bf16* __restrict__ v_pool, unsigned rows, unsigned Hq,
    unsigned Hkv, unsigned D, float eps) {
    constexpr int kSteps = kMaxHalf / (32 * VP);  // pair vectors a lane holds for the norm
    const unsigned lane = threadIdx.x & 31u;
    const unsigned half = D / 2;
    const unsigned heads = Hq + 2 * Hkv;
    const unsigned items = rows * heads;
    const unsigned warps = gridDim.x * (blockDim.x >> 5);
    for (unsigned item = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); item < items;
         item += warps) {  // warp-uniform: every branch below is taken by the whole warp
        const unsigned r = item / heads, h = item % heads;
        const bf16* x = qkv + ((size_t)r * heads + h) * D;
        const long long slot = slots[r];
        if (h >= Hq + Hkv) {  // v head: copied unchanged into the pool
            if (slot < 0) continue;
            bf16* dst = v_pool + (size_t)slot * Hkv * D + (size_t)(h - Hq - Hkv) * D;
            for (unsigned i = lane * VP; i < D; i += 32 * VP) copy_bf16<VP>(dst + i, x + i);
            continue;
        }
        const bool is_q = h < Hq;
        if (!is_q && slot < 0) continue;  // no KV slot for this row (q is still written)
        bf16* dst = is_q ? q_out + ((size_t)r * Hq + h) * D
                         : k_pool + (size_t)slot * Hkv * D + (size_t)(h - Hq) * D;
        const bf16* norm_w = is_q ? q_norm : k_norm;
        float x1[kSteps][VP], x2[kSteps][VP];
        float sumsq = 0.0f;
#pragma unroll
        for (int s = 0; s < kSteps; ++s) {
            const unsigned i = lane * VP + s * 32 * VP;
            if (i < half) {
                load_bf16<VP>(x + i, x1[s]);
                load_bf16<VP>(x + half + i, x2[s]);
#pragma unroll
                for (int j = 0; j < VP; ++j) sumsq += x1[s][j] * x1[s][j] + x2[s][j] * x2[s][j];
            }
        }
        float inv_rms = 0.0f;
        if (norm_w) inv_rms = 1.0f / sqrtf(warp_sum(sumsq) / (float)D + eps);
        const float* cs = rope + (size_t)positions[r] * half * 2;  // [half, 2] (cos, sin)
#pragma unroll
        for (int s = 0; s < kSteps; ++s) {
            const unsigned i = lane * VP + s * 32 * VP;
            if (i >= half) continue;
            float o1[VP], o2[VP];
            rope_pairs<VP>(x1[s], x2[s], norm_w, inv_rms, cs, i, half, o1, o2);
            store_bf16<VP>(dst + i, o1);
            store_bf16<VP>(dst + half + i, o2);
        }
    }
}

// Per row r and head h of qkv: q/k heads are optionally RMS-normed over D (weight q_norm/k_norm),
// then rotated at positions[r] with rotate_half pairing (i, i + D/2):
//   out1 = x1*cos - x2*sin, out2 = x2*cos + x1*sin   (fp32, stored bf16).
// q goes to q_out; k and the unchanged v go to the pools at element slots[r]*Hkv*D + h*D; a
// negative slot skips the row's KV write. D even and <= 256. Block: a multiple of 32 threads.
extern "C" __global__ void qk_norm_rope_kv(
    const bf16* __restrict__ qkv,          // [rows, (Hq + 2*Hkv) * D] bf16: q heads, k heads, v heads
    bf16* __restrict__ q_out,              // [rows, Hq * D] bf16, written
    const bf16* __restrict__ q_norm,       // [D] bf16 q-norm weight, or NULL (no QK-norm)
    const bf16* __restrict__ k_norm,       // [D] bf16 k-norm weight, or NULL
    const float* __restrict__ rope,        // [max_pos, D/2, 2] f32 (cos, sin)
    const unsigned* __restrict__ positions,// [rows] u32 rotary position of each row
    const long long* __restrict__ slots,   // [rows] i64 KV slot of each row; < 0: no KV write
    bf16* __restrict__ k_pool,             // [num_blocks, block_size, Hkv, D] bf16
    bf16* __restrict__ v_pool,             // [num_blocks, block_size, Hkv, D] bf16
    unsigned rows, unsigned Hq, unsigned Hkv, unsigned D, float eps)
{ FG_KERNEL_BEGIN();
    FG_PDL_WAIT();  // PDL: wait for the predecessor grid before any global read
    const unsigned half = D / 2;
    // A partial warp would make the full-mask shuffles undefined; an odd or too-wide head has
    // no pairing. Such launches write nothing (the outputs stay visibly poisoned).
    if ((blockDim.x & 31u) != 0 || (D & 1u) != 0 || half == 0 || half > kMaxHalf) return;
    auto al = [](const void* p, unsigned b) { return p == nullptr || aligned_to(p, b); };
    const bool a8 = al(qkv, 8) && al(q_out, 8) && al(q_norm, 8) && al(k_norm, 8) &&
                    al(k_pool, 8) && al(v_pool, 8) && al(rope, 16);
    const bool a4 = al(qkv, 4) && al(q_out, 4) && al(q_norm, 4) && al(k_norm, 4) &&
                    al(k_pool, 4) && al(v_pool, 4) && al(rope, 16);
    if (half % 4 == 0 && half >= 128 && a8)
        rope_items<4>(qkv, q_out, q_norm, k_norm, rope, positions, slots, k_pool, v_pool, rows,
                      Hq, Hkv, D, eps);
    else if (half % 2 == 0 && half >= 64 && a4)
        rope_items<2>(qkv, q_out, q_norm, k_norm, rope, positions, slots, k_pool, v_pool, rows,
                      Hq, Hkv, D, eps);
    else
        rope_items<1>(qkv, q_out, q_norm, k_norm, rope, positions, slots, k_pool, v_pool, rows,
                      Hq, Hkv, D, eps);
}
