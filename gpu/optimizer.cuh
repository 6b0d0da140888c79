/* optimizer.cuh: the optimizers of TBE_SEMANTICS.md section 5 on the GPU (EXACT_SGD, row-wise
 * Adagrad with weight decay NONE / L2 / DECOUPLE) and the write-back (RNE or stochastic rounding
 * keyed by Philox4x32-10). Twin of ref/optimizer.c and ref/philox.c; not the gradient sums.
 *
 * Order (the same IEEE fp32 operations as ref/optimizer.h, spelled with intrinsics): a group of
 * W lanes holds a row, lane l owning columns VEC*(l + W*c) + v (backward_impl.cuh, bwd_shape).
 * The momentum's sum of squares is the 32-lane scheme, in registers and shuffles
 * (dev_sum_squares): scheme lane k chains fma over the columns d = k, k + 32, ... in ascending
 * d (a lane past D holds +0), then the butterfly s_k + s_(k xor o) for o = 16 .. 1; the lane
 * holding scheme lane 0 does the reference's additions of the reference's operands, and every
 * lane takes that lane's result.
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

/* The hyper-parameters as a kernel built for the common case sees them: FAST (row-wise Adagrad
 * without stochastic rounding; the host picks such a kernel only where that holds) makes the
 * optimizer's kind and the rounding constants, so the kernel tests neither at run time. */
template <bool FAST> __device__ __forceinline__ dev_opt dev_opt_as(const dev_opt &o)
{
  dev_opt r = o;
  if (FAST) {
    r.kind = REF_OPT_ROWWISE_ADAGRAD;
    r.sr = 0;
  }
  return r;
}

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

/* How a group of W lanes holding a row as bwd_shape lays it out (lane l's value (c, v) is
 * column d = VEC*(l + W*c) + v) holds the 32-lane scheme, whose lane k chains the columns
 * d = 32*j + k.
 * With T = W*VEC columns per chunk, column d's scheme lane is VEC*(l mod G) + v and its chain
 * position l / G + R*c, where R = T/32 (1 when T <= 32) lanes share each chain and G = W/R.
 * Lanes l and l + G*i (i < R) thus hold the same VEC scheme lanes at interleaved positions;
 * dev_chain_split exchanges their values so that lane a + G*b keeps H = VEC/R whole chains,
 * of scheme lanes k = VEC*a + H*b + u (its slots u < H). The butterfly's partner of k at step
 * o is then slot u xor o of the same lane (o < H), lane l xor G*(o/H) (H <= o < VEC), lane
 * l xor o/VEC (o >= VEC), or, for o >= T (rows under 32 columns), a scheme lane that no column
 * reaches, +0 in the scheme. */
template <int W, int CPL, int VEC> struct dev_lanes {
  static constexpr int T = W * VEC;
  static constexpr int R = T > 32 ? T / 32 : 1;
  static constexpr int H = VEC / R, G = W / R;
};

/* One exchange of dev_chain_split between this lane and lane l xor m (m = G or 2G): of the
 * pair (a, b) of this lane's values, the lane whose bit m is 0 keeps a, the other b, and each
 * gets its partner's copy of that one. lo and hi: the kept value as the lane with bit m 0 and
 * the lane with bit m 1 held it (the earlier and the later chain position). */
__device__ __forceinline__ void dev_pair_swap(float a, float b, bool up, int m, int width,
                                              unsigned mask, float &lo, float &hi)
{
  const float r = __shfl_xor_sync(mask, up ? a : b, m, width);
  lo = up ? r : a;
  hi = up ? b : r;
}

/* q[i*H + u] = this lane's slot u at chain position i + R*c (i < R), from yc, the group's
 * values of chunk c as bwd_shape lays them out. R = 4 takes two exchanges: over lane bit 2G (the kept
 * pairs are v and v + 2), then over lane bit G (v and v + 1), which leaves lane a + G*b with
 * the chain of v = b, the copies of the lanes b' = 0, 1, 2, 3 in that order. */
template <int W, int CPL, int VEC>
__device__ __forceinline__ void dev_chain_split(const float (&yc)[VEC], int lane, unsigned mask,
                                                float (&q)[VEC])
{
  typedef dev_lanes<W, CPL, VEC> L;
  const bool b0 = lane & L::G, b1 = lane & (2 * L::G);
  if constexpr (L::R == 1) {
#pragma unroll
    for (int v = 0; v < VEC; v++)
      q[v] = yc[v];
  } else if constexpr (L::R == 2) {
#pragma unroll
    for (int u = 0; u < 2; u++)
      dev_pair_swap(yc[u], yc[u + 2], b0, L::G, W, mask, q[u], q[u + 2]);
  } else {
    static_assert(L::R == 4, "a chain is shared by 1, 2 or 4 lanes");
    float lo[2], hi[2];
#pragma unroll
    for (int u = 0; u < 2; u++)
      dev_pair_swap(yc[u], yc[u + 2], b1, 2 * L::G, W, mask, lo[u], hi[u]);
    dev_pair_swap(lo[0], lo[1], b0, L::G, W, mask, q[0], q[1]);
    dev_pair_swap(hi[0], hi[1], b0, L::G, W, mask, q[2], q[3]);
  }
}

/* The 32-lane sum of squares of the row whose column VEC*(lane + W*c) + v is y(c, v), in
 * registers (y is asked one c at a time, so a wide row's values need not all be live at once;
 * columns from D on are not read). Each slot's chain fmas its columns in ascending order from
 * +0, predicated on the column being below D; the butterfly then adds s_k + s_(k xor o) for
 * o = 16 .. 1 in every lane (fp32 addition is commutative: the operands' order is free). By
 * induction over the steps, after step o the holder of every k < o has ref_lane_dot's s_k, got
 * by the same addition of the same operands, so the holder of k = 0 (lane 0, slot 0) ends with
 * its result; every lane gets lane 0's. */
template <int W, int CPL, int VEC, typename Y>
__device__ __forceinline__ float dev_sum_squares(const Y &y, int32_t D, int lane, unsigned mask)
{
  typedef dev_lanes<W, CPL, VEC> L;
  constexpr int H = L::H;
  /* this lane's first column at chain position j is 32*j + a0 (its slots add H*b + u < VEC,
   * and D is a multiple of VEC, so a slot's column is below D exactly when that one is) */
  const int32_t a0 = VEC * (lane % L::G);
  float s[H];
#pragma unroll
  for (int u = 0; u < H; u++)
    s[u] = 0.0f;
#pragma unroll
  for (int c = 0; c < CPL; c++) { /* chain positions j = i + R*c in ascending order */
    float yc[VEC], q[VEC];
#pragma unroll
    for (int v = 0; v < VEC; v++)
      yc[v] = y(c, v);
    dev_chain_split<W, CPL, VEC>(yc, lane, mask, q);
#pragma unroll
    for (int i = 0; i < L::R; i++)
      if (32 * (i + L::R * c) + a0 < D)
#pragma unroll
        for (int u = 0; u < H; u++)
          s[u] = __fmaf_rn(q[i * H + u], q[i * H + u], s[u]);
  }
#pragma unroll
  for (int o = 16; o >= 1; o /= 2) {
    float t[H];
#pragma unroll
    for (int u = 0; u < H; u++) {
      if (o >= L::T) /* the partner is a scheme lane that no column reaches */
        t[u] = 0.0f;
      else if (o < H)
        t[u] = s[u ^ o];
      else
        t[u] = __shfl_xor_sync(mask, s[u], o >= VEC ? o / VEC : L::G * (o / H), W);
    }
#pragma unroll
    for (int u = 0; u < H; u++)
      s[u] = __fadd_rn(s[u], t[u]);
  }
  return __shfl_sync(mask, s[0], 0, W);
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
 * gradient, r its loaded weights and momentum, m where the momentum goes (Adagrad). Every lane
 * in mask calls it; a group that is not `live` (it only keeps its warp's steps together)
 * computes and stores nothing. */
template <int W, int CPL, int VEC, bool RAW>
__device__ __forceinline__ void dev_update_row(const dev_opt &o, void *weights, tbe_dtype wt,
                                               int32_t D, const float (&g)[CPL][VEC],
                                               dev_row<W, CPL, VEC, RAW> &r, float *m,
                                               uint64_t key, int lane, unsigned mask, bool live)
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
    const bool l2 = o.wd == REF_WD_L2;
    const auto y = [&](int c, int v) { /* the gradient the momentum sees */
      return l2 ? __fmaf_rn(o.lambda, rw[c][v], g[c][v]) : g[c][v];
    };
    const float s = dev_sum_squares<W, CPL, VEC>(y, D, lane, mask);
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
