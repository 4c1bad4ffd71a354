// Decode GEMV: out[r, n] = sum_k x[r, k] * W[n, k] (+ bias[n]) for 1..8 rows, and fused
// variants whose CTAs first build x in shared memory from the previous op's output
// (gemv_rmsnorm_*: residual add + RMSNorm; gemv_silu_*: silu(gate) * up; see gemv.cuh).
//
// Batch-1 decode is bound by streaming W once from HBM, so everything here serves that:
// - One tensor-core mma m16n8k16 covers 16 output columns x all 8 batch rows x 16 k, so W is
//   read exactly once for the whole batch and there is no per-element bf16->f32 convert.
// - The k order inside an mma is free (a sum), so each lane's A fragment is one 16-byte load
//   of 8 consecutive k of W (rows g and g+8 of the tile) and its B fragment is the matching
//   16 bytes of x row g: lane (g, t) of a k32 block owns k = 8t .. 8t+7, and the two mmas of
//   the block take k 8t+0..3 and 8t+4..7 as their logical k {2t,2t+1, 2t+8,2t+9}.
// - Each warp owns a 16-column tile and a k slice (every S-th k32 block); GEMV_UNROLL blocks
//   are loaded before any mma, so each lane keeps 2*GEMV_UNROLL 16-byte W loads in flight.
// - When N is small the S warps of a tile split K inside the block and reduce through shared
//   memory, so the grid still covers the SMs without a split-K scratch buffer or second pass;
//   small-N layers take 512-thread blocks (S up to 16) so that one batch per warp covers K.
// - W never depends on the previous kernel, so each CTA issues its first W batch before it
//   reads anything a predecessor wrote (x, hidden, gate_up): the prologue and, under
//   Programmatic Dependent Launch, the wait for the predecessor overlap that DRAM latency.
// NOTE: blockDim must be (256 or 512, 1, 1); any gridDim.x is correct (grid-stride loop).
// S depends only on (N, K, warps) (gemv_split below; fixedgraph/ops/gemv.py mirrors it to
// size the grid, and a mismatch there would only cost speed, never correctness).
#include <cuda_bf16.h>
#include <stdint.h>

#include "gemm.cuh"
#include "gemv.cuh"
#include "pdl.cuh"

#define GEMV_TILE_N 16   // output columns per warp tile: the mma M dimension
#define GEMV_ROWS 8      // batch rows per pass: the mma N dimension
#define GEMV_UNROLL 4    // k32 blocks loaded per warp before their mmas
#define GEMV_TARGET_WARPS 2048u  // ~16 warps per SM on 132 SMs
#define GEMV_MIN_KBLOCKS 2       // k32 blocks per warp worth a k split (fewer: reduce costs more)
#define GEMV_MAX_REGS 80           // 3 CTAs of 256 threads (or 1 of 512) per SM, no spills
#define GEMV_PREFETCH_BYTES 65536u  // L2 prefetch per CTA: 396 resident CTAs ask for <= 25 MB
#define GEMV_PREFETCH_CHUNK 8192u    // bytes per cp.async.bulk.prefetch (one per thread)

// Warps per column tile (k split inside the block): a power of two <= warps, raised while the
// grid is short of GEMV_TARGET_WARPS and every warp still gets >= GEMV_MIN_KBLOCKS k32 blocks.
// Small layers are latency-bound: splitting K wider uses more SMs and fewer serial loads.
__device__ __forceinline__ uint32_t gemv_split(uint32_t N, uint32_t K, uint32_t warps) {
  const uint32_t tiles = (N + GEMV_TILE_N - 1) / GEMV_TILE_N;
  const uint32_t kblocks = (K + 31) / 32;
  uint32_t s = 1;
  while (s < warps && tiles * s < GEMV_TARGET_WARPS && kblocks >= 2 * s * GEMV_MIN_KBLOCKS) s *= 2;
  return s;
}

struct NoPrologue {
  __device__ void operator()() const {}
};

// W rows n0+g and n0+g+8 of a warp tile; each pointer is dereferenced only under its ok flag.
struct WRows {
  const bf16* w0;
  const bf16* w1;
  bool ok0, ok1;
};

__device__ __forceinline__ WRows w_rows(const bf16* W, uint32_t N, uint32_t K, uint32_t n0, uint32_t g) {
  WRows r;
  r.ok0 = n0 + g < N;
  r.ok1 = n0 + g + 8 < N;
  r.w0 = W + (size_t)(r.ok0 ? n0 + g : 0) * K;
  r.w1 = W + (size_t)(r.ok1 ? n0 + g + 8 : 0) * K;
  return r;
}

// L2 prefetch of bytes (a multiple of 16) at a 16-byte aligned p, split over the first threads.
__device__ __forceinline__ void prefetch_w_l2(const bf16* p, size_t bytes) {
  const size_t off = (size_t)threadIdx.x * GEMV_PREFETCH_CHUNK;
  if (off < bytes) {
    const uint32_t n = (uint32_t)min((size_t)GEMV_PREFETCH_CHUNK, bytes - off);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(reinterpret_cast<const char*>(p) + off), "r"(n)
                 : "memory");
  }
}

// k32 blocks per batch: GEMV_UNROLL on the 16-byte path; 1 on the scalar path, whose 8 loads
// per chunk would otherwise need 3x the registers.
#define GEMV_BATCH(VEC) ((VEC) ? GEMV_UNROLL : 1)

// One batch of W: k32 blocks kb, kb+S, .. kb+(U-1)*S, lane (g, t) taking k 8t..8t+7.
template <bool VEC, int U = GEMV_BATCH(VEC)>
__device__ __forceinline__ void load_w(uint4 (&a0)[U], uint4 (&a1)[U], const WRows& wr,
                                       uint32_t K, uint32_t S, uint32_t kb, uint32_t t) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const uint32_t k = (kb + u * S) * 32 + t * 8;  // >= K past the last block: reads 0
    if (VEC) {  // K % 8 == 0: a chunk is either wholly inside the row or wholly past it
      a0[u] = ld_stream_v4(wr.w0 + k, wr.ok0 && k < K);
      a1[u] = ld_stream_v4(wr.w1 + k, wr.ok1 && k < K);
    } else {
      a0[u] = ld_bf16x8_scalar(wr.w0, k, wr.ok0 ? K : 0);
      a1[u] = ld_bf16x8_scalar(wr.w1, k, wr.ok1 ? K : 0);
    }
  }
}

// XS: x is read from shared memory (row stride xs_stride(K), zero past K) instead of global.
template <bool VEC, bool F32OUT, bool XS, class Prologue>
__device__ __forceinline__ void gemv_body(void* __restrict__ out,         // [rows, N] bf16 or f32
                                          const bf16* __restrict__ x,     // [rows, K] bf16 (global or smem)
                                          const bf16* __restrict__ W,     // [N, K] bf16
                                          const bf16* __restrict__ bias,  // [N] bf16 or NULL
                                          uint32_t rows, uint32_t N, uint32_t K,
                                          float4 (*red)[32],              // [warps][32] smem
                                          Prologue prologue) {            // builds x; ends in a barrier
  const uint32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  const uint32_t g = lane >> 2, t = lane & 3;
  const uint32_t S = gemv_split(N, K, warps);
  const uint32_t tiles_per_block = warps / S;
  const uint32_t slot = warp / S;  // which tile of the block's group this warp works on
  const uint32_t ks = warp % S;    // which k slice; warps of one tile are adjacent
  const uint32_t tiles = (N + GEMV_TILE_N - 1) / GEMV_TILE_N;
  const uint32_t groups = (tiles + tiles_per_block - 1) / tiles_per_block;
  const uint32_t kblocks = (K + 31) / 32;
  const uint32_t xstride = XS ? xs_stride(K) : K;

  // Before anything a predecessor wrote is read: ask L2 for the start of this CTA's first
  // group of W rows (contiguous), so that DRAM latency overlaps the prologue / PDL wait.
  if (VEC && blockIdx.x < groups) {
    const uint32_t n_first = blockIdx.x * tiles_per_block * GEMV_TILE_N;
    const uint32_t n_count = min(tiles_per_block * GEMV_TILE_N, N - n_first);
    prefetch_w_l2(W + (size_t)n_first * K, min((size_t)n_count * K * 2, (size_t)GEMV_PREFETCH_BYTES));
  }
  // PDL: first dependent read below (the prologue reads hidden/gate_up; else the loop reads x)
  FG_PDL_WAIT();
  prologue();

  for (uint32_t r0 = 0; r0 < rows; r0 += GEMV_ROWS) {  // one pass for rows <= 8
    const bool x_ok = r0 + g < rows;
    const bf16* xr = x + (size_t)(x_ok ? r0 + g : 0) * xstride;
    for (uint32_t grp = blockIdx.x; grp < groups; grp += gridDim.x) {
      const uint32_t n0 = (grp * tiles_per_block + slot) * GEMV_TILE_N;
      const WRows wr = w_rows(W, N, K, n0, g);
      float acc[4] = {0.f, 0.f, 0.f, 0.f};  // (col g, rows 2t, 2t+1), (col g+8, rows 2t, 2t+1)

      constexpr int U = GEMV_BATCH(VEC);
      for (uint32_t kb = ks; kb < kblocks; kb += S * U) {
        uint4 a0[U], a1[U], b[U];
        load_w<VEC>(a0, a1, wr, K, S, kb, t);
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const uint32_t k = (kb + u * S) * 32 + t * 8;
          if (XS) {  // zero-padded to whole k32 blocks: only blocks past the end are skipped
            b[u] = (x_ok && k < kblocks * 32) ? *reinterpret_cast<const uint4*>(xr + k) : make_uint4(0, 0, 0, 0);
          } else if (VEC) {
            b[u] = ld_reuse_v4(xr + k, x_ok && k < K);
          } else {
            b[u] = ld_bf16x8_scalar(xr, k, x_ok ? K : 0);
          }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          mma_bf16_16816(acc, a0[u].x, a1[u].x, a0[u].y, a1[u].y, b[u].x, b[u].y);
          mma_bf16_16816(acc, a0[u].z, a1[u].z, a0[u].w, a1[u].w, b[u].z, b[u].w);
        }
      }

      if (S > 1) {  // sum the k slices of each tile into its first warp
        red[warp][lane] = make_float4(acc[0], acc[1], acc[2], acc[3]);
        __syncthreads();
        if (ks == 0) {
          for (uint32_t j = 1; j < S; ++j) {
            const float4 p = red[warp + j][lane];
            acc[0] += p.x; acc[1] += p.y; acc[2] += p.z; acc[3] += p.w;
          }
        }
        __syncthreads();  // NOTE: red is rewritten by the next group's warps
      }
      if (ks != 0) continue;

#pragma unroll
      for (int h = 0; h < 2; ++h) {  // h = 0: column n0+g; h = 1: column n0+g+8
        const uint32_t n = n0 + g + 8 * h;
        if (n >= N) continue;
        const float bn = bias ? __bfloat162float(bias[n]) : 0.f;
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const uint32_t r = r0 + 2 * t + j;
          if (r >= rows) continue;
          const float v = acc[2 * h + j] + bn;
          if (F32OUT) static_cast<float*>(out)[(size_t)r * N + n] = v;
          else static_cast<bf16*>(out)[(size_t)r * N + n] = __float2bfloat16_rn(v);
        }
      }
    }
  }
}

// Shared memory common to every entry. x (fused entries only) is dynamic: rows * xs_stride(K)
// bf16, sized by the launcher.
struct GemvShared {
  float4 red[GEMV_MAX_WARPS][32];  // [warps][lanes] partial accumulators of the k split, 8 KiB
  float norm[9][GEMV_MAX_WARPS];   // [8 rows][warps] sums of squares, [8][r]: 1/rms (rmsnorm)
};
extern __shared__ __align__(16) bf16 gemv_xs[];  // [rows, xs_stride(K)] bf16 (fused entries)

// 16-byte W loads need 16-byte aligned row starts: K % 8 == 0 and an aligned base.
template <bool F32OUT, bool XS, class Prologue>
__device__ __forceinline__ void gemv_dispatch(void* out, const bf16* x, const bf16* W, const bf16* bias,
                                              uint32_t rows, uint32_t N, uint32_t K, float4 (*red)[32],
                                              Prologue pro) {
  if ((K & 7) == 0 && aligned16(W) && (XS || aligned16(x)))
    gemv_body<true, F32OUT, XS>(out, x, W, bias, rows, N, K, red, pro);
  else
    gemv_body<false, F32OUT, XS>(out, x, W, bias, rows, N, K, red, pro);
}

template <bool F32OUT>
__device__ __forceinline__ void gemv_entry(void* out, const bf16* x, const bf16* W, const bf16* bias,
                                           uint32_t rows, uint32_t N, uint32_t K) {
  __shared__ GemvShared sh;
  if ((blockDim.x & 31u) != 0 || blockDim.x > 32 * GEMV_MAX_WARPS) return;
  gemv_dispatch<F32OUT, false>(out, x, W, bias, rows, N, K, sh.red, NoPrologue{});
}

template <bool F32OUT>
__device__ __forceinline__ void gemv_rmsnorm_entry(void* out, const float* hin, const bf16* delta, float* hout,
                                                   const bf16* norm_w, const bf16* W, const bf16* bias,
                                                   uint32_t rows, uint32_t N, uint32_t K, float eps) {
  __shared__ GemvShared sh;
  if ((blockDim.x & 31u) != 0 || blockDim.x > 32 * GEMV_MAX_WARPS) return;
  auto pro = [&]() { rmsnorm_prologue(gemv_xs, hin, delta, hout, norm_w, rows, K, eps, sh.norm); };
  gemv_dispatch<F32OUT, true>(out, gemv_xs, W, bias, rows, N, K, sh.red, pro);
}

extern "C" __global__ void __maxnreg__(GEMV_MAX_REGS)
gemv_bf16(bf16* __restrict__ out,         // [rows, N] bf16
          const bf16* __restrict__ x,     // [rows, K] bf16
          const bf16* __restrict__ W,     // [N, K] bf16 (PyTorch Linear layout)
          const bf16* __restrict__ bias,  // [N] bf16, or NULL
          unsigned int rows, unsigned int N, unsigned int K) {
  gemv_entry<false>(out, x, W, bias, rows, N, K);
}

extern "C" __global__ void __maxnreg__(GEMV_MAX_REGS)
gemv_bf16_f32out(float* __restrict__ out,       // [rows, N] f32 (logits)
                 const bf16* __restrict__ x,     // [rows, K] bf16
                 const bf16* __restrict__ W,     // [N, K] bf16
                 const bf16* __restrict__ bias,  // [N] bf16, or NULL
                 unsigned int rows, unsigned int N, unsigned int K) {
  gemv_entry<true>(out, x, W, bias, rows, N, K);
}

// out = rmsnorm(hidden_in + delta) @ W.T (+ bias); CTA 0 also stores hidden_out = hidden_in + delta.
// NOTE: hidden_out must not alias hidden_in: every CTA reads hidden_in while CTA 0 writes
// hidden_out (the model ping-pongs two residual buffers). Dynamic smem: rows*xs_stride(K)*2 B.
extern "C" __global__ void __maxnreg__(GEMV_MAX_REGS)
gemv_rmsnorm_bf16(bf16* __restrict__ out,             // [rows, N] bf16
                  const float* __restrict__ hidden_in,  // [rows, K] f32 residual stream
                  const bf16* __restrict__ delta,       // [rows, K] bf16 branch output, or NULL
                  float* __restrict__ hidden_out,       // [rows, K] f32 = hidden_in + delta, or NULL
                  const bf16* __restrict__ norm_w,      // [K] bf16 RMSNorm weight
                  const bf16* __restrict__ W,           // [N, K] bf16
                  const bf16* __restrict__ bias,        // [N] bf16, or NULL
                  unsigned int rows, unsigned int N, unsigned int K, float eps) {
  gemv_rmsnorm_entry<false>(out, hidden_in, delta, hidden_out, norm_w, W, bias, rows, N, K, eps);
}

extern "C" __global__ void __maxnreg__(GEMV_MAX_REGS)
gemv_rmsnorm_bf16_f32out(float* __restrict__ out,             // [rows, N] f32 (logits)
                         const float* __restrict__ hidden_in,  // [rows, K] f32
                         const bf16* __restrict__ delta,       // [rows, K] bf16, or NULL
                         float* __restrict__ hidden_out,       // [rows, K] f32, or NULL
                         const bf16* __restrict__ norm_w,      // [K] bf16
                         const bf16* __restrict__ W,           // [N, K] bf16
                         const bf16* __restrict__ bias,        // [N] bf16, or NULL
                         unsigned int rows, unsigned int N, unsigned int K, float eps) {
  gemv_rmsnorm_entry<true>(out, hidden_in, delta, hidden_out, norm_w, W, bias, rows, N, K, eps);
}

// out = (bf16(silu(gate)) * up) @ W.T (+ bias), gate = gate_up[:, :K], up = gate_up[:, K:].
// Dynamic smem: rows * xs_stride(K) * 2 bytes.
extern "C" __global__ void __maxnreg__(GEMV_MAX_REGS)
gemv_silu_bf16(bf16* __restrict__ out,            // [rows, N] bf16
               const bf16* __restrict__ gate_up,  // [rows, 2K] bf16: gate in [:, :K], up in [:, K:]
               const bf16* __restrict__ W,        // [N, K] bf16
               const bf16* __restrict__ bias,     // [N] bf16, or NULL
               unsigned int rows, unsigned int N, unsigned int K) {
  __shared__ GemvShared sh;
  if ((blockDim.x & 31u) != 0 || blockDim.x > 32 * GEMV_MAX_WARPS) return;
  auto pro = [&]() { silu_prologue(gemv_xs, gate_up, rows, K); };
  gemv_dispatch<false, true>(out, gemv_xs, W, bias, rows, N, K, sh.red, pro);
}
