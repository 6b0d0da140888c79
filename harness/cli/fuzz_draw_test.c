/* fuzz_draw_test.c: the fuzz campaign's draws of the GPU backward's schedule: bwd.steal comes
 * with the other schedule knobs only, both ways, and never makes a draw fail to parse. Not the
 * campaign itself (fuzz_campaign_test.py runs it).
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

int main(void)
{
  int failures = 0, scheduled = 0, stolen = 0;
  for (uint64_t seed = 1; seed <= 3; seed++)
    for (uint64_t i = 0; i < 2000; i++) {
      char text[4096], plain[4096];
      fuzz_draw(seed, i, 4, text, sizeof text);
      const char *steal = strstr(text, " bwd.steal=on");
      const int grid = strstr(text, "bwd.grid=") != NULL;
      scheduled += grid;
      stolen += steal != NULL;
      if (!steal)
        continue;
      snprintf(plain, sizeof plain, "%.*s%s", (int)(steal - text), text,
               steal + strlen(" bwd.steal=on"));
      if (!grid || !strstr(text, "bwd.long=") || parses(text) != parses(plain)) {
        printf("FAIL: seed %d draw %d: bwd.steal outside a schedule, or it changes whether "
               "the draw parses: %s\n", (int)seed, (int)i, text);
        failures++;
      }
    }
  if (stolen == 0 || stolen == scheduled) {
    printf("FAIL: %d of %d scheduled draws steal: bwd.steal is not drawn both ways\n", stolen,
           scheduled);
    failures++;
  }
  printf("%s: %d of %d scheduled draws steal\n", failures ? "FAIL" : "pass", stolen, scheduled);
  return failures != 0;
}
