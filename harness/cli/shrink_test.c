/* shrink_test.c: the shrinker's stops: a deadline already past tries nothing, a predicate out of
 * time keeps the smallest failing case found so far, max_tries counts only what was run, and an
 * uncut shrink reaches a minimal case, keeping a key with the key it needs (psw, weighted). Not
 * the campaign's planted-fault test (fuzz_campaign_test.py), which shrinks through the engines.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "shrink.h"
#include "test_util.h"

#define CASE "T=2 B=6 E=40 D=8 L=5 seed=3"

/* "Fails" while the case has D >= 4; after `budget` runs, answers SHRINK_NO_TIME. */
typedef struct {
  int runs, budget;
} wide;

/* "Fails" while every per-sample weight is fixed (psw=). */
static int still_fixed(const char *canon, void *ctx)
{
  (void)ctx;
  return strstr(canon, " psw=") != NULL;
}

static int still_wide(const char *canon, void *ctx)
{
  wide *w = ctx;
  if (w->runs == w->budget)
    return SHRINK_NO_TIME;
  w->runs++;
  const char *d = strstr(canon, "D=");
  return d && (d == canon || d[-1] == ' ') && strtol(d + 2, NULL, 10) >= 4;
}

int main(void)
{
  char *out;
  shrink_stats st;
  wide w = {0, -1};
  CHECK(shrink_case(CASE, still_wide, &w, 300, INFINITY, &out, &st).code == TBE_OK, "shrink");
  CHECK(st.stopped == SHRINK_DONE && !strcmp(out, "B=0 E=1 D=4 seed=0") && st.tries == w.runs,
        "uncut: '%s' after %d tries, stop %d", out, st.tries, (int)st.stopped);
  free(out);

  w = (wide){0, -1};
  CHECK(shrink_case(CASE, still_wide, &w, 300, eng_now_ms() - 1, &out, &st).code == TBE_OK,
        "past deadline");
  CHECK(st.stopped == SHRINK_TIME && st.tries == 0 && w.runs == 0 && !strcmp(out, CASE),
        "past deadline: '%s' after %d tries, stop %d", out, st.tries, (int)st.stopped);
  free(out);

  w = (wide){0, 3};
  CHECK(shrink_case(CASE, still_wide, &w, 300, INFINITY, &out, &st).code == TBE_OK, "no time");
  long long m[3], m0[3];
  CHECK(st.stopped == SHRINK_TIME && st.tries == 3 && st.accepted >= 1 &&
            !shrink_measure(out, m) && !shrink_measure(CASE, m0) && shrink_smaller(m, m0) &&
            still_wide(out, &(wide){0, -1}) == 1,
        "out of time: '%s' after %d tries (%d kept), stop %d", out, st.tries, st.accepted,
        (int)st.stopped);
  free(out);

  w = (wide){0, -1};
  CHECK(shrink_case(CASE, still_wide, &w, 2, INFINITY, &out, &st).code == TBE_OK, "tries");
  CHECK(st.stopped == SHRINK_TRIES && st.tries == 2 && w.runs == 2,
        "max tries: %d tries, stop %d", st.tries, (int)st.stopped);
  CHECK(*shrink_stop_reason(SHRINK_TIME) && !*shrink_stop_reason(SHRINK_DONE), "reasons");
  free(out);

  /* psw needs weighted=1: the shrinker keeps both (a case without weighted does not parse) */
  CHECK(shrink_case(CASE " weighted=1 psw=-1.25 opt=sgd", still_fixed, NULL, 300, INFINITY, &out,
                    &st).code == TBE_OK, "psw");
  CHECK(st.stopped == SHRINK_DONE && !strcmp(out, "B=0 E=1 D=1 weighted=1 psw=0 seed=0"),
        "psw: '%s' after %d tries, stop %d", out, st.tries, (int)st.stopped);
  free(out);
  return TEST_MAIN_RESULT();
}
