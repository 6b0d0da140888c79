/* backward_test.c: what the case runs cannot show about the GPU backward: the fused deterministic
 * path launched 50 times, most with chunk programs held back before their partial's store
 * (bwd.delay), gives the reference's bits every time (a race shows up as a change), with and
 * without work stealing (bwd.steal), and bounds check + forward + backward captured once in a
 * CUDA graph and replayed on new inputs of the same shape give the reference's bits (so nothing
 * in them syncs with the host; with stealing, the graph's own memset resets the steal counters
 * for each replay; with bwd.hoist, the graph's forward makes the backward's metadata). The
 * hoisted metadata (bwd.hoist=on) belongs to one batch: a backward after a new upload and its
 * forward gives the new batch's bits, and one without a hoisted forward of the current inputs
 * is refused. bwd.small_tc=on: the small tables' weights and momentum equal
 * ref_backward_small_call's (the tensor-core model on the tables the GPU says it took, the
 * normative backward on the rest) bit for bit over several shapes, each with the tables taken
 * or fallen back as the model says, and counts of another batch are refused. SKIPs (exit 77)
 * without a GPU. Not `tbecheck run` over
 * cases/gpu_backward.cases (cli_gpu), where one call never uploads a second batch.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backward_small.h"
#include "bounds.h"
#include "case.h"
#include "race.h"
#include "tbe_gpu.h"

typedef race_ref ref_case;

static void ref_case_free(ref_case *r) { race_ref_free(r); }

/* Parses text and runs the reference on it (race.h); the batch keeps its pristine inputs. */
static int ref_case_run(const char *text, ref_case *r)
{
  tbe_case *c;
  tbe_status s = case_parse(text, &c);
  if (s.code == TBE_OK)
    s = race_ref_run(c, r);
  else
    memset(r, 0, sizeof *r);
  case_free(c);
  if (s.code == TBE_OK && r->bounds.code != TBE_OK)
    s = r->bounds;
  if (s.code != TBE_OK) {
    printf("FAIL  %s: the reference failed: %s\n", text, s.message);
    race_ref_free(r);
    return 1;
  }
  return 0;
}

/* 0 if the GPU's results equal the reference's bit for bit, else 1 with a line saying which. */
static int same_bits(const char *what, const ref_case *r, const gpu_fwd_result *f,
                     const gpu_bwd_result *g)
{
  const tbe_batch *b = &r->b;
  size_t wbytes = tbe_dtype_size(b->wdtype) * (size_t)b->table_offset[b->num_tables];
  const char *bad = memcmp(f->out, r->out, tbe_dtype_size(b->out_dtype) * (size_t)r->l.out_elems)
                        ? "forward output"
                    : memcmp(g->weights, r->w, wbytes) ? "weights"
                    : r->m && memcmp(g->momentum, r->m, sizeof(float) * (size_t)ref_bwd_rows(b))
                        ? "momentum"
                    : r->psw && memcmp(g->psw_grad, r->psw, sizeof(float) * (size_t)b->N)
                        ? "psw_grad"
                        : NULL;
  if (bad)
    printf("FAIL  %s: %s differs from the reference\n", what, bad);
  return bad != NULL;
}

/* bwd.delay of the repeated launches, ns, in turn: every fifth launch without. Each partial
 * slot starts a launch as NaN, so a countdown that overtakes a held-back store shows. */
static const int repeat_delays[] = {0, 2000, 500, 20000, 5000};
#define REPEAT_DELAYS ((int)(sizeof repeat_delays / sizeof repeat_delays[0]))

/* The fused deterministic path, many chunks per run and many runs, launched `reps` times in one
 * session under the delays in turn, stealing work when steal is 1: every launch must give the
 * reference's bits. */
static int repeat_test(const char *text, int reps, int steal)
{
  ref_case r;
  if (ref_case_run(text, &r))
    return 1;
  gpu_session *s;
  tbe_status st = gpu_session_open(&r.b, &r.l, &s);
  gpu_bwd_config gc = {.long_mode = GPU_LONG_FUSED, .steal = steal};
  if (st.code == TBE_OK)
    st = gpu_session_backward_open(s, r.bwd.cfg, &gc, r.bwd.grad_output, r.bwd.momentum);
  int fail = st.code != TBE_OK, launches = 0, delayed = 0, longest = 0;
  int64_t chunks = 0;
  gpu_fwd_config fc = {0, 0, 0, GPU_SMALL_OFF, GPU_GATHER_AUTO};
  for (int i = 0; i < reps && !fail; i++) {
    gpu_fwd_result f;
    gpu_bwd_result g;
    gc.delay = repeat_delays[i % REPEAT_DELAYS];
    st = gpu_session_backward_config(s, &gc);
    if (st.code == TBE_OK)
      st = gpu_session_forward(s, r.mode, &fc, 0, NULL);
    if (st.code == TBE_OK)
      st = gpu_session_backward(s, NULL);
    if (st.code == TBE_OK)
      st = gpu_session_results(s, &f);
    if (st.code == TBE_OK)
      st = gpu_session_backward_results(s, &g);
    if (st.code != TBE_OK) {
      fail = 1;
      break;
    }
    char what[64];
    snprintf(what, sizeof what, "launch %d (bwd.delay=%d bwd.steal=%s)", i + 1, gc.delay,
             steal ? "on" : "off");
    fail |= same_bits(what, &r, &f, &g);
    chunks = g.stats.chunks;
    launches++;
    delayed += gc.delay > 0;
    longest = gc.delay > longest ? gc.delay : longest;
    gpu_fwd_result_free(&f);
    gpu_bwd_result_free(&g);
  }
  if (st.code != TBE_OK)
    printf("FAIL  %s: %s\n", text, st.message);
  printf("%s  %d fused launches (%d with bwd.delay up to %d ns, bwd.steal=%s), %lld chunk "
         "programs each, identical to the reference: %s\n", fail ? "FAIL" : "pass", launches,
         delayed, longest, steal ? "on" : "off", (long long)chunks, text);
  gpu_session_close(s);
  ref_case_free(&r);
  return fail;
}

/* Captures the call on case a (stealing work when steal is 1, the metadata in the forward when
 * hoist is 1), replays it, then uploads case b (same shape, another seed) and replays again:
 * both must give the reference's bits. */
static int graph_test(const char *a, const char *b, int steal, int hoist)
{
  ref_case ra, rb;
  if (ref_case_run(a, &ra))
    return 1;
  if (ref_case_run(b, &rb)) {
    ref_case_free(&ra);
    return 1;
  }
  gpu_session *s;
  gpu_fwd_config fc = {0, 0, 1, GPU_SMALL_AUTO, GPU_GATHER_AUTO};
  gpu_bwd_config gc = {.long_mode = GPU_LONG_FUSED, .steal = steal, .hoist = hoist};
  tbe_status st = gpu_session_open(&ra.b, &ra.l, &s);
  if (st.code == TBE_OK)
    st = gpu_session_backward_open(s, ra.bwd.cfg, &gc, ra.bwd.grad_output, ra.bwd.momentum);
  if (st.code == TBE_OK)
    st = gpu_session_capture(s, ra.mode, &fc);
  int fail = 0;
  for (int pass = 0; pass < 2 && st.code == TBE_OK; pass++) {
    const ref_case *r = pass ? &rb : &ra;
    if (pass)
      st = gpu_session_upload(s, &rb.b, rb.bwd.grad_output, rb.bwd.momentum);
    if (st.code == TBE_OK)
      st = gpu_session_replay(s);
    gpu_fwd_result f;
    gpu_bwd_result g;
    if (st.code == TBE_OK)
      st = gpu_session_results(s, &f);
    if (st.code == TBE_OK)
      st = gpu_session_backward_results(s, &g);
    if (st.code != TBE_OK)
      break;
    fail |= same_bits(pass ? "graph replay on new inputs" : "graph replay", r, &f, &g);
    fail |= f.warnings == 0; /* the cases repair indices: a stale bounds check shows here */
    gpu_fwd_result_free(&f);
    gpu_bwd_result_free(&g);
  }
  if (st.code != TBE_OK) {
    printf("FAIL  graph: %s\n", st.message);
    fail = 1;
  }
  printf("%s  bounds check + forward + backward in one CUDA graph (bwd.steal=%s bwd.hoist=%s), "
         "replayed on two inputs: %s\n", fail ? "FAIL" : "pass", steal ? "on" : "off",
         hoist ? "on" : "off", a);
  gpu_session_close(s);
  ref_case_free(&ra);
  ref_case_free(&rb);
  return fail;
}

/* One forward and backward of session s, then its results held to r's bits and its stats to
 * the hoist's rule (sort and classification 0: they ran in the forward); what names the step.
 * 0 if all hold, else 1 with a line saying which. */
static int hoist_step(gpu_session *s, const ref_case *r, const char *what)
{
  const gpu_fwd_config fc = {0, 0, 1, GPU_SMALL_AUTO, GPU_GATHER_AUTO};
  gpu_fwd_result f;
  gpu_bwd_result g;
  gpu_bwd_stats bs;
  tbe_status st = gpu_session_forward(s, r->mode, &fc, 0, NULL);
  if (st.code == TBE_OK)
    st = gpu_session_backward(s, &bs);
  if (st.code == TBE_OK)
    st = gpu_session_results(s, &f);
  if (st.code == TBE_OK)
    st = gpu_session_backward_results(s, &g);
  if (st.code != TBE_OK) {
    printf("FAIL  %s: %s\n", what, st.message);
    return 1;
  }
  int fail = same_bits(what, r, &f, &g);
  if (!bs.hoisted || bs.sort_ms != 0 || bs.classify_ms != 0) {
    printf("FAIL  %s: the stats do not say the metadata was hoisted (hoisted %d, sort %g ms, "
           "classify %g ms)\n", what, bs.hoisted, bs.sort_ms, bs.classify_ms);
    fail = 1;
  }
  gpu_fwd_result_free(&f);
  gpu_bwd_result_free(&g);
  return fail;
}

/* 0 if the backward of s is refused as bwd.hoist's (TBE_EINVAL, field "hoist"), else 1 with a
 * line naming the step (what) and what came instead. */
static int refused(gpu_session *s, const char *what)
{
  const tbe_status st = gpu_session_backward(s, NULL);
  const int ok = st.code == TBE_EINVAL && !strcmp(st.field, "hoist");
  if (!ok)
    printf("FAIL  %s: the backward was not refused as bwd.hoist's: %s\n", what,
           st.code == TBE_OK ? "it ran" : st.message);
  else
    printf("      %s: refused: %s\n", what, st.message);
  return !ok;
}

/* bwd.hoist=on across two batches of one shape (a, then b uploaded; the cases repair indices, so
 * the metadata must follow the forward's repair): forward + backward of a, then of b, each with
 * a's or b's bits (metadata kept from a gives b's backward a's runs); then the refusals: a
 * backward after a forward without the hoist, and one after an upload without its forward, each
 * followed by the forward that makes it run. long_mode: the long tier's. */
static int hoist_test(const char *a, const char *b, gpu_long_mode long_mode)
{
  ref_case ra, rb;
  if (ref_case_run(a, &ra))
    return 1;
  if (ref_case_run(b, &rb)) {
    ref_case_free(&ra);
    return 1;
  }
  gpu_session *s;
  gpu_bwd_config gc = {.long_mode = long_mode, .hoist = 1};
  tbe_status st = gpu_session_open(&ra.b, &ra.l, &s);
  if (st.code == TBE_OK)
    st = gpu_session_backward_open(s, ra.bwd.cfg, &gc, ra.bwd.grad_output, ra.bwd.momentum);
  int fail = st.code != TBE_OK;
  if (fail)
    printf("FAIL  hoist: %s\n", st.message);
  const gpu_fwd_config fc = {0, 0, 1, GPU_SMALL_AUTO, GPU_GATHER_AUTO};
  if (!fail) {
    fail |= hoist_step(s, &ra, "hoisted batch a");
    st = gpu_session_upload(s, &rb.b, rb.bwd.grad_output, rb.bwd.momentum);
    fail |= st.code != TBE_OK || hoist_step(s, &rb, "hoisted batch b after a's");
    /* a forward without the hoist leaves no metadata of its inputs */
    gc.hoist = 0;
    st = gpu_session_backward_config(s, &gc);
    if (st.code == TBE_OK)
      st = gpu_session_forward(s, rb.mode, &fc, 0, NULL);
    gc.hoist = 1;
    if (st.code == TBE_OK)
      st = gpu_session_backward_config(s, &gc);
    fail |= st.code != TBE_OK || refused(s, "backward after a forward without the hoist");
    fail |= hoist_step(s, &rb, "hoisted batch b again");
    /* new inputs without their forward: the metadata held is b's */
    st = gpu_session_upload(s, &ra.b, ra.bwd.grad_output, ra.bwd.momentum);
    fail |= st.code != TBE_OK || refused(s, "backward after an upload without its forward");
    fail |= hoist_step(s, &ra, "hoisted batch a after b's");
    if (st.code != TBE_OK)
      printf("FAIL  hoist: %s\n", st.message);
  }
  printf("%s  bwd.hoist=on (bwd.long=%s) on batches a, b, b, a of one shape, and both refusals: "
         "%s\n", fail ? "FAIL" : "pass", long_mode == GPU_LONG_FUSED ? "fused" : "accum", a);
  gpu_session_close(s);
  ref_case_free(&ra);
  ref_case_free(&rb);
  return fail;
}

/* The weights and momentum that a call with bwd.small_tc=on must give on r, whose forward put
 * features small[t] (the GPU's small_mask) on the small path: ref_backward_small_call on r's
 * repaired inputs; *w and *m malloc'd, taken[num_tables]. */
static tbe_status small_tc_expected(ref_case *r, const unsigned char *small, void **w, float **m,
                                    unsigned char *taken)
{
  tbe_batch *b = &r->b;
  const size_t isz = tbe_itype_size(b->itype), ib = isz * (size_t)b->N;
  const size_t ob = isz * (size_t)(r->l.total_B + 1);
  const size_t wb = tbe_dtype_size(b->wdtype) * (size_t)b->table_offset[b->num_tables];
  const size_t mb = sizeof(float) * (size_t)ref_bwd_rows(b);
  void *i0 = malloc(ib + 1), *o0 = malloc(ob), *keep = b->weights;
  unsigned char *tables = malloc((size_t)b->num_tables);
  *w = malloc(wb + 1);
  *m = malloc(mb + 1);
  memcpy(i0, b->indices, ib);
  memcpy(o0, b->offsets, ob);
  memcpy(*w, keep, wb);
  memcpy(*m, r->bwd.momentum, mb);
  int64_t warnings;
  tbe_status st = ref_bounds_check(b, &r->l, r->mode, &warnings);
  ref_small_tc_tables(b, r->bwd.cfg, small, tables);
  b->weights = *w;
  if (st.code == TBE_OK)
    st = ref_backward_small_call(b, &r->l, r->bwd.cfg, r->bwd.grad_output, tables, *m, NULL,
                                 taken);
  b->weights = keep;
  memcpy(b->indices, i0, ib);
  memcpy(b->offsets, o0, ob);
  free(i0);
  free(o0);
  free(tables);
  return st;
}

/* bwd.small_tc=on on case text (fwd.small=on, with or without the hoist): weights, momentum and
 * small_tc_mask as small_tc_expected says, with `want` tables taken, and no metadata made (0
 * runs) exactly when nometa (bounds=none, every table taken); then, after an upload of the same
 * inputs without a forward, the backward must be refused: as small_tc's, or with the hoist on
 * as bwd.hoist's. */
static int small_tc_test(const char *text, int want, int hoist, int nometa)
{
  ref_case r;
  if (ref_case_run(text, &r))
    return 1;
  gpu_session *s;
  const gpu_fwd_config fc = {0, 0, 0, GPU_SMALL_ON, GPU_GATHER_AUTO};
  const gpu_bwd_config gc = {.hoist = hoist, .small_tc = 1};
  gpu_fwd_result f = {0};
  gpu_bwd_result g = {0};
  tbe_status st = gpu_session_open(&r.b, &r.l, &s);
  if (st.code == TBE_OK)
    st = gpu_session_backward_open(s, r.bwd.cfg, &gc, r.bwd.grad_output, r.bwd.momentum);
  if (st.code == TBE_OK)
    st = gpu_session_forward(s, r.mode, &fc, 0, NULL);
  if (st.code == TBE_OK)
    st = gpu_session_backward(s, NULL);
  if (st.code == TBE_OK)
    st = gpu_session_results(s, &f);
  if (st.code == TBE_OK)
    st = gpu_session_backward_results(s, &g);
  void *w = NULL;
  float *m = NULL;
  unsigned char *taken = calloc((size_t)r.b.num_tables, 1);
  if (st.code == TBE_OK)
    st = small_tc_expected(&r, f.small_mask, &w, &m, taken);
  int fail = st.code != TBE_OK;
  if (fail)
    printf("FAIL  %s: %s\n", text, st.message);
  int got = 0;
  for (int32_t j = 0; j < r.b.num_tables; j++)
    got += taken[j];
  for (int32_t t = 0; !fail && t < r.b.T; t++)
    if (g.small_tc_mask[t] != taken[r.b.feature_table_map[t]]) {
      printf("FAIL  %s: feature %d: the GPU says %s, the model %s\n", text, t,
             g.small_tc_mask[t] ? "taken" : "not taken",
             taken[r.b.feature_table_map[t]] ? "taken" : "not taken");
      fail = 1;
    }
  const size_t wb = tbe_dtype_size(r.b.wdtype) * (size_t)r.b.table_offset[r.b.num_tables];
  if (!fail && (memcmp(g.weights, w, wb) ||
                memcmp(g.momentum, m, sizeof(float) * (size_t)ref_bwd_rows(&r.b)))) {
    printf("FAIL  %s: the weights or momentum differ from the model's\n", text);
    fail = 1;
  }
  if (!fail && got != want) {
    printf("FAIL  %s: %d tables taken, the case is built for %d\n", text, got, want);
    fail = 1;
  }
  if (!fail && (g.stats.runs == 0) != nometa) {
    printf("FAIL  %s: %lld runs: the metadata was %s\n", text, (long long)g.stats.runs,
           nometa ? "made though every table is taken without a bounds check" : "left out");
    fail = 1;
  }
  if (st.code == TBE_OK) { /* the same inputs again, without their forward */
    /* with the hoist on, its generation check refuses first: all the metadata is stale */
    const char *const by = hoist ? "hoist" : "small_tc";
    st = gpu_session_upload(s, &r.b, r.bwd.grad_output, r.bwd.momentum);
    const tbe_status again = st.code == TBE_OK ? gpu_session_backward(s, NULL) : st;
    if (!(again.code == TBE_EINVAL && !strcmp(again.field, by))) {
      printf("FAIL  %s: a backward after an upload without its forward was not refused as "
             "%s's: %s\n", text, by, again.code == TBE_OK ? "it ran" : again.message);
      fail = 1;
    }
  }
  printf("%s  bwd.small_tc=on (bwd.hoist=%s), %d tables taken, bit for bit the model's: %s\n",
         fail ? "FAIL" : "pass", hoist ? "on" : "off", got, text);
  free(w);
  free(m);
  free(taken);
  gpu_fwd_result_free(&f);
  gpu_bwd_result_free(&g);
  gpu_session_close(s);
  ref_case_free(&r);
  return fail;
}

int main(void)
{
  char desc[256];
  tbe_status st = gpu_probe(desc, sizeof desc);
  if (st.code != TBE_OK) {
    printf("SKIP: %s\n", st.message);
    return 77;
  }
  printf("GPU: %s\n", desc);
  int fail = 0;
  static const char *const many = "T=4 B=4096 E=300 D=64 L=24 dist=zipf:1.1 wdtype=fp16 "
                                  "opt=rowwise_adagrad bwd.threshold=32 bwd.chunk=7 seed=31";
  static const char *const hot = "T=2 B=16384 E=2000 D=128 L=32 hot=0:5:200000,1:9:100000 "
                                 "opt=rowwise_adagrad weighted=1 bwd.chunk=64 seed=32";
  static const char *const graph[2] = {
      "T=3 B=2048 E=500,3000,40 D=64,128,16 L=12 dist=zipf:1.1 wdtype=fp16 weighted=1 "
      "invalid=0.01 opt=rowwise_adagrad bwd.threshold=16 seed=33",
      "T=3 B=2048 E=500,3000,40 D=64,128,16 L=12 dist=zipf:1.1 wdtype=fp16 weighted=1 "
      "invalid=0.01 opt=rowwise_adagrad bwd.threshold=16 seed=34"};
  for (int steal = 0; steal < 2; steal++) {
    fail |= repeat_test(many, 50, steal);
    fail |= repeat_test(hot, 50, steal);
    fail |= graph_test(graph[0], graph[1], steal, 0);
  }
  fail |= graph_test(graph[0], graph[1], 0, 1);
  fail |= hoist_test(graph[0], graph[1], GPU_LONG_ACCUM);
  fail |= hoist_test(graph[0], graph[1], GPU_LONG_FUSED);
  static const struct {
    const char *text;
    int taken, hoist, nometa;
  } small_tc[] = {
      /* one segment and a partial k-step; SUM */
      {"T=1 B=37 E=50 D=128 L=20 wdtype=fp16 fwd.small=on opt=rowwise_adagrad seed=41", 1, 0, 0},
      /* many segments (B = 3.5 * 256), MEAN with empty bags, clipping, E = 64 (the limit) */
      {"T=1 B=900 E=64 D=64 L=0..60 pool=mean wdtype=fp16 fwd.small=on opt=rowwise_adagrad "
       "clip=0.5 seed=42", 1, 0, 0},
      /* D = 72 and 120 (multiples of 8 only: the small forward's rule), E = 1 and 17, a shared
       * table (features 0 and 2), a large generic table beside them, L2 weight decay */
      {"T=4 B=700 E=17,1,5000 D=72,120,64 map=0,1,0,2 L=30 dist=zipf:1.1 wdtype=fp16 "
       "fwd.small=on opt=rowwise_adagrad wd=l2 lambda=0.01 invalid=0.01 seed=43", 2, 0, 0},
      /* a bag of L > 256 (L up to 300) sends the table back to the generic backward */
      {"T=2 B=300 E=40,40 D=64,128 L=200..300 wdtype=fp16 fwd.small=on opt=rowwise_adagrad "
       "seed=44", 0, 0, 0},
      /* the same without a bounds check: the host sees the fallback, so the metadata is made */
      {"T=2 B=300 E=40,40 D=64,128 L=200..300 wdtype=fp16 bounds=none fwd.small=on "
       "opt=rowwise_adagrad seed=44", 0, 0, 0},
      /* with the hoisted metadata, and stochastic rounding of the written rows */
      {"T=2 B=2048 E=50,9 D=128,96 L=24 wdtype=fp16 fwd.small=on opt=rowwise_adagrad sr=1 "
       "bwd.hoist=on seed=45", 2, 1, 0},
      /* the bench's SB shape, reduced: no bounds check, every table taken, no metadata */
      {"T=1 B=8192 E=50 D=128 L=128 wdtype=fp16 bounds=none fwd.small=on opt=rowwise_adagrad "
       "seed=46", 1, 0, 1},
      /* the same hoisted: the forward makes no metadata either */
      {"T=1 B=8192 E=50 D=128 L=128 wdtype=fp16 bounds=none fwd.small=on opt=rowwise_adagrad "
       "seed=46", 1, 1, 1},
  };
  for (size_t i = 0; i < sizeof small_tc / sizeof small_tc[0]; i++)
    fail |= small_tc_test(small_tc[i].text, small_tc[i].taken, small_tc[i].hoist,
                          small_tc[i].nometa);
  return fail;
}
