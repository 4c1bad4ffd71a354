// Small kernels that exercise the driver runtime itself (copies, scalars of each width,
// reductions, a deliberate fault). The runtime tests and `fixedgraph doctor` launch them.
#include <stdint.h>
#include "pdl.cuh"

// dst[i] = src[i] for i < n.  dst, src: [n] f32.  Grid-stride, any grid.
extern "C" __global__ void copy_f32(float* __restrict__ dst, const float* __restrict__ src,
                                    unsigned long long n) { FG_KERNEL_BEGIN();
    FG_PDL_WAIT();  // PDL: wait for the predecessor grid before any global read
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

// y[i] = a * x[i] + y[i] for i < n.  x, y: [n] f32.
extern "C" __global__ void axpy_f32(float* __restrict__ y, const float* __restrict__ x, float a,
                                    unsigned int n) { FG_KERNEL_BEGIN();
    FG_PDL_WAIT();  // PDL: wait for the predecessor grid before any global read
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        y[i] = fmaf(a, x[i], y[i]);
}

// out[b] = sum of x[b*n : (b+1)*n] in f64 accumulation (one block per row b; blockDim = 256).
// x: [rows, n] f32; out: [rows] f64.  Deterministic: fixed tree order, no atomics.
extern "C" __global__ void reduce_rows_f64(double* __restrict__ out, const float* __restrict__ x,
                                           unsigned int n) { FG_KERNEL_BEGIN();
    FG_PDL_WAIT();  // PDL: wait for the predecessor grid before any global read
    __shared__ double partial[256];
    const float* row = x + (unsigned long long)blockIdx.x * n;
    double acc = 0.0;
    for (unsigned int i = threadIdx.x; i < n; i += blockDim.x) acc += (double)row[i];
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}

// Mixed-width scalar parameters: checks that the packer honours PTX offsets and alignment.
// out: [6] f64 = (a, b, c, d, e, f) as doubles.
extern "C" __global__ void scalars_probe(double* out, unsigned char a, short b, float c,
                                         long long d, unsigned int e, double f) { FG_KERNEL_BEGIN();
    FG_PDL_WAIT();  // PDL: wait for the predecessor grid before any global read
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        out[0] = a; out[1] = b; out[2] = c; out[3] = (double)d; out[4] = e; out[5] = f;
    }
}

// Writes through a caller-chosen address: with a bad one it faults (the checked-mode test).
// out[0] = value.
extern "C" __global__ void store_u32(unsigned int* out, unsigned int value) { FG_KERNEL_BEGIN();
    FG_PDL_WAIT();  // PDL: wait for the predecessor grid before any global read
    if (blockIdx.x == 0 && threadIdx.x == 0) out[0] = value;
}

// log[meta[0]] = meta[1]: proves that per-launch staging copies deliver each launch's metadata
// even when many launches are queued before any completes.  meta: [2] u32; log: [n] u32.
extern "C" __global__ void record_meta(unsigned int* log, const unsigned int* meta, unsigned int n) { FG_KERNEL_BEGIN();
    FG_PDL_WAIT();  // PDL: wait for the predecessor grid before any global read
    if (blockIdx.x == 0 && threadIdx.x == 0 && meta[0] < n) log[meta[0]] = meta[1];
}

// Does nothing: the unit of launch-overhead and per-node graph measurements.
extern "C" __global__ void noop() { FG_KERNEL_BEGIN();
    FG_PDL_WAIT();  /* PDL: wait for the predecessor grid */
}

// Thread-block cluster probe (launched with a cluster, sm_90).  For flat block index
// b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z) and nblocks CTAs in the grid:
// out[b] = ctarank | nctarank << 8 (rank within the cluster, CTAs per cluster), and
// out[nblocks + b] = the rank that CTA (ctarank + 1) % nctarank of the same cluster stored in its
// shared memory, read through distributed shared memory.  out: [2 * nblocks] u32.
extern "C" __global__ void cluster_probe(unsigned int* out) { FG_KERNEL_BEGIN();
    FG_PDL_WAIT();  // PDL: wait for the predecessor grid before touching global memory
    __shared__ unsigned int rank_smem;
    unsigned int rank, nrank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(nrank));
    if (threadIdx.x == 0) rank_smem = rank;
    // Every CTA's rank_smem is written before any CTA reads a neighbour's.
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
    if (threadIdx.x == 0) {
        const unsigned int b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
        const unsigned int nblocks = gridDim.x * gridDim.y * gridDim.z;
        const unsigned int local = (unsigned int)__cvta_generic_to_shared(&rank_smem);
        unsigned int remote, value;
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"((rank + 1) % nrank));
        asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(value) : "r"(remote) : "memory");
        out[b] = rank | (nrank << 8);
        out[nblocks + b] = value;
    }
    // NOTE: a CTA's shared memory goes away when it exits: no CTA leaves while a neighbour may
    // still read it.
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
