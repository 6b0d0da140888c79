/* gpu_backward_bench.c: the GPU backward + row-wise Adagrad benchmark on cases/bench.cases's
 * F1-F4, HOT, PUB, MIX and SB, and a segment-length sweep; validates against the reference, then
 * times the variants side by side in one run. Not a test: it never asserts.
 *
 * Effective GB/s follows FBGEMM's convention: backward bytes = 2 x the forward's
 * (N*D*weight_bytes + out_elems*out_bytes). Times are medians of REPS CUDA-event timings of the
 * backward alone (sort .. optimizer) after warm-up; each rep starts from the pristine weights
 * and momentum (restored, untimed, with the forward that precedes it). With --db PATH the
 * figures are also recorded as perf rows (bench_db.h), for the report. --only F1,SL (before
 * --db) runs only the shapes named (SL: the sweep; SL4: its SL 4 alone, shuffled), e.g. under a
 * profiler.
 *
 * bwd.hoist: on F1 and PUB (hoist_shapes), forward, backward and their total with the metadata
 * in the backward (off) and in the forward (on), side by side, each backward held to the
 * reference's bits; --hoist (first) runs only these. The forward's own benchmark
 * (gpu_forward_bench) opens no backward, so its forward never holds the metadata.
 *
 * bwd.small_tc: on SB (small_tc_shapes; fwd.small=on), forward, backward and their total with
 * the generic backward (off, held to the reference's bits) and the tensor-core one (on, held
 * to ref_backward_small_call's bits: the model), side by side; --only SB runs only this.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backward_small.h"
#include "bench_db.h"
#include "bounds.h"
#include "case.h"
#include "engine.h"
#include "engine_ref.h"
#include "bench_shapes.h"
#include "gen.h"
#include "prng.h"
#include "tbe_gpu.h"

enum { REPS = 10 };

/* the shapes timed, by their names in cases/bench.cases (each with bounds=none), run with
 * opt=rowwise_adagrad appended; each is validated against the reference first */
static const char *const shapes[] = {"F1", "F2", "F3", "F4", "HOT", "PUB", "MIX"};
/* those also timed with bwd.hoist off and on (run_hoist) */
static const char *const hoist_shapes[] = {"F1", "PUB"};
/* those timed with bwd.small_tc off and on alone (run_small_tc) */
static const char *const small_tc_shapes[] = {"SB"};

typedef struct {
  const char *name;
  gpu_bwd_config g;
  ref_combine combine;
} variant;

static const variant variants[] = {
  {"fused", {.long_mode = GPU_LONG_FUSED}, REF_COMBINE_DETERMINISTIC},
  {"accum", {.long_mode = GPU_LONG_ACCUM}, REF_COMBINE_DETERMINISTIC},
  {"fused-atomic", {.long_mode = GPU_LONG_FUSED, .bulk = GPU_BULK_OFF}, REF_COMBINE_ATOMIC},
  {"accum-atomic", {.long_mode = GPU_LONG_ACCUM, .bulk = GPU_BULK_OFF}, REF_COMBINE_ATOMIC},
  {"fused-bulk", {.long_mode = GPU_LONG_FUSED, .bulk = GPU_BULK_ON}, REF_COMBINE_ATOMIC},
  {"accum-bulk", {.long_mode = GPU_LONG_ACCUM, .bulk = GPU_BULK_ON}, REF_COMBINE_ATOMIC},
  {"nobucket", {.no_bucket = 1}, REF_COMBINE_DETERMINISTIC},
  {"nodirect", {.no_direct = 1}, REF_COMBINE_DETERMINISTIC},
  {"width4", {.short_width = 4, .long_width = 4}, REF_COMBINE_DETERMINISTIC},
  {"steal", {.steal = 1}, REF_COMBINE_DETERMINISTIC},
  {"fused-steal", {.long_mode = GPU_LONG_FUSED, .steal = 1}, REF_COMBINE_DETERMINISTIC},
  /* the short tier's grid before it ran on the resident grid: 16 blocks per SM of a 132-SM
   * GPU (the H100's and H200's), every tier on those blocks */
  {"grid2112", {.grid = 2112}, REF_COMBINE_DETERMINISTIC},
  {"block4", {.short_block = 4}, REF_COMBINE_DETERMINISTIC},
  {"block8", {.short_block = 8}, REF_COMBINE_DETERMINISTIC},
  {"block16", {.short_block = 16}, REF_COMBINE_DETERMINISTIC},
};
enum { NVAR = sizeof variants / sizeof variants[0] };

static void die(const char *what, tbe_status st)
{
  fprintf(stderr, "%s: %s\n", what, st.message);
  exit(3);
}

static int cmp_stats(const void *a, const void *b)
{
  double x = ((const gpu_bwd_stats *)a)->ms, y = ((const gpu_bwd_stats *)b)->ms;
  return x < y ? -1 : x > y;
}

/* The median backward of REPS (after 2 warm-ups) of an open session. */
static gpu_bwd_stats median_backward(gpu_session *s)
{
  gpu_fwd_config fc = {0, 0, 0, GPU_SMALL_OFF, GPU_GATHER_AUTO};
  gpu_bwd_stats t[REPS];
  for (int i = -2; i < REPS; i++) {
    tbe_status st = gpu_session_forward(s, TBE_BOUNDS_NONE, &fc, 0, NULL);
    if (st.code == TBE_OK)
      st = gpu_session_backward(s, &t[i < 0 ? 0 : i]);
    if (st.code != TBE_OK)
      die("backward", st);
  }
  qsort(t, REPS, sizeof t[0], cmp_stats);
  return t[REPS / 2];
}

/* Bit-exact (deterministic) check of the session's last backward against the reference's. */
static const char *check(gpu_session *s, tbe_batch *b, const tbe_layout *l, const gen_bwd *bwd,
                         const void *ref_w, const float *ref_m)
{
  gpu_bwd_result r;
  tbe_status st = gpu_session_backward_results(s, &r);
  if (st.code != TBE_OK)
    die("results", st);
  size_t wb = tbe_dtype_size(b->wdtype) * (size_t)b->table_offset[b->num_tables];
  const char *v = memcmp(r.weights, ref_w, wb) ? "WEIGHTS DIFFER"
                  : bwd->momentum && memcmp(r.momentum, ref_m, sizeof(float) * (size_t)ref_bwd_rows(b))
                      ? "MOMENTUM DIFFERS"
                      : "bit-exact";
  (void)l;
  gpu_bwd_result_free(&r);
  return v;
}

static bench_db *rec;
static double copy_gbps;

/* FBGEMM's convention: twice the forward's bytes (rows read, output written). */
static double bwd_bytes(const tbe_batch *b, const tbe_layout *l)
{
  double fwd = 0;
  for (int32_t t = 0; t < b->T; t++) {
    double n = (double)(tbe_iget(b->offsets, b->itype, l->B_offsets[t + 1]) -
                        tbe_iget(b->offsets, b->itype, l->B_offsets[t]));
    fwd += n * b->D[b->feature_table_map[t]] * (double)tbe_dtype_size(b->wdtype);
  }
  fwd += (double)l->out_elems * (double)tbe_dtype_size(b->out_dtype);
  return 2 * fwd;
}

/* Issue 20's byte count, where every table is one width D (else 0): each lookup's gradient row
 * read in fp32, each run's weight row read and written and its momentum word read and written:
 * lookups x D x 4 + runs x D x 2 x the weight's bytes + runs x 8. */
static double floor_bytes(const tbe_batch *b, int64_t runs)
{
  const int32_t D = b->D[0];
  for (int32_t j = 1; j < b->num_tables; j++)
    if (b->D[j] != D)
      return 0;
  return (double)b->N * D * 4 + (double)runs * D * 2 * (double)tbe_dtype_size(b->wdtype) +
         (double)runs * 8;
}

static double gbps(const tbe_batch *b, const tbe_layout *l, double ms)
{
  return bwd_bytes(b, l) / (ms * 1e-3) / 1e9;
}

/* Opens a session on b with cfg/g, or dies. */
static gpu_session *open_bwd(tbe_batch *b, const tbe_layout *l, const ref_bwd_config *cfg,
                             const gpu_bwd_config *g, const gen_bwd *bwd)
{
  gpu_session *s;
  tbe_status st = gpu_session_open(b, l, &s);
  if (st.code == TBE_OK)
    st = gpu_session_backward_open(s, cfg, g, bwd->grad_output, bwd->momentum);
  if (st.code != TBE_OK)
    die("session", st);
  return s;
}

static int cmp_ms(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* One forward + backward pair's times: the forward (bounds check + forward, + the metadata
 * when hoisted), the backward's stats, their sum. */
typedef struct {
  double fwd, total;
  gpu_bwd_stats bwd;
} step_times;

/* The medians of REPS (after 2 warm-ups) forward + backward pairs of an open session, each
 * part's median on its own (so the total's need not be the parts' sum). */
static step_times median_step(gpu_session *s, gpu_small_mode small)
{
  gpu_fwd_config fc = {0, 0, 0, small, GPU_GATHER_AUTO};
  double fwd[REPS], total[REPS];
  gpu_bwd_stats b[REPS];
  for (int i = -2; i < REPS; i++) {
    const int k = i < 0 ? 0 : i;
    float ms;
    tbe_status st = gpu_session_forward(s, TBE_BOUNDS_NONE, &fc, 0, &ms);
    if (st.code == TBE_OK)
      st = gpu_session_backward(s, &b[k]);
    if (st.code != TBE_OK)
      die("forward + backward", st);
    fwd[k] = ms;
    total[k] = ms + b[k].ms;
  }
  qsort(fwd, REPS, sizeof fwd[0], cmp_ms);
  qsort(total, REPS, sizeof total[0], cmp_ms);
  qsort(b, REPS, sizeof b[0], cmp_stats);
  return (step_times){fwd[REPS / 2], total[REPS / 2], b[REPS / 2]};
}

/* A knob's step times, off or on, into the database as configuration "KNOB-off"/"KNOB-on":
 * forward, backward and their sum, each by the backward's byte count (the forward's half). */
static void record_step(const char *name, const char *text, const char *knob, int on,
                        const step_times *t, const tbe_batch *b, const tbe_layout *l)
{
  char cfg[32];
  snprintf(cfg, sizeof cfg, "%s-%s", knob, on ? "on" : "off");
  const double bytes = bwd_bytes(b, l);
  bench_db_figure(rec, name, text, "gpu:step-forward", cfg, t->fwd, bytes / 2, copy_gbps);
  bench_db_figure(rec, name, text, "gpu:step-backward", cfg, t->bwd.ms, bytes, copy_gbps);
  bench_db_figure(rec, name, text, "gpu:step", cfg, t->total, 1.5 * bytes, copy_gbps);
}

/* The knob's on - off line of t[0] (off) and t[1] (on). */
static void print_step_delta(const char *knob, const step_times t[2])
{
  printf("  %s on - off: forward %+8.3f ms backward %+8.3f ms total %+8.3f ms (%+.1f%%)\n", knob,
         t[1].fwd - t[0].fwd, t[1].bwd.ms - t[0].bwd.ms, t[1].total - t[0].total,
         100.0 * (t[1].total - t[0].total) / t[0].total);
}

/* bwd.hoist off and on on shape name (batch b, its reference ref_w/ref_m), the default
 * backward configuration otherwise: forward, backward and total, side by side. */
static void run_hoist(const char *name, const char *text, tbe_batch *b, const tbe_layout *l,
                      const gen_bwd *bwd, const void *ref_w, const float *ref_m)
{
  step_times t[2];
  for (int h = 0; h < 2; h++) {
    const gpu_bwd_config g = {.hoist = h};
    gpu_session *s = open_bwd(b, l, bwd->cfg, &g, bwd);
    t[h] = median_step(s, GPU_SMALL_OFF);
    const gpu_bwd_stats *m = &t[h].bwd;
    printf("  hoist %-3s forward %8.3f ms backward %8.3f ms total %8.3f ms | sort %6.3f class "
           "%6.3f%s, in the forward %6.3f | %s\n", h ? "on" : "off", t[h].fwd, m->ms, t[h].total,
           m->sort_ms, m->classify_ms, m->hoisted ? " (hoisted)" : "", m->hoist_ms,
           check(s, b, l, bwd, ref_w, ref_m));
    fflush(stdout);
    record_step(name, text, "hoist", h, &t[h], b, l);
    gpu_session_close(s);
  }
  print_step_delta("hoist", t);
}

/* The weights and momentum of bwd.small_tc=on on b, every feature on the small forward path:
 * ref_backward_small_call on copies (malloc'd into *w, *m). */
static void small_tc_model(tbe_batch *b, const tbe_layout *l, const gen_bwd *bwd, void **w,
                           float **m)
{
  const size_t wb = tbe_dtype_size(b->wdtype) * (size_t)b->table_offset[b->num_tables];
  const size_t mb = sizeof(float) * (size_t)ref_bwd_rows(b);
  unsigned char *small = malloc((size_t)b->T), *tables = malloc((size_t)b->num_tables * 2 + 1);
  for (int32_t t = 0; t < b->T; t++)
    small[t] = (unsigned char)ref_small_eligible(b, t);
  ref_small_tc_tables(b, bwd->cfg, small, tables);
  void *keep = b->weights;
  *w = malloc(wb + 1);
  *m = malloc(mb + 1);
  memcpy(*w, keep, wb);
  memcpy(*m, bwd->momentum, mb);
  b->weights = *w;
  tbe_status st = ref_backward_small_call(b, l, bwd->cfg, bwd->grad_output, tables, *m, NULL,
                                          tables + b->num_tables);
  b->weights = keep;
  if (st.code != TBE_OK)
    die("bwd.small_tc model", st);
  free(small);
  free(tables);
}

/* bwd.small_tc off and on on shape name (its fwd.small=on): forward, backward and total side by
 * side, off held to the reference's bits, on to the model's. */
static void run_small_tc(const char *name, const char *text, tbe_batch *b, const tbe_layout *l,
                         const gen_bwd *bwd, const void *ref_w, const float *ref_m)
{
  void *model_w;
  float *model_m;
  small_tc_model(b, l, bwd, &model_w, &model_m);
  step_times t[2];
  for (int on = 0; on < 2; on++) {
    const gpu_bwd_config g = {.small_tc = on};
    gpu_session *s = open_bwd(b, l, bwd->cfg, &g, bwd);
    t[on] = median_step(s, GPU_SMALL_ON);
    const gpu_bwd_stats *m = &t[on].bwd;
    printf("  small_tc %-3s forward %8.3f ms backward %8.3f ms total %8.3f ms | sort %6.3f "
           "class %6.3f short %7.3f long %7.3f small %7.3f, %d tables | %s\n", on ? "on" : "off",
           t[on].fwd, m->ms, t[on].total, m->sort_ms, m->classify_ms, m->short_ms, m->long_ms,
           m->small_ms, m->small_tc_tables,
           check(s, b, l, bwd, on ? model_w : ref_w, on ? model_m : ref_m));
    fflush(stdout);
    record_step(name, text, "small_tc", on, &t[on], b, l);
    gpu_session_close(s);
  }
  print_step_delta("small_tc", t);
  free(model_w);
  free(model_m);
}

/* hoist_only: --hoist, the bwd.hoist comparison alone */
static int hoist_only;

static int hoisted_shape(const char *name)
{
  for (size_t k = 0; k < sizeof hoist_shapes / sizeof hoist_shapes[0]; k++)
    if (!strcmp(hoist_shapes[k], name))
      return 1;
  return 0;
}

static int small_tc_shape(const char *name)
{
  for (size_t k = 0; k < sizeof small_tc_shapes / sizeof small_tc_shapes[0]; k++)
    if (!strcmp(small_tc_shapes[k], name))
      return 1;
  return 0;
}

static void run_shape(const char *name)
{
  char *text = bench_shape(name, "opt=rowwise_adagrad");
  tbe_case *c;
  tbe_batch b;
  gen_bwd bwd;
  tbe_layout l;
  tbe_status st = case_parse(text, &c);
  if (st.code == TBE_OK)
    st = gen_case(c, &b, &bwd);
  if (st.code == TBE_OK)
    st = tbe_layout_init(&l, &b);
  if (st.code != TBE_OK)
    die(text, st);
  void *ref_w = NULL;
  float *ref_m = NULL, *ref_psw = NULL;
  double t0 = omp_get_wtime();
  if ((st = eng_ref_backward_run(&b, &l, &bwd, &ref_w, &ref_m, &ref_psw)).code)
    die("reference", st);
  double ref_s = omp_get_wtime() - t0;
  printf("%-4s %s\n", name, text);
  int64_t runs = -1;
  for (int v = 0; v < NVAR && !hoist_only && !small_tc_shape(name); v++) {
    ref_bwd_config cfg = *bwd.cfg;
    cfg.combine = variants[v].combine;
    gpu_session *s = open_bwd(&b, &l, &cfg, &variants[v].g, &bwd);
    gpu_bwd_stats m = median_backward(s);
    const char *ok = cfg.combine == REF_COMBINE_ATOMIC ? "(bound: cases/gpu_backward.cases)"
                                                       : check(s, &b, &l, &bwd, ref_w, ref_m);
    printf("  %-13s %8.3f ms %6.0f GB/s | sort %6.3f class %6.3f short %7.3f long %7.3f | "
           "runs %lld long %lld chunks %lld | %s\n",
           variants[v].name, m.ms, gbps(&b, &l, m.ms), m.sort_ms, m.classify_ms, m.short_ms,
           m.long_ms, (long long)m.runs, (long long)m.long_runs, (long long)m.chunks, ok);
    fflush(stdout);
    bench_db_figure(rec, name, text, "gpu:backward", variants[v].name, m.ms,
                    bwd_bytes(&b, &l), copy_gbps);
    gpu_session_close(s);
    runs = m.runs;
  }
  const double fb = runs >= 0 ? floor_bytes(&b, runs) : 0;
  if (fb > 0) /* bench/bwd_targets.py reads this line */
    printf("  floor         %lld lookups, %lld runs: %.3f GB, %.3f ms at the copy ceiling "
           "(issue 20's count)\n", (long long)b.N, (long long)runs, fb / 1e9,
           fb / (copy_gbps * 1e9) * 1e3);
  if (hoisted_shape(name))
    run_hoist(name, text, &b, &l, &bwd, ref_w, ref_m);
  if (small_tc_shape(name))
    run_small_tc(name, text, &b, &l, &bwd, ref_w, ref_m);
  printf("  (reference backward on the CPU: %.1f s, %d threads)\n", ref_s, omp_get_max_threads());
  free(ref_w);
  free(ref_m);
  free(ref_psw);
  tbe_layout_free(&l);
  gen_case_free(&b, &bwd);
  case_free(c);
  free(text);
}

/* Every run of length exactly sl: N lookups over N/sl rows; in order, row p % E at position p
 * (gradient rows read in order), and shuffled, the same rows at positions permuted by a seeded
 * Fisher-Yates (random gradient reads: the anchor probe's --sl data). one > 0: that SL alone, in
 * the shuffled column alone (--only SL<n>, e.g. under a profiler). */
static const int sls[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 100000};

static void run_sweep(int one)
{
  /* SHUFFLED: the column set beside the anchor's --sl (its data), whose parts are printed;
   * chunk 1024 makes SL 1024 a long run of one chunk (its chunk program's own step) */
  enum { NCOL = 5, SHUFFLED = 2 };
  static const struct {
    int threshold, chunk, shuffled, width;
    const char *name;
  } cols[NCOL] = {{32, 256, 0, 0, "thr32"},
                  {256, 256, 0, 0, "thr256"},
                  {256, 256, 1, 0, "shuffled-thr256"},
                  {256, 1024, 1, 0, "shuffled-chunk1024"},
                  {256, 256, 1, 4, "shuffled-width4"}};
  printf("SL sweep: T=1 B=262144 L=32 D=128 fp16, N = 8.4M lookups, every run of length SL\n");
  printf("  %8s %14s %14s %16s %16s %16s\n", "SL", "thr=32 ms", "thr=256 ms", "shuffled ms",
         "shuf. chk1024 ms", "shuf. width4 ms");
  for (size_t k = 0; k < sizeof sls / sizeof sls[0]; k++) {
    if (one > 0 && sls[k] != one)
      continue;
    char text[256];
    const int64_t N = 262144 * 32;
    snprintf(text, sizeof text,
             "T=1 B=262144 E=%lld D=128 L=32 wdtype=fp16 bounds=none opt=rowwise_adagrad seed=9",
             (long long)(N / sls[k]));
    tbe_case *c;
    tbe_batch b;
    gen_bwd bwd;
    tbe_layout l;
    tbe_status st = case_parse(text, &c);
    if (st.code == TBE_OK)
      st = gen_case(c, &b, &bwd);
    if (st.code == TBE_OK)
      st = tbe_layout_init(&l, &b);
    if (st.code != TBE_OK)
      die(text, st);
    double ms[NCOL] = {0}, gb[NCOL] = {0};
    gpu_bwd_stats parts = {0};
    for (int t = 0; t < NCOL; t++) {
      if (one > 0 && t != SHUFFLED)
        continue;
      for (int64_t p = 0; p < b.N; p++)
        tbe_iset(b.indices, b.itype, p, p % b.E[0]);
      const uint64_t key = prng_key(9, (uint64_t)sls[k]);
      for (int64_t p = b.N - 1; cols[t].shuffled && p > 0; p--) {
        const int64_t q = (int64_t)prng_below(prng_at(key, (uint64_t)p), (uint64_t)p + 1);
        const int64_t a = tbe_iget(b.indices, b.itype, p);
        tbe_iset(b.indices, b.itype, p, tbe_iget(b.indices, b.itype, q));
        tbe_iset(b.indices, b.itype, q, a);
      }
      ref_bwd_config cfg = *bwd.cfg;
      cfg.threshold = cols[t].threshold;
      cfg.chunk = cols[t].chunk;
      gpu_bwd_config g = {.long_mode = GPU_LONG_FUSED,
                          .short_width = cols[t].width,
                          .long_width = cols[t].width};
      gpu_session *s = open_bwd(&b, &l, &cfg, &g, &bwd);
      const gpu_bwd_stats m = median_backward(s);
      ms[t] = m.ms;
      if (t == SHUFFLED)
        parts = m;
      gb[t] = gbps(&b, &l, ms[t]);
      gpu_session_close(s);
      char name[48];
      snprintf(name, sizeof name, "SL%d-%s", sls[k], cols[t].name);
      bench_db_figure(rec, name, text, "gpu:backward", NULL, ms[t], bwd_bytes(&b, &l), copy_gbps);
    }
    printf("  %8d %14.3f %14.3f %16.3f %16.3f %16.3f   %5.0f / %5.0f / %5.0f / %5.0f / %5.0f"
           " GB/s\n", sls[k], ms[0], ms[1], ms[2], ms[3], ms[4], gb[0], gb[1], gb[2], gb[3], gb[4]);
    printf("  %8s shuffled: sort %.3f class %.3f short %.3f long %.3f ms\n", "", parts.sort_ms,
           parts.classify_ms, parts.short_ms, parts.long_ms);
    fflush(stdout);
    tbe_layout_free(&l);
    gen_case_free(&b, &bwd);
    case_free(c);
  }
}

/* --only NAME,...: the shapes (and SL, the sweep) to run; NULL: all of them */
static const char *only;

static int wanted(const char *name) { return bench_wanted(only, name); }

int main(int argc, char **argv)
{
  if (argc >= 2 && !strcmp(argv[1], "--hoist")) {
    hoist_only = 1;
    argv[1] = argv[0];
    argv++;
    argc--;
  }
  if (argc >= 3 && !strcmp(argv[1], "--only")) {
    only = argv[2];
    argv[2] = argv[0];
    argv += 2;
    argc -= 2;
  }
  char desc[256];
  tbe_status st = gpu_probe(desc, sizeof desc);
  if (st.code != TBE_OK) {
    printf("SKIP: %s\n", st.message);
    return 0;
  }
  rec = bench_db_open(argc, argv, "gpu_backward_bench", desc);
  if ((st = gpu_copy_ceiling((size_t)4 << 30, REPS, &copy_gbps)).code != TBE_OK)
    die("copy ceiling", st);
  printf("# %s; %d host threads; copy ceiling %.0f GB/s (4 GiB D2D, read + write)\n", desc,
         omp_get_max_threads(), copy_gbps);
  for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
    if (wanted(shapes[k]) && (!hoist_only || hoisted_shape(shapes[k])))
      run_shape(shapes[k]);
  for (size_t k = 0; k < sizeof small_tc_shapes / sizeof small_tc_shapes[0]; k++)
    if (wanted(small_tc_shapes[k]) && !hoist_only)
      run_shape(small_tc_shapes[k]);
  if (wanted("SL") && !hoist_only)
    run_sweep(0);
  for (size_t k = 0; only && k < sizeof sls / sizeof sls[0] && !hoist_only; k++) {
    char name[16]; /* --only SL4: SL 4 alone */
    snprintf(name, sizeof name, "SL%d", sls[k]);
    if (bench_wanted(only, name))
      run_sweep(sls[k]);
  }
  bench_db_close(rec);
  return 0;
}
