/* case.c: the case language: parse a line of key=value tokens into a normalised tbe_case, print
 * its canonical text, compare cases, and read .cases files. Not the generator (gen.c).
 *
 * Invariant: case_parse either fails with TBE_EINVAL naming the offending key or returns a case
 * normalised as case_private.h says, so case_format(c) is canonical and parsing it gives equal
 * fields.
 * Keys print in the order of key_names[], each only when it differs from its default.
 * Every number is read with explicit range checks: no atoi, no overflow on any input.
 *
 * The grammar, key by key with ranges and defaults, and the rules between keys, are in
 * cases/README.md; the parser below is its one implementation.
 */
#include "case.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "footprint.h"
#include "forward_small.h"
#include "case_private.h"

/* ------------------------------------------------------------------ keys and defaults */

typedef enum {
  K_T, K_B, K_R, K_VBE, K_E, K_D, K_MAP, K_L, K_DIST, K_HOT, K_WDTYPE, K_OUT, K_IDX, K_POOL,
  K_WEIGHTED, K_PSW, K_INVALID, K_INVALID_KIND, K_CORRUPT, K_BOUNDS, K_FWD_BAGS,
  K_FWD_WIDTH, K_FWD_SMALL, K_FWD_GATHER, K_FUSED_BOUNDS, K_OPT, K_LR, K_EPS, K_WD, K_LAMBDA,
  K_CLIP, K_SR, K_STEP, K_BWD_THRESHOLD, K_BWD_CHUNK, K_BWD_COMBINE, K_BWD_LONG, K_BWD_BUCKET,
  K_BWD_DIRECT, K_BWD_WIDTH, K_BWD_GRID, K_BWD_ORDER, K_BWD_NOISE, K_BWD_DELAY,
  K_BWD_SHORT_BLOCK, K_BWD_STEAL, K_BWD_BULK, K_BWD_HOIST, K_BWD_SMALL_TC, K_SEED, K_COUNT
} key_id;

/* canonical order */
static const char *const key_names[K_COUNT] = {
  "T", "B", "R", "vbe", "E", "D", "map", "L", "dist", "hot", "wdtype", "out", "idx", "pool",
  "weighted", "psw", "invalid", "invalid_kind", "corrupt", "bounds", "fwd.bags", "fwd.width",
  "fwd.small", "fwd.gather", "fused_bounds", "opt", "lr", "eps", "wd", "lambda", "clip", "sr",
  "step",
  "bwd.threshold", "bwd.chunk", "bwd.combine", "bwd.long", "bwd.bucket", "bwd.direct",
  "bwd.width", "bwd.grid", "bwd.order", "bwd.noise", "bwd.delay", "bwd.short_block",
  "bwd.steal", "bwd.bulk", "bwd.hoist", "bwd.small_tc", "seed"};

#define DEFAULT_B 4
#define DEFAULT_E 1000
#define DEFAULT_D 64
#define DEFAULT_L 4

static const char *const dtype_words[] = {"fp32", "fp16", "bf16"};
static const char *const itype_words[] = {"int32", "int64"};
static const char *const pool_words[] = {"sum", "mean", "none"};
static const char *const bounds_words[] = {"fatal", "warning", "ignore", "none"};
static const char *const invalid_words[] = {"past", "negative", "pruned", "mix"};
static const char *const corrupt_words[] = {"negative", "decreasing", "past_end", "wrong_last"};
static const char *const auto_on_off_words[] = {"auto", "on", "off"}; /* fwd.small, bwd.bulk */
static const char *const gather_words[] = {"auto", "direct", "window", "lean"};
static const char *const opt_words[] = {"none", "sgd", "rowwise_adagrad"};
static const char *const wd_words[] = {"none", "l2", "decouple"};
static const char *const combine_words[] = {"deterministic", "atomic"};
static const char *const long_words[] = {"accum", "fused"};
static const char *const order_words[] = {"asc", "desc", "shuffle"};
static const char *const off_on_words[] = {"off", "on"}; /* bwd.steal, bwd.hoist, small_tc */

static void spec_fixed(case_spec *s, int64_t v)
{
  free(s->list);
  memset(s, 0, sizeof *s);
  s->kind = CASE_FIXED;
  s->lo = s->hi = v;
}

static tbe_case *case_new_default(void)
{
  tbe_case *c = calloc(1, sizeof *c);
  if (!c)
    return NULL;
  c->T = 1;
  c->R = 1;
  spec_fixed(&c->B, DEFAULT_B);
  spec_fixed(&c->E, DEFAULT_E);
  spec_fixed(&c->D, DEFAULT_D);
  spec_fixed(&c->L, DEFAULT_L);
  c->num_tables = 1;
  c->dist = CASE_DIST_UNIFORM;
  c->wdtype = c->out = TBE_FP32;
  c->idx = TBE_I64;
  c->pool = TBE_POOL_SUM;
  c->invalid_kind = CASE_INVALID_PAST;
  c->bounds = TBE_BOUNDS_WARNING;
  ref_bwd_config_default(&c->knobs.bwd);
  c->seed = 1;
  return c;
}

void case_free(tbe_case *c)
{
  if (!c)
    return;
  free(c->B.list);
  free(c->E.list);
  free(c->D.list);
  free(c->L.list);
  free(c->map);
  free(c->hot);
  free(c);
}

tbe_bounds_mode case_bounds(const tbe_case *c) { return c->bounds; }
uint64_t case_seed(const tbe_case *c) { return c->seed; }
const tbe_knobs *case_knobs(const tbe_case *c) { return &c->knobs; }

/* ------------------------------------------------------------------ parse state and errors */

typedef struct {
  tbe_case *c;
  int seen[K_COUNT];
  int64_t at[K_COUNT];   /* byte offset of each key's token in the text */
  key_id key;            /* the key being parsed */
  int64_t B_rows;        /* shape of an explicit B list */
  int64_t B_ranks;
  int64_t map_len;       /* entries of map= (0 when not given) */
} parse_state;

static tbe_status fail_at(const char *key, int64_t pos, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static tbe_status fail_at(const char *key, int64_t pos, const char *fmt, ...)
{
  char msg[sizeof(((tbe_status *)0)->message)];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return tbe_error(TBE_EINVAL, key, pos, "%s", msg);
}

/* An error about key k (the token's offset is the position). */
#define FAIL(ps, k, ...) fail_at(key_names[k], (ps)->at[k], __VA_ARGS__)

/* A slice [s, e) of the text, printable in messages with %.*s. */
typedef struct {
  const char *s, *e;
} slice;

static int slen(slice v) { return (int)(v.e - v.s); }

static int slice_is(slice v, const char *word)
{
  size_t n = strlen(word);
  return (size_t)(v.e - v.s) == n && memcmp(v.s, word, n) == 0;
}

/* The first occurrence of the string pat in v, or NULL. */
static const char *slice_find(slice v, const char *pat)
{
  size_t n = strlen(pat);
  for (const char *p = v.s; p + n <= v.e; p++)
    if (memcmp(p, pat, n) == 0)
      return p;
  return NULL;
}

static int64_t slice_count(slice v, char ch)
{
  int64_t n = 0;
  for (const char *p = v.s; p < v.e; p++)
    n += *p == ch;
  return n;
}

/* Splits off the part of *rest before the next `sep` (or all of it). */
static slice slice_next(slice *rest, char sep)
{
  const char *p = rest->s;
  while (p < rest->e && *p != sep)
    p++;
  slice part = {rest->s, p};
  rest->s = p < rest->e ? p + 1 : p;
  return part;
}

typedef enum { NUM_OK, NUM_MALFORMED, NUM_RANGE } num_result;

/* A decimal integer in [lo, hi]: digits only, no sign, any length (saturating). */
static num_result parse_int(slice v, int64_t lo, int64_t hi, int64_t *out)
{
  if (v.s == v.e)
    return NUM_MALFORMED;
  uint64_t x = 0;
  int over = 0;
  for (const char *p = v.s; p < v.e; p++) {
    if (*p < '0' || *p > '9')
      return NUM_MALFORMED;
    unsigned d = (unsigned)(*p - '0');
    if (x > (UINT64_MAX - d) / 10)
      over = 1;
    else
      x = x * 10 + d;
  }
  if (over || x > (uint64_t)hi || (int64_t)x < lo)
    return NUM_RANGE;
  *out = (int64_t)x;
  return NUM_OK;
}

/* A decimal uint64 (the seed). */
static num_result parse_u64(slice v, uint64_t *out)
{
  if (v.s == v.e)
    return NUM_MALFORMED;
  uint64_t x = 0;
  for (const char *p = v.s; p < v.e; p++) {
    if (*p < '0' || *p > '9')
      return NUM_MALFORMED;
    unsigned d = (unsigned)(*p - '0');
    if (x > (UINT64_MAX - d) / 10)
      return NUM_RANGE;
    x = x * 10 + d;
  }
  *out = x;
  return NUM_OK;
}

/* A finite decimal number in [lo, hi] ([+-]digits[.digits][e[+-]digits]); -0 reads as 0. */
static num_result parse_num(slice v, double lo, double hi, double *out)
{
  char tmp[64];
  if (v.s == v.e || slen(v) >= (int)sizeof tmp)
    return NUM_MALFORMED;
  int digits = 0;
  for (const char *p = v.s; p < v.e; p++) {
    if (*p >= '0' && *p <= '9')
      digits++;
    else if (!strchr("+-.eE", *p))
      return NUM_MALFORMED; /* no hex, inf, nan or locale forms */
  }
  if (!digits)
    return NUM_MALFORMED;
  memcpy(tmp, v.s, (size_t)slen(v));
  tmp[slen(v)] = '\0';
  char *end;
  errno = 0;
  double x = strtod(tmp, &end);
  if (end != tmp + slen(v))
    return NUM_MALFORMED;
  if (!isfinite(x) || x < lo || x > hi)
    return NUM_RANGE;
  *out = x == 0 ? 0.0 : x;
  return NUM_OK;
}

/* The index of v among words[0..n), or -1. */
static int parse_word(slice v, const char *const *words, int n)
{
  for (int i = 0; i < n; i++)
    if (slice_is(v, words[i]))
      return i;
  return -1;
}

static tbe_status fail_word(parse_state *ps, slice v, const char *const *words, int n)
{
  char allowed[128] = "";
  for (int i = 0; i < n; i++) {
    strcat(allowed, i ? "|" : "");
    strcat(allowed, words[i]);
  }
  return FAIL(ps, ps->key, "%s=%.*s: expected %s", key_names[ps->key], slen(v), v.s, allowed);
}

/* A NUM in [lo, hi] rounded once to fp32 into *out; a value that is not 0 must stay a normal
 * fp32 value. `what` says the allowed values. */
static tbe_status parse_f32(parse_state *ps, slice v, double lo, double hi, const char *what,
                            float *out)
{
  double x = 0;
  num_result r = parse_num(v, lo, hi, &x);
  float f = (float)x;
  if (r != NUM_OK || (x != 0 && !(fabsf(f) >= FLT_MIN)))
    return FAIL(ps, ps->key, "%s=%.*s: expected %s%s", key_names[ps->key], slen(v), v.s, what,
                r == NUM_OK ? " (this one is below the smallest normal fp32 value)" : "");
  *out = f;
  return tbe_ok();
}

/* An error for an integer that did not parse (r != NUM_OK); `what` says the allowed values. */
static tbe_status fail_int(parse_state *ps, slice v, num_result r, const char *what)
{
  return FAIL(ps, ps->key, "%s: '%.*s' is %s; expected %s", key_names[ps->key], slen(v), v.s,
              r == NUM_RANGE ? "out of range" : "not an integer", what);
}

/* ------------------------------------------------------------------ value parsers */

/* One value, a range a..b (allow_range) or a comma list (allow_list) of integers in [lo, hi]. */
static tbe_status parse_spec(parse_state *ps, slice v, int64_t lo, int64_t hi, const char *what,
                             case_spec *out)
{
  int64_t a, b;
  num_result r;
  const char *dots = slice_find(v, "..");
  if (dots) {
    slice sa = {v.s, dots}, sb = {dots + 2, v.e};
    if ((r = parse_int(sa, lo, hi, &a)) != NUM_OK)
      return fail_int(ps, sa, r, what);
    if ((r = parse_int(sb, lo, hi, &b)) != NUM_OK)
      return fail_int(ps, sb, r, what);
    if (a > b)
      return FAIL(ps, ps->key, "%s=%.*s: empty range, the first bound must not exceed the second",
                  key_names[ps->key], slen(v), v.s);
    spec_fixed(out, a);
    out->kind = CASE_RANGE;
    out->hi = b;
    return tbe_ok();
  }
  int64_t n = slice_count(v, ',') + 1;
  if (n == 1) {
    if ((r = parse_int(v, lo, hi, &a)) != NUM_OK)
      return fail_int(ps, v, r, what);
    spec_fixed(out, a);
    return tbe_ok();
  }
  if (n > CASE_MAX_TABLES)
    return FAIL(ps, ps->key, "%s: %lld values, more than %d", key_names[ps->key], (long long)n,
                CASE_MAX_TABLES);
  int64_t *list = malloc(sizeof *list * (size_t)n);
  if (!list)
    return tbe_error(TBE_ENOMEM, key_names[ps->key], -1, "out of memory");
  slice rest = v;
  for (int64_t i = 0; i < n; i++) {
    slice part = slice_next(&rest, ',');
    if ((r = parse_int(part, lo, hi, &list[i])) != NUM_OK) {
      free(list);
      return fail_int(ps, part, r, what);
    }
  }
  spec_fixed(out, 0);
  out->kind = CASE_LIST;
  out->list = list;
  out->count = n;
  return tbe_ok();
}

#define WHAT_B "an integer 0..2147483647, a range a..b or (vbe=1) a list like 1/2,3/1"

static tbe_status parse_B(parse_state *ps, slice v)
{
  tbe_case *c = ps->c;
  if (!slice_find(v, ",") && !slice_find(v, "/"))
    return parse_spec(ps, v, 0, CASE_MAX_COUNT, WHAT_B, &c->B);
  /* explicit list: features separated by ',', ranks within a feature by '/' */
  int64_t rows = slice_count(v, ',') + 1;
  slice first = v;
  first = slice_next(&first, ',');
  int64_t ranks = slice_count(first, '/') + 1;
  if (rows > CASE_MAX_T || ranks > CASE_MAX_R)
    return FAIL(ps, K_B, "B list of %lld features x %lld ranks exceeds %d x %d", (long long)rows,
                (long long)ranks, CASE_MAX_T, CASE_MAX_R);
  int64_t *list = malloc(sizeof *list * (size_t)(rows * ranks));
  if (!list)
    return tbe_error(TBE_ENOMEM, "B", -1, "out of memory");
  slice rest = v;
  for (int64_t t = 0; t < rows; t++) {
    slice row = slice_next(&rest, ',');
    if (slice_count(row, '/') + 1 != ranks) {
      free(list);
      return FAIL(ps, K_B, "B list: feature %lld has %lld ranks, feature 0 has %lld; every "
                  "feature needs the same number of '/'-separated ranks", (long long)t,
                  (long long)(slice_count(row, '/') + 1), (long long)ranks);
    }
    for (int64_t r = 0; r < ranks; r++) {
      slice part = slice_next(&row, '/');
      num_result res = parse_int(part, 0, CASE_MAX_COUNT, &list[t * ranks + r]);
      if (res != NUM_OK) {
        free(list);
        return fail_int(ps, part, res, WHAT_B);
      }
    }
  }
  spec_fixed(&c->B, 0);
  c->B.kind = CASE_LIST;
  c->B.list = list;
  c->B.count = rows * ranks;
  ps->B_rows = rows;
  ps->B_ranks = ranks;
  return tbe_ok();
}

#define WHAT_L "an integer 0..2147483647, a range a..b or normal:MU,SIGMA"

static tbe_status parse_L(parse_state *ps, slice v)
{
  tbe_case *c = ps->c;
  if (v.e - v.s < 7 || memcmp(v.s, "normal:", 7) != 0)
    return parse_spec(ps, v, 0, CASE_MAX_COUNT, WHAT_L, &c->L);
  slice rest = {v.s + 7, v.e};
  slice smu = slice_next(&rest, ',');
  double mu, sigma;
  if (slice_count(v, ',') != 1 ||
      parse_num(smu, -(double)CASE_MAX_COUNT, (double)CASE_MAX_COUNT, &mu) != NUM_OK ||
      parse_num(rest, 0, (double)CASE_MAX_COUNT, &sigma) != NUM_OK)
    return FAIL(ps, K_L, "L=%.*s: expected normal:MU,SIGMA with |MU| and SIGMA >= 0 at most "
                "2147483647", slen(v), v.s);
  spec_fixed(&c->L, 0);
  c->L.kind = CASE_NORMAL;
  c->L.mu = mu;
  c->L.sigma = sigma;
  return tbe_ok();
}

static tbe_status parse_map(parse_state *ps, slice v)
{
  int64_t n = slice_count(v, ',') + 1;
  if (n > CASE_MAX_T)
    return FAIL(ps, K_MAP, "map has %lld entries, more than T can be (%d)", (long long)n,
                CASE_MAX_T);
  int32_t *m = malloc(sizeof *m * (size_t)n);
  if (!m)
    return tbe_error(TBE_ENOMEM, "map", -1, "out of memory");
  slice rest = v;
  for (int64_t i = 0; i < n; i++) {
    slice part = slice_next(&rest, ',');
    int64_t x;
    num_result r = parse_int(part, 0, CASE_MAX_TABLES - 1, &x);
    if (r != NUM_OK) {
      free(m);
      return fail_int(ps, part, r, "a comma list of table numbers 0..4095, one per feature");
    }
    m[i] = (int32_t)x;
  }
  free(ps->c->map);
  ps->c->map = m;
  ps->map_len = n;
  return tbe_ok();
}

static tbe_status parse_dist(parse_state *ps, slice v)
{
  tbe_case *c = ps->c;
  if (slice_is(v, "uniform")) {
    c->dist = CASE_DIST_UNIFORM;
    return tbe_ok();
  }
  double a;
  slice sa = {v.s + 5, v.e};
  if (v.e - v.s < 5 || memcmp(v.s, "zipf:", 5) != 0 ||
      parse_num(sa, 0, CASE_MAX_ALPHA, &a) != NUM_OK || !(a > 0))
    return FAIL(ps, K_DIST, "dist=%.*s: expected uniform or zipf:ALPHA with 0 < ALPHA <= 100",
                slen(v), v.s);
  c->dist = CASE_DIST_ZIPF;
  c->alpha = a;
  return tbe_ok();
}

static int hot_cmp(const void *pa, const void *pb)
{
  const case_hot *a = pa, *b = pb;
  if (a->table != b->table)
    return a->table < b->table ? -1 : 1;
  return a->row < b->row ? -1 : a->row > b->row;
}

static tbe_status parse_hot(parse_state *ps, slice v)
{
  tbe_case *c = ps->c;
  int64_t n = slice_count(v, ',') + 1;
  if (n > CASE_MAX_HOT)
    return FAIL(ps, K_HOT, "hot lists %lld rows, more than %d", (long long)n, CASE_MAX_HOT);
  case_hot *h = malloc(sizeof *h * (size_t)n);
  if (!h)
    return tbe_error(TBE_ENOMEM, "hot", -1, "out of memory");
  slice rest = v;
  for (int64_t i = 0; i < n; i++) {
    slice item = slice_next(&rest, ',');
    slice it = item;
    slice st = slice_next(&it, ':'), sr = slice_next(&it, ':'), ssl = it;
    int64_t table, row, sl;
    if (slice_count(item, ':') != 2 || parse_int(st, 0, CASE_MAX_TABLES - 1, &table) != NUM_OK ||
        parse_int(sr, 0, CASE_MAX_ROWS - 1, &row) != NUM_OK ||
        parse_int(ssl, 1, CASE_MAX_SL, &sl) != NUM_OK) {
      free(h);
      return FAIL(ps, K_HOT, "hot entry '%.*s': expected TABLE:ROW:SL with TABLE 0..4095, ROW "
                  "0..2^40-1, SL 1..2^40", slen(item), item.s);
    }
    h[i].table = (int32_t)table;
    h[i].row = row;
    h[i].sl = sl;
  }
  qsort(h, (size_t)n, sizeof *h, hot_cmp);
  for (int64_t i = 1; i < n; i++)
    if (h[i].table == h[i - 1].table && h[i].row == h[i - 1].row) {
      int32_t t = h[i].table;
      int64_t r = h[i].row;
      free(h);
      return FAIL(ps, K_HOT, "hot names row %lld of table %d twice", (long long)r, t);
    }
  free(c->hot);
  c->hot = h;
  c->num_hot = (int32_t)n;
  return tbe_ok();
}

static tbe_status parse_corrupt(parse_state *ps, slice v)
{
  tbe_case *c = ps->c;
  int64_t n = slice_count(v, ',') + 1;
  slice rest = v;
  for (int64_t i = 0; i < n; i++) {
    slice item = slice_next(&rest, ',');
    slice it = item;
    slice sk = slice_next(&it, ':');
    int kind = parse_word(sk, corrupt_words, CASE_CORRUPT_KINDS);
    int64_t count = 1;
    if (kind < 0 || slice_count(item, ':') > 1 ||
        (slice_count(item, ':') == 1 && parse_int(it, 1, CASE_MAX_COUNT, &count) != NUM_OK))
      return FAIL(ps, K_CORRUPT, "corrupt entry '%.*s': expected KIND[:COUNT] with KIND "
                  "negative|decreasing|past_end|wrong_last and COUNT 1..2147483647",
                  slen(item), item.s);
    if (c->corrupt[kind])
      return FAIL(ps, K_CORRUPT, "corrupt names %s twice", corrupt_words[kind]);
    if (kind == CASE_CORRUPT_WRONG_LAST && count != 1)
      return FAIL(ps, K_CORRUPT, "corrupt=wrong_last:%lld: there is one last offset, so the "
                  "count must be 1", (long long)count);
    c->corrupt[kind] = count;
  }
  return tbe_ok();
}

static tbe_status parse_value(parse_state *ps, slice v)
{
  tbe_case *c = ps->c;
  int64_t x = 0;
  num_result r;
  int w;
  switch (ps->key) {
  case K_T:
    if ((r = parse_int(v, 1, CASE_MAX_T, &x)) != NUM_OK)
      return fail_int(ps, v, r, "an integer 1..4096");
    c->T = (int32_t)x;
    return tbe_ok();
  case K_B:
    return parse_B(ps, v);
  case K_R:
    if ((r = parse_int(v, 1, CASE_MAX_R, &x)) != NUM_OK)
      return fail_int(ps, v, r, "an integer 1..1024");
    c->R = (int32_t)x;
    return tbe_ok();
  case K_VBE:
  case K_WEIGHTED:
  case K_FUSED_BOUNDS:
  case K_SR:
  case K_BWD_NOISE:
    if ((r = parse_int(v, 0, 1, &x)) != NUM_OK)
      return fail_int(ps, v, r, "0 or 1");
    *(ps->key == K_VBE         ? &c->vbe
      : ps->key == K_WEIGHTED  ? &c->weighted
      : ps->key == K_SR        ? &c->knobs.bwd.opt.sr
      : ps->key == K_BWD_NOISE ? &c->knobs.gpu_bwd.noise
                               : &c->knobs.fwd.fused_bounds) = (int)x;
    return tbe_ok();
  case K_E:
    return parse_spec(ps, v, 1, CASE_MAX_ROWS,
                      "an integer 1..2^40, a range a..b or a list with one value per table",
                      &c->E);
  case K_D:
    return parse_spec(ps, v, 1, TBE_MAX_D,
                      "an integer 1..2048, a range a..b or a list with one value per table",
                      &c->D);
  case K_MAP:
    return parse_map(ps, v);
  case K_L:
    return parse_L(ps, v);
  case K_DIST:
    return parse_dist(ps, v);
  case K_HOT:
    return parse_hot(ps, v);
  case K_WDTYPE:
  case K_OUT:
    if ((w = parse_word(v, dtype_words, 3)) < 0)
      return fail_word(ps, v, dtype_words, 3);
    *(ps->key == K_WDTYPE ? &c->wdtype : &c->out) = (tbe_dtype)w;
    return tbe_ok();
  case K_IDX:
    if ((w = parse_word(v, itype_words, 2)) < 0)
      return fail_word(ps, v, itype_words, 2);
    c->idx = (tbe_itype)w;
    return tbe_ok();
  case K_POOL:
    if ((w = parse_word(v, pool_words, 3)) < 0)
      return fail_word(ps, v, pool_words, 3);
    c->pool = (tbe_pool)w;
    return tbe_ok();
  case K_PSW:
    c->psw_fixed = 1;
    return parse_f32(ps, v, -2, 2, "a number -2..2 (the range of the drawn weights)", &c->psw);
  case K_INVALID:
    if (parse_num(v, 0, 1, &c->invalid) != NUM_OK)
      return FAIL(ps, K_INVALID, "invalid=%.*s: expected a fraction in [0, 1]", slen(v), v.s);
    return tbe_ok();
  case K_INVALID_KIND:
    if ((w = parse_word(v, invalid_words, 4)) < 0)
      return fail_word(ps, v, invalid_words, 4);
    c->invalid_kind = (case_invalid_kind)w;
    return tbe_ok();
  case K_CORRUPT:
    return parse_corrupt(ps, v);
  case K_BOUNDS:
    if ((w = parse_word(v, bounds_words, 4)) < 0)
      return fail_word(ps, v, bounds_words, 4);
    c->bounds = (tbe_bounds_mode)w;
    return tbe_ok();
  case K_FWD_BAGS:
  case K_FWD_WIDTH: {
    int bags = ps->key == K_FWD_BAGS;
    r = parse_int(v, 1, 8, &x);
    if (r == NUM_OK && (bags ? x == 3 || x > 4 : x != 4 && x != 8))
      r = NUM_RANGE;
    if (r != NUM_OK)
      return fail_int(ps, v, r, bags ? "1, 2 or 4" : "4 or 8");
    *(bags ? &c->knobs.fwd.bags : &c->knobs.fwd.width) = (int)x;
    return tbe_ok();
  }
  case K_FWD_SMALL:
    if ((w = parse_word(v, auto_on_off_words, 3)) < 0)
      return fail_word(ps, v, auto_on_off_words, 3);
    c->knobs.fwd.small = (gpu_small_mode)w;
    return tbe_ok();
  case K_FWD_GATHER:
    if ((w = parse_word(v, gather_words, 4)) < 0)
      return fail_word(ps, v, gather_words, 4);
    c->knobs.fwd.gather = (gpu_gather_mode)w;
    return tbe_ok();
  case K_OPT:
    if ((w = parse_word(v, opt_words, 3)) < 0)
      return fail_word(ps, v, opt_words, 3);
    c->knobs.bwd.opt.kind = (ref_opt_kind)w;
    return tbe_ok();
  case K_WD:
    if ((w = parse_word(v, wd_words, 3)) < 0)
      return fail_word(ps, v, wd_words, 3);
    c->knobs.bwd.opt.wd = (ref_wd_mode)w;
    return tbe_ok();
  case K_BWD_COMBINE:
    if ((w = parse_word(v, combine_words, 2)) < 0)
      return fail_word(ps, v, combine_words, 2);
    c->knobs.bwd.combine = (ref_combine)w;
    return tbe_ok();
  case K_BWD_LONG:
    if ((w = parse_word(v, long_words, 2)) < 0)
      return fail_word(ps, v, long_words, 2);
    c->knobs.gpu_bwd.long_mode = (gpu_long_mode)w;
    return tbe_ok();
  case K_BWD_BUCKET:
    if ((r = parse_int(v, 0, 1, &x)) != NUM_OK)
      return fail_int(ps, v, r, "0 or 1");
    c->knobs.gpu_bwd.no_bucket = x == 0;
    return tbe_ok();
  case K_BWD_DIRECT:
    if ((r = parse_int(v, 0, 1, &x)) != NUM_OK)
      return fail_int(ps, v, r, "0 or 1");
    c->knobs.gpu_bwd.no_direct = x == 0;
    return tbe_ok();
  case K_BWD_WIDTH:
    r = parse_int(v, 2, 4, &x);
    if (r == NUM_OK && x == 3)
      r = NUM_RANGE;
    if (r != NUM_OK)
      return fail_int(ps, v, r, "2 or 4");
    c->knobs.gpu_bwd.short_width = c->knobs.gpu_bwd.long_width = (int)x;
    return tbe_ok();
  case K_BWD_GRID:
    if ((r = parse_int(v, 1, GPU_MAX_GRID, &x)) != NUM_OK)
      return fail_int(ps, v, r, "an integer 1..65535 (leave bwd.grid out for the policy)");
    c->knobs.gpu_bwd.grid = (int)x;
    return tbe_ok();
  case K_BWD_DELAY:
    if ((r = parse_int(v, 0, GPU_MAX_DELAY, &x)) != NUM_OK)
      return fail_int(ps, v, r, "an integer 0..100000 (nanoseconds)");
    c->knobs.gpu_bwd.delay = (int)x;
    return tbe_ok();
  case K_BWD_ORDER:
    if ((w = parse_word(v, order_words, 3)) < 0)
      return fail_word(ps, v, order_words, 3);
    c->knobs.gpu_bwd.order = (gpu_chunk_order)w;
    return tbe_ok();
  case K_BWD_SHORT_BLOCK:
    r = parse_int(v, 1, GPU_MAX_SHORT_BLOCK, &x);
    if (r == NUM_OK && (x & (x - 1)) != 0)
      r = NUM_RANGE;
    if (r != NUM_OK)
      return fail_int(ps, v, r, "1, 2, 4, 8, 16 or 32 (leave bwd.short_block out for the "
                      "grid-stride loop)");
    c->knobs.gpu_bwd.short_block = (int)x;
    return tbe_ok();
  case K_BWD_STEAL:
    if ((w = parse_word(v, off_on_words, 2)) < 0)
      return fail_word(ps, v, off_on_words, 2);
    c->knobs.gpu_bwd.steal = w;
    return tbe_ok();
  case K_BWD_BULK:
    if ((w = parse_word(v, auto_on_off_words, 3)) < 0)
      return fail_word(ps, v, auto_on_off_words, 3);
    c->knobs.gpu_bwd.bulk = (gpu_bulk_mode)w;
    return tbe_ok();
  case K_BWD_HOIST:
    if ((w = parse_word(v, off_on_words, 2)) < 0)
      return fail_word(ps, v, off_on_words, 2);
    c->knobs.gpu_bwd.hoist = w;
    return tbe_ok();
  case K_BWD_SMALL_TC:
    if ((w = parse_word(v, off_on_words, 2)) < 0)
      return fail_word(ps, v, off_on_words, 2);
    c->knobs.gpu_bwd.small_tc = w;
    return tbe_ok();
  case K_LR:
    return parse_f32(ps, v, 0, 1e10, "a number 0..1e10", &c->knobs.bwd.opt.lr);
  case K_EPS:
    return parse_f32(ps, v, 0, 1e10, "a number 0..1e10", &c->knobs.bwd.opt.eps);
  case K_LAMBDA:
    return parse_f32(ps, v, 0, 1e10, "a number 0..1e10", &c->knobs.bwd.opt.lambda);
  case K_CLIP: {
    tbe_status st = parse_f32(ps, v, 0, 1e30, "a number > 0 up to 1e30 (leave clip out for no "
                              "clipping)", &c->knobs.bwd.clip);
    if (!st.code && c->knobs.bwd.clip == 0)
      return FAIL(ps, K_CLIP, "clip=%.*s: clipping to [0, 0] is not clipping; give a number > 0 "
                  "or leave clip out", slen(v), v.s);
    return st;
  }
  case K_STEP:
    if ((r = parse_int(v, 0, UINT32_MAX, &x)) != NUM_OK)
      return fail_int(ps, v, r, "an integer 0..4294967295");
    c->knobs.bwd.opt.step = (uint32_t)x;
    return tbe_ok();
  case K_BWD_THRESHOLD:
  case K_BWD_CHUNK:
    if ((r = parse_int(v, 1, CASE_MAX_COUNT, &x)) != NUM_OK)
      return fail_int(ps, v, r, "an integer 1..2147483647");
    *(ps->key == K_BWD_CHUNK ? &c->knobs.bwd.chunk : &c->knobs.bwd.threshold) = x;
    return tbe_ok();
  case K_SEED:
    if ((r = parse_u64(v, &c->seed)) != NUM_OK)
      return fail_int(ps, v, r, "an integer 0..18446744073709551615");
    return tbe_ok();
  case K_COUNT:
    break;
  }
  return tbe_error(TBE_EINTERNAL, "case", -1, "no parser for key %d", (int)ps->key);
}

/* ------------------------------------------------------------------ cross-key rules */

/* A list of equal values becomes FIXED, a range a..a FIXED. */
static void spec_normalise(case_spec *s)
{
  if (s->kind == CASE_LIST) {
    for (int64_t i = 1; i < s->count; i++)
      if (s->list[i] != s->list[0])
        return;
    spec_fixed(s, s->list[0]);
  } else if (s->kind == CASE_RANGE && s->lo == s->hi) {
    spec_fixed(s, s->lo);
  }
}

/* The largest value a per-table spec can take for table j. */
static int64_t spec_max(const case_spec *s, int32_t j)
{
  return s->kind == CASE_LIST ? s->list[j] : s->hi;
}

/* The smallest. */
static int64_t spec_min(const case_spec *s, int32_t j)
{
  return s->kind == CASE_LIST ? s->list[j] : s->lo;
}

static tbe_status check_tables(parse_state *ps)
{
  tbe_case *c = ps->c;
  const key_id keys[2] = {K_E, K_D};
  case_spec *specs[2] = {&c->E, &c->D};
  for (int i = 0; i < 2; i++) {
    if (specs[i]->kind == CASE_LIST && specs[i]->count != c->num_tables)
      return FAIL(ps, keys[i], "%s lists %lld values but there are %d tables (T=%d, map); give "
                  "one value per table or a single value", key_names[keys[i]],
                  (long long)specs[i]->count, c->num_tables, c->T);
    spec_normalise(specs[i]);
  }
  if (c->idx == TBE_I32)
    for (int32_t j = 0; j < c->num_tables; j++)
      if (spec_max(&c->E, j) > INT32_MAX)
        return FAIL(ps, K_IDX, "idx=int32 cannot address table %d with up to %lld rows; use "
                    "idx=int64", j, (long long)spec_max(&c->E, j));
  for (int32_t i = 0; i < c->num_hot; i++) {
    const case_hot *h = &c->hot[i];
    if (h->table >= c->num_tables)
      return FAIL(ps, K_HOT, "hot names table %d but there are %d tables", h->table,
                  c->num_tables);
    if (h->row >= spec_max(&c->E, h->table))
      return FAIL(ps, K_HOT, "hot row %lld of table %d is not below E=%lld", (long long)h->row,
                  h->table, (long long)spec_max(&c->E, h->table));
  }
  for (int32_t i = 0, k; i < c->num_hot; i = k) { /* hot is sorted by table */
    double need = 0;
    for (k = i; k < c->num_hot && c->hot[k].table == c->hot[i].table; k++)
      need += (double)c->hot[k].sl;
    double most = footprint_max_lookups(c, c->hot[i].table);
    if (need > most)
      return FAIL(ps, K_HOT, "hot rows of table %d need %.0f lookups, but its features make at "
                  "most %.0f (every bag at its largest B and L); raise B or L", c->hot[i].table,
                  need, most);
  }
  return tbe_ok();
}

static tbe_status check_pooling(parse_state *ps)
{
  tbe_case *c = ps->c;
  if (c->weighted && c->pool != TBE_POOL_SUM)
    return FAIL(ps, K_WEIGHTED, "weighted=1 needs pool=sum: pool=%s with per-sample weights is "
                "rejected (ref/SEMANTICS.md 3)", pool_words[c->pool]);
  if (c->psw_fixed && !c->weighted)
    return FAIL(ps, K_PSW, "psw fixes every per-sample weight, so it needs weighted=1");
  if (c->pool != TBE_POOL_NONE)
    return tbe_ok();
  if (c->vbe)
    return FAIL(ps, K_POOL, "pool=none does not support vbe=1");
  for (int32_t t = 1; t < c->T; t++) {
    int32_t j0 = c->map[0], j = c->map[t];
    if (j == j0)
      continue;
    if (c->D.kind == CASE_RANGE)
      return FAIL(ps, K_POOL, "pool=none needs one D for all features, but D=%lld..%lld is "
                  "drawn per table and features use tables %d and %d", (long long)c->D.lo,
                  (long long)c->D.hi, j0, j);
    if (c->D.kind == CASE_LIST && c->D.list[j] != c->D.list[j0])
      return FAIL(ps, K_POOL, "pool=none needs one D for all features: feature 0 has D=%lld, "
                  "feature %d has D=%lld", (long long)c->D.list[j0], t,
                  (long long)c->D.list[j]);
  }
  return tbe_ok();
}

/* bwd.small_tc=on: the tensor-core backward of the small tables (ref/backward_small.h) applies
 * only to row-wise Adagrad on features the small forward path can take (ref_small_eligible), so
 * a case where no feature can is refused rather than silently run on the generic backward:
 * fp16 weights, fp32 output, pool sum or mean, unweighted, no VBE, fwd.small on or auto, and a
 * table whose E can be at most 64 and whose D can be 64..128. Which features take it in a call
 * (per table, with its fallback) is the GPU's report, as small_mask is the forward's. */
static tbe_status check_small_tc(parse_state *ps)
{
  tbe_case *c = ps->c;
  const char *why = c->knobs.bwd.opt.kind != REF_OPT_ROWWISE_ADAGRAD
                        ? "updates rows with row-wise Adagrad only; give opt=rowwise_adagrad"
                    : c->knobs.fwd.small == GPU_SMALL_OFF
                        ? "takes the counts the small-table forward saves, and fwd.small=off "
                          "runs no feature on it"
                    : c->wdtype != TBE_FP16 ? "needs the small forward path's wdtype=fp16"
                    : c->out != TBE_FP32    ? "needs the small forward path's out=fp32"
                    : c->pool == TBE_POOL_NONE ? "needs pool=sum or pool=mean"
                    : c->weighted           ? "needs weighted=0 (the small forward path's)"
                    : c->vbe                ? "needs vbe=0 (the small forward path's)"
                                            : NULL;
  int table = 0;
  for (int32_t j = 0; !why && j < c->num_tables && !table; j++)
    table = spec_min(&c->E, j) <= REF_SMALL_MAX_E && spec_max(&c->D, j) >= 64 &&
            spec_min(&c->D, j) <= 128;
  if (!why && !table)
    why = "needs a table that the small forward path can take (E <= 64, D 64..128 a multiple "
          "of 8), and this case has none";
  if (why)
    return FAIL(ps, K_BWD_SMALL_TC, "bwd.small_tc=on %s", why);
  return tbe_ok();
}

/* The rules of the knobs: fused_bounds needs a bounds check; every backward key needs the
 * optimizer (and weight decay, sr=1) it configures; stochastic rounding needs 16-bit weights. */
static tbe_status check_knobs(parse_state *ps)
{
  tbe_case *c = ps->c;
  ref_opt_config *o = &c->knobs.bwd.opt;
  if (c->knobs.fwd.fused_bounds && c->bounds == TBE_BOUNDS_NONE)
    return FAIL(ps, K_FUSED_BOUNDS, "fused_bounds=1 fuses the bounds check into the forward, "
                "but bounds=none has no bounds check");
  static const key_id backward_keys[] = {K_LR, K_EPS, K_WD, K_LAMBDA, K_CLIP, K_SR, K_STEP,
                                         K_BWD_THRESHOLD, K_BWD_CHUNK, K_BWD_COMBINE,
                                         K_BWD_LONG, K_BWD_BUCKET, K_BWD_DIRECT, K_BWD_WIDTH,
                                         K_BWD_GRID, K_BWD_ORDER, K_BWD_NOISE, K_BWD_DELAY,
                                         K_BWD_SHORT_BLOCK, K_BWD_STEAL, K_BWD_BULK,
                                         K_BWD_HOIST, K_BWD_SMALL_TC};
  for (size_t i = 0; i < sizeof backward_keys / sizeof backward_keys[0]; i++) {
    key_id k = backward_keys[i];
    if (!ps->seen[k])
      continue;
    if (o->kind == REF_OPT_NONE)
      return FAIL(ps, k, "%s configures the backward, which needs opt=sgd or "
                  "opt=rowwise_adagrad (opt=none runs the forward only)", key_names[k]);
    if (o->kind == REF_OPT_SGD && (k == K_EPS || k == K_WD || k == K_LAMBDA))
      return FAIL(ps, k, "%s is a setting of opt=rowwise_adagrad; opt=sgd is w = fma(-lr, g, w) "
                  "(ref/SEMANTICS.md 5)", key_names[k]);
  }
  if (c->knobs.gpu_bwd.short_block && c->knobs.gpu_bwd.steal)
    return FAIL(ps, K_BWD_SHORT_BLOCK, "bwd.short_block orders the short tier's grid-stride "
                "loop, but with bwd.steal=on the short tier takes its runs from a counter; give "
                "one of them");
  if (c->knobs.gpu_bwd.bulk == GPU_BULK_ON && c->knobs.bwd.combine != REF_COMBINE_ATOMIC)
    return FAIL(ps, K_BWD_BULK, "bwd.bulk=on adds the atomic combine's partials by bulk reduce; "
                "it needs bwd.combine=atomic");
  tbe_status st = c->knobs.gpu_bwd.small_tc ? check_small_tc(ps) : tbe_ok();
  if (st.code)
    return st;
  if (ps->seen[K_LAMBDA] && o->wd == REF_WD_NONE)
    return FAIL(ps, K_LAMBDA, "lambda is the weight decay; it needs wd=l2 or wd=decouple");
  if (ps->seen[K_STEP] && !o->sr)
    return FAIL(ps, K_STEP, "step only feeds stochastic rounding; it needs sr=1");
  if (o->sr && c->wdtype == TBE_FP32)
    return FAIL(ps, K_SR, "sr=1 rounds fp16 and bf16 weights stochastically; wdtype=fp32 stores "
                "the fp32 update as is");
  o->seed = c->seed;
  return tbe_ok();
}

/* Resolves T, R, the map and the table count, then checks every rule between keys. */
static tbe_status finish(parse_state *ps)
{
  tbe_case *c = ps->c;
  if (!ps->seen[K_T])
    c->T = ps->map_len ? (int32_t)ps->map_len : ps->B_rows ? (int32_t)ps->B_rows : 1;
  if (ps->map_len && ps->map_len != c->T)
    return FAIL(ps, K_MAP, "map has %lld entries but T=%d; give one table per feature",
                (long long)ps->map_len, c->T);
  if (ps->seen[K_R] && !c->vbe)
    return FAIL(ps, K_R, "R (VBE ranks) needs vbe=1");
  if (c->B.kind != CASE_FIXED && !c->vbe)
    return FAIL(ps, K_B, "a B range or list needs vbe=1; without VBE, B is one integer");
  if (c->B.kind == CASE_LIST) {
    if (ps->B_rows != c->T)
      return FAIL(ps, K_B, "B lists %lld features but T=%d", (long long)ps->B_rows, c->T);
    if (ps->seen[K_R] && ps->B_ranks != c->R)
      return FAIL(ps, K_B, "B lists %lld ranks per feature but R=%d", (long long)ps->B_ranks,
                  c->R);
    c->R = (int32_t)ps->B_ranks;
  }
  spec_normalise(&c->B);
  spec_normalise(&c->L);
  if (c->L.kind == CASE_NORMAL && c->L.sigma == 0) {
    double x = c->L.mu;
    spec_fixed(&c->L, x < 0.5 ? 0 : (int64_t)(x + 0.5));
  }
  if (!c->map) {
    c->map = malloc(sizeof *c->map * (size_t)c->T);
    if (!c->map)
      return tbe_error(TBE_ENOMEM, "map", -1, "out of memory");
    for (int32_t t = 0; t < c->T; t++)
      c->map[t] = t;
  }
  c->num_tables = 0;
  for (int32_t t = 0; t < c->T; t++)
    if (c->map[t] + 1 > c->num_tables)
      c->num_tables = c->map[t] + 1;
  tbe_status st = check_tables(ps);
  if (st.code)
    return st;
  if ((st = check_pooling(ps)).code)
    return st;
  if (c->invalid == 0)
    c->invalid_kind = CASE_INVALID_PAST;
  if (c->bounds == TBE_BOUNDS_NONE) {
    if (c->invalid > 0 && c->invalid_kind != CASE_INVALID_PRUNED)
      return FAIL(ps, K_BOUNDS, "bounds=none trusts the indices, so invalid=%g with "
                  "invalid_kind=%s is not allowed (only pruned -1 rows are legal there)",
                  c->invalid, invalid_words[c->invalid_kind]);
    for (int k = 0; k < CASE_CORRUPT_KINDS; k++)
      if (c->corrupt[k])
        return FAIL(ps, K_BOUNDS, "bounds=none trusts the offsets, so corrupt is not allowed");
  }
  return check_knobs(ps);
}

tbe_status case_parse(const char *text, tbe_case **out)
{
  *out = NULL;
  if (!text)
    text = "";
  parse_state ps;
  memset(&ps, 0, sizeof ps);
  ps.c = case_new_default();
  if (!ps.c)
    return tbe_error(TBE_ENOMEM, "case", -1, "out of memory");
  const char *end = strchr(text, '#');
  if (!end)
    end = text + strlen(text);
  tbe_status st = tbe_ok();
  const char *p = text;
  while (!st.code) {
    while (p < end && isspace((unsigned char)*p))
      p++;
    if (p == end)
      break;
    const char *tok = p;
    while (p < end && !isspace((unsigned char)*p))
      p++;
    slice whole = {tok, p};
    const char *eq = memchr(tok, '=', (size_t)(p - tok));
    slice key = {tok, eq ? eq : p};
    int k = parse_word(key, key_names, K_COUNT);
    char name[40];
    snprintf(name, sizeof name, "%.*s", slen(key), key.s);
    if (k < 0)
      st = fail_at(name, tok - text, "unknown key '%.*s' in '%.*s'; keys are T B R vbe E D map L "
                   "dist hot wdtype out idx pool weighted psw invalid invalid_kind corrupt "
                   "bounds fwd.bags fwd.width fwd.small fwd.gather fused_bounds opt lr eps wd "
                   "lambda clip sr step bwd.threshold bwd.chunk bwd.combine bwd.long bwd.bucket "
                   "bwd.direct bwd.width bwd.grid bwd.order bwd.noise bwd.delay "
                   "bwd.short_block bwd.steal bwd.bulk bwd.hoist bwd.small_tc seed",
                   slen(key), key.s, slen(whole), whole.s);
    else if (!eq || eq + 1 == p)
      st = fail_at(name, tok - text, "'%.*s': expected %s=VALUE", slen(whole), whole.s, name);
    else if (ps.seen[k])
      st = fail_at(name, tok - text, "key %s given twice", name);
    else {
      ps.key = (key_id)k;
      ps.seen[k] = 1;
      ps.at[k] = tok - text;
      st = parse_value(&ps, (slice){eq + 1, p});
    }
  }
  if (!st.code)
    st = finish(&ps);
  if (st.code) {
    case_free(ps.c);
    return st;
  }
  *out = ps.c;
  return st;
}

/* ------------------------------------------------------------------ canonical print */

typedef struct {
  char *buf;
  size_t n, len;
} sbuf;

static void sb_printf(sbuf *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *s, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(s->len < s->n ? s->buf + s->len : NULL, s->len < s->n ? s->n - s->len : 0,
                    fmt, ap);
  va_end(ap);
  if (k > 0)
    s->len += (size_t)k;
}

/* The shortest %.Ng of x that reads back as x (the lowest N among equally short ones, so 10
 * prints as "10", not "1e+01"). */
static void fmt_num(double x, char out[32])
{
  char tmp[32];
  out[0] = '\0';
  for (int prec = 17; prec >= 1; prec--) {
    snprintf(tmp, sizeof tmp, "%.*g", prec, x);
    if (strtod(tmp, NULL) == x && (!out[0] || strlen(tmp) <= strlen(out)))
      strcpy(out, tmp);
  }
}

/* The shortest %.Ng of the fp32 value x that reads back as x through strtod and one rounding to
 * fp32 (the way parse_f32 reads it). */
static void fmt_f32(float x, char out[32])
{
  char tmp[32];
  out[0] = '\0';
  for (int prec = 9; prec >= 1; prec--) {
    snprintf(tmp, sizeof tmp, "%.*g", prec, (double)x);
    if ((float)strtod(tmp, NULL) == x && (!out[0] || strlen(tmp) <= strlen(out)))
      strcpy(out, tmp);
  }
}

/* Starts key k's token ("k=") with the separating space. */
static void sb_key(sbuf *s, key_id k) { sb_printf(s, "%s%s=", s->len ? " " : "", key_names[k]); }

static void sb_word(sbuf *s, key_id k, const char *word)
{
  sb_key(s, k);
  sb_printf(s, "%s", word);
}

/* key k with an fp32 value, unless it is the default */
static void sb_f32(sbuf *s, key_id k, float v, float dflt)
{
  char num[32];
  if (v == dflt)
    return;
  fmt_f32(v, num);
  sb_word(s, k, num);
}

/* key k with an integer value, unless it is the default */
static void sb_int(sbuf *s, key_id k, int64_t v, int64_t dflt)
{
  if (v == dflt)
    return;
  sb_key(s, k);
  sb_printf(s, "%lld", (long long)v);
}

static void format_knobs(sbuf *s, const tbe_knobs *k)
{
  sb_int(s, K_FWD_BAGS, k->fwd.bags, 0);
  sb_int(s, K_FWD_WIDTH, k->fwd.width, 0);
  if (k->fwd.small != GPU_SMALL_AUTO)
    sb_word(s, K_FWD_SMALL, auto_on_off_words[k->fwd.small]);
  if (k->fwd.gather != GPU_GATHER_AUTO)
    sb_word(s, K_FWD_GATHER, gather_words[k->fwd.gather]);
  sb_int(s, K_FUSED_BOUNDS, k->fwd.fused_bounds, 0);
  const ref_bwd_config *b = &k->bwd;
  if (b->opt.kind == REF_OPT_NONE)
    return;
  ref_bwd_config d;
  ref_bwd_config_default(&d);
  sb_word(s, K_OPT, opt_words[b->opt.kind]);
  sb_f32(s, K_LR, b->opt.lr, d.opt.lr);
  sb_f32(s, K_EPS, b->opt.eps, d.opt.eps);
  if (b->opt.wd != REF_WD_NONE)
    sb_word(s, K_WD, wd_words[b->opt.wd]);
  sb_f32(s, K_LAMBDA, b->opt.lambda, d.opt.lambda);
  sb_f32(s, K_CLIP, b->clip, d.clip);
  sb_int(s, K_SR, b->opt.sr, 0);
  sb_int(s, K_STEP, b->opt.step, 0);
  sb_int(s, K_BWD_THRESHOLD, b->threshold, d.threshold);
  sb_int(s, K_BWD_CHUNK, b->chunk, d.chunk);
  if (b->combine != REF_COMBINE_DETERMINISTIC)
    sb_word(s, K_BWD_COMBINE, combine_words[b->combine]);
  const gpu_bwd_config *g = &k->gpu_bwd;
  if (g->long_mode)
    sb_word(s, K_BWD_LONG, long_words[g->long_mode]);
  sb_int(s, K_BWD_BUCKET, !g->no_bucket, 1);
  sb_int(s, K_BWD_DIRECT, !g->no_direct, 1);
  sb_int(s, K_BWD_WIDTH, g->short_width, 0);
  sb_int(s, K_BWD_GRID, g->grid, 0);
  if (g->order)
    sb_word(s, K_BWD_ORDER, order_words[g->order]);
  sb_int(s, K_BWD_NOISE, g->noise, 0);
  sb_int(s, K_BWD_DELAY, g->delay, 0);
  sb_int(s, K_BWD_SHORT_BLOCK, g->short_block, 0);
  if (g->steal)
    sb_word(s, K_BWD_STEAL, off_on_words[1]);
  if (g->bulk != GPU_BULK_AUTO)
    sb_word(s, K_BWD_BULK, auto_on_off_words[g->bulk]);
  if (g->hoist)
    sb_word(s, K_BWD_HOIST, off_on_words[1]);
  if (g->small_tc)
    sb_word(s, K_BWD_SMALL_TC, off_on_words[1]);
}

static void sb_spec(sbuf *s, key_id k, const case_spec *sp, int64_t dflt)
{
  char a[32], b[32];
  switch (sp->kind) {
  case CASE_FIXED:
    if (sp->lo != dflt) {
      sb_key(s, k);
      sb_printf(s, "%lld", (long long)sp->lo);
    }
    return;
  case CASE_RANGE:
    sb_key(s, k);
    sb_printf(s, "%lld..%lld", (long long)sp->lo, (long long)sp->hi);
    return;
  case CASE_LIST:
    sb_key(s, k);
    for (int64_t i = 0; i < sp->count; i++)
      sb_printf(s, "%s%lld", i ? "," : "", (long long)sp->list[i]);
    return;
  case CASE_NORMAL:
    fmt_num(sp->mu, a);
    fmt_num(sp->sigma, b);
    sb_key(s, k);
    sb_printf(s, "normal:%s,%s", a, b);
    return;
  }
}

int case_format(const tbe_case *c, char *buf, size_t n)
{
  sbuf s = {buf, n, 0};
  if (n)
    buf[0] = '\0';
  char num[32];
  if (c->T != 1) {
    sb_key(&s, K_T);
    sb_printf(&s, "%d", c->T);
  }
  if (c->B.kind == CASE_LIST) {
    sb_key(&s, K_B);
    for (int32_t t = 0; t < c->T; t++)
      for (int32_t r = 0; r < c->R; r++)
        sb_printf(&s, "%s%lld", r ? "/" : t ? "," : "", (long long)c->B.list[t * c->R + r]);
  } else {
    sb_spec(&s, K_B, &c->B, DEFAULT_B);
  }
  if (c->R != 1) {
    sb_key(&s, K_R);
    sb_printf(&s, "%d", c->R);
  }
  if (c->vbe)
    sb_word(&s, K_VBE, "1");
  sb_spec(&s, K_E, &c->E, DEFAULT_E);
  sb_spec(&s, K_D, &c->D, DEFAULT_D);
  int identity = 1;
  for (int32_t t = 0; t < c->T; t++)
    identity &= c->map[t] == t;
  if (!identity) {
    sb_key(&s, K_MAP);
    for (int32_t t = 0; t < c->T; t++)
      sb_printf(&s, "%s%d", t ? "," : "", c->map[t]);
  }
  sb_spec(&s, K_L, &c->L, DEFAULT_L);
  if (c->dist == CASE_DIST_ZIPF) {
    fmt_num(c->alpha, num);
    sb_key(&s, K_DIST);
    sb_printf(&s, "zipf:%s", num);
  }
  if (c->num_hot) {
    sb_key(&s, K_HOT);
    for (int32_t i = 0; i < c->num_hot; i++)
      sb_printf(&s, "%s%d:%lld:%lld", i ? "," : "", c->hot[i].table, (long long)c->hot[i].row,
                (long long)c->hot[i].sl);
  }
  if (c->wdtype != TBE_FP32)
    sb_word(&s, K_WDTYPE, dtype_words[c->wdtype]);
  if (c->out != TBE_FP32)
    sb_word(&s, K_OUT, dtype_words[c->out]);
  if (c->idx != TBE_I64)
    sb_word(&s, K_IDX, itype_words[c->idx]);
  if (c->pool != TBE_POOL_SUM)
    sb_word(&s, K_POOL, pool_words[c->pool]);
  if (c->weighted)
    sb_word(&s, K_WEIGHTED, "1");
  if (c->psw_fixed) {
    fmt_f32(c->psw, num);
    sb_word(&s, K_PSW, num);
  }
  if (c->invalid != 0) {
    fmt_num(c->invalid, num);
    sb_word(&s, K_INVALID, num);
  }
  if (c->invalid_kind != CASE_INVALID_PAST)
    sb_word(&s, K_INVALID_KIND, invalid_words[c->invalid_kind]);
  int first = 1;
  for (int k = 0; k < CASE_CORRUPT_KINDS; k++) {
    if (!c->corrupt[k])
      continue;
    if (first)
      sb_key(&s, K_CORRUPT);
    sb_printf(&s, "%s%s", first ? "" : ",", corrupt_words[k]);
    if (c->corrupt[k] != 1)
      sb_printf(&s, ":%lld", (long long)c->corrupt[k]);
    first = 0;
  }
  if (c->bounds != TBE_BOUNDS_WARNING)
    sb_word(&s, K_BOUNDS, bounds_words[c->bounds]);
  format_knobs(&s, &c->knobs);
  /* the seed is always printed, so no canonical text is empty */
  sb_key(&s, K_SEED);
  sb_printf(&s, "%llu", (unsigned long long)c->seed);
  return (int)s.len;
}

/* ------------------------------------------------------------------ equality */

static int spec_equal(const case_spec *a, const case_spec *b)
{
  if (a->kind != b->kind || a->lo != b->lo || a->hi != b->hi || a->count != b->count ||
      a->mu != b->mu || a->sigma != b->sigma)
    return 0;
  return a->kind != CASE_LIST ||
         memcmp(a->list, b->list, sizeof *a->list * (size_t)a->count) == 0;
}

/* knobs_equal compares every field of the two run configurations: a field it skipped would let
 * case_format drop that knob unseen by the round-trip tests. Their fields are all int-sized
 * (ints and enums), so a new one changes the size and stops the build here until it is added. */
_Static_assert(sizeof(gpu_fwd_config) == 5 * sizeof(int), "knobs_equal: compare the new field");
_Static_assert(sizeof(gpu_bwd_config) == 14 * sizeof(int), "knobs_equal: compare the new field");

static int knobs_equal(const tbe_knobs *a, const tbe_knobs *b)
{
  const ref_bwd_config *x = &a->bwd, *y = &b->bwd;
  const gpu_fwd_config *f = &a->fwd, *g = &b->fwd;
  const gpu_bwd_config *p = &a->gpu_bwd, *q = &b->gpu_bwd;
  return f->bags == g->bags && f->width == g->width && f->small == g->small &&
         f->fused_bounds == g->fused_bounds && f->gather == g->gather &&
         p->long_mode == q->long_mode &&
         p->no_bucket == q->no_bucket && p->no_direct == q->no_direct &&
         p->short_width == q->short_width && p->long_width == q->long_width &&
         p->grid == q->grid && p->order == q->order &&
         p->noise == q->noise && p->delay == q->delay && p->short_block == q->short_block &&
         p->steal == q->steal &&
         p->bulk == q->bulk && p->hoist == q->hoist && p->small_tc == q->small_tc &&
         x->opt.kind == y->opt.kind && x->opt.lr == y->opt.lr && x->opt.eps == y->opt.eps &&
         x->opt.wd == y->opt.wd && x->opt.lambda == y->opt.lambda && x->opt.sr == y->opt.sr &&
         x->opt.seed == y->opt.seed && x->opt.step == y->opt.step && x->clip == y->clip &&
         x->threshold == y->threshold && x->chunk == y->chunk && x->combine == y->combine;
}

int case_equal(const tbe_case *a, const tbe_case *b)
{
  if (a->T != b->T || a->R != b->R || a->vbe != b->vbe || a->num_tables != b->num_tables ||
      !spec_equal(&a->B, &b->B) || !spec_equal(&a->E, &b->E) || !spec_equal(&a->D, &b->D) ||
      !spec_equal(&a->L, &b->L) || a->dist != b->dist || a->alpha != b->alpha ||
      a->num_hot != b->num_hot || a->wdtype != b->wdtype || a->out != b->out ||
      a->idx != b->idx || a->pool != b->pool || a->weighted != b->weighted ||
      a->psw_fixed != b->psw_fixed || a->psw != b->psw ||
      a->invalid != b->invalid || a->invalid_kind != b->invalid_kind ||
      a->bounds != b->bounds || a->seed != b->seed || !knobs_equal(&a->knobs, &b->knobs) ||
      memcmp(a->corrupt, b->corrupt, sizeof a->corrupt) != 0 ||
      memcmp(a->map, b->map, sizeof *a->map * (size_t)a->T) != 0)
    return 0;
  for (int32_t i = 0; i < a->num_hot; i++)
    if (a->hot[i].table != b->hot[i].table || a->hot[i].row != b->hot[i].row ||
        a->hot[i].sl != b->hot[i].sl)
      return 0;
  return 1;
}

/* ------------------------------------------------------------------ .cases files */

void case_list_free(case_list *l)
{
  for (int i = 0; i < l->count; i++) {
    free(l->lines[i].text);
    free(l->lines[i].comment);
  }
  free(l->lines);
  memset(l, 0, sizeof *l);
}

/* A malloc'd copy of [s, e) without leading and trailing white space, or NULL. */
static char *dup_trimmed(const char *s, const char *e)
{
  while (s < e && isspace((unsigned char)*s))
    s++;
  while (e > s && isspace((unsigned char)e[-1]))
    e--;
  char *d = malloc((size_t)(e - s) + 1);
  if (d) {
    memcpy(d, s, (size_t)(e - s));
    d[e - s] = '\0';
  }
  return d;
}

/* Appends the case on [s, e) (one line) to l unless it is blank or only a comment. */
static tbe_status add_line(case_list *l, int *cap, const char *s, const char *e, int line)
{
  const char *hash = memchr(s, '#', (size_t)(e - s));
  char *text = dup_trimmed(s, hash ? hash : e);
  char *comment = dup_trimmed(hash ? hash + 1 : e, e);
  if (text && comment && !text[0]) {
    free(text);
    free(comment);
    return tbe_ok();
  }
  if (text && comment && l->count == *cap) {
    int ncap = *cap ? 2 * *cap : 64;
    case_line *nl = realloc(l->lines, sizeof *nl * (size_t)ncap);
    if (nl) {
      l->lines = nl;
      *cap = ncap;
    }
  }
  if (!text || !comment || l->count == *cap) {
    free(text);
    free(comment);
    return tbe_error(TBE_ENOMEM, "cases", line, "out of memory reading line %d", line);
  }
  l->lines[l->count++] = (case_line){text, comment, line};
  return tbe_ok();
}

tbe_status case_file_read(const char *path, case_list *out)
{
  memset(out, 0, sizeof *out);
  const int piped = !strcmp(path, "-"); /* standard input: a pipe, a file, a terminal */
  FILE *f = piped ? stdin : fopen(path, "rb");
  if (piped)
    path = "standard input";
  struct stat fs;
  if (!f || fstat(fileno(f), &fs) != 0 || (!piped && !S_ISREG(fs.st_mode))) {
    tbe_status s = f ? tbe_error(TBE_EINVAL, path, -1, "%s is not a case file (not a regular "
                                 "file)", path)
                     : tbe_error(TBE_EINVAL, path, -1, "cannot open %s: %s", path,
                                 strerror(errno));
    if (f)
      fclose(f);
    return s;
  }
  char *data = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len == cap) {
      size_t ncap = cap ? 2 * cap : 65536;
      char *nd = ncap > cap ? realloc(data, ncap) : NULL;
      if (!nd) {
        free(data);
        if (!piped)
          fclose(f);
        return tbe_error(TBE_ENOMEM, path, -1, "out of memory reading %s", path);
      }
      data = nd;
      cap = ncap;
    }
    size_t got = fread(data + len, 1, cap - len, f);
    len += got;
    if (got == 0)
      break;
  }
  int err = ferror(f);
  if (!piped)
    fclose(f);
  if (err) {
    free(data);
    return tbe_error(TBE_EIO, path, -1, "cannot read %s", path);
  }
  tbe_status st = tbe_ok();
  int lcap = 0, line = 1;
  for (size_t i = 0; i < len && !st.code; line++) {
    const char *s = data + i, *nl = memchr(s, '\n', len - i);
    const char *e = nl ? nl : data + len;
    const char *nul = memchr(s, '\0', (size_t)(e - s));
    st = nul ? tbe_error(TBE_EINVAL, path, line, "%s:%d: a NUL byte at column %d (a case file "
                         "is text)", path, line, (int)(nul - s) + 1)
             : add_line(out, &lcap, s, e, line);
    i = (size_t)(e - data) + 1;
  }
  free(data);
  if (st.code)
    case_list_free(out);
  return st;
}
