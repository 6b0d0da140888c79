/* engine.cu: the GPU engine behind gpu_run_forward: uploads a batch, poisons the output between
 * guard regions, runs the bounds check and the forward, times them, and copies everything back;
 * then runs the forward again over another poison and counts the elements that differ (an
 * unwritten element, or a nondeterministic one). It also holds the small-table path's policy.
 * Not a kernel file: the kernels are in bounds.cu and forward.cu.
 */
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <vector>

#include "forward_small.h"
#include "cuda_check.h"
#include "gpu_internal.h"

namespace {

const size_t GUARD = 4096;          /* bytes before and after the output */
const unsigned char POISON = 0xFF;  /* 0xFFFF.. is a NaN in fp32, fp16 and bf16 */
const unsigned char POISON2 = 0x7B; /* the rerun's: 0x7B7B.. is finite in fp32, fp16 and bf16, so
                                     * an unwritten element differs from a NaN reference too */
/* Mean bag length from which fwd.small=auto takes the path: measured on the H200 (S1 shape,
 * bench/RESULTS.md), it is 1.05x slower than the generic path at L = 128 and 0.72x at 256. The
 * GPU's choice alone: it reports it in gpu_fwd_result.small_mask, which the harness reads. */
const double SMALL_AUTO_L = 256;

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

struct gpu_session {
  const tbe_batch *h;
  const tbe_layout *l;
  dev_arena arena;
  gpu_scratch scratch;
  dev_batch b;
  void *pristine_indices, *pristine_offsets;
  void *guarded;
  dev_bounds *state;
  dev_offender *offender;
  unsigned char poison; /* the byte the output and guards are filled with before a forward */
  cudaEvent_t ev[2];
  tbe_bounds_mode mode;
  float ms;
  size_t out_bytes;
  std::vector<unsigned char> small; /* [T]: the last forward's small-table features */
};

/* Which features take the small-table path: with fwd.small=on every eligible one
 * (ref_small_eligible), with auto those whose mean bag length on the offsets as given reaches
 * SMALL_AUTO_L, with off none. */
static void choose_small(const tbe_batch *h, const tbe_layout *l, gpu_small_mode m,
                         std::vector<unsigned char> &small)
{
  small.assign(h->T, 0);
  for (int32_t t = 0; m != GPU_SMALL_OFF && t < h->T; t++) {
    const int64_t b0 = l->B_offsets[t], b1 = l->B_offsets[t + 1];
    const double mean_L =
        b1 > b0 ? (double)(tbe_iget(h->offsets, h->itype, b1) - tbe_iget(h->offsets, h->itype, b0)) /
                      (double)(b1 - b0)
                : 0.0;
    small[t] = ref_small_eligible(h, t) && (m == GPU_SMALL_ON || mean_L >= SMALL_AUTO_L);
  }
}

static tbe_status open_session(const tbe_batch *h, const tbe_layout *l, gpu_session *s)
{
  dev_batch &b = s->b;
  dev_arena &arena = s->arena;
  const size_t isz = tbe_itype_size(h->itype);
  s->h = h;
  s->l = l;
  s->out_bytes = (size_t)l->out_elems * tbe_dtype_size(h->out_dtype);
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
  TRY(arena.upload(h->indices, isz * (size_t)h->N, &s->pristine_indices));
  TRY(arena.upload(h->offsets, isz * (size_t)(l->total_B + 1), &s->pristine_offsets));
  TRY(arena.alloc(isz * (size_t)h->N, &b.indices));
  TRY(arena.alloc(isz * (size_t)(l->total_B + 1), &b.offsets));
  if (h->per_sample_weights) {
    TRY(arena.upload(h->per_sample_weights, sizeof(float) * (size_t)h->N, &p));
    b.psw = (const float *)p;
  }
  TRY(arena.alloc(s->out_bytes + 2 * GUARD, &s->guarded));
  b.out = (char *)s->guarded + GUARD;
  TRY(arena.alloc(sizeof(dev_bounds), (void **)&s->state));
  TRY(arena.alloc(sizeof(dev_offender), (void **)&s->offender));
  s->poison = POISON;
  b.N = h->N;
  b.total_B = l->total_B;
  b.total_D = l->total_D;
  b.T = h->T;
  b.num_tables = h->num_tables;
  b.wdtype = h->wdtype;
  b.out_dtype = h->out_dtype;
  b.itype = h->itype;
  b.pool = h->pool;
  GPU_TRY(cudaEventCreate(&s->ev[0]));
  GPU_TRY(cudaEventCreate(&s->ev[1]));
  return tbe_ok();
}

extern "C" tbe_status gpu_session_open(const tbe_batch *b, const tbe_layout *l,
                                       gpu_session **out)
{
  *out = nullptr;
  char desc[256];
  tbe_status st = gpu_probe(desc, sizeof desc);
  if (st.code != TBE_OK)
    return st;
  gpu_session *s = new gpu_session();
  st = open_session(b, l, s);
  if (st.code != TBE_OK) {
    gpu_session_close(s);
    return st;
  }
  *out = s;
  return tbe_ok();
}

extern "C" tbe_status gpu_session_forward(gpu_session *s, tbe_bounds_mode mode,
                                          const gpu_fwd_config *cfg, int bounds_only, float *ms)
{
  TRY(gpu_forward_check_config(cfg));
  const tbe_batch *h = s->h;
  const dev_batch &b = s->b;
  const size_t isz = tbe_itype_size(h->itype);
  cudaStream_t stream = 0;
  /* untimed: pristine inputs, poisoned output and guards, fresh bounds state */
  GPU_TRY(cudaMemcpyAsync(b.indices, s->pristine_indices, isz * (size_t)h->N,
                          cudaMemcpyDeviceToDevice, stream));
  GPU_TRY(cudaMemcpyAsync(b.offsets, s->pristine_offsets, isz * (size_t)(b.total_B + 1),
                          cudaMemcpyDeviceToDevice, stream));
  GPU_TRY(cudaMemsetAsync(s->guarded, s->poison, s->out_bytes + 2 * GUARD, stream));
  const dev_bounds fresh = {0, ~0ull, ~0ull};
  GPU_TRY(cudaMemcpyAsync(s->state, &fresh, sizeof fresh, cudaMemcpyHostToDevice, stream));

  choose_small(h, s->l, cfg ? cfg->small : GPU_SMALL_AUTO, s->small);
  std::vector<int32_t> features;
  std::vector<small_feature> small;
  for (int32_t t = 0; t < h->T; t++) {
    if (!s->small[t]) {
      features.push_back(t);
      continue;
    }
    const int32_t j = h->feature_table_map[t];
    small.push_back({s->l->B_offsets[t], s->l->B_offsets[t + 1] - s->l->B_offsets[t],
                     h->table_offset[j], h->E[j], s->l->D_offsets[t], h->D[j]});
  }
  const int fused = cfg && cfg->fused_bounds && mode != TBE_BOUNDS_NONE;
  GPU_TRY(cudaEventRecord(s->ev[0], stream));
  if (mode != TBE_BOUNDS_NONE) {
    TRY(gpu_bounds_offsets(b, s->state, mode, &s->scratch, stream));
    if (!fused)
      TRY(gpu_bounds_indices(b, s->state, mode, stream));
  }
  if (!bounds_only) {
    TRY(gpu_forward_gather(b, features.data(), (int)features.size(), cfg, fused, mode, s->state,
                           &s->scratch, stream));
    TRY(gpu_forward_small(b, small.data(), (int)small.size(), fused, mode, s->state, stream));
  }
  GPU_TRY(cudaEventRecord(s->ev[1], stream));
  if (mode == TBE_BOUNDS_FATAL) /* untimed */
    TRY(gpu_bounds_offender(b, s->state, s->offender, stream));
  GPU_TRY(cudaEventSynchronize(s->ev[1]));
  GPU_TRY(cudaEventElapsedTime(&s->ms, s->ev[0], s->ev[1]));
  s->mode = mode;
  if (ms)
    *ms = s->ms;
  return tbe_ok();
}

/* The FATAL status for the offender the GPU named, in the words of ref_bounds_offender's
 * fields (feature, bag, position, value) but its own message. */
static tbe_status offender_status(const dev_offender &o)
{
  const bool index = o.kind == 2;
  tbe_status st = tbe_error(TBE_EBOUNDS, index ? "indices" : "offsets", o.position,
                            "the GPU names %s: feature %lld, bag %lld, position %lld, value %lld",
                            index ? "an index" : "an offset", o.feature, o.bag, o.position,
                            o.value);
  st.feature = o.feature;
  st.bag = o.bag;
  st.value = o.value;
  return st;
}

extern "C" tbe_status gpu_session_results(gpu_session *s, gpu_fwd_result *r)
{
  const tbe_batch *h = s->h;
  const tbe_layout *l = s->l;
  const size_t isz = tbe_itype_size(h->itype);
  memset(r, 0, sizeof *r);
  r->ms = s->ms;
  dev_bounds got;
  GPU_TRY(cudaMemcpy(&got, s->state, sizeof got, cudaMemcpyDeviceToHost));
  r->warnings = s->mode == TBE_BOUNDS_WARNING ? (int64_t)got.counter : 0;
  r->bounds = tbe_ok();
  if (s->mode == TBE_BOUNDS_FATAL) {
    dev_offender o;
    GPU_TRY(cudaMemcpy(&o, s->offender, sizeof o, cudaMemcpyDeviceToHost));
    if (o.kind != 0)
      r->bounds = offender_status(o);
  }
  r->out = malloc(s->out_bytes + 1);
  r->indices = malloc(isz * (size_t)h->N + 1);
  r->offsets = malloc(isz * (size_t)(l->total_B + 1));
  r->small_mask = (unsigned char *)malloc((size_t)h->T);
  std::vector<unsigned char> guards(2 * GUARD);
  if (!r->out || !r->indices || !r->offsets || !r->small_mask) {
    gpu_fwd_result_free(r);
    return tbe_error(TBE_ENOMEM, "gpu", -1, "cannot allocate host copies of the results");
  }
  GPU_TRY(cudaMemcpy(r->out, s->b.out, s->out_bytes, cudaMemcpyDeviceToHost));
  GPU_TRY(cudaMemcpy(r->indices, s->b.indices, isz * (size_t)h->N, cudaMemcpyDeviceToHost));
  GPU_TRY(cudaMemcpy(r->offsets, s->b.offsets, isz * (size_t)(l->total_B + 1),
                     cudaMemcpyDeviceToHost));
  GPU_TRY(cudaMemcpy(guards.data(), s->guarded, GUARD, cudaMemcpyDeviceToHost));
  GPU_TRY(cudaMemcpy(guards.data() + GUARD, (char *)s->b.out + s->out_bytes, GUARD,
                     cudaMemcpyDeviceToHost));
  for (unsigned char c : guards)
    r->guard_errors += c != s->poison;
  for (int32_t t = 0; t < h->T; t++) {
    r->small_mask[t] = s->small.empty() ? 0 : s->small[t];
    r->small_features += r->small_mask[t];
  }
  return tbe_ok();
}

extern "C" void gpu_session_close(gpu_session *s)
{
  if (!s)
    return;
  if (s->ev[0])
    cudaEventDestroy(s->ev[0]);
  if (s->ev[1])
    cudaEventDestroy(s->ev[1]);
  gpu_scratch_free(&s->scratch);
  delete s;
}

/* Elements of n of `size` bytes each that differ between a and b. */
static int64_t differing(const void *a, const void *b, int64_t n, size_t size)
{
  int64_t k = 0;
  for (int64_t i = 0; i < n; i++)
    k += memcmp((const char *)a + (size_t)i * size, (const char *)b + (size_t)i * size, size) != 0;
  return k;
}

extern "C" tbe_status gpu_run_forward(const tbe_batch *b, const tbe_layout *l,
                                      tbe_bounds_mode mode, const gpu_fwd_config *cfg,
                                      gpu_fwd_result *r)
{
  memset(r, 0, sizeof *r);
  gpu_session *s;
  gpu_fwd_result again;
  memset(&again, 0, sizeof again);
  tbe_status st = gpu_session_open(b, l, &s);
  if (st.code == TBE_OK)
    st = gpu_session_forward(s, mode, cfg, 0, nullptr);
  if (st.code == TBE_OK)
    st = gpu_session_results(s, r);
  if (st.code == TBE_OK) {
    s->poison = POISON2;
    st = gpu_session_forward(s, mode, cfg, 0, nullptr);
  }
  if (st.code == TBE_OK)
    st = gpu_session_results(s, &again);
  if (st.code == TBE_OK) {
    const size_t isz = tbe_itype_size(b->itype);
    r->rerun_diffs = differing(r->out, again.out, l->out_elems, tbe_dtype_size(b->out_dtype)) +
                     differing(r->indices, again.indices, b->N, isz) +
                     differing(r->offsets, again.offsets, l->total_B + 1, isz) +
                     (r->warnings != again.warnings) +
                     (r->bounds.code != again.bounds.code || r->bounds.feature != again.bounds.feature ||
                      r->bounds.bag != again.bounds.bag ||
                      r->bounds.position != again.bounds.position ||
                      r->bounds.value != again.bounds.value);
    r->guard_errors += again.guard_errors;
  }
  gpu_fwd_result_free(&again);
  gpu_session_close(s);
  return st;
}

extern "C" void gpu_fwd_result_free(gpu_fwd_result *r)
{
  free(r->out);
  free(r->indices);
  free(r->offsets);
  free(r->small_mask);
  memset(r, 0, sizeof *r);
}

extern "C" tbe_status gpu_copy_ceiling(size_t bytes, int reps, double *gbps)
{
  dev_arena arena;
  void *src, *dst;
  TRY(arena.alloc(bytes, &src));
  TRY(arena.alloc(bytes, &dst));
  GPU_TRY(cudaMemset(src, 1, bytes));
  cudaEvent_t ev[2];
  GPU_TRY(cudaEventCreate(&ev[0]));
  GPU_TRY(cudaEventCreate(&ev[1]));
  std::vector<float> ms(reps);
  GPU_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice)); /* warm-up */
  for (int i = 0; i < reps; i++) {
    GPU_TRY(cudaEventRecord(ev[0]));
    GPU_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
    GPU_TRY(cudaEventRecord(ev[1]));
    GPU_TRY(cudaEventSynchronize(ev[1]));
    GPU_TRY(cudaEventElapsedTime(&ms[i], ev[0], ev[1]));
  }
  cudaEventDestroy(ev[0]);
  cudaEventDestroy(ev[1]);
  std::sort(ms.begin(), ms.end());
  *gbps = 2.0 * (double)bytes / (ms[reps / 2] * 1e-3) / 1e9;
  return tbe_ok();
}
