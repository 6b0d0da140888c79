/* engine.cu: the GPU engine behind gpu_run_forward: uploads a batch, poisons the output between
 * guard regions, runs the bounds check and the forward, times them, and copies everything back.
 * Not a kernel file: the kernels are in bounds.cu and forward.cu.
 */
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bounds.h"
#include "cuda_check.h"
#include "gpu_internal.h"

namespace {

const size_t GUARD = 4096;          /* bytes before and after the output */
const unsigned char POISON = 0xFF;  /* 0xFFFF.. is a NaN in fp32, fp16 and bf16 */

/* Device allocations of one run, freed together. */
struct dev_arena {
  std::vector<void *> ptrs;
  ~dev_arena()
  {
    for (void *p : ptrs)
      cudaFree(p);
  }
  tbe_status alloc(size_t bytes, void **p)
  {
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
    if (e != cudaSuccess)
      return tbe_error(TBE_ENOMEM, "gpu", -1, "cudaMalloc of %zu bytes failed: %s", bytes,
                       cudaGetErrorString(e));
    ptrs.push_back(*p);
    return tbe_ok();
  }
  tbe_status upload(const void *h, size_t bytes, void **p)
  {
    tbe_status st = alloc(bytes, p);
    if (st.code == TBE_OK && bytes)
      GPU_TRY(cudaMemcpy(*p, h, bytes, cudaMemcpyHostToDevice));
    return st;
  }
};

#define TRY(expr)                                                                        \
  do {                                                                                   \
    tbe_status try_st_ = (expr);                                                         \
    if (try_st_.code != TBE_OK)                                                          \
      return try_st_;                                                                    \
  } while (0)

} // namespace

tbe_status gpu_scratch_get(gpu_scratch *s, int slot, size_t bytes, void **p)
{
  if (bytes > s->bytes[slot]) {
    cudaFree(s->ptr[slot]);
    s->ptr[slot] = nullptr;
    s->bytes[slot] = 0;
    cudaError_t e = cudaMalloc(&s->ptr[slot], bytes);
    if (e != cudaSuccess)
      return tbe_error(TBE_ENOMEM, "gpu", -1, "scratch of %zu bytes: %s", bytes,
                       cudaGetErrorString(e));
    s->bytes[slot] = bytes;
  }
  *p = s->ptr[slot];
  return tbe_ok();
}

void gpu_scratch_free(gpu_scratch *s)
{
  for (int i = 0; i < 4; i++)
    cudaFree(s->ptr[i]);
  memset(s, 0, sizeof *s);
}

static tbe_status run_forward(const tbe_batch *h, const tbe_layout *l, tbe_bounds_mode mode,
                              const gpu_fwd_config *cfg, gpu_fwd_result *r, gpu_scratch *scratch,
                              dev_arena &arena)
{
  dev_batch b = {};
  const size_t isz = tbe_itype_size(h->itype), osz = tbe_dtype_size(h->out_dtype);
  const size_t out_bytes = (size_t)l->out_elems * osz;
  void *p;
  TRY(arena.upload(h->weights, tbe_dtype_size(h->wdtype) * (size_t)h->table_offset[h->num_tables],
                   &p));
  b.weights = p;
  TRY(arena.upload(h->table_offset, sizeof(int64_t) * (size_t)(h->num_tables + 1), &p));
  b.table_offset = (const int64_t *)p;
  TRY(arena.upload(h->E, sizeof(int64_t) * (size_t)h->num_tables, &p));
  b.E = (const int64_t *)p;
  TRY(arena.upload(h->D, sizeof(int32_t) * (size_t)h->num_tables, &p));
  b.D = (const int32_t *)p;
  TRY(arena.upload(h->feature_table_map, sizeof(int32_t) * (size_t)h->T, &p));
  b.ftm = (const int32_t *)p;
  TRY(arena.upload(l->B_offsets, sizeof(int64_t) * (size_t)(h->T + 1), &p));
  b.B_offsets = (const int64_t *)p;
  TRY(arena.upload(l->D_offsets, sizeof(int64_t) * (size_t)(h->T + 1), &p));
  b.D_offsets = (const int64_t *)p;
  if (h->R && l->bag_out) {
    TRY(arena.upload(l->bag_out, sizeof(int64_t) * (size_t)l->total_B, &p));
    b.bag_out = (const int64_t *)p;
  }
  TRY(arena.upload(h->indices, isz * (size_t)h->N, &b.indices));
  TRY(arena.upload(h->offsets, isz * (size_t)(l->total_B + 1), &b.offsets));
  if (h->per_sample_weights) {
    TRY(arena.upload(h->per_sample_weights, sizeof(float) * (size_t)h->N, &p));
    b.psw = (const float *)p;
  }
  void *guarded;
  TRY(arena.alloc(out_bytes + 2 * GUARD, &guarded));
  GPU_TRY(cudaMemset(guarded, POISON, out_bytes + 2 * GUARD));
  b.out = (char *)guarded + GUARD;
  dev_bounds *state;
  TRY(arena.alloc(sizeof(dev_bounds), (void **)&state));
  const dev_bounds fresh = {0, ~0ull, ~0ull};
  GPU_TRY(cudaMemcpy(state, &fresh, sizeof fresh, cudaMemcpyHostToDevice));
  b.N = h->N;
  b.total_B = l->total_B;
  b.total_D = l->total_D;
  b.T = h->T;
  b.num_tables = h->num_tables;
  b.wdtype = h->wdtype;
  b.out_dtype = h->out_dtype;
  b.itype = h->itype;
  b.pool = h->pool;

  std::vector<int32_t> features(h->T);
  for (int32_t t = 0; t < h->T; t++)
    features[t] = t;
  const int fused = cfg && cfg->fused_bounds && mode != TBE_BOUNDS_NONE;
  cudaStream_t stream = 0;
  cudaEvent_t ev[2];
  GPU_TRY(cudaEventCreate(&ev[0]));
  GPU_TRY(cudaEventCreate(&ev[1]));
  GPU_TRY(cudaEventRecord(ev[0], stream));
  if (mode != TBE_BOUNDS_NONE) {
    TRY(gpu_bounds_offsets(b, state, mode, scratch, stream));
    if (!fused)
      TRY(gpu_bounds_indices(b, state, mode, stream));
  }
  TRY(gpu_forward_gather(b, features.data(), h->T, cfg, fused, mode, state, scratch, stream));
  GPU_TRY(cudaEventRecord(ev[1], stream));
  GPU_TRY(cudaEventSynchronize(ev[1]));
  float ms = 0;
  GPU_TRY(cudaEventElapsedTime(&ms, ev[0], ev[1]));
  cudaEventDestroy(ev[0]);
  cudaEventDestroy(ev[1]);
  r->ms = ms;

  dev_bounds got;
  GPU_TRY(cudaMemcpy(&got, state, sizeof got, cudaMemcpyDeviceToHost));
  r->warnings = mode == TBE_BOUNDS_WARNING ? (int64_t)got.counter : 0;
  r->bounds = tbe_ok();
  if (mode == TBE_BOUNDS_FATAL && got.first_bad_bag != ~0ull)
    r->bounds = ref_bounds_offender(h, l, (int64_t)got.first_bad_bag, -1);
  else if (mode == TBE_BOUNDS_FATAL && got.first_bad_index != ~0ull)
    r->bounds = ref_bounds_offender(h, l, -1, (int64_t)got.first_bad_index);

  r->out = malloc(out_bytes + 1);
  r->indices = malloc(isz * (size_t)h->N + 1);
  r->offsets = malloc(isz * (size_t)(l->total_B + 1));
  std::vector<unsigned char> guards(2 * GUARD);
  if (!r->out || !r->indices || !r->offsets)
    return tbe_error(TBE_ENOMEM, "gpu", -1, "cannot allocate host copies of the results");
  GPU_TRY(cudaMemcpy(r->out, b.out, out_bytes, cudaMemcpyDeviceToHost));
  GPU_TRY(cudaMemcpy(r->indices, b.indices, isz * (size_t)h->N, cudaMemcpyDeviceToHost));
  GPU_TRY(cudaMemcpy(r->offsets, b.offsets, isz * (size_t)(l->total_B + 1),
                     cudaMemcpyDeviceToHost));
  GPU_TRY(cudaMemcpy(guards.data(), guarded, GUARD, cudaMemcpyDeviceToHost));
  GPU_TRY(cudaMemcpy(guards.data() + GUARD, (char *)b.out + out_bytes, GUARD,
                     cudaMemcpyDeviceToHost));
  for (unsigned char c : guards)
    r->guard_errors += c != POISON;
  return tbe_ok();
}

extern "C" tbe_status gpu_run_forward(const tbe_batch *b, const tbe_layout *l,
                                      tbe_bounds_mode mode, const gpu_fwd_config *cfg,
                                      gpu_fwd_result *r)
{
  memset(r, 0, sizeof *r);
  char desc[256];
  tbe_status st = gpu_probe(desc, sizeof desc);
  if (st.code != TBE_OK)
    return st;
  gpu_scratch scratch = {};
  {
    dev_arena arena;
    st = run_forward(b, l, mode, cfg, r, &scratch, arena);
  }
  gpu_scratch_free(&scratch);
  if (st.code != TBE_OK)
    gpu_fwd_result_free(r);
  return st;
}

extern "C" void gpu_fwd_result_free(gpu_fwd_result *r)
{
  free(r->out);
  free(r->indices);
  free(r->offsets);
  memset(r, 0, sizeof *r);
}
