/* forward.c: the TBE forward of TBE_SEMANTICS.md section 3 on the CPU (SUM, MEAN, NONE;
 * weighted; VBE through the layout) and its exact twin with per-element error bounds.
 * Not the GPU kernels (gpu/forward_*.cu): those must equal ref_forward bit for bit.
 *
 * Accumulation order (normative): for each bag and column, the accumulator starts at +0 and takes
 * the bag's positions in increasing p, one at a time, skipping -1: acc = acc + r_p, or
 * acc = fma(w_p, r_p, acc) when weighted. The accumulator is fp64 for FP32 weights and fp32 for
 * FP16/BF16 weights (rows widen exactly). MEAN then multiplies by 1/L computed in the
 * accumulator's precision (L counts -1 positions; L = 0 leaves zeros). The store rounds once to
 * the output dtype. Bags are independent, so OpenMP over bags gives the same bits for any thread
 * count.
 *
 * Speed, which no output bit depends on: bags go to threads in chunks of CHUNK_BAGS, and within a
 * chunk a lookahead cursor runs PREFETCH_ROWS positions ahead of the sums, across bag ends, and
 * prefetches every cache line of its row, so random rows are fetched in parallel instead of one
 * memory latency each. Where the CPU has AVX2, F16C and FMA, a bag of 16-bit rows is summed 64
 * columns at a time, the columns' sums in eight registers through the whole bag, the rows widened
 * eight columns at a time: each column still takes its positions one at a time in order, the
 * widening is exact (bit for bit ref_half_to_float / ref_bf16_to_float), and vaddps / vfmadd are
 * the same IEEE operations as the portable loop's + and fmaf.
 */
#include "forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "half.h"
#include "speed.h"

#define CHUNK_BAGS 64     /* bags per OpenMP work item; the lookahead restarts per chunk */
#define PREFETCH_ROWS 16  /* positions the lookahead runs ahead of the sums */
#define CACHE_LINE 64

/* Stores an fp64 or fp32 accumulator value into element i of out, one rounding. */
static void store_double(void *out, tbe_dtype t, int64_t i, double v)
{
  if (t == TBE_FP32)
    ((float *)out)[i] = (float)v;
  else if (t == TBE_FP16)
    ((uint16_t *)out)[i] = ref_double_to_half(v);
  else
    ((uint16_t *)out)[i] = ref_double_to_bf16(v);
}

static void store_float(void *out, tbe_dtype t, int64_t i, float v)
{
  if (t == TBE_FP32)
    ((float *)out)[i] = v;
  else if (t == TBE_FP16)
    ((uint16_t *)out)[i] = ref_float_to_half(v);
  else
    ((uint16_t *)out)[i] = ref_float_to_bf16(v);
}

/* A cursor over the positions of the bags [bag, last) of one chunk, ahead of the sums:
 * lookahead_step prefetches the row of its next position and moves on, across bag ends. */
typedef struct {
  const tbe_batch *b;
  const tbe_layout *l;
  int64_t bag, last; /* the cursor's bag; one past the chunk's last bag */
  int64_t p, end;    /* the cursor's next position; the end of its bag */
  const char *table; /* the cursor's bag's table */
  size_t row_bytes;
} lookahead;

static void lookahead_enter(lookahead *a, int64_t bag)
{
  const tbe_batch *b = a->b;
  int32_t j = b->feature_table_map[a->l->bag_feature[bag]];
  size_t elem = tbe_dtype_size(b->wdtype);
  a->bag = bag;
  a->p = tbe_iget(b->offsets, b->itype, bag);
  a->end = tbe_iget(b->offsets, b->itype, bag + 1);
  a->table = (const char *)b->weights + (size_t)b->table_offset[j] * elem;
  a->row_bytes = (size_t)b->D[j] * elem;
}

static void lookahead_step(lookahead *a)
{
  while (a->p >= a->end) {
    if (a->bag + 1 >= a->last)
      return;
    lookahead_enter(a, a->bag + 1);
  }
  int64_t idx = tbe_iget(a->b->indices, a->b->itype, a->p++);
  if (idx == -1)
    return;
  /* locality 2 (prefetcht1, into L2): a few percent faster than into L1 on the bench shape */
  uintptr_t row = (uintptr_t)(a->table + (size_t)idx * a->row_bytes);
  for (uintptr_t c = row & ~(uintptr_t)(CACHE_LINE - 1); c < row + a->row_bytes; c += CACHE_LINE)
    __builtin_prefetch((const void *)c, 0, 2);
}

/* Starts a cursor at the first position of bag `first`, PREFETCH_ROWS positions ahead. */
static void lookahead_init(lookahead *a, const tbe_batch *b, const tbe_layout *l, int64_t first,
                           int64_t last)
{
  a->b = b;
  a->l = l;
  a->last = last;
  lookahead_enter(a, first);
  for (int k = 0; k < PREFETCH_ROWS; k++)
    lookahead_step(a);
}

/* Sums one bag of 16-bit weights into acc[0..D): per column, from +0, positions [start, end) in
 * order, -1 skipped: acc = acc + r, or acc = fma(w_p, r, acc) when weighted. */
typedef void (*bag16_fn)(const tbe_batch *b, int64_t start, int64_t end, const uint16_t *table,
                         int32_t D, float *acc);

/* bag16_fn for columns [d0, D) only, a row at a time. */
static void bag16_cols(const tbe_batch *b, int64_t start, int64_t end, const uint16_t *table,
                       int32_t D, int32_t d0, float *acc)
{
  const float *psw = b->per_sample_weights;
  for (int32_t d = d0; d < D; d++)
    acc[d] = 0.0f;
  for (int64_t p = start; p < end; p++) {
    int64_t idx = tbe_iget(b->indices, b->itype, p);
    if (idx == -1)
      continue;
    const uint16_t *row = table + idx * D;
    for (int32_t d = d0; d < D; d++) {
      float r = b->wdtype == TBE_FP16 ? ref_half_to_float(row[d]) : ref_bf16_to_float(row[d]);
      acc[d] = psw ? fmaf(psw[p], r, acc[d]) : acc[d] + r;
    }
  }
}

static void bag16(const tbe_batch *b, int64_t start, int64_t end, const uint16_t *table,
                  int32_t D, float *acc)
{
  bag16_cols(b, start, end, table, D, 0, acc);
}

#if defined(__x86_64__)
#define ACC_REGS 8 /* ymm accumulators a column block keeps (64 columns) */

/* Eight columns of a 16-bit row widened exactly to fp32. */
__attribute__((target("avx2,f16c,fma"), always_inline)) static inline __m256
widen8(const uint16_t *row, tbe_dtype t)
{
  __m128i h = _mm_loadu_si128((const __m128i *)row);
  return t == TBE_FP16 ? _mm256_cvtph_ps(h)
                       : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* Columns [d0, d0 + 8 * regs) of a bag, each column's sum in a register through the whole bag. */
__attribute__((target("avx2,f16c,fma"), always_inline)) static inline void
block16(const tbe_batch *b, int64_t start, int64_t end, const uint16_t *table, int32_t D,
        int32_t d0, int regs, float *acc)
{
  const float *psw = b->per_sample_weights;
  tbe_dtype t = b->wdtype;
  __m256 a[ACC_REGS];
  for (int k = 0; k < regs; k++)
    a[k] = _mm256_setzero_ps();
  for (int64_t p = start; p < end; p++) {
    int64_t idx = tbe_iget(b->indices, b->itype, p);
    if (idx == -1)
      continue;
    const uint16_t *row = table + idx * D + d0;
    if (psw) {
      __m256 w = _mm256_set1_ps(psw[p]);
      for (int k = 0; k < regs; k++)
        a[k] = _mm256_fmadd_ps(w, widen8(row + 8 * k, t), a[k]);
    } else {
      for (int k = 0; k < regs; k++)
        a[k] = _mm256_add_ps(a[k], widen8(row + 8 * k, t));
    }
  }
  for (int k = 0; k < regs; k++)
    _mm256_storeu_ps(acc + d0 + 8 * k, a[k]);
}

/* bag16 with AVX2: 64 columns at a time, then 8, then the last D % 8 through bag16_cols. The
 * rows of a bag are read once per block of columns; the lookahead has brought them to cache. */
__attribute__((target("avx2,f16c,fma"))) static void
bag16_avx2(const tbe_batch *b, int64_t start, int64_t end, const uint16_t *table, int32_t D,
           float *acc)
{
  int32_t d0 = 0;
  for (; d0 + 8 * ACC_REGS <= D; d0 += 8 * ACC_REGS)
    block16(b, start, end, table, D, d0, ACC_REGS, acc);
  for (; d0 + 8 <= D; d0 += 8)
    block16(b, start, end, table, D, d0, 1, acc);
  if (d0 < D)
    bag16_cols(b, start, end, table, D, d0, acc);
}
#endif

/* The fastest bag16 this CPU runs. */
static bag16_fn pick_bag16(void)
{
#if defined(__x86_64__)
  if (ref_cpu_avx2_fma_f16c())
    return bag16_avx2;
#endif
  return bag16;
}

/* One pooled bag with FP32 weights: fp64 accumulator. */
static void bag_fp32(const tbe_batch *b, int64_t start, int64_t end, const float *table,
                     int32_t D, double *acc, lookahead *ahead)
{
  for (int32_t d = 0; d < D; d++)
    acc[d] = 0.0;
  for (int64_t p = start; p < end; p++) {
    lookahead_step(ahead);
    int64_t idx = tbe_iget(b->indices, b->itype, p);
#if defined(TBE_FAULT_PRUNED_AS_ROW0) /* planted: a pruned position reads row 0 */
    idx = idx == -1 ? 0 : idx;
#else
    if (idx == -1)
      continue;
#endif
    const float *r = table + idx * D;
    if (b->per_sample_weights) {
      double w = b->per_sample_weights[p];
      for (int32_t d = 0; d < D; d++)
        acc[d] = fma(w, (double)r[d], acc[d]);
    } else {
      for (int32_t d = 0; d < D; d++)
        acc[d] = acc[d] + (double)r[d];
    }
  }
  if (b->pool == TBE_POOL_MEAN && end > start) {
    double s = 1.0 / (double)(end - start);
    for (int32_t d = 0; d < D; d++)
      acc[d] = acc[d] * s;
  }
}

/* One pooled bag with FP16/BF16 weights: fp32 accumulator, summed by sum. The lookahead moves
 * past the bag first, so it stays PREFETCH_ROWS positions ahead of the bag's first row. */
static void bag_fp16(const tbe_batch *b, int64_t start, int64_t end, const uint16_t *table,
                     int32_t D, float *acc, bag16_fn sum, lookahead *ahead)
{
  for (int64_t p = start; p < end; p++)
    lookahead_step(ahead);
  sum(b, start, end, table, D, acc);
  if (b->pool == TBE_POOL_MEAN && end > start) {
    float s = 1.0f / (float)(end - start);
    for (int32_t d = 0; d < D; d++)
      acc[d] = acc[d] * s;
  }
}

/* Per-thread scratch: thread k gets max_D doubles at scratch + k * max_D. */
static double *scratch_alloc(int32_t max_D, int *threads)
{
  *threads = omp_get_max_threads();
  return malloc(sizeof(double) * (size_t)max_D * (size_t)*threads);
}

/* One call's inputs, and the bag kernel picked for this CPU. */
typedef struct {
  const tbe_batch *b;
  const tbe_layout *l;
  void *out;
  bag16_fn sum16;
} forward_call;

/* What is done with bag i; scratch holds max_D doubles of the calling thread. */
typedef void (*bag_fn)(const forward_call *f, int64_t i, double *scratch, lookahead *ahead);

/* A pooled bag: its sum (or mean) into its output slice. */
static void pooled_bag(const forward_call *f, int64_t i, double *scratch, lookahead *ahead)
{
  const tbe_batch *b = f->b;
  int32_t j = b->feature_table_map[f->l->bag_feature[i]];
  int32_t D = b->D[j];
  int64_t start = tbe_iget(b->offsets, b->itype, i);
  int64_t end = tbe_iget(b->offsets, b->itype, i + 1);
  int64_t o = f->l->bag_out[i];
  if (b->wdtype == TBE_FP32) {
    bag_fp32(b, start, end, (const float *)b->weights + b->table_offset[j], D, scratch, ahead);
    for (int32_t d = 0; d < D; d++)
      store_double(f->out, b->out_dtype, o + d, scratch[d]);
  } else {
    /* an fp32 output takes the fp32 sums as they are: summed in place, no copy */
    int in_place = b->out_dtype == TBE_FP32;
    float *acc = in_place ? (float *)f->out + o : (float *)scratch;
    bag_fp16(b, start, end, (const uint16_t *)b->weights + b->table_offset[j], D, acc, f->sum16,
             ahead);
    for (int32_t d = 0; !in_place && d < D; d++)
      store_float(f->out, b->out_dtype, o + d, acc[d]);
  }
}

/* Pooling NONE: output row p is row indices[p] converted (zeros for -1; positions that no bag
 * covers keep the zeros the caller stored). */
static void none_bag(const forward_call *f, int64_t i, double *scratch, lookahead *ahead)
{
  const tbe_batch *b = f->b;
  int32_t j = b->feature_table_map[f->l->bag_feature[i]];
  int32_t D = b->D[j];
  int64_t start = tbe_iget(b->offsets, b->itype, i);
  int64_t end = tbe_iget(b->offsets, b->itype, i + 1);
  float *row = (float *)scratch;
  for (int64_t p = start; p < end; p++) {
    lookahead_step(ahead);
    int64_t idx = tbe_iget(b->indices, b->itype, p);
    if (idx == -1)
      continue;
    int64_t src = b->table_offset[j] + idx * D;
    if (b->wdtype == TBE_FP32)
      memcpy(row, (const float *)b->weights + src, sizeof(float) * (size_t)D);
    else if (b->wdtype == TBE_FP16)
      ref_half_to_float_row((const uint16_t *)b->weights + src, D, row);
    else
      ref_bf16_to_float_row((const uint16_t *)b->weights + src, D, row);
    for (int32_t d = 0; d < D; d++)
      store_float(f->out, b->out_dtype, p * D + d, row[d]);
  }
}

/* Runs fn on every bag: threads take chunks of CHUNK_BAGS bags, each with its own lookahead. */
static void for_each_bag(const forward_call *f, bag_fn fn, double *scratch, int threads)
{
  const tbe_layout *l = f->l;
  int64_t chunks = (l->total_B + CHUNK_BAGS - 1) / CHUNK_BAGS;
#pragma omp parallel num_threads(threads)
  {
    double *mine = scratch + (size_t)l->max_D * (size_t)omp_get_thread_num();
#pragma omp for schedule(dynamic, 1)
    for (int64_t c = 0; c < chunks; c++) {
      int64_t first = c * CHUNK_BAGS;
      int64_t last = first + CHUNK_BAGS < l->total_B ? first + CHUNK_BAGS : l->total_B;
      lookahead ahead;
      lookahead_init(&ahead, f->b, l, first, last);
      for (int64_t i = first; i < last; i++)
        fn(f, i, mine, &ahead);
    }
  }
}

tbe_status ref_forward(const tbe_batch *b, const tbe_layout *l, void *out)
{
  int threads;
  double *scratch = scratch_alloc(l->max_D, &threads);
  if (!scratch)
    return tbe_error(TBE_ENOMEM, "scratch", -1, "cannot allocate forward scratch");
  forward_call f = {b, l, out, pick_bag16()};
  if (b->pool == TBE_POOL_NONE)
    memset(out, 0, (size_t)l->out_elems * tbe_dtype_size(b->out_dtype));
  for_each_bag(&f, b->pool == TBE_POOL_NONE ? none_bag : pooled_bag, scratch, threads);
  free(scratch);
  return tbe_ok();
}
