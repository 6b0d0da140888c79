/* bench_shapes.c: a benchmark shape's case text by name, and the names sharing a prefix, from
 * cases/bench.cases. Not the shapes themselves (that file) nor the case language (harness/case/).
 */
#include "bench_shapes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "case.h"

#define BENCH_CASES TBE_SOURCE_DIR "/cases/bench.cases"

/* The file's lines; exits with status 2 and the message if it cannot be read. */
static case_list read_shapes(void)
{
  case_list cl;
  tbe_status s = case_file_read(BENCH_CASES, &cl);
  if (s.code != TBE_OK) {
    fprintf(stderr, "%s\n", s.message);
    exit(2);
  }
  return cl;
}

/* A line's shape name: its comment without leading blanks, up to the colon (*len: its length;
 * 0 where the comment has no colon). */
static const char *shape_name(const case_line *line, size_t *len)
{
  const char *c = line->comment + strspn(line->comment, " ");
  const char *colon = strchr(c, ':');
  *len = colon ? (size_t)(colon - c) : 0;
  return c;
}

char *bench_shape(const char *name, const char *extra)
{
  case_list cl = read_shapes();
  size_t n = strlen(name);
  char *text = NULL;
  for (int i = 0; i < cl.count && !text; i++) {
    size_t named;
    const char *c = shape_name(&cl.lines[i], &named);
    if (named == n && !strncmp(c, name, n)) {
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

char **bench_shape_names(const char *prefix, int *count)
{
  case_list cl = read_shapes();
  char **names = calloc((size_t)cl.count + 1, sizeof *names);
  size_t n = strlen(prefix);
  *count = 0;
  for (int i = 0; names && i < cl.count; i++) {
    size_t len;
    const char *c = shape_name(&cl.lines[i], &len);
    if (len >= n && !strncmp(c, prefix, n) && (names[*count] = malloc(len + 1)) != NULL)
      snprintf(names[(*count)++], len + 1, "%.*s", (int)len, c);
  }
  case_list_free(&cl);
  if (!names) {
    fprintf(stderr, "%s: out of memory\n", BENCH_CASES);
    exit(2);
  }
  if (!*count) {
    fprintf(stderr, "%s: no shape named %s... (a line whose comment starts '%s')\n", BENCH_CASES,
            prefix, prefix);
    exit(2);
  }
  return names;
}

void bench_shape_names_free(char **names, int count)
{
  for (int i = 0; i < count; i++)
    free(names[i]);
  free(names);
}

int bench_wanted(const char *only, const char *name)
{
  const size_t n = strlen(name);
  for (const char *p = only; p && (p = strstr(p, name)) != NULL; p += n)
    if ((p == only || p[-1] == ',') && (p[n] == ',' || !p[n]))
      return 1;
  return !only;
}
