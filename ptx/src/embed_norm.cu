// The residual stream's entry and its norms: token embedding gather (bf16 table -> f32 stream)
// and the fused residual add + RMSNorm that feeds every GEMV.
//
// Both entries take one CTA per token row (blockIdx.x = row; the row count is gridDim.x).
// Launchers: fixedgraph/ops/embed_norm.py. Numpy twins: fixedgraph/backends/reference/twins.
#include <cuda_bf16.h>
#include <stdint.h>

#include "common_ops.cuh"
#include "pdl.cuh"

// hidden[r, :] = float(table[tokens[r], :]). A token outside [0, V) fills its row with NaN so
// that a bad id is visible downstream instead of reading past the table.
// Grid: (rows, any); blockIdx.y splits a row's columns when the launcher wants more CTAs.
extern "C" __global__ void embed_gather(
    float* __restrict__ hidden,        // [rows, H] f32, written
    const bf16* __restrict__ table,    // [V, H] bf16 embedding table
    const int* __restrict__ tokens,    // [rows] i32 token ids
    unsigned H,                        // hidden size
    unsigned V)                        // vocabulary size (table rows)
{ FG_KERNEL_BEGIN();
    FG_PDL_WAIT();  // PDL: wait for the predecessor grid before any global read
    const unsigned r = blockIdx.x;
    embed_row(hidden + (size_t)r * H, table, tokens[r], H, V, blockIdx.y * blockDim.x + threadIdx.x,
              gridDim.y * blockDim.x);
}

// Vectors (of VEC elements) a thread keeps in registers between the two passes of one row.
// The launcher sizes blocks so that ceil(H / VEC / blockDim) <= kCached; larger rows re-read
// hidden from memory (still correct, a little slower).
constexpr int kCached = 8;

// One row of add_rmsnorm with VEC-wide accesses; VEC divides H and every pointer is aligned.
template <int VEC>
__device__ __forceinline__ void add_rmsnorm_row(float* __restrict__ h, const bf16* __restrict__ d,
                                                const bf16* __restrict__ w, bf16* __restrict__ o,
                                                unsigned H, float eps, float* scratch) {
    const unsigned n = H / VEC;
    const bool cached = n <= kCached * blockDim.x;  // uniform across the CTA
    float v[kCached][VEC];
    float sumsq = 0.0f;
    // Pass 1: residual add (written back in place, fp32) and the sum of squares.
    if (cached) {
#pragma unroll
        for (int k = 0; k < kCached; ++k) {
            const unsigned i = threadIdx.x + k * blockDim.x;
#pragma unroll
            for (int j = 0; j < VEC; ++j) v[k][j] = 0.0f;
            if (i < n) {
                load_f32<VEC>(h + (size_t)i * VEC, v[k]);
                if (d) {
                    float dv[VEC];
                    load_bf16<VEC>(d + (size_t)i * VEC, dv);
#pragma unroll
                    for (int j = 0; j < VEC; ++j) v[k][j] += dv[j];
                    store_f32<VEC>(h + (size_t)i * VEC, v[k]);
                }
#pragma unroll
                for (int j = 0; j < VEC; ++j) sumsq += v[k][j] * v[k][j];
            }
        }
    } else {
        for (unsigned i = threadIdx.x; i < n; i += blockDim.x) {
            float x[VEC];
            load_f32<VEC>(h + (size_t)i * VEC, x);
            if (d) {
                float dv[VEC];
                load_bf16<VEC>(d + (size_t)i * VEC, dv);
#pragma unroll
                for (int j = 0; j < VEC; ++j) x[j] += dv[j];
                store_f32<VEC>(h + (size_t)i * VEC, x);
            }
#pragma unroll
            for (int j = 0; j < VEC; ++j) sumsq += x[j] * x[j];
        }
    }
    const float total = block_sum(sumsq, scratch);
    // Exact sqrt and division (not rsqrtf's approximation) so the twin can match in float32.
    const float inv_rms = 1.0f / sqrtf(total / (float)H + eps);
    // Pass 2: out = bf16(weight * bf16(x * inv_rms)), HF LlamaRMSNorm's rounding in bf16.
    auto finish = [&](const float (&x)[VEC], unsigned i) {
        float wv[VEC], y[VEC];
        load_bf16<VEC>(w + (size_t)i * VEC, wv);
#pragma unroll
        for (int j = 0; j < VEC; ++j) y[j] = wv[j] * round_bf16(x[j] * inv_rms);
        store_bf16<VEC>(o + (size_t)i * VEC, y);
    };
    if (cached) {
#pragma unroll
        for (int k = 0; k < kCached; ++k) {
            const unsigned i = threadIdx.x + k * blockDim.x;
            if (i < n) finish(v[k], i);
        }
    } else {
        // Re-reads only elements this same thread wrote in pass 1, so no barrier is needed.
        for (unsigned i = threadIdx.x; i < n; i += blockDim.x) {
            float x[VEC];
            load_f32<VEC>(h + (size_t)i * VEC, x);
            finish(x, i);
        }
    }
}

// if delta: hidden += float(delta) (in place, fp32); then
// out = bf16(weight * bf16(hidden * rsqrt(mean(hidden^2) + eps))).
// Grid: (rows); block: a multiple of 32 threads, up to 1024. Any H (vector path when H % 4 == 0
// and the buffers are aligned; element path otherwise).
extern "C" __global__ void add_rmsnorm(
    float* __restrict__ hidden,        // [rows, H] f32 residual stream, updated in place
    const bf16* __restrict__ delta,    // [rows, H] bf16 branch output to add, or NULL
    const bf16* __restrict__ weight,   // [H] bf16 norm weight
    bf16* __restrict__ out,            // [rows, H] bf16 normed activations, written
    unsigned H,                        // hidden size
    float eps)                         // variance epsilon
{ FG_KERNEL_BEGIN();
    FG_PDL_WAIT();  // PDL: wait for the predecessor grid before any global read
    __shared__ float scratch[32];
    if ((blockDim.x & 31u) != 0) return;  // block_sum's full-mask shuffles need whole warps
    const size_t base = (size_t)blockIdx.x * H;
    float* h = hidden + base;
    const bf16* d = delta ? delta + base : nullptr;
    bf16* o = out + base;
    const bool vec = H % 4 == 0 && aligned_to(h, 16) && (!d || aligned_to(d, 8)) &&
                     aligned_to(weight, 8) && aligned_to(o, 8);
    if (vec)
        add_rmsnorm_row<4>(h, d, weight, o, H, eps, scratch);
    else
        add_rmsnorm_row<1>(h, d, weight, o, H, eps, scratch);
}
