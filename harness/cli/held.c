/* held.c: case results held in memory until a run may store them (held.h). Not the storing.
 */
#include <stdlib.h>
#include <string.h>

#include "held.h"

int held_push(held_list *h, const char *canon, int repeat, eng_case_result *r)
{
  held_case *v = realloc(h->v, sizeof *v * (size_t)(h->n + 1));
  if (v)
    h->v = v;
  char *c = v ? strdup(canon) : NULL;
  if (!c)
    return -1;
  v[h->n++] = (held_case){c, repeat, *r};
  memset(r, 0, sizeof *r);
  return 0;
}

void held_free(held_list *h)
{
  for (int64_t i = 0; i < h->n; i++) {
    free(h->v[i].canon);
    eng_case_result_free(&h->v[i].r);
  }
  free(h->v);
  h->v = NULL;
  h->n = 0;
}
