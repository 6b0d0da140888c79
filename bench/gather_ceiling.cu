/* gather_ceiling.cu: the plain CUDA gather kernel the issue names as the practical ceiling: one
 * group of G threads per bag, one 16-byte load per thread and row, UNROLL rows in flight,
 * sequential adds. Not tbecheck's forward (gpu/forward.cu): no policy, no bounds check, SUM into
 * fp32 only, one D for every feature.
 *
 * Its numerics are already the normative ones (rows in index order from +0, fp32 adds or fmas
 * for 16-bit weights, fp64 for fp32 weights, one rounding at the store), so its output equals
 * the reference's bit for bit; the benchmark checks that before timing.
 *
 * What makes it fast is what it leaves out: the group size is a template argument, so a thread's
 * bag and lane come from shifts, not from 64-bit divisions; bag numbers are 32-bit; the only
 * loads in front of a bag's rows are its two offsets and its table's start (independent of each
 * other; with VBE also its feature and output position), and a bag's last rows are in flight
 * together like the others (predicated loads, then the adds in position order); the output
 * leaves in 16-byte stores. The weight dtype, per-sample weights and VBE are template arguments
 * too, so the plain fp16 kernel is the same code whatever else is instantiated.
 */
#include <algorithm>
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <vector>

#include "cuda_check.h"
#include "gather_ceiling.h"

namespace {

constexpr int THREADS = 256;

/* A 16-byte load of weights of dtype W: V columns, widened exactly to the reference's
 * accumulator type A (fp32 for 16-bit weights, fp64 for fp32 weights). */
template <typename W> struct row16;

template <> struct row16<__half> {
  static constexpr int V = 8;
  typedef float A;
  static __device__ __forceinline__ void widen(const uint4 &r, A (&x)[V])
  {
    const __half2 *h = (const __half2 *)&r;
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const float2 f = __half22float2(h[e]);
      x[2 * e] = f.x;
      x[2 * e + 1] = f.y;
    }
  }
};

template <> struct row16<__nv_bfloat16> {
  static constexpr int V = 8;
  typedef float A;
  static __device__ __forceinline__ void widen(const uint4 &r, A (&x)[V])
  {
    const unsigned *u = (const unsigned *)&r; /* a bf16 is the top half of its fp32 */
#pragma unroll
    for (int e = 0; e < 4; e++) {
      x[2 * e] = __uint_as_float(u[e] << 16);
      x[2 * e + 1] = __uint_as_float(u[e] & 0xffff0000u);
    }
  }
};

template <> struct row16<float> {
  static constexpr int V = 4;
  typedef double A;
  static __device__ __forceinline__ void widen(const uint4 &r, A (&x)[V])
  {
    const float *f = (const float *)&r;
#pragma unroll
    for (int e = 0; e < V; e++)
      x[e] = (double)f[e];
  }
};

__device__ __forceinline__ float add_rn(float a, float x) { return __fadd_rn(a, x); }
__device__ __forceinline__ double add_rn(double a, double x) { return __dadd_rn(a, x); }
__device__ __forceinline__ float fma_rn(float w, float x, float a) { return __fmaf_rn(w, x, a); }
__device__ __forceinline__ double fma_rn(double w, double x, double a)
{
  return __fma_rn(w, x, a);
}

/* acc += row, or acc = fma(pw, row, acc) when WEIGHTED, column by column. */
template <typename W, bool WEIGHTED>
__device__ __forceinline__ void add_row(typename row16<W>::A (&acc)[row16<W>::V], const uint4 &r,
                                        float pw)
{
  typedef typename row16<W>::A A;
  A x[row16<W>::V];
  row16<W>::widen(r, x);
#pragma unroll
  for (int e = 0; e < row16<W>::V; e++)
    acc[e] = WEIGHTED ? fma_rn((A)pw, x[e], acc[e]) : add_rn(acc[e], x[e]);
}

/* The launch's arguments: weights of the kernel's W, indices and offsets of its IT; psw only
 * when weighted; bag_feature and bag_out (the layout's) only with VBE. */
struct args {
  const void *w;
  const int64_t *table_start; /* [T] first element of feature t's table */
  const void *indices, *offsets;
  const float *psw;
  const int32_t *bag_feature;
  const int64_t *bag_out;
  int T, B, bags;
  float *out;
};

/* G threads per bag (a power of two <= THREADS, so a group never straddles a block); thread
 * `lane` owns columns [V lane, V lane + V) of every row of its bag. */
template <typename W, int G, int UNROLL, typename IT, bool WEIGHTED, bool VBE>
__global__ void __launch_bounds__(THREADS)
    ceiling_kernel(const W *__restrict__ w, const int64_t *__restrict__ table_start,
                   const IT *__restrict__ indices, const IT *__restrict__ offsets,
                   const float *__restrict__ psw, const int32_t *__restrict__ bag_feature,
                   const int64_t *__restrict__ bag_out, int T, int B, int bags,
                   float *__restrict__ out)
{
  constexpr int V = row16<W>::V, D = V * G;
  const int gid = (int)blockIdx.x * THREADS + (int)threadIdx.x;
  const int bag = gid / G, lane = gid % G;
  if (bag >= bags)
    return;
  int t;
  int64_t first_out;
  if constexpr (VBE) {
    t = __ldg(bag_feature + bag);
    first_out = __ldg(bag_out + bag);
  } else {
    t = bag / B;
    const int b = bag - t * B;
    first_out = ((int64_t)b * T + t) * D;
  }
  const uint4 *table = (const uint4 *)(w + __ldg(table_start + t)) + lane;
  const int64_t start = (int64_t)__ldg(offsets + bag), end = (int64_t)__ldg(offsets + bag + 1);
  typename row16<W>::A acc[V] = {};
  int64_t p = start;
  for (; p + UNROLL <= end; p += UNROLL) {
    uint4 r[UNROLL];
    float pw[UNROLL] = {};
#pragma unroll
    for (int q = 0; q < UNROLL; q++) {
      r[q] = __ldg(table + (int64_t)__ldg(indices + p + q) * G);
      if constexpr (WEIGHTED)
        pw[q] = __ldg(psw + p + q);
    }
#pragma unroll
    for (int q = 0; q < UNROLL; q++)
      add_row<W, WEIGHTED>(acc, r[q], pw[q]);
  }
  /* the last < UNROLL rows: predicated loads, in flight together, then the adds in order */
  if (p < end) {
    const int n = (int)(end - p);
    uint4 r[UNROLL - 1];
    float pw[UNROLL - 1] = {};
#pragma unroll
    for (int q = 0; q < UNROLL - 1; q++)
      if (q < n) {
        r[q] = __ldg(table + (int64_t)__ldg(indices + p + q) * G);
        if constexpr (WEIGHTED)
          pw[q] = __ldg(psw + p + q);
      }
#pragma unroll
    for (int q = 0; q < UNROLL - 1; q++)
      if (q < n)
        add_row<W, WEIGHTED>(acc, r[q], pw[q]);
  }
  float4 *o = (float4 *)(out + first_out + lane * V);
#pragma unroll
  for (int k = 0; k < V / 4; k++)
    o[k] = make_float4((float)acc[4 * k], (float)acc[4 * k + 1], (float)acc[4 * k + 2],
                       (float)acc[4 * k + 3]);
}

typedef void (*kernel_fn)(unsigned blocks, const args &a);

template <typename W, int G, int UNROLL, typename IT, bool WEIGHTED, bool VBE>
void launch(unsigned blocks, const args &a)
{
  ceiling_kernel<W, G, UNROLL, IT, WEIGHTED, VBE><<<blocks, THREADS>>>(
      (const W *)a.w, a.table_start, (const IT *)a.indices, (const IT *)a.offsets, a.psw,
      a.bag_feature, a.bag_out, a.T, a.B, a.bags, a.out);
}

template <typename W, int UNROLL, typename IT, bool WEIGHTED, bool VBE> kernel_fn pick_g(int G)
{
  switch (G) {
  case 1: return launch<W, 1, UNROLL, IT, WEIGHTED, VBE>;
  case 2: return launch<W, 2, UNROLL, IT, WEIGHTED, VBE>;
  case 4: return launch<W, 4, UNROLL, IT, WEIGHTED, VBE>;
  case 8: return launch<W, 8, UNROLL, IT, WEIGHTED, VBE>;
  case 16: return launch<W, 16, UNROLL, IT, WEIGHTED, VBE>;
  case 32: return launch<W, 32, UNROLL, IT, WEIGHTED, VBE>;
  case 64: return launch<W, 64, UNROLL, IT, WEIGHTED, VBE>;
  case 128: return launch<W, 128, UNROLL, IT, WEIGHTED, VBE>;
  default: return launch<W, 256, UNROLL, IT, WEIGHTED, VBE>;
  }
}

template <typename W, typename IT, bool WEIGHTED, bool VBE> kernel_fn pick_u(int G, int unroll)
{
  return unroll == 8 ? pick_g<W, 8, IT, WEIGHTED, VBE>(G) : pick_g<W, 4, IT, WEIGHTED, VBE>(G);
}

template <typename W, typename IT> kernel_fn pick_wv(int G, int unroll, bool weighted, bool vbe)
{
  if (weighted)
    return vbe ? pick_u<W, IT, true, true>(G, unroll) : pick_u<W, IT, true, false>(G, unroll);
  return vbe ? pick_u<W, IT, false, true>(G, unroll) : pick_u<W, IT, false, false>(G, unroll);
}

template <typename W>
kernel_fn pick_it(tbe_itype width, int G, int unroll, bool weighted, bool vbe)
{
  return width == TBE_I32 ? pick_wv<W, int32_t>(G, unroll, weighted, vbe)
                          : pick_wv<W, long long>(G, unroll, weighted, vbe);
}

kernel_fn pick(tbe_dtype wdtype, tbe_itype width, int G, int unroll, bool weighted, bool vbe)
{
  switch (wdtype) {
  case TBE_FP32: return pick_it<float>(width, G, unroll, weighted, vbe);
  case TBE_BF16: return pick_it<__nv_bfloat16>(width, G, unroll, weighted, vbe);
  default: return pick_it<__half>(width, G, unroll, weighted, vbe);
  }
}

/* A host index array in the kernel's width (values unchanged: the caller checked they fit). */
std::vector<char> widened(const void *a, tbe_itype from, tbe_itype to, int64_t n)
{
  std::vector<char> v((size_t)n * tbe_itype_size(to));
  for (int64_t i = 0; i < n; i++)
    tbe_iset(v.data(), to, i, tbe_iget(a, from, i));
  return v;
}

/* A device copy of n bytes of host memory at h (NULL: none) into *d. */
template <typename T> tbe_status upload(T **d, const void *h, size_t n)
{
  *d = nullptr;
  if (!h)
    return tbe_ok();
  GPU_TRY(cudaMalloc(d, n));
  GPU_TRY(cudaMemcpy(*d, h, n, cudaMemcpyHostToDevice));
  return tbe_ok();
}

} // namespace

extern "C" tbe_status gather_ceiling_run(const tbe_batch *b, const tbe_layout *l, tbe_itype width,
                                         int reps, float *ms, int *unroll, float *out)
{
  if (b->out_dtype != TBE_FP32 || b->pool != TBE_POOL_SUM)
    return tbe_error(TBE_EINVAL, "case", -1, "the ceiling kernel takes SUM into fp32 only");
  const int D = b->D[b->feature_table_map[0]];
  const int V = b->wdtype == TBE_FP32 ? 4 : 8; /* columns per 16-byte load */
  const int G = D / V;
  std::vector<int64_t> ts(b->T);
  for (int32_t t = 0; t < b->T; t++) {
    if (b->D[b->feature_table_map[t]] != D)
      return tbe_error(TBE_EINVAL, "D", t, "the ceiling kernel needs one D for every feature");
    ts[t] = b->table_offset[b->feature_table_map[t]];
    if (ts[t] % V)
      return tbe_error(TBE_EINVAL, "table_offset", t, "the ceiling kernel needs 16-byte rows");
  }
  if (D % V || G > THREADS || (G & (G - 1)))
    return tbe_error(TBE_EINVAL, "D", 0,
                     "the ceiling kernel needs D / %d a power of two <= %d for %s weights", V,
                     THREADS, tbe_dtype_name(b->wdtype));
  if (l->total_B * G > INT32_MAX - THREADS || (width == TBE_I32 && b->N > INT32_MAX))
    return tbe_error(TBE_EINVAL, "case", -1, "too large for the ceiling kernel's 32-bit counts");
  const bool weighted = b->per_sample_weights != nullptr, vbe = b->R != 0;
  const size_t isz = tbe_itype_size(width);
  const std::vector<char> idx = widened(b->indices, b->itype, width, b->N);
  const std::vector<char> off = widened(b->offsets, b->itype, width, l->total_B + 1);
  args a = {};
  a.T = b->T;
  a.B = b->B;
  a.bags = (int)l->total_B;
  const size_t wbytes = tbe_dtype_size(b->wdtype) * (size_t)b->table_offset[b->num_tables];
  void *d_w, *d_idx, *d_off;
  int64_t *d_ts, *d_bag_out;
  float *d_psw, *d_out;
  int32_t *d_bag_feature;
  tbe_status st;
  if ((st = upload(&d_w, b->weights, wbytes)).code != TBE_OK ||
      (st = upload(&d_ts, ts.data(), 8 * (size_t)b->T)).code != TBE_OK ||
      (st = upload(&d_idx, idx.data(), idx.size())).code != TBE_OK ||
      (st = upload(&d_off, off.data(), off.size())).code != TBE_OK ||
      (st = upload(&d_psw, weighted ? b->per_sample_weights : nullptr, 4 * (size_t)b->N))
              .code != TBE_OK ||
      (st = upload(&d_bag_feature, vbe ? l->bag_feature : nullptr, 4 * (size_t)l->total_B))
              .code != TBE_OK ||
      (st = upload(&d_bag_out, vbe ? l->bag_out : nullptr, 8 * (size_t)l->total_B)).code !=
          TBE_OK)
    return st;
  GPU_TRY(cudaMalloc(&d_out, 4 * (size_t)l->out_elems));
  a.w = d_w;
  a.table_start = d_ts;
  a.indices = d_idx;
  a.offsets = d_off;
  a.psw = d_psw;
  a.bag_feature = d_bag_feature;
  a.bag_out = d_bag_out;
  a.out = d_out;
  const unsigned blocks = (unsigned)((l->total_B * G + THREADS - 1) / THREADS);
  cudaEvent_t ev[2];
  GPU_TRY(cudaEventCreate(&ev[0]));
  GPU_TRY(cudaEventCreate(&ev[1]));
  std::vector<float> t(reps);
  *ms = 0;
  const int depths[2] = {4, 8};
  for (int u : depths) {
    const kernel_fn k = pick(b->wdtype, width, G, u, weighted, vbe);
    for (int i = -3; i < reps; i++) {
      GPU_TRY(cudaEventRecord(ev[0]));
      k(blocks, a);
      GPU_TRY(cudaGetLastError());
      GPU_TRY(cudaEventRecord(ev[1]));
      GPU_TRY(cudaEventSynchronize(ev[1]));
      if (i >= 0)
        GPU_TRY(cudaEventElapsedTime(&t[i], ev[0], ev[1]));
    }
    std::sort(t.begin(), t.end());
    if (*ms == 0 || t[reps / 2] < *ms) {
      *ms = t[reps / 2];
      *unroll = u;
      GPU_TRY(cudaMemcpy(out, d_out, 4 * (size_t)l->out_elems, cudaMemcpyDeviceToHost));
    }
  }
  cudaEventDestroy(ev[0]);
  cudaEventDestroy(ev[1]);
  cudaFree(d_w);
  cudaFree(d_ts);
  cudaFree(d_idx);
  cudaFree(d_off);
  cudaFree(d_psw);
  cudaFree(d_bag_feature);
  cudaFree(d_bag_out);
  cudaFree(d_out);
  return tbe_ok();
}
