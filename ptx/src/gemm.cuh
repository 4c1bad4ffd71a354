// Inline-PTX helpers shared by the matrix kernels (gemm.cu, gemv.cu): tensor-core mma,
// ldmatrix, cp.async and streaming loads. Header only; no entries here.
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

typedef __nv_bfloat16 bf16;

// D += A * B for one m16n8k16 tile, bf16 inputs, fp32 accumulate.
// a: 4 regs (2 bf16 each) of the 16x16 A fragment; b: 2 regs of the 16x8 B fragment;
// d: 4 fp32 of the 16x8 C fragment (rows g and g+8, columns 2t and 2t+1 of lane = 4g + t).
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                               uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Four 8x8 b16 matrices from shared memory; lane 8i+j gives row j of matrix i.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t smem_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr));
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared async copy; src_bytes = 0 zero-fills the destination (tails) and
// reads nothing, so `src` only has to be some valid address.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// FG_W_EVICT_FIRST: the weight loads and preload copies of the GEMVs under an evict-first L2
// policy; 0: none, 1 (the default): the decode chain's lean entries (_vec, _row), 2: every entry,
// the head's gemv_rmsnorm_argmax included (A/B builds: tools/build_ptx.py gemv -D
// FG_W_EVICT_FIRST=N --out DIR). A token's 0.5-16 GB of weights pass through the 50 MB L2 once
// each; the hint may let what is re-read (K/V of recent keys, activations) stay (a guess at the
// mechanism, not measured). Session 38, same-call A/Bs of every entry with a createpolicy
// register (866f13f), ms a token: Qwen2.5-0.5B -2.5%, Llama-3.2-1B -0.8%, Qwen2.5-7B -0.8%,
// Qwen3-8B -0.6% (4k: -0.9%), Llama-3-8B -0.6%, Llama-3.2-3B -0.6%, Qwen3-4B -0.2%; Qwen3-0.6B
// +0.1-0.3% (4k: +0.3-1.0%); that form spilled 20-32 bytes in four 80-register entries.
// Session 39, mode 1 against 0 in one call: Qwen3-0.6B -0.8% (128 + 512 and 4096 + 64).
// The policy is an immediate operand (0x12F0000000000000: createpolicy's evict-first encoding,
// CUTLASS's CacheHintSm90::EVICT_FIRST; ptxas puts it in the load's uniform memory descriptor);
// under 2 gemv_rmsnorm_argmax still spills 16 bytes and gemv_rmsnorm_silu_bf16 24 (the ld hint
// does it), under 1 nothing spills. ld's own .L2::evict_first modifier needs .v8 loads (sm_100).
#ifndef FG_W_EVICT_FIRST
#define FG_W_EVICT_FIRST 1
#endif
constexpr int kWEvictFirst = FG_W_EVICT_FIRST;

// cp_async_16 for weights (EF: with the evict-first L2 policy).
template <bool EF = false>
__device__ __forceinline__ void cp_async_16_w(uint32_t dst, const void* src, uint32_t src_bytes) {
  if constexpr (EF)
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, 0x12F0000000000000;\n" ::"r"(dst),
                 "l"(src), "r"(src_bytes)
                 : "memory");
  else
    cp_async_16(dst, src, src_bytes);
}

// 16 bytes of a weight matrix that is read once per launch, or zeros when !pred (nothing is
// read then, so p may be out of bounds). Predicated inside the asm so that a run of these
// compiles to straight-line loads, all in flight together, with no branches between them.
// Skips L1 (W would only evict x there) and asks L2 for the 128-byte line (the GEMV's k-split
// warps read its other 64 bytes at the same time). Measured on the H200 (8B decode, A/B in one
// call): L2::256B 4.570 ms/token, L2::128B 4.472, no hint 4.894.
// EF: with the evict-first L2 policy (FG_W_EVICT_FIRST above).
// HINT / POLICY: the load's cache-hint qualifier and its policy operand, or both empty.
#define FG_LD_STREAM_V4(HINT, POLICY)                                                                   \
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n"                                           \
               " mov.b32 %0, 0;\n mov.b32 %1, 0;\n mov.b32 %2, 0;\n mov.b32 %3, 0;\n"                   \
               " @p ld.global.nc.L1::no_allocate" HINT ".L2::128B.v4.u32 {%0,%1,%2,%3}, [%4]" POLICY ";\n}\n" \
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)                                             \
               : "l"(p), "r"((int)pred))
template <bool EF = false>
__device__ __forceinline__ uint4 ld_stream_v4(const void* p, bool pred) {
  uint4 v;
  if constexpr (EF)
    FG_LD_STREAM_V4(".L2::cache_hint", ", 0x12F0000000000000");
  else
    FG_LD_STREAM_V4("", "");
  return v;
}

// 16 bytes of an activation that many warps of the SM re-read (kept in L1), or zeros.
__device__ __forceinline__ uint4 ld_reuse_v4(const void* p, bool pred) {
  uint4 v;
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n"
      " mov.b32 %0, 0;\n mov.b32 %1, 0;\n mov.b32 %2, 0;\n mov.b32 %3, 0;\n"
      " @p ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];\n}\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p), "r"((int)pred));
  return v;
}

// 8 consecutive bf16 at p[k .. k+7] with each element past `limit` read as 0. Scalar loads:
// the slow path for rows that are not 16-byte aligned (K % 8 != 0 or an odd base address).
__device__ __forceinline__ uint4 ld_bf16x8_scalar(const bf16* p, uint32_t k, uint32_t limit) {
  const unsigned short* q = reinterpret_cast<const unsigned short*>(p);
  uint32_t w[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    uint32_t lo = (k + 2 * j < limit) ? __ldg(q + k + 2 * j) : 0u;
    uint32_t hi = (k + 2 * j + 1 < limit) ? __ldg(q + k + 2 * j + 1) : 0u;
    w[j] = lo | (hi << 16);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ __forceinline__ bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}
