// Prefill GEMM: out[m, n] = sum_k x[m, k] * W[n, k] (+ bias[n]), tensor cores (mma.sync).
//
// x [M, K] is the mma's row-major A and W [N, K] (PyTorch Linear layout) is its column-major
// B, so both operands are K-contiguous in global and shared memory and ldmatrix (no
// transpose) yields both fragments. A CTA of 8 warps (2 along M x 4 along N) computes one
// BM x BN tile, streaming K in BK = 32 steps through a STAGES-deep cp.async ring.
// - Tile configs (chosen from M, N only, so the launcher can size the grid the same way):
//   128x128, 3 stages when there are >= GEMM_LARGE_MIN_TILES such tiles (big prefill), else
//   64x64, 6 stages (small M or N: more CTAs, deeper prefetch for the W-bound case).
// - Shared memory rows are 64 bytes (32 bf16); the 16-byte chunk c of row r lives at chunk
//   c ^ ((r >> 1) & 3), which makes both the cp.async stores and the ldmatrix reads of 8
//   consecutive rows hit 8 distinct bank groups.
// - Tails: rows past M / N and k past K are zero-filled by cp.async (src-size 0). K % 8 != 0
//   (or a base not 16-byte aligned) cannot use 16-byte copies; it takes a slower path of
//   scalar loads stored synchronously into the same ring.
// NOTE: blockDim must be (GEMM_THREADS, 1, 1); any gridDim.x is correct (tiles are taken
// grid-stride); shared memory is static (48 KiB), launch with 0 bytes of dynamic smem.
#include <cuda_bf16.h>
#include <stdint.h>

#include "gemm.cuh"
#include "pdl.cuh"

#define GEMM_THREADS 256
#define GEMM_BK 32
#define GEMM_SMEM_BYTES 49152
#define GEMM_LARGE_MIN_TILES 264u  // two CTAs on each of 132 SMs
#define GEMM_GROUP_M 8             // tile rows walked together so their W tiles stay in L2

__device__ __forceinline__ uint32_t swz(uint32_t row, uint32_t chunk) {  // byte offset in a tile
  return row * 64 + ((chunk ^ ((row >> 1) & 3)) << 4);
}

// Copy rows [r0, r0 + ROWS) x k [k0, k0 + 32) of src [limit_rows, K] into a swizzled tile.
template <int ROWS>
__device__ __forceinline__ void load_tile(uint32_t tile_smem, const bf16* __restrict__ src, uint32_t r0,
                                          uint32_t limit_rows, uint32_t k0, uint32_t K, bool vec) {
#pragma unroll
  for (int i = 0; i < (ROWS * 4 + GEMM_THREADS - 1) / GEMM_THREADS; ++i) {
    const uint32_t idx = threadIdx.x + i * GEMM_THREADS;
    if ((ROWS * 4) % GEMM_THREADS != 0 && idx >= ROWS * 4) break;
    const uint32_t row = idx >> 2, chunk = idx & 3;
    const uint32_t r = r0 + row, k = k0 + chunk * 8;
    const bool row_ok = r < limit_rows;
    const bf16* p = src + (size_t)(row_ok ? r : 0) * K;
    const uint32_t dst = tile_smem + swz(row, chunk);
    if (vec) {  // block-uniform branch
      const bool ok = row_ok && k < K;  // K % 8 == 0: whole chunk in or out
      cp_async_16(dst, ok ? p + k : src, ok ? 16u : 0u);
    } else {
      const uint4 v = ld_bf16x8_scalar(p, k, row_ok ? K : 0);
      asm volatile("st.shared.v4.u32 [%0], {%1,%2,%3,%4};\n" ::"r"(dst), "r"(v.x), "r"(v.y), "r"(v.z),
                   "r"(v.w)
                   : "memory");
    }
  }
}

template <int BM, int BN, int STAGES, bool F32OUT>
__device__ __forceinline__ void gemm_tiles(void* __restrict__ out,         // [M, N] bf16 or f32
                                           const bf16* __restrict__ x,     // [M, K] bf16
                                           const bf16* __restrict__ W,     // [N, K] bf16
                                           const bf16* __restrict__ bias,  // [N] bf16 or NULL
                                           uint32_t M, uint32_t N, uint32_t K, bool vec,
                                           unsigned char* smem) {
  constexpr int WM = BM / 2, WN = BN / 4;  // warp tile
  constexpr int MI = WM / 16, NI = WN / 8;  // mma tiles per warp
  constexpr uint32_t A_BYTES = BM * GEMM_BK * 2, STAGE_BYTES = (BM + BN) * GEMM_BK * 2;
  static_assert(STAGES * STAGE_BYTES <= GEMM_SMEM_BYTES, "ring exceeds static shared memory");
  static_assert(NI % 2 == 0, "B fragments are loaded two n8 tiles at a time");

  const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint32_t wm = warp >> 2, wn = warp & 3;
  const uint32_t g = lane >> 2, t = lane & 3;
  const uint32_t base = smem_u32(smem);
  const uint32_t tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  const uint32_t KT = (K + GEMM_BK - 1) / GEMM_BK;
  // Pairs of outputs can be stored together when every row start stays aligned for them.
  const bool pair_ok = (N % 2 == 0) && (reinterpret_cast<uintptr_t>(out) % (F32OUT ? 8 : 4) == 0);

#pragma unroll 1
  for (uint32_t tile = blockIdx.x; tile < tiles_m * tiles_n; tile += gridDim.x) {
    const uint32_t per_group = GEMM_GROUP_M * tiles_n, first_m = tile / per_group * GEMM_GROUP_M;
    const uint32_t group_rows = min(tiles_m - first_m, (uint32_t)GEMM_GROUP_M);
    const uint32_t m0 = (first_m + (tile % per_group) % group_rows) * BM;
    const uint32_t n0 = (tile % per_group) / group_rows * BN;

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int j = 0; j < NI; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.f;

#pragma unroll 1
    for (int s = 0; s < STAGES - 1; ++s) {  // prologue: fill all but one stage
      if (s < KT) {
        load_tile<BM>(base + s * STAGE_BYTES, x, m0, M, s * GEMM_BK, K, vec);
        load_tile<BN>(base + s * STAGE_BYTES + A_BYTES, W, n0, N, s * GEMM_BK, K, vec);
      }
      cp_async_commit();  // NOTE: always commit, so group i is always k-tile i
    }

#pragma unroll 1
    for (uint32_t kt = 0; kt < KT; ++kt) {
      cp_async_wait<STAGES - 2>();  // k-tile kt has landed (this thread's copies)...
      __syncthreads();              // ...everyone's, and stage (kt-1) % STAGES is free again
      const uint32_t next = kt + STAGES - 1;
      if (next < KT) {
        const uint32_t st = base + (next % STAGES) * STAGE_BYTES;
        load_tile<BM>(st, x, m0, M, next * GEMM_BK, K, vec);
        load_tile<BN>(st + A_BYTES, W, n0, N, next * GEMM_BK, K, vec);
      }
      cp_async_commit();

      const uint32_t sa = base + (kt % STAGES) * STAGE_BYTES, sb = sa + A_BYTES;
#pragma unroll
      for (int kk = 0; kk < GEMM_BK / 16; ++kk) {
        uint32_t af[MI][4], bfr[NI][2];
#pragma unroll
        for (int i = 0; i < MI; ++i)  // lanes 0-15: rows 0-15 at k 0-7; lanes 16-31: k 8-15
          ldmatrix_x4(af[i], sa + swz(wm * WM + i * 16 + (lane & 15), kk * 2 + (lane >> 4)));
#pragma unroll
        for (int j = 0; j < NI; j += 2) {  // matrices: (n0-7,k0-7) (n0-7,k8-15) (n8-15,k0-7) (n8-15,k8-15)
          uint32_t r[4];
          ldmatrix_x4(r, sb + swz(wn * WN + j * 8 + ((lane >> 4) << 3) + (lane & 7), kk * 2 + ((lane >> 3) & 1)));
          bfr[j][0] = r[0]; bfr[j][1] = r[1]; bfr[j + 1][0] = r[2]; bfr[j + 1][1] = r[3];
        }
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
          for (int j = 0; j < NI; ++j)
            mma_bf16_16816(acc[i][j], af[i][0], af[i][1], af[i][2], af[i][3], bfr[j][0], bfr[j][1]);
      }
    }
    cp_async_wait<0>();
    __syncthreads();  // NOTE: the next tile's prologue overwrites stages other warps may still read

#pragma unroll
    for (int j = 0; j < NI; ++j) {
      const uint32_t n = n0 + wn * WN + j * 8 + 2 * t;  // this lane's columns n, n + 1
      const float b0 = (bias && n < N) ? __bfloat162float(bias[n]) : 0.f;
      const float b1 = (bias && n + 1 < N) ? __bfloat162float(bias[n + 1]) : 0.f;
#pragma unroll
      for (int i = 0; i < MI; ++i) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // h = 0: row g of the mma tile; h = 1: row g + 8
          const uint32_t m = m0 + wm * WM + i * 16 + g + 8 * h;
          if (m >= M || n >= N) continue;
          const float v0 = acc[i][j][2 * h] + b0, v1 = acc[i][j][2 * h + 1] + b1;
          const size_t o = (size_t)m * N + n;
          if (F32OUT) {
            float* po = static_cast<float*>(out) + o;
            if (pair_ok && n + 1 < N) *reinterpret_cast<float2*>(po) = make_float2(v0, v1);
            else { po[0] = v0; if (n + 1 < N) po[1] = v1; }
          } else {
            bf16* po = static_cast<bf16*>(out) + o;
            if (pair_ok && n + 1 < N) *reinterpret_cast<__nv_bfloat162*>(po) = __floats2bfloat162_rn(v0, v1);
            else { po[0] = __float2bfloat16_rn(v0); if (n + 1 < N) po[1] = __float2bfloat16_rn(v1); }
          }
        }
      }
    }
  }
}

template <bool F32OUT>
__device__ __forceinline__ void gemm_entry(void* out, const bf16* x, const bf16* W, const bf16* bias,
                                           uint32_t M, uint32_t N, uint32_t K) {
  __shared__ __align__(128) unsigned char smem[GEMM_SMEM_BYTES];
  const bool vec = (K & 7) == 0 && aligned16(x) && aligned16(W);
  const bool large = ((M + 127) / 128) * ((N + 127) / 128) >= GEMM_LARGE_MIN_TILES;
  if (large) gemm_tiles<128, 128, 3, F32OUT>(out, x, W, bias, M, N, K, vec, smem);
  else gemm_tiles<64, 64, 6, F32OUT>(out, x, W, bias, M, N, K, vec, smem);
}

extern "C" __global__ void __launch_bounds__(GEMM_THREADS, 2)
gemm_bf16(bf16* __restrict__ out,         // [M, N] bf16
          const bf16* __restrict__ x,     // [M, K] bf16
          const bf16* __restrict__ W,     // [N, K] bf16 (PyTorch Linear layout)
          const bf16* __restrict__ bias,  // [N] bf16, or NULL
          unsigned int M, unsigned int N, unsigned int K) { FG_KERNEL_BEGIN();
    FG_PDL_WAIT();  /* PDL: wait for the predecessor grid before any global read */
  gemm_entry<false>(out, x, W, bias, M, N, K);
}

extern "C" __global__ void __launch_bounds__(GEMM_THREADS, 2)
gemm_bf16_f32out(float* __restrict__ out,       // [M, N] f32
                 const bf16* __restrict__ x,     // [M, K] bf16
                 const bf16* __restrict__ W,     // [N, K] bf16
                 const bf16* __restrict__ bias,  // [N] bf16, or NULL
                 unsigned int M, unsigned int N, unsigned int K) { FG_KERNEL_BEGIN();
    FG_PDL_WAIT();  /* PDL: wait for the predecessor grid before any global read */
  gemm_entry<true>(out, x, W, bias, M, N, K);
}
