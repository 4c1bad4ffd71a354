// Greedy sampling: the index of each row's largest logit, written to the token buffer and
// optionally to the host-mapped token ring the host streams from.
// Launcher: fixedgraph/ops/argmax.py. Twin: fixedgraph/backends/reference/twins/argmax.py.
#include <cuda_bf16.h>
#include <stdint.h>

#include "common_ops.cuh"
#include "pdl.cuh"

// Calls consider(value, index) for this thread's share of the row, in increasing index order:
// an unaligned head of < 4 scalars, 16-byte loads four at a time, then the scalar tail.
template <class F>
__device__ __forceinline__ void scan_row(const float* __restrict__ p, unsigned V, F&& consider) {
    const unsigned tid = threadIdx.x, bd = blockDim.x;
    const unsigned misaligned = (unsigned)(reinterpret_cast<uintptr_t>(p) >> 2) & 3u;
    const unsigned head = min(V, (4u - misaligned) & 3u);
    if (tid < head) consider(p[tid], (int)tid);
    const unsigned nvec = (V - head) / 4;
    const float4* pv = reinterpret_cast<const float4*>(p + head);
    auto consider4 = [&](float4 x, unsigned k) {
        const int i = (int)(head + 4 * k);
        consider(x.x, i); consider(x.y, i + 1); consider(x.z, i + 2); consider(x.w, i + 3);
    };
    unsigned k = tid;
    for (; k + 3 * bd < nvec; k += 4 * bd) {  // four loads in flight before any compare
        const float4 a = pv[k], b = pv[k + bd], c = pv[k + 2 * bd], d = pv[k + 3 * bd];
        consider4(a, k); consider4(b, k + bd); consider4(c, k + 2 * bd); consider4(d, k + 3 * bd);
    }
    for (; k < nvec; k += bd) consider4(pv[k], k);
    for (unsigned i = head + 4 * nvec + tid; i < V; i += bd) consider(p[i], (int)i);
}

// tokens[r] = argmax_v logits[r, v] (ties -> lowest index, NaN below everything); with a ring,
// also ring[(step[0] % ring_len) * rows + r] (step NULL reads as 0). One CTA per row, rows
// strided over the grid. Block: a multiple of 32 threads, up to 1024.
extern "C" __global__ void argmax_rows(
    int* __restrict__ tokens,             // [rows] i32, written
    int* __restrict__ ring,               // [ring_len, rows] i32 (host-mapped), or NULL
    const unsigned* __restrict__ step,    // [1] u32 decode step counter, or NULL
    unsigned ring_len,                    // ring depth in steps (ignored without a ring)
    const float* __restrict__ logits,     // [rows, V] f32
    unsigned rows,                        // token rows
    unsigned V)                           // vocabulary size
{ FG_KERNEL_BEGIN();
    FG_PDL_WAIT();  // PDL: wait for the predecessor grid before any global read
    __shared__ float warp_val[32];
    __shared__ int warp_idx[32];
    if ((blockDim.x & 31u) != 0) return;  // full-mask shuffles need whole warps
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    for (unsigned r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* p = logits + (size_t)r * V;
        // Hot path: indices arrive in increasing order, so a strict '>' keeps the lowest index
        // of a tie and never lets NaN in; only -inf and NaN are left unresolved (bi < 0).
        float bv = -__int_as_float(0x7f800000);
        int bi = -1;
        scan_row(p, V, [&](float v, int i) {
            if (v > bv) { bv = v; bi = i; }
        });
        if (bi < 0) {  // rare: this thread saw only -inf/NaN (or nothing); rescan exactly
            bv = __int_as_float(0x7fc00000);
            bi = kNone;
            scan_row(p, V, [&](float v, int i) {
                if (better(v, i, bv, bi)) { bv = v; bi = i; }
            });
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_down_sync(0xffffffffu, bv, o);
            const int oi = __shfl_down_sync(0xffffffffu, bi, o);
            if (better(ov, oi, bv, bi)) { bv = ov; bi = oi; }
        }
        if (lane == 0) { warp_val[warp] = bv; warp_idx[warp] = bi; }
        __syncthreads();
        if (warp == 0) {
            bv = lane < nwarps ? warp_val[lane] : __int_as_float(0x7fc00000);
            bi = lane < nwarps ? warp_idx[lane] : kNone;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                const float ov = __shfl_down_sync(0xffffffffu, bv, o);
                const int oi = __shfl_down_sync(0xffffffffu, bi, o);
                if (better(ov, oi, bv, bi)) { bv = ov; bi = oi; }
            }
            if (lane == 0) {
                tokens[r] = bi;
                if (ring && ring_len) {
                    const unsigned s = step ? step[0] : 0u;
                    ring[(size_t)(s % ring_len) * rows + r] = bi;
                }
            }
        }
        __syncthreads();  // warp_val/warp_idx are reused by the next row
    }
}
