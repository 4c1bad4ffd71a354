// The gated MLP activation between the gate_up GEMV and the down GEMV: out = silu(gate) * up.
// Launcher: fixedgraph/ops/act.py. Twin: fixedgraph/backends/reference/twins/act.py.
#include <cuda_bf16.h>
#include <stdint.h>

#include "common_ops.cuh"
#include "pdl.cuh"

// out[r, i] = bf16(bf16(silu(gate_up[r, i])) * gate_up[r, I + i]) for i < I.
// Rows stride over blockIdx.y and columns over blockIdx.x, so any 2-D grid covers everything
// with no integer division; 16-byte accesses when I % 8 == 0 and both buffers are aligned.
extern "C" __global__ void silu_mul(
    bf16* __restrict__ out,            // [rows, I] bf16, written
    const bf16* __restrict__ gate_up,  // [rows, 2*I] bf16: gate in [:, :I], up in [:, I:]
    unsigned rows,                     // token rows
    unsigned I)                        // intermediate size
{ FG_KERNEL_BEGIN();
    FG_PDL_WAIT();  // PDL: wait for the predecessor grid before any global read
    const unsigned col0 = blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned col_stride = gridDim.x * blockDim.x;
    if (I % 8 == 0 && aligned_to(out, 16) && aligned_to(gate_up, 16)) {
        const unsigned nvec = I / 8;
        for (unsigned r = blockIdx.y; r < rows; r += gridDim.y) {
            const bf16* g = gate_up + (size_t)r * 2 * I;
            const bf16* u = g + I;
            bf16* o = out + (size_t)r * I;
            for (unsigned c = col0; c < nvec; c += col_stride) {
                float gv[8], uv[8], y[8];
                load_bf16<8>(g + 8 * (size_t)c, gv);
                load_bf16<8>(u + 8 * (size_t)c, uv);
#pragma unroll
                for (int j = 0; j < 8; ++j) y[j] = silu_mul_one(gv[j], uv[j]);
                store_bf16<8>(o + 8 * (size_t)c, y);
            }
        }
    } else {
        for (unsigned r = blockIdx.y; r < rows; r += gridDim.y) {
            const bf16* g = gate_up + (size_t)r * 2 * I;
            bf16* o = out + (size_t)r * I;
            for (unsigned c = col0; c < I; c += col_stride)
                o[c] = __float2bfloat16_rn(silu_mul_one(__bfloat162float(g[c]), __bfloat162float(g[I + c])));
        }
    }
}
