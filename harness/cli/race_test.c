/* race_test.c: what `tbecheck race` does without a GPU: its schedule cycle covers every
 * combination, its drawn cases parse, generate and run through the reference with the long runs
 * they promise, and the reference helper keeps the batch pristine. Not the race itself (the GPU
 * test cli_race runs it on the GPU host).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen.h"
#include "race.h"

static int failures;

#define CHECK(cond, ...)                                                                  \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      failures++;                                                                         \
      printf("FAIL %s:%d: ", __FILE__, __LINE__);                                         \
      printf(__VA_ARGS__);                                                                \
      printf("\n");                                                                       \
    }                                                                                     \
  } while (0)

/* The index of v among the *n distinct values of vals so far (v appended when new). */
static int value_index(int *vals, int *n, int v)
{
  int i = 0;
  while (i < *n && vals[i] != v)
    i++;
  if (i == *n)
    vals[(*n)++] = v;
  return i;
}

static void test_cycle(void)
{
  /* the 840 settings of grid, order, noise, delay, steal and hoist, each with its 11 short
   * blocks, and the launches of each short block where steal is off */
  static int seen[840], blocks[GPU_MAX_SHORT_BLOCK + 1];
  int nonzero = 0, stolen = 0, hoisted = 0, blocked_stolen = 0;
  race_schedule v = race_variant(0);
  CHECK(v.grid == 0 && v.order == 0 && v.noise == 0 && v.delay == 0 && v.steal == 0 &&
            v.hoist == 0 && v.short_block == 0, "launch 0 is not today's schedule");
  v = race_variant(1);
  CHECK(v.short_block > 0, "launch 1 takes no short block: a default race of 20 launches would "
        "take one late");
  v = race_variant(2);
  CHECK(v.steal == 1, "launch 2 does not steal: a default race of 20 launches would steal late");
  v = race_variant(4);
  CHECK(v.hoist == 1, "launch 4 does not hoist: a default race of 20 launches would hoist late");
  int grids[RACE_CYCLE], ng = 0, delays[RACE_CYCLE], nd = 0;
  for (int k = 0; k < RACE_CYCLE; k++) {
    v = race_variant(k);
    const int g = value_index(grids, &ng, v.grid), dl = value_index(delays, &nd, v.delay);
    CHECK(v.order >= 0 && v.order < 3 && (v.noise == 0 || v.noise == 1) && v.grid >= 0 &&
              v.delay >= 0 && v.delay <= GPU_MAX_DELAY && (v.steal == 0 || v.steal == 1) &&
              (v.hoist == 0 || v.hoist == 1) && v.short_block >= 0 &&
              v.short_block <= GPU_MAX_SHORT_BLOCK && (v.short_block & (v.short_block - 1)) == 0,
          "launch %d", k);
    nonzero += v.delay > 0;
    stolen += v.steal;
    hoisted += v.hoist;
    blocked_stolen += v.steal && v.short_block;
    if (!v.steal && v.short_block <= GPU_MAX_SHORT_BLOCK)
      blocks[v.short_block]++;
    if (g < 5 && dl < 7)
      seen[((((g * 3 + v.order) * 2 + v.noise) * 7 + dl) * 2 + v.steal) * 2 + v.hoist]++;
  }
  CHECK(ng == 5 && nd == 7 && ng * 3 * 2 * nd * 2 * 2 * 11 == RACE_CYCLE, "%d grids and %d "
        "delays in a cycle of %d", ng, nd, RACE_CYCLE);
  CHECK(nonzero == RACE_CYCLE * 6 / 7, "%d of %d launches with a delay", nonzero, RACE_CYCLE);
  CHECK(stolen == RACE_CYCLE / 2, "%d of %d launches steal", stolen, RACE_CYCLE);
  CHECK(hoisted == RACE_CYCLE / 2, "%d of %d launches hoist", hoisted, RACE_CYCLE);
  CHECK(blocked_stolen == 0, "%d launches steal with a short block (the two exclude each other)",
        blocked_stolen);
  for (int i = 0; i < 840; i++)
    CHECK(seen[i] == 11, "combination %d taken %d times in one cycle, not once per short block",
          i, seen[i]);
  /* of the launches without steal, 4 in 11 the grid-stride loop, 2 in 11 blocks of 8, 1 in 11
   * each other K */
  const int unit = RACE_CYCLE / 2 / 11;
  for (int b = 0; b <= GPU_MAX_SHORT_BLOCK; b++)
    CHECK(blocks[b] == ((b & (b - 1)) ? 0 : b == 0 ? 4 * unit : b == 8 ? 2 * unit : unit),
          "%d launches without steal take bwd.short_block=%d", blocks[b], b);
}

/* Every drawn case parses, generates with its hot rows, and runs through the reference; it is
 * fused and deterministic, with an optimizer, a small chunk and threshold, and a hot row long
 * enough for 4 chunk programs; the batch comes back pristine. */
static void test_draws(void)
{
  int weighted = 0, adagrad = 0, sr = 0;
  for (uint64_t i = 0; i < 40; i++) {
    char text[2048];
    race_draw(7, i, 1, text, sizeof text);
    tbe_case *c;
    tbe_status s = case_parse(text, &c);
    CHECK(s.code == TBE_OK, "draw %d '%s' does not parse: %s", (int)i, text, s.message);
    if (s.code != TBE_OK)
      continue;
    const tbe_knobs *k = case_knobs(c);
    CHECK(k->gpu_bwd.long_mode == GPU_LONG_FUSED && k->bwd.combine == REF_COMBINE_DETERMINISTIC &&
              k->bwd.opt.kind != REF_OPT_NONE && k->bwd.chunk <= 32 && k->bwd.threshold <= 64,
          "draw '%s' is not a fused deterministic race", text);
    const char *hot = strstr(text, "hot=");
    long long table, row, sl = 0;
    CHECK(hot && sscanf(hot, "hot=%lld:%lld:%lld", &table, &row, &sl) == 3 &&
              sl >= k->bwd.threshold && sl >= 4 * k->bwd.chunk,
          "draw '%s' has no long run of 4 chunks", text);
    adagrad += k->bwd.opt.kind == REF_OPT_ROWWISE_ADAGRAD;
    sr += k->bwd.opt.sr;
    race_ref r;
    s = race_ref_run(c, &r);
    CHECK(s.code == TBE_OK && r.bounds.code == TBE_OK && r.w && r.out,
          "draw '%s': the reference: %s", text, s.message);
    tbe_batch b;
    gen_bwd bwd;
    if (s.code == TBE_OK && gen_case(c, &b, &bwd).code == TBE_OK) {
      size_t isz = tbe_itype_size(b.itype);
      CHECK(!memcmp(b.indices, r.b.indices, isz * (size_t)b.N) &&
                !memcmp(b.offsets, r.b.offsets, isz * (size_t)(r.l.total_B + 1)),
            "draw '%s': the batch is not pristine after the reference", text);
      weighted += b.per_sample_weights != NULL;
      CHECK((r.m != NULL) == (k->bwd.opt.kind == REF_OPT_ROWWISE_ADAGRAD) &&
                (r.psw != NULL) == (b.per_sample_weights != NULL), "draw '%s': outputs", text);
      gen_case_free(&b, &bwd);
    }
    race_ref_free(&r);
    case_free(c);
  }
  CHECK(weighted && adagrad && sr && weighted < 40 && adagrad < 40,
        "40 draws: %d weighted, %d Adagrad, %d stochastic rounding", weighted, adagrad, sr);
}

/* A FATAL offender stops the call: no output, no backward, no error. */
static void test_fatal(void)
{
  tbe_case *c;
  case_parse("B=8 L=3 invalid=0.5 bounds=fatal opt=sgd", &c);
  race_ref r;
  tbe_status s = race_ref_run(c, &r);
  CHECK(s.code == TBE_OK && r.bounds.code == TBE_EBOUNDS && !r.out && !r.w,
        "FATAL: %s / %s", s.message, r.bounds.message);
  race_ref_free(&r);
  case_free(c);
}

int main(void)
{
  test_cycle();
  test_draws();
  test_fatal();
  if (failures)
    return 1;
  printf("all checks passed\n");
  return 0;
}
