/* engine.c: the engines' table and lifetime, and the checks that hold every output of every
 * engine to its baseline. Not the engines themselves (engine_ref.c, engine_gpu.c,
 * engine_oracle.c), not the metrics (compare.c), not the database (store/db.c).
 *
 * To add an output: push it in the engine that computes it (eng_push_float, eng_push_int) on a
 * path, name it in that engine's `produces` list (engines that do not name it get an
 * `unsupported` check for it), and declare how each (path, output) is compared in eng_metrics:
 * the one table of metrics, so no engine chooses its own. A row held to a model or to the exact
 * value needs its twin in eng_twin_make; a new kind of coordinates is one eng_coord value and one
 * case of eng_coordinates.
 */
#include "engine.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine_ctx.h"
#include "engine_ext.h"
#include "engine_gpu.h"
#include "engine_oracle.h"
#include "engine_ref.h"
#include "engine_worker.h"
#include "forward.h"
#include "forward_small.h"
#include "backward_order.h"
#include "backward_small.h"
#include "forward_order.h"

/* How an output is held to its baseline. */
typedef enum {
  ENG_BITWISE, /* the reference's bits (baseline "ref") */
  ENG_MODEL,   /* the bits of the path's model of the order (baseline "model") */
  ENG_BOUND    /* the exact value within the derived bound (baseline "exact") */
} eng_kind;

/* The one declaration of how each (path, output) is compared (cf. llama.cpp's test-backend-ops,
 * one metric per op): every row whose path and output match an engine's output is one check.
 * `self` rows hold the reference's own outputs, the others those of every other engine. An
 * output that matches no row is an error of its check, never a default. */
static const struct {
  const char *path, *output;
  int self;
  eng_kind kind;
} eng_metrics[] = {
  {"bounds", "indices", 0, ENG_BITWISE},
  {"bounds", "offsets", 0, ENG_BITWISE},
  {"bounds", "warnings", 0, ENG_BITWISE},
  {"bounds", "offender", 0, ENG_BITWISE},
  {"bounds.fused", "indices", 0, ENG_BITWISE},
  {"bounds.fused", "offsets", 0, ENG_BITWISE},
  {"bounds.fused", "warnings", 0, ENG_BITWISE},
  {"bounds.fused", "offender", 0, ENG_BITWISE},
  {"forward", "output", 1, ENG_BOUND},      /* the reference's sum against the exact one */
  {"forward", "output", 0, ENG_BITWISE},
  {ENG_SMALL_PATH, "output", 0, ENG_MODEL}, /* the tensor-core order, bit for bit ... */
  {ENG_SMALL_PATH, "output", 0, ENG_BOUND}, /* ... and within its derived bound */
  {"backward", "weights", 0, ENG_BITWISE},
  {"backward", "momentum", 0, ENG_BITWISE},
  {"backward", "psw_grad", 0, ENG_BITWISE},
  {"backward.atomic", "weights", 1, ENG_BOUND}, /* the combine order is free */
  {"backward.atomic", "momentum", 1, ENG_BOUND},
  {"backward.atomic", "weights", 0, ENG_BOUND},
  {"backward.atomic", "momentum", 0, ENG_BOUND},
  {ENG_SMALL_TC_PATH, "weights", 0, ENG_MODEL}, /* bwd.small_tc's order, bit for bit ... */
  {ENG_SMALL_TC_PATH, "weights", 0, ENG_BOUND}, /* ... and within its derived bound */
  {ENG_SMALL_TC_PATH, "momentum", 0, ENG_MODEL},
  {ENG_SMALL_TC_PATH, "momentum", 0, ENG_BOUND},
};

static int eng_produces(eng_id e, const char *name);

static const char *const eng_all_outputs[] = {"output", "indices", "offsets", "warnings",
                                              "offender", "weights", "momentum", "psw_grad",
                                              NULL};

static const struct {
  const char *name;
  const char *const *produces; /* every output the engine can compute */
  eng_fn run;
} eng_table[ENG_EXT] = {
  [ENG_REF] = {"ref", eng_all_outputs, eng_run_ref},
  [ENG_GPU] = {"gpu", eng_all_outputs, eng_run_gpu},
  [ENG_ORACLE] = {"oracle", eng_all_outputs, eng_run_oracle},
};

/* The external engines' names, in the order they were first parsed: the process's registry,
 * so that an id means one engine in every list, fault and check of the run. */
static char eng_ext_names[ENG_EXT_MAX][32];

const char *eng_name(eng_id e)
{
  return e < ENG_EXT ? eng_table[e].name : eng_ext_names[e - ENG_EXT];
}

/* What engine e computes and how it runs. */
static const char *const *eng_outputs_of(eng_id e)
{
  return e < ENG_EXT ? eng_table[e].produces : eng_all_outputs;
}

static eng_fn eng_runner(eng_id e) { return e < ENG_EXT ? eng_table[e].run : eng_run_ext; }

const char *eng_status_name(eng_status s)
{
  static const char *const names[] = {"pass", "fail", "error", "skip", "unsupported"};
  return names[s];
}

uint64_t eng_fnv1a(uint64_t h, const void *data, size_t n)
{
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++)
    h = (h ^ p[i]) * UINT64_C(0x100000001b3);
  return h;
}

const char *eng_python(void)
{
  const char *python = getenv("TBECHECK_PYTHON");
  return python && *python ? python : TBE_PYTHON;
}

double eng_now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* ---- engine lists and options ---- */

/* The id of the engine called name[0..len), registering an external one (ext.NAME) on first
 * sight; -1 when it is not a name, -2 when the registry is full. */
static int eng_lookup(const char *name, size_t len)
{
  for (int e = 0; e < ENG_COUNT; e++)
    if (strlen(eng_name((eng_id)e)) == len && len && !strncmp(eng_name((eng_id)e), name, len))
      return e;
  const size_t pre = 4, most = 24; /* "ext." and NAME: eng_ext_names holds both */
  if (len <= pre || len - pre > most || strncmp(name, "ext.", pre) ||
      strspn(name + pre, "abcdefghijklmnopqrstuvwxyz0123456789_") < len - pre)
    return -1;
  for (int k = 0; k < ENG_EXT_MAX; k++)
    if (!eng_ext_names[k][0]) {
      memcpy(eng_ext_names[k], name, len);
      eng_ext_names[k][len] = '\0';
      return ENG_EXT + k;
    }
  return -2;
}

tbe_status eng_parse_list(const char *list, unsigned *mask)
{
  *mask = 1u << ENG_REF;
  for (const char *p = list;;) {
    size_t len = strcspn(p, ",");
    int e = eng_lookup(p, len);
    if (e == -2)
      return tbe_error(TBE_EINVAL, "engines", -1, "'%.*s': at most %d external engines",
                       (int)len, p, ENG_EXT_MAX);
    if (e < 0)
      return tbe_error(TBE_EINVAL, "engines", -1,
                       "unknown engine '%.*s' (engines: ref, gpu, oracle, and ext.NAME for an "
                       "external one, NAME of [a-z0-9_])", (int)len, p);
    *mask |= 1u << e;
    if (!p[len])
      return tbe_ok();
    p += len + 1;
  }
}

void eng_format_list(unsigned mask, char *buf, size_t n)
{
  size_t used = 0;
  buf[0] = '\0';
  for (int e = 0; e < ENG_COUNT; e++)
    if (mask & (1u << e)) {
      int k = snprintf(buf + used, n - used, "%s%s", used ? "," : "", eng_name((eng_id)e));
      if (k < 0 || (size_t)k >= n - used)
        return;
      used += (size_t)k;
    }
}

tbe_status eng_parse_fault(const char *spec, eng_options *o)
{
  const char *colon = strchr(spec, ':');
  int e = colon ? eng_lookup(spec, (size_t)(colon - spec)) : -1; /* -2: too many */
  size_t len = colon ? strcspn(colon + 1, "@") : 0;
  const char *at = colon ? colon + 1 + len : NULL;
  char *end = NULL;
  long long index = at && *at ? strtoll(at + 1, &end, 10) : 0;
  if (e < 0 || len == 0 || len >= sizeof o->fault_output || index < 0 ||
      (at && *at && (end == at + 1 || *end)))
    return tbe_error(TBE_EINVAL, "inject-fault", -1,
                     "'%s' is not ENGINE:OUTPUT[@INDEX] (e.g. gpu:output or ref:indices@3)", spec);
  memcpy(o->fault_output, colon + 1, len);
  o->fault_output[len] = '\0';
  if (!eng_produces((eng_id)e, o->fault_output)) {
    char names[160] = "";
    for (const char *const *p = eng_outputs_of((eng_id)e); *p; p++)
      snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
               names[0] ? ", " : "", *p);
    tbe_status s = tbe_error(TBE_EINVAL, "inject-fault", -1,
                             "'%s': %s has no output '%s' (its outputs: %s)", spec,
                             eng_name((eng_id)e), o->fault_output, names);
    o->fault_output[0] = '\0';
    return s;
  }
  o->fault_engine = (eng_id)e;
  o->fault_index = index;
  return tbe_ok();
}

static int eng_produces(eng_id e, const char *name)
{
  for (const char *const *p = eng_outputs_of(e); *p; p++)
    if (!strcmp(*p, name))
      return 1;
  return 0;
}

tbe_status eng_open(const eng_options *opt, eng_ctx **out)
{
  eng_ctx *x = calloc(1, sizeof *x);
  *out = x;
  if (!x)
    return tbe_error(TBE_ENOMEM, "engines", -1, "out of memory");
  x->opt = *opt;
  x->opt.engines |= 1u << ENG_REF;
  for (int e = 0; e < ENG_COUNT; e++)
    if (!(x->opt.engines & (1u << e)))
      snprintf(x->unavailable[e], sizeof x->unavailable[e], "not asked for");
  if (!x->opt.gpu.run) {
    x->opt.gpu.run = gpu_run;
    x->opt.gpu.fwd_free = gpu_fwd_result_free;
    x->opt.gpu.bwd_free = gpu_bwd_result_free;
  } else {
    snprintf(x->gpu_desc, sizeof x->gpu_desc, "a stand-in for the GPU forward");
  }
  if ((opt->engines & (1u << ENG_GPU)) && !opt->gpu.run) {
    tbe_status s = gpu_probe(x->gpu_desc, sizeof x->gpu_desc);
    if (s.code != TBE_OK) {
      snprintf(x->unavailable[ENG_GPU], sizeof x->unavailable[0], "%s", s.message);
      x->gpu_desc[0] = '\0';
    }
  }
  if (opt->engines & (1u << ENG_ORACLE))
    eng_start_oracle(x);
  for (int e = ENG_EXT; e < ENG_COUNT; e++)
    if (opt->engines & (1u << e))
      eng_start_ext(x, (eng_id)e);
  return tbe_ok();
}

void eng_close(eng_ctx *x)
{
  if (!x)
    return;
  for (int e = 0; e < ENG_COUNT; e++)
    eng_worker_stop(x, (eng_id)e);
  free(x);
}

const char *eng_unavailable(const eng_ctx *x, eng_id e)
{
  return x->unavailable[e][0] ? x->unavailable[e] : NULL;
}

const char *eng_gpu_description(const eng_ctx *x) { return x->gpu_desc; }

void eng_describe_external(const eng_ctx *x, char *buf, size_t n)
{
  size_t used = 0;
  buf[0] = '\0';
  for (int e = ENG_EXT; e < ENG_COUNT && used < n; e++)
    if ((x->opt.engines & (1u << e)) && !x->unavailable[e][0]) {
      int k = snprintf(buf + used, n - used, "%s%s: order %s%s%s", used ? "; " : "",
                       eng_name((eng_id)e), ref_order_name((ref_order)x->order[e]),
                       x->version[e][0] ? ", " : "", x->version[e]);
      used = k < 0 ? n : used + (size_t)k;
    }
}

/* ---- checks ---- */

/* Writes where element i of output o lies. */
static void eng_coordinates(const eng_output *o, const tbe_batch *b, const tbe_layout *l,
                            int64_t i, char *buf, size_t n)
{
  switch (o->coord) {
  case COORD_POOLED:
    for (int64_t g = 0; g < l->total_B; g++) {
      int32_t t = l->bag_feature[g];
      int64_t D = b->D[b->feature_table_map[t]];
      if (i < l->bag_out[g] || i >= l->bag_out[g] + D)
        continue;
      int64_t k = g - l->B_offsets[t];
      int len = snprintf(buf, n, "t=%d b=%lld d=%lld", t, (long long)k,
                         (long long)(i - l->bag_out[g]));
      for (int r = 0; b->R > 0 && r < b->R && len > 0 && (size_t)len < n; r++) {
        int64_t in_rank = b->B_vbe[(int64_t)t * b->R + r];
        if (k < in_rank) {
          snprintf(buf + len, n - (size_t)len, " (rank %d, sample %lld)", r, (long long)k);
          break;
        }
        k -= in_rank;
      }
      return;
    }
    break;
  case COORD_UNPOOLED:
    snprintf(buf, n, "p=%lld d=%lld", (long long)(i / l->max_D), (long long)(i % l->max_D));
    return;
  case COORD_POSITION:
    snprintf(buf, n, "p=%lld", (long long)i);
    return;
  case COORD_BAG:
    snprintf(buf, n, i == l->total_B ? "bag=%lld (the last offset)" : "bag=%lld", (long long)i);
    return;
  case COORD_WEIGHT:
    for (int32_t j = 0; j < b->num_tables; j++)
      if (i < b->table_offset[j + 1]) {
        int64_t k = i - b->table_offset[j];
        snprintf(buf, n, "table=%d row=%lld d=%lld", j, (long long)(k / b->D[j]),
                 (long long)(k % b->D[j]));
        return;
      }
    break;
  case COORD_ROW: {
    int64_t row = i;
    for (int32_t j = 0; j < b->num_tables; row -= b->E[j++])
      if (row < b->E[j]) {
        snprintf(buf, n, "table=%d row=%lld", j, (long long)row);
        return;
      }
    break;
  }
  case COORD_VECTOR:
    break;
  }
  snprintf(buf, n, "i=%lld", (long long)i);
}

tbe_status eng_add_check(eng_case_result *res, eng_id e, const char *baseline, const char *path,
                         const char *output, cmp_metric m, eng_check **out)
{
  if (res->n_checks == res->cap_checks) {
    int cap = res->cap_checks ? 2 * res->cap_checks : 16;
    eng_check *p = realloc(res->checks, sizeof *p * (size_t)cap);
    if (!p)
      return tbe_error(TBE_ENOMEM, "checks", -1, "out of memory");
    res->checks = p;
    res->cap_checks = cap;
  }
  eng_check *c = &res->checks[res->n_checks++];
  memset(c, 0, sizeof *c);
  c->engine = e;
  c->baseline = baseline;
  c->path = path;
  c->output = output;
  c->metric = m;
  *out = c;
  return tbe_ok();
}

/* A check that compared nothing: status st, reason formatted. */
static tbe_status eng_note(eng_case_result *res, eng_id e, const char *baseline, const char *path,
                           const char *output, eng_status st, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
static tbe_status eng_note(eng_case_result *res, eng_id e, const char *baseline, const char *path,
                           const char *output, eng_status st, const char *fmt, ...)
{
  eng_check *c = NULL;
  tbe_status s = eng_add_check(res, e, baseline, path, output, CMP_BITWISE, &c);
  if (s.code != TBE_OK)
    return s;
  c->status = st;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->reason, sizeof c->reason, fmt, ap);
  va_end(ap);
  return tbe_ok();
}

/* ---- twins: the model's bits and the exact values a check is held to ---- */

/* Why `run` has no output called name, for a reason text. */
static const char *eng_missing_why(const eng_run *run)
{
  return run->stopped[0] ? run->stopped : "it did not compute it";
}


/* One twin of (path, output): a model's bits (ENG_MODEL) or exact values and bounds
 * (ENG_BOUND), over the whole output. */
typedef struct {
  const char *path, *output;
  eng_kind kind;
  void *bits;                /* ENG_MODEL: [n] in the output's dtype */
  double *exact, *bound;     /* ENG_BOUND: [n] each */
  int64_t n;
  unsigned char *small;      /* [T] the small-table features it was made for, or NULL */
  int order;                 /* an external engine's order (ref_order) it models, or -1 */
} eng_twin;

#define ENG_MAX_TWINS 16 /* forward and backward, each model and exact, for ours and an external order */

/* The twins of one case, made on demand by eng_twin_get while b holds the reference's repaired
 * indices and offsets (the batch the reference computed from). */
typedef struct {
  eng_twin v[ENG_MAX_TWINS];
  int n;
  const eng_run *ref;
  const gen_bwd *bwd;
  const void *idx0, *off0; /* the batch's pristine indices and offsets (an order's counter) */
  tbe_bounds_mode mode;
} eng_twins;

static void eng_twin_free(eng_twin *t)
{
  free(t->bits);
  free(t->exact);
  free(t->bound);
  free(t->small);
  memset(t, 0, sizeof *t);
}

static void eng_twins_free(eng_twins *tw)
{
  for (int i = 0; i < tw->n; i++)
    eng_twin_free(&tw->v[i]);
  tw->n = 0;
}

static int eng_same_mask(const unsigned char *a, const unsigned char *b, int32_t T)
{
  return (!a && !b) || (a && b && !memcmp(a, b, (size_t)T));
}

/* Twin t of a backward output of an external order (t->order): the order's model (ENG_MODEL,
 * backward_order.h) on copies of b's weights and momentum, or the exact values within the bound
 * of any order of the normative formulas (ENG_BOUND, ref_backward_exact_free). */
static tbe_status eng_twin_backward_order(const gen_bwd *bwd, const tbe_batch *b,
                                          const tbe_layout *l, eng_twin *t)
{
  const int w = !strcmp(t->output, "weights"), m = !strcmp(t->output, "momentum");
  const int64_t nw = b->table_offset[b->num_tables], rows = ref_bwd_rows(b);
  if (m && !bwd->momentum)
    return tbe_error(TBE_EINVAL, "model", -1, "the optimizer keeps no momentum");
  t->n = w ? nw : m ? rows : b->N;
  if (t->kind == ENG_BOUND) {
    t->exact = malloc(sizeof(double) * (size_t)(nw + rows + b->N + 1));
    t->bound = malloc(sizeof(double) * (size_t)(nw + rows + b->N + 1));
    if (!t->exact || !t->bound)
      return tbe_error(TBE_ENOMEM, "exact", -1, "cannot allocate %lld values", (long long)t->n);
    if (!w && !m)
      return ref_psw_grad_exact_free(b, l, bwd->cfg, bwd->grad_output, t->exact, t->bound);
    double *we = t->exact, *wb = t->bound, *me = we + nw, *mb = wb + nw;
    tbe_status s = ref_backward_exact_free(b, l, bwd->cfg, bwd->grad_output, bwd->momentum, we,
                                           wb, bwd->momentum ? me : NULL,
                                           bwd->momentum ? mb : NULL);
    if (s.code == TBE_OK && m) { /* the momentum's part, moved to the front */
      memmove(t->exact, me, sizeof(double) * (size_t)rows);
      memmove(t->bound, mb, sizeof(double) * (size_t)rows);
    }
    return s;
  }
  size_t wsize = tbe_dtype_size(b->wdtype);
  tbe_batch copy = *b;
  void *weights = malloc((size_t)nw * wsize + 1);
  float *mom = bwd->momentum ? malloc(sizeof(float) * (size_t)(rows + 1)) : NULL;
  float *psw = b->per_sample_weights ? calloc((size_t)b->N + 1, sizeof(float)) : NULL;
  /* the Triton model's weights and momentum carry their slack: held within it where it is not 0 */
  const int slack = t->order == REF_ORDER_TRITON && (w || m);
  double *ws = slack ? malloc(sizeof(double) * (size_t)(nw + 1)) : NULL;
  double *ms = slack ? malloc(sizeof(double) * (size_t)(rows + 1)) : NULL;
  tbe_status s = tbe_ok();
  if (!weights || (bwd->momentum && !mom) || (b->per_sample_weights && !psw) ||
      (slack && (!ws || !ms)))
    s = tbe_error(TBE_ENOMEM, "model", -1, "cannot copy the weights");
  if (s.code == TBE_OK) {
    memcpy(weights, b->weights, (size_t)nw * wsize);
    if (mom)
      memcpy(mom, bwd->momentum, sizeof(float) * (size_t)rows);
    copy.weights = weights;
    s = slack ? ref_backward_triton(&copy, l, bwd->cfg, bwd->grad_output, mom, psw, ws, ms)
              : ref_backward_order((ref_order)t->order, &copy, l, bwd->cfg, bwd->grad_output,
                                   mom, psw);
  }
  /* a model whose slack is 0 everywhere here is held bit for bit */
  int bounded = 0;
  for (int64_t i = 0; s.code == TBE_OK && slack && !bounded && i < t->n; i++)
    bounded = (m ? ms : ws)[i] != 0.0;
  if (bounded) {
    t->exact = malloc(sizeof(double) * (size_t)(t->n + 1));
    if (!t->exact)
      s = tbe_error(TBE_ENOMEM, "model", -1, "cannot widen %lld values", (long long)t->n);
    for (int64_t i = 0; t->exact && i < t->n; i++)
      t->exact[i] = m ? (double)mom[i] : cmp_value(b->wdtype, weights, i);
    t->bound = m ? ms : ws;
    free(m ? ws : ms);
    ws = ms = NULL;
  }
  if (!bounded)
    t->bits = w ? weights : m ? (void *)mom : (void *)psw;
  free(ws);
  free(ms);
  if (!w || bounded)
    free(weights);
  if (!m || bounded)
    free(mom);
  if (w || m)
    free(psw);
  return s;
}

/* Twin t of bwd.small_tc's weights or momentum, for the tables of the features t->small marks
 * (the engine's report): the model's bits (ENG_MODEL: ref_backward_small_call on copies, so a
 * table the model would send back to the normative backward differs), or the exact values and
 * bounds of those tables (ENG_BOUND: ref_backward_small_exact; no other element is in the
 * part). */
static tbe_status eng_twin_small_tc(const gen_bwd *bwd, const tbe_batch *b, const tbe_layout *l,
                                    eng_twin *t)
{
  if (!bwd || !bwd->momentum)
    return tbe_error(TBE_EINVAL, "model", -1, "bwd.small_tc runs row-wise Adagrad, which keeps "
                     "a momentum");
  const int w = !strcmp(t->output, "weights");
  const int64_t nw = b->table_offset[b->num_tables], rows = ref_bwd_rows(b);
  const size_t wsize = tbe_dtype_size(b->wdtype);
  unsigned char *tables = calloc((size_t)b->num_tables + 1, 2), *taken = tables + b->num_tables;
  double *x = t->kind == ENG_BOUND ? calloc((size_t)(2 * (nw + rows) + 1), sizeof(double)) : NULL;
  void *weights = t->kind == ENG_MODEL ? malloc((size_t)nw * wsize + 1) : NULL;
  float *mom = t->kind == ENG_MODEL ? malloc(sizeof(float) * (size_t)(rows + 1)) : NULL;
  float *psw = t->kind == ENG_MODEL && b->per_sample_weights
                   ? calloc((size_t)b->N + 1, sizeof(float)) : NULL;
  tbe_status s = tbe_ok();
  if (!tables || (t->kind == ENG_BOUND && !x) || (t->kind == ENG_MODEL && (!weights || !mom)) ||
      (t->kind == ENG_MODEL && b->per_sample_weights && !psw))
    s = tbe_error(TBE_ENOMEM, "model", -1, "cannot copy the weights");
  for (int32_t f = 0; s.code == TBE_OK && f < b->T; f++)
    if (t->small[f])
      tables[b->feature_table_map[f]] = 1;
  t->n = w ? nw : rows;
  if (s.code == TBE_OK && t->kind == ENG_BOUND) {
    double *we = x, *wb = x + nw, *me = x + 2 * nw, *mb = me + rows;
    s = ref_backward_small_exact(b, l, bwd->cfg, bwd->grad_output, bwd->momentum, tables, we,
                                 wb, me, mb);
    t->exact = malloc(sizeof(double) * (size_t)(t->n + 1));
    t->bound = malloc(sizeof(double) * (size_t)(t->n + 1));
    if (s.code == TBE_OK && (!t->exact || !t->bound))
      s = tbe_error(TBE_ENOMEM, "exact", -1, "cannot allocate %lld values", (long long)t->n);
    if (s.code == TBE_OK) {
      memcpy(t->exact, w ? we : me, sizeof(double) * (size_t)t->n);
      memcpy(t->bound, w ? wb : mb, sizeof(double) * (size_t)t->n);
    }
  } else if (s.code == TBE_OK) {
    tbe_batch copy = *b;
    memcpy(weights, b->weights, (size_t)nw * wsize);
    memcpy(mom, bwd->momentum, sizeof(float) * (size_t)rows);
    copy.weights = weights;
    s = ref_backward_small_call(&copy, l, bwd->cfg, bwd->grad_output, tables, mom, psw, taken);
    t->bits = w ? weights : (void *)mom;
    if (w)
      weights = NULL;
    else
      mom = NULL;
  }
  free(x);
  free(weights);
  free(mom);
  free(psw);
  free(tables);
  return s;
}

/* Makes twin t (path, output, kind set; small its mask or NULL) on the repaired batch b, or
 * writes why it cannot into why. Returns TBE_ENOMEM only. */
static tbe_status eng_twin_make(const eng_twins *tw, const tbe_batch *b, const tbe_layout *l,
                                eng_twin *t, char *why, size_t n)
{
  const int forward = !strcmp(t->output, "output");
  if (!strcmp(t->output, "warnings")) { /* an external order's counter, on the pristine inputs */
    int64_t *count = malloc(sizeof *count);
    if (!count)
      return tbe_error(TBE_ENOMEM, "model", -1, "out of memory");
    *count = ref_bounds_order_warnings((ref_order)t->order, b, l, tw->idx0, tw->off0);
    t->bits = count;
    t->n = 1;
    return tbe_ok();
  }
  if (!eng_find(tw->ref, forward ? "output" : "weights")) {
    snprintf(why, n, "the reference has no %s: %.280s", forward ? "output" : "weights",
             eng_missing_why(tw->ref));
    return tbe_ok();
  }
  tbe_status s = tbe_ok();
  if (!strcmp(t->path, ENG_SMALL_TC_PATH)) {
    s = eng_twin_small_tc(tw->bwd, b, l, t);
  } else if (forward && t->order >= 0 && t->kind == ENG_MODEL) {
    /* an external engine's order (ref/forward_order.h) */
    t->n = l->out_elems;
    t->bits = calloc((size_t)t->n + 1, sizeof(float));
    s = t->bits ? ref_forward_order((ref_order)t->order, b, l, t->bits)
                : tbe_error(TBE_ENOMEM, "model", -1, "cannot allocate %lld values",
                            (long long)t->n);
  } else if (forward && t->order >= 0) {
    /* the bound of the algorithm that order runs */
    t->n = l->out_elems;
    t->exact = calloc((size_t)t->n + 1, sizeof(double));
    t->bound = calloc((size_t)t->n + 1, sizeof(double));
    s = t->exact && t->bound ? ref_forward_order_exact((ref_order)t->order, b, l, t->exact,
                                                       t->bound)
                             : tbe_error(TBE_ENOMEM, "exact", -1, "cannot allocate %lld values",
                                         (long long)t->n);
  } else if (t->order >= 0) {
    s = tw->bwd ? eng_twin_backward_order(tw->bwd, b, l, t)
                : tbe_error(TBE_EINTERNAL, "model", -1, "no backward to take the twin of");
  } else if (forward && t->kind == ENG_MODEL) {
    /* the small path's model (ref/forward_small.c), over the features of t->small */
    t->n = l->out_elems;
    t->bits = calloc((size_t)t->n + 1, sizeof(float));
    s = t->bits ? ref_forward_small_model(b, l, t->small, t->bits)
                : tbe_error(TBE_ENOMEM, "model", -1, "cannot allocate %lld values",
                            (long long)t->n);
  } else if (forward) {
    t->n = l->out_elems;
    /* zeros where no bag writes (a broken layout): the reference must then hold exactly 0 */
    t->exact = calloc((size_t)t->n + 1, sizeof(double));
    t->bound = calloc((size_t)t->n + 1, sizeof(double));
    s = t->exact && t->bound ? ref_forward_exact_tc(b, l, t->small, t->exact, t->bound)
                             : tbe_error(TBE_ENOMEM, "exact", -1, "cannot allocate %lld values",
                                         (long long)t->n);
  } else {
    /* weights and momentum of an atomic-combine backward, on weights before the update */
    double *we, *wb, *me, *mb;
    s = tw->bwd ? eng_ref_backward_exact(b, l, tw->bwd, &we, &wb, &me, &mb)
                : tbe_error(TBE_EINTERNAL, "exact", -1, "no backward to take the twin of");
    int w = !strcmp(t->output, "weights");
    if (s.code == TBE_OK && !w && !me)
      s = tbe_error(TBE_EINVAL, "exact", -1, "the optimizer keeps no momentum");
    if (s.code == TBE_OK) {
      t->exact = w ? we : me;
      t->bound = w ? wb : mb;
      t->n = w ? b->table_offset[b->num_tables] : ref_bwd_rows(b);
      free(w ? me : we);
      free(w ? mb : wb);
    }
  }
  if (s.code == TBE_ENOMEM)
    return s;
  if (s.code != TBE_OK) {
    snprintf(why, n, "%s failed: %.280s", t->kind == ENG_MODEL ? "the model" : "the exact twin",
             s.message);
    eng_twin_free(t);
  }
  return tbe_ok();
}

/* The twin of (path, output, kind) for small-table mask small (NULL: none), made if missing;
 * *out is NULL, with why, when it cannot be made. */
static tbe_status eng_twin_get(eng_twins *tw, const tbe_batch *b, const tbe_layout *l,
                               const char *path, const char *output, eng_kind kind,
                               const unsigned char *small, int order, const eng_twin **out,
                               char *why, size_t n)
{
  *out = NULL;
  for (int i = 0; i < tw->n; i++) {
    const eng_twin *t = &tw->v[i];
    if (!strcmp(t->path, path) && !strcmp(t->output, output) && t->kind == kind &&
        t->order == order && eng_same_mask(t->small, small, b->T)) {
      *out = t;
      return tbe_ok();
    }
  }
  if (tw->n == ENG_MAX_TWINS)
    return tbe_error(TBE_EINTERNAL, "twins", -1, "more than %d twins", ENG_MAX_TWINS);
  eng_twin *t = &tw->v[tw->n];
  memset(t, 0, sizeof *t);
  t->path = path;
  t->output = output;
  t->kind = kind;
  t->order = order;
  if (small && !(t->small = malloc((size_t)b->T)))
    return tbe_error(TBE_ENOMEM, "twins", -1, "out of memory");
  if (small)
    memcpy(t->small, small, (size_t)b->T);
  tbe_status s = eng_twin_make(tw, b, l, t, why, n);
  if (s.code != TBE_OK) {
    eng_twin_free(t);
    return s;
  }
  if (t->n > 0 || t->bits || t->exact)
    *out = &tw->v[tw->n++];
  return tbe_ok();
}

/* ---- comparing ---- */

/* The elements of output o on one path: all of them (sel NULL), or those listed in sel. */
typedef struct {
  const char *path;
  int64_t *sel; /* [n] ascending element indices, owned, or NULL: all */
  int64_t n;
} eng_part;

/* Splits o into its parts: the elements of features not on the small-table path (path o->path)
 * and those of features on it (ENG_SMALL_PATH), or for the weights and momentum the elements of
 * tables bwd.small_tc did not update and of those it did (ENG_SMALL_TC_PATH), leaving out an
 * empty part. Returns the count. */
static int eng_parts(const eng_output *o, const tbe_batch *b, const tbe_layout *l,
                     eng_part part[2], tbe_status *s)
{
  *s = tbe_ok();
  if (!o->small) {
    part[0] = (eng_part){o->path, NULL, o->n};
    return 1;
  }
  int64_t *sel[2] = {malloc(sizeof(int64_t) * (size_t)o->n + 1),
                     malloc(sizeof(int64_t) * (size_t)o->n + 1)};
  int64_t k[2] = {0, 0};
  if (!sel[0] || !sel[1]) {
    free(sel[0]);
    free(sel[1]);
    *s = tbe_error(TBE_ENOMEM, "output", -1, "cannot split %lld elements", (long long)o->n);
    return 0;
  }
  const int backward = strcmp(o->name, "output") != 0;
  if (backward) { /* a table's elements: its weights, or its rows' momentum */
    int64_t key = 0;
    for (int32_t j = 0; j < b->num_tables; key += b->E[j], j++) {
      int on = 0;
      for (int32_t t = 0; t < b->T; t++)
        on |= b->feature_table_map[t] == j && o->small[t];
      const int w = !strcmp(o->name, "weights");
      const int64_t e0 = w ? b->table_offset[j] : key;
      const int64_t e1 = w ? b->table_offset[j + 1] : key + b->E[j];
      for (int64_t e = e0; e < e1; e++)
        sel[on][k[on]++] = e;
    }
  }
  for (int64_t g = 0; !backward && g < l->total_B; g++) {
    int32_t t = l->bag_feature[g];
    int on = o->small[t] != 0;
    for (int32_t d = 0; d < b->D[b->feature_table_map[t]]; d++)
      sel[on][k[on]++] = l->bag_out[g] + d;
  }
  int np = 0;
  const char *on_path = backward ? ENG_SMALL_TC_PATH : ENG_SMALL_PATH;
  for (int on = 0; on < 2; on++)
    if (k[on] > 0)
      part[np++] = (eng_part){on ? on_path : o->path, sel[on], k[on]};
    else
      free(sel[on]);
  return np;
}

/* The elements sel[0..n) of src (elements of `size` bytes) into a malloc'd array (src itself,
 * not copied, when sel is NULL: *owned = 0). */
static const void *eng_gather(const void *src, size_t size, const int64_t *sel, int64_t n,
                              void **owned)
{
  *owned = NULL;
  if (!sel)
    return src;
  char *dst = malloc(size * (size_t)n + 1);
  for (int64_t i = 0; dst && i < n; i++)
    memcpy(dst + (size_t)i * size, (const char *)src + (size_t)sel[i] * size, size);
  *owned = dst;
  return dst;
}

static const char *eng_baseline(eng_kind k)
{
  return k == ENG_BITWISE ? "ref" : k == ENG_MODEL ? "model" : "exact";
}

/* Holds part p of engine e's output got to its baseline by kind k (want: the reference's output
 * of that name, for ENG_BITWISE) in a new check. */
static tbe_status eng_compare(eng_ctx *x, eng_case_result *res, eng_id e, const eng_output *got,
                              const eng_part *p, eng_kind k, const eng_output *want,
                              eng_twins *tw, const tbe_batch *b, const tbe_layout *l)
{
  const char *baseline = eng_baseline(k);
  char why[320] = "";
  const eng_twin *t = NULL;
  tbe_status s = tbe_ok();
  if (k == ENG_MODEL && e >= ENG_EXT && tw->bwd && strcmp(got->name, "output") &&
      ref_backward_order_declines((ref_order)x->order[e], b, l, tw->bwd->cfg, got->name, why,
                                  sizeof why))
    return eng_note(res, e, baseline, p->path, got->name, ENG_UNSUPPORTED,
                    "the %s model of %s: %s", ref_order_name((ref_order)x->order[e]),
                    got->name, why);
  if (k != ENG_BITWISE)
    s = eng_twin_get(tw, b, l, p->path, got->name, k, got->small,
                     e >= ENG_EXT ? x->order[e] : -1, &t, why, sizeof why);
  if (s.code != TBE_OK)
    return s;
  /* a model with slack (its exact values and bounds) is held within it */
  const int within = k == ENG_BOUND || (t && t->exact);
  cmp_metric m = within ? CMP_BOUND : CMP_BITWISE;
  if (k == ENG_BITWISE && !want)
    return eng_note(res, e, baseline, p->path, got->name, ENG_FAIL, "the reference has no %s: %s",
                    got->name, eng_missing_why(tw->ref));
  if (k != ENG_BITWISE && !t)
    return eng_note(res, e, baseline, p->path, got->name, ENG_ERROR, "no %s of %s: %s",
                    k == ENG_MODEL ? "model" : "exact values", got->name, why);
  eng_check *c = NULL;
  s = eng_add_check(res, e, baseline, p->path, got->name, m, &c);
  if (s.code != TBE_OK)
    return s;
  size_t size = eng_elem_size(got);
  int64_t want_n = t ? t->n : want->n;
  if (got->n != want_n ||
      (want && (got->is_int != want->is_int || size != eng_elem_size(want)))) {
    c->status = ENG_FAIL;
    snprintf(c->reason, sizeof c->reason, "shape: %s has %lld elements, %s %lld of %zu bytes",
             baseline, (long long)want_n, eng_name(e), (long long)got->n, size);
    return tbe_ok();
  }
  void *own[4] = {NULL, NULL, NULL, NULL};
  const void *g = eng_gather(got->data, size, p->sel, p->n, &own[0]);
  const void *w = within ? NULL
                         : eng_gather(t ? t->bits : want->data, size, p->sel, p->n, &own[1]);
  const double *ex = within ? eng_gather(t->exact, sizeof(double), p->sel, p->n, &own[2]) : NULL;
  const double *bd = within ? eng_gather(t->bound, sizeof(double), p->sel, p->n, &own[3]) : NULL;
  if (!g || (!within && !w) || (within && (!ex || !bd)))
    s = tbe_error(TBE_ENOMEM, "compare", -1, "cannot gather %lld elements", (long long)p->n);
  if (s.code == TBE_OK)
    s = cmp_init(&c->cmp, m, x->opt.max_violations);
  if (s.code == TBE_OK) {
    c->has_digest = 1;
    c->digest = eng_fnv1a(ENG_FNV_SEED, g, (size_t)p->n * size);
    if (within)
      cmp_bound(&c->cmp, got->dtype, ex, bd, g, p->n);
    else if (got->is_int)
      cmp_bitwise_int(&c->cmp, got->itype, w, g, p->n);
    else
      cmp_bitwise(&c->cmp, got->dtype, w, g, p->n);
    c->compared = 1;
  }
  for (int i = 0; i < 4; i++)
    free(own[i]);
  if (s.code != TBE_OK)
    return s;
  int kept = (int)(c->cmp.violations < c->cmp.cap ? c->cmp.violations : c->cmp.cap);
  if (kept > 0 && !(c->violations = malloc(sizeof *c->violations * (size_t)kept)))
    s = tbe_error(TBE_ENOMEM, "violations", -1, "out of memory");
  for (int i = 0; s.code == TBE_OK && i < kept; i++) {
    cmp_violation v = c->cmp.first[i];
    v.index = p->sel ? p->sel[v.index] : v.index;
    c->violations[i].v = v;
    eng_coordinates(got, b, l, v.index, c->violations[i].coordinates,
                    sizeof c->violations[i].coordinates);
  }
  c->n_violations = s.code == TBE_OK ? kept : 0;
  free(c->cmp.first);
  c->cmp.first = NULL;
  if (c->cmp.violations && c->n_violations) {
    const eng_violation *v = &c->violations[0];
    c->status = ENG_FAIL;
    if (within && c->cmp.no_bound)
      snprintf(c->reason, sizeof c->reason,
               "%lld of %lld elements outside the bound, %lld of them without a finite bound; "
               "first at %s: %s %.17g, got %.9g, bound %.3g",
               (long long)c->cmp.violations, (long long)c->cmp.elements,
               (long long)c->cmp.no_bound, v->coordinates, baseline, v->v.expected, v->v.got,
               v->v.bound);
    else if (within)
      snprintf(c->reason, sizeof c->reason,
               "%lld of %lld elements outside the bound (worst ratio %.3g); first at %s: "
               "%s %.17g, got %.9g, bound %.3g",
               (long long)c->cmp.violations, (long long)c->cmp.elements,
               c->cmp.worst_bound_ratio, v->coordinates, baseline, v->v.expected, v->v.got,
               v->v.bound);
    else
      snprintf(c->reason, sizeof c->reason,
               "%lld of %lld elements differ (max %lld ulp); first at %s: %s %.9g, %s %.9g",
               (long long)c->cmp.violations, (long long)c->cmp.elements,
               (long long)c->cmp.max_ulp, v->coordinates, baseline, v->v.expected, eng_name(e),
               v->v.got);
  } else if (c->cmp.violations) {
    c->status = ENG_FAIL;
    snprintf(c->reason, sizeof c->reason, "%lld of %lld elements fail %s",
             (long long)c->cmp.violations, (long long)c->cmp.elements, cmp_metric_name(m));
  } else if (got->fault[0]) {
    c->status = ENG_FAIL;
    snprintf(c->reason, sizeof c->reason, "%s", got->fault);
  }
  return s;
}

/* An external output that matches its order's model (check model) but leaves the normative
 * bound (check bound) is the engine's defect: bound's reason names the model's rule that
 * explains its kept violations (ref_order_defect), or says that none does, which is a failure
 * of the model or of the bound, not of the engine. */
static void eng_explain(const eng_check *model, eng_check *bound, ref_order o,
                        const tbe_batch *b, const tbe_layout *l, const ref_bwd_config *cfg)
{
  if (model->status != ENG_PASS || bound->status != ENG_FAIL || !bound->n_violations ||
      strcmp(model->output, bound->output))
    return;
  const char *rule = NULL;
  int named = 0;
  for (int i = 0; i < bound->n_violations; i++) {
    const char *r = ref_order_defect(o, b, l, cfg, bound->output, bound->violations[i].v.index);
    named += r != NULL;
    rule = rule ? rule : r;
  }
  size_t n = strlen(bound->reason);
  if (rule)
    snprintf(bound->reason + n, sizeof bound->reason - n,
             "; it matches the %s model: its defect, %s (%d of %d violations kept)",
             ref_order_name(o), rule, named, bound->n_violations);
  else
    snprintf(bound->reason + n, sizeof bound->reason - n,
             "; it matches the %s model, but no rule of the model leaves the bound here: the "
             "model or the bound is wrong", ref_order_name(o));
}

/* The checks of output got of external engine e (ref/forward_order.h): where its declared order is the
 * normative one, its bits against the reference's; elsewhere against the model of its order,
 * bit for bit (this proves the adapter and the model right), and against the exact value
 * within the bound of the algorithm that order runs (this finds the engine's defects). */
static tbe_status eng_check_ext_output(eng_ctx *x, eng_case_result *res, eng_id e,
                                       const eng_output *got, const eng_output *want,
                                       eng_twins *tw, const tbe_batch *b, const tbe_layout *l)
{
  const ref_order o = (ref_order)x->order[e];
  const int forward = !strcmp(got->name, "output");
  const int backward = !strcmp(got->name, "weights") || !strcmp(got->name, "momentum") ||
                       !strcmp(got->name, "psw_grad");
  eng_part all = {got->path, NULL, got->n};
  if (!strcmp(got->name, "warnings") && tw->mode == TBE_BOUNDS_WARNING &&
      ref_order_counter_differs(o)) { /* a semantic difference: its model alone */
    tbe_status s = eng_compare(x, res, e, got, &all, ENG_MODEL, want, tw, b, l);
    return s.code != TBE_OK ? s
                            : eng_note(res, e, "ref", got->path, got->name, ENG_UNSUPPORTED,
                                       "the %s order judges each bag by the previous bag's "
                                       "repaired end (TBE_SEMANTICS 2 counts bad bags by their "
                                       "original offsets): held to its model only",
                                       ref_order_name(o));
  }
  if (forward ? ref_order_forward_is_normative(o, b)
              : !backward || ref_order_backward_is_normative(o))
    return eng_compare(x, res, e, got, &all, ENG_BITWISE, want, tw, b, l);
  tbe_status s = eng_compare(x, res, e, got, &all, ENG_MODEL, want, tw, b, l);
  const int model = res->n_checks - 1;
  if (s.code == TBE_OK)
    s = eng_compare(x, res, e, got, &all, ENG_BOUND, want, tw, b, l);
  if (s.code == TBE_OK)
    eng_explain(&res->checks[model], &res->checks[res->n_checks - 1], o, b, l,
                tw->bwd ? tw->bwd->cfg : NULL);
  return s;
}

/* Every check of output got of engine e (self: e is the reference), one per part of it and per
 * row of eng_metrics for that part's path and the output's name. */
static tbe_status eng_check_output(eng_ctx *x, eng_case_result *res, eng_id e, int self,
                                   const eng_output *got, const eng_output *want, eng_twins *tw,
                                   const tbe_batch *b, const tbe_layout *l)
{
  eng_part part[2];
  tbe_status s;
  int np = eng_parts(got, b, l, part, &s);
  for (int i = 0; s.code == TBE_OK && i < np; i++) {
    int rows = 0;
    for (size_t r = 0; s.code == TBE_OK && r < sizeof eng_metrics / sizeof eng_metrics[0]; r++)
      if (eng_metrics[r].self == self && !strcmp(eng_metrics[r].path, part[i].path) &&
          !strcmp(eng_metrics[r].output, got->name)) {
        rows++;
        s = eng_compare(x, res, e, got, &part[i], eng_metrics[r].kind, want, tw, b, l);
      }
    if (s.code == TBE_OK && !rows && !self)
      s = eng_note(res, e, "ref", part[i].path, got->name, ENG_ERROR,
                   "no metric is declared for %s on path %s (eng_metrics)", got->name,
                   part[i].path);
  }
  for (int i = 0; i < np; i++)
    free(part[i].sel);
  return s;
}

/* The checks of engine e (not the reference) against the reference's run. */
static tbe_status eng_check_engine(eng_ctx *x, eng_case_result *res, eng_id e,
                                   const eng_run *run, const eng_run *ref, eng_twins *tw,
                                   const tbe_batch *b, const tbe_layout *l)
{
  tbe_status s = tbe_ok();
  if (run->status != ENG_PASS) {
    for (int i = 0; s.code == TBE_OK && i < ref->n_out; i++)
      s = eng_note(res, e, "ref", ref->out[i].path, ref->out[i].name, run->status, "%s",
                   run->reason);
    return s;
  }
  for (int i = 0; s.code == TBE_OK && i < run->n_out; i++)
    s = e >= ENG_EXT ? eng_check_ext_output(x, res, e, &run->out[i],
                                            eng_find(ref, run->out[i].name), tw, b, l)
                     : eng_check_output(x, res, e, 0, &run->out[i],
                                        eng_find(ref, run->out[i].name), tw, b, l);
  for (int i = 0; s.code == TBE_OK && i < ref->n_out; i++) {
    const eng_output *want = &ref->out[i];
    int raised = 0;
    const char *why = eng_declined_why(run, want->name, &raised);
    if (eng_find(run, want->name))
      continue;
    if (why)
      s = eng_note(res, e, "ref", want->path, want->name, raised ? ENG_FAIL : ENG_UNSUPPORTED,
                   "%s %s: %s", eng_name(e), raised ? "raised on valid input" : "declines", why);
    else if (eng_produces(e, want->name))
      s = eng_note(res, e, "ref", want->path, want->name, ENG_FAIL, "%s has no %s: %s",
                   eng_name(e), want->name, eng_missing_why(run));
    else
      s = eng_note(res, e, "ref", want->path, want->name, ENG_UNSUPPORTED,
                   "%s does not compute %s", eng_name(e), want->name);
  }
  return s;
}

/* Every check of the case from the engines' runs (gpu_only: the GPU's alone, the others being
 * the same as another configuration's); b holds the reference's repaired inputs. */
static tbe_status eng_checks(eng_ctx *x, eng_case_result *res, const eng_run runs[ENG_COUNT],
                             eng_twins *tw, const tbe_batch *b, const tbe_layout *l,
                             int gpu_only)
{
  const eng_run *ref = &runs[ENG_REF];
  tbe_status s = tbe_ok();
  if (ref->status != ENG_PASS) {
    for (int e = 0; s.code == TBE_OK && e < ENG_COUNT; e++)
      if (x->opt.engines & (1u << e))
        s = eng_note(res, (eng_id)e, e == ENG_REF ? "exact" : "ref", "forward", "output",
                     ENG_ERROR, "the reference failed: %s", ref->reason);
    return s;
  }
  for (int i = 0; s.code == TBE_OK && !gpu_only && i < ref->n_out; i++)
    s = eng_check_output(x, res, ENG_REF, 1, &ref->out[i], NULL, tw, b, l);
  for (int e = ENG_REF + 1; s.code == TBE_OK && e < ENG_COUNT; e++)
    if ((x->opt.engines & (1u << e)) && (!gpu_only || e == ENG_GPU))
      s = eng_check_engine(x, res, (eng_id)e, &runs[e], ref, tw, b, l);
  if (s.code == TBE_OK && res->n_checks == 0) /* every case stores at least its outcome */
    s = eng_note(res, ENG_REF, "exact", ref->n_out ? ref->out[0].path : "forward",
                 ref->n_out ? ref->out[0].name : "output", ENG_UNSUPPORTED,
                 "nothing to compare: %s, and no other engine ran", eng_missing_why(ref));
  return s;
}

/* Test the tester: moves element i of the named output by one unit in the last place. Records
 * in res whether it landed and how long the output was (-1: the run did not produce it). */
static void eng_inject_fault(eng_run *r, const char *name, int64_t i, eng_case_result *res)
{
  eng_output *o = (eng_output *)eng_find(r, name);
  res->fault_elements = o ? o->n : -1;
  res->fault_landed = o && i < o->n;
  if (!res->fault_landed)
    return;
  if (o->is_int)
    tbe_iset(o->data, o->itype, i, tbe_iget(o->data, o->itype, i) + 1);
  else /* the lowest mantissa bit (little-endian) */
    ((unsigned char *)o->data)[(size_t)i * tbe_dtype_size(o->dtype)] ^= 1;
}

/* Bytes the forward moves by declaration: every looked-up row, and the output. Counted in
 * double, the difference of two offsets too, and clamped to [0, 2^62]: an imported batch's
 * offsets may claim more rows than int64 counts, their difference may not fit in one, and
 * decreasing ones claim a negative count. */
static int64_t eng_forward_bytes(const tbe_batch *b, const tbe_layout *l)
{
  double rows = 0;
  for (int32_t t = 0; t < b->T; t++) {
    double L = (double)tbe_iget(b->offsets, b->itype, l->B_offsets[t + 1]) -
               (double)tbe_iget(b->offsets, b->itype, l->B_offsets[t]);
    rows += L * b->D[b->feature_table_map[t]];
  }
  double bytes = rows * (double)tbe_dtype_size(b->wdtype) +
                 (double)l->out_elems * (double)tbe_dtype_size(b->out_dtype);
  if (!(bytes > 0)) /* decreasing offsets declare fewer than no rows */
    return 0;
  return bytes < 0x1p62 ? (int64_t)bytes : INT64_C(1) << 62;
}

static void eng_add_perf(eng_case_result *res, eng_id e, const eng_run *run, int64_t bytes)
{
  const eng_output *o = eng_find(run, "output");
  if (run->status != ENG_PASS || !o)
    return;
  eng_perf *p = &res->perf[res->n_perf++];
  p->engine = e;
  p->path = o->small ? ENG_SMALL_PATH : o->path;
  p->ms = run->ms;
  p->bytes = bytes;
}

/* memcpy that allows n == 0 with NULL pointers (a batch without indices has indices NULL). */
static void copy_bytes(void *dst, const void *src, size_t n)
{
  if (n)
    memcpy(dst, src, n);
}

tbe_status eng_run_batch_configs(eng_ctx *x, tbe_batch *b, const char *canon,
                                 tbe_bounds_mode mode, const gpu_fwd_config *cfgs, int n,
                                 const gen_bwd *bwd, eng_case_result *res)
{
  for (int k = 0; k < n; k++) {
    memset(&res[k], 0, sizeof res[k]);
    res[k].ref_ms = res[k].gpu_ms = -1;
  }
  tbe_layout l;
  tbe_status s = tbe_layout_init(&l, b);
  if (s.code != TBE_OK)
    return s;
  size_t isz = tbe_itype_size(b->itype);
  size_t idx_bytes = isz * (size_t)b->N, off_bytes = isz * (size_t)(l.total_B + 1);
  /* the pristine inputs, and the reference's repaired ones (the twins' batch) */
  void *idx0 = malloc(idx_bytes + 1), *off0 = malloc(off_bytes);
  void *idx_ref = malloc(idx_bytes + 1), *off_ref = malloc(off_bytes);
  eng_run runs[ENG_COUNT], *gpu = calloc((size_t)n, sizeof *gpu); /* gpu[k]: under cfgs[k] */
  memset(runs, 0, sizeof runs);
  eng_twins tw = {.ref = &runs[ENG_REF], .bwd = bwd, .idx0 = idx0, .off0 = off0, .mode = mode};
  int64_t bytes = 0;
  if (!idx0 || !off0 || !idx_ref || !off_ref || !gpu) {
    s = tbe_error(TBE_ENOMEM, "indices", -1, "cannot copy the batch's indices and offsets");
    goto done;
  }
  copy_bytes(idx0, b->indices, idx_bytes);
  memcpy(off0, b->offsets, off_bytes);
  copy_bytes(idx_ref, b->indices, idx_bytes);
  memcpy(off_ref, b->offsets, off_bytes);
  for (int e = 0; e < ENG_COUNT; e++)
    for (int k = 0; k < (e == ENG_GPU ? n : 1); k++) {
      eng_run *r = e == ENG_GPU ? &gpu[k] : &runs[e];
      r->status = x->unavailable[e][0] ? ENG_SKIP : ENG_PASS;
      snprintf(r->reason, sizeof r->reason, "%s", x->unavailable[e]);
      if (r->status != ENG_PASS)
        continue;
      eng_job job = {canon, mode, &cfgs[k], bwd, (eng_id)e};
      copy_bytes(b->indices, idx0, idx_bytes);
      memcpy(b->offsets, off0, off_bytes);
      eng_runner((eng_id)e)(x, b, &l, &job, r);
      if (e == ENG_REF) {
        copy_bytes(idx_ref, b->indices, idx_bytes);
        memcpy(off_ref, b->offsets, off_bytes);
        bytes = eng_forward_bytes(b, &l);
      }
      if (x->opt.fault_output[0] && x->opt.fault_engine == (eng_id)e)
        eng_inject_fault(r, x->opt.fault_output, x->opt.fault_index, &res[k]);
    }
  copy_bytes(b->indices, idx_ref, idx_bytes);
  memcpy(b->offsets, off_ref, off_bytes);
  /* the reference, the oracle and the twins once; each configuration's GPU run against them
   * (the checks of the other engines once: a 268M-element case spent seconds per configuration
   * re-checking the reference against its exact twin) */
  for (int k = 0; k < n && s.code == TBE_OK; k++) {
    if (x->opt.fault_output[0] && x->opt.fault_engine != ENG_GPU && k > 0) {
      res[k].fault_elements = res[0].fault_elements;
      res[k].fault_landed = res[0].fault_landed;
    }
    runs[ENG_GPU] = gpu[k];
    s = eng_checks(x, &res[k], runs, &tw, b, &l, k > 0);
    for (int e = 0; e < ENG_COUNT; e++)
      eng_add_perf(&res[k], (eng_id)e, &runs[e], bytes);
    if (runs[ENG_REF].status == ENG_PASS)
      res[k].ref_ms = runs[ENG_REF].ms;
    if (runs[ENG_GPU].status == ENG_PASS)
      res[k].gpu_ms = runs[ENG_GPU].ms;
  }
  memset(&runs[ENG_GPU], 0, sizeof runs[ENG_GPU]); /* gpu[] owns its outputs */
  copy_bytes(b->indices, idx0, idx_bytes);
  memcpy(b->offsets, off0, off_bytes);
done:
  for (int e = 0; e < ENG_COUNT; e++)
    eng_run_free(&runs[e]);
  for (int k = 0; gpu && k < n; k++)
    eng_run_free(&gpu[k]);
  free(gpu);
  eng_twins_free(&tw);
  free(idx0);
  free(off0);
  free(idx_ref);
  free(off_ref);
  tbe_layout_free(&l);
  return s;
}

tbe_status eng_run_batch(eng_ctx *x, tbe_batch *b, const char *canon, tbe_bounds_mode mode,
                         const gpu_fwd_config *cfg, const gen_bwd *bwd, eng_case_result *res)
{
  return eng_run_batch_configs(x, b, canon, mode, cfg, 1, bwd, res);
}

tbe_status eng_run_case(eng_ctx *x, const tbe_case *c, const char *canon, eng_case_result *r)
{
  tbe_batch b;
  const tbe_knobs *k = case_knobs(c);
  gen_bwd bwd;
  tbe_status s = gen_case(c, &b, &bwd);
  if (s.code != TBE_OK) {
    memset(r, 0, sizeof *r);
    r->ref_ms = r->gpu_ms = -1;
    eng_run failed = {.status = ENG_ERROR};
    snprintf(failed.reason, sizeof failed.reason, "cannot generate the case: %s", s.message);
    eng_run runs[ENG_COUNT] = {[ENG_REF] = failed};
    return eng_checks(x, r, runs, NULL, NULL, NULL, 0);
  }
  s = eng_run_batch(x, &b, canon, case_bounds(c), &k->fwd, bwd.cfg ? &bwd : NULL, r);
  gen_case_free(&b, &bwd);
  return s;
}

void eng_case_result_free(eng_case_result *r)
{
  for (int i = 0; i < r->n_checks; i++) {
    free(r->checks[i].violations);
    cmp_free(&r->checks[i].cmp);
  }
  free(r->checks);
  memset(r, 0, sizeof *r);
}

int eng_case_failed(const eng_case_result *r)
{
  for (int i = 0; i < r->n_checks; i++)
    if (r->checks[i].status == ENG_FAIL || r->checks[i].status == ENG_ERROR)
      return 1;
  return 0;
}

