// Device helpers of the sampling kernel (sample.cu): the counter-based uniform, the order-
// preserving float key, and block-wide reductions/scans for 1024-thread CTAs.
// Every definition here has a bit-exact numpy counterpart in
// fixedgraph/backends/reference/twins/sample.py; change both together.
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

namespace sample {

constexpr unsigned kThreads = 1024;        // CTA size the launcher uses (one CTA per row)
constexpr unsigned kWarps = kThreads / 32;
constexpr unsigned kFull = 0xffffffffu;
constexpr unsigned long long kGolden = 0x9E3779B97F4A7C15ull;  // SplitMix64 increment
// Upper bound of the Gumbel noise -log(-log u) for u <= 1 - 2^-24 (exact value 16.6355):
// a token whose z + kGumbelMax is below the best key so far cannot win.
constexpr float kGumbelMax = 17.0f;

// SplitMix64's output function (Steele, Lea, Flood 2014): a bijection on 64-bit words.
__device__ __forceinline__ unsigned long long mix64(unsigned long long z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// Stream origin of (seed, step): token i's uniform is uniform_at(origin + i * kGolden), i.e.
// SplitMix64 seeded with mix64(seed) at counter (step << 32) | i. Mixing the seed first keeps
// nearby seeds (0, 1, 2, ...) from giving shifted copies of one stream.
__device__ __forceinline__ unsigned long long stream_origin(unsigned seed_lo, unsigned seed_hi,
                                                            unsigned step) {
    const unsigned long long seed = ((unsigned long long)seed_hi << 32) | seed_lo;
    return mix64(seed) + ((unsigned long long)step << 32) * kGolden;
}

// u = (2k + 1) / 2^24 with k the top 23 bits of the hash: exact in f32, in [2^-24, 1 - 2^-24],
// never 0 or 1, so -log(-log u) is always finite.
__device__ __forceinline__ float uniform_at(unsigned long long state) {
    const unsigned k = (unsigned)(mix64(state) >> 41);
    return (float)(2u * k + 1u) * 5.9604644775390625e-8f;  // 2^-24
}

// Gumbel(0, 1) noise for token i of a stream.
__device__ __forceinline__ float gumbel(unsigned long long origin, unsigned i) {
    const float u = uniform_at(origin + (unsigned long long)i * kGolden);
    return -logf(-logf(u));
}

// Order-preserving u32 key of a float: key(a) < key(b) <=> a < b for non-NaN a, b, with -0
// folded onto +0 so that equal values have equal keys (ties must stay ties).
__device__ __forceinline__ unsigned float_key(float z) {
    unsigned u = __float_as_uint(z);
    if (u == 0x80000000u) u = 0u;
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// (value, index) pairs: the larger value wins, equal values go to the lower index.
__device__ __forceinline__ bool beats(float v, unsigned i, float bv, unsigned bi) {
    return v > bv || (v == bv && i < bi);
}

// Block-wide argmax of each thread's (v, i); every thread gets the winner.
// `sv`/`si` are [kWarps] shared scratch; the trailing barrier lets the caller reuse them.
__device__ __forceinline__ void block_argmax(float& v, unsigned& i, float* sv, unsigned* si) {
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(kFull, v, o);
        const unsigned oi = __shfl_xor_sync(kFull, i, o);
        if (beats(ov, oi, v, i)) { v = ov; i = oi; }
    }
    if (lane == 0) { sv[warp] = v; si[warp] = i; }
    __syncthreads();
    v = sv[lane];  // kWarps == 32: every lane holds one warp's winner
    i = si[lane];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(kFull, v, o);
        const unsigned oi = __shfl_xor_sync(kFull, i, o);
        if (beats(ov, oi, v, i)) { v = ov; i = oi; }
    }
    __syncthreads();
}

// Block-wide exclusive prefix sum of one u64 per thread (in threadIdx order); also returns
// the total. `sw` is [kWarps] shared scratch; the trailing barrier lets the caller reuse it.
__device__ __forceinline__ unsigned long long block_exclusive_scan(unsigned long long x,
                                                                   unsigned long long& total,
                                                                   unsigned long long* sw) {
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    unsigned long long incl = x;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const unsigned long long y = __shfl_up_sync(kFull, incl, o);
        if (lane >= (unsigned)o) incl += y;
    }
    if (lane == 31) sw[warp] = incl;
    __syncthreads();
    unsigned long long w = sw[lane], wincl = w;  // scan of the 32 warp totals, in every warp
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const unsigned long long y = __shfl_up_sync(kFull, wincl, o);
        if (lane >= (unsigned)o) wincl += y;
    }
    total = __shfl_sync(kFull, wincl, 31);
    const unsigned long long warp_excl = __shfl_sync(kFull, wincl - w, warp);
    __syncthreads();
    return warp_excl + incl - x;
}

}  // namespace sample
