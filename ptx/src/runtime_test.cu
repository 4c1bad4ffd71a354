// Small kernels that exercise the driver runtime itself (copies, scalars of each width,
// reductions, a deliberate fault). The runtime tests and `fixedgraph doctor` launch them.
#include <stdint.h>
#include "pdl.cuh"
#include "stream.cuh"

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

// The read floor of one launch (tools/bench_kernels.py: the `read` row beside each attention
// context and GEMV shape, and `--only chain`): how long a grid that only streams n16 16-byte words
// from DRAM takes, chained by PDL as the kernels it is compared with, launch ramp and tail
// included. read_probe waits, then reads (a late signal, as the attention); read_probe_early
// signals its successor at its start and reads before its wait (src is constant), only its store
// after it, as the lean GEMV entries preload their weights. Word w is read by CTA
// (w / blockDim) % gridDim, READ_PROBE_INFLIGHT loads a thread in flight; sum[b] = the xor of CTA
// b's u32 words, so the loads cannot be optimised away and are checked. blockDim: a multiple of 32.
#define READ_PROBE_INFLIGHT 8

// This thread's share of a read probe's stream (word w by CTA (w / blockDim) % gridDim,
// READ_PROBE_INFLIGHT loads in flight), xor-reduced over its warp: the warp's checksum.
__device__ __forceinline__ unsigned int read_probe_stream(const uint4* __restrict__ src, unsigned long long n16) {
    const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    unsigned int x = 0;
    for (unsigned long long i0 = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i0 < n16;
         i0 += step * READ_PROBE_INFLIGHT) {
        uint4 v[READ_PROBE_INFLIGHT];
#pragma unroll
        for (int u = 0; u < READ_PROBE_INFLIGHT; ++u) {
            const unsigned long long i = i0 + u * step;
            v[u] = i < n16 ? __ldcg(src + i) : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int u = 0; u < READ_PROBE_INFLIGHT; ++u) x ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (int o = 16; o > 0; o >>= 1) x ^= __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

template <bool EARLY>
__device__ __forceinline__ void read_probe_body(const uint4* __restrict__ src, unsigned int* __restrict__ sum,
                                                unsigned long long n16) {
    if (EARLY) FG_PDL_TRIGGER();
    else FG_PDL_WAIT();
    const unsigned int x = read_probe_stream(src, n16);
    __shared__ unsigned int part[32];
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = x;
    __syncthreads();
    if (EARLY) FG_PDL_WAIT_ONLY();  // the predecessor's sum store precedes this one
    if (threadIdx.x == 0) {
        unsigned int s = 0;
        for (unsigned int w = 0; w < blockDim.x >> 5; ++w) s ^= part[w];
        sum[blockIdx.x] = s;
    }
}

extern "C" __global__ void read_probe(const uint4* __restrict__ src, unsigned int* __restrict__ sum,
                                      unsigned long long n16) { FG_KERNEL_BEGIN();
    read_probe_body<false>(src, sum, n16);
}

extern "C" __global__ void read_probe_early(const uint4* __restrict__ src, unsigned int* __restrict__ sum,
                                            unsigned long long n16) { FG_KERNEL_BEGIN();
    read_probe_body<true>(src, sum, n16);
}

// The handover after the wait (tools/bench_kernels.py --only chain, the `hand` and `handnorm`
// chains): read_probe_early, plus the small vector a decode kernel takes from its predecessor
// after its wait and the one it leaves for its successor, so that a chain of them splits the
// real step's post-wait path (session 53: ~1.7 µs a launch over the early chain) into the x round
// trip, a CTA-wide reduction over x (the GEMV's norm) and what is left (the kernels' own work).
// Before the wait: signal, stream src (constant) as read_probe_early, reduce it in the CTA. After:
//   mode 0 (hand):     thread t of CTA b, for j = b + gridDim * t < ny16:
//                      xout[j] = xin[j % nx16] (one 16-byte load and store, no barrier);
//   mode 1 (handnorm): every CTA reads all nx16 words of xin (as a GEMV reads its whole x), r =
//                      the xor of their u32 words (warp shuffles, shared memory, a barrier), and
//                      xout[j] = xin[j % nx16] ^ r (each u32 word) for the same j.
// sum[b] = the xor of CTA b's src words, as read_probe. xin and xout must not overlap; ny16 <=
// gridDim * blockDim; blockDim a multiple of 32.
extern "C" __global__ void read_probe_hand(const uint4* __restrict__ src, unsigned int* __restrict__ sum,
                                           unsigned long long n16, const uint4* xin, uint4* xout,
                                           unsigned int nx16, unsigned int ny16, unsigned int mode) { FG_KERNEL_BEGIN();
    FG_PDL_TRIGGER();
    const unsigned int x = read_probe_stream(src, n16);
    __shared__ unsigned int part[32];
    __shared__ unsigned int xpart[32];
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = x;
    __syncthreads();
    FG_PDL_WAIT_ONLY();  // the predecessor's xout (and sum) stores precede what follows
    const unsigned int j = blockIdx.x + gridDim.x * threadIdx.x;
    unsigned int r = 0;
    if (mode == 1) {
        for (unsigned int i = threadIdx.x; i < nx16; i += blockDim.x) {
            const uint4 w = __ldcg(xin + i);
            r ^= w.x ^ w.y ^ w.z ^ w.w;
        }
        for (int o = 16; o > 0; o >>= 1) r ^= __shfl_xor_sync(0xffffffffu, r, o);
        if ((threadIdx.x & 31) == 0) xpart[threadIdx.x >> 5] = r;
        __syncthreads();
        r = 0;
        for (unsigned int w = 0; w < blockDim.x >> 5; ++w) r ^= xpart[w];
    }
    if (j < ny16) {
        uint4 w = __ldcg(xin + j % nx16);
        w.x ^= r; w.y ^= r; w.z ^= r; w.w ^= r;
        __stcg(xout + j, w);
    }
    if (threadIdx.x == 0) {
        unsigned int s = 0;
        for (unsigned int w = 0; w < blockDim.x >> 5; ++w) s ^= part[w];
        sum[blockIdx.x] = s;
    }
}

// Shared-memory staging probe (tools/bench_kernels.py --only staging): how fast one CTA per SM
// can bring `bytes` of global memory into its shared memory, by method. CTA b reads
// src[b * bytes .. (b + 1) * bytes) (16-byte aligned, bytes a multiple of 16) into its dynamic
// shared memory (at least `bytes`) and writes out[2b] = %globaltimer at entry, out[2b + 1] = when
// every byte has landed and the whole CTA has seen it, and out[2 * gridDim.x + b] = a checksum
// word (the xor of the staged u32 words, so the copy cannot be optimised away and is checked).
// mode 0: cp.async.bulk (TMA, non-tensor) in chunks of `chunk` bytes, issued by threads
//         0 .. issuers-1 round-robin, one mbarrier per chunk (at most 64 chunks);
// mode 1: cp.async 16-byte copies (LDGSTS) from every thread, then one wait;
// mode 2: 16-byte loads into registers by every thread, stored to shared memory (8 in flight);
// mode 3: cp.async 16-byte copies of 256-byte rows `chunk` bytes apart in global memory (CTA b's
//         rows from src + b * (bytes / 256) * chunk), 16 threads a row as the decode attention's
//         K/V tiles read a head's keys from the pools, into shared memory rows `issuers` bytes
//         apart (0: 256, contiguous; 272: the attention tiles' padded rows);
// mode 4: mode 3's rows and destinations, one 256-byte cp.async.bulk (TMA, non-tensor) a row,
//         issued by every thread round-robin, all on one mbarrier: a copy engine without the
//         LDGSTS rule that costs the padded rows 1.5x their ideal L2 sectors (BENCHMARKS,
//         sessions 37-38).
#define STAGE_PROBE_MAX_CHUNKS 64

extern __shared__ __align__(128) unsigned char stage_probe_smem[];

extern "C" __global__ void stage_probe(const unsigned char* __restrict__ src, unsigned long long* __restrict__ ns,
                                       unsigned int* __restrict__ sum,
                                       unsigned int bytes, unsigned int chunk, unsigned int issuers,
                                       unsigned int mode) { FG_KERNEL_BEGIN();
    __shared__ __align__(8) unsigned long long bars[STAGE_PROBE_MAX_CHUNKS];
    __shared__ unsigned int xor_part[32];
    FG_PDL_WAIT();
    unsigned long long t0;  // after the wait: the copy's own time
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    const unsigned char* base = src + (size_t)blockIdx.x * bytes;
    const unsigned int dst = (unsigned int)__cvta_generic_to_shared(stage_probe_smem);
    const unsigned int nchunks = chunk ? (bytes + chunk - 1) / chunk : 0;
    if (mode == 0 && (nchunks == 0 || nchunks > STAGE_PROBE_MAX_CHUNKS || chunk % 16 != 0)) return;
    const unsigned int dstride = issuers ? issuers : 256;  // mode 3: shared row stride
    if ((mode == 3 || mode == 4) &&
        (bytes % 256 != 0 || chunk < 256 || chunk % 16 != 0 || dstride < 256 || dstride % 16 != 0))
        return;
    if (mode == 0) {
        if (threadIdx.x == 0) {
            for (unsigned int c = 0; c < nchunks; ++c) mbar_init1((unsigned int)__cvta_generic_to_shared(&bars[c]));
            mbar_init_fence();
        }
        __syncthreads();
        if (threadIdx.x < issuers) {
            for (unsigned int c = threadIdx.x; c < nchunks; c += issuers) {
                const unsigned int bar = (unsigned int)__cvta_generic_to_shared(&bars[c]);
                const unsigned int n = min(chunk, bytes - c * chunk);
                mbar_expect(bar, n);
                asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                             ::"r"(dst + c * chunk), "l"(base + (size_t)c * chunk), "r"(n), "r"(bar) : "memory");
            }
        }
        for (unsigned int c = 0; c < nchunks; ++c)  // every thread waits for every chunk
            mbar_wait0((unsigned int)__cvta_generic_to_shared(&bars[c]));
    } else if (mode == 4) {
        const unsigned char* rows = src + (size_t)blockIdx.x * (bytes / 256) * chunk;
        const unsigned int bar = (unsigned int)__cvta_generic_to_shared(&bars[0]);
        if (threadIdx.x == 0) {  // the whole tile's bytes expected before any copy is issued
            mbar_init1(bar);
            mbar_init_fence();
            mbar_expect(bar, bytes);
        }
        __syncthreads();
        for (unsigned int r = threadIdx.x; r < bytes / 256; r += blockDim.x)
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 256, [%2];"
                         ::"r"(dst + r * dstride), "l"(rows + (size_t)r * chunk), "r"(bar) : "memory");
        mbar_wait0(bar);
    } else if (mode == 3) {
        const unsigned char* rows = src + (size_t)blockIdx.x * (bytes / 256) * chunk;
        for (unsigned int i = threadIdx.x; i < bytes / 16; i += blockDim.x)
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst + (i / 16) * dstride + (i % 16) * 16),
                         "l"(rows + (size_t)(i / 16) * chunk + (i % 16) * 16) : "memory");
        asm volatile("cp.async.wait_all;" ::: "memory");
    } else if (mode == 1) {
        for (unsigned int i = threadIdx.x * 16; i < bytes; i += blockDim.x * 16)
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst + i), "l"(base + i) : "memory");
        asm volatile("cp.async.wait_all;" ::: "memory");
    } else {
        const uint4* s4 = reinterpret_cast<const uint4*>(base);
        uint4* d4 = reinterpret_cast<uint4*>(stage_probe_smem);
        const unsigned int n4 = bytes / 16;
        for (unsigned int i = threadIdx.x; i < n4; i += 8 * blockDim.x) {
            uint4 v[8];
#pragma unroll
            for (int j = 0; j < 8; ++j)
                if (i + j * blockDim.x < n4) v[j] = __ldcs(s4 + i + j * blockDim.x);
#pragma unroll
            for (int j = 0; j < 8; ++j)
                if (i + j * blockDim.x < n4) d4[i + j * blockDim.x] = v[j];
        }
    }
    __syncthreads();
    unsigned long long t1;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
    unsigned int x = 0;
    const unsigned int* w = reinterpret_cast<const unsigned int*>(stage_probe_smem);
    for (unsigned int i = threadIdx.x; i < bytes / 4; i += blockDim.x)  // modes 3-4: row i / 64's words
        x ^= w[mode == 3 || mode == 4 ? (i / 64) * (dstride / 4) + i % 64 : i];
    for (int o = 16; o > 0; o >>= 1) x ^= __shfl_xor_sync(0xffffffffu, x, o);
    if ((threadIdx.x & 31) == 0) xor_part[threadIdx.x >> 5] = x;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (unsigned int k = 1; k < (blockDim.x + 31) / 32; ++k) x ^= xor_part[k];
        ns[2 * blockIdx.x] = t0;
        ns[2 * blockIdx.x + 1] = t1;
        sum[blockIdx.x] = x;
    }
}

// Load latency under a CTA's own outstanding copies (tools/bench_kernels.py --only hol): the
// question behind the fused GEMVs' slow prologues (their CTAs issue their W preload just before
// the PDL wait, then read the residual row, an L2 hit, after it). Each CTA first issues
// `inflight` bytes of copies of src[b * inflight ..] (cold: DRAM) into its shared memory without
// waiting for them (mode 0: 16-byte cp.async from every thread, as the GEMV preload; mode 1:
// cp.async.bulk by thread 0 in 16 KiB chunks on one mbarrier), then thread 0 follows `hops`
// dependent L2 loads through chase (chase[i]: the next index, a small table that stays in L2),
// then every thread waits for its copies. ns[3b] = thread 0's ns to issue its copies (a full
// request queue stalls it), ns[3b + 1] = the chain's ns, ns[3b + 2] = ns from the chain's start
// until the copies landed, last[b] = the chain's last index (so it is kept).
extern "C" __global__ void l2_hol_probe(const unsigned char* __restrict__ src, const unsigned int* __restrict__ chase,
                                        unsigned long long* __restrict__ ns, unsigned int* __restrict__ last,
                                        unsigned int inflight,
                                        unsigned int hops, unsigned int mode) { FG_KERNEL_BEGIN();
    __shared__ __align__(8) unsigned long long bar;
    FG_PDL_WAIT();
    const unsigned char* base = src + (size_t)blockIdx.x * inflight;
    const unsigned int dst = (unsigned int)__cvta_generic_to_shared(stage_probe_smem);
    const unsigned int b = (unsigned int)__cvta_generic_to_shared(&bar);
    const bool bulk = mode == 1 && inflight > 0 && inflight % 16 == 0;
    if (bulk && threadIdx.x == 0) {
        mbar_init1(b);
        mbar_init_fence();
    }
    __syncthreads();
    unsigned long long ti;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ti));
    if (mode == 0) {
        for (unsigned int i = threadIdx.x * 16; i + 16 <= inflight; i += blockDim.x * 16)
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst + i), "l"(base + i) : "memory");
        asm volatile("cp.async.commit_group;" ::: "memory");
    } else if (bulk && threadIdx.x == 0) {
        mbar_expect(b, inflight);
        for (unsigned int c = 0; c < inflight; c += 16384) {
            const unsigned int n = min(16384u, inflight - c);
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                         ::"r"(dst + c), "l"(base + c), "r"(n), "r"(b) : "memory");
        }
    }
    unsigned long long t0 = 0, t1 = 0, t2;
    unsigned int j = blockIdx.x * 7u;  // the table holds at least 7 * gridDim.x entries
    if (threadIdx.x == 0) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
        for (unsigned int h = 0; h < hops; ++h) j = __ldcg(chase + j);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
    }
    if (mode == 0) {
        asm volatile("cp.async.wait_all;" ::: "memory");
    } else if (bulk) {
        mbar_wait0(b);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t2));
        ns[3 * blockIdx.x] = t0 - ti;
        ns[3 * blockIdx.x + 1] = t1 - t0;
        ns[3 * blockIdx.x + 2] = t2 - t0;
        last[blockIdx.x] = j;
    }
}

// Broadcast-read latency (tools/bench_kernels.py --only bcast): the question behind the decode
// chain's first read after a PDL wait (1.2-2.1 us in every kernel, session 13), where every CTA
// of a launch (64-396) reads the same small row (the residual stream, x) that its predecessor
// just wrote: do the CTAs queue at the few L2 slices that hold the row? Each CTA waits on its
// predecessor, then its threads load replica b % reps of vec (bytes each, `stride` bytes apart)
// in 16-byte chunks through L2 and the CTA xor-reduces them. ns[2b] = %globaltimer after the
// wait, ns[2b + 1] = ns from there until the reduction is complete; sum[b] = the xor (kept).
// Needs bytes % 16 == 0, stride % 16 == 0, a 16-byte aligned vec and blockDim % 32 == 0.
extern "C" __global__ void bcast_probe(const unsigned char* __restrict__ vec, unsigned long long* __restrict__ ns,
                                       unsigned int* __restrict__ sum, unsigned int bytes, unsigned int reps,
                                       unsigned int stride) { FG_KERNEL_BEGIN();
    __shared__ unsigned int part[32];
    FG_PDL_WAIT();
    unsigned long long t0, t1;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    const uint4* v = reinterpret_cast<const uint4*>(vec + (size_t)(blockIdx.x % max(reps, 1u)) * stride);
    unsigned int x = 0;
    for (unsigned int i = threadIdx.x; i < bytes / 16; i += blockDim.x) {
        const uint4 c = __ldcg(v + i);
        x ^= c.x ^ c.y ^ c.z ^ c.w;
    }
    for (int o = 16; o > 0; o >>= 1) x ^= __shfl_xor_sync(0xffffffffu, x, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = x;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (unsigned int k = 1; k < blockDim.x / 32; ++k) x ^= part[k];
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
        ns[2 * blockIdx.x] = t0;
        ns[2 * blockIdx.x + 1] = t1 - t0;
        sum[blockIdx.x] = x;
    }
}

// Instruction-cache probe (tools/bench_kernels.py --only icache): the question behind the decode
// kernels' code size (20-60 KB of SASS each, ~120 KB a layer cycling through every SM; shrinking
// the code measurably sped them up): how long does a CTA lose right after its PDL wait when the
// code it runs there is cold in the SM's instruction caches, per KB of SASS? The body is one
// straight line of N fma.rn.f32 (one 16-byte FFMA each: ~2 / 8 / 32 KB for N = 128 / 512 / 2048)
// round-robin over 8 independent accumulators per thread, acc[i] = a * (8 * threadIdx.x + i)
// at the start (so its issue is not latency-bound), then their sum (in order; kept:
// out[blockIdx.x * blockDim.x + threadIdx.x] = the sum). ns[2b] = %globaltimer after the wait,
// ns[2b + 1] = ns from there until the CTA's last warp finished its FMAs. icache_flush runs the
// same body with N = 1024 * blocks (blocks <= 10: the last `blocks` of 10 blocks of ~28 KB of
// SASS; 267 KB at 10, more than an SM's instruction caches hold) and no clock:
// launched between two probes, it leaves the second's code cold (in L2, not in the SM) once it
// ran more code than the caches hold, so its size sweeps their reach. ptxas
// 13.0 sm_90 .text: 3.1 / 9.1 / 33.1 KB for the probes, 266.8 KB for the flush. Any grid.
__device__ __forceinline__ void icache_init(float (&acc)[8], float a) {
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i] = __fmul_rn(a, __uint2float_rn(8u * threadIdx.x + i));
}

template <int N>
__device__ __forceinline__ void icache_fmas(float (&acc)[8], float a, float b) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("fma.rn.f32 %0, %0, %1, %2;" : "+f"(acc[i % 8]) : "f"(a), "f"(b));
}

__device__ __forceinline__ float icache_sum(const float (&acc)[8]) {
    float s = acc[0];
#pragma unroll
    for (int i = 1; i < 8; ++i) s = __fadd_rn(s, acc[i]);
    return s;
}

template <int N>
__device__ __forceinline__ float icache_body(float a, float b) {
    float acc[8];
    icache_init(acc, a);
    icache_fmas<N>(acc, a, b);
    return icache_sum(acc);
}

template <int N>
__device__ __forceinline__ void icache_probe(unsigned long long* __restrict__ ns, float* __restrict__ out, float a,
                                             float b) {
    FG_PDL_WAIT();
    unsigned long long t0, t1;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    const float s = icache_body<N>(a, b);
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
        ns[2 * blockIdx.x] = t0;
        ns[2 * blockIdx.x + 1] = t1 - t0;
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

extern "C" __global__ void icache_probe_2k(unsigned long long* __restrict__ ns, float* __restrict__ out, float a,
                                           float b) { FG_KERNEL_BEGIN();
    icache_probe<128>(ns, out, a, b);
}

extern "C" __global__ void icache_probe_8k(unsigned long long* __restrict__ ns, float* __restrict__ out, float a,
                                           float b) { FG_KERNEL_BEGIN();
    icache_probe<512>(ns, out, a, b);
}

extern "C" __global__ void icache_probe_32k(unsigned long long* __restrict__ ns, float* __restrict__ out, float a,
                                            float b) { FG_KERNEL_BEGIN();
    icache_probe<2048>(ns, out, a, b);
}

extern "C" __global__ void icache_flush(float* __restrict__ out, float a, float b,
                                        unsigned int blocks) { FG_KERNEL_BEGIN();  // 1024-FMA blocks, <= 10
    FG_PDL_WAIT();
    float acc[8];
    icache_init(acc, a);
    // 10 blocks of 1024 FMAs one after the other (ptxas 13.0 sm_90: ~28 KB of SASS each, ~16 KB the
    // last), each behind a uniform branch; the last `blocks` of them run
#pragma unroll
    for (unsigned int k = 10; k >= 1; --k)
        if (blocks >= k) icache_fmas<1024>(acc, a, b);
    out[blockIdx.x * blockDim.x + threadIdx.x] = icache_sum(acc);
}

// Handoff probe (tools/bench_kernels.py --only handoff): what one kernel-to-kernel handoff of the
// decode chain costs as a PDL wait (griddepcontrol.wait: the predecessor grid has completed and
// its writes are flushed; ~1-1.9 µs from its last CTA's exit to the first wait released, session
// 14's timelines) against a flag: the predecessor's CTAs bump an arrival counter after their
// stores, the last one publishes the step's epoch in a flag, and the successor's CTAs, launched
// early (launch_dependents at their start), poll that flag instead of waiting for the grid.
//   out[i] = ld.cg(in[(i + 1) % n]) + 1 for i = blockIdx.x * blockDim.x + threadIdx.x < n: every
//   CTA reads what other CTAs of the predecessor wrote. Modes, by argument:
//   bump != 0:      after its PDL wait, CTA 0 only increments *step (the chain's epoch) and exits.
//   flag_in NULL:   PDL handoff (FG_PDL_WAIT, then launch_dependents, as every decode kernel).
//   flag_in set:    flag handoff: launch_dependents first, epoch = ld.cg(*step) (a kernel that
//                   completed before this grid launched wrote it: see below), thread 0 polls
//                   ld.acquire.gpu(*flag_in) until it equals the epoch, then a barrier.
//   flag_out set:   after the stores every thread fences, a barrier, then thread 0 bumps
//                   *counter (0 at rest); the last CTA to arrive resets it to 0 and stores the
//                   epoch to *flag_out with release semantics.
//   ns[3 * b + 0, 1, 2] = %globaltimer at CTA b's entry, when its handoff passed, and after its
//   stores (and arrival).
// NOTE (epoch): *step is bumped by a grid followed by a PDL-waiting one (flag_in NULL) whose CTAs
// signal launch_dependents only after their wait, so every flag grid launches after the bumping
// grid completed and reads this step's epoch before its poll. A flag grid's own successors launch
// as soon as all its CTAs started; they cannot starve it of SM slots (it is wholly resident).
// Any grid and block (threads cover n).
extern "C" __global__ void handoff_probe(const float* in, float* out, unsigned n, unsigned* counter,
                                         const unsigned* flag_in, unsigned* flag_out, unsigned* step,
                                         unsigned bump, unsigned long long* ns) { FG_KERNEL_BEGIN();
    unsigned long long t0, t1, t2;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    if (bump) {
        FG_PDL_WAIT();
        if (blockIdx.x == 0 && threadIdx.x == 0) *step += 1u;
        return;
    }
    unsigned epoch = 0;
    if (flag_in == nullptr) {
        FG_PDL_WAIT();
        epoch = __ldcg(step);
    } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
        epoch = __ldcg(step);
        if (threadIdx.x == 0) {
            unsigned f;
            for (unsigned spins = 0;; ++spins) {
                asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(f) : "l"(flag_in) : "memory");
                if (f == epoch) break;
                if (spins == (1u << 24)) __trap();  // seconds: a flag nobody publishes (fault, no hang)
                __nanosleep(32);
            }
        }
        __syncthreads();
    }
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __ldcg(in + (i + 1u) % n) + 1.0f;
    if (flag_out != nullptr) {
        __threadfence();  // this thread's store, before the CTA's arrival
        __syncthreads();
        if (threadIdx.x == 0) {
            const unsigned old = atomicAdd(counter, 1u);
            if (old == gridDim.x - 1u) {  // last to arrive: every CTA's stores are ordered before
                *counter = 0u;
                __threadfence();
                asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(flag_out), "r"(epoch) : "memory");
            }
        }
    }
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t2));
    if (threadIdx.x == 0) {
        ns[3 * blockIdx.x] = t0;
        ns[3 * blockIdx.x + 1] = t1;
        ns[3 * blockIdx.x + 2] = t2;
    }
}

// Persistent streaming-GEMV probe (tools/bench_kernels.py --only persist): how fast one launch
// can run a decode step's chain of GEMVs when each CTA (one per SM) keeps its weights streaming
// through a ring of shared-memory stages filled ahead by a loader warp, and the ops hand over
// through global counters instead of kernel boundaries (HazyResearch's "Look Ma, No Bubbles"
// megakernel design, 2025; session 17's chain copied only the next op's weights, and only once a
// CTA reached it). The question before a persistent decode kernel: what a layer's four GEMVs
// cost this way against the four PDL launches the decode graph runs today.
//   ops: [nops][5] u32 = (N, K, w16, in, out): op j computes, for n < N,
//     act[out + n] = bf16(sum over k < K of W[n, k] * act[in + k]) with W = (bf16*)w + 16 * w16
//     bytes, row-major [N, K] (K % 8 == 0, in % 8 == 0). Op j reads act only after every CTA has
//     finished op j - 1 (so an op may read what the op before wrote); op 0 reads what the host
//     wrote. CTA b owns rows [b N / G, (b + 1) N / G) of every op.
//   Arithmetic (the twin repeats it bit for bit): lane l of a row's warp keeps four f32 chains;
//   its j-th 16-byte unit i = l + 32 j goes to chain j % 4, which adds W[n, 8i + e] * x[8i + e]
//   by fma for e = 0..7 in that order; the lane's sum is (c0 + c1) + (c2 + c3), the lanes are
//   summed by a shfl_xor tree (16, 8, 4, 2, 1), and lane 0 stores the bf16 (round to nearest).
//   Warps (at most 17: launch bounds of 544 threads): blockDim / 32 - 1 compute warps (>= 1) and
//   the last one, whose lane 0 streams the CTA's rows of every op, in op order, in chunks of whole
//   rows of at most `slot` bytes, into (dynamic shared memory - 2 kmax bytes) / slot stages (at
//   most PERSIST_MAX_STAGES) by cp.async.bulk; a stage is refilled once every compute warp has
//   released it. The first 2 kmax bytes of dynamic shared memory hold the op's x. The loader
//   starts before the PDL wait (weights are constants); the compute warps wait, then read epoch =
//   *step.
//   flag & 3 picks the handover; flag & 4 has the compute warps take an op's chunks two at a
//   time, each warp a row of both in flight (the same sums; a 16-row chunk gives 16 warps a row
//   each otherwise); flag & 16: the loader copies nothing (it only completes each stage's
//   barrier), so the rows use whatever the stages held: outputs are garbage; a control for what
//   the stream costs; flag & 32: quiet handovers, the loader issues no copy from when thread 0
//   releases an op's last stages until its CTA has read the next op's x (a shared flag); flag &
//   64: the weight copies under an evict-first L2 policy (the decode GEMVs' default). (Session 40
//   measured and removed rows on tensor cores from these unpadded rows, and a loader sleeping
//   between its polls: BENCHMARKS.)
//   Handover: after an op's stores, a barrier of the compute warps, then thread 0 fences and adds
//   1 to the arrival counter cnt[2j]. flag 0: op j + 1's thread 0 polls that counter (acquire)
//   until it reaches epoch * G (132 pollers on the line the arrivals serialise on); flag 1: the
//   add is acq_rel, the CTA that completes the count stores epoch to cnt[2j + 1] (release), and
//   op j + 1's thread 0 polls that word until it holds epoch (handoff_probe's flag, ~0.2 us);
//   flag 2: flag 1 without thread 0's fence before its add (the barrier before it and the add's
//   release order the compute warps' stores: the PTX model's release is cumulative).
//   So cnt ([nops][2] u32) must hold ((epoch - 1) * G, epoch - 1) each at launch: zeros and
//   *step = 1 for one launch, or a bump of *step before each (handoff_probe's bump mode) over the
//   words left by the last.
//   flag 3 (LL, NCCL's low-latency protocol): no counter, no fence; each output element is also
//   stored as one 8-byte word ll[out + n] = epoch << 32 | its bf16 bits (one single-copy-atomic
//   store carries the value and its flag), and op j > 0 reads its x from those words, each
//   thread re-reading its words (64 ns apart) until they hold this epoch, so the handover is the
//   x read itself.
//   ll (u64, as many words as act; NULL unless flag 3) must hold no word of this epoch at launch.
//   marks (or NULL): marks[(8j + m) G + b] = %globaltimer when CTA b's compute warps passed op
//   j's handover (m 0; op 0: the PDL wait), when thread 0 saw the op's first chunk landed (m 1;
//   never for an op with no rows here), when the CTA arrived after op j (m 2: its add issued),
//   when its loader issued the op's first chunk (m 3), and when its compute warps had all
//   finished op j (m 4: the barrier before the arrival's fence), and how long (ns, a duration) its
//   thread 0 waited in all for the op's chunks after the first to land (m 5), and how long its
//   first row took thread 0 from the first chunk seen to its row's store, in ns (m 6) and in SM
//   clock cycles (m 7; their ratio is the SM's clock); ns[2b],
//   ns[2b + 1] = its entry and exit.
//   Needs every CTA resident at once (the counters are polled; a poll that never completes traps
//   after seconds rather than hang), slot % 16 == 0 and 2 K <= slot for every op, kmax >= every K;
//   otherwise (stages < 1 or > PERSIST_MAX_STAGES) every CTA returns at once.
#define PERSIST_MAX_STAGES 32
// act[i] = bf16(v) (round to nearest even; v finite), and under the LL handover also its 8-byte word.
__device__ __forceinline__ void persist_store(unsigned short* act, unsigned long long* ll, unsigned int hand,
                                              unsigned int epoch, unsigned int i, float v) {
    const unsigned int u = __float_as_uint(v);
    const unsigned short h = (unsigned short)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
    act[i] = h;
    if (hand == 3)
        asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(ll + i), "l"((unsigned long long)epoch << 32 | h)
                     : "memory");
}

extern "C" __global__ void __launch_bounds__(544) persist_probe(const unsigned char* __restrict__ w, unsigned short* act,
                                         const unsigned int* __restrict__ ops, unsigned int nops, unsigned int* cnt,
                                         const unsigned int* step, unsigned long long* marks,
                                         unsigned long long* __restrict__ ns, unsigned int slot,
                                         unsigned int kmax, unsigned int flag,
                                         unsigned long long* ll) { FG_KERNEL_BEGIN();
    __shared__ __align__(8) unsigned long long full[PERSIST_MAX_STAGES], empty[PERSIST_MAX_STAGES];
    __shared__ volatile unsigned int quiet;  // flag & 32: 1 from an op's last release until the next op's x is read
    extern __shared__ __align__(16) unsigned char persist_smem[];
    const unsigned long long t0 = global_ns();
    unsigned int dyn;
    asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
    const unsigned int xbytes = (2 * kmax + 15) & ~15u;
    const unsigned int stages = slot && dyn > xbytes ? (dyn - xbytes) / slot : 0;
    const unsigned int cw = blockDim.x / 32 - 1;  // compute warps
    if (stages < 1 || stages > PERSIST_MAX_STAGES || slot % 16 != 0 || cw < 1 || blockDim.x % 32 != 0) return;
    const unsigned int G = gridDim.x, b = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const unsigned int ring = (unsigned int)__cvta_generic_to_shared(persist_smem) + xbytes;
    if (threadIdx.x == 0) {
        quiet = 0;
        for (unsigned int s = 0; s < stages; ++s) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"((unsigned int)__cvta_generic_to_shared(&full[s])));
            asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"((unsigned int)__cvta_generic_to_shared(&empty[s])),
                         "r"(cw));
        }
        mbar_init_fence();
    }
    __syncthreads();
    if (warp == cw) {  // the loader: every op's rows of this CTA, in order, as far ahead as the ring allows
        if (lane == 0) {
            unsigned int seq = 0;
            for (unsigned int j = 0; j < nops; ++j) {
                const unsigned int N = ops[5 * j], K = ops[5 * j + 1];
                unsigned int r0, r1;
                persist_rows(b, G, N, r0, r1);
                const unsigned int per = slot / (2 * K);
                const unsigned char* src = w + 16ull * ops[5 * j + 2] + 2ull * K * r0;
                for (unsigned int r = r0; r < r1; r += per, ++seq) {
                    const unsigned int s = seq % stages, use = seq / stages;
                    if (use > 0) mbar_wait_parity((unsigned int)__cvta_generic_to_shared(&empty[s]), (use - 1) & 1);
                    const unsigned int bytes = 2 * K * min(per, r1 - r);
                    const unsigned int bar = (unsigned int)__cvta_generic_to_shared(&full[s]);
                    if (flag & 32)  // quiet handovers: no new copy until this CTA has read the next op's x
                        while (quiet) __nanosleep(32);
                    if (flag & 16) {  // no stream: the stage keeps what it held (a compute-only control)
                        asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
                    } else if (flag & 64) {  // the weights under an evict-first L2 policy (gemm.cuh's immediate)
                        mbar_expect(bar, bytes);
                        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
                                     " [%0], [%1], %2, [%3], %4;"
                                     ::"r"(ring + s * slot), "l"(src), "r"(bytes), "r"(bar), "l"(0x12F0000000000000ull)
                                     : "memory");
                    } else {
                        mbar_expect(bar, bytes);
                        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                                     ::"r"(ring + s * slot), "l"(src), "r"(bytes), "r"(bar) : "memory");
                    }
                    src += bytes;
                    if (marks && r == r0) marks[(size_t)(8 * j + 3) * G + b] = global_ns();
                }
            }
        }
        return;
    }
    FG_PDL_WAIT();
    const unsigned int epoch = __ldcg(step), hand = flag & 3;
    const unsigned int nthreads = 32 * cw;
    uint4* xs = reinterpret_cast<uint4*>(persist_smem);
    unsigned int seq = 0;
    for (unsigned int j = 0; j < nops; ++j) {
        const unsigned int N = ops[5 * j], K = ops[5 * j + 1], in = ops[5 * j + 3], out = ops[5 * j + 4];
        if (j > 0 && hand != 3 && threadIdx.x == 0) {
            const unsigned int target = hand ? epoch : epoch * G;
            const unsigned int* word = cnt + 2 * (j - 1) + (hand ? 1 : 0);  // flag 1, 2: the published word
            unsigned int c;
            for (unsigned int spins = 0;; ++spins) {
                asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(c) : "l"(word) : "memory");
                if ((int)(c - target) >= 0) break;
                if (spins == (1u << 22)) __trap();  // seconds: a CTA that never arrives (not resident)
            }
        }
        if ((flag & 32) && j > 0 && threadIdx.x == 0) quiet = 1;  // also when op j - 1 had no rows here
        asm volatile("bar.sync 1, %0;" ::"r"(nthreads) : "memory");
        if (marks && threadIdx.x == 0) marks[(size_t)8 * j * G + b] = global_ns();
        if (hand == 3 && j > 0) {  // LL: pairs of words, four a thread in flight, re-read until all carry the epoch
            unsigned int* xw = reinterpret_cast<unsigned int*>(persist_smem);
            for (unsigned int p0 = threadIdx.x; p0 < K / 2; p0 += 4 * nthreads) {
                unsigned long long a[4], c[4];
                for (unsigned int spins = 0;; ++spins) {
                    bool ok = true;
#pragma unroll
                    for (int q = 0; q < 4; ++q) {
                        const unsigned int pq = p0 + q * nthreads;
                        a[q] = c[q] = (unsigned long long)epoch << 32;
                        if (pq < K / 2)
                            asm volatile("ld.relaxed.gpu.global.v2.u64 {%0, %1}, [%2];"
                                         : "=l"(a[q]), "=l"(c[q]) : "l"(ll + in + 2 * pq) : "memory");
                    }
#pragma unroll
                    for (int q = 0; q < 4; ++q)
                        ok = ok && (unsigned int)(a[q] >> 32) == epoch && (unsigned int)(c[q] >> 32) == epoch;
                    if (ok) break;
                    if (spins == (1u << 22)) __trap();  // seconds: a word nobody writes
                    __nanosleep(64);  // 132 CTAs x 512 threads re-reading 64 bytes each would flood L2
                }
#pragma unroll
                for (int q = 0; q < 4; ++q)
                    if (p0 + q * nthreads < K / 2)
                        xw[p0 + q * nthreads] = ((unsigned int)a[q] & 0xFFFFu) | ((unsigned int)c[q] << 16);
            }
        } else {
            const uint4* x4 = reinterpret_cast<const uint4*>(act + in);
            for (unsigned int i = threadIdx.x; i < K / 8; i += nthreads) xs[i] = __ldcg(x4 + i);
        }
        asm volatile("bar.sync 1, %0;" ::"r"(nthreads) : "memory");
        if ((flag & 32) && threadIdx.x == 0) quiet = 0;
        unsigned int r0, r1;
        persist_rows(b, G, N, r0, r1);
        const unsigned int per = slot / (2 * K);
        unsigned long long waited = 0, row_ns = 0, row_clk = 0;  // thread 0's waits after the first chunk, its first row
        for (unsigned int r = r0, nc = 1; r < r1; r += nc * per, seq += nc) {
            // flag & 4 (CUDA cores): this chunk and the op's next together, a row of each a warp in flight
            nc = (flag & 4) && stages > 1 && r + per < r1 ? 2 : 1;  // one stage: one at a time
            for (unsigned int c = 0; c < nc; ++c) {
                const unsigned long long tw = marks && threadIdx.x == 0 ? global_ns() : 0;
                mbar_wait_parity((unsigned int)__cvta_generic_to_shared(&full[(seq + c) % stages]),
                                    ((seq + c) / stages) & 1);
                if (marks && threadIdx.x == 0) {
                    const unsigned long long tl = global_ns();
                    if (r == r0 && c == 0) marks[(size_t)(8 * j + 1) * G + b] = tl;
                    else waited += tl - tw;
                }
            }
            const unsigned int s = seq % stages, s2 = (seq + 1) % stages;
            const unsigned int rows = min(per, r1 - r), rows2 = nc == 2 ? min(per, r1 - r - per) : 0;
            const uint4* ws = reinterpret_cast<const uint4*>(persist_smem + xbytes + s * slot);
            const uint4* ws2 = reinterpret_cast<const uint4*>(persist_smem + xbytes + s2 * slot);
            const unsigned long long rn = marks && threadIdx.x == 0 && r == r0 ? global_ns() : 0;
            const unsigned long long rc = marks && threadIdx.x == 0 && r == r0 ? clock64() : 0;
            for (unsigned int rr = warp; rr < max(rows, rows2); rr += cw) {
                float sum[2];
                if (rr < rows && rr < rows2)
                    stream_row<2>(sum, ws + rr * (K / 8), ws2 + rr * (K / 8), xs, K, lane);
                else
                    stream_row<1>(sum, rr < rows ? ws + rr * (K / 8) : ws2 + rr * (K / 8), nullptr, xs, K, lane);
                if (lane == 0) {
                    if (rr < rows) persist_store(act, ll, hand, epoch, out + r + rr, sum[0]);
                    if (rr < rows2) persist_store(act, ll, hand, epoch, out + r + per + rr, rr < rows ? sum[1] : sum[0]);
                    if (marks && threadIdx.x == 0 && r == r0 && rr == warp) {
                        row_clk = clock64() - rc;
                        row_ns = global_ns() - rn;
                    }
                }
            }
            __syncwarp();
            // quiet handovers: raised before thread 0 releases the op's last stages, so their refills
            // wait until this CTA has read the next op's x (a stage is free only once warp 0 arrived)
            if ((flag & 32) && threadIdx.x == 0 && r + nc * per >= r1) quiet = 1;
            for (unsigned int c = 0; c < nc && lane == 0; ++c)
                asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];"
                             ::"r"((unsigned int)__cvta_generic_to_shared(&empty[c ? s2 : s])) : "memory");
        }
        asm volatile("bar.sync 1, %0;" ::"r"(nthreads) : "memory");
        if (threadIdx.x == 0) {
            if (marks) {
                marks[(size_t)(8 * j + 4) * G + b] = global_ns();
                marks[(size_t)(8 * j + 5) * G + b] = waited;
                marks[(size_t)(8 * j + 6) * G + b] = row_ns;
                marks[(size_t)(8 * j + 7) * G + b] = row_clk;
            }
            if (hand == 0 || hand == 1) __threadfence();  // 3 (LL) publishes nothing
            if (hand == 1 || hand == 2) {
                unsigned int old;
                asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(cnt + 2 * j) : "memory");
                if (old + 1u == epoch * G)
                    asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(cnt + 2 * j + 1), "r"(epoch) : "memory");
            } else if (hand == 0) {
                asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(cnt + 2 * j) : "memory");
            }
            if (marks) marks[(size_t)(8 * j + 2) * G + b] = global_ns();
        }
    }
    if (threadIdx.x == 0) {
        ns[2 * b] = t0;
        ns[2 * b + 1] = global_ns();
    }
}
