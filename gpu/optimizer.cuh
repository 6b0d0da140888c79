/* optimizer.cuh: the optimizers of TBE_SEMANTICS.md section 5 on the GPU (EXACT_SGD, row-wise
 * Adagrad with weight decay NONE / L2 / DECOUPLE) and the write-back (RNE or stochastic rounding
 * keyed by Philox4x32-10). Twin of ref/optimizer.c and ref/philox.c; not the gradient sums.
 *
 * Order (the same IEEE fp32 operations as ref/optimizer.h, spelled with intrinsics): a group of
 * W lanes holds a row, lane l owning columns d = l + W*c. The momentum's sum of squares is the
 * 32-lane scheme: lane l chains fma over its columns in ascending c (W = 32 gives d = l, l+32,
 * ...; W < 32 only occurs with D <= W, one column per lane, and the lanes past W of the 32-lane
 * scheme hold +0, which the butterfly adds exactly), then the butterfly s + s(l xor o) for
 * o = 16 .. 1 (o < W). Float addition is commutative, so s_l + s_m equals s_m + s_l.
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

/* Stores the updated fp32 value of column col of the row with linear key `key` at element e. */
__device__ __forceinline__ void dev_store_w(const dev_opt &o, void *w, tbe_dtype t, int64_t e,
                                            float v, int32_t col, uint64_t key)
{
  if (t == TBE_FP32)
    ((float *)w)[e] = v;
  else
    ((uint16_t *)w)[e] = o.sr ? dev_sr_round(v, t, dev_sr_draw(o, col, key)) : dev_to_16(v, t);
}

/* The butterfly of the 32-lane scheme within a group of W lanes (all W lanes call it). */
template <int W> __device__ __forceinline__ float dev_lane_butterfly(float s, unsigned mask)
{
#pragma unroll
  for (int o = W / 2; o >= 1; o /= 2)
    s = __fadd_rn(s, __shfl_xor_sync(mask, s, o, W));
  return s;
}

/* Updates one row held by a group of W lanes: g[c] is column d = lane + W*c of the row's
 * gradient (CPL columns per lane), D the row's width, w_at the element of its column 0, m the
 * row's momentum (Adagrad; NULL for SGD). Every lane of the group calls it. */
template <int W, int CPL>
__device__ __forceinline__ void dev_update_row(const dev_opt &o, void *weights, tbe_dtype wt,
                                               int64_t w_at, int32_t D, const float (&g)[CPL],
                                               float *m, uint64_t key, int lane, unsigned mask)
{
  float w[CPL];
#pragma unroll
  for (int c = 0; c < CPL; c++) {
    const int d = lane + W * c;
    w[c] = d < D ? dev_load_w(weights, wt, w_at + d) : 0.0f;
  }
  if (o.kind == REF_OPT_SGD) {
#pragma unroll
    for (int c = 0; c < CPL; c++)
      w[c] = __fmaf_rn(-o.lr, g[c], w[c]);
  } else {
    float s = 0.0f;
#pragma unroll
    for (int c = 0; c < CPL; c++) {
      if (lane + W * c < D) {
        const float gd = o.wd == REF_WD_L2 ? __fmaf_rn(o.lambda, w[c], g[c]) : g[c];
        s = __fmaf_rn(gd, gd, s);
      }
    }
    s = dev_lane_butterfly<W>(s, mask);
    const float mm = __fadd_rn(*m, __fdiv_rn(s, (float)D));
    const float mu = __fdiv_rn(o.lr, __fadd_rn(__fsqrt_rn(mm), o.eps));
    const float cw = o.wd == REF_WD_L2         ? __fmaf_rn(-mu, o.lambda, 1.0f)
                     : o.wd == REF_WD_DECOUPLE ? __fmaf_rn(-o.lr, o.lambda, 1.0f)
                                               : 1.0f;
#pragma unroll
    for (int c = 0; c < CPL; c++)
      w[c] = __fmaf_rn(-mu, g[c], cw == 1.0f ? w[c] : __fmul_rn(cw, w[c]));
    __syncwarp(mask);
    if (lane == 0)
      *m = mm;
  }
#pragma unroll
  for (int c = 0; c < CPL; c++) {
    const int d = lane + W * c;
    if (d < D)
      dev_store_w(o, weights, wt, w_at + d, w[c], d, key);
  }
}

#endif
