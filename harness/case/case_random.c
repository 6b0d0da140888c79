/* case_random.c: random valid small cases for sweeps and round-trip tests (case_random in
 * case.h), and those of the small-table path alone (case_random_small). Not a fuzzer: every
 * text it writes parses and generates; shapes stay small.
 *
 * Invariant: case number `index` of the sweep `seed` is a pure function of (seed, index). Every key
 * is drawn with a fair chance, and the rules between keys are respected by construction: pool=none
 * only without VBE and weights, with one D; weighted only with pool=sum, and a fixed psw only with
 * weighted (drawn from a stream of its own, so no other key's value depends on it); hot rows only
 * where the table has enough lookups and a non-hot row; corruptions only with 8+ fixed bags;
 * bounds=none only with trusted inputs (pruned -1 rows allowed); fused_bounds only with a bounds
 * check; backward keys only with their optimizer (eps, wd, lambda with Adagrad; lambda with a
 * weight decay; sr with 16-bit weights; step with sr=1), with small thresholds and chunks so that
 * small cases have long runs. Tokens come in shuffled order, sometimes with explicit defaults, so
 * the text is usually not canonical.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "case.h"
#include "case_random.h"
#include "case_private.h"
#include "gen.h"
#include "prng.h"

#define RANDOM_STREAM 0x5EED
#define RANDOM_SMALL_STREAM 0x5EED5
#define RANDOM_PSW_STREAM 0x5EED6

#define MAX_TOKENS 40
#define TOKEN_LEN 512

typedef struct {
  uint64_t key, n;                  /* PRNG key and draws so far */
  char tok[MAX_TOKENS][TOKEN_LEN];
  int ntok;
} rcase;

static int64_t rnd(rcase *r, int64_t n)
{
  return (int64_t)prng_below(prng_at(r->key, r->n++), (uint64_t)n);
}
static int chance(rcase *r, int percent) { return rnd(r, 100) < percent; }
static int64_t pick(rcase *r, const int64_t *v, int n) { return v[rnd(r, n)]; }

static void add(rcase *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(rcase *r, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->tok[r->ntok++], TOKEN_LEN, fmt, ap);
  va_end(ap);
}

/* Appends to token i (lists built value by value). */
static void append(rcase *r, int i, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(rcase *r, int i, const char *fmt, ...)
{
  size_t len = strlen(r->tok[i]);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->tok[i] + len, TOKEN_LEN - len, fmt, ap);
  va_end(ap);
}

static const int64_t E_values[] = {1, 2, 3, 5, 10, 17, 100, 257, 1000};
static const int64_t D_values[] = {1, 2, 3, 4, 8, 16, 31, 32, 33, 64, 128};

/* A per-table E or D token: one value, a range or a list; min_v (if not NULL) receives each
 * table's least possible value. */
static void add_table_spec(rcase *r, const char *key, const int64_t *vals, int nvals,
                           int32_t tables, int64_t *min_v)
{
  int64_t ignored[8];
  if (!min_v)
    min_v = ignored;
  int form = (int)rnd(r, 4);
  if (form <= 1 || tables == 1) {
    int64_t v = pick(r, vals, nvals);
    add(r, "%s=%lld", key, (long long)v);
    for (int32_t j = 0; j < tables; j++)
      min_v[j] = v;
  } else if (form == 2) {
    int64_t a = pick(r, vals, nvals), b = pick(r, vals, nvals);
    if (a > b) {
      int64_t t = a;
      a = b;
      b = t;
    }
    add(r, "%s=%lld..%lld", key, (long long)a, (long long)b);
    for (int32_t j = 0; j < tables; j++)
      min_v[j] = a;
  } else {
    add(r, "%s=", key);
    for (int32_t j = 0; j < tables; j++) {
      min_v[j] = pick(r, vals, nvals);
      append(r, r->ntok - 1, "%s%lld", j ? "," : "", (long long)min_v[j]);
    }
  }
}

/* The GPU forward's knobs and the backward's keys (drawn after every other key, so the rest of
 * a case does not depend on them). */
static void add_knobs(rcase *r, int bounds_checked, int wd16)
{
  static const int64_t bags[] = {1, 2, 4}, widths[] = {4, 8};
  static const char *const smalls[] = {"auto", "on", "off"};
  static const char *const gathers[] = {"auto", "direct", "window"};
  if (chance(r, 15))
    add(r, "fwd.bags=%lld", (long long)pick(r, bags, 3));
  if (chance(r, 15))
    add(r, "fwd.width=%lld", (long long)pick(r, widths, 2));
  if (chance(r, 15))
    add(r, "fwd.small=%s", smalls[rnd(r, 3)]);
  if (chance(r, 15))
    add(r, "fwd.gather=%s", gathers[rnd(r, 3)]);
  if (bounds_checked && chance(r, 15))
    add(r, "fused_bounds=%d", (int)rnd(r, 2));
  if (chance(r, 50))
    return;
  int adagrad = chance(r, 60);
  add(r, "opt=%s", adagrad ? "rowwise_adagrad" : "sgd");
  static const char *const lrs[] = {"0.01", "0.5", "1", "0.0625", "3e-3"};
  static const char *const epss[] = {"1e-8", "0.1", "0"};
  static const char *const lambdas[] = {"0.01", "0.3", "1e-4"};
  static const char *const clips[] = {"0.5", "2", "1e3"};
  static const int64_t small[] = {1, 2, 3, 5}; /* tiers small cases reach; 256 is the default */
  if (chance(r, 50))
    add(r, "lr=%s", lrs[rnd(r, 5)]);
  if (adagrad) {
    static const char *const wds[] = {"none", "l2", "decouple"};
    int wdm = (int)rnd(r, 3);
    if (chance(r, 40))
      add(r, "eps=%s", epss[rnd(r, 3)]);
    if (wdm || chance(r, 20))
      add(r, "wd=%s", wds[wdm]);
    if (wdm && chance(r, 80))
      add(r, "lambda=%s", lambdas[rnd(r, 3)]);
  }
  if (chance(r, 25))
    add(r, "clip=%s", clips[rnd(r, 3)]);
  int sr = wd16 && chance(r, 50);
  if (sr || (wd16 && chance(r, 10)))
    add(r, "sr=%d", sr);
  if (sr && chance(r, 50))
    add(r, "step=%lld", (long long)rnd(r, 100000));
  if (chance(r, 80))
    add(r, "bwd.threshold=%lld", chance(r, 15) ? 256LL : (long long)pick(r, small, 4));
  if (chance(r, 80))
    add(r, "bwd.chunk=%lld", chance(r, 15) ? 256LL : (long long)pick(r, small, 4));
  if (chance(r, 30))
    add(r, "bwd.combine=%s", chance(r, 70) ? "atomic" : "deterministic");
}

/* Shuffles the tokens (Fisher-Yates) and joins them into buf; the length as snprintf gives. */
static int join(rcase *r, char *buf, size_t n)
{
  for (int i = r->ntok - 1; i > 0; i--) {
    int j = (int)rnd(r, i + 1);
    char tmp[TOKEN_LEN];
    memcpy(tmp, r->tok[i], TOKEN_LEN);
    memcpy(r->tok[i], r->tok[j], TOKEN_LEN);
    memcpy(r->tok[j], tmp, TOKEN_LEN);
  }
  size_t len = 0;
  if (n)
    buf[0] = '\0';
  for (int i = 0; i < r->ntok; i++) {
    int k = snprintf(len < n ? buf + len : NULL, len < n ? n - len : 0, "%s%s", i ? " " : "",
                     r->tok[i]);
    len += (size_t)k;
  }
  return (int)len;
}

int case_random(uint64_t seed, uint64_t index, char *buf, size_t n)
{
  rcase r;
  memset(&r, 0, sizeof r);
  r.key = prng_at(prng_key(seed, RANDOM_STREAM), index);

  int vbe = chance(&r, 25);
  int pool = vbe ? (chance(&r, 70) ? TBE_POOL_SUM : TBE_POOL_MEAN) : (int)rnd(&r, 3);
  int weighted = pool == TBE_POOL_SUM && chance(&r, 40);
  int32_t T = chance(&r, 80) ? 1 + (int32_t)rnd(&r, 4) : 1 + (int32_t)rnd(&r, 8);
  int32_t map[8], tables = T;
  if (T > 1 && chance(&r, 30)) {
    tables = 0;
    add(&r, "map=");
    for (int32_t t = 0; t < T; t++) {
      map[t] = (int32_t)rnd(&r, T);
      tables = map[t] + 1 > tables ? map[t] + 1 : tables;
      append(&r, r.ntok - 1, "%s%d", t ? "," : "", map[t]);
    }
    if (chance(&r, 50))
      add(&r, "T=%d", T);
  } else {
    for (int32_t t = 0; t < T; t++)
      map[t] = t;
    if (T > 1 || chance(&r, 10))
      add(&r, "T=%d", T);
  }

  /* bags: fixed_bags is the number of bags per feature when it is known, else -1 */
  int64_t fixed_bags = -1;
  int32_t R = 1;
  if (vbe) {
    add(&r, "vbe=1");
    R = 1 + (int32_t)rnd(&r, 3);
    int form = (int)rnd(&r, 3);
    if (form == 0) {
      int64_t B = rnd(&r, 6);
      add(&r, "B=%lld", (long long)B);
      fixed_bags = B * R;
    } else if (form == 1) {
      int64_t a = rnd(&r, 3);
      add(&r, "B=%lld..%lld", (long long)a, (long long)(a + rnd(&r, 5)));
    } else {
      add(&r, "B=");
      for (int32_t t = 0; t < T; t++)
        for (int32_t k = 0; k < R; k++)
          append(&r, r.ntok - 1, "%s%lld", k ? "/" : t ? "," : "", (long long)rnd(&r, 5));
    }
    if ((R != 1 && form != 2) || chance(&r, 20))
      add(&r, "R=%d", R);
  } else {
    int64_t B = chance(&r, 5) ? 0 : 1 + rnd(&r, 8);
    if (B != 4 || chance(&r, 20))
      add(&r, "B=%lld", (long long)B);
    fixed_bags = B;
  }

  int64_t E_min[8];
  if (pool != TBE_POOL_NONE && chance(&r, 5)) { /* widest rows, few of them */
    E_min[0] = 1 + rnd(&r, 3);
    for (int32_t j = 1; j < tables; j++)
      E_min[j] = E_min[0];
    add(&r, "E=%lld", (long long)E_min[0]);
    add(&r, "D=2048");
  } else {
    add_table_spec(&r, "E", E_values, 9, tables, E_min);
    if (pool == TBE_POOL_NONE)
      add(&r, "D=%lld", (long long)pick(&r, D_values, 11));
    else
      add_table_spec(&r, "D", D_values, 11, tables, NULL);
  }

  int64_t fixed_L = -1;
  int lform = (int)rnd(&r, 3);
  if (lform == 0) {
    fixed_L = rnd(&r, 11);
    if (fixed_L != 4 || chance(&r, 20))
      add(&r, "L=%lld", (long long)fixed_L);
  } else if (lform == 1) {
    int64_t a = rnd(&r, 5);
    add(&r, "L=%lld..%lld", (long long)a, (long long)(a + rnd(&r, 16)));
  } else {
    add(&r, "L=normal:%g,%g", (double)rnd(&r, 40) / 4, (double)rnd(&r, 20) / 4);
  }

  if (chance(&r, 30)) {
    static const char *const alphas[] = {"0.5", "0.9", "1", "1.1", "1.5", "2", "3.25"};
    add(&r, "dist=zipf:%s", alphas[rnd(&r, 7)]);
  } else if (chance(&r, 10)) {
    add(&r, "dist=uniform");
  }

  /* hot rows of table 0, when its lookup count is known and it keeps a row that is not hot */
  int64_t lookups0 = 0;
  for (int32_t t = 0; t < T; t++)
    lookups0 += map[t] == 0;
  lookups0 *= fixed_bags >= 0 && fixed_L >= 0 ? fixed_bags * fixed_L : 0;
  if (lookups0 >= 2 && E_min[0] >= 3 && chance(&r, 25)) {
    int64_t row = rnd(&r, E_min[0] - 1);
    add(&r, "hot=0:%lld:%lld", (long long)row, (long long)(1 + rnd(&r, lookups0 / 2)));
    if (chance(&r, 50))
      append(&r, r.ntok - 1, ",0:%lld:%lld", (long long)(E_min[0] - 1),
             (long long)(1 + rnd(&r, lookups0 / 2)));
  }

  static const char *const dtypes[] = {"fp32", "fp16", "bf16"};
  int wd = (int)rnd(&r, 3), od = (int)rnd(&r, 3);
  if (wd || chance(&r, 10))
    add(&r, "wdtype=%s", dtypes[wd]);
  if (od || chance(&r, 10))
    add(&r, "out=%s", dtypes[od]);
  if (chance(&r, 50))
    add(&r, "idx=%s", chance(&r, 50) ? "int32" : "int64");
  static const char *const pools[] = {"sum", "mean", "none"};
  if (pool || chance(&r, 10))
    add(&r, "pool=%s", pools[pool]);
  if (weighted || chance(&r, 10))
    add(&r, "weighted=%d", weighted);
  const uint64_t psw_key = prng_at(prng_key(seed, RANDOM_PSW_STREAM), index);
  if (weighted && prng_below(prng_at(psw_key, 0), 100) < 10) {
    static const char *const psws[] = {"1", "0.75", "-1.5", "0", "2", "-0.3"};
    add(&r, "psw=%s", psws[prng_below(prng_at(psw_key, 1), 6)]);
  }

  int untrusted = 0;
  if (chance(&r, 30)) {
    static const char *const fracs[] = {"0.01", "0.1", "0.25", "0.5", "1", "0.3333"};
    static const char *const kinds[] = {"past", "negative", "pruned", "mix"};
    int kind = (int)rnd(&r, 4);
    add(&r, "invalid=%s", fracs[rnd(&r, 6)]);
    if (kind || chance(&r, 20))
      add(&r, "invalid_kind=%s", kinds[kind]);
    untrusted = kind != 2;
  }
  if (fixed_bags >= 0 && fixed_bags * T >= 8 && chance(&r, 25)) {
    static const char *const kinds[] = {"negative", "decreasing", "past_end", "wrong_last"};
    add(&r, "corrupt=");
    int first = 1;
    for (int k = 0; k < 4; k++)
      if (chance(&r, 40) || (k == 3 && first)) {
        append(&r, r.ntok - 1, "%s%s", first ? "" : ",", kinds[k]);
        if (k < 3 && chance(&r, 40))
          append(&r, r.ntok - 1, ":%d", 1 + (int)rnd(&r, 2));
        first = 0;
      }
    untrusted = 1;
  }
  static const char *const modes[] = {"fatal", "warning", "ignore", "none"};
  int mode = (int)rnd(&r, untrusted ? 3 : 4);
  if (mode != 1 || chance(&r, 10))
    add(&r, "bounds=%s", modes[mode]);
  if (chance(&r, 90))
    add(&r, "seed=%llu", chance(&r, 10) ? (unsigned long long)prng_at(r.key, 999)
                                        : (unsigned long long)rnd(&r, 1000000));
  add_knobs(&r, mode != 3, wd != 0);
  return join(&r, buf, n);
}

int case_random_small(uint64_t seed, uint64_t index, char *buf, size_t n)
{
  static const int64_t E_small[] = {1, 2, 5, 15, 16, 17, 33, 50, 63, 64};
  static const int64_t D_small[] = {64, 72, 80, 96, 104, 120, 128};
  static const int64_t L_small[] = {0, 1, 2, 15, 16, 17, 31, 100, 255, 256, 257, 300, 513, 700};
  rcase r;
  memset(&r, 0, sizeof r);
  r.key = prng_at(prng_key(seed, RANDOM_SMALL_STREAM), index);
  add(&r, "fwd.small=on");
  add(&r, "wdtype=fp16");
  if (chance(&r, 20))
    add(&r, "out=fp32");
  int32_t T = 1 + (int32_t)rnd(&r, 4), tables = T, on0 = 1; /* on0: features of table 0 */
  if (T > 1 && chance(&r, 30)) { /* shared tables */
    tables = 0;
    on0 = 0;
    add(&r, "map=");
    for (int32_t t = 0; t < T; t++) {
      int32_t m = (int32_t)rnd(&r, T);
      tables = m + 1 > tables ? m + 1 : tables;
      on0 += m == 0;
      append(&r, r.ntok - 1, "%s%d", t ? "," : "", m);
    }
  }
  add(&r, "T=%d", T);
  const int64_t B = 1 + rnd(&r, 64);
  add(&r, "B=%lld", (long long)B);
  int64_t E_min[4];
  add_table_spec(&r, "E", E_small, 10, tables, E_min);
  add(&r, "D=%lld", (long long)pick(&r, D_small, 7)); /* a list, not a range: multiples of 8 */
  const int32_t listed = tables > 1 && chance(&r, 60) ? tables : 1; /* one D, or one each */
  for (int32_t j = 1; j < listed; j++)
    append(&r, r.ntok - 1, ",%lld", (long long)pick(&r, D_small, 7));
  int64_t fixed_L = -1;
  int lform = (int)rnd(&r, 3);
  if (lform == 0) {
    fixed_L = pick(&r, L_small, 14);
    add(&r, "L=%lld", (long long)fixed_L);
  } else if (lform == 1) {
    int64_t a = pick(&r, L_small, 14);
    add(&r, "L=%lld..%lld", (long long)a, (long long)(a + rnd(&r, 300)));
  } else {
    add(&r, "L=normal:%lld,%lld", (long long)rnd(&r, 400), (long long)rnd(&r, 100));
  }
  if (chance(&r, 30))
    add(&r, "dist=zipf:%s", chance(&r, 50) ? "1.1" : "2");
  if (fixed_L > 1 && on0 && E_min[0] >= 2 && chance(&r, 20)) /* row 0 takes up to half */
    add(&r, "hot=0:0:%lld", (long long)(1 + rnd(&r, on0 * B * fixed_L / 2)));
  if (chance(&r, 50))
    add(&r, "idx=%s", chance(&r, 50) ? "int32" : "int64");
  if (chance(&r, 40))
    add(&r, "pool=%s", chance(&r, 50) ? "mean" : "sum");
  int untrusted = 0;
  if (chance(&r, 30)) {
    static const char *const kinds[] = {"past", "negative", "pruned", "mix"};
    int kind = (int)rnd(&r, 4);
    add(&r, "invalid=%s", chance(&r, 50) ? "0.01" : "0.2");
    add(&r, "invalid_kind=%s", kinds[kind]);
    untrusted = kind != 2;
  }
  if (B * T >= 8 && chance(&r, 15)) {
    add(&r, "corrupt=wrong_last");
    untrusted = 1;
  }
  static const char *const modes[] = {"warning", "ignore", "fatal", "none"};
  int mode = (int)rnd(&r, untrusted ? 3 : 4);
  if (mode || chance(&r, 10))
    add(&r, "bounds=%s", modes[mode]);
  if (mode != 3 && chance(&r, 20))
    add(&r, "fused_bounds=1");
  add(&r, "seed=%lld", (long long)rnd(&r, 1000000));
  return join(&r, buf, n);
}
