// Device side of the paged attention module (entries live in attention.cu): bf16 packing,
// inline-PTX wrappers for cp.async / ldmatrix / the bf16 tensor-core MMA, and the body of the
// tensor-core prefill kernel, prefill_impl<D>.
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

#define ATTN_LOG2E 1.4426950408889634f
#define ATTN_LN2 0.6931471805599453f

namespace attn {

// Eight bf16 values held in one 16-byte vector (one 16-byte global load).
__device__ __forceinline__ void unpack8(const uint4 &v, float (&f)[8]) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        // bf16 -> f32 is exact: the bf16 bits are the high half of the f32 bits.
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
    }
}

// n / d and n % d for a divisor fixed per launch (the KV block size) and n < 2^31, without the
// ~25-instruction integer division at every use: m = floor((2^32 - 1) / d) once, then
// q' = umulhi(n, m) is q or q - 1 (n * m / 2^32 >= n / d - n / 2^32 > n / d - 1/2), and one
// compare fixes it. Exact for every d >= 1 (a numpy twin checks it at block edges, the largest
// key and 100k random keys for 13 divisors: tests/reference/test_attention_twins.py).
struct DivBy {
    unsigned d, m;
};

__device__ __forceinline__ DivBy div_by(unsigned d) { return DivBy{d, 0xFFFFFFFFu / d}; }

__device__ __forceinline__ unsigned divmod(const DivBy &v, unsigned n, unsigned &r) {
    unsigned q = __umulhi(n, v.m);
    r = n - q * v.d;
    if (r >= v.d) {
        r -= v.d;
        ++q;
    }
    return q;
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);  // .x = lo sits in the low half
    return *reinterpret_cast<uint32_t *>(&h);
}

__device__ __forceinline__ uint4 pack8(const float (&f)[8]) {
    return make_uint4(pack_bf16x2(f[0], f[1]), pack_bf16x2(f[2], f[3]),
                      pack_bf16x2(f[4], f[5]), pack_bf16x2(f[6], f[7]));
}

// Streaming read-only 16-byte load: KV is read once per CTA, keep it out of L1.
__device__ __forceinline__ uint4 ld_stream16(const void *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte async copy global -> shared; src_bytes == 0 writes zeros and reads nothing.
// NOTE (session 37, ncu at 4k keys): the decode K/V copies count 24 L2 sectors a warp against an
// ideal 16 in this form and in the plain one (no ignore-src operand) alike; the contiguous
// control of bench_kernels --staging-variant sits at its ideal.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
                 "r"(src_bytes)
                 : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;" ::: "memory");
}

template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// Four 8x8 b16 matrices; lane l supplies the row address of matrix l/8, row l%8.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// c[16x8 f32] += a[16x16 bf16, row-major] * b[16x8 bf16, col-major].
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The 8x8 b16 matrix held one row pair a lane (lane l: row l/4, columns 2(l%4), 2(l%4)+1),
// transposed in registers: lane l then holds row l/4 of the transpose.
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t a) {
    uint32_t d;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(d) : "r"(a));
    return d;
}

// exp2 that maps -inf to 0 and never sees (-inf) - (-inf): callers pass a finite max.
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

}  // namespace attn

constexpr int kPreWarps = 8;
constexpr int kPreThreads = kPreWarps * 32;
constexpr int kPreBM = kPreWarps * 16;  // M rows per CTA: (token, query head) pairs, 16 per warp
constexpr int kPreBN = 64;              // keys per K/V tile

// Causal flash attention of T query tokens of one sequence over its paged K/V.
// Row r of the M dimension is (token r / G, query head kvh*G + r % G): a CTA owns kPreBM rows of
// one kv head, so each K/V tile in shared memory serves the whole GQA group. Row r attends keys
// 0..min(positions[r / G], max_blocks*block_size - 1). K/V tiles stream through cp.async: the next
// K tile loads during P.V, the next V tile during Q.K^T. Keys past the CTA's last needed key are
// zero-filled, never read, so unwritten pool slots (garbage, NaN) cannot leak into P.V.
template <int D>
__device__ __forceinline__ void prefill_impl(
    __nv_bfloat16 *__restrict__ out,           // [T, Hq*D] bf16
    const __nv_bfloat16 *__restrict__ q,       // [T, Hq*D] bf16 (RoPE applied)
    const __nv_bfloat16 *__restrict__ k_pool,  // [num_blocks, block_size, Hkv, D] bf16
    const __nv_bfloat16 *__restrict__ v_pool,  // [num_blocks, block_size, Hkv, D] bf16
    const int *__restrict__ block_table,       // [max_blocks] i32, this sequence's row
    const unsigned *__restrict__ positions,    // [T] u32
    unsigned T, unsigned max_blocks, unsigned block_size, unsigned Hq, unsigned Hkv,
    float scale) {
    constexpr int KS = D / 16;       // k-steps of Q.K^T
    constexpr int NT = D / 8;        // n-tiles of O = P.V (8 output columns each)
    constexpr int SN = kPreBN / 8;   // n-tiles of S (8 keys each)
    constexpr int LD = D + 8;        // smem row stride in bf16: +16 B makes ldmatrix conflict-free
    constexpr int CHUNKS = D / 8;    // 16-byte chunks per key row
    static_assert(D % 16 == 0 && NT % 2 == 0, "prefill head dim must be a multiple of 16");

    __shared__ __align__(16) __nv_bfloat16 s_k[kPreBN * LD];  // [key, dim] of one tile
    __shared__ __align__(16) __nv_bfloat16 s_v[kPreBN * LD];
    __shared__ int s_kend;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int gid = lane >> 2, tig = lane & 3;  // mma fragment row group / thread in group
    const unsigned G = Hq / Hkv;
    const unsigned rows_total = T * G;
    const unsigned n_mtiles = (rows_total + kPreBM - 1) / kPreBM;
    const long long cap = min((long long)max_blocks * block_size, 0x7FFFFFFFLL);
    const float qscale = scale * ATTN_LOG2E;
    const size_t tok_stride = (size_t)Hkv * D;
    // ldmatrix row addresses of this lane; per-step offsets are compile-time constants.
    // K (x4): matrix lane/8 = (n-tile +lane/16, k half (lane/8)&1), row lane%8.
    const uint32_t k_lane = attn::smem_addr(
        s_k + ((lane >> 4) * 8 + (lane & 7)) * LD + ((lane >> 3) & 1) * 8);
    // V (x4, transposed): matrix lane/8 = (key half (lane/8)&1, n-tile +lane/16), row lane%8.
    const uint32_t v_lane = attn::smem_addr(
        s_v + (((lane >> 3) & 1) * 8 + (lane & 7)) * LD + (lane >> 4) * 8);

    for (unsigned kvh = blockIdx.y; kvh < Hkv; kvh += gridDim.y)
    for (unsigned mt = blockIdx.x; mt < n_mtiles; mt += gridDim.x) {
        const unsigned r0 = mt * kPreBM + warp * 16 + gid, r1 = r0 + 8;  // this thread's 2 rows
        const int pos0 = r0 < rows_total ? (int)min((long long)positions[r0 / G], cap - 1) : -1;
        const int pos1 = r1 < rows_total ? (int)min((long long)positions[r1 / G], cap - 1) : -1;
        int wmax = max(pos0, pos1);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) wmax = max(wmax, __shfl_xor_sync(0xFFFFFFFFu, wmax, o));
        const int warp_kend = wmax + 1;  // keys this warp needs: [0, warp_kend)
        if (tid == 0) s_kend = 0;
        __syncthreads();
        if (lane == 0) atomicMax(&s_kend, warp_kend);
        __syncthreads();
        const int kend = s_kend;  // keys the CTA needs
        const int n_ktiles = (kend + kPreBN - 1) / kPreBN;

        // Q fragments stay in registers for the whole key loop (A operand, row-major 16x16).
        uint32_t qa[KS][4];
        const uint32_t *q0 = r0 < rows_total ? reinterpret_cast<const uint32_t *>(
                                 q + ((size_t)(r0 / G) * Hq + kvh * G + r0 % G) * D) : nullptr;
        const uint32_t *q1 = r1 < rows_total ? reinterpret_cast<const uint32_t *>(
                                 q + ((size_t)(r1 / G) * Hq + kvh * G + r1 % G) * D) : nullptr;
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) {
            qa[ks][0] = q0 ? q0[ks * 8 + tig] : 0u;
            qa[ks][1] = q1 ? q1[ks * 8 + tig] : 0u;
            qa[ks][2] = q0 ? q0[ks * 8 + tig + 4] : 0u;
            qa[ks][3] = q1 ? q1[ks * 8 + tig + 4] : 0u;
        }

        // Every block-table load of a tile is issued before any is used (loaded under the key <
        // kend test, each load and its use made one branch: a round trip per load, as ncu found
        // in decode; keys past kend read kend - 1's entry and copy nothing).
        auto load_tile = [&](__nv_bfloat16 *dst, const __nv_bfloat16 *pool, int kt) {
            constexpr int IT = kPreBN * CHUNKS / kPreThreads;
            static_assert(kPreBN * CHUNKS % kPreThreads == 0, "tile chunks must divide evenly");
            unsigned blk[IT];
#pragma unroll
            for (int it = 0; it < IT; ++it) {
                const int key = min(kt * kPreBN + (tid + it * kPreThreads) / CHUNKS, kend - 1);
                blk[it] = (unsigned)block_table[(unsigned)key / block_size];
            }
#pragma unroll
            for (int it = 0; it < IT; ++it) {
                const int i = tid + it * kPreThreads;
                const int kl = i / CHUNKS, cc = i % CHUNKS, key = kt * kPreBN + kl;
                const bool ok = key < kend;
                const size_t tok = (size_t)blk[it] * block_size + (unsigned)key % block_size;
                attn::cp_async16(attn::smem_addr(dst + kl * LD + cc * 8),
                                 ok ? pool + tok * tok_stride + (size_t)kvh * D + cc * 8 : pool, ok ? 16 : 0);
            }
            attn::cp_async_commit();
        };

        float o[NT][4];
#pragma unroll
        for (int n = 0; n < NT; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
        float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;  // l: this thread's columns only

        if (n_ktiles > 0) {
            load_tile(s_k, k_pool, 0);
            load_tile(s_v, v_pool, 0);
        }
        for (int kt = 0; kt < n_ktiles; ++kt) {
            const int kbase = kt * kPreBN;
            const bool active = kbase < warp_kend;  // warp-uniform: skip tiles above the diagonal
            float s[SN][4];
            attn::cp_async_wait<1>();  // K(kt) landed (V(kt) may still fly)
            __syncthreads();
            if (active) {
#pragma unroll
                for (int j = 0; j < SN; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
                for (int ks = 0; ks < KS; ++ks) {
#pragma unroll
                    for (int jp = 0; jp < SN / 2; ++jp) {
                        uint32_t b[4];  // n-tiles 2jp, 2jp+1 (keys) x k halves of step ks (dims)
                        attn::ldmatrix_x4(b, k_lane + (jp * 16 * LD + ks * 16) * 2);
                        attn::mma_16816(s[2 * jp], qa[ks], b[0], b[1]);
                        attn::mma_16816(s[2 * jp + 1], qa[ks], b[2], b[3]);
                    }
                }
                float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
                for (int j = 0; j < SN; ++j) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int key = kbase + j * 8 + tig * 2 + (e & 1);
                        const bool ok = key <= (e < 2 ? pos0 : pos1);  // causal + padding rows
                        s[j][e] = ok ? s[j][e] * qscale : -INFINITY;
                    }
                    mx0 = fmaxf(mx0, fmaxf(s[j][0], s[j][1]));
                    mx1 = fmaxf(mx1, fmaxf(s[j][2], s[j][3]));
                }
#pragma unroll
                for (int o2 = 1; o2 < 4; o2 <<= 1) {  // the 4 threads of a row group share rows
                    mx0 = fmaxf(mx0, __shfl_xor_sync(0xFFFFFFFFu, mx0, o2));
                    mx1 = fmaxf(mx1, __shfl_xor_sync(0xFFFFFFFFu, mx1, o2));
                }
                const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
                const float mu0 = mn0 == -INFINITY ? 0.f : mn0;  // row with no key yet: p = 0
                const float mu1 = mn1 == -INFINITY ? 0.f : mn1;
                const float c0 = attn::fast_exp2(m0 - mu0), c1 = attn::fast_exp2(m1 - mu1);
                m0 = mn0;
                m1 = mn1;
                float ps0 = 0.f, ps1 = 0.f;
#pragma unroll
                for (int j = 0; j < SN; ++j) {
                    s[j][0] = attn::fast_exp2(s[j][0] - mu0);
                    s[j][1] = attn::fast_exp2(s[j][1] - mu0);
                    s[j][2] = attn::fast_exp2(s[j][2] - mu1);
                    s[j][3] = attn::fast_exp2(s[j][3] - mu1);
                    ps0 += s[j][0] + s[j][1];
                    ps1 += s[j][2] + s[j][3];
                }
                l0 = fmaf(l0, c0, ps0);
                l1 = fmaf(l1, c1, ps1);
#pragma unroll
                for (int n = 0; n < NT; ++n) {
                    o[n][0] *= c0;
                    o[n][1] *= c0;
                    o[n][2] *= c1;
                    o[n][3] *= c1;
                }
            }
            __syncthreads();  // NOTE: every warp is done with s_k before it is overwritten
            if (kt + 1 < n_ktiles) load_tile(s_k, k_pool, kt + 1);
            else attn::cp_async_commit();  // empty group keeps wait_group<1> counting right
            attn::cp_async_wait<1>();      // V(kt) landed
            __syncthreads();
            if (active) {
#pragma unroll
                for (int kk = 0; kk < kPreBN / 16; ++kk) {
                    // The S accumulators of n-tiles 2kk, 2kk+1 are exactly P's A fragment.
                    uint32_t a[4];
                    a[0] = attn::pack_bf16x2(s[2 * kk][0], s[2 * kk][1]);
                    a[1] = attn::pack_bf16x2(s[2 * kk][2], s[2 * kk][3]);
                    a[2] = attn::pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
                    a[3] = attn::pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
                    for (int jp = 0; jp < NT / 2; ++jp) {
                        uint32_t b[4];  // k halves (keys) x n-tiles 2jp, 2jp+1 (dims), transposed
                        attn::ldmatrix_x4_trans(b, v_lane + (kk * 16 * LD + jp * 16) * 2);
                        attn::mma_16816(o[2 * jp], a, b[0], b[1]);
                        attn::mma_16816(o[2 * jp + 1], a, b[2], b[3]);
                    }
                }
            }
            __syncthreads();  // NOTE: every warp is done with s_v before it is overwritten
            if (kt + 1 < n_ktiles) load_tile(s_v, v_pool, kt + 1);
            else attn::cp_async_commit();
        }
        attn::cp_async_wait<0>();

#pragma unroll
        for (int o2 = 1; o2 < 4; o2 <<= 1) {
            l0 += __shfl_xor_sync(0xFFFFFFFFu, l0, o2);
            l1 += __shfl_xor_sync(0xFFFFFFFFu, l1, o2);
        }
        const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
        if (r0 < rows_total) {
            __nv_bfloat16 *dst = out + ((size_t)(r0 / G) * Hq + kvh * G + r0 % G) * D + tig * 2;
#pragma unroll
            for (int n = 0; n < NT; ++n)
                *reinterpret_cast<uint32_t *>(dst + n * 8) =
                    attn::pack_bf16x2(o[n][0] * inv0, o[n][1] * inv0);
        }
        if (r1 < rows_total) {
            __nv_bfloat16 *dst = out + ((size_t)(r1 / G) * Hq + kvh * G + r1 % G) * D + tig * 2;
#pragma unroll
            for (int n = 0; n < NT; ++n)
                *reinterpret_cast<uint32_t *>(dst + n * 8) =
                    attn::pack_bf16x2(o[n][2] * inv1, o[n][3] * inv1);
        }
        __syncthreads();  // NOTE: s_kend and the tiles are reused by this CTA's next work item
    }
}
