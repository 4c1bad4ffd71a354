// Prologues of the fused GEMV entries (gemv.cu): each CTA builds the GEMV's activation x in
// shared memory from the previous op's output, so the op before the GEMV needs no launch.
// - rmsnorm: x = bf16(norm_w * bf16(h / sqrt(mean(h^2) + eps))), h = hidden_in + float(delta)
//   (add_rmsnorm's rounding points, embed_norm.cu); its deferred form (DEFER below; the entries
//   gemv_rmsnorm_bf16_row_dn / _dw in gemv.cu): x = bf16(norm_w * h), 1/rms applied to the outputs;
// - silu:    x = bf16(bf16(silu(gate)) * up) (silu_mul's rounding points, act.cu).
// Shared x layout: row r at xs + r * xs_stride(K); k in [K, 32 * ceil(K / 32)) holds zeros so
// the GEMV's k32 blocks need no tail test. Header only; no entries here.
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

#include "common_ops.cuh"
#include "pdl.cuh"

__device__ __forceinline__ uint32_t dynamic_smem_bytes() {
  uint32_t v;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(v));
  return v;
}

// Which block of a GEMV's grid this CTA is, how many blocks take its tiles grid-stride, the
// bytes of shared memory after x that hold the W preload, what a CTA does first (begin) and
// the wait before its first read of a predecessor's output. HwGrid: the launch's own
// (blockIdx.x, gridDim.x, the dynamic shared memory, nothing, the PDL wait). (Static members:
// a policy type, not an argument, so the entries compile exactly as they would without it.)
struct HwGrid {
  static __device__ __forceinline__ uint32_t bid() { return blockIdx.x; }
  static __device__ __forceinline__ uint32_t nblk() { return gridDim.x; }
  static __device__ __forceinline__ uint32_t pre_bytes() { return dynamic_smem_bytes(); }
  static __device__ __forceinline__ void begin() {}
  static __device__ __forceinline__ void wait() { FG_PDL_WAIT(); }
};

// The decode chain's lean entries: the launch's own grid, but the CTA lets the successor grid
// launch at its start (griddepcontrol.launch_dependents before its W preload) instead of after
// its wait, so the successor's CTAs take free SM slots and copy their own W a whole launch
// earlier. Sound because every successor reads before its wait only W (constant) or, the fused
// decode attention, what grids before the nearest late-signalling grid wrote (pdl.cuh).
struct HwGridEarly : HwGrid {
  static __device__ __forceinline__ void begin() { FG_PDL_TRIGGER(); }
  static __device__ __forceinline__ void wait() { FG_PDL_WAIT_ONLY(); }
};


#define GEMV_MAX_WARPS 16  // blockDim.x <= 512
#define GEMV_PRO_UNROLL 2  // vectors a thread loads before using any (more spill at 80 registers)

// Elements between shared x rows: a multiple of 8 (16-byte chunks stay aligned) that is 32
// mod 64, so the rows g and g+1 that one 8-lane phase of an ld.shared.v4 reads fall in
// opposite halves of the 32 banks (conflict-free). fixedgraph/ops/gemv.py mirrors it.
__device__ __forceinline__ uint32_t xs_stride(uint32_t K) { return ((K + 63u) & ~63u) + 32u; }

// Zeros in k = K .. 32*ceil(K/32) - 1 of every row (the GEMV reads whole k32 blocks).
__device__ __forceinline__ void xs_zero_tail(bf16* xs, uint32_t rows, uint32_t K) {
  const uint32_t pad = ((K + 31u) & ~31u) - K, stride = xs_stride(K);
  for (uint32_t i = threadIdx.x; i < rows * pad; i += blockDim.x)
    xs[(i / pad) * stride + K + i % pad] = __float2bfloat16_rn(0.0f);
}

// ---- rmsnorm ----------------------------------------------------------------------------
// Vectors i = r * nvec + c of all rows are taken in one flat loop so that a thread's loads of
// every row are in flight together; each thread keeps one sum of squares per row of its
// 8-row pass in registers (statically indexed), so the sum order is fixed (deterministic).
template <int V, class Grid = HwGrid>
__device__ __forceinline__ void rmsnorm_rows(bf16* __restrict__ xs,              // smem rows r0..
                                             const float* __restrict__ hin,      // [rows, K] f32
                                             const bf16* __restrict__ delta,     // [rows, K] or NULL
                                             float* __restrict__ hout,           // [rows, K] or NULL
                                             const bf16* __restrict__ norm_w,    // [K] bf16
                                             uint32_t r0, uint32_t nrows, uint32_t K, float eps,
                                             float (*red)[GEMV_MAX_WARPS]) {     // [9][warps] smem
  const uint32_t nvec = K / V, total = nrows * nvec, stride = xs_stride(K), bd = blockDim.x;
  const uint32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = bd >> 5;
  const size_t base = (size_t)r0 * K;
  const bool write_h = hout && Grid::bid() == 0;
  // h = hin + delta (fp32) for vector i of this pass.
  auto load_h = [&](uint32_t i, float (&h)[V]) {
    const size_t off = base + (size_t)(i / nvec) * K + (size_t)(i % nvec) * V;
    load_f32<V>(hin + off, h);
    if (delta) {
      float d[V];
      load_bf16<V>(delta + off, d);
#pragma unroll
      for (int e = 0; e < V; ++e) h[e] += d[e];
    }
    return off;
  };
  // Pass 1: sums of squares per row, and hidden_out (CTA 0 only).
  float ss[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  for (uint32_t i0 = threadIdx.x; i0 < total; i0 += GEMV_PRO_UNROLL * bd) {
    float h[GEMV_PRO_UNROLL][V];
    size_t off[GEMV_PRO_UNROLL];
#pragma unroll
    for (int j = 0; j < GEMV_PRO_UNROLL; ++j)
      if (i0 + j * bd < total) off[j] = load_h(i0 + j * bd, h[j]);
#pragma unroll
    for (int j = 0; j < GEMV_PRO_UNROLL; ++j) {
      const uint32_t i = i0 + j * bd;
      if (i >= total) continue;
      float s = 0.0f;
#pragma unroll
      for (int e = 0; e < V; ++e) s += h[j][e] * h[j][e];
      const uint32_t r = i / nvec;
#pragma unroll
      for (int q = 0; q < 8; ++q) ss[q] += (r == (uint32_t)q) ? s : 0.0f;
      if (write_h) store_f32<V>(hout + off[j], h[j]);
    }
  }
#pragma unroll
  for (int q = 0; q < 8; ++q) {
    const float s = warp_sum(ss[q]);
    if (lane == 0) red[q][warp] = s;
  }
  __syncthreads();
  if (threadIdx.x < nrows) {  // red[8][r]: 1 / rms of row r; exact sqrtf and division, as add_rmsnorm
    float sum = 0.0f;
    for (uint32_t w = 0; w < warps; ++w) sum += red[threadIdx.x][w];
    red[8][threadIdx.x] = 1.0f / sqrtf(sum / (float)K + eps);
  }
  __syncthreads();
  // Pass 2: re-read h (L1/L2 hits) and write x = bf16(w * bf16(h * inv_rms)).
  for (uint32_t i0 = threadIdx.x; i0 < total; i0 += GEMV_PRO_UNROLL * bd) {
    float h[GEMV_PRO_UNROLL][V], wv[GEMV_PRO_UNROLL][V];
#pragma unroll
    for (int j = 0; j < GEMV_PRO_UNROLL; ++j) {
      const uint32_t i = i0 + j * bd;
      if (i < total) {
        load_h(i, h[j]);
        load_bf16<V>(norm_w + (size_t)(i % nvec) * V, wv[j]);
      }
    }
#pragma unroll
    for (int j = 0; j < GEMV_PRO_UNROLL; ++j) {
      const uint32_t i = i0 + j * bd;
      if (i >= total) continue;
      const float inv_rms = red[8][i / nvec];
      float y[V];
#pragma unroll
      for (int e = 0; e < V; ++e) y[e] = wv[j][e] * round_bf16(h[j][e] * inv_rms);
      store_bf16<V>(xs + (size_t)(i / nvec) * stride + (size_t)(i % nvec) * V, y);
    }
  }
  __syncthreads();  // NOTE: red is rewritten by the next 8 rows
}

// One row whose K/4 float4 vectors fit NV per thread: every load of the row (hidden_in, delta
// and norm_w, which no predecessor writes) is issued at once and kept in registers, so the
// prologue is one round trip to L2 instead of rmsnorm_rows' two passes of GEMV_PRO_UNROLL
// vectors each. Same rounding points; the sum of squares is taken in another order. Writes the
// row's zero tail too and ends in the barrier after which x is ready (two barriers in all).
// DEFER (gemv_rmsnorm_bf16_row_dn): x = bf16(norm_w * h), not yet scaled by 1/rms; each warp
// leaves its sum of squares in red[0][warp] and the GEMV scales its outputs by norm_scale(red)
// after the multiply (W (w * h / rms) = (W (w * h)) / rms), so the CTA-wide sum, the square
// root and the scaling are off the path from h's arrival to the first mma: one barrier, not two.
template <int NV, class Grid = HwGrid, bool DEFER = false>
__device__ __forceinline__ void rmsnorm_row_regs(bf16* __restrict__ xs, const float* __restrict__ hin,
                                                 const bf16* __restrict__ delta, float* __restrict__ hout,
                                                 const bf16* __restrict__ norm_w, uint32_t K, float eps,
                                                 float (*red)[GEMV_MAX_WARPS]) {
  const uint32_t nvec = K / 4, bd = blockDim.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float h[NV][4], wv[NV][4];
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    const uint32_t i = threadIdx.x + j * bd;
    if (i < nvec) {
      load_f32<4>(hin + (size_t)i * 4, h[j]);
      load_bf16<4>(norm_w + (size_t)i * 4, wv[j]);
    }
  }
  if (delta) {
#pragma unroll
    for (int j = 0; j < NV; ++j) {
      const uint32_t i = threadIdx.x + j * bd;
      if (i < nvec) {
        float d[4];
        load_bf16<4>(delta + (size_t)i * 4, d);
#pragma unroll
        for (int e = 0; e < 4; ++e) h[j][e] += d[e];
      }
    }
  }
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    const uint32_t i = threadIdx.x + j * bd;
    if (i < nvec) {
#pragma unroll
      for (int e = 0; e < 4; ++e) ss += h[j][e] * h[j][e];
      if (hout && Grid::bid() == 0) store_f32<4>(hout + (size_t)i * 4, h[j]);
    }
  }
  if constexpr (DEFER) {
#pragma unroll
    for (int j = 0; j < NV; ++j) {  // the stores first: they do not wait on the warp's sum
      const uint32_t i = threadIdx.x + j * bd;
      if (i < nvec) {
        float y[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) y[e] = wv[j][e] * h[j][e];
        store_bf16<4>(xs + (size_t)i * 4, y);
      }
    }
    xs_zero_tail(xs, 1, K);
    if (threadIdx.x >= (bd >> 5) && threadIdx.x < GEMV_MAX_WARPS) red[0][threadIdx.x] = 0.0f;  // norm_scale's tree
    ss = warp_sum(ss);
    if (lane == 0) red[0][warp] = ss;
    __syncthreads();  // x and the warps' sums ready; NOTE: red[0] must stay until norm_scale
    return;
  }
  ss = warp_sum(ss);
  if (lane == 0) red[0][warp] = ss;
  __syncthreads();
  // Every thread sums the warps' partials itself, in the same order (the same bits in every
  // thread): one barrier fewer than thread 0 publishing 1/rms. Exact sqrtf and division, as
  // add_rmsnorm.
  float sum = 0.0f;
  for (uint32_t w = 0; w < (bd >> 5); ++w) sum += red[0][w];
  const float inv_rms = 1.0f / sqrtf(sum / (float)K + eps);
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    const uint32_t i = threadIdx.x + j * bd;
    if (i < nvec) {
      float y[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) y[e] = wv[j][e] * round_bf16(h[j][e] * inv_rms);
      store_bf16<4>(xs + (size_t)i * 4, y);
    }
  }
  xs_zero_tail(xs, 1, K);  // k in [K, 32 * ceil(K / 32)): other elements than the stores above
  __syncthreads();  // x ready; NOTE: red is rewritten by the GEMV's k-split reduce
}

#define GEMV_NORM_REG_VECS 4  // rmsnorm_row_regs: float4 vectors per thread (K <= 16 * blockDim)

// 1 / rms of the row whose per-warp sums of squares rmsnorm_row_regs<.., DEFER> left in red[0]
// (zeros past the CTA's warps): a fixed tree over the 16 slots (four 16-byte loads, four adds
// deep), then MUFU's reciprocal square root and division (~2 ulp of fp32, where the undeferred
// path's exact forms branch to slow paths). Straight-line: it is inlined at each of the body's
// store sites, code run cold after the PDL wait (a loop over the warps was ~1.5 KB a site).
// 1 / sqrt(sum / K + eps) by MUFU (the deferred norms' one formula: _dn's norm_scale, _dw's scale_of).
__device__ __forceinline__ float deferred_inv_rms(float sum, uint32_t K, float eps) {
  return rsqrtf(__fdividef(sum, (float)K) + eps);
}

__device__ __forceinline__ float norm_scale(const float (*red)[GEMV_MAX_WARPS], uint32_t K, float eps) {
  static_assert(GEMV_MAX_WARPS == 16, "norm_scale sums red[0] as four float4s");
  const float4* r4 = reinterpret_cast<const float4*>(red[0]);
  const float4 a = r4[0], b = r4[1], c = r4[2], d = r4[3];
  const float sum = (((a.x + a.y) + (a.z + a.w)) + ((b.x + b.y) + (b.z + b.w))) +
                    (((c.x + c.y) + (c.z + c.w)) + ((d.x + d.y) + (d.z + d.w)));
  return deferred_inv_rms(sum, K, eps);
}

// The lean entries' wide register path (GEMV_NORM_REG_VECS vectors a thread, K > 4 * blockDim:
// the 8B-class models) is a called function, so that its ~6 KB of SASS does not lie between the
// small models' one-vector path and the GEMV body they run next. Session 51 (H200, same call,
// alternated): Qwen3-0.6B 128 + 512 0.5786-0.5792 against 0.5847-0.5855 ms/token inline (-1.0%);
// level at 4096 + 64, where the attention's pre-wait K/V reads hide the GEMV's latency.
template <class Grid, bool DEFER = false>
__device__ __noinline__ void rmsnorm_row_regs_wide(bf16* xs, const float* hin, const bf16* delta, float* hout,
                                                   const bf16* norm_w, uint32_t K, float eps,
                                                   float (*red)[GEMV_MAX_WARPS]) {
  rmsnorm_row_regs<GEMV_NORM_REG_VECS, Grid, DEFER>(xs, hin, delta, hout, norm_w, K, eps, red);
}

// x[r, :] for every row into shared memory; ends with a barrier (x is then ready).
// LEAN (the *_row entries): only the one-row register path is compiled; a launch it does not
// fit traps (the launcher never makes one: fixedgraph/ops/gemv.py's row_path).
// DEFER (LEAN only): x = bf16(norm_w * h), the outputs scaled by norm_scale (rmsnorm_row_regs).
template <bool LEAN = false, class Grid = HwGrid, bool DEFER = false>
__device__ __forceinline__ void rmsnorm_prologue(bf16* xs, const float* hin, const bf16* delta, float* hout,
                                                 const bf16* norm_w, uint32_t rows, uint32_t K, float eps,
                                                 float (*red)[GEMV_MAX_WARPS]) {
  // 16-byte f32 and 8-byte bf16 accesses when every row start is aligned for them.
  const bool vec = K % 4 == 0 && aligned_to(hin, 16) && (!hout || aligned_to(hout, 16)) &&
                   (!delta || aligned_to(delta, 8)) && aligned_to(norm_w, 8);
  if (rows == 1 && vec && K / 4 <= GEMV_NORM_REG_VECS * blockDim.x) {
    // LEAN: as many register vectors per thread as the row needs (one for K <= 4 * blockDim, the
    // small models), so the code run after the wait is that straight line, not four predicated
    // copies; the same per-element order and bits.
    if (LEAN && K / 4 <= blockDim.x)
      rmsnorm_row_regs<1, Grid, DEFER>(xs, hin, delta, hout, norm_w, K, eps, red);
    else if (LEAN)
      rmsnorm_row_regs_wide<Grid, DEFER>(xs, hin, delta, hout, norm_w, K, eps, red);  // ends in a barrier
    else
      rmsnorm_row_regs<GEMV_NORM_REG_VECS, Grid>(xs, hin, delta, hout, norm_w, K, eps, red);  // ends in a barrier
    return;
  }
  static_assert(LEAN || !DEFER, "the deferred norm has only the lean one-row path");
  if constexpr (LEAN) {
    __trap();
  } else {
    for (uint32_t r0 = 0; r0 < rows; r0 += 8) {
      const uint32_t n = rows - r0 < 8 ? rows - r0 : 8;
      bf16* x = xs + (size_t)r0 * xs_stride(K);
      if (vec) rmsnorm_rows<4, Grid>(x, hin, delta, hout, norm_w, r0, n, K, eps, red);
      else rmsnorm_rows<1, Grid>(x, hin, delta, hout, norm_w, r0, n, K, eps, red);
    }
    xs_zero_tail(xs, rows, K);
    __syncthreads();
  }
}

// ---- silu (silu_mul_one: common_ops.cuh) -------------------------------------------------

template <int V>
__device__ __forceinline__ void silu_rows(bf16* __restrict__ xs, const bf16* __restrict__ gate_up,
                                          uint32_t rows, uint32_t K) {
  const uint32_t nvec = K / V, total = rows * nvec, stride = xs_stride(K), bd = blockDim.x;
  for (uint32_t i0 = threadIdx.x; i0 < total; i0 += GEMV_PRO_UNROLL * bd) {
    float g[GEMV_PRO_UNROLL][V], u[GEMV_PRO_UNROLL][V];
#pragma unroll
    for (int j = 0; j < GEMV_PRO_UNROLL; ++j) {
      const uint32_t i = i0 + j * bd;
      if (i < total) {
        const bf16* src = gate_up + (size_t)(i / nvec) * 2 * K + (size_t)(i % nvec) * V;
        load_bf16<V>(src, g[j]);
        load_bf16<V>(src + K, u[j]);
      }
    }
#pragma unroll
    for (int j = 0; j < GEMV_PRO_UNROLL; ++j) {
      const uint32_t i = i0 + j * bd;
      if (i < total) {
        float y[V];
#pragma unroll
        for (int e = 0; e < V; ++e) y[e] = silu_mul_one(g[j][e], u[j][e]);
        store_bf16<V>(xs + (size_t)(i / nvec) * stride + (size_t)(i % nvec) * V, y);
      }
    }
  }
}

// x[r, k] = bf16(bf16(silu(gate_up[r, k])) * gate_up[r, K + k]) into shared memory; ends with a
// barrier. 16-byte loads when K % 8 == 0 and gate_up is 16-byte aligned.
__device__ __forceinline__ void silu_prologue(bf16* xs, const bf16* gate_up, uint32_t rows, uint32_t K) {
  if (K % 8 == 0 && aligned_to(gate_up, 16)) silu_rows<8>(xs, gate_up, rows, K);
  else silu_rows<1>(xs, gate_up, rows, K);
  xs_zero_tail(xs, rows, K);
  __syncthreads();
}
