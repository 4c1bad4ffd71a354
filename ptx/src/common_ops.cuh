// Shared device helpers of the small ops (embed_norm, rope_kv, act, argmax): vector loads and
// stores of bf16/f32 runs converted to fp32 registers, and warp/block sum reductions.
// Header only; every function is __forceinline__ so nothing here becomes a PTX entry.
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

typedef __nv_bfloat16 bf16;

// True when every pointer is a multiple of `bytes` (a power of two).
__device__ __forceinline__ bool aligned_to(const void* p, unsigned bytes) {
    return (reinterpret_cast<uintptr_t>(p) & (bytes - 1)) == 0;
}

// Load N consecutive bf16 (N in {1, 2, 4, 8}) as fp32. The caller guarantees 2*N-byte alignment.
template <int N>
__device__ __forceinline__ void load_bf16(const bf16* p, float (&v)[N]) {
    if constexpr (N == 8) {
        uint4 raw = *reinterpret_cast<const uint4*>(p);
        const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            float2 f = __bfloat1622float2(h[i]);
            v[2 * i] = f.x;
            v[2 * i + 1] = f.y;
        }
    } else if constexpr (N == 4) {
        uint2 raw = *reinterpret_cast<const uint2*>(p);
        const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            float2 f = __bfloat1622float2(h[i]);
            v[2 * i] = f.x;
            v[2 * i + 1] = f.y;
        }
    } else if constexpr (N == 2) {
        float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
        v[0] = f.x;
        v[1] = f.y;
    } else {
        v[0] = __bfloat162float(*p);
    }
}

// Store N fp32 values as N consecutive bf16, each rounded to nearest even.
template <int N>
__device__ __forceinline__ void store_bf16(bf16* p, const float (&v)[N]) {
    if constexpr (N == 1) {
        *p = __float2bfloat16_rn(v[0]);
    } else {
        __nv_bfloat162 h[N / 2];
#pragma unroll
        for (int i = 0; i < N / 2; ++i) h[i] = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
        if constexpr (N == 8) {
            *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(h);
        } else if constexpr (N == 4) {
            *reinterpret_cast<uint2*>(p) = *reinterpret_cast<const uint2*>(h);
        } else {
            *reinterpret_cast<__nv_bfloat162*>(p) = h[0];
        }
    }
}

// Round an fp32 value to bf16 and back: the rounding point HF's bf16 modules introduce.
__device__ __forceinline__ float round_bf16(float x) {
    return __bfloat162float(__float2bfloat16_rn(x));
}

// silu(g) * u with HF's bf16 rounding (act.cu, gemv.cuh, mega.cu): F.silu returns a bf16 tensor,
// and the product with up is rounded again.
__device__ __forceinline__ float silu_mul_one(float g, float u) {
    const float act = round_bf16(g / (1.0f + expf(-g)));  // expf(+big) = inf gives -0: fine
    return act * u;
}

// Load/store N consecutive fp32 (N in {1, 2, 4}); the caller guarantees 4*N-byte alignment.
template <int N>
__device__ __forceinline__ void load_f32(const float* p, float (&v)[N]) {
    if constexpr (N == 4) {
        float4 f = *reinterpret_cast<const float4*>(p);
        v[0] = f.x; v[1] = f.y; v[2] = f.z; v[3] = f.w;
    } else if constexpr (N == 2) {
        float2 f = *reinterpret_cast<const float2*>(p);
        v[0] = f.x; v[1] = f.y;
    } else {
        v[0] = *p;
    }
}

template <int N>
__device__ __forceinline__ void store_f32(float* p, const float (&v)[N]) {
    if constexpr (N == 4) {
        *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
    } else if constexpr (N == 2) {
        *reinterpret_cast<float2*>(p) = make_float2(v[0], v[1]);
    } else {
        *p = v[0];
    }
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

// Sum over the whole CTA; every thread gets the result. `scratch` holds >= 32 floats.
// NOTE: every thread of the block must call this (it synchronizes twice), and blockDim.x must
// be a multiple of 32 so that the full-mask shuffles are defined.
__device__ __forceinline__ float block_sum(float x, float* scratch) {
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    const unsigned nwarps = blockDim.x >> 5;
    x = warp_sum(x);
    if (lane == 0) scratch[warp] = x;
    __syncthreads();
    float total = lane < nwarps ? scratch[lane] : 0.0f;
    total = warp_sum(total);
    __syncthreads();  // scratch may be reused by the caller right after
    return total;
}

// ---- argmax order (argmax.cu, the fused head + argmax in gemv.cu) --------------------------
constexpr int kNone = 0x7fffffff;  // index of an empty candidate: loses to every real one

// True when (v, i) beats (bv, bi): the larger value wins, NaN loses to every number (even
// -inf), equal values (and two NaNs) go to the lower index, as torch.argmax breaks ties.
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
    const bool v_nan = v != v, b_nan = bv != bv;
    if (v_nan || b_nan) return b_nan && (!v_nan || i < bi);
    return v > bv || (v == bv && i < bi);
}

// ---- RoPE (rope_kv.cu, the fused decode attention) ---------------------------------------------
// One lane's VP rotary pairs (i + j, half + i + j), j < VP, of a head x1 | x2 (fp32): RMS-normed
// with weight w and inv_rms when w is not NULL (add_rmsnorm's rounding: bf16(w * bf16(x * inv_rms))),
// then rotated by table row cs ([half, 2] (cos, sin)): o1 = a*cos - b*sin, o2 = b*cos + a*sin with
// unfused multiplies, so the numpy twin reproduces the fp32 result exactly.
template <int VP>
__device__ __forceinline__ void rope_pairs(const float (&x1)[VP], const float (&x2)[VP], const bf16* w,
                                           float inv_rms, const float* cs, unsigned i, unsigned half,
                                           float (&o1)[VP], float (&o2)[VP]) {
    float a[VP], b[VP], c[VP], sn[VP];
    if (w) {
        float w1[VP], w2[VP];
        load_bf16<VP>(w + i, w1);
        load_bf16<VP>(w + half + i, w2);
#pragma unroll
        for (int j = 0; j < VP; ++j) {
            a[j] = round_bf16(w1[j] * round_bf16(x1[j] * inv_rms));
            b[j] = round_bf16(w2[j] * round_bf16(x2[j] * inv_rms));
        }
    } else {
#pragma unroll
        for (int j = 0; j < VP; ++j) { a[j] = x1[j]; b[j] = x2[j]; }
    }
    if constexpr (VP == 1) {  // scalar loads: no alignment needed on the table
        c[0] = cs[2 * i];
        sn[0] = cs[2 * i + 1];
    } else {
#pragma unroll
        for (int j = 0; j < VP; j += 2) {
            float t[4];
            load_f32<4>(cs + 2 * (i + j), t);
            c[j] = t[0]; sn[j] = t[1]; c[j + 1] = t[2]; sn[j + 1] = t[3];
        }
    }
#pragma unroll
    for (int j = 0; j < VP; ++j) {
        o1[j] = __fsub_rn(__fmul_rn(a[j], c[j]), __fmul_rn(b[j], sn[j]));
        o2[j] = __fadd_rn(__fmul_rn(b[j], c[j]), __fmul_rn(a[j], sn[j]));
    }
}

// dst[i] = float(table[token, i]) for i = start, start + stride, .. < H: one embedding row into
// the f32 residual stream (embed_gather, stage_meta_ring_embed). A token outside [0, V) fills
// the row with NaN, so a bad id is visible downstream instead of reading past the table.
__device__ __forceinline__ void embed_row(float* __restrict__ dst, const bf16* __restrict__ table, int token,
                                          unsigned H, unsigned V, unsigned start, unsigned stride) {
    if ((unsigned)token >= V) {  // negative ids wrap to huge unsigned values and land here too
        const float nan = __int_as_float(0x7fc00000);
        for (unsigned i = start; i < H; i += stride) dst[i] = nan;
        return;
    }
    const bf16* src = table + (size_t)token * H;
    if (H % 8 == 0 && aligned_to(src, 16) && aligned_to(dst, 16)) {
        // 16-byte bf16 loads, two 16-byte f32 stores per 8 elements.
        for (unsigned i = start; i < H / 8; i += stride) {
            float v[8];
            load_bf16<8>(src + 8 * (size_t)i, v);
            float lo[4] = {v[0], v[1], v[2], v[3]}, hi[4] = {v[4], v[5], v[6], v[7]};
            store_f32<4>(dst + 8 * (size_t)i, lo);
            store_f32<4>(dst + 8 * (size_t)i + 4, hi);
        }
    } else {
        for (unsigned i = start; i < H; i += stride) dst[i] = __bfloat162float(src[i]);
    }
}
