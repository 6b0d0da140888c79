/* optimizer.cuh: the optimizers of TBE_SEMANTICS.md section 5 on the GPU (EXACT_SGD, row-wise
 * Adagrad with weight decay NONE / L2 / DECOUPLE) and the write-back (RNE or stochastic rounding
 * keyed by Philox4x32-10). Twin of ref/optimizer.c and ref/philox.c; not the gradient sums.
 *
 * Order (the same IEEE fp32 operations as ref/optimizer.h, spelled with intrinsics): a group of
 * W lanes holds a row, lane l owning columns VEC*(l + W*c) + v (backward_impl.cuh, bwd_shape).
 * The momentum's sum of squares is the 32-lane scheme, through the group's shared memory:
 * scheme lane k chains fma over the columns d = k, k + 32, ... in ascending d (a lane past D
 * holds +0), then the butterfly s + s(k xor o) for o = 16 .. 1. Float addition is commutative,
 * so s_k + s_m equals s_m + s_k, and every scheme lane ends with the same value.
 */
#ifndef GPU_OPTIMIZER_CUH
#define GPU_OPTIMIZER_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "optimizer.h"
#include "tbe.h"

/* The hyper-parameters as the kernels see them. */
struct dev_opt {
  ref_opt_kind kind;
  ref_wd_mode wd;
  float lr, eps, lambda;
  int sr;
  uint32_t seed_lo, seed_hi, step;
};

/* Philox4x32-10 (ref/philox.c): word 0 of the output for counter (col, row_lo, row_hi, step). */
__device__ __forceinline__ uint32_t dev_sr_draw(const dev_opt &o, int32_t col, uint64_t row)
{
  uint32_t c0 = (uint32_t)col, c1 = (uint32_t)row, c2 = (uint32_t)(row >> 32), c3 = o.step;
  uint32_t k0 = o.seed_lo, k1 = o.seed_hi;
#pragma unroll
  for (int r = 0; r < 10; r++) {
    if (r > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const uint32_t hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    const uint32_t hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  return c0;
}

/* fp32 -> fp16 / bf16 bits with one rounding to nearest even; NaN becomes the quiet NaN with its
 * sign kept, as ref/half.c writes it (CUDA's conversions would give a different NaN pattern). */
__device__ __forceinline__ uint16_t dev_to_16(float x, tbe_dtype t)
{
  const uint32_t u = __float_as_uint(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u)
    return (uint16_t)(((u >> 16) & 0x8000u) | (t == TBE_FP16 ? 0x7E00u : 0x7FC0u));
  return t == TBE_FP16 ? __half_as_ushort(__float2half_rn(x))
                       : __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

__device__ __forceinline__ float dev_from_16(uint16_t h, tbe_dtype t)
{
  return t == TBE_FP16 ? __half2float(__ushort_as_half(h)) : __uint_as_float((uint32_t)h << 16);
}

/* Stochastic rounding of x given the draw u (ref_sr_round, step by step). */
__device__ __forceinline__ uint16_t dev_sr_round(float x, tbe_dtype t, uint32_t u)
{
  uint16_t h = dev_to_16(x, t);
  if (!isfinite(x))
    return h;
  const double ax = fabs((double)x);
  if (fabs((double)dev_from_16(h, t)) > ax)
    h = (uint16_t)(h - 1);
  const int fp16 = t == TBE_FP16, man = fp16 ? 10 : 7, bias = fp16 ? 15 : 127;
  const int field = (h & 0x7FFF) >> man;
  const double q = ldexp(1.0, (field ? field : 1) - bias - man);
  const double frac = __ddiv_rn(__dadd_rn(ax, -fabs((double)dev_from_16(h, t))), q);
  if ((double)u < __dmul_rn(frac, 4294967296.0))
    h = (uint16_t)(h + 1);
  return h;
}

/* Element e of the weights, widened exactly. */
__device__ __forceinline__ float dev_load_w(const void *w, tbe_dtype t, int64_t e)
{
  return t == TBE_FP32 ? ((const float *)w)[e] : dev_from_16(((const uint16_t *)w)[e], t);
}

/* The 16-bit bits stored for the updated fp32 value v of column col of the row with linear
 * key `key`: RNE, or stochastic rounding drawn for (col, key). */
__device__ __forceinline__ uint16_t dev_round_w(const dev_opt &o, float v, tbe_dtype t,
                                                int32_t col, uint64_t key)
{
#if defined(TBE_FAULT_SR_SWAP) /* planted: the Philox counter's row and column swapped */
  return o.sr ? dev_sr_round(v, t, dev_sr_draw(o, (int32_t)key, (uint64_t)col)) : dev_to_16(v, t);
#else
  return o.sr ? dev_sr_round(v, t, dev_sr_draw(o, col, key)) : dev_to_16(v, t);
#endif
}

/* Stores VEC updated columns col.. of a row from element e (aligned to VEC when VEC = 4: one
 * vector store). */
template <int VEC>
__device__ __forceinline__ void dev_store_wv(const dev_opt &o, void *w, tbe_dtype t, int64_t e,
                                             const float (&v)[VEC], int32_t col, uint64_t key)
{
  if (VEC == 4 && t == TBE_FP32) {
    *(float4 *)((float *)w + e) = make_float4(v[0], v[1 % VEC], v[2 % VEC], v[3 % VEC]);
  } else if (VEC == 4) {
    uint32_t h[VEC];
#pragma unroll
    for (int i = 0; i < VEC; i++)
      h[i] = dev_round_w(o, v[i], t, col + i, key);
    *(uint2 *)((uint16_t *)w + e) = make_uint2(h[0] | h[1 % VEC] << 16, h[2 % VEC] | h[3 % VEC] << 16);
  } else if (t == TBE_FP32) {
    ((float *)w)[e] = v[0];
  } else {
    ((uint16_t *)w)[e] = dev_round_w(o, v[0], t, col, key);
  }
}

/* The butterfly of the 32-lane scheme within a group of W lanes (all W lanes call it). */
template <int W> __device__ __forceinline__ float dev_lane_butterfly(float s, unsigned mask)
{
#pragma unroll
  for (int o = W / 2; o >= 1; o /= 2)
    s = __fadd_rn(s, __shfl_xor_sync(mask, s, o, W));
  return s;
}

/* The 32-lane sum of squares of x[0..D) (a group's row in shared memory, D <= P): lane l of
 * the W stands for the scheme's lanes l + W*i; each sums its columns d = lane, lane + 32, ...
 * (unrolled to P's bound, predicated on D); the butterfly's steps o >= W pair lanes within one
 * thread, the rest go through shuffles. Every lane gets lane 0's result. */
template <int W, int P>
__device__ __forceinline__ float dev_sum_squares(const float *x, int32_t D, int lane, unsigned mask)
{
  constexpr int V = 32 / W;
  float s[V];
#pragma unroll
  for (int i = 0; i < V; i++) {
    s[i] = 0.0f;
#pragma unroll
    for (int j = 0; j < (P + 31) / 32; j++) {
      const int32_t d = lane + W * i + 32 * j;
      if (d < D)
        s[i] = __fmaf_rn(x[d], x[d], s[i]);
    }
  }
#pragma unroll
  for (int o = 16; o >= W; o /= 2) {
    float t[V];
#pragma unroll
    for (int i = 0; i < V; i++)
      t[i] = __fadd_rn(s[i], s[i ^ (o / W)]);
#pragma unroll
    for (int i = 0; i < V; i++)
      s[i] = t[i];
  }
  return __shfl_sync(mask, dev_lane_butterfly<W>(s[0], mask), 0, W);
}

/* The stored bits of VEC consecutive weights from element e (aligned to VEC when VEC = 4):
 * fp32 one word each; 16-bit VEC = 4 two per word in raw[0..1]; 16-bit VEC = 1 in raw[0]. They
 * stay raw until they are used (dev_widen), so a load issued before a long stretch of work is
 * not waited for at once. */
template <int VEC>
__device__ __forceinline__ void dev_load_raw(const void *w, tbe_dtype t, int64_t e,
                                             uint32_t (&raw)[VEC])
{
  if (VEC == 4 && t == TBE_FP32) {
    const uint4 u = *(const uint4 *)((const float *)w + e);
    raw[0] = u.x;
    raw[1 % VEC] = u.y;
    raw[2 % VEC] = u.z;
    raw[3 % VEC] = u.w;
  } else if (VEC == 4) {
    const uint2 u = *(const uint2 *)((const uint16_t *)w + e);
    raw[0] = u.x;
    raw[1 % VEC] = u.y;
  } else {
    raw[0] = t == TBE_FP32 ? ((const uint32_t *)w)[e] : ((const uint16_t *)w)[e];
  }
}

/* dev_load_raw's bits widened exactly to fp32. */
template <int VEC>
__device__ __forceinline__ void dev_widen(const uint32_t (&raw)[VEC], tbe_dtype t, float (&x)[VEC])
{
  if (t == TBE_FP32) {
#pragma unroll
    for (int v = 0; v < VEC; v++)
      x[v] = __uint_as_float(raw[v]);
  } else {
#pragma unroll
    for (int v = 0; v < VEC; v++)
      x[v] = dev_from_16(VEC == 4 ? (uint16_t)(raw[v / 2] >> (16 * (v % 2))) : (uint16_t)raw[0], t);
  }
}

/* A row's weights and momentum, loaded before its gradient is summed (their loads overlap the
 * sum's), or after it. RAW keeps the stored bits until the update widens them, so a load issued
 * before a long stretch of work is not waited for at once; without it they are widened at the
 * load (fewer registers: 16 fewer on the D = 64 short kernel). */
template <int W, int CPL, int VEC, bool RAW> struct dev_row {
  uint32_t v[CPL][VEC]; /* RAW: dev_load_raw's bits; else the widened fp32 values' bits */
  float m;
  int64_t at; /* element of column 0 */
};

template <int W, int CPL, int VEC, bool RAW>
__device__ __forceinline__ void dev_row_load(dev_row<W, CPL, VEC, RAW> &r, const void *weights,
                                             tbe_dtype wt, int64_t at, int32_t D, const float *m,
                                             int lane)
{
  r.at = at;
  r.m = m ? *m : 0.0f;
#pragma unroll
  for (int c = 0; c < CPL; c++) {
    if (VEC * (lane + W * c) >= D)
      continue;
    dev_load_raw<VEC>(weights, wt, at + VEC * (lane + W * c), r.v[c]);
    if (!RAW) {
      float f[VEC];
      dev_widen<VEC>(r.v[c], wt, f);
#pragma unroll
      for (int v = 0; v < VEC; v++)
        r.v[c][v] = __float_as_uint(f[v]);
    }
  }
}

/* Updates a row held by a group of W lanes: g[c][v] is column VEC*(lane + W*c) + v of the row's
 * gradient, r its loaded weights and momentum, m where the momentum goes (Adagrad), x D floats
 * of the group's shared memory. Every lane in mask calls it; a group that is not `live` (it
 * only keeps its warp's steps together) computes and stores nothing. */
template <int W, int CPL, int VEC, bool RAW>
__device__ __forceinline__ void dev_update_row(const dev_opt &o, void *weights, tbe_dtype wt,
                                               int32_t D, const float (&g)[CPL][VEC],
                                               dev_row<W, CPL, VEC, RAW> &r, float *m,
                                               uint64_t key, float *x, int lane, unsigned mask,
                                               bool live)
{
  float cw = 1.0f, mu = o.lr, rw[CPL][VEC];
#pragma unroll
  for (int c = 0; c < CPL; c++) {
    if (RAW) {
      dev_widen<VEC>(r.v[c], wt, rw[c]);
    } else {
#pragma unroll
      for (int v = 0; v < VEC; v++)
        rw[c][v] = __uint_as_float(r.v[c][v]);
    }
  }
  if (o.kind == REF_OPT_ROWWISE_ADAGRAD) {
    __syncwarp(mask); /* the group's last row is read */
    const bool l2 = o.wd == REF_WD_L2;
#pragma unroll
    for (int c = 0; c < CPL; c++) {
      const int d0 = VEC * (lane + W * c); /* VEC = 4: D is a multiple of 4 */
      if (d0 >= D)
        continue;
      float y[VEC];
#pragma unroll
      for (int v = 0; v < VEC; v++)
        y[v] = l2 ? __fmaf_rn(o.lambda, rw[c][v], g[c][v]) : g[c][v];
      if (VEC == 4) /* one vector store (x is 16-byte aligned, d0 a multiple of 4) */
        *(float4 *)(x + d0) = make_float4(y[0], y[1 % VEC], y[2 % VEC], y[3 % VEC]);
      else
        x[d0] = y[0];
    }
    __syncwarp(mask);
    const float s = dev_sum_squares<W, W * CPL * VEC>(x, D, lane, mask);
    const float mm = __fadd_rn(r.m, __fdiv_rn(s, (float)D));
    mu = __fdiv_rn(o.lr, __fadd_rn(__fsqrt_rn(mm), o.eps));
    cw = o.wd == REF_WD_L2         ? __fmaf_rn(-mu, o.lambda, 1.0f)
         : o.wd == REF_WD_DECOUPLE ? __fmaf_rn(-o.lr, o.lambda, 1.0f)
                                   : 1.0f;
    if (lane == 0 && live)
      *m = mm;
  }
#pragma unroll
  for (int c = 0; c < CPL; c++) {
    const int d0 = VEC * (lane + W * c);
    if (d0 >= D || !live)
      continue;
    float nw[VEC];
#pragma unroll
    for (int v = 0; v < VEC; v++)
      nw[v] = __fmaf_rn(-mu, g[c][v], cw == 1.0f ? rw[c][v] : __fmul_rn(cw, rw[c][v]));
    dev_store_wv<VEC>(o, weights, wt, r.at + d0, nw, d0, key);
  }
}

#endif
