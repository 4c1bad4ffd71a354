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
// - Each warp owns a 16-column tile and a k slice (every S-th k32 block); a batch of U blocks
//   is loaded before any mma, so each lane keeps 2*U 16-byte W loads in flight: U =
//   GEMV_PLAIN_UNROLL (8) in the plain entries, GEMV_UNROLL (4) in the fused ones, whose
//   prologues need the registers. Bytes in flight per SM decide the big GEMVs (measured: 8B
//   o/down 77% -> 93% of their floor in the decode chain going from 4 to 8).
// - When N is small the S warps of a tile split K inside the block and reduce through shared
//   memory, so the grid still covers the SMs without a split-K scratch buffer or second pass;
//   small-N layers take 512-thread blocks (S up to 16) so that one batch per warp covers K.
// - W never depends on the previous kernel, so each warp copies its first W batches (as many
//   as the launch's dynamic shared memory holds) into shared memory before it reads anything a
//   predecessor wrote (x, hidden, gate_up): the prologue and, under Programmatic Dependent
//   Launch (pdl.cuh), the predecessor's tail overlap that DRAM latency.
// NOTE: blockDim must be (256 or 512, 1, 1); any gridDim.x is correct (grid-stride loop).
// S (warps per column tile) is the launcher's `split` argument (fixedgraph/ops/gemv.py picks
// it and sizes the grid to match); any power of two <= warps is correct, anything else falls
// back to gemv_split below.
#include <cuda_bf16.h>
#include <stdint.h>

#include "gemm.cuh"
#include "gemv.cuh"
#include "pdl.cuh"

#define GEMV_TILE_N 16   // output columns per warp tile: the mma M dimension
#define GEMV_ROWS 8      // batch rows per pass: the mma N dimension
#define GEMV_UNROLL 4    // k32 blocks loaded per warp before their mmas
#define GEMV_PLAIN_UNROLL 8  // the plain entries' (x from global): 2x the W bytes in flight per warp
#define GEMV_TARGET_WARPS 2048u  // ~16 warps per SM on 132 SMs
#define GEMV_MIN_KBLOCKS 2       // k32 blocks per warp worth a k split (fewer: reduce costs more)
#define GEMV_MAX_REGS 80           // 3 CTAs of 256 threads (or 1 of 512) per SM, no spills
#define GEMV_PLAIN_REGS 128        // plain entries, GEMV_PLAIN_UNROLL: 2 CTAs of 256 (or 1 of 512) per SM

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

__device__ __forceinline__ uint32_t resolve_split(uint32_t split, uint32_t N, uint32_t K, uint32_t warps) {
  return (split && (split & (split - 1)) == 0 && split <= warps) ? split : gemv_split(N, K, warps);
}

struct NoPrologue {
  __device__ void operator()() const {}
};

struct NoEpilogue {
  static constexpr bool kScale = false;  // outputs as summed (NormScale: times the row's 1/rms)
  static constexpr bool kWarpX = false;  // x built by the prologue (WarpNormX: by each warp, its k slice)
  __device__ __forceinline__ void value(int, uint32_t, uint32_t, float) {}
};

// The deferred-norm row entry's (gemv_rmsnorm_bf16_row_dn): every output times the row's 1/rms
// (norm_scale of the prologue's per-warp sums, gemv.cuh) before its bias and rounding.
struct NormScaleEpilogue {
  static constexpr bool kScale = true, kWarpX = false;
  const float (*red)[GEMV_MAX_WARPS];  // GemvShared::norm: red[0][w], warp w's sum of squares
  uint32_t K;
  float eps;
  __device__ __forceinline__ float scale() const { return norm_scale(red, K, eps); }
  __device__ __forceinline__ void value(int, uint32_t, uint32_t, float) {}
};

// The warp-private deferred norm (gemv_rmsnorm_bf16_row_dw): no CTA-wide prologue. Each warp
// builds in shared memory only the x its own k slice reads (k32 blocks ks, ks + S, ...: x =
// bf16(norm_w * h), h = hidden_in + delta), with its sum of squares over that slice, and goes
// on to its mma after a __syncwarp: the first CTA barrier is the k-split reduce's, where the S
// warps of a tile (whose slices cover K once) publish their sums for the storing warp's 1/rms.
// Warps of other tiles with the same slice write the same bits to the same addresses (each
// reads only after its own writes). Tile group 0 of CTA 0 stores hidden_out (each k once).
// NOTE: one 8-element chunk a lane, so a slice of at most 8 k32 blocks (kblocks <= 8 * S: the
// small models' layers, e.g. Qwen3-0.6B's K = 1024 at S = 4); the launcher takes this entry
// only then (fixedgraph/ops/gemv.py's row_warp_fits); otherwise it traps. The straight-line
// code after the wait is what its slice needs and no more (cold code: ~0.15-0.3 us a KB).
struct WarpNormX {
  static constexpr bool kScale = true, kWarpX = true;
  bf16* xs;                     // shared x row (gemv_xs)
  const float* hin;
  const bf16* delta;            // or NULL
  float* hout;                  // or NULL
  const bf16* norm_w;
  float (*part)[GEMV_MAX_WARPS];  // GemvShared::norm: part[0][w], warp w's sum over its slice
  uint32_t K;
  float eps;
  float ss = 0.0f;              // this warp's sum of squares over its slice (every lane)

  __device__ __forceinline__ void build(uint32_t ks, uint32_t S, uint32_t kblocks, bool write_h) {
    if (kblocks > 8u * S) __trap();  // fixedgraph/ops/gemv.py's row_warp_fits
    const uint32_t lane = threadIdx.x & 31u;
    const uint32_t kb = ks + (lane >> 2) * S;  // lane: 8 elements of k32 block kb of the slice
    const uint32_t k = kb * 32u + (lane & 3u) * 8u;
    const bool in = kb < kblocks, ok = k < K;  // in && !ok: a zero tail of the last k32 block
    float h[2][4], w[2][4];
    if (ok) {
#pragma unroll
      for (int v = 0; v < 2; ++v) {
        load_f32<4>(hin + k + 4 * v, h[v]);
        load_bf16<4>(norm_w + k + 4 * v, w[v]);
      }
      if (delta) {
#pragma unroll
        for (int v = 0; v < 2; ++v) {
          float d[4];
          load_bf16<4>(delta + k + 4 * v, d);
#pragma unroll
          for (int e = 0; e < 4; ++e) h[v][e] += d[e];
        }
      }
    }
    float s = 0.0f;
    if (in) {
      float y[8];
#pragma unroll
      for (int v = 0; v < 2; ++v)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          y[4 * v + e] = ok ? w[v][e] * h[v][e] : 0.0f;
          s += ok ? h[v][e] * h[v][e] : 0.0f;
        }
      store_bf16<8>(xs + k, y);
      if (write_h && ok && hout) {
        store_f32<4>(hout + k, h[0]);
        store_f32<4>(hout + k + 4, h[1]);
      }
    }
    ss = warp_sum(s);
    __syncwarp();  // the warp's x stores before its load_x reads
  }
  // 1/rms from the S slice sums of the tile whose first warp is `warp` (after the reduce's
  // barrier), in slice order; S == 1: the warp's own sum covers K.
  __device__ __forceinline__ float scale_of(uint32_t warp, uint32_t S) const {
    float sum = ss;
    if (S > 1) {
      sum = part[0][warp];
      for (uint32_t j = 1; j < S; ++j) sum += part[0][warp + j];
    }
    return deferred_inv_rms(sum, K, eps);
  }
  __device__ __forceinline__ void value(int, uint32_t, uint32_t, float) {}
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

// Paired (gate | up) weights, W = [gate rows 0..I-1; up rows I..2I-1] with N = 2I: tile n0
// covers act columns j0 = n0/2 .. j0+7, mma row g taking gate row j0+g and row g+8 up row
// I+j0+g, so each lane ends with gate and up of the same column (see OUT_SILU).
__device__ __forceinline__ WRows w_rows_paired(const bf16* W, uint32_t N, uint32_t K, uint32_t n0, uint32_t g) {
  WRows r;
  const uint32_t I = N / 2, j = n0 / 2 + g;
  r.ok0 = r.ok1 = j < I;
  r.w0 = W + (size_t)(r.ok0 ? j : 0) * K;
  r.w1 = W + (size_t)(r.ok1 ? I + j : 0) * K;
  return r;
}

// What a GEMV writes: out[r, n] in bf16 or f32, or (paired weights) the SwiGLU activation
// out[r, j] = bf16(bf16(silu(bf16(gate))) * bf16(up)), gate/up = columns j and I + j of the
// plain product: exactly gemv_rmsnorm_bf16 (gate_up) followed by silu_mul (act.cu).
// OUT_ROW: OUT_SILU or OUT_BF16 chosen at run time (the `silu` argument of gemv_body), so the
// layer's two row GEMVs (norm + qkv, norm + gate_up + SiLU) run one copy of code.
enum OutMode { OUT_BF16 = 0, OUT_F32 = 1, OUT_SILU = 2, OUT_ROW = 3 };

template <int MODE>
__device__ __forceinline__ bool is_silu(bool silu_rt) {
  return MODE == OUT_SILU || (MODE == OUT_ROW && silu_rt);
}

template <int MODE>
__device__ __forceinline__ WRows w_rows_for(const bf16* W, uint32_t N, uint32_t K, uint32_t n0, uint32_t g,
                                            bool silu_rt = false) {
  return is_silu<MODE>(silu_rt) ? w_rows_paired(W, N, K, n0, g) : w_rows(W, N, K, n0, g);
}

// One batch of W: k32 blocks kb, kb+S, .. kb+(U-1)*S, lane (g, t) taking k 8t..8t+7.
template <bool VEC, int U, bool EF = false>  // EF: evict-first L2 policy (gemm.cuh)
__device__ __forceinline__ void load_w(uint4 (&a0)[U], uint4 (&a1)[U], const WRows& wr,
                                       uint32_t K, uint32_t S, uint32_t kb, uint32_t t) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const uint32_t k = (kb + u * S) * 32 + t * 8;  // >= K past the last block: reads 0
    if (VEC) {  // K % 8 == 0: a chunk is either wholly inside the row or wholly past it
      a0[u] = ld_stream_v4<EF>(wr.w0 + k, wr.ok0 && k < K);
      a1[u] = ld_stream_v4<EF>(wr.w1 + k, wr.ok1 && k < K);
    } else {
      a0[u] = ld_bf16x8_scalar(wr.w0, k, wr.ok0 ? K : 0);
      a1[u] = ld_bf16x8_scalar(wr.w1, k, wr.ok1 ? K : 0);
    }
  }
}

// Dynamic shared memory: [rows, xs_stride(K)] bf16 x (fused entries), then the W preload area.
extern __shared__ __align__(16) unsigned char gemv_dyn[];
#define gemv_xs reinterpret_cast<bf16*>(gemv_dyn)

// x fragments of one batch (the k32 blocks of load_w) for the warp's row g.
template <bool VEC, bool XS, int U>
__device__ __forceinline__ void load_x(uint4 (&b)[U], const bf16* xr, bool x_ok, uint32_t K, uint32_t kblocks,
                                       uint32_t S, uint32_t kb, uint32_t t) {
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
}

template <int U>
__device__ __forceinline__ void mma_batch(float (&acc)[4], const uint4 (&a0)[U], const uint4 (&a1)[U],
                                          const uint4 (&b)[U]) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    mma_bf16_16816(acc, a0[u].x, a1[u].x, a0[u].y, a1[u].y, b[u].x, b[u].y);
    mma_bf16_16816(acc, a0[u].z, a1[u].z, a0[u].w, a1[u].w, b[u].z, b[u].w);
  }
}

// XS: x is read from shared memory (row stride xs_stride(K), zero past K) instead of global.
// Epilogue: value(j, r, n, v) sees every output v = out[r, n] this thread stores (r = r0 + 2t + j).
// Grid: the block range, preload bytes and wait (gemv.cuh: HwGrid, or the lean entries' HwGridEarly).
// EF: W under the evict-first L2 policy (gemm.cuh's FG_W_EVICT_FIRST).
template <bool VEC, int MODE, bool XS, class Prologue, class Epilogue, int UV = GEMV_UNROLL, class Grid = HwGrid,
          bool EF = false>
__device__ __forceinline__ void gemv_body(void* __restrict__ out,         // [rows, N] bf16 or f32; [rows, N/2] (OUT_SILU)
                                          const bf16* __restrict__ x,     // [rows, K] bf16 (global or smem)
                                          const bf16* __restrict__ W,     // [N, K] bf16
                                          const bf16* __restrict__ bias,  // [N] bf16 or NULL
                                          uint32_t rows, uint32_t N, uint32_t K, uint32_t split,
                                          float4 (*red)[32],              // [warps][32] smem
                                          Prologue prologue,              // builds x; ends in a barrier
                                          Epilogue& epi,
                                          bool silu_rt = false,           // OUT_ROW: SiLU pairs (else bf16)
                                          bool late_rt = false) {         // OUT_ROW: signal after the wait
  if (MODE != OUT_ROW) Grid::begin();
  else if (!late_rt) FG_PDL_TRIGGER();
  const uint32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  const uint32_t g = lane >> 2, t = lane & 3;
  const uint32_t S = resolve_split(split, N, K, warps);
  const uint32_t tiles_per_block = warps / S;
  const uint32_t slot = warp / S;  // which tile of the block's group this warp works on
  const uint32_t ks = warp % S;    // which k slice; warps of one tile are adjacent
  const uint32_t tiles = (N + GEMV_TILE_N - 1) / GEMV_TILE_N;
  const uint32_t groups = (tiles + tiles_per_block - 1) / tiles_per_block;
  const uint32_t kblocks = (K + 31) / 32;
  const uint32_t xstride = XS ? xs_stride(K) : K;
  // k32 blocks per batch: UV on the 16-byte path; 1 on the scalar path, whose 8 loads per chunk
  // would otherwise need 3x the registers (the scalar path preloads nothing).
  constexpr int U = VEC ? UV : 1;
  constexpr uint32_t BATCH_BYTES = 2u * UV * 32u * 16u;  // one warp's batch: [U][2 rows][32 lanes] x 16 B

  // Before anything a predecessor wrote is read (W never is): each warp copies its first W
  // batches into its slice of the preload area (cp.async, no registers held), so DRAM latency
  // overlaps the prologue and, under PDL, the predecessor's tail. For the small layers of small
  // models those batches are the warp's whole share of W. (No cp.async.bulk.prefetch.L2 of the
  // CTA's further rows: measured, 64 KiB per CTA cost 8B 4% of its step and 256 KiB 14%.)
  // The launcher sizes dynamic shared memory as [x rows (fused entries)][preload: warps x depth
  // x BATCH_BYTES] (fixedgraph/ops/gemv.py's preload_depth: the whole share where it fits
  // without costing occupancy, else one batch, else none); the kernel reads the depth off
  // %dynamic_smem_size, so any depth is correct.
  // NOTE: `first` is CTA-uniform (the k-split reduce below has barriers); a warp whose k slice
  // ends before the preloaded batches do copies zeros for the rest.
  const bool first = rows > 0 && Grid::bid() < groups;
  const uint32_t xs_bytes = XS ? rows * xs_stride(K) * 2u : 0u;
  uint32_t depth = 0;  // preloaded batches per warp
  if (VEC && first) {
    const uint32_t dyn = Grid::pre_bytes();
    depth = dyn > xs_bytes ? (dyn - xs_bytes) / (warps * BATCH_BYTES) : 0u;
  }
  const bool pre = depth > 0;
  uint4* pre_w = reinterpret_cast<uint4*>(gemv_dyn + xs_bytes) + warp * depth * (2 * U * 32) + lane;  // [depth][U][2][32]
  if (pre) {
    const WRows wr = w_rows_for<MODE>(W, N, K, (Grid::bid() * tiles_per_block + slot) * GEMV_TILE_N, g, silu_rt);
#pragma unroll 1
    for (uint32_t d = 0; d < depth; ++d) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const uint32_t k = (ks + (d * U + u) * S) * 32 + t * 8;
        cp_async_16_w<EF>(smem_u32(pre_w + (2 * (d * U + u)) * 32), wr.w0 + k, wr.ok0 && k < K ? 16u : 0u);
        cp_async_16_w<EF>(smem_u32(pre_w + (2 * (d * U + u) + 1) * 32), wr.w1 + k, wr.ok1 && k < K ? 16u : 0u);
      }
    }
    cp_async_commit();
  }
  // PDL: first dependent read below (the prologue reads hidden/gate_up; else the loop reads x)
  if (MODE != OUT_ROW) {
    Grid::wait();
  } else {
    FG_PDL_WAIT_ONLY();
    if (late_rt) FG_PDL_TRIGGER();
  }
  if constexpr (Epilogue::kWarpX)  // this warp's k slice of x (tile group 0 of CTA 0: hidden_out too)
    epi.build(ks, S, kblocks, Grid::bid() == 0 && slot == 0);
  else
    prologue();
  FG_TRACE_MARK(0);  // x ready (the fused entries: normed / activated into shared memory)

  // One 16-column tile x 8 rows from r0; with_pre: its first `depth` W batches are in the preload area.
  auto tile = [&](uint32_t r0, uint32_t grp, bool with_pre) {
    const bool x_ok = r0 + g < rows;
    const bf16* xr = x + (size_t)(x_ok ? r0 + g : 0) * xstride;
    const uint32_t n0 = (grp * tiles_per_block + slot) * GEMV_TILE_N;
    const WRows wr = w_rows_for<MODE>(W, N, K, n0, g, silu_rt);
    float acc[4] = {0.f, 0.f, 0.f, 0.f};  // (col g, rows 2t, 2t+1), (col g+8, rows 2t, 2t+1)
    uint32_t kb = ks;
    if (with_pre) {  // this warp's own cp.async writes: no barrier needed
      cp_async_wait<0>();
      FG_TRACE_MARK(4);  // the warp's preloaded W batches landed (thread 0's warp)
#pragma unroll 1
      for (uint32_t d = 0; d < depth; ++d, kb += S * U) {
        uint4 a0[U], a1[U], b[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          a0[u] = pre_w[(2 * (d * U + u)) * 32];
          a1[u] = pre_w[(2 * (d * U + u) + 1) * 32];
        }
        load_x<VEC, XS>(b, xr, x_ok, K, kblocks, S, kb, t);
        mma_batch(acc, a0, a1, b);
      }
      FG_TRACE_MARK(5);  // the preloaded batches multiplied (the rest of the k slice streams next)
    }
    for (; kb < kblocks; kb += S * U) {
      uint4 a0[U], a1[U], b[U];
      load_w<VEC, U, EF>(a0, a1, wr, K, S, kb, t);
      load_x<VEC, XS>(b, xr, x_ok, K, kblocks, S, kb, t);
      mma_batch(acc, a0, a1, b);
    }
    FG_TRACE_MARK(1);  // thread 0's k slice of its (latest) tile multiplied
    // The deferred norm's 1/rms (Epilogue::kScale), for the warps that store: its loads and
    // square root wait on the k-split reduce's barrier beside the other warps' slices.
    float osc = 1.0f;
    if constexpr (Epilogue::kWarpX) {
      if (S > 1 && lane == 0) epi.part[0][warp] = epi.ss;  // before the reduce's first barrier
      if (S == 1) osc = epi.scale_of(warp, 1u);
    } else if constexpr (Epilogue::kScale) {
      if (ks == 0) osc = epi.scale();
    }
    auto scaled = [&](float a) {
      if constexpr (Epilogue::kScale) return a * osc;
      else return a;
    };

    if (S > 1) {  // sum the k slices of each tile into its first warp
      red[warp][lane] = make_float4(acc[0], acc[1], acc[2], acc[3]);
      __syncthreads();
      if (ks == 0) {
        for (uint32_t j = 1; j < S; ++j) {
          const float4 p = red[warp + j][lane];
          acc[0] += p.x; acc[1] += p.y; acc[2] += p.z; acc[3] += p.w;
        }
        if constexpr (Epilogue::kWarpX) osc = epi.scale_of(warp, S);
      }
      __syncthreads();  // NOTE: red is rewritten by the next group's warps
    }
    FG_TRACE_MARK(2);  // the tile's k slices summed
    if (ks != 0) return;

    if (is_silu<MODE>(silu_rt)) {  // acc[j]: gate of column n0/2+g, acc[2+j]: its up (rows 2t+j)
      const uint32_t I = N / 2, n = n0 / 2 + g;
      if (n < I) {
        const float bg = bias ? __bfloat162float(bias[n]) : 0.f;
        const float bu = bias ? __bfloat162float(bias[I + n]) : 0.f;
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const uint32_t r = r0 + 2 * t + j;
          if (r < rows)
            static_cast<bf16*>(out)[(size_t)r * I + n] =
                __float2bfloat16_rn(silu_mul_one(round_bf16(scaled(acc[j]) + bg), round_bf16(scaled(acc[2 + j]) + bu)));
        }
      }
      return;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // h = 0: column n0+g; h = 1: column n0+g+8
      const uint32_t n = n0 + g + 8 * h;
      if (n >= N) continue;
      const float bn = bias ? __bfloat162float(bias[n]) : 0.f;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const uint32_t r = r0 + 2 * t + j;
        if (r >= rows) continue;
        const float v = scaled(acc[2 * h + j]) + bn;
        if (MODE == OUT_F32) static_cast<float*>(out)[(size_t)r * N + n] = v;
        else static_cast<bf16*>(out)[(size_t)r * N + n] = __float2bfloat16_rn(v);
        epi.value(j, r, n, v);
      }
    }
  };

  // (r0 = 0, grp = the CTA's block) first, with the preloaded batches; then the rest in the usual order.
  if (pre) tile(0, Grid::bid(), true);
  for (uint32_t r0 = 0; r0 < rows; r0 += GEMV_ROWS)  // one pass for rows <= 8
    for (uint32_t grp = Grid::bid() + (r0 == 0 && pre ? Grid::nblk() : 0u); grp < groups; grp += Grid::nblk())
      tile(r0, grp, false);
  FG_TRACE_MARK(3);  // every tile of the CTA stored (thread 0's view)
}

// Shared memory common to every entry. x (fused entries only) is dynamic: rows * xs_stride(K)
// bf16, sized by the launcher.
struct GemvShared {
  float4 red[GEMV_MAX_WARPS][32];  // [warps][lanes] partial accumulators of the k split, 8 KiB
  float norm[9][GEMV_MAX_WARPS];   // [8 rows][warps] sums of squares, [8][r]: 1/rms (rmsnorm)
};

// The lean entries signal their dependents at their start (gemv.cuh: HwGridEarly), the others
// after their wait; OUT_ROW (gemv_rmsnorm_bf16_row) chooses by its mode at run time.
template <bool LEAN> struct LeanGrid { using type = HwGrid; };
template <> struct LeanGrid<true> { using type = HwGridEarly; };

// 16-byte W loads need 16-byte aligned row starts: K % 8 == 0 and an aligned base.
// LEAN (the *_vec / *_row entries of the decode chain): only the 16-byte body is compiled, so
// the code a CTA runs after its PDL wait is about a third of the generic entry's (instruction
// fetch: every layer cycles its kernels' code through each SM); a launch it does not fit traps
// (the launcher never makes one: fixedgraph/ops/gemv.py's vec_path / row_path).
template <int MODE, bool XS, class Prologue, class Epilogue = NoEpilogue, int UV = GEMV_UNROLL, bool LEAN = false>
__device__ __forceinline__ void gemv_dispatch(void* out, const bf16* x, const bf16* W, const bf16* bias,
                                              uint32_t rows, uint32_t N, uint32_t K, uint32_t split,
                                              float4 (*red)[32], Prologue pro, Epilogue epi = Epilogue{},
                                              bool silu_rt = false, bool late_rt = false) {
  if ((K & 7) == 0 && aligned16(W) && (XS || aligned16(x)))
    gemv_body<true, MODE, XS, Prologue, Epilogue, UV, typename LeanGrid<LEAN>::type,
              (LEAN ? kWEvictFirst >= 1 : kWEvictFirst >= 2)>(out, x, W, bias, rows, N, K, split, red, pro, epi,
                                                              silu_rt, late_rt);
  else if constexpr (LEAN)
    __trap();
  else if constexpr (MODE != OUT_ROW)
    gemv_body<false, MODE, XS>(out, x, W, bias, rows, N, K, split, red, pro, epi);
}

template <bool F32OUT, bool LEAN = false>
__device__ __forceinline__ void gemv_entry(void* out, const bf16* x, const bf16* W, const bf16* bias,
                                           uint32_t rows, uint32_t N, uint32_t K, uint32_t split) {
  __shared__ GemvShared sh;
  if ((blockDim.x & 31u) != 0 || blockDim.x > 32 * GEMV_MAX_WARPS) return;
  gemv_dispatch<F32OUT ? OUT_F32 : OUT_BF16, false, NoPrologue, NoEpilogue, GEMV_PLAIN_UNROLL, LEAN>(
      out, x, W, bias, rows, N, K, split, sh.red, NoPrologue{});
}

// DEFER (LEAN, one row): 1 the deferred norm (gemv.cuh's rmsnorm_row_regs; gemv_rmsnorm_bf16_row_dn),
// 2 its warp-private form (WarpNormX; gemv_rmsnorm_bf16_row_dw).
template <int MODE, bool LEAN = false, int DEFER = 0>
__device__ __forceinline__ void gemv_rmsnorm_entry(void* out, const float* hin, const bf16* delta, float* hout,
                                                   const bf16* norm_w, const bf16* W, const bf16* bias,
                                                   uint32_t rows, uint32_t N, uint32_t K, uint32_t split, float eps,
                                                   bool silu_rt = false, bool late_rt = false) {
  __shared__ GemvShared sh;
  if ((blockDim.x & 31u) != 0 || blockDim.x > 32 * GEMV_MAX_WARPS) return;
  static_assert(DEFER == 0 || (LEAN && MODE == OUT_ROW), "the deferred norms are one-row lean entries");
  auto pro = [&]() {
    rmsnorm_prologue<LEAN, HwGrid, DEFER == 1>(gemv_xs, hin, delta, hout, norm_w, rows, K, eps, sh.norm);
  };
  if constexpr (DEFER == 2)
    gemv_dispatch<MODE, true, NoPrologue, WarpNormX, GEMV_UNROLL, LEAN>(
        out, gemv_xs, W, bias, rows, N, K, split, sh.red, NoPrologue{},
        WarpNormX{gemv_xs, hin, delta, hout, norm_w, sh.norm, K, eps}, silu_rt, late_rt);
  else if constexpr (DEFER == 1)
    gemv_dispatch<MODE, true, decltype(pro), NormScaleEpilogue, GEMV_UNROLL, LEAN>(
        out, gemv_xs, W, bias, rows, N, K, split, sh.red, pro, NormScaleEpilogue{sh.norm, K, eps}, silu_rt, late_rt);
  else
    gemv_dispatch<MODE, true, decltype(pro), NoEpilogue, GEMV_UNROLL, LEAN>(out, gemv_xs, W, bias, rows, N, K, split,
                                                                     sh.red, pro, NoEpilogue{}, silu_rt, late_rt);
}

extern "C" __global__ void __maxnreg__(GEMV_PLAIN_REGS)
gemv_bf16(bf16* __restrict__ out,         // [rows, N] bf16
          const bf16* __restrict__ x,     // [rows, K] bf16
          const bf16* __restrict__ W,     // [N, K] bf16 (PyTorch Linear layout)
          const bf16* __restrict__ bias,  // [N] bf16, or NULL
          unsigned int rows, unsigned int N, unsigned int K,
          unsigned int split) { FG_KERNEL_BEGIN();  // warps per column tile (the k split), or 0: gemv_split
  gemv_entry<false>(out, x, W, bias, rows, N, K, split);
}

extern "C" __global__ void __maxnreg__(GEMV_PLAIN_REGS)
gemv_bf16_f32out(float* __restrict__ out,       // [rows, N] f32 (logits)
                 const bf16* __restrict__ x,     // [rows, K] bf16
                 const bf16* __restrict__ W,     // [N, K] bf16
                 const bf16* __restrict__ bias,  // [N] bf16, or NULL
                 unsigned int rows, unsigned int N, unsigned int K,
          unsigned int split) { FG_KERNEL_BEGIN();  // warps per column tile (the k split), or 0: gemv_split
  gemv_entry<true>(out, x, W, bias, rows, N, K, split);
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
                  unsigned int rows, unsigned int N, unsigned int K,
          unsigned int split, float eps) { FG_KERNEL_BEGIN();  // split: warps per column tile, or 0: gemv_split
  gemv_rmsnorm_entry<OUT_BF16>(out, hidden_in, delta, hidden_out, norm_w, W, bias, rows, N, K, split, eps);
}

extern "C" __global__ void __maxnreg__(GEMV_MAX_REGS)
gemv_rmsnorm_bf16_f32out(float* __restrict__ out,             // [rows, N] f32 (logits)
                         const float* __restrict__ hidden_in,  // [rows, K] f32
                         const bf16* __restrict__ delta,       // [rows, K] bf16, or NULL
                         float* __restrict__ hidden_out,       // [rows, K] f32, or NULL
                         const bf16* __restrict__ norm_w,      // [K] bf16
                         const bf16* __restrict__ W,           // [N, K] bf16
                         const bf16* __restrict__ bias,        // [N] bf16, or NULL
                         unsigned int rows, unsigned int N, unsigned int K,
          unsigned int split, float eps) { FG_KERNEL_BEGIN();  // split: warps per column tile, or 0: gemv_split
  gemv_rmsnorm_entry<OUT_F32>(out, hidden_in, delta, hidden_out, norm_w, W, bias, rows, N, K, split, eps);
}

// act = silu(gate) * up of the MLP straight from the residual stream: gate_up = rmsnorm(hidden_in
// + delta) @ W.T (+ bias) as gemv_rmsnorm_bf16, then act[r, j] = silu_mul(gate_up[r, j],
// gate_up[r, I + j]) as act.cu, without storing gate_up: each warp tile pairs 8 gate rows with
// the 8 matching up rows of W (w_rows_paired). N = 2I rows of W; out: [rows, I].
extern "C" __global__ void __maxnreg__(GEMV_MAX_REGS)
gemv_rmsnorm_silu_bf16(bf16* __restrict__ out,             // [rows, N/2] bf16 activation
                       const float* __restrict__ hidden_in,  // [rows, K] f32
                       const bf16* __restrict__ delta,       // [rows, K] bf16, or NULL
                       float* __restrict__ hidden_out,       // [rows, K] f32, or NULL
                       const bf16* __restrict__ norm_w,      // [K] bf16
                       const bf16* __restrict__ W,           // [N, K] bf16: gate rows, then up rows
                       const bf16* __restrict__ bias,        // [N] bf16, or NULL
                       unsigned int rows, unsigned int N, unsigned int K,
          unsigned int split, float eps) { FG_KERNEL_BEGIN();  // split: warps per column tile, or 0: gemv_split
  if (N & 1u) return;  // gate and up need the same row count
  gemv_rmsnorm_entry<OUT_SILU>(out, hidden_in, delta, hidden_out, norm_w, W, bias, rows, N, K, split, eps);
}

// The decode chain's lean forms (LEAN above): the same parameters, results and bits as
// gemv_bf16 / gemv_rmsnorm_bf16 / gemv_rmsnorm_silu_bf16 for the launches they take:
//   _vec: K % 8 == 0, x and W 16-byte aligned (any rows);
//   _row: rows == 1 besides, K <= 16 * blockDim, hidden_in / hidden_out 16-byte and delta /
//         norm_w 8-byte aligned (the one-row register RMSNorm).
extern "C" __global__ void __maxnreg__(GEMV_PLAIN_REGS)
gemv_bf16_vec(bf16* __restrict__ out, const bf16* __restrict__ x, const bf16* __restrict__ W,
              const bf16* __restrict__ bias, unsigned int rows, unsigned int N, unsigned int K,
              unsigned int split) { FG_KERNEL_BEGIN();
  gemv_entry<false, true>(out, x, W, bias, rows, N, K, split);
}

// Norm + qkv and norm + gate_up + SiLU, the layer's two one-row GEMVs, from one copy of code:
// mode bit 0 clear gives gemv_rmsnorm_bf16's results, set gemv_rmsnorm_silu_bf16's (N = 2I rows
// of W, out [rows, I]). Bit 1: signal dependents after the wait (late), else at the start
// (early); the PTX has a trigger before the wait either way, so fixedgraph/pdl.py takes the
// entry as early, the stricter rule for its successor. Why one entry: each launch's code is
// cold after its PDL wait (an SM keeps code warm through ~40 KB of other code; a layer runs
// ~150 KB), and norm + qkv runs two launches after norm + gate_up with only down_proj's code in
// between: one entry for both ran 0.6B 1% faster than two (docs/BENCHMARKS.md, session 28).
// The launcher signals norm + gate_up late: down_proj's launch and its W copy then wait for the
// MLP's wait instead of landing during o_proj (0.3% faster, sessions 18-19).
// gemv_row_entry is that body; DEFER as gemv_rmsnorm_entry's (0 gemv_rmsnorm_bf16_row, 1 _dn, 2 _dw).
template <int DEFER>
__device__ __forceinline__ void gemv_row_entry(bf16* out, const float* hidden_in, const bf16* delta, float* hidden_out,
                                               const bf16* norm_w, const bf16* W, const bf16* bias, uint32_t rows,
                                               uint32_t N, uint32_t K, uint32_t split, float eps, uint32_t mode) {
  const bool silu = mode & 1u;
  if (silu && (N & 1u)) return;  // gate and up need the same row count (as gemv_rmsnorm_silu_bf16)
  if (DEFER == 2 && rows != 1u) __trap();  // _dw has no prologue to refuse the launch (the launcher's row path)
  gemv_rmsnorm_entry<OUT_ROW, true, DEFER>(out, hidden_in, delta, hidden_out, norm_w, W, bias, rows, N, K, split, eps,
                                           silu, (mode & 2u) != 0);
}

// The one-row norm GEMV entries, one per DEFER (their parameters, launch rules and mode bits the same).
#define GEMV_ROW_ENTRY(NAME, DEFER)                                                                              \
  extern "C" __global__ void __maxnreg__(GEMV_MAX_REGS)                                                        \
  NAME(bf16* __restrict__ out, const float* __restrict__ hidden_in, const bf16* __restrict__ delta,             \
       float* __restrict__ hidden_out, const bf16* __restrict__ norm_w, const bf16* __restrict__ W,             \
       const bf16* __restrict__ bias, unsigned int rows, unsigned int N, unsigned int K, unsigned int split,    \
       float eps, unsigned int mode) { FG_KERNEL_BEGIN();                                                       \
    gemv_row_entry<DEFER>(out, hidden_in, delta, hidden_out, norm_w, W, bias, rows, N, K, split, eps, mode);    \
  }

GEMV_ROW_ENTRY(gemv_rmsnorm_bf16_row, 0)

// gemv_rmsnorm_bf16_row with the norm deferred (FIXEDGRAPH_NORM_DEFER=1; an A/B entry, off by
// default): x = bf16(norm_w * h) in shared memory, and each output is (x @ W.T)[n] / rms(h) (+
// bias) (SiLU pairs: gate and up scaled so, then silu_mul), so the CTA's sum of squares, its
// square root and the scaling wait for the multiply instead of the multiply waiting for them
// (one barrier after h arrives instead of two). Rounding: x is rounded once from w * h where the
// other entries round h / rms first (add_rmsnorm's points); results agree to ~1 bf16 step.
GEMV_ROW_ENTRY(gemv_rmsnorm_bf16_row_dn, 1)

// gemv_rmsnorm_bf16_row_dn with x built warp by warp (FIXEDGRAPH_NORM_DEFER=2; an A/B entry, off by
// default): each warp loads and writes only the x of its own k slice (WarpNormX above), so no CTA
// barrier stands between h's arrival and a warp's first mma; the S warps of a tile sum their
// slices' squares in the k-split reduce. Same results as _dn up to the order of that sum. Takes
// launches whose k slice is at most 8 k32 blocks (kblocks <= 8 * split; traps otherwise).
GEMV_ROW_ENTRY(gemv_rmsnorm_bf16_row_dw, 2)

// out = (bf16(silu(gate)) * up) @ W.T (+ bias), gate = gate_up[:, :K], up = gate_up[:, K:].
// Dynamic smem: rows * xs_stride(K) * 2 bytes.
extern "C" __global__ void __maxnreg__(GEMV_MAX_REGS)
gemv_silu_bf16(bf16* __restrict__ out,            // [rows, N] bf16
               const bf16* __restrict__ gate_up,  // [rows, 2K] bf16: gate in [:, :K], up in [:, K:]
               const bf16* __restrict__ W,        // [N, K] bf16
               const bf16* __restrict__ bias,     // [N] bf16, or NULL
               unsigned int rows, unsigned int N, unsigned int K,
          unsigned int split) { FG_KERNEL_BEGIN();  // warps per column tile (the k split), or 0: gemv_split
  __shared__ GemvShared sh;
  if ((blockDim.x & 31u) != 0 || blockDim.x > 32 * GEMV_MAX_WARPS) return;
  auto pro = [&]() { silu_prologue(gemv_xs, gate_up, rows, K); };
  gemv_dispatch<OUT_BF16, true>(out, gemv_xs, W, bias, rows, N, K, split, sh.red, pro);
}

// ---- head + argmax ------------------------------------------------------------------------
// Greedy decode's last two ops in one: logits = rmsnorm(h) @ W.T as gemv_rmsnorm_bf16_f32out,
// and tokens[r] = argmax(logits[r]) with argmax_rows' order (ties to the lowest index, NaN
// below every number), without a second launch or a re-read of the logits. Each thread keeps
// the best (value, index) of its two rows over the outputs it stores; the CTA reduces them into
// part[r, blockIdx.x]; the CTA that arrives last at `counter` (an atomic inc, which wraps it back
// to 0 for the next launch) reduces the gridDim.x partials of each row and writes the token
// (and the host-mapped ring slot, as argmax_rows does).
struct ArgmaxEpilogue {  // only the running bests live in registers through the GEMV
  static constexpr bool kScale = false, kWarpX = false;
  float bv[2];  // best of rows 2t + j over this thread's outputs
  int bi[2];

  __device__ __forceinline__ ArgmaxEpilogue() {
    bv[0] = bv[1] = __int_as_float(0x7fc00000);  // NaN: loses to every number
    bi[0] = bi[1] = kNone;
  }
  __device__ __forceinline__ void value(int j, uint32_t, uint32_t n, float v) {
    if (better(v, (int)n, bv[j], bi[j])) { bv[j] = v; bi[j] = (int)n; }
  }
};

__device__ __forceinline__ void warp_best(float& v, int& i, unsigned from) {  // xor lanes from..16
#pragma unroll
  for (unsigned o = from; o < 32; o <<= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, i, o);
    if (better(ov, oi, v, i)) { v = ov; i = oi; }
  }
}

// After the GEMV, on every thread of every CTA: CTA partials, then the last arriver's merge.
__device__ __forceinline__ void argmax_finish(ArgmaxEpilogue& e, int* tokens, int* ring, const unsigned* step,
                                              unsigned ring_len, int2* part, unsigned* counter, uint32_t rows) {
  __shared__ float sval[GEMV_MAX_WARPS][GEMV_ROWS];
  __shared__ int sidx[GEMV_MAX_WARPS][GEMV_ROWS];
  __shared__ unsigned s_last;
  const uint32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
#pragma unroll
  for (int j = 0; j < 2; ++j) warp_best(e.bv[j], e.bi[j], 4);  // over g (lane bits 2..4)
  if (lane < 4) {  // lane t holds rows 2t, 2t+1
#pragma unroll
    for (int j = 0; j < 2; ++j) { sval[warp][2 * lane + j] = e.bv[j]; sidx[warp][2 * lane + j] = e.bi[j]; }
  }
  __syncthreads();
  if (threadIdx.x < rows) {
    float v = __int_as_float(0x7fc00000);
    int i = kNone;
    for (uint32_t w = 0; w < warps; ++w)
      if (better(sval[w][threadIdx.x], sidx[w][threadIdx.x], v, i)) { v = sval[w][threadIdx.x]; i = sidx[w][threadIdx.x]; }
    __stcg(part + (size_t)threadIdx.x * gridDim.x + blockIdx.x, make_int2(__float_as_int(v), i));
  }
  // The arrival as the decode attention's (attention_decode.cuh, arrive_and_merge): the barrier
  // orders every part store before thread 0's release, and thread 0's acquire before every
  // thread's part loads (one MEMBAR, where a __threadfence() in every thread before and after
  // compiled to two MEMBAR.SC.GPU).
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned old;
    asm volatile("atom.acq_rel.gpu.global.inc.u32 %0, [%1], %2;" : "=r"(old) : "l"(counter), "r"(gridDim.x - 1u)
                 : "memory");
    s_last = old == gridDim.x - 1u;
  }
  __syncthreads();
  if (!s_last) return;
  if (warp < rows) {  // warp r reduces row r (rows <= 8 <= warps)
    float v = __int_as_float(0x7fc00000);
    int i = kNone;
    // Every lane's parts in flight at once, from one base at constant offsets (row r's parts are
    // contiguous): one L2 round trip for up to 32 * PARTS CTAs, where a loop with one load a
    // step took a round trip per 4 parts a lane.
    constexpr int PARTS = 16;
    const int2* pr = part + (size_t)warp * gridDim.x;
    for (uint32_t b0 = lane; b0 < gridDim.x; b0 += 32 * PARTS) {
      int2 p[PARTS];
#pragma unroll
      for (int j = 0; j < PARTS; ++j)
        p[j] = b0 + 32u * j < gridDim.x ? __ldcg(pr + b0 + 32u * j) : make_int2(0x7fc00000, kNone);
#pragma unroll
      for (int j = 0; j < PARTS; ++j)
        if (better(__int_as_float(p[j].x), p[j].y, v, i)) { v = __int_as_float(p[j].x); i = p[j].y; }
    }
    warp_best(v, i, 1);
    if (lane == 0) {
      const int tok = i == kNone ? 0 : i;  // an all-NaN row: index 0, as argmax_rows
      tokens[warp] = tok;
      if (ring && ring_len) ring[(size_t)((step ? step[0] : 0u) % ring_len) * rows + warp] = tok;
    }
  }
}

// logits = rmsnorm(hidden_in + delta) @ W.T (+ bias) in f32, and tokens[r] = argmax(logits[r]).
// part: [rows, gridDim.x] int2 scratch; counter: [1] u32, zero before the first launch (and
// after every complete one). Dynamic smem as gemv_rmsnorm_bf16. Needs K % 8 == 0 and a
// 16-byte aligned W (else it writes nothing).
extern "C" __global__ void __maxnreg__(GEMV_MAX_REGS)
gemv_rmsnorm_argmax(float* __restrict__ logits,           // [rows, N] f32, written
                    int* __restrict__ tokens,             // [rows] i32, written
                    int* __restrict__ ring,               // [ring_len, rows] i32 (host-mapped), or NULL
                    const unsigned* __restrict__ step,    // [1] u32 decode step counter, or NULL
                    unsigned int ring_len,                // ring depth in steps (ignored without a ring)
                    int2* part,                           // [rows, gridDim.x] scratch (other CTAs read it)
                    unsigned int* counter,                // [1] u32 arrival counter, 0 at rest
                    const float* __restrict__ hidden_in,  // [rows, K] f32
                    const bf16* __restrict__ delta,       // [rows, K] bf16, or NULL
                    float* __restrict__ hidden_out,       // [rows, K] f32, or NULL
                    const bf16* __restrict__ norm_w,      // [K] bf16
                    const bf16* __restrict__ W,           // [N, K] bf16
                    const bf16* __restrict__ bias,        // [N] bf16, or NULL
                    unsigned int rows, unsigned int N, unsigned int K, float eps) { FG_KERNEL_BEGIN();
  __shared__ GemvShared sh;
  // 16-byte path only (the scalar one spills with the argmax state): the launcher refuses K % 8
  // != 0 and the model then runs gemv_rmsnorm_bf16_f32out + argmax_rows instead.
  if ((blockDim.x & 31u) != 0 || blockDim.x > 32 * GEMV_MAX_WARPS || rows > GEMV_ROWS || (K & 7) != 0 ||
      !aligned16(W))
    return;
  ArgmaxEpilogue epi;
  auto pro = [&]() { rmsnorm_prologue(gemv_xs, hidden_in, delta, hidden_out, norm_w, rows, K, eps, sh.norm); };
  gemv_body<true, OUT_F32, true, decltype(pro), ArgmaxEpilogue, GEMV_UNROLL, HwGrid, (kWEvictFirst >= 2)>(
      logits, gemv_xs, W, bias, rows, N, K, 0u, sh.red, pro, epi);  // default split
  argmax_finish(epi, tokens, ring, step, ring_len, part, counter, rows);
}
