/* engine.cu: the GPU engine's sessions behind gpu_run: uploads a batch, poisons the output
 * between guard regions, runs the bounds check, the forward and the backward on one stream,
 * times them, captures them in a CUDA graph, and copies everything back; gpu_run then runs the
 * forward again over another poison and counts what differs (an unwritten element, or a
 * nondeterministic one). It holds the small-table path's policy (the GPU's choice alone) and,
 * with bwd.hoist=on and bwd.small_tc=on, the record of which batch the backward's hoisted
 * metadata and the saved small-table counts belong to.
 * Not a kernel file: the kernels are in bounds.cu, forward*.cu, transpose.cu and backward*.cu.
 *
 * Generations (bwd.hoist): s->gen names the inputs the device holds and is bumped by every
 * upload and every forward (a forward restores and repairs the indices again); a forward that
 * enqueues the backward's metadata stamps it with its own generation (meta_gen). The metadata is
 * the current inputs' exactly when meta_gen == gen: a later upload or a forward without the
 * hoist moves gen past it, and nothing else writes the indices, offsets or the metadata.
 * The counts of bwd.small_tc follow the same rule (counts_gen): a forward that saves them stamps
 * them, and only the small-table forward writes them.
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
/* The mean bag lengths for which fwd.small=auto takes the path: from the shortest at which it was
 * measured faster than the generic path (bench/RESULTS.md, the small-table comparison) to the
 * histogram's REF_SMALL_HIST positions. Past those the tail is added one position at a time in
 * order (the model's order: ref/forward_small.h), a chain of dependent adds per element that a
 * gather of L1-resident rows outruns. The GPU's choice alone: it reports it in
 * gpu_fwd_result.small_mask, which the harness reads. */
const double SMALL_AUTO_MIN_L = 64;
const double SMALL_AUTO_MAX_L = REF_SMALL_HIST;

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

/* A forward configuration planned on the host: the features of each path and the gather's
 * launches. Made once per configuration, before any timed or captured region. */
struct fwd_plan {
  gpu_fwd_config cfg;
  std::vector<unsigned char> small; /* [T]: the features on the small-table path */
  std::vector<small_feature> small_features;
  gpu_fwd_plan *gather = nullptr;
};

struct gpu_session {
  const tbe_batch *h;
  const tbe_layout *l;
  dev_arena arena;
  gpu_scratch scratch;
  dev_batch b;
  void *pristine_indices, *pristine_offsets, *pristine_psw;
  void *guarded;
  dev_bounds *state;
  dev_offender *offender;
  unsigned char poison; /* the byte the output and guards are filled with before a forward */
  cudaStream_t stream;
  cudaEvent_t ev[2];
  tbe_bounds_mode mode;
  float ms;
  size_t out_bytes;
  std::vector<fwd_plan> plans;
  const fwd_plan *last; /* the last forward's plan */
  gpu_bwd *bwd;         /* the backward, once opened */
  cudaGraphExec_t graph;
  bool graph_hoisted;   /* the graph's forward holds the backward's metadata */
  bool graph_counts;    /* the graph's forward saves bwd.small_tc's counts */
  bool graph_small_all; /* the graph's backward makes no metadata (gpu_bwd_small_all) */
  uint64_t gen;         /* the inputs' generation (the file's header) */
  uint64_t fwd_gen;     /* gen of the last forward (0: none yet) */
  uint64_t meta_gen;    /* gen of the forward that made the hoisted metadata (0: none yet) */
  uint64_t counts_gen;  /* gen of the forward that saved bwd.small_tc's counts (0: none yet) */
};

/* Whether two forward configurations are one (a captured graph's and a call's): every field (all
 * int-sized, so a field added to gpu_fwd_config changes the size and stops the build until it is
 * compared here). */
static_assert(sizeof(gpu_fwd_config) == 5 * sizeof(int), "same_cfg: compare the new field");
static bool same_cfg(const gpu_fwd_config &a, const gpu_fwd_config &b)
{
  return a.bags == b.bags && a.width == b.width && a.fused_bounds == b.fused_bounds &&
         a.small == b.small && a.gather == b.gather;
}

/* Which features take the small-table path: with fwd.small=on every eligible one
 * (ref_small_eligible), with auto those whose mean bag length on the offsets as given lies in
 * [SMALL_AUTO_MIN_L, SMALL_AUTO_MAX_L], with off none. */
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
    const bool auto_takes = mean_L >= SMALL_AUTO_MIN_L && mean_L <= SMALL_AUTO_MAX_L;
    small[t] = ref_small_eligible(h, t) && (m == GPU_SMALL_ON || auto_takes);
  }
}

/* The plan of cfg (NULL: the defaults), made on first use: which features take the small-table
 * path (choose_small under the configured mode, on the pristine offsets) and the rest's
 * gather launches. TBE_EINVAL for a configuration the kernels do not have. */
static tbe_status plan_for(gpu_session *s, const gpu_fwd_config *cfg, const fwd_plan **out)
{
  STATUS_TRY(gpu_forward_check_config(cfg));
  const gpu_fwd_config c = cfg ? *cfg : gpu_fwd_config{};
  for (const fwd_plan &p : s->plans)
    if (same_cfg(p.cfg, c)) {
      *out = &p;
      return tbe_ok();
    }
  const tbe_batch *h = s->h;
  fwd_plan p;
  p.cfg = c;
  choose_small(h, s->l, c.small, p.small);
  std::vector<int32_t> features;
  for (int32_t t = 0; t < h->T; t++) {
    if (!p.small[t]) {
      features.push_back(t);
      continue;
    }
    const int32_t j = h->feature_table_map[t];
    p.small_features.push_back({s->l->B_offsets[t], s->l->B_offsets[t + 1] - s->l->B_offsets[t],
                                h->table_offset[j], h->E[j], s->l->D_offsets[t], h->D[j], t});
  }
  STATUS_TRY(gpu_fwd_plan_make(h, s->l, features.data(), (int)features.size(), &c, &p.gather));
  s->plans.push_back(p);
  *out = &s->plans.back();
  return tbe_ok();
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
  STATUS_TRY(arena.upload(h->weights, tbe_dtype_size(h->wdtype) * (size_t)h->table_offset[h->num_tables],
                   &p));
  b.weights = p;
  STATUS_TRY(arena.upload(h->table_offset, sizeof(int64_t) * (size_t)(h->num_tables + 1), &p));
  b.table_offset = (const int64_t *)p;
  STATUS_TRY(arena.upload(h->E, sizeof(int64_t) * (size_t)h->num_tables, &p));
  b.E = (const int64_t *)p;
  STATUS_TRY(arena.upload(h->D, sizeof(int32_t) * (size_t)h->num_tables, &p));
  b.D = (const int32_t *)p;
  STATUS_TRY(arena.upload(h->feature_table_map, sizeof(int32_t) * (size_t)h->T, &p));
  b.ftm = (const int32_t *)p;
  STATUS_TRY(arena.upload(l->B_offsets, sizeof(int64_t) * (size_t)(h->T + 1), &p));
  b.B_offsets = (const int64_t *)p;
  STATUS_TRY(arena.upload(l->D_offsets, sizeof(int64_t) * (size_t)(h->T + 1), &p));
  b.D_offsets = (const int64_t *)p;
  if (h->R && l->bag_out) {
    STATUS_TRY(arena.upload(l->bag_out, sizeof(int64_t) * (size_t)l->total_B, &p));
    b.bag_out = (const int64_t *)p;
  }
  STATUS_TRY(arena.upload(h->indices, isz * (size_t)h->N, &s->pristine_indices));
  STATUS_TRY(arena.upload(h->offsets, isz * (size_t)(l->total_B + 1), &s->pristine_offsets));
  STATUS_TRY(arena.alloc(isz * (size_t)h->N, &b.indices));
  STATUS_TRY(arena.alloc(isz * (size_t)(l->total_B + 1), &b.offsets));
  if (h->per_sample_weights) {
    STATUS_TRY(arena.upload(h->per_sample_weights, sizeof(float) * (size_t)h->N, &s->pristine_psw));
    b.psw = (const float *)s->pristine_psw;
  }
  STATUS_TRY(arena.alloc(s->out_bytes + 2 * GUARD, &s->guarded));
  b.out = (char *)s->guarded + GUARD;
  STATUS_TRY(arena.alloc(sizeof(dev_bounds), (void **)&s->state));
  STATUS_TRY(arena.alloc(sizeof(dev_offender), (void **)&s->offender));
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
  s->plans.reserve(16);
  GPU_TRY(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
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

/* The bounds state the backward watches after a check in `mode`: FATAL's offender, else none. */
static const dev_bounds *fatal_of(const gpu_session *s, tbe_bounds_mode mode)
{
  return mode == TBE_BOUNDS_FATAL ? s->state : nullptr;
}

/* Enqueues the untimed restore of the pristine inputs, then (between the timing events) the
 * bounds check, unless bounds_only the forward of plan p and, when the open backward hoists
 * (bwd.hoist=on), its metadata, stamped with this forward's generation. */
static tbe_status enqueue_forward(gpu_session *s, tbe_bounds_mode mode, const fwd_plan &p,
                                  int bounds_only)
{
  if (s->bwd) /* which tables bwd.small_tc takes after this forward: uploaded before it */
    STATUS_TRY(gpu_bwd_small_plan(s->bwd, p.small.data(), mode, s->stream));
  s->fwd_gen = ++s->gen;
  const tbe_batch *h = s->h;
  const dev_batch &b = s->b;
  const size_t isz = tbe_itype_size(h->itype);
  cudaStream_t stream = s->stream;
  const int64_t *counts_base = nullptr;
  uint16_t *counts = s->bwd ? gpu_bwd_small_counts(s->bwd, &counts_base) : nullptr;
  GPU_TRY(cudaMemcpyAsync(b.indices, s->pristine_indices, isz * (size_t)h->N,
                          cudaMemcpyDeviceToDevice, stream));
  GPU_TRY(cudaMemcpyAsync(b.offsets, s->pristine_offsets, isz * (size_t)(b.total_B + 1),
                          cudaMemcpyDeviceToDevice, stream));
  GPU_TRY(cudaMemsetAsync(s->guarded, s->poison, s->out_bytes + 2 * GUARD, stream));
  GPU_TRY(cudaMemsetAsync(s->state, 0, sizeof(dev_bounds), stream));
  GPU_TRY(cudaMemsetAsync(&s->state->first_bad_bag, 0xFF, 2 * sizeof(unsigned long long),
                          stream));
  if (s->bwd)
    STATUS_TRY(gpu_bwd_restore(s->bwd, stream));
  const int fused = p.cfg.fused_bounds && mode != TBE_BOUNDS_NONE;
  GPU_TRY(cudaEventRecord(s->ev[0], stream));
  if (mode != TBE_BOUNDS_NONE) {
    STATUS_TRY(gpu_bounds_offsets(b, s->state, mode, &s->scratch, stream));
    if (!fused)
      STATUS_TRY(gpu_bounds_indices(b, s->state, mode, stream));
  }
  if (!bounds_only) {
    STATUS_TRY(gpu_forward_gather(b, p.gather, fused, mode, s->state, stream));
    STATUS_TRY(gpu_forward_small(b, p.small_features.data(), (int)p.small_features.size(), fused, mode,
                          s->state, counts, counts_base, stream));
    if (counts)
      s->counts_gen = s->gen;
  }
  /* after every kernel above: the fused check repairs the indices inside the gather, and the
   * metadata must be made from the repaired ones, as the backward's own would be */
  if (s->bwd && gpu_bwd_hoist(s->bwd)) {
#if defined(TBE_FAULT_HOIST_STALE) /* planted: metadata once made is kept for every later batch */
    if (s->meta_gen == 0)
#endif
      STATUS_TRY(gpu_bwd_hoisted_metadata(s->bwd, fatal_of(s, mode), stream));
    s->meta_gen = s->gen;
  }
  GPU_TRY(cudaEventRecord(s->ev[1], stream));
  if (mode == TBE_BOUNDS_FATAL) /* untimed: the offender named from the device's state */
    STATUS_TRY(gpu_bounds_offender(b, s->state, s->offender, stream));
  s->mode = mode;
  s->last = &p;
  return tbe_ok();
}

extern "C" tbe_status gpu_session_forward(gpu_session *s, tbe_bounds_mode mode,
                                          const gpu_fwd_config *cfg, int bounds_only, float *ms)
{
  const fwd_plan *p;
  STATUS_TRY(plan_for(s, cfg, &p));
  STATUS_TRY(enqueue_forward(s, mode, *p, bounds_only));
  GPU_TRY(cudaEventSynchronize(s->ev[1]));
  GPU_TRY(cudaEventElapsedTime(&s->ms, s->ev[0], s->ev[1]));
  if (ms)
    *ms = s->ms;
  return tbe_ok();
}

/* The bounds state the backward watches: the last forward's FATAL offender, else none. */
static const dev_bounds *fatal_state(const gpu_session *s) { return fatal_of(s, s->mode); }

/* Enqueues the open backward after the last forward (timed: with its phase events; noise:
 * beside the noise kernel, when configured): with bwd.hoist=on on the metadata that forward
 * made, only if it belongs to the current inputs (the generations of the file's header), else
 * TBE_EINVAL naming why and nothing launched; with bwd.small_tc=on, likewise for the counts. */
static tbe_status enqueue_backward(gpu_session *s, int timed, int noise)
{
  const int hoisted = gpu_bwd_hoist(s->bwd);
  const int64_t *base;
#if !defined(TBE_FAULT_HOIST_STALE) /* planted: the generation check is skipped */
  if (hoisted && s->meta_gen != s->gen)
    return tbe_error(TBE_EINVAL, "hoist", -1,
                     s->fwd_gen != s->gen
                         ? "bwd.hoist: refused: gpu_session_upload replaced the inputs after the "
                           "last forward, so its hoisted metadata belongs to another batch (run "
                           "the forward again)"
                         : "bwd.hoist: refused: the last forward ran without the hoist (no "
                           "backward with hoist was open or configured then), so there is no "
                           "metadata of these inputs");
#endif
  if (gpu_bwd_small_counts(s->bwd, &base) && s->counts_gen != s->gen)
    return tbe_error(TBE_EINVAL, "small_tc", -1,
                     s->fwd_gen != s->gen
                         ? "bwd.small_tc: refused: gpu_session_upload replaced the inputs after "
                           "the last forward, so its saved counts belong to another batch (run "
                           "the forward again)"
                         : "bwd.small_tc: refused: the last forward saved no counts (it ran "
                           "bounds only, or before a backward with small_tc was configured), so "
                           "there are none of these inputs");
  if (noise)
    STATUS_TRY(gpu_bwd_noise(s->bwd)); /* on its own stream, beside what follows */
  return gpu_bwd_enqueue(s->bwd, fatal_state(s), timed, hoisted, s->stream);
}

extern "C" tbe_status gpu_session_backward_open(gpu_session *s, const ref_bwd_config *cfg,
                                                const gpu_bwd_config *g, const void *grad_output,
                                                const float *momentum)
{
  if (s->bwd)
    return tbe_error(TBE_EINVAL, "gpu", -1, "the session's backward is already open");
  return gpu_bwd_open(s->h, s->l, s->b, cfg, g, grad_output, momentum, &s->bwd);
}

extern "C" tbe_status gpu_session_backward_config(gpu_session *s, const gpu_bwd_config *g)
{
  if (!s->bwd)
    return tbe_error(TBE_EINVAL, "gpu", -1, "no backward in this session");
  return gpu_bwd_configure(s->bwd, g);
}

extern "C" tbe_status gpu_session_backward(gpu_session *s, gpu_bwd_stats *st)
{
  if (!s->bwd || !s->last)
    return tbe_error(TBE_EINVAL, "gpu", -1, "backward before gpu_session_backward_open or the "
                                            "forward");
  STATUS_TRY(enqueue_backward(s, 1, 1));
  gpu_bwd_stats local;
  return gpu_bwd_stats_get(s->bwd, st ? st : &local);
}

extern "C" tbe_status gpu_session_backward_results(gpu_session *s, gpu_bwd_result *r)
{
  memset(r, 0, sizeof *r);
  if (!s->bwd)
    return tbe_error(TBE_EINVAL, "gpu", -1, "no backward in this session");
  return gpu_bwd_results(s->bwd, s->h, r);
}

extern "C" tbe_status gpu_session_capture(gpu_session *s, tbe_bounds_mode mode,
                                          const gpu_fwd_config *cfg)
{
  const fwd_plan *p;
  STATUS_TRY(plan_for(s, cfg, &p));
  /* one plain call first: scratch buffers grow outside the capture */
  STATUS_TRY(enqueue_forward(s, mode, *p, 0));
  if (s->bwd)
    STATUS_TRY(enqueue_backward(s, 0, 0));
  GPU_TRY(cudaStreamSynchronize(s->stream));
  cudaGraph_t graph;
  GPU_TRY(cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeThreadLocal));
  tbe_status st = enqueue_forward(s, mode, *p, 0);
  if (st.code == TBE_OK && s->bwd)
    st = enqueue_backward(s, 0, 0); /* hoisting: the metadata the captured forward makes */
  cudaError_t e = cudaStreamEndCapture(s->stream, &graph);
  if (st.code != TBE_OK)
    return st;
  GPU_TRY(e);
  if (s->graph)
    cudaGraphExecDestroy(s->graph);
  e = cudaGraphInstantiate(&s->graph, graph, 0);
  cudaGraphDestroy(graph);
  GPU_TRY(e);
  s->graph_hoisted = s->bwd && gpu_bwd_hoist(s->bwd);
  const int64_t *base;
  s->graph_counts = s->bwd && gpu_bwd_small_counts(s->bwd, &base);
  s->graph_small_all = s->bwd && gpu_bwd_small_all(s->bwd);
  return tbe_ok();
}

extern "C" tbe_status gpu_session_upload(gpu_session *s, const tbe_batch *h,
                                         const void *grad_output, const float *momentum)
{
  const size_t isz = tbe_itype_size(h->itype);
  s->gen++; /* first: even a failed copy leaves inputs that no metadata was made from */
  GPU_TRY(cudaMemcpy(s->pristine_indices, h->indices, isz * (size_t)h->N,
                     cudaMemcpyHostToDevice));
  GPU_TRY(cudaMemcpy(s->pristine_offsets, h->offsets, isz * (size_t)(s->l->total_B + 1),
                     cudaMemcpyHostToDevice));
  if (h->per_sample_weights && s->pristine_psw)
    GPU_TRY(cudaMemcpy(s->pristine_psw, h->per_sample_weights, sizeof(float) * (size_t)h->N,
                       cudaMemcpyHostToDevice));
  if (s->bwd)
    return gpu_bwd_upload(s->bwd, h, s->l, grad_output, momentum);
  GPU_TRY(cudaMemcpy(const_cast<void *>(s->b.weights), h->weights,
                     tbe_dtype_size(h->wdtype) * (size_t)h->table_offset[h->num_tables],
                     cudaMemcpyHostToDevice));
  return tbe_ok();
}

extern "C" tbe_status gpu_session_replay(gpu_session *s)
{
  if (!s->graph)
    return tbe_error(TBE_EINVAL, "gpu", -1, "replay before gpu_session_capture");
  if (s->graph_small_all && !gpu_bwd_small_all(s->bwd))
    return tbe_error(TBE_EINVAL, "small_tc", -1, "bwd.small_tc: refused: the graph's backward "
                     "makes no metadata (every table was on the tensor-core path), and the "
                     "inputs uploaded since send a table back to the generic backward (capture "
                     "again)");
  /* the graph's forward: a forward of the current inputs, with its metadata when it holds it */
  s->fwd_gen = ++s->gen;
  if (s->graph_hoisted)
    s->meta_gen = s->gen;
  if (s->graph_counts)
    s->counts_gen = s->gen;
  GPU_TRY(cudaGraphLaunch(s->graph, s->stream));
  GPU_TRY(cudaStreamSynchronize(s->stream));
  return tbe_ok();
}

/* The FATAL status for the offender the GPU named: ref_bounds_offender's fields (feature, bag,
 * position, value), the GPU's own message. */
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
  /* the copies below run on the legacy stream, which does not wait for the session's
   * non-blocking one: the untimed offender kernel after ev[1] may still be running */
  GPU_TRY(cudaStreamSynchronize(s->stream));
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
    r->small_mask[t] = s->last ? s->last->small[t] : 0;
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
  for (fwd_plan &p : s->plans)
    gpu_fwd_plan_free(p.gather);
  gpu_bwd_close(s->bwd);
  if (s->graph)
    cudaGraphExecDestroy(s->graph);
  if (s->stream)
    cudaStreamDestroy(s->stream);
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

/* Runs the forward of session s again over POISON2 and sets r->rerun_diffs to what differs
 * from r (the first run's results): out, indices, offsets, the counter and the offender. */
static tbe_status rerun_forward(gpu_session *s, tbe_bounds_mode mode, const gpu_fwd_config *cfg,
                                gpu_fwd_result *r)
{
  gpu_fwd_result again;
  s->poison = POISON2;
  tbe_status st = gpu_session_forward(s, mode, cfg, 0, nullptr);
  if (st.code == TBE_OK)
    st = gpu_session_results(s, &again);
  if (st.code != TBE_OK)
    return st;
  const tbe_batch *b = s->h;
  const size_t isz = tbe_itype_size(b->itype);
  const tbe_status &x = r->bounds, &y = again.bounds;
  const int64_t out = x.code == TBE_OK /* a FATAL stop leaves the output unwritten */
                          ? differing(r->out, again.out, s->l->out_elems, tbe_dtype_size(b->out_dtype))
                          : 0;
  r->rerun_diffs = out +
                   differing(r->indices, again.indices, b->N, isz) +
                   differing(r->offsets, again.offsets, s->l->total_B + 1, isz) +
                   (r->warnings != again.warnings) +
                   (x.code != y.code || x.feature != y.feature || x.bag != y.bag ||
                    x.position != y.position || x.value != y.value);
  r->guard_errors += again.guard_errors;
  gpu_fwd_result_free(&again);
  return tbe_ok();
}

extern "C" tbe_status gpu_run(const tbe_batch *b, const tbe_layout *l, tbe_bounds_mode mode,
                              const gpu_fwd_config *fcfg, const ref_bwd_config *bcfg,
                              const gpu_bwd_config *gcfg, const void *grad_output,
                              const float *momentum, gpu_fwd_result *fr, gpu_bwd_result *br)
{
  memset(fr, 0, sizeof *fr);
  if (br)
    memset(br, 0, sizeof *br);
  gpu_session *s;
  tbe_status st = gpu_session_open(b, l, &s);
  if (st.code == TBE_OK && bcfg)
    st = gpu_session_backward_open(s, bcfg, gcfg, grad_output, momentum);
  if (st.code == TBE_OK)
    st = gpu_session_forward(s, mode, fcfg, 0, nullptr);
  if (st.code == TBE_OK && bcfg)
    st = gpu_session_backward(s, nullptr);
  if (st.code == TBE_OK)
    st = gpu_session_results(s, fr);
  if (st.code == TBE_OK && bcfg && br)
    st = gpu_session_backward_results(s, br);
  if (st.code == TBE_OK)
    st = rerun_forward(s, mode, fcfg, fr);
  gpu_session_close(s);
  return st;
}

extern "C" tbe_status gpu_run_forward(const tbe_batch *b, const tbe_layout *l,
                                      tbe_bounds_mode mode, const gpu_fwd_config *cfg,
                                      gpu_fwd_result *r)
{
  return gpu_run(b, l, mode, cfg, nullptr, nullptr, nullptr, nullptr, r, nullptr);
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
  STATUS_TRY(arena.alloc(bytes, &src));
  STATUS_TRY(arena.alloc(bytes, &dst));
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
