/* ref_forward_bench.c: benchmark of the CPU reference forward (ref_forward) on one large fp16
 * SUM shape, GB/s beside this machine's memcpy measured in the same run. Not a test: never in CTest.
 *
 * It validates before it times: ref_forward's output on a few hundred random bags must equal, bit
 * for bit, a scalar loop that sums the widened rows in the normative order (TBE_SEMANTICS.md 3),
 * and the output must be the same at every thread count. Declared bytes, as PyTorch's
 * embedding_bag benchmarks count them: (rows read + bags written) * D * 2 bytes, i.e.
 * (N*D + total_B*D) * 2 with N = B*T*L. Times are medians of several repetitions, GB = 1e9 bytes.
 * With --db PATH the figures are also recorded as perf rows (bench_db.h), for the report.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <omp.h>

#include "bench_db.h"
#include "bench_shapes.h"
#include "case.h"
#include "gen.h"
#include "forward.h"
#include "half.h"
#include "tbe.h"

#define REPS 7
#define CHECK_BAGS 500
#define COPY_BYTES ((size_t)1 << 30)

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *t, int n)
{
  qsort(t, (size_t)n, sizeof *t, cmp_double);
  return t[n / 2];
}

static void die_status(const char *what, tbe_status s)
{
  fprintf(stderr, "ref_forward_bench: %s: %s (%s): %s\n", what, tbe_code_name(s.code), s.field,
          s.message);
  exit(1);
}

/* Bag i of an unweighted SUM batch with FP16 weights and FP32 output, the plainest way: per
 * column, from +0, positions in increasing order, -1 skipped. */
static void scalar_bag(const tbe_batch *b, const tbe_layout *l, int64_t i, float *acc)
{
  int32_t j = b->feature_table_map[l->bag_feature[i]];
  int32_t D = b->D[j];
  const uint16_t *table = (const uint16_t *)b->weights + b->table_offset[j];
  int64_t start = tbe_iget(b->offsets, b->itype, i), end = tbe_iget(b->offsets, b->itype, i + 1);
  for (int32_t d = 0; d < D; d++) {
    float a = 0.0f;
    for (int64_t p = start; p < end; p++) {
      int64_t idx = tbe_iget(b->indices, b->itype, p);
      if (idx != -1)
        a = a + ref_half_to_float(table[idx * D + d]);
    }
    acc[d] = a;
  }
}

/* Compares CHECK_BAGS random bags of out against scalar_bag; returns the number that differ. */
static int validate(const tbe_batch *b, const tbe_layout *l, const float *out)
{
  float acc[TBE_MAX_D];
  uint64_t s = 0x5EED;
  int bad = 0;
  for (int k = 0; k < CHECK_BAGS; k++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    int64_t i = (int64_t)((s >> 17) % (uint64_t)l->total_B);
    scalar_bag(b, l, i, acc);
    int32_t D = b->D[b->feature_table_map[l->bag_feature[i]]];
    if (memcmp(acc, out + l->bag_out[i], sizeof(float) * (size_t)D) != 0) {
      if (bad < 5)
        fprintf(stderr, "ref_forward_bench: bag %" PRId64 " differs from the scalar sum\n", i);
      bad++;
    }
  }
  return bad;
}

/* Median seconds of REPS calls of ref_forward (after one warm-up) at `threads` threads. */
static double time_forward(const tbe_batch *b, const tbe_layout *l, float *out, int threads)
{
  double t[REPS];
  omp_set_num_threads(threads);
  for (int r = -1; r < REPS; r++) {
    double t0 = now_s();
    tbe_status s = ref_forward(b, l, out);
    double t1 = now_s();
    if (s.code != TBE_OK)
      die_status("ref_forward", s);
    if (r >= 0)
      t[r] = t1 - t0;
  }
  return median(t, REPS);
}

/* Median seconds to copy COPY_BYTES from src to dst, split evenly over `threads` threads. */
static double time_memcpy(char *dst, const char *src, int threads)
{
  double t[REPS];
  size_t part = COPY_BYTES / (size_t)threads;
  for (int r = -1; r < REPS; r++) {
    double t0 = now_s();
#pragma omp parallel for num_threads(threads) schedule(static, 1)
    for (int k = 0; k < threads; k++)
      memcpy(dst + (size_t)k * part, src + (size_t)k * part, part);
    double t1 = now_s();
    if (r >= 0)
      t[r] = t1 - t0;
  }
  return median(t, REPS);
}

int main(int argc, char **argv)
{
  bench_db *rec = bench_db_open(argc, argv, "ref_forward_bench", NULL);
#ifndef NDEBUG
  printf("note: not a release build (NDEBUG unset); use the release preset for real numbers\n");
#endif
  char *shape = bench_shape("REF", NULL); /* cases/bench.cases */
  tbe_case *c;
  tbe_status s = case_parse(shape, &c);
  if (s.code != TBE_OK)
    die_status("case_parse", s);
  char text[512];
  case_format(c, text, sizeof text);
  tbe_batch b;
  double t0 = now_s();
  s = case_generate(c, &b);
  if (s.code != TBE_OK)
    die_status("case_generate", s);
  printf("case: %s\ngenerated in %.1f s\n", text, now_s() - t0);
  case_free(c);
  if (b.wdtype != TBE_FP16 || b.out_dtype != TBE_FP32 || b.pool != TBE_POOL_SUM ||
      b.per_sample_weights || b.R != 0) {
    fprintf(stderr, "ref_forward_bench: the case is not fixed-batch unweighted fp16 SUM to fp32\n");
    return 1;
  }
  tbe_layout l;
  s = tbe_layout_init(&l, &b);
  if (s.code != TBE_OK)
    die_status("tbe_layout_init", s);

  size_t out_bytes = sizeof(float) * (size_t)l.out_elems;
  float *out = malloc(out_bytes), *first = malloc(out_bytes);
  char *src = malloc(COPY_BYTES), *dst = malloc(COPY_BYTES);
  if (!out || !first || !src || !dst) {
    fprintf(stderr, "ref_forward_bench: out of memory\n");
    return 1;
  }
  memset(src, 1, COPY_BYTES);
  memset(dst, 2, COPY_BYTES);

  /* validate, and keep the 1-thread output to hold every later run to it */
  omp_set_num_threads(1);
  s = ref_forward(&b, &l, first);
  if (s.code != TBE_OK)
    die_status("ref_forward", s);
  int bad = validate(&b, &l, first);
  if (bad) {
    fprintf(stderr, "ref_forward_bench: %d of %d bags wrong; not timing a wrong kernel\n", bad,
            CHECK_BAGS);
    return 1;
  }
  printf("validated: %d random bags bit-exact against the scalar sum\n", CHECK_BAGS);

  int64_t D = b.D[0];
  double bytes = (double)(b.N * D + l.total_B * D) * 2.0;
  printf("N = %" PRId64 " rows of D = %" PRId64 ", %" PRId64 " bags: %.1f MB declared per call\n",
         b.N, D, l.total_B, bytes * 1e-6);

  double t_fwd[2], t_cpy[2];
  for (int n = 1; n <= 2; n++) {
    t_fwd[n - 1] = time_forward(&b, &l, out, n);
    if (memcmp(out, first, out_bytes) != 0) {
      fprintf(stderr, "ref_forward_bench: output at %d threads differs from 1 thread\n", n);
      return 1;
    }
    t_cpy[n - 1] = time_memcpy(dst, src, n);
  }

  double gb = 1e-9, copied = (double)COPY_BYTES;
  printf("\n%-44s %7s %9s %8s\n", "what (median of 7)", "threads", "ms", "GB/s");
  for (int n = 1; n <= 2; n++) {
    printf("%-44s %7d %9.1f %8.2f\n", "ref_forward, declared bytes / time", n,
           t_fwd[n - 1] * 1e3, bytes * gb / t_fwd[n - 1]);
    printf("%-44s %7d %9.1f %8.2f\n", "memcpy 1 GiB, bytes copied / time", n, t_cpy[n - 1] * 1e3,
           copied * gb / t_cpy[n - 1]);
    printf("%-44s %7d %9.1f %8.2f\n", "memcpy 1 GiB, bytes read+written / time", n,
           t_cpy[n - 1] * 1e3, 2.0 * copied * gb / t_cpy[n - 1]);
    char config[32];
    snprintf(config, sizeof config, "threads=%d", n);
    bench_db_figure(rec, "ref-fp16-sum", shape, "ref:forward", config, t_fwd[n - 1] * 1e3,
                    bytes, 2.0 * copied * gb / t_cpy[n - 1]);
  }
  bench_db_close(rec);

  free(out);
  free(first);
  free(src);
  free(dst);
  tbe_layout_free(&l);
  tbe_batch_free(&b);
  free(shape);
  return 0;
}
