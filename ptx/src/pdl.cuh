// Programmatic dependent launch (Hopper): a kernel launched through a programmatic graph edge
// may start while its predecessor is still running. FG_PDL_WAIT() blocks until the predecessor
// grid has completed and its writes are visible; every kernel calls it before any global read
// of data a predecessor wrote, so that completion stays transitive along the chain (see
// runtime_pyx/graph.pyx).
//
// Each CTA also signals griddepcontrol.launch_dependents: once every CTA of this grid has
// signalled (or exited), the successor grid is launched and its CTAs take free SM slots, where
// they fetch what does not depend on this grid (weights) and then block in their own wait. A
// grid is never starved of slots by waiters, since its successor launches only after all of its
// own CTAs are running. Most kernels signal right after their wait (FG_PDL_WAIT): "late", the
// successor launches only once this grid's predecessor has completed. The decode chain's lean
// GEMV entries but norm + gate_up + SiLU (gemv.cu's LeanGrid) signal at their start
// (FG_PDL_TRIGGER, then FG_PDL_WAIT_ONLY): "early", so their successor copies its weights a
// launch sooner, and several grids may wait at once.
// The rule that keeps reads before a wait sound: a kernel reads before its wait only constants
// (weights) or data written by grids that precede the nearest late-signalling grid before it
// (that grid's CTAs passed their wait, so its predecessor and everything earlier completed). The
// fused decode attention, which reads staged metadata and old K/V before its wait, is itself late
// and, in layer 0, is preceded by a late norm + qkv GEMV after the (early) staging kernel: the
// metadata of its step and the K/V of earlier steps are always written by then
// (fixedgraph/pdl.py checks every program at bind time).
//
// Timeline tracing (builds with -DFG_TRACE only: `tools/build_ptx.py --trace DIR`; the committed
// PTX has none of it). FG_KERNEL_BEGIN() opens every entry; each CTA then appends one record of
// FG_TRACE_WORDS u64 to the buffer the host points fg_trace_buf at (module globals, set per
// module): (entry-name hash << 32 | SM id, linear CTA index, %globaltimer at entry, after the
// PDL wait (its first thread; 0: none), at the CTA's last thread's exit, when the CTA's last warp
// passed the wait (lane 0's view; 0: none), then FG_TRACE_MARKS optional marks (0: not
// reached): FG_TRACE_MARK(k) in a kernel stamps mark k when thread 0 passes it, so a multi-phase
// kernel can show where its time goes). fg_trace_count (u32, host-zeroed) numbers the records;
// past fg_trace_cap they are dropped. The CTA syncs once at entry.
// Light tracing (-DFG_TRACE -DFG_TRACE_LIGHT, `tools/build_ptx.py --trace DIR --light`): thread
// 0 alone stamps and writes the record (entry, its own pass of the wait, the marks, its own exit;
// last-warp word 0), with no barrier and no shared counter, so the kernels keep their untraced
// order of work; for where CTAs land and when, where the full trace's entry sync may move them.
#pragma once
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FG_PDL_WAIT_RAW() asm volatile("griddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;" ::: "memory")
#define FG_PDL_WAIT_ONLY_RAW() asm volatile("griddepcontrol.wait;" ::: "memory")
#define FG_PDL_TRIGGER() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#else
#define FG_PDL_WAIT_RAW() do {} while (0)
#define FG_PDL_WAIT_ONLY_RAW() do {} while (0)
#define FG_PDL_TRIGGER() do {} while (0)
#endif

#ifdef FG_TRACE
#define FG_TRACE_MARKS 8
#define FG_TRACE_WORDS (6 + FG_TRACE_MARKS)
__device__ unsigned long long *fg_trace_buf;  // [fg_trace_cap][FG_TRACE_WORDS]
__device__ unsigned int *fg_trace_count;      // records appended (shared by every module)
__device__ unsigned int fg_trace_cap;

__device__ __forceinline__ unsigned long long fg_globaltimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ unsigned long long *fg_trace_shared() {  // [t_wait, threads exited, marks, t_wait_last]
    __shared__ unsigned long long s[3 + FG_TRACE_MARKS];
    return s;
}
struct FgTraceScope {
    unsigned long long t0;
    unsigned int tag;
    __device__ explicit FgTraceScope(const char *name) {
        t0 = fg_globaltimer();
        unsigned int h = 2166136261u;  // FNV-1a of the entry's name (the host hashes the same)
        for (const char *c = name; *c; ++c) h = (h ^ (unsigned char)*c) * 16777619u;
        tag = h;
        if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
            for (int k = 0; k < 3 + FG_TRACE_MARKS; ++k) fg_trace_shared()[k] = 0ull;
        }
#ifndef FG_TRACE_LIGHT
        __syncthreads();
#endif
    }
    __device__ ~FgTraceScope() {
#ifdef FG_TRACE_LIGHT  // thread 0's exit writes the record: its shared words are its own
        if (threadIdx.x != 0 || threadIdx.y != 0 || threadIdx.z != 0 || fg_trace_buf == nullptr) return;
#else
        const unsigned long long n = (unsigned long long)blockDim.x * blockDim.y * blockDim.z;
        if (atomicAdd(&fg_trace_shared()[1], 1ull) != n - 1 || fg_trace_buf == nullptr) return;
#endif
        const unsigned long long t1 = fg_globaltimer();
        const unsigned int i = atomicAdd(fg_trace_count, 1u);
        if (i >= fg_trace_cap) return;
        unsigned int sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        unsigned long long *r = fg_trace_buf + (size_t)i * FG_TRACE_WORDS;
        r[0] = ((unsigned long long)tag << 32) | sm;
        r[1] = blockIdx.x + (unsigned long long)gridDim.x * (blockIdx.y + (unsigned long long)gridDim.y * blockIdx.z);
        r[2] = t0;
        r[3] = *(volatile unsigned long long *)&fg_trace_shared()[0];
        r[4] = t1;
        r[5] = *(volatile unsigned long long *)&fg_trace_shared()[2 + FG_TRACE_MARKS];
        for (int k = 0; k < FG_TRACE_MARKS; ++k) r[6 + k] = *(volatile unsigned long long *)&fg_trace_shared()[2 + k];
    }
};
#define FG_KERNEL_BEGIN() FgTraceScope fg_trace_scope_(__func__)
#ifdef FG_TRACE_LIGHT
#define FG_PDL_WAIT_STAMP(raw)                                                                  \
    do {                                                                                        \
        raw();                                                                                  \
        if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0 && fg_trace_shared()[0] == 0ull) \
            fg_trace_shared()[0] = fg_globaltimer();                                            \
    } while (0)
#else
#define FG_PDL_WAIT_STAMP(raw)                                                                  \
    do {                                                                                        \
        raw();                                                                                  \
        if (fg_trace_shared()[0] == 0ull) fg_trace_shared()[0] = fg_globaltimer();              \
        if ((threadIdx.x & 31u) == 0u) atomicMax(&fg_trace_shared()[2 + FG_TRACE_MARKS], fg_globaltimer()); \
    } while (0)
#endif
#define FG_PDL_WAIT() FG_PDL_WAIT_STAMP(FG_PDL_WAIT_RAW)
#define FG_PDL_WAIT_ONLY() FG_PDL_WAIT_STAMP(FG_PDL_WAIT_ONLY_RAW)
#define FG_TRACE_MARK(k)                                                                        \
    do {                                                                                        \
        if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0)                           \
            fg_trace_shared()[2 + (k)] = fg_globaltimer();                                      \
    } while (0)
#else
#define FG_KERNEL_BEGIN() do {} while (0)
#define FG_PDL_WAIT() FG_PDL_WAIT_RAW()
#define FG_PDL_WAIT_ONLY() FG_PDL_WAIT_ONLY_RAW()
#define FG_TRACE_MARK(k) do {} while (0)
#endif
