/* bench_shapes.c: a benchmark shape's case text by name, from cases/bench.cases. Not the
 * shapes themselves (that file) nor the case language (harness/case/).
 */
#include "bench_shapes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "case.h"

#define BENCH_CASES TBE_SOURCE_DIR "/cases/bench.cases"

char *bench_shape(const char *name, const char *extra)
{
  case_list cl;
  tbe_status s = case_file_read(BENCH_CASES, &cl);
  if (s.code != TBE_OK) {
    fprintf(stderr, "%s\n", s.message);
    exit(2);
  }
  size_t n = strlen(name);
  char *text = NULL;
  for (int i = 0; i < cl.count && !text; i++) {
    const char *c = cl.lines[i].comment;
    c += strspn(c, " ");
    if (!strncmp(c, name, n) && c[n] == ':') {
      int keep = (int)strlen(cl.lines[i].text);
      while (keep > 0 && cl.lines[i].text[keep - 1] == ' ')
        keep--;
      size_t len = (size_t)keep + (extra ? strlen(extra) + 1 : 0) + 1;
      text = malloc(len);
      if (text)
        snprintf(text, len, "%.*s%s%s", keep, cl.lines[i].text, extra ? " " : "",
                 extra ? extra : "");
    }
  }
  case_list_free(&cl);
  if (!text) {
    fprintf(stderr, "%s: no shape named %s (a line whose comment starts '%s:')\n", BENCH_CASES,
            name, name);
    exit(2);
  }
  return text;
}
