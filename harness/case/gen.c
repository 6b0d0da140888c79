/* gen.c: the deterministic input generator: a parsed case -> a tbe_batch (tables, bags, indices,
 * offsets, per-sample weights). Not the parser (case.c) and not an engine: it computes no output.
 *
 * Invariant: every byte is a function of the case alone. Each value comes from the counter-based
 * PRNG (prng.h) keyed by (seed, stream) and counted by the value's own coordinate (table and
 * element, bag, position, (feature, rank), offset entry), so parallel loops give the same bytes
 * for any thread count. Draws that need log/exp use detmath.c. The order of work:
 *   1. shapes: E and D per table, B per (feature, rank);
 *   2. bag lengths -> offsets (clean, int64), N; the output offsets get the corruptions;
 *   3. weights: sign * (1 + mantissa) * 2^e, e uniform over a wide range, exact in wdtype;
 *   4. indices: drawn per position from the table's E (uniform or zipf), never a hot row;
 *      then hot rows placed at exactly SL positions; then invalid indices at non-hot positions;
 *   5. per-sample weights: drawn per position, or every one the case's psw.
 * The backward's inputs (case_generate_backward) come after, from streams of their own, so a
 * forward-only case's bytes do not depend on them: grad_output drawn like the weights in the
 * output dtype; momentum |fp32 value drawn like an fp32 weight|, one per row (linear key);
 * gen_case makes both, the batch and its backward's inputs, as the engines and export take them.
 * Steps that choose k of n positions (hot, invalid, corruptions) walk the candidates in order
 * with selection sampling: candidate i is taken with probability (still needed)/(still left), so
 * exactly k are taken, uniformly; these walks are sequential, the rest is OpenMP-parallel.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "case.h"
#include "detmath.h"
#include "case_private.h"
#include "gen.h"
#include "prng.h"
#include "speed.h"

/* PRNG streams; each quantity has its own so that changing one key leaves the others' draws */
enum {
  STREAM_E = 1,
  STREAM_D,
  STREAM_B,
  STREAM_L,
  STREAM_WEIGHTS,
  STREAM_INDEX,
  STREAM_HOT,
  STREAM_INVALID,
  STREAM_INVALID_VALUE,
  STREAM_PSW,
  STREAM_CORRUPT,
  STREAM_GRAD,
  STREAM_MOMENTUM
};

/* Draws that are rejected (zipf, normal, hot-row redraw) give up after this many attempts and
 * fall back to a direct draw; with the samplers used here that happens with probability < 2^-60
 * except for zipf with a hot row that holds nearly all the mass. */
#define MAX_ATTEMPTS 64

#define MAX_ELEMS (INT64_C(1) << 46)
#define MAX_BAGS (INT64_C(1) << 31)
#define MAX_N (INT64_C(1) << 40)

/* Zipf over ranks 1..n with P(k) ~ k^-alpha, by rejection-inversion (Hormann and Derflinger,
 * "Rejection-inversion to generate variates from monotone discrete distributions", 1996), as in
 * Apache Commons' ZipfRejectionInversionSampler. */
typedef struct {
  double alpha, n, h_x1, h_n, s;
} zipf_sampler;

static double zipf_helper1(double x) /* log1p(x) / x */
{
  return fabs(x) > 1e-8 ? det_log1p(x) / x : 1.0 - x * (1.0 / 2 - x * (1.0 / 3 - x * (1.0 / 4)));
}

static double zipf_helper2(double x) /* expm1(x) / x */
{
  return fabs(x) > 1e-8 ? det_expm1(x) / x : 1.0 + x * 0.5 * (1.0 + x / 3 * (1.0 + x / 4));
}

static double zipf_h(const zipf_sampler *z, double x) { return det_exp(-z->alpha * det_log(x)); }

static double zipf_hint(const zipf_sampler *z, double x)
{
  double lx = det_log(x);
  return zipf_helper2((1.0 - z->alpha) * lx) * lx;
}

static double zipf_hint_inv(const zipf_sampler *z, double x)
{
  double t = x * (1.0 - z->alpha);
  if (t < -1.0)
    t = -1.0;
  return det_exp(zipf_helper1(t) * x);
}

static void zipf_init(zipf_sampler *z, double alpha, int64_t n)
{
  z->alpha = alpha;
  z->n = (double)n;
  z->h_x1 = zipf_hint(z, 1.5) - 1.0;
  z->h_n = zipf_hint(z, z->n + 0.5);
  z->s = 2.0 - zipf_hint_inv(z, zipf_hint(z, 2.5) - zipf_h(z, 2.0));
}

/* One attempt with uniform u in [0, 1): returns 1 and the row (rank - 1) if accepted. */
static int zipf_try(const zipf_sampler *z, double u, int64_t *row)
{
  double v = z->h_n + u * (z->h_x1 - z->h_n);
  double x = zipf_hint_inv(z, v);
  double xr = x + 0.5;
  double k = !(xr < z->n + 1.0) ? z->n : xr < 1.0 ? 1.0 : (double)(int64_t)xr;
  if (k - x <= z->s || v >= zipf_hint(z, k + 0.5) - zipf_h(z, k)) {
    *row = (int64_t)k - 1;
    return 1;
  }
  return 0;
}

typedef struct {
  const tbe_case *c;
  tbe_batch *b;
  int64_t total_B;
  int64_t *bag0;         /* [T + 1] first bag of each feature */
  int64_t *offs;         /* [total_B + 1] offsets before corruption */
  int32_t *hot_first;    /* [num_tables] first entry of the table's hot rows in c->hot */
  int32_t *hot_count;    /* [num_tables] */
  zipf_sampler *zipf;    /* [num_tables] with dist=zipf, else NULL */
} gen;

static void gen_free(gen *g)
{
  free(g->bag0);
  free(g->offs);
  free(g->hot_first);
  free(g->hot_count);
  free(g->zipf);
}

static tbe_status no_mem(const char *what)
{
  return tbe_error(TBE_ENOMEM, what, -1, "cannot allocate the %s", what);
}

/* The value of a per-table or per-(feature, rank) spec at coordinate i. */
static int64_t spec_draw(const case_spec *s, uint64_t key, int64_t i)
{
  switch (s->kind) {
  case CASE_RANGE:
    return s->lo + (int64_t)prng_below(prng_at(key, (uint64_t)i), (uint64_t)(s->hi - s->lo + 1));
  case CASE_LIST:
    return s->list[i];
  case CASE_FIXED:
  case CASE_NORMAL:
    break;
  }
  return s->lo;
}

/* ------------------------------------------------------------------ 1. shapes */

static tbe_status gen_shapes(gen *g)
{
  const tbe_case *c = g->c;
  tbe_batch *b = g->b;
  int32_t nt = c->num_tables, T = c->T;
  b->num_tables = nt;
  b->T = T;
  b->wdtype = c->wdtype;
  b->out_dtype = c->out;
  b->itype = c->idx;
  b->pool = c->pool;
  b->E = malloc(sizeof *b->E * (size_t)nt);
  b->D = malloc(sizeof *b->D * (size_t)nt);
  b->table_offset = malloc(sizeof *b->table_offset * (size_t)(nt + 1));
  b->feature_table_map = malloc(sizeof *b->feature_table_map * (size_t)T);
  g->bag0 = malloc(sizeof *g->bag0 * (size_t)(T + 1));
  g->hot_first = calloc((size_t)nt, sizeof *g->hot_first);
  g->hot_count = calloc((size_t)nt, sizeof *g->hot_count);
  if (!b->E || !b->D || !b->table_offset || !b->feature_table_map || !g->bag0 || !g->hot_first ||
      !g->hot_count)
    return no_mem("tables");
  memcpy(b->feature_table_map, c->map, sizeof *c->map * (size_t)T);
  uint64_t key_E = prng_key(c->seed, STREAM_E), key_D = prng_key(c->seed, STREAM_D);
  b->table_offset[0] = 0;
  for (int32_t j = 0; j < nt; j++) {
    b->E[j] = spec_draw(&c->E, key_E, j);
    b->D[j] = (int32_t)spec_draw(&c->D, key_D, j);
    b->table_offset[j + 1] = b->table_offset[j] + b->E[j] * b->D[j];
    if (b->table_offset[j + 1] > MAX_ELEMS)
      return tbe_error(TBE_ENOMEM, "E", j, "tables 0..%d hold %lld weights, more than 2^46", j,
                       (long long)b->table_offset[j + 1]);
  }
  for (int32_t i = c->num_hot - 1; i >= 0; i--) {
    const case_hot *h = &c->hot[i];
    if (h->row >= b->E[h->table])
      return tbe_error(TBE_EINVAL, "hot", i, "hot row %lld of table %d is not below its E=%lld "
                       "(drawn from E=%lld..%lld)", (long long)h->row, h->table,
                       (long long)b->E[h->table], (long long)c->E.lo, (long long)c->E.hi);
    g->hot_first[h->table] = i;
    g->hot_count[h->table]++;
  }
  if (c->dist == CASE_DIST_ZIPF) {
    g->zipf = malloc(sizeof *g->zipf * (size_t)nt);
    if (!g->zipf)
      return no_mem("tables");
    for (int32_t j = 0; j < nt; j++)
      zipf_init(&g->zipf[j], c->alpha, b->E[j]);
  }
  g->bag0[0] = 0;
  if (!c->vbe) {
    b->B = (int32_t)c->B.lo;
    for (int32_t t = 0; t < T; t++)
      g->bag0[t + 1] = g->bag0[t] + b->B;
  } else {
    int32_t R = c->R;
    b->R = R;
    b->B_vbe = malloc(sizeof *b->B_vbe * (size_t)T * (size_t)R);
    if (!b->B_vbe)
      return no_mem("B");
    uint64_t key_B = prng_key(c->seed, STREAM_B);
    for (int32_t t = 0; t < T; t++) {
      g->bag0[t + 1] = g->bag0[t];
      for (int32_t r = 0; r < R; r++) {
        int64_t i = (int64_t)t * R + r;
        b->B_vbe[i] = (int32_t)spec_draw(&c->B, key_B, i);
        g->bag0[t + 1] += b->B_vbe[i];
      }
    }
  }
  g->total_B = g->bag0[T];
  if (g->total_B > MAX_BAGS)
    return tbe_error(TBE_ENOMEM, "B", -1, "%lld bags, more than 2^31", (long long)g->total_B);
  return tbe_ok();
}

/* ------------------------------------------------------------------ 2. bags and offsets */

static int64_t draw_L(const case_spec *s, uint64_t key, int64_t bag)
{
  if (s->kind != CASE_NORMAL)
    return spec_draw(s, key, bag);
  /* Marsaglia's polar method: (u1, u2) uniform in the unit disc, z = u1 sqrt(-2 ln s / s) */
  uint64_t kb = prng_at(key, (uint64_t)bag);
  double z = 0;
  for (uint64_t a = 0; a < MAX_ATTEMPTS; a++) {
    double u1 = 2.0 * prng_unit(prng_at(kb, 2 * a)) - 1.0;
    double u2 = 2.0 * prng_unit(prng_at(kb, 2 * a + 1)) - 1.0;
    double sq = u1 * u1 + u2 * u2;
    if (sq > 0 && sq < 1) {
      z = u1 * sqrt(-2.0 * det_log(sq) / sq);
      break;
    }
  }
  double x = s->mu + s->sigma * z;
  return x < 0.5 ? 0 : x >= (double)CASE_MAX_COUNT ? CASE_MAX_COUNT : (int64_t)(x + 0.5);
}

static tbe_status gen_bags(gen *g)
{
  const tbe_case *c = g->c;
  tbe_batch *b = g->b;
  int64_t nb = g->total_B;
  g->offs = malloc(sizeof *g->offs * (size_t)(nb + 1));
  if (!g->offs)
    return no_mem("offsets");
  uint64_t key = prng_key(c->seed, STREAM_L);
  g->offs[0] = 0;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < nb; i++)
    g->offs[i + 1] = draw_L(&c->L, key, i);
  for (int64_t i = 0; i < nb; i++)
    g->offs[i + 1] += g->offs[i]; /* at most 2^31 bags of at most 2^31: no overflow */
  b->N = g->offs[nb];
  if (b->N > MAX_N)
    return tbe_error(TBE_ENOMEM, "L", -1, "%lld lookups, more than 2^40", (long long)b->N);
  if (c->idx == TBE_I32 && (b->N > INT32_MAX || nb + 1 > INT32_MAX))
    return tbe_error(TBE_EINVAL, "idx", -1, "idx=int32 cannot hold %lld lookups in %lld bags; "
                     "use idx=int64", (long long)b->N, (long long)nb);
  return tbe_ok();
}

/* The value a corruption of kind k writes at offset entry i (orig: the clean offsets). */
static int64_t corrupt_value(int k, const int64_t *orig, int64_t i, int64_t N, int64_t imax,
                             uint64_t x)
{
  switch (k) {
  case CASE_CORRUPT_NEGATIVE: /* -1 .. -N-1 */
    return -1 - (int64_t)prng_below(x, (uint64_t)N + 1);
  case CASE_CORRUPT_DECREASING: { /* below offsets[i-1]: bag i-1 ends before it starts */
    int64_t prev = orig[i - 1];
    return prev - 1 - (int64_t)prng_below(x, (uint64_t)(prev > 1 ? prev : 1));
  }
  case CASE_CORRUPT_PAST_END: { /* N+1 .. min(2N+1, imax) */
    int64_t span = N + 1 < imax - N ? N + 1 : imax - N;
    return N + 1 + (int64_t)prng_below(x, (uint64_t)span);
  }
  default: { /* wrong last: any of 0 .. min(2N+1, imax) but N */
    int64_t hi = N < (imax - 1) / 2 ? 2 * N + 1 : imax;
    int64_t d = (int64_t)prng_below(x, (uint64_t)hi);
    return d < N ? d : d + 1;
  }
  }
}

/* Allocates b->offsets in the index dtype and applies the corruptions, each kind at `count`
 * distinct offset entries not taken by an earlier kind: negative and past_end at entries
 * 0..total_B-1, decreasing at 1..total_B-1, wrong_last at entry total_B. */
static tbe_status gen_offsets(gen *g)
{
  const tbe_case *c = g->c;
  tbe_batch *b = g->b;
  int64_t nb = g->total_B, N = b->N;
  int64_t imax = c->idx == TBE_I32 ? INT32_MAX : INT64_MAX;
  b->offsets = malloc(tbe_mul_size((size_t)(nb + 1), tbe_itype_size(c->idx)));
  if (!b->offsets)
    return no_mem("offsets");
  int any = 0;
  for (int k = 0; k < CASE_CORRUPT_KINDS; k++)
    any |= c->corrupt[k] != 0;
  if (!any) {
    for (int64_t i = 0; i <= nb; i++)
      tbe_iset(b->offsets, c->idx, i, g->offs[i]);
    return tbe_ok();
  }
  int64_t *o = malloc(sizeof *o * (size_t)(nb + 1));
  unsigned char *taken = calloc((size_t)(nb + 1), 1);
  if (!o || !taken) {
    free(o);
    free(taken);
    return no_mem("offsets");
  }
  memcpy(o, g->offs, sizeof *o * (size_t)(nb + 1));
  uint64_t key = prng_key(c->seed, STREAM_CORRUPT);
  static const char *const names[] = {"negative", "decreasing", "past_end", "wrong_last"};
  tbe_status st = tbe_ok();
  for (int k = 0; k < CASE_CORRUPT_KINDS && !st.code; k++) {
    int64_t need = c->corrupt[k];
    if (!need)
      continue;
    int64_t lo = k == CASE_CORRUPT_DECREASING ? 1 : k == CASE_CORRUPT_WRONG_LAST ? nb : 0;
    int64_t hi = k == CASE_CORRUPT_WRONG_LAST ? nb : nb - 1;
    int64_t left = 0;
    for (int64_t i = lo; i <= hi; i++)
      left += !taken[i];
    if (k == CASE_CORRUPT_PAST_END && N >= imax)
      st = tbe_error(TBE_EINVAL, "corrupt", k, "corrupt=past_end: N=%lld leaves no %s value "
                     "past the end", (long long)N, c->idx == TBE_I32 ? "int32" : "int64");
    else if (need > left)
      st = tbe_error(TBE_EINVAL, "corrupt", k, "corrupt=%s:%lld needs %lld free offset entries "
                     "in %lld..%lld, there are %lld (total_B=%lld)", names[k], (long long)need,
                     (long long)need, (long long)lo, (long long)hi, (long long)left,
                     (long long)nb);
    uint64_t kk = prng_at(key, (uint64_t)k);
    for (int64_t i = lo; i <= hi && need && !st.code; i++) {
      if (taken[i])
        continue;
      if ((int64_t)prng_below(prng_at(kk, 2 * (uint64_t)i), (uint64_t)left) < need) {
        o[i] = corrupt_value(k, g->offs, i, N, imax, prng_at(kk, 2 * (uint64_t)i + 1));
        taken[i] = 1;
        need--;
      }
      left--;
    }
  }
  for (int64_t i = 0; i <= nb; i++)
    tbe_iset(b->offsets, c->idx, i, o[i]);
  free(o);
  free(taken);
  return st;
}

/* Lookups of the features that map to table j. */
static int64_t table_lookups(const gen *g, int32_t j)
{
  int64_t m = 0;
  for (int32_t t = 0; t < g->c->T; t++)
    if (g->c->map[t] == j)
      m += g->offs[g->bag0[t + 1]] - g->offs[g->bag0[t]];
  return m;
}

static tbe_status check_hot(const gen *g)
{
  const tbe_case *c = g->c;
  for (int32_t j = 0; j < c->num_tables; j++) {
    if (!g->hot_count[j])
      continue;
    int64_t need = 0, m = table_lookups(g, j);
    for (int32_t i = 0; i < g->hot_count[j]; i++)
      need += c->hot[g->hot_first[j] + i].sl;
    if (need > m)
      return tbe_error(TBE_EINVAL, "hot", g->hot_first[j], "hot rows of table %d need %lld "
                       "lookups but the features of table %d make only %lld; raise B or L",
                       j, (long long)need, j, (long long)m);
    if (g->hot_count[j] == g->b->E[j] && m > need)
      return tbe_error(TBE_EINVAL, "hot", g->hot_first[j], "every row of table %d is hot, so "
                       "its %lld other lookups have no row to draw", j, (long long)(m - need));
  }
  return tbe_ok();
}

/* ------------------------------------------------------------------ 3. weights */

/* Weight bits: sign * (1 + m) * 2^e with e uniform over 2^k exponents, built directly at the
 * dtype's precision (so each value is exact in the dtype, and no rounding is needed) from a lane
 * of a 64-bit draw: fp16 four 16-bit lanes (sign, 4 exponent bits for e = -12..3, 10 mantissa
 * bits: the smallest value 2^-12 stays normal); bf16 four 16-bit lanes (sign, 5 bits for
 * e = -28..3, 7 mantissa bits); fp32 two 32-bit lanes (sign, 5 bits for e = -28..3, 23 mantissa
 * bits). The wide exponent range makes sums round at many magnitudes. */
static uint16_t fp16_lane(uint64_t x)
{
  return (uint16_t)((x & 0x8000u) | ((((x >> 10) & 0xFu) + 3u) << 10) | (x & 0x3FFu));
}

static uint16_t bf16_lane(uint64_t x)
{
  return (uint16_t)((x & 0x8000u) | ((((x >> 7) & 0x1Fu) + 99u) << 7) | (x & 0x7Fu));
}

static float fp32_lane(uint64_t x)
{
  uint32_t u = (uint32_t)((x & 0x80000000u) | ((((x >> 23) & 0x1Fu) + 99u) << 23) |
                          (x & 0x7FFFFFu));
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* n values of dtype dt into dst from the stream key: value e is lane e % lanes of draw
 * e / lanes (two fp32 or four 16-bit lanes per draw). */
static void fill_values(uint64_t key, tbe_dtype dt, int64_t n, void *dst)
{
  int lanes = dt == TBE_FP32 ? 2 : 4, lane_bits = 64 / lanes;
  float *w32 = dst;
  uint16_t *w16 = dst;
#pragma omp parallel for schedule(static)
  for (int64_t q = 0; q < (n + lanes - 1) / lanes; q++) {
    uint64_t x = prng_at(key, (uint64_t)q);
    for (int64_t e = q * lanes; e < (q + 1) * lanes && e < n; e++, x >>= lane_bits) {
      if (dt == TBE_FP32)
        w32[e] = fp32_lane(x);
      else if (dt == TBE_FP16)
        w16[e] = fp16_lane(x);
      else
        w16[e] = bf16_lane(x);
    }
  }
}

static tbe_status gen_weights(gen *g)
{
  tbe_batch *b = g->b;
  int64_t total = b->table_offset[b->num_tables];
  size_t elem = tbe_dtype_size(b->wdtype);
  b->weights = ref_alloc_rows(tbe_mul_size((size_t)(total ? total : 1), elem));
  if (!b->weights)
    return tbe_error(TBE_ENOMEM, "weights", -1, "cannot allocate %lld weights",
                     (long long)total);
  uint64_t key = prng_key(g->c->seed, STREAM_WEIGHTS);
  for (int32_t j = 0; j < b->num_tables; j++)
    fill_values(prng_at(key, (uint64_t)j), b->wdtype,
                b->table_offset[j + 1] - b->table_offset[j],
                (char *)b->weights + (size_t)b->table_offset[j] * elem);
  return tbe_ok();
}

/* ------------------------------------------------------------------ 4. indices */

/* Is `row` one of the hot rows hot[0..n) (sorted)? */
static int is_hot(const case_hot *hot, int32_t n, int64_t row)
{
  for (int32_t i = 0; i < n && hot[i].row <= row; i++)
    if (hot[i].row == row)
      return 1;
  return 0;
}

/* The r-th row of the table that is not hot (hot sorted by row). */
static int64_t skip_hot(const case_hot *hot, int32_t n, int64_t r)
{
  for (int32_t i = 0; i < n && hot[i].row <= r; i++)
    r++;
  return r;
}

/* The row at position p of a feature of table j: uniform, or zipf redrawn while it hits a hot
 * row (after MAX_ATTEMPTS, uniform among the non-hot rows). */
static int64_t draw_row(const gen *g, int32_t j, uint64_t key, int64_t p)
{
  const case_hot *hot = g->c->hot + g->hot_first[j];
  int32_t nh = g->hot_count[j];
  uint64_t x = prng_at(key, (uint64_t)p);
  uint64_t free_rows = (uint64_t)(g->b->E[j] - nh);
  if (g->zipf) {
    int64_t row;
    for (uint64_t a = 0; a < MAX_ATTEMPTS; a++)
      if (zipf_try(&g->zipf[j], prng_unit(prng_at(x, a)), &row) && !is_hot(hot, nh, row))
        return row;
  }
  return skip_hot(hot, nh, (int64_t)prng_below(x, free_rows));
}

static void draw_indices(gen *g)
{
  tbe_batch *b = g->b;
  uint64_t key = prng_key(g->c->seed, STREAM_INDEX);
  for (int32_t t = 0; t < b->T; t++) {
    int32_t j = b->feature_table_map[t];
    int64_t p0 = g->offs[g->bag0[t]], p1 = g->offs[g->bag0[t + 1]];
    if (b->E[j] == g->hot_count[j])
      continue; /* every position is hot (check_hot): place_hot fills them */
#pragma omp parallel for schedule(static)
    for (int64_t p = p0; p < p1; p++)
      tbe_iset(b->indices, b->itype, p, draw_row(g, j, key, p));
  }
}

/* Places each hot row of table j at exactly SL of the table's positions: a sequential walk over
 * the positions of the table's features, each taking hot row h with probability
 * (SL_h still to place) / (positions left). */
static void place_hot(gen *g, int32_t j, uint64_t key)
{
  const tbe_case *c = g->c;
  const case_hot *hot = c->hot + g->hot_first[j];
  int32_t nh = g->hot_count[j];
  int64_t left[CASE_MAX_HOT], need = 0, rem = table_lookups(g, j);
  for (int32_t i = 0; i < nh; i++)
    need += left[i] = hot[i].sl;
  for (int32_t t = 0; t < c->T && need; t++) {
    if (c->map[t] != j)
      continue;
    int64_t p1 = g->offs[g->bag0[t + 1]];
    for (int64_t p = g->offs[g->bag0[t]]; p < p1 && need; p++, rem--) {
      int64_t x = (int64_t)prng_below(prng_at(key, (uint64_t)p), (uint64_t)rem);
      if (x >= need)
        continue;
      int32_t h = 0;
      while (x >= left[h])
        x -= left[h++];
      tbe_iset(g->b->indices, g->b->itype, p, hot[h].row);
      left[h]--;
      need--;
    }
  }
}

/* An invalid index of the given kind for a table of E rows, within the index dtype. */
static int64_t invalid_value(case_invalid_kind kind, int64_t E, int64_t imax, uint64_t x)
{
  if (kind == CASE_INVALID_PRUNED)
    return -1;
  if (kind == CASE_INVALID_NEGATIVE) /* -2 .. -E-1 */
    return -2 - (int64_t)prng_below(x, (uint64_t)E);
  int64_t span = E < imax - E + 1 ? E : imax - E + 1; /* E .. min(2E-1, imax) */
  return E + (int64_t)prng_below(x, (uint64_t)span);
}

/* Makes round(invalid * M) of the M non-hot positions invalid, chosen uniformly by a sequential
 * walk; with invalid_kind=mix the k-th chosen position gets past, negative, pruned for
 * k mod 3 = 0, 1, 2. */
static void place_invalid(gen *g)
{
  const tbe_case *c = g->c;
  tbe_batch *b = g->b;
  int64_t hot_total = 0;
  for (int32_t i = 0; i < c->num_hot; i++)
    hot_total += c->hot[i].sl;
  int64_t rem = b->N - hot_total;
  int64_t need = (int64_t)(c->invalid * (double)rem + 0.5), chosen = 0;
  int64_t imax = c->idx == TBE_I32 ? INT32_MAX : INT64_MAX;
  uint64_t key = prng_key(c->seed, STREAM_INVALID);
  uint64_t key_v = prng_key(c->seed, STREAM_INVALID_VALUE);
  for (int32_t t = 0; t < c->T && need; t++) {
    int32_t j = c->map[t];
    const case_hot *hot = c->hot + g->hot_first[j];
    int32_t nh = g->hot_count[j];
    int64_t p1 = g->offs[g->bag0[t + 1]];
    for (int64_t p = g->offs[g->bag0[t]]; p < p1 && need; p++) {
      if (nh && is_hot(hot, nh, tbe_iget(b->indices, b->itype, p)))
        continue;
      int64_t x = (int64_t)prng_below(prng_at(key, (uint64_t)p), (uint64_t)rem);
      rem--;
      if (x >= need)
        continue;
      case_invalid_kind kind =
          c->invalid_kind == CASE_INVALID_MIX ? (case_invalid_kind)(chosen % 3) : c->invalid_kind;
      tbe_iset(b->indices, b->itype, p,
               invalid_value(kind, b->E[j], imax, prng_at(key_v, (uint64_t)p)));
      chosen++;
      need--;
    }
  }
}

static tbe_status gen_indices(gen *g)
{
  tbe_batch *b = g->b;
  b->indices = malloc(tbe_mul_size((size_t)(b->N ? b->N : 1), tbe_itype_size(b->itype)));
  if (!b->indices)
    return no_mem("indices");
  draw_indices(g);
  uint64_t key = prng_key(g->c->seed, STREAM_HOT);
  for (int32_t j = 0; j < b->num_tables; j++)
    if (g->hot_count[j])
      place_hot(g, j, prng_at(key, (uint64_t)j));
  if (g->c->invalid > 0)
    place_invalid(g);
  return tbe_ok();
}

/* ------------------------------------------------------------------ 5. per-sample weights */

/* fp32 in [-2, 2]: a 53-bit uniform scaled exactly, rounded once to fp32, so the 24-bit
 * significand is full at every magnitude; with psw= every weight is that value, none drawn. */
static tbe_status gen_psw(gen *g)
{
  tbe_batch *b = g->b;
  b->per_sample_weights = malloc(sizeof(float) * (size_t)(b->N ? b->N : 1));
  if (!b->per_sample_weights)
    return no_mem("per_sample_weights");
  const int fixed = g->c->psw_fixed;
  const float v = g->c->psw;
  uint64_t key = prng_key(g->c->seed, STREAM_PSW);
  float *w = b->per_sample_weights;
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < b->N; p++)
    w[p] = fixed ? v : (float)(4.0 * prng_unit(prng_at(key, (uint64_t)p)) - 2.0);
  return tbe_ok();
}

tbe_status case_generate(const tbe_case *c, tbe_batch *b)
{
  memset(b, 0, sizeof *b);
  gen g = {c, b, 0, NULL, NULL, NULL, NULL, NULL};
  tbe_status st = gen_shapes(&g);
  if (!st.code)
    st = gen_bags(&g);
  if (!st.code)
    st = gen_offsets(&g);
  if (!st.code)
    st = check_hot(&g);
  if (!st.code)
    st = gen_weights(&g);
  if (!st.code)
    st = gen_indices(&g);
  if (!st.code && c->weighted)
    st = gen_psw(&g);
  if (!st.code)
    st = tbe_batch_validate(b);
  gen_free(&g);
  if (st.code)
    tbe_batch_free(b);
  return st;
}

tbe_status case_generate_backward(const tbe_case *c, const tbe_batch *b, const tbe_layout *l,
                                  void **grad_output, float **momentum)
{
  *momentum = NULL;
  *grad_output = malloc(tbe_mul_size((size_t)(l->out_elems ? l->out_elems : 1),
                                     tbe_dtype_size(b->out_dtype)));
  if (!*grad_output)
    return no_mem("grad_output");
  fill_values(prng_key(c->seed, STREAM_GRAD), b->out_dtype, l->out_elems, *grad_output);
  if (c->knobs.bwd.opt.kind != REF_OPT_ROWWISE_ADAGRAD)
    return tbe_ok();
  int64_t rows = ref_bwd_rows(b);
  float *m = malloc(tbe_mul_size((size_t)(rows ? rows : 1), sizeof(float)));
  if (!m) {
    free(*grad_output);
    *grad_output = NULL;
    return no_mem("momentum");
  }
  fill_values(prng_key(c->seed, STREAM_MOMENTUM), TBE_FP32, rows, m);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < rows; i++)
    m[i] = fabsf(m[i]);
  *momentum = m;
  return tbe_ok();
}

tbe_status gen_case(const tbe_case *c, tbe_batch *b, gen_bwd *bwd)
{
  memset(bwd, 0, sizeof *bwd);
  tbe_status s = case_generate(c, b);
  const ref_bwd_config *cfg = &case_knobs(c)->bwd;
  if (s.code == TBE_OK && cfg->opt.kind != REF_OPT_NONE) {
    void *grad = NULL;
    float *momentum = NULL;
    tbe_layout l;
    s = tbe_layout_init(&l, b);
    if (s.code == TBE_OK)
      s = case_generate_backward(c, b, &l, &grad, &momentum);
    tbe_layout_free(&l);
    bwd->cfg = cfg;
    bwd->grad_output = grad;
    bwd->momentum = momentum;
    bwd->gpu = &case_knobs(c)->gpu_bwd;
  }
  if (s.code != TBE_OK)
    gen_case_free(b, bwd);
  return s;
}

void gen_case_free(tbe_batch *b, gen_bwd *bwd)
{
  free((void *)bwd->grad_output);
  free((void *)bwd->momentum);
  memset(bwd, 0, sizeof *bwd);
  tbe_batch_free(b);
}
