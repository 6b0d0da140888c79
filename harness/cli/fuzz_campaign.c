/* fuzz_campaign.c: `tbecheck fuzz --seconds S --seed X`: random cases over the whole edge space
 * through the engines, every one stored with its canonical text, each failure shrunk by delta
 * debugging (shrink.h) to a minimal case that fails the same comparison, stored and printed with
 * its reproducer. Not the libFuzzer targets (fuzz/), which feed bytes to parsers.
 *
 * A failure's comparison is its first failing check: (engine, baseline, path, output, status).
 * A shrink candidate still fails when one of its checks fails that comparison the same way.
 */
#include "fuzz_campaign.h"

#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "case.h"
#include "gen.h"
#include "case_random.h"
#include "db.h"
#include "engine.h"
#include "footprint.h"
#include "gpus.h"
#include "held.h"
#include "prng.h"
#include "runinfo.h"
#include "shrink.h"

#define FUZZ_STREAM 0xF022
#define FUZZ_SCHEDULE_STREAM 0xF023
#define FUZZ_SMALL_TC_STREAM 0xF024
#define MAX_TOKENS 64
#define SHRINK_TRIES 300
#define GRACE_MS 1000.0 /* a case starts only if its estimate fits the time left plus this */

static const char fuzz_usage[] =
    "usage: tbecheck fuzz [--seconds S] [--seed X] [--engines LIST] [--db PATH]\n"
    "                     [--max-cases N] [--inject-fault ENGINE:OUTPUT[@I]] [--campaign ID]\n"
    "                     [--gpus all|N | --gpu-ids I,J,...] [--engine-timeout S]\n"
    "Draws cases over the whole edge space (invalid, negative and pruned indices, every offset\n"
    "corruption in every bounds mode, hot rows up to SL 10^6, VBE with empty ranks, D 1..2048,\n"
    "E = 1, every dtype and knob) for S seconds (default 60) from seed X (default 1), runs each\n"
    "through the engines and stores it in the database as `run` does. Each failure is shrunk to\n"
    "a minimal case failing the same comparison, stored too, and printed with its reproducer;\n"
    "`tbecheck list --failed` shows both. A progress line shows cases/s, failures, time left.\n"
    "The budget holds to about 1 s: a case starts only if its estimated time fits what is left\n"
    "plus 1 s; a draw too big for that is reported (BIG) and redrawn smaller or skipped, and a\n"
    "shrink still going at the end stops with the smallest failing case found (cut short).\n"
    "  --engines LIST         from ref,gpu,oracle (default all; ref always)\n"
    "  --max-cases N          stop after N cases even if time is left\n"
    "  --engine-timeout S     a worker engine's longest reply to one case (default 1800; 0: none)\n"
    "  --inject-fault E:O[@I] test the tester, as in `tbecheck run`\n"    "  --campaign ID          the run's campaign id (runs.campaign)\n"
    "  --gpus all|N           one worker fuzz per GPU (all, or the first N nvidia-smi lists),\n"
    "  --gpu-ids I,J,...      or those devices, pinned with CUDA_VISIBLE_DEVICES, worker k of N\n"
    "                         on seed X*N+k, each for S seconds (and --max-cases) on its share\n"
    "                         of the cores; their databases merged into --db at the end, one\n"
    "                         campaign; a worker that dies loses its current case (exit 3, its\n"
    "                         run incomplete). Not with --inject-fault\n"
    "Exit 0 no failure, 1 failures, 2 bad usage, 3 I/O or internal error.\n";

/* ---- the edge space ---- */

typedef struct {
  uint64_t key, n;
  char tok[MAX_TOKENS][160];
  int ntok;
} draw;

static uint64_t rnd(draw *d, uint64_t n) { return prng_below(prng_at(d->key, d->n++), n); }

/* Sets key=value (replacing the key's token if there is one). */
static void set(draw *d, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set(draw *d, const char *key, const char *fmt, ...)
{
  size_t k = strlen(key);
  int i = 0;
  while (i < d->ntok && !(strncmp(d->tok[i], key, k) == 0 && d->tok[i][k] == '='))
    i++;
  if (i == MAX_TOKENS)
    return;
  d->ntok += i == d->ntok;
  int w = snprintf(d->tok[i], sizeof d->tok[i], "%s=", key);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(d->tok[i] + w, sizeof d->tok[i] - (size_t)w, fmt, ap);
  va_end(ap);
}

#define PICK(d, a) (a[rnd(d, sizeof a / sizeof a[0])])

static void edge(draw *d)
{
  static const char *const kinds[] = {"past", "negative", "pruned", "mix"};
  static const char *const modes[] = {"fatal", "warning", "ignore", "none"};
  static const char *const corrupt[] = {"negative", "decreasing:2", "decreasing:5", "past_end",
                                        "wrong_last"};
  static const char *const dtypes[] = {"fp32", "fp16", "bf16"};
  static const char *const Ls[] = {"0", "1", "0..3", "100", "normal:5,3", "0..40"};
  static const int Ds[] = {1, 2, 3, 7, 31, 32, 33, 127, 128, 129, 1024, 2048};
  static const int SLs[] = {1, 2, 31, 32, 255, 256, 257, 511, 1000, 4096};
  static const double fracs[] = {0.01, 0.1, 0.5, 1};
  switch (rnd(d, 14)) {
  case 0:
    set(d, "invalid", "%g", PICK(d, fracs));
    set(d, "invalid_kind", "%s", PICK(d, kinds));
    break;
  case 1: {
    char v[120] = "";
    for (size_t i = 0; i < sizeof corrupt / sizeof corrupt[0]; i++)
      if (rnd(d, 3) == 0)
        snprintf(v + strlen(v), sizeof v - strlen(v), "%s%s", *v ? "," : "", corrupt[i]);
    set(d, "corrupt", "%s", *v ? v : PICK(d, corrupt));
    set(d, "B", "%d", 8 + (int)rnd(d, 9)); /* corruptions need 8+ fixed bags */
    set(d, "vbe", "0");
    break;
  }
  case 2: set(d, "bounds", "%s", PICK(d, modes)); break;
  case 3: { /* a hot row: SL up to 10^6 now and then, with enough lookups around it */
    int sl = rnd(d, 50) ? PICK(d, SLs) : 1000000;
    set(d, "T", "1");
    set(d, "B", "%d", 2 + sl / 50);
    set(d, "L", "%d", 100);
    set(d, "E", "%d", 2 + (int)rnd(d, 50));
    set(d, "D", "%d", 1 + (int)rnd(d, 8));
    set(d, "hot", "0:%d:%d", 1, sl);
    break;
  }
  case 4: /* VBE, some ranks empty */
    set(d, "vbe", "1");
    set(d, "R", "%d", 1 + (int)rnd(d, 4));
    set(d, "B", "0..%d", (int)rnd(d, 4));
    break;
  case 5: set(d, "weighted", "%d", (int)rnd(d, 2)); break;
  case 6: set(d, "idx", "%s", rnd(d, 2) ? "int32" : "int64"); break;
  case 7: set(d, "D", "%d", PICK(d, Ds)); break;
  case 8: set(d, "E", "1"); break;
  case 9:
    set(d, "wdtype", "%s", PICK(d, dtypes));
    set(d, "out", "%s", PICK(d, dtypes));
    break;
  case 10: set(d, "L", "%s", PICK(d, Ls)); break;
  case 11: /* the forward's knobs */
    set(d, "fwd.bags", "%d", 1 << rnd(d, 3));
    set(d, "fwd.width", "%d", rnd(d, 2) ? 4 : 8);
    set(d, "fwd.small", "%s", rnd(d, 3) == 0 ? "auto" : rnd(d, 2) ? "on" : "off");
    set(d, "fwd.gather", "%s", rnd(d, 3) == 0 ? "auto" : rnd(d, 2) ? "direct" : "window");
    set(d, "fused_bounds", "%d", (int)rnd(d, 2));
    break;
  case 12: { /* the backward: optimizer and its numbers */
    int ada = (int)rnd(d, 2);
    set(d, "opt", "%s", ada ? "rowwise_adagrad" : "sgd");
    set(d, "lr", "%g", rnd(d, 2) ? 0.01 : 0.5);
    set(d, "clip", "%g", rnd(d, 2) ? 0.5 : 100.0);
    if (ada) {
      set(d, "eps", "%g", rnd(d, 2) ? 1e-8 : 0.1);
      if (rnd(d, 2)) {
        set(d, "wd", "%s", rnd(d, 2) ? "l2" : "decouple");
        set(d, "lambda", "%g", 0.01);
      }
    }
    break;
  }
  default: /* the backward's chunking and rounding */
    set(d, "opt", "%s", "sgd");
    set(d, "bwd.threshold", "%d", (int)(1 + rnd(d, 300)));
    set(d, "bwd.chunk", "%d", (int)(1 + rnd(d, 300)));
    set(d, "bwd.combine", "%s", rnd(d, 2) ? "deterministic" : "atomic");
    set(d, "bwd.long", "%s", rnd(d, 2) ? "accum" : "fused"); /* the GPU's variants */
    set(d, "bwd.width", "%d", rnd(d, 2) ? 2 : 4);
    if (rnd(d, 4) == 0)
      set(d, "bwd.bucket", "0");
    if (rnd(d, 4) == 0)
      set(d, "bwd.direct", "0");
    if (rnd(d, 2)) {
      set(d, "wdtype", "%s", rnd(d, 2) ? "fp16" : "bf16");
      set(d, "sr", "1");
      set(d, "step", "%d", (int)rnd(d, 1000));
    }
    break;
  }
}

/* A backward case with the GPU's long-run variants (bwd.long) may also get the GPU's schedule:
 * a chunk-kernel grid, a chunk order, a delay before each partial and work stealing (bwd.grid,
 * bwd.order, bwd.delay, bwd.steal), the metadata hoisted into the forward (bwd.hoist), blocks
 * of adjacent short runs where it does not steal (bwd.short_block; no bit may depend on any of
 * them: ref/run_config.h) and, in atomic mode, an atomicAdd per element in place of the default
 * bulk reduce (bwd.bulk=off; both held by the atomic bound), drawn from a stream of their own,
 * so that the rest of every draw is what it was before they were drawn (steal, then bulk, then
 * hoist, then the short block, last, so the others are what they were before each was
 * added). */
static void schedule(draw *d, uint64_t seed, uint64_t index)
{
  static const char *const orders[] = {"asc", "desc", "shuffle"};
  static const int delays[] = {500, 2000, 20000};
  int i = 0;
  while (i < d->ntok && strncmp(d->tok[i], "bwd.long=", 9) != 0)
    i++;
  draw s = {.key = prng_key(seed ^ (index * PRNG_GAMMA), FUZZ_SCHEDULE_STREAM)};
  if (i == d->ntok || rnd(&s, 2))
    return;
  set(d, "bwd.grid", "%d", (int)(1 + rnd(&s, 64)));
  set(d, "bwd.order", "%s", PICK(&s, orders));
  if (rnd(&s, 2))
    set(d, "bwd.delay", "%d", PICK(&s, delays));
  if (rnd(&s, 2))
    set(d, "bwd.steal", "on");
  for (int j = 0; j < d->ntok; j++)
    if (strcmp(d->tok[j], "bwd.combine=atomic") == 0 && rnd(&s, 2))
      set(d, "bwd.bulk", "off");
  if (rnd(&s, 2))
    set(d, "bwd.hoist", "on");
  static const int blocks[] = {1, 2, 4, 8, 16, 32};
  int steal = 0;
  for (int j = 0; j < d->ntok; j++)
    steal |= strcmp(d->tok[j], "bwd.steal=on") == 0;
  if (!steal && rnd(&s, 2))
    set(d, "bwd.short_block", "%d", PICK(&s, blocks));
}

/* Whether the tokens of d parse as a case, with extra appended (NULL: none). */
static int draw_parses(const draw *d, const char *extra)
{
  char text[MAX_TOKENS * 161 + 64];
  size_t len = 0;
  for (int i = 0; i < d->ntok; i++)
    len += (size_t)snprintf(text + len, sizeof text - len, "%s ", d->tok[i]);
  snprintf(text + len, sizeof text - len, "%s", extra ? extra : "");
  tbe_case *c = NULL;
  const int ok = case_parse(text, &c).code == TBE_OK;
  case_free(c);
  return ok;
}

/* bwd.small_tc=on, half the time, where the case language takes it (a row-wise Adagrad case
 * with a table the small forward path can take: check_small_tc's rules), drawn last from a
 * stream of its own so that every other token of every draw is what it was before. Unlike the
 * schedule, it changes the tables' bits: they are then held to its model. */
static void small_tc(draw *d, uint64_t seed, uint64_t index)
{
  draw s = {.key = prng_key(seed ^ (index * PRNG_GAMMA), FUZZ_SMALL_TC_STREAM)};
  if (rnd(&s, 2) && draw_parses(d, NULL) && draw_parses(d, "bwd.small_tc=on"))
    set(d, "bwd.small_tc", "on");
}

int fuzz_draw(uint64_t seed, uint64_t index, int edges, char *buf, size_t n)
{
  draw d = {.key = prng_key(seed ^ (index * PRNG_GAMMA), FUZZ_STREAM)};
  char base[4096];
  case_random(seed, index, base, sizeof base);
  for (char *p = strtok(base, " "); p && d.ntok < MAX_TOKENS; p = strtok(NULL, " "))
    snprintf(d.tok[d.ntok++], sizeof d.tok[0], "%s", p);
  int k = (int)rnd(&d, 5);
  for (int i = 0; i < k && i < edges; i++)
    edge(&d);
  schedule(&d, seed, index);
  small_tc(&d, seed, index);
  size_t len = 0;
  for (int i = 0; i < d.ntok; i++)
    len += (size_t)snprintf(buf + (len < n ? len : n), len < n ? n - len : 0, "%s%s",
                            i ? " " : "", d.tok[i]);
  return (int)len;
}


/* The campaign's clock: its end, and how much slower than estimated cases have run. */
typedef struct {
  double end_ms;   /* the budget's end */
  double slow;     /* >= 1: the largest ratio of a case's time to its estimate (estimates of a
                    * second or more) seen so far, applied to every later estimate */
  unsigned engines; /* the engines that run here (the estimate's) */
} budget;

/* The estimate of c on this machine, so far. */
static double budget_cost(const budget *b, const tbe_case *c)
{
  return b->slow * footprint_cost_ms(c, (b->engines >> ENG_GPU) & 1u, (b->engines >> ENG_ORACLE) & 1u);
}

/* 1 if c can start now and be done by the end (plus the grace). */
static int budget_fits(const budget *b, const tbe_case *c, double *est)
{
  *est = budget_cost(b, c);
  return eng_now_ms() + *est <= b->end_ms + GRACE_MS;
}

/* Learns from a case run in ms. */
static void budget_learn(budget *b, const tbe_case *c, double ms)
{
  double est = footprint_cost_ms(c, (b->engines >> ENG_GPU) & 1u, (b->engines >> ENG_ORACLE) & 1u);
  if (est >= 1000)
    b->slow = fmax(b->slow, ms / est);
}

/* ---- the campaign ---- */

typedef struct {
  eng_ctx *x;
  budget *bu;
  const eng_check *sig;  /* the failure's comparison */
  eng_case_result best;  /* the result of the last candidate that still failed ... */
  int have_best;         /* ... if there is one */
} same_failure;

static int fails_like(const eng_case_result *r, const eng_check *sig)
{
  for (int i = 0; i < r->n_checks; i++) {
    const eng_check *c = &r->checks[i];
    if (c->engine == sig->engine && c->status == sig->status && !strcmp(c->path, sig->path) &&
        !strcmp(c->output, sig->output) && !strcmp(c->baseline, sig->baseline))
      return 1;
  }
  return 0;
}

/* The shrinker's predicate: runs a candidate that fits the budget, keeping its result when it
 * still fails (the shrunk case is stored from it, not run again). */
static int still_fails(const char *canon, void *ctx)
{
  same_failure *f = ctx;
  tbe_case *c;
  if (case_parse(canon, &c).code != TBE_OK)
    return 0;
  double est;
  if (!budget_fits(f->bu, c, &est)) {
    case_free(c);
    return SHRINK_NO_TIME;
  }
  eng_case_result r;
  double t0 = eng_now_ms();
  tbe_status s = eng_run_case(f->x, c, canon, &r);
  budget_learn(f->bu, c, eng_now_ms() - t0);
  case_free(c);
  int fails = s.code == TBE_OK ? fails_like(&r, f->sig) : SHRINK_ERROR;
  if (fails != 1) {
    eng_case_result_free(&r);
    return fails;
  }
  if (f->have_best)
    eng_case_result_free(&f->best);
  f->best = r;
  f->have_best = 1;
  return 1;
}

/* A drawn case, or why none runs at its index. */
typedef struct {
  tbe_case *c;    /* NULL: none */
  char *canon;    /* its canonical text (malloc'd) */
  char *big;      /* NULL, or the canonical text of the draw that was too big for the time left
                   * (malloc'd): c is then that draw with fewer edges, or NULL (skipped) */
  double big_ms;  /* that draw's estimate */
} drawn;

static char *format_case(const tbe_case *c)
{
  int n = case_format(c, NULL, 0);
  char *s = malloc((size_t)n + 1);
  if (s)
    case_format(c, s, (size_t)n + 1);
  return s;
}

/* Draws case `index`: the first text, lowering its edges, that parses, fits the budget and
 * generates. */
static void next_case(uint64_t seed, uint64_t index, const budget *bu, drawn *d)
{
  *d = (drawn){0};
  char text[4096];
  for (int edges = 4; edges >= 0; edges--) {
    fuzz_draw(seed, index, edges, text, sizeof text);
    tbe_case *c;
    if (case_parse(text, &c).code != TBE_OK)
      continue;
    double est;
    if (!budget_fits(bu, c, &est)) {
      if (!d->big) {
        d->big = format_case(c);
        d->big_ms = est;
      }
      case_free(c);
      continue;
    }
    tbe_batch b;
    if (case_generate(c, &b).code != TBE_OK) {
      case_free(c);
      continue;
    }
    tbe_batch_free(&b);
    d->c = c;
    d->canon = format_case(c);
    return;
  }
}

typedef struct {
  double seconds;
  uint64_t seed;
  long long max_cases;
  const char *db_path;
  eng_options eng;
  const char *campaign, *gpus, *gpu_ids; /* --campaign, --gpus, --gpu-ids, or NULL */
} fuzz_options;

/* Prints "tbecheck fuzz: WHAT ARG" and the usage; returns the exit code of bad usage. */
static int usage(const char *what, const char *arg)
{
  fprintf(stderr, "tbecheck fuzz: %s%s\n", what, arg);
  fputs(fuzz_usage, stderr);
  return 2;
}

static int parse_args(int argc, char **argv, fuzz_options *o)
{
  static const struct option opts[] = {
    {"seconds", required_argument, 0, 's'}, {"seed", required_argument, 0, 'x'},
    {"engines", required_argument, 0, 'e'}, {"db", required_argument, 0, 'd'},
    {"max-cases", required_argument, 0, 'n'}, {"inject-fault", required_argument, 0, 'f'},
    {"campaign", required_argument, 0, OPT_CAMPAIGN}, {"gpus", required_argument, 0, OPT_GPUS},
    {"gpu-ids", required_argument, 0, OPT_GPU_IDS}, {"engine-timeout", required_argument, 0, 't'},
    {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0}};
  *o = (fuzz_options){.seconds = 60, .seed = 1, .max_cases = -1, .db_path = "tbecheck.db",
                      .eng = {.max_violations = DEFAULT_MAX_VIOLATIONS,
                              .worker_timeout_s = DEFAULT_ENGINE_TIMEOUT}};
  const char *engines = ENG_DEFAULT_LIST;
  optind = 1;
  opterr = 0;
  int ch, which = -1;
  while ((ch = getopt_long(argc, argv, ":", opts, &which)) != -1) {
    char *end = NULL;
    switch (ch) {
    case 'h': fputs(fuzz_usage, stdout); return 0;
    case 's': o->seconds = strtod(optarg, &end); break;
    case 'x': o->seed = strtoull(optarg, &end, 10); break;
    case 'n': o->max_cases = strtoll(optarg, &end, 10); break;
    case 't': {
      long long v = strtoll(optarg, &end, 10);
      o->eng.worker_timeout_s = (int)v;
      if (v < 0 || v > 604800)
        end = optarg;
      break;
    }
    case 'e': engines = optarg; break;
    case 'd': o->db_path = optarg; break;
    case OPT_CAMPAIGN:
    case OPT_GPUS:
    case OPT_GPU_IDS:
      *(ch == OPT_CAMPAIGN ? &o->campaign : ch == OPT_GPUS ? &o->gpus : &o->gpu_ids) = optarg;
      end = bad_option_value(ch, optarg) ? optarg : optarg + strlen(optarg);
      break;
    case 'f': {
      tbe_status s = eng_parse_fault(optarg, &o->eng);
      if (s.code != TBE_OK)
        return usage("", s.message);
      break;
    }
    default: return usage("unknown option or missing value: ", argv[optind - 1]);
    }
    if (end && (*end || end == optarg || *optarg == '-' || (ch == 's' && !(o->seconds > 0)))) {
      fprintf(stderr, "tbecheck fuzz: bad value '%s' for --%s%s\n", optarg, opts[which].name,
              ch == 's' ? " (seconds > 0)" : "");
      fputs(fuzz_usage, stderr);
      return 2;
    }
  }
  if (optind != argc)
    return usage("unexpected argument: ", argv[optind]);
  if (!*o->db_path)
    return usage("--db needs a path", "");
  tbe_status s = eng_parse_list(engines, &o->eng.engines);
  return s.code == TBE_OK ? -1 : usage("", s.message);
}

/* The run row of a campaign, kept until it is stored (held: once the fault lands). */
typedef struct {
  runinfo ri;
  char engines[256], args[1024], versions[1024];
  db_run_info info;
} run_row;

/* What this run stored: a case drawn or shrunk twice is stored as its next repeat. Hold (a
 * campaign with --inject-fault): nothing is written until the fault first lands, since a fault
 * that lands nowhere refuses the campaign (exit 2) and must leave the database as it was; the
 * run row and the results held so far are stored then, and the rest case by case. */
typedef struct {
  db *d;
  int64_t run;
  uint64_t *hash;
  int *count;
  int n, cap;
  const run_row *row;
  int hold, created;
  held_list held;
} stored;

/* Stores one case's result now. Returns 0, or 3 on a storage error. */
static int store_now(stored *t, const char *canon, const eng_case_result *r, int64_t *id)
{
  uint64_t h = eng_fnv1a(ENG_FNV_SEED, canon, strlen(canon));
  int i = 0;
  while (i < t->n && t->hash[i] != h)
    i++;
  if (i == t->cap) {
    t->cap = t->cap ? 2 * t->cap : 64;
    uint64_t *nh = realloc(t->hash, sizeof *nh * (size_t)t->cap);
    t->hash = nh ? nh : t->hash;
    int *nc = realloc(t->count, sizeof *nc * (size_t)t->cap);
    t->count = nc ? nc : t->count;
    if (!nh || !nc) {
      fprintf(stderr, "\ntbecheck fuzz: out of memory\n");
      return 3;
    }
  }
  if (i == t->n) {
    t->hash[t->n] = h;
    t->count[t->n++] = 0;
  }
  tbe_status s = db_store_case(t->d, t->run, canon, t->count[i]++, r, id);
  if (s.code != TBE_OK) {
    fprintf(stderr, "\ntbecheck fuzz: cannot store case '%s': %s\n", canon, s.message);
    return 3;
  }
  return 0;
}

/* Stores the run row, then what was held. Returns 0, or 3. */
static int store_release(stored *t)
{
  tbe_status s = db_run_begin(t->d, &t->row->info, &t->run);
  if (s.code != TBE_OK) {
    fprintf(stderr, "tbecheck fuzz: %s\n", s.message);
    return 3;
  }
  t->hold = 0;
  int64_t id;
  int rc = 0;
  for (int64_t i = 0; rc == 0 && i < t->held.n; i++)
    rc = store_now(t, t->held.v[i].canon, &t->held.v[i].r, &id);
  return rc;
}

/* Stores one case's result, or while holding takes r over (left empty; *id = 0). Returns 0,
 * or 3 on a storage error. */
static int store(stored *t, const char *canon, eng_case_result *r, int64_t *id)
{
  *id = 0;
  int rc = t->hold && r->fault_landed ? store_release(t) : 0;
  if (rc || !t->hold)
    return rc ? rc : store_now(t, canon, r, id);
  if (held_push(&t->held, canon, 0, r)) {
    fprintf(stderr, "\ntbecheck fuzz: out of memory\n");
    return 3;
  }
  return 0;
}

/* Frees what t holds; a campaign refused while holding removes the database file it made. */
static void store_free(stored *t, const char *db_path, int refused)
{
  held_free(&t->held);
  free(t->hash);
  free(t->count);
  db_close(t->d);
  if (refused && t->created)
    db_remove_files(db_path);
}

/* A stored case's id as text, or "(held)" for 0: not stored until the fault lands. */
static const char *id_text(int64_t id, char buf[24])
{
  snprintf(buf, 24, id ? "%lld" : "(held)", (long long)id);
  return buf;
}

static const eng_check *first_failure(const eng_case_result *r)
{
  for (int i = 0; i < r->n_checks; i++)
    if (r->checks[i].status == ENG_FAIL || r->checks[i].status == ENG_ERROR)
      return &r->checks[i];
  return NULL;
}

/* Shrinks a failing case within the budget, stores the smallest failing one found and prints
 * both, with its reproducer (again: the options replay needs to fail the same way, the
 * campaign's " --engines LIST" where it is not replay's default and " --inject-fault E:O@I").
 * Returns 0 or an exit code. */
static int shrink_failure(eng_ctx *x, budget *bu, stored *t, const char *canon,
                          const eng_case_result *r, int64_t id, const char *again)
{
  const eng_check *sig = first_failure(r);
  char idtext[24];
  printf("FAIL  case %-5s %s\n      %s:%s %s %s: %s: %s\n", id_text(id, idtext), canon,
         eng_name(sig->engine), sig->baseline, sig->path, sig->output,
         eng_status_name(sig->status), sig->reason);
  fflush(stdout);
  same_failure f = {.x = x, .bu = bu, .sig = sig};
  char *small;
  shrink_stats st;
  tbe_status s = shrink_case(canon, still_fails, &f, SHRINK_TRIES, bu->end_ms + GRACE_MS, &small,
                             &st);
  if (s.code != TBE_OK) {
    fprintf(stderr, "tbecheck fuzz: %s\n", s.message);
    return 3;
  }
  int rc = 0;
  if (f.have_best) {
    int64_t sid = 0;
    rc = store(t, small, &f.best, &sid);
    eng_case_result_free(&f.best);
    printf("      shrunk in %d tries (%d kept) to case %s: %s\n", st.tries, st.accepted,
           id_text(sid, idtext), small);
    if (st.stopped != SHRINK_DONE)
      printf("      shrink cut short (%s): the smallest failing case so far\n",
             shrink_stop_reason(st.stopped));
  } else if (st.stopped != SHRINK_DONE) {
    printf("      not shrunk: cut short (%s) after %d tries\n", shrink_stop_reason(st.stopped),
           st.tries);
  } else {
    printf("      already minimal (%d tries)\n", st.tries);
  }
  printf("      reproduce: tbecheck replay '%s'%s\n", small, again);
  fflush(stdout);
  free(small);
  return rc;
}

/* Opens the engines and the database and fills the run row, which is stored at once unless
 * the campaign holds (t->hold). -1 or an exit code. */
static int open_run(const fuzz_options *o, int argc, char **argv, stored *t, run_row *row,
                    eng_ctx **x)
{
  tbe_status s = eng_open(&o->eng, x);
  const eng_options *f = &o->eng;
  if (s.code == TBE_OK && f->fault_output[0] && !(f->engines & (1u << f->fault_engine))) {
    fprintf(stderr, "tbecheck fuzz: --inject-fault %s:%s lands nowhere: engine %s is not among "
            "--engines\n", eng_name(f->fault_engine), f->fault_output, eng_name(f->fault_engine));
    return 2;
  }
  if (s.code == TBE_OK && f->fault_output[0] && eng_unavailable(*x, f->fault_engine)) {
    fprintf(stderr, "tbecheck fuzz: --inject-fault %s:%s lands nowhere: engine %s does not run "
            "here (%s)\n", eng_name(f->fault_engine), f->fault_output, eng_name(f->fault_engine),
            eng_unavailable(*x, f->fault_engine));
    return 2;
  }
  t->created = access(o->db_path, F_OK) != 0;
  if (s.code == TBE_OK)
    s = db_open(o->db_path, DB_WRITE, &t->d);
  if (s.code != TBE_OK) {
    fprintf(stderr, "tbecheck fuzz: %s\n", s.message);
    return s.code == TBE_EINVAL ? 2 : 3;
  }
  for (int e = 0; e < ENG_COUNT; e++)
    if ((o->eng.engines & (1u << e)) && eng_unavailable(*x, (eng_id)e))
      printf("engine %s: skip (%s)\n", eng_name((eng_id)e), eng_unavailable(*x, (eng_id)e));
  runinfo_collect(&row->ri);
  const runinfo *ri = &row->ri;
  eng_format_list(o->eng.engines, row->engines, sizeof row->engines);
  eng_describe_external(*x, row->versions, sizeof row->versions);
  snprintf(row->args, sizeof row->args, "tbecheck");
  for (int i = 0; i < argc; i++)
    snprintf(row->args + strlen(row->args), sizeof row->args - strlen(row->args), " %s", argv[i]);
  row->info = (db_run_info){
    .git_commit = ri->git_commit[0] ? ri->git_commit : NULL, .dirty = ri->dirty,
    .host = ri->host, .cpu = ri->cpu[0] ? ri->cpu : "unknown",
    .driver = ri->driver[0] ? ri->driver : NULL,
    .gpu = eng_gpu_description(*x)[0] ? eng_gpu_description(*x) : NULL,
    .tool_version = "fuzz", .argv = row->args, .engines = row->engines, .repeats = 1,
    .injected = o->eng.fault_output[0] != '\0', .campaign = o->campaign,
    .engine_versions = row->versions[0] ? row->versions : NULL,
    .gpu_uuid = gpus_worker_uuid()};
  t->row = row;
  t->hold = o->eng.fault_output[0] != '\0';
  return t->hold || store_release(t) == 0 ? -1 : 3;
}

/* Prints why draw i was too big for the time left, and what ran instead. */
static void report_big(const drawn *dr, uint64_t i, double left_ms, int live)
{
  printf("%sBIG   draw %llu needs about %.1f s, %.1f s are left: %s\n      %s\n",
         live ? "\r\033[K" : "", (unsigned long long)i, dr->big_ms / 1000,
         left_ms > 0 ? left_ms / 1000 : 0.0, dr->big,
         dr->c ? "redrawn smaller (fewer edges)" : "skipped");
  fflush(stdout);
}

/* fuzz --gpus / --gpu-ids: the campaign of o run by one worker fuzz per GPU (gpus.h). */
static int fuzz_on_gpus(const fuzz_options *o)
{
  if (o->eng.fault_output[0]) {
    fprintf(stderr, "tbecheck fuzz: --gpus and --gpu-ids hold no fault: run --inject-fault "
            "without them\n");
    return 2;
  }
  char seconds[32], cases[24], timeout[16], engines[256];
  snprintf(seconds, sizeof seconds, "%.9f", o->seconds);
  snprintf(cases, sizeof cases, "%lld", o->max_cases);
  snprintf(timeout, sizeof timeout, "%d", o->eng.worker_timeout_s);
  eng_format_list(o->eng.engines, engines, sizeof engines);
  const char *args[] = {"--seconds", seconds, "--engines", engines, "--engine-timeout", timeout,
                        o->max_cases >= 0 ? "--max-cases" : NULL, cases, NULL}; /* NULL ends it */
  gpus_job j = {.command = "fuzz", .gpus = o->gpus, .gpu_ids = o->gpu_ids,
                .db_path = o->db_path, .campaign = o->campaign, .args = args, .seed = o->seed,
                .seconds = o->seconds};
  return gpus_campaign(&j);
}

int fuzz_command(int argc, char **argv)
{
  fuzz_options o;
  int rc = parse_args(argc, argv, &o);
  if (rc >= 0)
    return rc;
  if (o.gpus || o.gpu_ids)
    return fuzz_on_gpus(&o);
  eng_ctx *x = NULL;
  stored t = {0};
  run_row row;
  rc = open_run(&o, argc, argv, &t, &row, &x);
  int live = isatty(STDOUT_FILENO), failed = 0;
  double t0 = eng_now_ms(), shown = t0;
  budget bu = {t0 + o.seconds * 1000, 1, 0};
  for (int e = 0; rc < 0 && e < ENG_COUNT; e++)
    if ((o.eng.engines & (1u << e)) && !eng_unavailable(x, (eng_id)e))
      bu.engines |= 1u << e;
  long long done = 0, redrawn = 0, skipped = 0;
  char fault_arg[160] = "";
  if (o.eng.fault_output[0])
    snprintf(fault_arg, sizeof fault_arg, " --inject-fault %s:%s@%lld",
             eng_name(o.eng.fault_engine), o.eng.fault_output, (long long)o.eng.fault_index);
  char engines[256], again[480];
  eng_format_list(o.eng.engines, engines, sizeof engines);
  const int named = strcmp(engines, ENG_DEFAULT_LIST) != 0;
  snprintf(again, sizeof again, "%s%s%s", named ? " --engines " : "", named ? engines : "",
           fault_arg);
  int64_t most = -1; /* the longest the fault's output was in a case (-1: never produced) */
  for (uint64_t i = 0;
       rc < 0 && eng_now_ms() < bu.end_ms && (o.max_cases < 0 || done < o.max_cases); i++) {
    drawn dr;
    next_case(o.seed, i, &bu, &dr);
    if (dr.big) {
      redrawn += dr.c != NULL;
      skipped += dr.c == NULL;
      report_big(&dr, i, bu.end_ms - eng_now_ms(), live);
      free(dr.big);
    }
    if (!dr.c)
      continue;
    eng_case_result r = {0};
    int64_t id = 0;
    double c0 = eng_now_ms();
    tbe_status s = dr.canon ? eng_run_case(x, dr.c, dr.canon, &r)
                            : tbe_error(TBE_ENOMEM, "fuzz", -1, "out of memory");
    budget_learn(&bu, dr.c, eng_now_ms() - c0);
    most = r.fault_elements > most ? r.fault_elements : most;
    if (s.code != TBE_OK) {
      fprintf(stderr, "tbecheck fuzz: %s\n", s.message);
      rc = 3;
    } else if ((rc = store(&t, dr.canon, &r, &id)) == 0) {
      rc = -1;
      done++;
      if (eng_case_failed(&r)) {
        failed++;
        if (live)
          printf("\r\033[K");
        int k = shrink_failure(x, &bu, &t, dr.canon, &r, id, again);
        rc = k ? k : -1;
      }
    }
    eng_case_result_free(&r);
    case_free(dr.c);
    free(dr.canon);
    double now = eng_now_ms();
    if (live || now - shown > 5000) {
      shown = now;
      printf("%sfuzz: %lld cases, %.1f cases/s, %d failed, %lld too big, %.0f s left%s",
             live ? "\r\033[K" : "", done, done / ((now - t0) / 1000), failed, redrawn + skipped,
             now < bu.end_ms ? (bu.end_ms - now) / 1000 : 0.0, live ? "" : "\n");
      fflush(stdout);
    }
  }
  int refused = 0;
  if (rc < 0 && t.hold) { /* the fault landed in no case: a run that tested nothing, unstored */
    if (most <= 0)
      fprintf(stderr, "%stbecheck fuzz: --inject-fault%s landed nowhere: %s produced no '%s' in "
              "any case\n", live ? "\r\033[K" : "", fault_arg, eng_name(o.eng.fault_engine),
              o.eng.fault_output);
    else
      fprintf(stderr, "%stbecheck fuzz: --inject-fault%s landed nowhere: '%s' of %s had at most "
              "%lld elements in the %lld cases drawn (@0..@%lld)\n", live ? "\r\033[K" : "",
              fault_arg, o.eng.fault_output, eng_name(o.eng.fault_engine), (long long)most, done,
              (long long)most - 1);
    fprintf(stderr, "tbecheck fuzz: nothing was stored%s\n",
            done == 0 ? " (no case ran: --max-cases 0, or every draw too big for the time)" : "");
    rc = 2;
    refused = 1;
  }
  if (rc < 0) {
    tbe_status s = db_run_end(t.d, t.run);
    if (s.code != TBE_OK) {
      fprintf(stderr, "tbecheck fuzz: %s\n", s.message);
      rc = 3;
    }
  }
  if (rc < 0) {
    printf("%srun %lld: %lld cases in %.1f s (budget %g s), %d failed (shrunk reproducers above), "
           "%lld drawn too big for the time left (%lld redrawn smaller, %lld skipped); "
           "results in %s\n",
           live ? "\r\033[K" : "", (long long)t.run, done, (eng_now_ms() - t0) / 1000, o.seconds,
           failed, redrawn + skipped, redrawn, skipped, o.db_path);
    rc = failed ? 1 : 0;
    if (done == 0)
      printf("warning: no case ran (--max-cases 0, or every draw too big for the time)\n");
  }
  eng_close(x);
  store_free(&t, o.db_path, refused);
  return rc;
}
