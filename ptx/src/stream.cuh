// Device helpers of the weight-streaming kernels (the persistent decode kernel mega.cu and the
// probes of runtime_test.cu): mbarrier steps for cp.async.bulk stages, %globaltimer, and a
// warp's bf16 row dot products against x in shared memory. Header only, all __forceinline__.
#pragma once

#include <stdint.h>

// mbarrier steps (shared-memory address bar): init for one arrival, the fences that
// make the inits visible to the async proxy (once after them all), the arrival that expects
// `bytes` of bulk copies, and the spin until phase 0 completes.
__device__ __forceinline__ void mbar_init1(unsigned int bar) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;\n\tfence.proxy.async.shared::cta;" ::: "memory");
}
__device__ __forceinline__ void mbar_expect(unsigned int bar, unsigned int bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait0(unsigned int bar) {
    unsigned int done = 0;
    while (!done)
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n"
                     " selp.u32 %0, 1, 0, p;\n}" : "=r"(done) : "r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait_parity(unsigned int bar, unsigned int parity) {
    asm volatile("{\n .reg .pred p;\n WAIT_%=:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 " @!p bra WAIT_%=;\n}\n" ::"r"(bar), "r"(parity) : "memory");
}

__device__ __forceinline__ float bf16_lo(unsigned int w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(unsigned int w) { return __uint_as_float(w & 0xFFFF0000u); }
__device__ __forceinline__ void fma8_bf16(float& acc, uint4 a, uint4 x) {  // elements 0..7 in order
    acc = fmaf(bf16_lo(a.x), bf16_lo(x.x), acc);
    acc = fmaf(bf16_hi(a.x), bf16_hi(x.x), acc);
    acc = fmaf(bf16_lo(a.y), bf16_lo(x.y), acc);
    acc = fmaf(bf16_hi(a.y), bf16_hi(x.y), acc);
    acc = fmaf(bf16_lo(a.z), bf16_lo(x.z), acc);
    acc = fmaf(bf16_hi(a.z), bf16_hi(x.z), acc);
    acc = fmaf(bf16_lo(a.w), bf16_lo(x.w), acc);
    acc = fmaf(bf16_hi(a.w), bf16_hi(x.w), acc);
}

__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
// Rows [r0, r1) of an N-row op that CTA b of G owns.
__device__ __forceinline__ void persist_rows(unsigned int b, unsigned int G, unsigned int N, unsigned int& r0,
                                             unsigned int& r1) {
    r0 = (unsigned int)((unsigned long long)b * N / G);
    r1 = (unsigned int)((unsigned long long)(b + 1) * N / G);
}

// sum[q] = row q's dot with x (R rows of K, q < R; every lane gets the sums): lane l's j-th 16-byte
// unit (l + 32 j) goes to chain j % 4 of its row, 8 fma in element order; the lane's sum is
// (c0 + c1) + (c2 + c3), then a shfl_xor tree. R = 2 keeps both rows' loads in flight (x read once).
template <int R>
__device__ __forceinline__ void stream_row(float (&sum)[2], const uint4* row0, const uint4* row1, const uint4* xs,
                                            unsigned int K, unsigned int lane) {
    const uint4* rows[2] = {row0, R == 2 ? row1 : row0};
    float acc[R][4];
#pragma unroll
    for (int q = 0; q < R; ++q) acc[q][0] = acc[q][1] = acc[q][2] = acc[q][3] = 0.0f;
    unsigned int i = lane;
    for (; i + 96 < K / 8; i += 128) {  // four 16-byte units a lane and row in flight, one chain each
        uint4 a[R][4], x[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            x[u] = xs[i + 32 * u];
#pragma unroll
            for (int q = 0; q < R; ++q) a[q][u] = rows[q][i + 32 * u];
        }
#pragma unroll
        for (int u = 0; u < 4; ++u)
#pragma unroll
            for (int q = 0; q < R; ++q) fma8_bf16(acc[q][u], a[q][u], x[u]);
    }
#pragma unroll
    for (int u = 0; u < 3; ++u)  // the last 0-3 units: chains 0, 1, 2 in turn
        if (i + 32 * u < K / 8)
#pragma unroll
            for (int q = 0; q < R; ++q) fma8_bf16(acc[q][u], rows[q][i + 32 * u], xs[i + 32 * u]);
#pragma unroll
    for (int q = 0; q < R; ++q) sum[q] = (acc[q][0] + acc[q][1]) + (acc[q][2] + acc[q][3]);
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
        for (int q = 0; q < R; ++q) sum[q] += __shfl_xor_sync(0xffffffffu, sum[q], o);
}

