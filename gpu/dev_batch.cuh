/* dev_batch.cuh: a batch as the kernels see it (device pointers and sizes) and the small device
 * helpers every kernel shares (index loads, fp16/bf16 widening, stores). Not a public header:
 * only gpu/ includes it; the rest of tbecheck talks to gpu/ through tbe_gpu.h.
 */
#ifndef GPU_DEV_BATCH_CUH
#define GPU_DEV_BATCH_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "tbe.h"

/* Device copies of a tbe_batch plus its layout. Arrays are device pointers. */
struct dev_batch {
  const void *weights;
  const int64_t *table_offset; /* [num_tables + 1] */
  const int64_t *E;            /* [num_tables] */
  const int32_t *D;            /* [num_tables] */
  const int32_t *ftm;          /* [T] feature_table_map */
  const int64_t *B_offsets;    /* [T + 1] first bag of each feature */
  const int64_t *D_offsets;    /* [T + 1] first output column of each feature */
  const int64_t *bag_out;      /* [total_B] first output element of each bag (VBE), or NULL */
  void *indices;               /* [N] repaired in place by the bounds check */
  void *offsets;               /* [total_B + 1] */
  const float *psw;            /* [N] or NULL */
  void *out;
  int64_t N, total_B, total_D;
  int32_t T, num_tables;
  tbe_dtype wdtype, out_dtype;
  tbe_itype itype;
  tbe_pool pool;
};

/* The bounds check's device-side state (one per call, zeroed before it). */
struct dev_bounds {
  unsigned long long counter;         /* bad bags + last offset + invalid indices */
  unsigned long long first_bad_bag;   /* FATAL: lowest bad bag (total_B = last offset), or ~0 */
  unsigned long long first_bad_index; /* FATAL: lowest invalid position, or ~0 */
};

__device__ __forceinline__ int64_t ld_index(const void *a, tbe_itype t, int64_t i)
{
  return t == TBE_I32 ? (int64_t)__ldg((const int32_t *)a + i)
                      : (int64_t)__ldg((const long long *)a + i);
}

/* Same as ld_index without the read-only cache path, for arrays the same launch may write. */
__device__ __forceinline__ int64_t ld_index_rw(const void *a, tbe_itype t, int64_t i)
{
  return t == TBE_I32 ? (int64_t)((const int32_t *)a)[i] : (int64_t)((const long long *)a)[i];
}

__device__ __forceinline__ void st_index(void *a, tbe_itype t, int64_t i, int64_t v)
{
  if (t == TBE_I32)
    ((int32_t *)a)[i] = (int32_t)v;
  else
    ((long long *)a)[i] = v;
}

/* An accumulator value as an output element, one rounding (TBE_SEMANTICS.md 3): fp32, or the
 * bits of fp16/bf16 (fp64 narrows to 16 bits in one step, F2F.F16.F64 / F2F.BF16.F64 on sm_90). */
__device__ __forceinline__ float out_f32(float v) { return v; }
__device__ __forceinline__ float out_f32(double v) { return __double2float_rn(v); }
__device__ __forceinline__ uint32_t out_16(float v, tbe_dtype t)
{
  return t == TBE_FP16 ? __half_as_ushort(__float2half_rn(v))
                       : __bfloat16_as_ushort(__float2bfloat16_rn(v));
}
__device__ __forceinline__ uint32_t out_16(double v, tbe_dtype t)
{
  return t == TBE_FP16 ? __half_as_ushort(__double2half(v))
                       : __bfloat16_as_ushort(__double2bfloat16(v));
}

/* Stores an accumulator value (float or double) into element i of the output. */
template <typename A> __device__ __forceinline__ void st_out(void *out, tbe_dtype t, int64_t i, A v)
{
  if (t == TBE_FP32)
    ((float *)out)[i] = out_f32(v);
  else
    ((uint16_t *)out)[i] = (uint16_t)out_16(v, t);
}

/* The fused bounds check of an index already loaded from position p (TBE_SEMANTICS.md 2): a
 * valid index or -1 passes; an invalid one is counted, and repaired to 0 in the array (or, in
 * FATAL, reported as the lowest position) by the one lane that owns p, and read as 0. */
__device__ __forceinline__ int64_t fused_check(void *indices, tbe_itype it, tbe_bounds_mode mode,
                                               dev_bounds *state, int64_t p, int64_t idx,
                                               int64_t E, bool owner,
                                               unsigned long long &invalid)
{
  if (idx == -1 || (idx >= 0 && idx < E))
    return idx;
  if (owner) {
    invalid++;
    if (mode == TBE_BOUNDS_FATAL)
      atomicMin(&state->first_bad_index, (unsigned long long)p);
    else
      st_index(indices, it, p, 0);
  }
  return 0;
}

/* Bag -> feature by binary search over B_offsets (T + 1 entries). */
__device__ __forceinline__ int32_t bag_feature(const int64_t *B_offsets, int32_t T, int64_t bag)
{
  int32_t lo = 0, hi = T - 1;
  while (lo < hi) {
    int32_t mid = (lo + hi + 1) / 2;
    if (__ldg(B_offsets + mid) <= bag)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

#endif
