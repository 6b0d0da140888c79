/* ref_backward_bench.c: benchmark of the CPU reference backward + row-wise Adagrad (ref_backward)
 * on the published workload's statistics, with the time split (sort, sums, optimizer) and lookups
 * per second. Not a test: never in CTest, never asserts a time.
 *
 * The workload is cases/bench.cases's PUB (the published Triton TBE backward benchmark's
 * statistics: T x B = 4.2M bags with B = 128K (T = 32), about 84M lookups (L = 20), 3M rows of
 * D = 128 in 32 tables of 94,000 with zipf(0.9) indices, fp16 weights), with row-wise Adagrad,
 * the shape the GPU backward bench times too. `ref_backward_bench --scale 8` runs 1/8 of the
 * bags (same tables) for a machine that cannot hold the full size; `--forward-shape` runs
 * bench.cases's REF (the batch of ref_forward_bench, 2.6M lookups) with row-wise Adagrad. The
 * output says which ran.
 *
 * It validates before it times: the updated rows of a sample (the hottest row, row 0 of every
 * eighth of the tables, the rows of random lookups) must equal, bit for bit, a direct
 * recomputation that scans every lookup in position order (no sort) and applies the optimizer (optimizer.h, tested apart), and the
 * result must be the same at 1 and 2 threads. Each timed run starts from the same weights and
 * momentum; the table shows the run with the median total of REPS at each thread count.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <omp.h>

#include "backward.h"
#include "case.h"
#include "bench_shapes.h"
#include "gen.h"

#define SAMPLES 12
#define REPS 3

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die_status(const char *what, tbe_status s)
{
  fprintf(stderr, "ref_backward_bench: %s: %s (%s): %s\n", what, tbe_code_name(s.code), s.field,
          s.message);
  exit(1);
}

static void *xmalloc(size_t n)
{
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "ref_backward_bench: out of memory (%zu bytes)\n", n);
    exit(1);
  }
  return p;
}

/* The row gradient of linear key `key` by a scan of every lookup in position order: contributions
 * of one sequence below the threshold, else chunks added in ascending order (section 4). */
static int64_t scan_row(const tbe_batch *b, const tbe_layout *l, const ref_bwd_config *cfg,
                        const float *grad, int32_t j, int64_t row, float *g)
{
  int32_t D = b->D[j];
  int64_t sl = 0, k = 0;
  for (int pass = 0; pass < 2; pass++) {
    float part[TBE_MAX_D];
    for (int32_t d = 0; d < D; d++)
      g[d] = part[d] = 0.0f;
    for (int64_t i = 0; i < l->total_B; i++) {
      if (b->feature_table_map[l->bag_feature[i]] != j)
        continue;
      const float *r = grad + l->bag_out[i];
      for (int64_t p = tbe_iget(b->offsets, b->itype, i); p < tbe_iget(b->offsets, b->itype, i + 1);
           p++) {
        if (tbe_iget(b->indices, b->itype, p) != row)
          continue;
        if (pass == 0) {
          sl++;
          continue;
        }
        int long_run = ref_bwd_is_long(cfg, sl);
        float *acc = long_run ? part : g;
        for (int32_t d = 0; d < D; d++)
          acc[d] = acc[d] + r[d];
        if (long_run && (++k % cfg->chunk == 0 || k == sl)) {
          for (int32_t d = 0; d < D; d++) {
            g[d] = k <= cfg->chunk ? part[d] : g[d] + part[d];
            part[d] = 0.0f;
          }
        }
      }
    }
  }
  return sl;
}

/* Checks the sample rows of `after` (weights) against scan_row + the optimizer. */
static int validate(const tbe_batch *b, const tbe_layout *l, const ref_bwd_config *cfg,
                    const float *grad, const void *before, const float *m_before,
                    const void *after)
{
  int32_t tables[SAMPLES];
  int64_t rows[SAMPLES];
  int n = 0;
  for (int32_t j = 0; j < 8; j++, n++) {
    tables[n] = j * b->num_tables / 8;
    rows[n] = 0;
  }
  for (uint64_t s = 0x5EED; n < SAMPLES; n++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    int64_t p = (int64_t)((s >> 17) % (uint64_t)b->N);
    int32_t t = 0;
    while (tbe_iget(b->offsets, b->itype, l->B_offsets[t + 1]) <= p)
      t++;
    tables[n] = b->feature_table_map[t];
    rows[n] = tbe_iget(b->indices, b->itype, p);
  }
  int bad = 0;
  for (int k = 0; k < SAMPLES; k++) {
    int32_t j = tables[k], D = b->D[j];
    float g[TBE_MAX_D], w[TBE_MAX_D];
    uint16_t want[TBE_MAX_D];
    int64_t sl = scan_row(b, l, cfg, grad, j, rows[k], g);
    int64_t key = 0;
    for (int32_t i = 0; i < j; i++)
      key += b->E[i];
    key += rows[k];
    int64_t at = b->table_offset[j] + rows[k] * D;
    ref_load_row((const uint16_t *)before + at, b->wdtype, D, w);
    float m = m_before[key];
    ref_opt_update_row(&cfg->opt, D, g, w, &m);
    ref_store_row(&cfg->opt, b->wdtype, w, D, (uint64_t)key, want);
    int same = memcmp(want, (const uint16_t *)after + at, sizeof(uint16_t) * (size_t)D) == 0;
    printf("  table %2d row %6" PRId64 ": SL %6" PRId64 " %s\n", j, rows[k], sl,
           same ? "bit-exact" : "DIFFERS");
    bad += !same;
  }
  return bad;
}

typedef struct {
  ref_bwd_stats st;
  double total;
} timing;

static int cmp_total(const void *a, const void *b)
{
  double x = ((const timing *)a)->total, y = ((const timing *)b)->total;
  return (x > y) - (x < y);
}

/* One ref_backward at `threads` threads from the given weights and momentum into w and m. */
static timing run(tbe_batch *b, const tbe_layout *l, const ref_bwd_config *cfg, const float *grad,
                  const void *w0, const float *m0, void *w, float *m, size_t wbytes, int64_t rows,
                  int threads)
{
  timing t;
  memcpy(w, w0, wbytes);
  memcpy(m, m0, sizeof(float) * (size_t)rows);
  void *keep = b->weights;
  b->weights = w;
  omp_set_num_threads(threads);
  double t0 = now_s();
  tbe_status s = ref_backward(b, l, cfg, grad, m, NULL, &t.st);
  t.total = now_s() - t0;
  b->weights = keep;
  if (s.code != TBE_OK)
    die_status("ref_backward", s);
  return t;
}

int main(int argc, char **argv)
{
#ifndef NDEBUG
  printf("note: not a release build (NDEBUG unset); use the release preset for real numbers\n");
#endif
  int scale = 1, fwd_shape = argc == 2 && !strcmp(argv[1], "--forward-shape");
  if (argc == 3 && !strcmp(argv[1], "--scale"))
    scale = atoi(argv[2]);
  if (scale < 1 || (argc != 1 && argc != 3 && !fwd_shape)) {
    fprintf(stderr, "usage: ref_backward_bench [--scale K | --forward-shape]   (1/K of the bags, "
                    "default 1; or ref_forward_bench's shape)\n");
    return 2;
  }
  char *shape = bench_shape(fwd_shape ? "REF" : "PUB", "opt=rowwise_adagrad"), text[512];
  /* --scale K: the shape's B (its bags per feature) divided by K, the other keys as they are */
  const char *bkey = strstr(shape, " B=");
  if (scale > 1 && bkey)
    snprintf(text, sizeof text, "%.*s B=%lld%s", (int)(bkey - shape), shape,
             strtoll(bkey + 3, NULL, 10) / scale, bkey + 3 + strspn(bkey + 3, "0123456789"));
  else
    snprintf(text, sizeof text, "%s", shape);
  free(shape);
  tbe_case *c;
  tbe_status s = case_parse(text, &c);
  if (s.code != TBE_OK)
    die_status("case_parse", s);
  case_format(c, text, sizeof text);
  printf("case: %s (%s)\n", text, fwd_shape ? "the forward's shape" : scale == 1 ? "full scale"
                                                                            : "reduced scale");
  tbe_batch b;
  tbe_layout l;
  void *grad;
  float *m0;
  double t0 = now_s();
  s = case_generate(c, &b);
  if (s.code == TBE_OK)
    s = tbe_layout_init(&l, &b);
  if (s.code == TBE_OK)
    s = case_generate_backward(c, &b, &l, &grad, &m0);
  if (s.code != TBE_OK)
    die_status("case_generate", s);
  ref_bwd_config cfg = case_knobs(c)->bwd;
  case_free(c);
  printf("generated in %.1f s\n", now_s() - t0);

  int64_t rows = ref_bwd_rows(&b);
  size_t wbytes = tbe_dtype_size(b.wdtype) * (size_t)b.table_offset[b.num_tables];
  void *w1 = xmalloc(wbytes), *w2 = xmalloc(wbytes);
  float *m1 = xmalloc(sizeof(float) * (size_t)rows), *m2 = xmalloc(sizeof(float) * (size_t)rows);

  timing one = run(&b, &l, &cfg, grad, b.weights, m0, w1, m1, wbytes, rows, 1);
  printf("lookups %" PRId64 " in %" PRId64 " bags; unique rows %" PRId64 " (of %" PRId64
         "); hottest row %" PRId64 " lookups; %" PRId64 " runs of SL >= %" PRId64 "\n",
         one.st.entries, l.total_B, one.st.runs, rows, one.st.max_sl, one.st.long_runs,
         cfg.threshold);
  int bad = validate(&b, &l, &cfg, grad, b.weights, m0, w1);
  run(&b, &l, &cfg, grad, b.weights, m0, w2, m2, wbytes, rows, 2);
  if (bad || memcmp(w1, w2, wbytes) || memcmp(m1, m2, sizeof(float) * (size_t)rows)) {
    fprintf(stderr, "ref_backward_bench: %s; not timing a wrong backward\n",
                    bad ? "sample rows differ from the direct recomputation"
                        : "1 and 2 threads differ");
    return 1;
  }
  printf("validated: %d sample rows bit-exact against a direct scan; 1 and 2 threads agree\n",
         SAMPLES);

  printf("\nmedian of %d runs\n%-8s %9s %9s %9s %9s %9s %9s %14s\n", REPS, "threads", "prep ms",
         "sort ms", "sums ms", "opt ms", "other ms", "total ms", "lookups/s");
  for (int k = 0; k < 2; k++) {
    timing reps[REPS];
    for (int r = 0; r < REPS; r++)
      reps[r] = run(&b, &l, &cfg, grad, b.weights, m0, w1, m1, wbytes, rows, k + 1);
    qsort(reps, REPS, sizeof *reps, cmp_total);
    const ref_bwd_stats *st = &reps[REPS / 2].st;
    double ms = reps[REPS / 2].total * 1e3;
    double other = ms - st->prep_ms - st->sort_ms - st->psw_ms - st->sums_ms - st->opt_ms;
    printf("%-8d %9.0f %9.0f %9.0f %9.0f %9.0f %9.0f %14.3e\n", k + 1, st->prep_ms, st->sort_ms,
           st->sums_ms, st->opt_ms, other, ms, (double)st->entries / reps[REPS / 2].total);
  }
  free(w1);
  free(w2);
  free(m1);
  free(m2);
  free(grad);
  free(m0);
  tbe_layout_free(&l);
  tbe_batch_free(&b);
  return 0;
}
