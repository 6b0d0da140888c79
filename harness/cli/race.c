/* race.c: `tbecheck race --seconds S --seed X [--launches N] [--db PATH] [--cases FILE]`: race
 * fuzzing of the GPU backward's fused fence + countdown path. Each case (drawn, or read from
 * FILE) runs through the reference once; then one GPU session launches its backward N times,
 * cycling through chunk-kernel grids, chunk orders, a noise kernel on a second stream, sleeps
 * before each chunk program's partial store, blocks of adjacent short runs, work stealing and
 * the backward's metadata made in the forward (race_variant), and every
 * launch's weights, momentum and psw_grad are held to the reference's bits. Not `tbecheck fuzz`
 * (fuzz_campaign.c: one launch per case, the whole edge space).
 *
 * What lands in the database per case: one results row per output (gpu:ref, path
 * 'backward.race': a pass when every launch had the reference's bits, else a fail whose metrics
 * and violations are the first differing launch's), and one races row (launches, distinct
 * outcomes, mismatching launches, long runs and chunks, each launch's schedule).
 */
#include "race.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backward.h"
#include "bounds.h"
#include "db.h"
#include "engine.h"
#include "engine_ref.h"
#include "forward.h"
#include "gpus.h"
#include "prng.h"
#include "runinfo.h"
#include "tbe_gpu.h"

#define RACE_STREAM 0x7ACE
#define DEFAULT_LAUNCHES 20
#define MAX_LAUNCHES 10000
#define MAX_VIOLATIONS 10
#define RACE_PATH "backward.race"
/* room for one launch's "grid=G order=O noise=N delay=NS block=K steal=S hoist=H" */
#define RACE_VARIANT_TEXT 96

static const char race_usage[] =
    "usage: tbecheck race [--seconds S] [--seed X] [--launches N] [--db PATH] [--cases FILE]\n"
    "                     [--max-cases N] [--campaign ID] [--gpus all|N | --gpu-ids I,J,...]\n"
    "Race fuzzing of the GPU backward: cases with many chunk programs per run and many runs\n"
    "(hot rows, zipf, bwd.chunk 1..32, a low bwd.threshold, several tables, fp32/fp16/bf16\n"
    "weights with and without stochastic rounding, SGD and row-wise Adagrad, weighted), drawn\n"
    "from seed X (default 1) for S seconds (default 60), or the cases of FILE in turn. Each\n"
    "runs through the reference once; then one GPU session launches its backward N times\n"
    "(default 20), cycling through chunk-kernel grids (bwd.grid), chunk orders (bwd.order), a\n"
    "noise kernel beside it (bwd.noise), sleeps of each chunk program before it publishes its\n"
    "partial (bwd.delay, up to 20 us), blocks of adjacent short runs per warp\n"
    "(bwd.short_block), work stealing off and on (bwd.steal) and the backward's metadata\n"
    "made by the forward or by itself (bwd.hoist), and every launch must give the\n"
    "reference's bits.\n"
    "Stored per case: a results row per output (path backward.race; a mismatch is a failure,\n"
    "shown by `tbecheck list --failed`) and a races row (launches, distinct outcomes,\n"
    "mismatches), shown by `tbecheck report`. Cases of FILE need an optimizer and\n"
    "bwd.combine=deterministic (the atomic combine is held by its bound, not bit for bit);\n"
    "their own bwd.grid, bwd.order, bwd.noise, bwd.delay, bwd.short_block, bwd.steal and\n"
    "bwd.hoist are replaced by the cycle. Without a GPU it says so and exits 0 (a skip).\n"
    "  --db PATH              results database (default ./tbecheck.db)\n"
    "  --max-cases N          stop after N cases even if time is left\n"
    "  --campaign ID          the run's campaign id (runs.campaign)\n"
    "  --gpus all|N           one worker race per GPU (all, or the first N nvidia-smi lists),\n"
    "  --gpu-ids I,J,...      or those devices, pinned with CUDA_VISIBLE_DEVICES, worker k of N\n"
    "                         drawing from seed X*N+k, each for S seconds (and --max-cases);\n"
    "                         their databases merged into --db at the end, one campaign; a\n"
    "                         worker without a GPU says so and races nothing; one that dies\n"
    "                         loses its current case (exit 3, its run incomplete). Not with\n"
    "                         --cases\n"
    "Exit 0 no failure, 1 mismatches or GPU errors, 2 bad usage or input, 3 I/O or internal\n"
    "error.\n";

/* ---- the schedule ---- */

/* 5 grids, 3 orders, 7 delays, 8 settings of noise, steal and hoist (noise k mod 2, steal (k / 2)
 * mod 2, hoist (k / 4) mod 2) and 11 short blocks: coprime counts, so launches k mod 9240 take each
 * combination once (RACE_CYCLE); a short block is 0 (the grid-stride loop) where steal is on, which
 * takes the short tier's runs its own way. Grid 0 is the policy; 1, 2 and 7 blocks make each group
 * loop over many chunk programs, so different groups finish a run's last chunk (with steal, the
 * grid of every stealing kernel, whose groups then take runs in the order they ask; with a short
 * block, the short tier's grid too). The short blocks are 0 in four of 11 and each K of
 * bwd.short_block once (8 twice), so a race of a few launches takes several. The delays (ns) hold
 * each chunk program back between its sum and its partial's store, by a pseudo-random time below
 * them, for up to ~20 us: a countdown or combine that overtook a store would read a NaN slot
 * (backward.cu poisons the workspace per launch). Each launch runs its forward before its backward,
 * so with the hoist on it is the forward that makes the metadata the backward takes. */
static const int race_grids[] = {0, 1, 2, 7, 61};
static const char *const race_orders[] = {"asc", "desc", "shuffle"};
static const int race_delays[] = {0, 500, 1000, 2000, 5000, 10000, 20000};
static const char *const race_off_on[] = {"off", "on"};
static const int race_blocks[] = {0, 8, 1, 0, 4, 32, 0, 2, 16, 0, 8};

race_schedule race_variant(int64_t k)
{
  const int steal = (int)(k / 2 % 2);
  return (race_schedule){.grid = race_grids[k % 5],
                         .order = (int)(k % 3),
                         .noise = (int)(k % 2),
                         .delay = race_delays[k % 7],
                         .steal = steal,
                         .hoist = (int)(k / 4 % 2),
                         .short_block = steal ? 0 : race_blocks[k % 11]};
}

/* ---- the drawn cases ---- */

typedef struct {
  uint64_t key, n;
  char *buf;
  size_t cap, len;
} race_text;

static uint64_t rnd(race_text *t, uint64_t n) { return prng_below(prng_at(t->key, t->n++), n); }

/* Appends a token (with a blank before all but the first). */
static void put(race_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(race_text *t, const char *fmt, ...)
{
  if (t->len)
    t->len += (size_t)snprintf(t->buf + (t->len < t->cap ? t->len : t->cap),
                               t->len < t->cap ? t->cap - t->len : 0, " ");
  va_list ap;
  va_start(ap, fmt);
  t->len += (size_t)vsnprintf(t->buf + (t->len < t->cap ? t->len : t->cap),
                              t->len < t->cap ? t->cap - t->len : 0, fmt, ap);
  va_end(ap);
}

/* Appends "key=v0,v1,..." of T values drawn from vals, the first `skip` tables' from vals
 * after its first value (a hot table needs a row besides the hot one). */
static void put_list(race_text *t, const char *key, int T, const int *vals, int nvals, int skip)
{
  char v[128] = "";
  for (int j = 0; j < T; j++) {
    const int lo = j < skip;
    snprintf(v + strlen(v), sizeof v - strlen(v), "%s%d", j ? "," : "",
             vals[lo + (int)rnd(t, (uint64_t)(nvals - lo))]);
  }
  put(t, "%s=%s", key, v);
}

int race_draw(uint64_t seed, uint64_t index, int hot, char *buf, size_t n)
{
  race_text t = {prng_key(seed ^ (index * PRNG_GAMMA), RACE_STREAM), 0, buf, n, 0};
  if (n)
    buf[0] = '\0';
  static const int Es[] = {1, 2, 5, 30, 300, 3000};
  static const int Ds[] = {1, 3, 4, 8, 16, 32, 64, 100, 128, 256};
  static const char *const dists[] = {"uniform", "zipf:1.1", "zipf:1.5"};
  static const char *const wdtypes[] = {"fp32", "fp16", "bf16", "fp16"};
  const int T = 1 + (int)rnd(&t, 3);
  const int B = 32 << rnd(&t, 4);
  const int lo = 8 + (int)rnd(&t, 8), hi = lo + (int)rnd(&t, 56);
  const int threshold = 1 + (int)rnd(&t, 64), chunk = 1 + (int)rnd(&t, 32);
  const int sl = threshold > 4 * chunk ? threshold : 4 * chunk; /* a long run of 4+ chunks */
  put(&t, "T=%d", T);
  put(&t, "B=%d", B);
  put_list(&t, "E", T, Es, 6, hot ? 2 : 0);
  put_list(&t, "D", T, Ds, 10, 0);
  put(&t, "L=%d..%d", lo, hi);
  put(&t, "dist=%s", dists[rnd(&t, 3)]);
  if (hot) /* row 0 of the first tables, long: at most the lookups their feature surely makes */
    put(&t, "hot=0:0:%d%s", sl + (int)rnd(&t, (uint64_t)(B * lo - sl + 1)), T > 1 ? ",1:0:97" : "");
  const char *wd = wdtypes[rnd(&t, 4)];
  put(&t, "wdtype=%s", wd);
  if (rnd(&t, 4) == 0)
    put(&t, "out=fp16");
  put(&t, "idx=%s", rnd(&t, 2) ? "int32" : "int64");
  const int weighted = rnd(&t, 3) == 0;
  if (weighted)
    put(&t, "weighted=1");
  else if (rnd(&t, 4) == 0)
    put(&t, "pool=mean");
  if (rnd(&t, 5) == 0)
    put(&t, "invalid=0.01 invalid_kind=%s", rnd(&t, 2) ? "pruned" : "mix");
  const int adagrad = (int)rnd(&t, 2);
  put(&t, "opt=%s", adagrad ? "rowwise_adagrad" : "sgd");
  put(&t, "lr=%s", rnd(&t, 2) ? "0.01" : "0.5");
  if (strcmp(wd, "fp32") && rnd(&t, 2))
    put(&t, "sr=1 step=%d", (int)rnd(&t, 1000));
  put(&t, "bwd.threshold=%d", threshold);
  put(&t, "bwd.chunk=%d", chunk);
  put(&t, "bwd.long=fused");
  put(&t, "seed=%llu", (unsigned long long)prng_at(t.key, t.n++));
  return (int)t.len;
}

/* ---- the reference ---- */

void race_ref_free(race_ref *r)
{
  free(r->out);
  free(r->w);
  free(r->m);
  free(r->psw);
  tbe_layout_free(&r->l);
  gen_case_free(&r->b, &r->bwd);
  memset(r, 0, sizeof *r);
}

tbe_status race_ref_run(const tbe_case *c, race_ref *r)
{
  memset(r, 0, sizeof *r);
  tbe_status s = gen_case(c, &r->b, &r->bwd);
  if (s.code != TBE_OK) {
    memset(r, 0, sizeof *r);
    return s;
  }
  if (r->bwd.cfg) { /* gen_case's points into c, which the caller may free before r */
    r->cfg = *r->bwd.cfg;
    r->bwd.cfg = &r->cfg;
  }
  s = tbe_layout_init(&r->l, &r->b);
  r->mode = case_bounds(c);
  const size_t isz = tbe_itype_size(r->b.itype);
  const size_t ib = isz * (size_t)r->b.N, ob = isz * (size_t)(r->l.total_B + 1);
  void *i0 = NULL, *o0 = NULL;
  if (s.code == TBE_OK) {
    i0 = malloc(ib + 1);
    o0 = malloc(ob);
    r->out = malloc(tbe_dtype_size(r->b.out_dtype) * (size_t)r->l.out_elems + 1);
    if (!i0 || !o0 || !r->out)
      s = tbe_error(TBE_ENOMEM, "reference", -1, "out of memory for the reference's outputs");
  }
  if (s.code == TBE_OK) {
    memcpy(i0, r->b.indices, ib);
    memcpy(o0, r->b.offsets, ob);
    const double t0 = eng_now_ms();
    int64_t warnings;
    r->bounds = ref_bounds_check(&r->b, &r->l, r->mode, &warnings);
    if (r->bounds.code == TBE_OK)
      s = ref_forward(&r->b, &r->l, r->out);
    else if (r->bounds.code != TBE_EBOUNDS)
      s = r->bounds;
    if (s.code == TBE_OK && r->bounds.code == TBE_OK && r->bwd.cfg)
      s = eng_ref_backward_run(&r->b, &r->l, &r->bwd, &r->w, &r->m, &r->psw);
    r->ms = eng_now_ms() - t0;
    memcpy(r->b.indices, i0, ib);
    memcpy(r->b.offsets, o0, ob);
    if (r->bounds.code != TBE_OK) {
      free(r->out);
      r->out = NULL;
    }
  }
  free(i0);
  free(o0);
  if (s.code != TBE_OK)
    race_ref_free(r);
  return s;
}

/* ---- one case ---- */

/* One backward output held to the reference over the launches: its check is res->checks[check]
 * (an index: the array may move). */
typedef struct {
  const char *name;
  tbe_dtype dtype;
  int64_t n;
  const void *ref;
  int check;
  int64_t mismatches, first; /* launches that differ, and the first of them (-1: none) */
} race_output;

/* Where element i of output o is: table, row and column of the weights, table and row of the
 * momentum, position of psw_grad. */
static void race_coordinates(const race_ref *r, const race_output *o, int64_t k, int64_t i,
                             char *buf, size_t n)
{
  const tbe_batch *b = &r->b;
  int j = 0;
  if (o->ref == r->w) {
    while (j + 1 < b->num_tables && b->table_offset[j + 1] <= i)
      j++;
    const int64_t e = i - b->table_offset[j];
    snprintf(buf, n, "launch=%lld table=%d row=%lld d=%lld", (long long)k, j,
             (long long)(e / b->D[j]), (long long)(e % b->D[j]));
  } else if (o->ref == r->m) {
    int64_t first = 0;
    while (j + 1 < b->num_tables && first + b->E[j] <= i)
      first += b->E[j++];
    snprintf(buf, n, "launch=%lld table=%d row=%lld", (long long)k, j, (long long)(i - first));
  } else {
    snprintf(buf, n, "launch=%lld p=%lld", (long long)k, (long long)i);
  }
}

/* Holds launch k's output `got` to the reference: counts a mismatch, and on launch 0 or the
 * first mismatch puts that launch's metrics, violations and digest in the check. Returns 1 if
 * it differs; -1 out of memory. */
static int race_compare(const race_ref *r, race_output *o, eng_check *c, int64_t k,
                        const void *got)
{
  const size_t bytes = tbe_dtype_size(o->dtype) * (size_t)o->n;
  const int differs = memcmp(got, o->ref, bytes) != 0;
  if (differs && o->mismatches++ == 0)
    o->first = k;
  if (k != 0 && !(differs && o->first == k))
    return differs;
  cmp_free(&c->cmp);
  free(c->violations);
  c->violations = NULL;
  c->n_violations = 0;
  if (cmp_init(&c->cmp, CMP_BITWISE, MAX_VIOLATIONS).code != TBE_OK)
    return -1;
  cmp_bitwise(&c->cmp, o->dtype, o->ref, got, o->n);
  c->compared = 1;
  c->has_digest = 1;
  c->digest = eng_fnv1a(ENG_FNV_SEED, got, bytes);
  const int nv = (int)(c->cmp.violations < MAX_VIOLATIONS ? c->cmp.violations : MAX_VIOLATIONS);
  if (nv) {
    c->violations = calloc((size_t)nv, sizeof *c->violations);
    if (!c->violations)
      return -1;
    c->n_violations = nv;
    for (int v = 0; v < nv; v++) {
      c->violations[v].v = c->cmp.first[v];
      race_coordinates(r, o, k, c->cmp.first[v].index, c->violations[v].coordinates,
                       sizeof c->violations[v].coordinates);
    }
  }
  return differs;
}

/* "grid=G order=O noise=N delay=NS block=K steal=S hoist=H" of launch k. */
static void race_variant_text(int64_t k, char *buf, size_t n)
{
  const race_schedule v = race_variant(k);
  snprintf(buf, n, "grid=%d order=%s noise=%d delay=%d block=%d steal=%s hoist=%s", v.grid,
           race_orders[v.order], v.noise, v.delay, v.short_block, race_off_on[v.steal],
           race_off_on[v.hoist]);
}

/* The schedules of `done` launches: the first cycle, then a note that it repeats. malloc'd. */
static char *race_variants(int64_t done)
{
  size_t cap = (RACE_VARIANT_TEXT + 2) * RACE_CYCLE + 64, len = 0;
  char *s = malloc(cap);
  if (!s)
    return NULL;
  s[0] = '\0';
  for (int64_t k = 0; k < done && k < RACE_CYCLE; k++) {
    char v[RACE_VARIANT_TEXT];
    race_variant_text(k, v, sizeof v);
    len += (size_t)snprintf(s + len, cap - len, "%s%s", k ? "; " : "", v);
  }
  if (done > RACE_CYCLE)
    snprintf(s + len, cap - len, "; then the same cycle again, %lld launches in all",
             (long long)done);
  return s;
}

/* What a race of one case found. */
typedef struct {
  int64_t launches, distinct, mismatches, first_bad, long_runs, chunks;
} race_found;

/* Launches the backward of r `launches` times in one GPU session under the cycle's schedules,
 * filling the checks outs[*].check of res and *f. Returns the first GPU error (the launches
 * before it are counted), or TBE_ENOMEM. */
static tbe_status race_launches(const race_ref *r, int64_t launches, race_output *outs, int nout,
                                eng_case_result *res, race_found *f)
{
  gpu_session *s = NULL;
  const gen_bwd *bwd = &r->bwd;
  gpu_bwd_config gc = *bwd->gpu; /* the case's tiers and widths; race_variant draws the
                                  * schedule */
  gc.grid = gc.noise = gc.delay = gc.short_block = gc.steal = gc.hoist = 0;
  gc.small_tc = 0; /* its tables follow their model, not the reference each launch is held to */
  gc.order = GPU_ORDER_ASC;
  const gpu_fwd_config fc = {0, 0, 0, GPU_SMALL_AUTO, GPU_GATHER_AUTO};
  uint64_t *hash = malloc(sizeof *hash * (size_t)launches);
  tbe_status st = hash ? gpu_session_open(&r->b, &r->l, &s)
                       : tbe_error(TBE_ENOMEM, "race", -1, "out of memory");
  if (st.code == TBE_OK)
    st = gpu_session_backward_open(s, bwd->cfg, &gc, bwd->grad_output, bwd->momentum);
  for (int64_t k = 0; st.code == TBE_OK && k < launches; k++) {
    const race_schedule v = race_variant(k);
    gc.grid = v.grid;
    gc.order = (gpu_chunk_order)v.order;
    gc.noise = v.noise;
    gc.delay = v.delay;
    gc.short_block = v.short_block;
    gc.steal = v.steal;
    gc.hoist = v.hoist;
    gpu_bwd_stats stats;
    gpu_bwd_result g;
    memset(&g, 0, sizeof g);
    st = gpu_session_backward_config(s, &gc);
    if (st.code == TBE_OK)
      st = gpu_session_forward(s, r->mode, &fc, 0, NULL);
    if (st.code == TBE_OK)
      st = gpu_session_backward(s, &stats);
    if (st.code == TBE_OK)
      st = gpu_session_backward_results(s, &g);
    if (st.code == TBE_OK) {
      const void *got[3] = {g.weights, g.momentum, g.psw_grad};
      uint64_t h = ENG_FNV_SEED;
      int bad = 0;
      for (int i = 0; i < nout && st.code == TBE_OK; i++) {
        const void *p = outs[i].ref == r->w ? got[0] : outs[i].ref == r->m ? got[1] : got[2];
        h = eng_fnv1a(h, p, tbe_dtype_size(outs[i].dtype) * (size_t)outs[i].n);
        int d = race_compare(r, &outs[i], &res->checks[outs[i].check], k, p);
        if (d < 0)
          st = tbe_error(TBE_ENOMEM, "race", -1, "out of memory for the comparison");
        bad |= d > 0;
      }
      hash[k] = h;
      if (bad && f->mismatches++ == 0)
        f->first_bad = k;
      if (k == 0) {
        f->long_runs = stats.long_runs;
        f->chunks = stats.chunks;
      }
      if (st.code == TBE_OK)
        f->launches = k + 1;
    }
    gpu_bwd_result_free(&g);
  }
  for (int64_t i = 0; i < f->launches; i++) {
    int seen = 0;
    for (int64_t j = 0; j < i && !seen; j++)
      seen = hash[j] == hash[i];
    f->distinct += !seen;
  }
  free(hash);
  gpu_session_close(s);
  return st;
}

/* ---- the campaign ---- */

typedef struct {
  double seconds;
  uint64_t seed;
  long long launches, max_cases;
  const char *db_path, *cases_path;
  const char *campaign, *gpus, *gpu_ids; /* --campaign, --gpus, --gpu-ids, or NULL */
} race_options;

typedef struct {
  const race_options *o;
  db *d;
  int64_t run;
  int live;
  uint64_t *seen; /* hashes of the canonical texts raced so far (their repeat numbers) */
  int64_t nseen, cap_seen;
  long long cases, launches, failed;
} race_ctx;

/* The repeat number of canon in this run: how often it was raced before. -1 out of memory. */
static int race_repeat(race_ctx *x, const char *canon)
{
  const uint64_t h = eng_fnv1a(ENG_FNV_SEED, canon, strlen(canon));
  int n = 0;
  for (int64_t i = 0; i < x->nseen; i++)
    n += x->seen[i] == h;
  if (x->nseen == x->cap_seen) {
    int64_t cap = x->cap_seen ? 2 * x->cap_seen : 64;
    uint64_t *p = realloc(x->seen, sizeof *p * (size_t)cap);
    if (!p)
      return -1;
    x->seen = p;
    x->cap_seen = cap;
  }
  x->seen[x->nseen++] = h;
  return n;
}

/* canon with the schedule of launch k in place of its own bwd.grid, bwd.order, bwd.noise,
 * bwd.delay, bwd.short_block, bwd.steal and bwd.hoist, canonical; what `tbecheck replay` runs as that launch.
 * malloc'd, NULL on failure. */
static char *race_reproducer(const char *canon, int64_t k)
{
  const race_schedule v = race_variant(k);
  size_t n = strlen(canon) + 128;
  char *text = malloc(n), *copy = strdup(canon);
  char *out = NULL;
  if (text && copy) {
    text[0] = '\0';
    for (char *tok = strtok(copy, " "); tok; tok = strtok(NULL, " "))
      if (strncmp(tok, "bwd.grid=", 9) && strncmp(tok, "bwd.order=", 10) &&
          strncmp(tok, "bwd.noise=", 10) && strncmp(tok, "bwd.delay=", 10) &&
          strncmp(tok, "bwd.short_block=", 16) && strncmp(tok, "bwd.steal=", 10) &&
          strncmp(tok, "bwd.hoist=", 10))
        snprintf(text + strlen(text), n - strlen(text), "%s ", tok);
    if (v.grid) /* the policy has no key */
      snprintf(text + strlen(text), n - strlen(text), "bwd.grid=%d ", v.grid);
    if (v.short_block) /* nor the grid-stride loop */
      snprintf(text + strlen(text), n - strlen(text), "bwd.short_block=%d ", v.short_block);
    snprintf(text + strlen(text), n - strlen(text),
             "bwd.order=%s bwd.noise=%d bwd.delay=%d bwd.steal=%s bwd.hoist=%s",
             race_orders[v.order], v.noise, v.delay, race_off_on[v.steal], race_off_on[v.hoist]);
    tbe_case *c;
    if (case_parse(text, &c).code == TBE_OK) {
      int len = case_format(c, NULL, 0);
      out = malloc((size_t)len + 1);
      if (out)
        case_format(c, out, (size_t)len + 1);
      case_free(c);
    }
  }
  free(text);
  free(copy);
  return out;
}

/* Sets every check of res that is not yet failed to status st with the reason. */
static void race_mark(eng_case_result *res, eng_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void race_mark(eng_case_result *res, eng_status st, const char *fmt, ...)
{
  for (int i = 0; i < res->n_checks; i++) {
    eng_check *c = &res->checks[i];
    if (c->status == ENG_FAIL)
      continue;
    c->status = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->reason, sizeof c->reason, fmt, ap);
    va_end(ap);
  }
}

/* Races the case of canonical text canon whose reference r gave ref_status: the reference, the launches, the checks and races row
 * stored, a line printed. Returns -1 to go on, or an exit code. */
static int race_case(race_ctx *x, const char *canon, race_ref *r, tbe_status ref_status)
{
  eng_case_result res;
  memset(&res, 0, sizeof res);
  res.ref_ms = ref_status.code == TBE_OK ? r->ms : -1;
  res.gpu_ms = -1;
  race_output outs[3];
  int nout = 0;
  const tbe_batch *b = &r->b;
  if (ref_status.code == TBE_OK && r->bounds.code == TBE_OK) {
    outs[nout++] = (race_output){"weights", b->wdtype, b->table_offset[b->num_tables], r->w, 0, 0, -1};
    if (r->m)
      outs[nout++] = (race_output){"momentum", TBE_FP32, ref_bwd_rows(b), r->m, 0, 0, -1};
    if (r->psw)
      outs[nout++] = (race_output){"psw_grad", TBE_FP32, b->N, r->psw, 0, 0, -1};
  } else {
    outs[nout++] = (race_output){"weights", TBE_FP32, 0, NULL, 0, 0, -1};
  }
  tbe_status st = tbe_ok();
  for (int i = 0; i < nout && st.code == TBE_OK; i++) {
    eng_check *k;
    st = eng_add_check(&res, ENG_GPU, "ref", RACE_PATH, outs[i].name, CMP_BITWISE, &k);
    outs[i].check = i;
  }
  race_found f = {0, 0, 0, -1, 0, 0};
  if (st.code != TBE_OK) {
    eng_case_result_free(&res);
    fprintf(stderr, "tbecheck race: %s\n", st.message);
    return 3;
  }
  if (ref_status.code != TBE_OK)
    race_mark(&res, ENG_ERROR, "the reference failed, nothing to race: %s", ref_status.message);
  else if (r->bounds.code != TBE_OK)
    race_mark(&res, ENG_UNSUPPORTED, "the FATAL bounds check stops the call before the backward "
              "(%s): nothing to race", r->bounds.message);
  else {
    st = race_launches(r, x->o->launches, outs, nout, &res, &f);
    if (st.code == TBE_ENOMEM) {
      eng_case_result_free(&res);
      fprintf(stderr, "tbecheck race: %s\n", st.message);
      return 3;
    }
    for (int i = 0; i < nout; i++) {
      eng_check *k = &res.checks[outs[i].check];
      if (!outs[i].mismatches)
        continue;
      char v[RACE_VARIANT_TEXT];
      race_variant_text(outs[i].first, v, sizeof v);
      k->status = ENG_FAIL;
      snprintf(k->reason, sizeof k->reason, "%lld of %lld launches differ from the reference "
               "(first: launch %lld, %s: %lld of %lld elements, max %lld ulp); %lld distinct "
               "outcomes", (long long)outs[i].mismatches, (long long)f.launches,
               (long long)outs[i].first, v, (long long)k->cmp.violations,
               (long long)k->cmp.elements, (long long)k->cmp.max_ulp, (long long)f.distinct);
    }
    if (st.code != TBE_OK)
      race_mark(&res, ENG_ERROR, "launch %lld of the backward failed: %s", (long long)f.launches,
                st.message);
  }
  int repeat = race_repeat(x, canon);
  char *variants = f.launches ? race_variants(f.launches) : NULL;
  if (repeat < 0 || (f.launches && !variants)) {
    free(variants);
    eng_case_result_free(&res);
    fprintf(stderr, "tbecheck race: out of memory\n");
    return 3;
  }
  db_race race = {f.launches, f.distinct, f.mismatches, f.long_runs, f.chunks, variants};
  int64_t id = 0;
  st = f.launches ? db_store_race(x->d, x->run, canon, repeat, &res, &race, &id)
                  : db_store_case(x->d, x->run, canon, repeat, &res, &id);
  free(variants);
  const int failed = eng_case_failed(&res);
  if (st.code != TBE_OK) {
    eng_case_result_free(&res);
    fprintf(stderr, "%stbecheck race: cannot store case '%s': %s\n", x->live ? "\r\033[K" : "",
            canon, st.message);
    return 3;
  }
  x->cases++;
  x->launches += f.launches;
  x->failed += failed;
  if (x->live && !failed) {
    eng_case_result_free(&res);
    return -1;
  }
  printf("%s%-4s  case %-5lld %lld launches, %lld outcome%s, %lld mismatching, %lld long runs, "
         "%lld chunks: %s\n", x->live ? "\r\033[K" : "", failed ? "FAIL" : "pass", (long long)id,
         (long long)f.launches, (long long)f.distinct, f.distinct == 1 ? "" : "s",
         (long long)f.mismatches, (long long)f.long_runs, (long long)f.chunks, canon);
  for (int i = 0; failed && i < res.n_checks; i++)
    if (res.checks[i].status == ENG_FAIL || res.checks[i].status == ENG_ERROR)
      printf("      gpu:ref %s %s: %s: %s\n", RACE_PATH, res.checks[i].output,
             eng_status_name(res.checks[i].status), res.checks[i].reason);
  char *again = f.first_bad >= 0 ? race_reproducer(canon, f.first_bad) : NULL;
  if (again)
    printf("      reproduce: tbecheck race --cases FILE with the case, or one launch of that "
           "schedule: tbecheck replay --engines gpu '%s'\n", again);
  free(again);
  fflush(stdout);
  eng_case_result_free(&res);
  return -1;
}

/* Prints "tbecheck race: WHAT ARG" and the usage; returns the exit code of bad usage. */
static int race_usage_error(const char *what, const char *arg)
{
  fprintf(stderr, "tbecheck race: %s%s\n", what, arg);
  fputs(race_usage, stderr);
  return 2;
}

/* Reads an unsigned decimal of at most max into *v; 0 on success. */
static int race_uint(const char *s, unsigned long long max, unsigned long long *v)
{
  char *end;
  if (!*s || strspn(s, "0123456789") != strlen(s))
    return -1;
  errno = 0;
  *v = strtoull(s, &end, 10);
  return errno || *end || *v > max ? -1 : 0;
}

static int race_parse(int argc, char **argv, race_options *o)
{
  static const struct option opts[] = {
    {"seconds", required_argument, 0, 's'}, {"seed", required_argument, 0, 'x'},
    {"launches", required_argument, 0, 'n'}, {"db", required_argument, 0, 'd'},
    {"cases", required_argument, 0, 'c'},   {"max-cases", required_argument, 0, 'm'},
    {"campaign", required_argument, 0, OPT_CAMPAIGN}, {"gpus", required_argument, 0, OPT_GPUS},
    {"gpu-ids", required_argument, 0, OPT_GPU_IDS}, {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0}};
  *o = (race_options){.seconds = 60, .seed = 1, .launches = DEFAULT_LAUNCHES, .max_cases = -1,
                      .db_path = "tbecheck.db"};
  optind = 1;
  opterr = 0;
  int ch, which = 0;
  while ((ch = getopt_long(argc, argv, ":", opts, &which)) != -1) {
    unsigned long long v = 0;
    int bad = 0;
    char *end;
    switch (ch) {
    case 'h': fputs(race_usage, stdout); return 0;
    case 's':
      o->seconds = strtod(optarg, &end);
      bad = end == optarg || *end || !isfinite(o->seconds) || !(o->seconds > 0) ||
            o->seconds > 1e7 || strspn(optarg, "0123456789.") != strlen(optarg);
      break;
    case 'x':
      bad = race_uint(optarg, UINT64_MAX, &v);
      o->seed = v;
      break;
    case 'n':
      bad = race_uint(optarg, MAX_LAUNCHES, &v) || v < 1;
      o->launches = (long long)v;
      break;
    case 'm':
      bad = race_uint(optarg, INT64_MAX, &v) || v < 1;
      o->max_cases = (long long)v;
      break;
    case 'd':
      o->db_path = optarg;
      bad = !*optarg;
      break;
    case 'c':
      o->cases_path = optarg;
      bad = !*optarg;
      break;
    case OPT_CAMPAIGN:
    case OPT_GPUS:
    case OPT_GPU_IDS:
      *(ch == OPT_CAMPAIGN ? &o->campaign : ch == OPT_GPUS ? &o->gpus : &o->gpu_ids) = optarg;
      bad = bad_option_value(ch, optarg);
      break;
    default: return race_usage_error("unknown option or missing value: ", argv[optind - 1]);
    }
    if (bad) {
      char what[64];
      snprintf(what, sizeof what, "bad value for --%s: ", opts[which].name);
      return race_usage_error(what, optarg);
    }
  }
  if (optind != argc)
    return race_usage_error("unexpected argument: ", argv[optind]);
  return -1;
}

/* Parses a case of FILE (where: "FILE:LINE") that race can hold bit for bit. */
static int race_file_case(const char *text, const char *where, tbe_case **out)
{
  tbe_status st = case_parse(text, out);
  if (st.code != TBE_OK) {
    fprintf(stderr, "tbecheck race: %s: bad case (key '%s'): %s\n", where, st.field, st.message);
    return 2;
  }
  const ref_bwd_config *b = &case_knobs(*out)->bwd;
  const char *why = b->opt.kind == REF_OPT_NONE
                        ? "key 'opt': race needs a backward (opt=sgd or opt=rowwise_adagrad)"
                    : b->combine != REF_COMBINE_DETERMINISTIC
                        ? "key 'bwd.combine': race holds launches bit for bit, which only "
                          "bwd.combine=deterministic promises (atomic is held by its bound)"
                        : NULL;
  if (!why)
    return -1;
  fprintf(stderr, "tbecheck race: %s: %s\n", where, why);
  case_free(*out);
  *out = NULL;
  return 2;
}

/* The cases of FILE, parsed and checked, as canonical texts. Returns -1 or an exit code. */
static int race_read_cases(const char *path, char ***texts, int *n)
{
  case_list cl;
  tbe_status st = case_file_read(path, &cl);
  if (st.code != TBE_OK) {
    fprintf(stderr, "tbecheck race: %s\n", st.message);
    return st.code == TBE_EINVAL ? 2 : 3;
  }
  *texts = calloc((size_t)cl.count + 1, sizeof **texts);
  *n = 0;
  int rc = *texts ? -1 : 3;
  for (int i = 0; rc < 0 && i < cl.count; i++) {
    char where[600];
    snprintf(where, sizeof where, "%s:%d", path, cl.lines[i].line);
    tbe_case *c;
    rc = race_file_case(cl.lines[i].text, where, &c);
    if (rc >= 0)
      break;
    int len = case_format(c, NULL, 0);
    char *canon = malloc((size_t)len + 1);
    if (canon)
      case_format(c, canon, (size_t)len + 1);
    case_free(c);
    if (!canon)
      rc = 3;
    else
      (*texts)[(*n)++] = canon;
  }
  case_list_free(&cl);
  if (rc == 3)
    fprintf(stderr, "tbecheck race: out of memory\n");
  return rc;
}

/* Drawn case number i (its hot rows left out when they do not generate), parsed and run through
 * the reference; 0, or -1 when neither draw makes a case (then nothing is left allocated). */
static int race_next(const race_options *o, uint64_t i, tbe_case **c, char **canon, race_ref *r,
                     tbe_status *ref_status)
{
  for (int hot = 1; hot >= 0; hot--) {
    char text[2048];
    race_draw(o->seed, i, hot, text, sizeof text);
    if (case_parse(text, c).code != TBE_OK)
      continue;
    *ref_status = race_ref_run(*c, r);
    if (ref_status->code == TBE_EINVAL && hot) {
      case_free(*c);
      continue;
    }
    int len = case_format(*c, NULL, 0);
    *canon = malloc((size_t)len + 1);
    if (*canon) {
      case_format(*c, *canon, (size_t)len + 1);
      return 0;
    }
    race_ref_free(r);
    case_free(*c);
    return -1;
  }
  return -1;
}

static int race_open(race_ctx *x, int argc, char **argv, const char *gpu, const char *tool,
                     const char *cuda)
{
  tbe_status s = db_open(x->o->db_path, DB_WRITE, &x->d);
  if (s.code != TBE_OK) {
    fprintf(stderr, "tbecheck race: %s\n", s.message);
    return s.code == TBE_EINVAL ? 2 : 3;
  }
  runinfo ri;
  runinfo_collect(&ri);
  char args[2048] = "tbecheck";
  for (int i = 0; i < argc; i++)
    snprintf(args + strlen(args), sizeof args - strlen(args), " %s", argv[i]);
  db_run_info info = {
    .git_commit = ri.git_commit[0] ? ri.git_commit : NULL, .dirty = ri.dirty, .host = ri.host,
    .cpu = ri.cpu[0] ? ri.cpu : "unknown", .gpu = gpu, .driver = ri.driver[0] ? ri.driver : NULL,
    .cuda = cuda, .tool_version = tool, .argv = args, .engines = "ref,gpu", .repeats = 1,
    .campaign = x->o->campaign, .gpu_uuid = gpus_worker_uuid()};
  s = db_run_begin(x->d, &info, &x->run);
  if (s.code != TBE_OK) {
    fprintf(stderr, "tbecheck race: %s\n", s.message);
    return 3;
  }
  return -1;
}

/* race --gpus / --gpu-ids: the race of o run by one worker race per GPU (gpus.h). */
static int race_on_gpus(const race_options *o)
{
  if (o->cases_path) {
    fprintf(stderr, "tbecheck race: --gpus and --gpu-ids give each worker its own seed stream: "
            "race --cases FILE without them\n");
    return 2;
  }
  char seconds[32], launches[24], cases[24];
  snprintf(seconds, sizeof seconds, "%.9f", o->seconds); /* race_parse reads digits and a point */
  snprintf(launches, sizeof launches, "%lld", o->launches);
  snprintf(cases, sizeof cases, "%lld", o->max_cases);
  const char *args[] = {"--seconds", seconds, "--launches", launches,
                        o->max_cases >= 0 ? "--max-cases" : NULL, cases, NULL}; /* NULL ends it */
  gpus_job j = {.command = "race", .gpus = o->gpus, .gpu_ids = o->gpu_ids,
                .db_path = o->db_path, .campaign = o->campaign, .args = args, .seed = o->seed,
                .seconds = o->seconds};
  return gpus_campaign(&j);
}

int race_command(int argc, char **argv, const char *tool_version, const char *cuda)
{
  race_options o;
  int rc = race_parse(argc, argv, &o);
  if (rc >= 0)
    return rc;
  if (o.gpus || o.gpu_ids)
    return race_on_gpus(&o);
  char **texts = NULL;
  int ntexts = 0;
  if (o.cases_path && (rc = race_read_cases(o.cases_path, &texts, &ntexts)) >= 0) {
    for (int i = 0; i < ntexts; i++)
      free(texts[i]);
    free(texts);
    return rc;
  }
  char gpu[256];
  tbe_status s = gpu_probe(gpu, sizeof gpu);
  race_ctx x = {.o = &o, .live = isatty(STDOUT_FILENO)};
  if (s.code != TBE_OK) {
    printf("engine gpu: skip (%s)\n", s.message);
    printf("warning: engine gpu did not run (%s): nothing was raced, and a skip is not a pass\n",
           s.message);
    rc = s.code == TBE_ENODEV ? 0 : 3;
  } else {
    rc = race_open(&x, argc, argv, gpu, tool_version, cuda);
  }
  double t0 = eng_now_ms(), shown = t0, end = t0 + o.seconds * 1000;
  for (uint64_t i = 0; rc < 0 && eng_now_ms() < end && (o.max_cases < 0 || x.cases < o.max_cases) &&
                       (!o.cases_path || i < (uint64_t)ntexts);
       i++) {
    tbe_case *c = NULL;
    char *canon = NULL;
    race_ref r;
    tbe_status ref_status;
    if (o.cases_path) {
      case_parse(texts[i], &c);
      canon = strdup(texts[i]);
      ref_status = race_ref_run(c, &r);
    } else if (race_next(&o, i, &c, &canon, &r, &ref_status)) {
      continue;
    }
    rc = canon ? race_case(&x, canon, &r, ref_status) : 3;
    race_ref_free(&r);
    case_free(c);
    free(canon);
    double now = eng_now_ms();
    if (rc < 0 && (x.live || now - shown > 5000)) {
      shown = now;
      printf("%srace: %lld cases, %lld launches, %.1f cases/s, %lld failed, %.0f s left%s",
             x.live ? "\r\033[K" : "", x.cases, x.launches, x.cases / ((now - t0) / 1000),
             x.failed, now < end ? (end - now) / 1000 : 0.0, x.live ? "" : "\n");
      fflush(stdout);
    }
  }
  if (rc < 0 && (s = db_run_end(x.d, x.run)).code != TBE_OK) {
    fprintf(stderr, "tbecheck race: %s\n", s.message);
    rc = 3;
  }
  if (rc < 0) {
    printf("%srun %lld: %lld cases raced, %lld launches in %.0f s, %lld failed; results in %s\n",
           x.live ? "\r\033[K" : "", (long long)x.run, x.cases, x.launches,
           (eng_now_ms() - t0) / 1000, x.failed, o.db_path);
    if (x.cases == 0)
      printf("warning: no case was raced (%s)\n",
             o.cases_path ? "the case file holds none" : "no drawn case could be generated");
    rc = x.failed ? 1 : 0;
  }
  fflush(stdout);
  for (int i = 0; i < ntexts; i++)
    free(texts[i]);
  free(texts);
  free(x.seen);
  db_close(x.d);
  return rc;
}
