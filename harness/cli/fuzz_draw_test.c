/* fuzz_draw_test.c: the fuzz campaign's draws of the GPU backward's schedule: bwd.steal and
 * bwd.hoist come with the other schedule knobs only, each both ways, and never make a draw fail
 * to parse. Not the campaign itself (fuzz_campaign_test.py runs it).
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

/* The draws of " KEY=on" (" bwd.steal=on"): 1 for a draw that holds it, after a failure line
 * where it comes outside a schedule or changes whether the draw parses. */
static int drawn(const char *text, const char *key, int seed, int i, int *failures)
{
  char plain[4096];
  const char *at = strstr(text, key);
  if (!at)
    return 0;
  snprintf(plain, sizeof plain, "%.*s%s", (int)(at - text), text, at + strlen(key));
  if (!strstr(text, "bwd.grid=") || !strstr(text, "bwd.long=") || parses(text) != parses(plain)) {
    printf("FAIL: seed %d draw %d:%s outside a schedule, or it changes whether the draw "
           "parses: %s\n", seed, i, key, text);
    (*failures)++;
  }
  return 1;
}

int main(void)
{
  static const char *const keys[] = {" bwd.steal=on", " bwd.hoist=on"};
  int failures = 0, scheduled = 0, got[2] = {0, 0};
  for (uint64_t seed = 1; seed <= 3; seed++)
    for (uint64_t i = 0; i < 2000; i++) {
      char text[4096];
      fuzz_draw(seed, i, 4, text, sizeof text);
      scheduled += strstr(text, "bwd.grid=") != NULL;
      for (int k = 0; k < 2; k++)
        got[k] += drawn(text, keys[k], (int)seed, (int)i, &failures);
    }
  for (int k = 0; k < 2; k++) {
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
