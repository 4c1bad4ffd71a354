// Per-pass metadata plumbing: bring the host-written staging blob into the fixed metadata
// region, and pick rows out of an activation buffer by an index read from that metadata.
#include <cuda_bf16.h>
#include <stdint.h>
#include "common_ops.cuh"
#include "pdl.cuh"

// dst[i] = src[i] for i < words by the CTA's threads, 16 bytes at a time when both are aligned
// (each source word is read once: over PCIe when src is device-mapped host memory).
__device__ __forceinline__ void copy_words(unsigned int* __restrict__ dst, const unsigned int* __restrict__ src,
                                           unsigned int words) {
    const bool vec = ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 15) == 0;
    unsigned int head = 0;
    if (vec) {
        const unsigned int n4 = words / 4;
        const uint4* s4 = reinterpret_cast<const uint4*>(src);
        uint4* d4 = reinterpret_cast<uint4*>(dst);
        for (unsigned int i = threadIdx.x; i < n4; i += blockDim.x) d4[i] = s4[i];
        head = n4 * 4;
    }
    for (unsigned int i = head + threadIdx.x; i < words; i += blockDim.x) dst[i] = src[i];
}

// dst[i] = src[i] for i < words.  src: the device-mapped address of one pinned host staging slot
// (patched into the graph node per step); dst: the fixed metadata region.  [words] u32.
// One CTA; reads go over PCIe once each, 16 bytes at a time when aligned.
extern "C" __global__ void stage_meta(unsigned int* __restrict__ dst, const unsigned int* __restrict__ src,
                                      unsigned int words) { FG_KERNEL_BEGIN();
    FG_PDL_WAIT();  // PDL: wait for the predecessor grid before any global read
    copy_words(dst, src, words);
}

// out[j, :] = in[idx[j], :] for j < n.  in: [T, H] bf16; out: [n, H] bf16; idx: [n] i32 (in the
// metadata region, so a graph built for a padded chunk can select the last real row).
// Grid (n), any block size.  An index outside [0, T) is clamped to 0 (never read out of bounds).
extern "C" __global__ void gather_rows_bf16(__nv_bfloat16* __restrict__ out, const __nv_bfloat16* __restrict__ in,
                                            const int* __restrict__ idx, unsigned int T, unsigned int H) { FG_KERNEL_BEGIN();
    FG_PDL_WAIT();  // PDL: wait for the predecessor grid before any global read
    const unsigned int j = blockIdx.x;
    int r = idx[j];
    if (r < 0 || (unsigned int)r >= T) r = 0;
    const __nv_bfloat16* src = in + (size_t)r * H;
    __nv_bfloat16* dst = out + (size_t)j * H;
    for (unsigned int i = threadIdx.x; i < H; i += blockDim.x) dst[i] = src[i];
}

// The decode hot path without node patching: the staging buffer is a ring of `num_slots` slots
// of `stride_words` words in device-mapped host memory; `counter` (a fixed device word, zero at
// boot) counts the passes launched so far. Each pass copies slot (counter % num_slots) into the
// fixed metadata region dst [words] u32, then advances the counter. The host fills slot
// (passes launched % num_slots) before each launch, so nothing in the graph changes per step.
// One CTA (the counter update must follow every read of this pass's slot).
extern "C" __global__ void stage_meta_ring(unsigned int* __restrict__ dst, const unsigned int* __restrict__ staging,
                                           unsigned int* __restrict__ counter, unsigned int stride_words,
                                           unsigned int num_slots, unsigned int words) { FG_KERNEL_BEGIN();
    FG_PDL_WAIT();  /* PDL: wait for the predecessor grid before any global read */
    const unsigned int c = *counter;
    copy_words(dst, staging + (size_t)(c % num_slots) * stride_words, words);
    __syncthreads();  // every thread has read `c` before it changes
    if (threadIdx.x == 0) *counter = c + 1;
}

// A decode step's first op: stage_meta_ring, then the embedding gather of the tokens the step
// before picked (embed_gather: hidden[r, :] = float(table[tokens[r], :])), in one launch. The
// slot goes into shared memory *before* the PDL wait, so its PCIe round trip overlaps the
// predecessor (the previous step's head): the host wrote the slot before launching the graph,
// and the counter's last writer is the stage of a step back, which completed before the late
// head that precedes this launch passed its wait (fixedgraph/pdl.py). It signals its dependents
// at its start: layer 0's norm + qkv, which reads only its weights before its own wait and
// signals late, launches during the head and copies its W as the head's CTAs leave (the
// attention after it, which reads the region before its wait, still launches only once this
// grid has completed). After the wait (the head done: it reads the region's step field, and
// wrote tokens) the region, the counter and the rows are written. One CTA; dynamic shared
// memory: words * 4 bytes rounded up to 16.
extern "C" __global__ void stage_meta_ring_embed(unsigned int* __restrict__ dst, const unsigned int* __restrict__ staging,
                                                 unsigned int* __restrict__ counter, unsigned int stride_words,
                                                 unsigned int num_slots, unsigned int words,
                                                 float* __restrict__ hidden,        // [rows, H] f32, written
                                                 const bf16* __restrict__ table,    // [V, H] bf16
                                                 const int* __restrict__ tokens,    // [rows] i32
                                                 unsigned int rows, unsigned int H, unsigned int V) { FG_KERNEL_BEGIN();
    extern __shared__ __align__(16) unsigned int stage_slot[];  // [words]
    FG_PDL_TRIGGER();  // early: layer 0's norm + qkv (late, W only before its wait) may launch now
    const unsigned int c = __ldcg(counter);
    copy_words(stage_slot, staging + (size_t)(c % num_slots) * stride_words, words);
    FG_PDL_WAIT_ONLY();
    __syncthreads();  // every thread's slot words are in shared memory, and every thread has read `c`
    copy_words(dst, stage_slot, words);
    if (threadIdx.x == 0) *counter = c + 1;
    for (unsigned int r = 0; r < rows; ++r)
        embed_row(hidden + (size_t)r * H, table, tokens[r], H, V, threadIdx.x, blockDim.x);
}
