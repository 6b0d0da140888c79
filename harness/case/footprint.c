/* footprint.c: a case's lookups, memory and cost in time from its parsed shape, before
 * generation. Not the generator (gen.c) and not a measurement: the memory figures are sums over
 * the arrays that gen.c, the engines, export.c and ref/ allocate, written down here once.
 */
#include "footprint.h"

#include <math.h>

#include "case_private.h"
#include "gen.h"

/* A quantity's expected and largest value. */
typedef struct {
  double mean, max;
} fp_range;

/* Entry i of a per-table or per-(feature, rank) spec (FIXED, RANGE or LIST). */
static fp_range fp_spec(const case_spec *s, int64_t i)
{
  if (s->kind == CASE_LIST)
    return (fp_range){(double)s->list[i], (double)s->list[i]};
  if (s->kind == CASE_RANGE)
    return (fp_range){0.5 * ((double)s->lo + (double)s->hi), (double)s->hi};
  return (fp_range){(double)s->lo, (double)s->lo};
}

/* Bags of feature t: the sum over its ranks (one rank without VBE). */
static fp_range fp_bags(const tbe_case *c, int32_t t)
{
  fp_range r = {0, 0};
  for (int32_t k = 0; k < c->R; k++) {
    fp_range b = fp_spec(&c->B, (int64_t)t * c->R + k);
    r.mean += b.mean;
    r.max += b.max;
  }
  return r;
}

/* Length of one bag: a normal L is rounded and clamped into 0..CASE_MAX_COUNT. */
static fp_range fp_L(const tbe_case *c)
{
  if (c->L.kind == CASE_NORMAL)
    return (fp_range){c->L.mu > 0 ? c->L.mu : 0, (double)CASE_MAX_COUNT};
  return fp_spec(&c->L, 0);
}

/* Lookups of the features of table j. */
static fp_range fp_lookups(const tbe_case *c, int32_t j)
{
  fp_range bags = {0, 0}, L = fp_L(c);
  for (int32_t t = 0; t < c->T; t++)
    if (c->map[t] == j) {
      fp_range b = fp_bags(c, t);
      bags.mean += b.mean;
      bags.max += b.max;
    }
  return (fp_range){bags.mean * L.mean, bags.max * L.max};
}

double footprint_max_lookups(const tbe_case *c, int32_t j) { return fp_lookups(c, j).max; }

double footprint_lookups(const tbe_case *c, int32_t j) { return fp_lookups(c, j).mean; }

static int64_t fp_bytes(double x) { return x >= 9.2e18 ? INT64_MAX : (int64_t)x; }

void footprint_case(const tbe_case *c, int with_gpu, footprint *f)
{
  double W = 0, rows = 0, bags = 0, out = 0; /* weights, rows, bags, output elements */
  for (int32_t j = 0; j < c->num_tables; j++) {
    double E = fp_spec(&c->E, j).mean;
    W += E * fp_spec(&c->D, j).mean;
    rows += E;
  }
  for (int32_t t = 0; t < c->T; t++) {
    double b = fp_bags(c, t).mean;
    bags += b;
    out += b * fp_spec(&c->D, c->map[t]).mean;
  }
  double N = bags * fp_L(c).mean;
  if (c->pool == TBE_POOL_NONE) /* [N, D]: every feature has the same D */
    out = N * fp_spec(&c->D, c->map[0]).mean;
  double ws = (double)tbe_dtype_size(c->wdtype), os = (double)tbe_dtype_size(c->out);
  double is = (double)tbe_itype_size(c->idx);
  const ref_bwd_config *bwd = &c->knobs.bwd;
  int backward = bwd->opt.kind != REF_OPT_NONE;
  int adagrad = bwd->opt.kind == REF_OPT_ROWWISE_ADAGRAD;
  int corrupt = 0;
  for (int k = 0; k < CASE_CORRUPT_KINDS; k++)
    corrupt |= c->corrupt[k] != 0;

  double ixof = is * (N + bags + 1); /* indices and offsets */
  /* the generated batch and the backward's inputs */
  double inputs = W * ws + ixof + (c->weighted ? 4 * N : 0) +
                  (backward ? out * os + (adagrad ? 4 * rows : 0) : 0);
  /* gen.c while it draws: the int64 offsets, and with corruptions a second copy and flags */
  double generating = 8 * (bags + 1) + (corrupt ? 9 * (bags + 1) : 0);
  /* engine.c: the pristine copies, the reference's output (its buffer and the pushed copy),
   * repaired indices and offsets, and the exact forward's value and bound per element */
  double running = ixof + 2 * out * os + ixof + 16 * out;
  if (backward) /* copies of the weights, momentum and psw gradient, twice (run and pushed);
                 * the sort (ref/transpose.c: about 40 bytes a lookup) and the fp32 gradient */
    running += 2 * (W * ws + (adagrad ? 4 * rows : 0) + (c->weighted ? 4 * N : 0)) + 40 * N +
               4 * out;
  if (backward && bwd->combine == REF_COMBINE_ATOMIC) /* exact twin: value and bound, fp64 */
    running += 16 * W + (adagrad ? 16 * rows : 0);
  double device = 0;
  if (with_gpu) {
    /* the GPU's results copied back and pushed, and the exact twin of its small-table path */
    running += 2 * (out * os + ixof) + 16 * out;
    /* gpu/: weights, indices and offsets with their pristine copies, weights, the output */
    device = W * ws + 2 * ixof + (c->weighted ? 4 * N : 0) + out * os;
  }
  f->host = fp_bytes(inputs + (running > generating ? running : generating));
  f->gpu = fp_bytes(device);
}

/* Upper estimates of one case's wall time, measured on a loaded 2-core x86 host over drawn cases
 * (SL 10^6 ones included; the NumPy oracle dominates those): a fixed cost per case (generation,
 * export, the oracle's round trip), the reference, exact twins and comparisons by the bytes
 * footprint.h says a run touches, the oracle by lookups (its backward several times slower per
 * lookup) plus one Python step per chunk of the longest run of one row; a case that FATAL stops
 * at the bounds check (a corruption, or some ten invalid indices expected) costs the oracle
 * only its bounds check. */
#define COST_CASE_MS 300.0
#define COST_BYTE_MS 3e-6
#define COST_CHECK_MS 2e-4
#define COST_LOOKUP_MS 1.5e-3
#define COST_BWD_LOOKUP_MS 5e-3
#define COST_STEP_MS 0.02

/* The fewest rows table j can have. */
static double min_rows(const tbe_case *c, int32_t j)
{
  return (double)(c->E.kind == CASE_LIST ? c->E.list[j] : c->E.lo);
}

/* The expected share of table j's lookups that its hottest drawn row gets: twice the uniform
 * share, or zipf's row 0, 1 / H(E, alpha), with H bounded below by its integral. */
static double top_share(const tbe_case *c, int32_t j)
{
  double E = min_rows(c, j), a = c->alpha;
  if (c->dist == CASE_DIST_UNIFORM)
    return E > 2 ? 2 / E : 1;
  double h = fabs(a - 1) < 1e-9 ? log(E + 1) : (pow(E + 1, 1 - a) - 1) / (1 - a);
  return h > 1 ? 1 / h : 1;
}

double footprint_cost_ms(const tbe_case *c, int with_gpu, int with_oracle)
{
  footprint f;
  footprint_case(c, with_gpu, &f);
  double ms = COST_CASE_MS + COST_BYTE_MS * (double)f.host;
  if (!with_oracle)
    return ms;
  double N = 0, run = 0; /* lookups; the longest run of one row */
  for (int32_t j = 0; j < c->num_tables; j++) {
    double n = footprint_lookups(c, j);
    N += n;
    run = fmax(run, n * top_share(c, j));
  }
  ms += COST_CHECK_MS * N; /* the oracle's bounds check */
  int corrupt = 0;
  for (int k = 0; k < CASE_CORRUPT_KINDS; k++)
    corrupt |= c->corrupt[k] != 0;
  if (c->bounds == TBE_BOUNDS_FATAL && /* it stops at the bounds check */
      (corrupt || (c->invalid_kind != CASE_INVALID_PRUNED && c->invalid * N >= 10)))
    return ms;
  const ref_bwd_config *bwd = &c->knobs.bwd;
  if (bwd->opt.kind == REF_OPT_NONE)
    return ms + COST_LOOKUP_MS * N;
  for (int32_t i = 0; i < c->num_hot; i++)
    run = fmax(run, (double)c->hot[i].sl);
  double chunk = (double)bwd->chunk;
  double steps = ref_bwd_is_long(bwd, (int64_t)run) ? run / chunk + chunk : run;
  return ms + COST_BWD_LOOKUP_MS * N + COST_STEP_MS * steps;
}
