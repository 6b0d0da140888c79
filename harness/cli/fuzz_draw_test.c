/* fuzz_draw_test.c: the fuzz campaign's draws of the GPU backward's schedule: bwd.steal,
 * bwd.hoist and bwd.short_block come with the other schedule knobs only, each both ways, never
 * make a draw fail to parse, and bwd.short_block never comes with bwd.steal=on (the case
 * language refuses the two together); bwd.small_tc=on comes last, only where the case takes
 * it, both ways among those.
 * Not the campaign itself (fuzz_campaign_test.py runs it).
 */
#include <stdio.h>
#include <string.h>

#include "fuzz_campaign.h"

/* 1 if text parses as a case. */
static int parses(const char *text)
{
  tbe_case *c = NULL;
  const int ok = case_parse(text, &c).code == TBE_OK;
  case_free(c);
  return ok;
}

/* The draws of the token " KEY=..." that starts with key (" bwd.steal=on", " bwd.short_block="):
 * 1 for a draw that holds it, after a failure line where it comes outside a schedule or
 * changes whether the draw parses. */
static int drawn(const char *text, const char *key, int seed, int i, int *failures)
{
  char plain[4096];
  const char *at = strstr(text, key);
  if (!at)
    return 0;
  const char *end = strchr(at + 1, ' ');
  snprintf(plain, sizeof plain, "%.*s%s", (int)(at - text), text, end ? end : "");
  if (!strstr(text, "bwd.grid=") || !strstr(text, "bwd.long=") || parses(text) != parses(plain)) {
    printf("FAIL: seed %d draw %d:%s outside a schedule, or it changes whether the draw "
           "parses: %s\n", seed, i, key, text);
    (*failures)++;
  }
  return 1;
}

/* bwd.small_tc=on: where text holds it, last, and text parses with and without it (so the
 * draw took it where the case language does and changed nothing else's validity); small[0]
 * counts those, small[1] the draws without it that would parse with it. */
static void small_tc_draw(const char *text, int seed, int i, int small[2], int *failures)
{
  static const char key[] = " bwd.small_tc=on";
  const size_t n = strlen(text), k = sizeof key - 1;
  if (!strstr(text, key)) {
    char with[4096 + sizeof key];
    snprintf(with, sizeof with, "%s%s", text, key);
    small[1] += parses(text) && parses(with);
    return;
  }
  char plain[4096];
  snprintf(plain, sizeof plain, "%.*s", (int)(n - k), text);
  if (n < k || strcmp(text + n - k, key) || !parses(text) || !parses(plain)) {
    printf("FAIL: seed %d draw %d: bwd.small_tc=on not last, or where the case does not take "
           "it: %s\n", seed, i, text);
    (*failures)++;
  }
  small[0]++;
}

int main(void)
{
  static const char *const keys[] = {" bwd.steal=on", " bwd.hoist=on", " bwd.short_block="};
  enum { NKEYS = sizeof keys / sizeof keys[0] };
  int failures = 0, scheduled = 0, got[NKEYS] = {0}, small[2] = {0, 0};
  for (uint64_t seed = 1; seed <= 3; seed++)
    for (uint64_t i = 0; i < 2000; i++) {
      char text[4096];
      fuzz_draw(seed, i, 4, text, sizeof text);
      scheduled += strstr(text, "bwd.grid=") != NULL;
      for (int k = 0; k < NKEYS; k++)
        got[k] += drawn(text, keys[k], (int)seed, (int)i, &failures);
      if (strstr(text, keys[0]) && strstr(text, keys[2])) {
        printf("FAIL: seed %d draw %d: bwd.short_block with bwd.steal=on: %s\n", (int)seed,
               (int)i, text);
        failures++;
      }
      small_tc_draw(text, (int)seed, (int)i, small, &failures);
    }
  if (small[0] == 0 || small[1] == 0) {
    printf("FAIL: bwd.small_tc=on in %d draws, left out of %d that take it: not both ways\n",
           small[0], small[1]);
    failures++;
  }
  printf("%s: bwd.small_tc=on in %d draws, left out of %d more that take it\n",
         failures ? "FAIL" : "pass", small[0], small[1]);
  for (int k = 0; k < NKEYS; k++) {
    if (got[k] == 0 || got[k] == scheduled) {
      printf("FAIL: %d of %d scheduled draws hold%s: it is not drawn both ways\n", got[k],
             scheduled, keys[k]);
      failures++;
    }
    printf("%s: %d of %d scheduled draws hold%s\n", failures ? "FAIL" : "pass", got[k],
           scheduled, keys[k]);
  }
  return failures != 0;
}
