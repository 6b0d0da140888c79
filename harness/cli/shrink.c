/* shrink.c: delta debugging over a case's key=value tokens (shrink.h). Not a minimiser of the
 * generated batch: it only rewrites the case text, so every step is a case a user can replay.
 *
 * Order: ddmin over the tokens (remove chunks of n/2, n/4, ..., 1 tokens, keeping each removal
 * that still fails), then each absent shape key set to 1, then for every number in every token
 * the lower values 0, 1, n/2, n-1, again until a pass changes nothing. A candidate is parsed
 * and printed canonically before it is tried; one that does not parse, or is not smaller, is
 * skipped without a try. Each candidate first looks at the clock: past the deadline, the best so
 * far is the result.
 */
#include "shrink.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "case.h"
#include "gen.h"
#include "engine.h"
#include "tbe.h"

#define NUM_CAP (INT64_C(1) << 32)

int shrink_measure(const char *text, long long m[3])
{
  tbe_case *c;
  tbe_batch b;
  if (case_parse(text, &c).code != TBE_OK)
    return -1;
  tbe_status st = case_generate(c, &b);
  case_free(c);
  if (st.code != TBE_OK)
    return -1;
  m[0] = b.table_offset[b.num_tables] + b.N + tbe_total_B(&b);
  tbe_batch_free(&b);
  m[1] = m[2] = 0;
  for (const char *p = text; *p;) {
    while (*p == ' ')
      p++;
    if (!*p)
      break;
    m[2]++;
    while (*p && *p != ' ') {
      if (!isdigit((unsigned char)*p)) {
        p++;
        continue;
      }
      long long v = 0;
      while (isdigit((unsigned char)*p)) {
        v = v < NUM_CAP ? v * 10 + (*p - '0') : NUM_CAP;
        p++;
      }
      m[1] += v < NUM_CAP ? v : NUM_CAP;
    }
  }
  return 0;
}

int shrink_smaller(const long long a[3], const long long b[3])
{
  for (int i = 0; i < 3; i++)
    if (a[i] != b[i])
      return a[i] < b[i];
  return 0;
}

/* The canonical text of a case text (malloc'd), or NULL if it does not parse. */
static char *canonicalize(const char *text)
{
  tbe_case *c;
  if (case_parse(text, &c).code != TBE_OK)
    return NULL;
  int n = case_format(c, NULL, 0);
  char *s = malloc((size_t)n + 1);
  if (s)
    case_format(c, s, (size_t)n + 1);
  case_free(c);
  return s;
}

typedef struct {
  char *best; /* canonical, fails */
  long long size[3]; /* its shrink_measure */
  shrink_pred pred;
  void *ctx;
  int max_tries;
  double deadline_ms;
  shrink_stats *st;
} shrinker;

/* Tries a candidate text: 1 if it became the new best, 0 if not, -1 to stop. */
static int try_text(shrinker *s, const char *text)
{
  if (s->st->stopped == SHRINK_DONE && eng_now_ms() >= s->deadline_ms)
    s->st->stopped = SHRINK_TIME;
  if (s->st->stopped != SHRINK_DONE)
    return -1;
  char *canon = canonicalize(text);
  long long m[3];
  if (!canon || shrink_measure(canon, m) || !shrink_smaller(m, s->size)) {
    free(canon);
    return 0;
  }
  if (s->st->tries >= s->max_tries) {
    free(canon);
    s->st->stopped = SHRINK_TRIES;
    return -1;
  }
  int r = s->pred(canon, s->ctx);
  s->st->tries += r != SHRINK_NO_TIME;
  if (r < 0) {
    free(canon);
    s->st->stopped = r == SHRINK_NO_TIME ? SHRINK_TIME : SHRINK_FAILED;
    return -1;
  }
  if (!r) {
    free(canon);
    return 0;
  }
  s->st->accepted++;
  free(s->best);
  s->best = canon;
  memcpy(s->size, m, sizeof m);
  return 1;
}

/* Splits s->best into tokens: pointers into the malloc'd copy *buf. Returns the count. */
static int split(const char *text, char **buf, char ***tok)
{
  *buf = strdup(text);
  *tok = calloc(strlen(text) / 2 + 2, sizeof **tok);
  if (!*buf || !*tok)
    return -1;
  int n = 0;
  for (char *p = strtok(*buf, " "); p; p = strtok(NULL, " "))
    (*tok)[n++] = p;
  return n;
}

/* The text of tokens [0, n) without those in [skip, skip + len), or with token `at` replaced
 * by `with` (when with != NULL). */
static char *join(char **tok, int n, int skip, int len, int at, const char *with)
{
  size_t cap = 2;
  for (int i = 0; i < n; i++)
    cap += strlen(tok[i]) + 1;
  if (with)
    cap += strlen(with);
  char *s = malloc(cap), *p = s;
  if (!s)
    return NULL;
  for (int i = 0; i < n; i++) {
    if (i >= skip && i < skip + len)
      continue;
    const char *t = with && i == at ? with : tok[i];
    size_t k = strlen(t);
    if (p != s)
      *p++ = ' ';
    memcpy(p, t, k);
    p += k;
  }
  *p = '\0';
  return s;
}

/* Tries the text join() makes: as try_text. */
static int try_join(shrinker *s, char **tok, int n, int skip, int len, int at, const char *with)
{
  char *text = join(tok, n, skip, len, at, with);
  int r = text ? try_text(s, text) : -1;
  free(text);
  return r;
}

/* Frees what split() made; passes r on. */
static int unsplit(char *buf, char **tok, int r)
{
  free(buf);
  free(tok);
  return r;
}

/* ddmin over the tokens: 1 if anything was removed, -1 to stop or out of memory. */
static int drop_tokens(shrinker *s)
{
  int changed = 0;
  for (int len = -1;;) {
    char *buf, **tok;
    int n = split(s->best, &buf, &tok);
    if (n < 0)
      return unsplit(buf, tok, -1);
    if (len < 0)
      len = n / 2 > 0 ? n / 2 : 1;
    int r = 0;
    for (int at = 0; r == 0 && at < n; at += len)
      r = try_join(s, tok, n, at, len, -1, NULL);
    if (unsplit(buf, tok, r) < 0)
      return -1;
    if (r > 0) {
      changed = 1;
      continue; /* the same chunk size on the smaller case */
    }
    if (len == 1)
      return changed;
    len /= 2;
  }
}

/* Sets each absent shape key to 1 (the defaults are larger): 1 if anything changed, -1 to stop. */
static int add_small_shape(shrinker *s)
{
  static const char *const keys[] = {"T", "B", "E", "D", "L"};
  int changed = 0;
  for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
    size_t len = strlen(keys[k]);
    int present = !strncmp(s->best, keys[k], len) && s->best[len] == '=';
    char probe[8];
    snprintf(probe, sizeof probe, " %s=", keys[k]);
    if (present || strstr(s->best, probe))
      continue;
    size_t n = strlen(s->best) + 8;
    char *text = malloc(n);
    if (!text)
      return -1;
    snprintf(text, n, "%s=1 %s", keys[k], s->best);
    int r = try_text(s, text);
    free(text);
    if (r < 0)
      return -1;
    changed |= r;
  }
  return changed;
}

/* Lowers each number of each token in turn: 1 if anything changed, -1 to stop. */
static int lower_numbers(shrinker *s)
{
  int changed = 0;
  for (int i = 0;; i++) {
    char *buf, **tok;
    int n = split(s->best, &buf, &tok);
    if (n < 0 || i >= n)
      return unsplit(buf, tok, n < 0 ? -1 : changed);
    const char *t = tok[i];
    int r = 0;
    for (const char *p = strchr(t, '='); r == 0 && p && *p; p++) {
      if (!isdigit((unsigned char)*p) || isdigit((unsigned char)p[-1]))
        continue;
      size_t at = (size_t)(p - t), k = strspn(p, "0123456789");
      long long v = k < 12 ? strtoll(p, NULL, 10) : NUM_CAP;
      long long lower[4] = {0, 1, v / 2, v - 1};
      for (int c = 0; r == 0 && c < 4; c++) {
        if (lower[c] < 0 || lower[c] >= v)
          continue;
        char with[600];
        snprintf(with, sizeof with, "%.*s%lld%s", (int)at, t, lower[c], p + k);
        r = try_join(s, tok, n, -1, 0, i, with);
      }
    }
    if (unsplit(buf, tok, r) < 0)
      return -1;
    if (r > 0) {
      changed = 1;
      i--; /* the same token again, now smaller */
    }
  }
}

const char *shrink_stop_reason(shrink_stop s)
{
  switch (s) {
  case SHRINK_DONE: return "";
  case SHRINK_TRIES: return "the most tries were made";
  case SHRINK_TIME: return "out of time";
  case SHRINK_FAILED: return "a candidate could not be run";
  }
  return "?";
}

tbe_status shrink_case(const char *canon, shrink_pred still_fails, void *ctx, int max_tries,
                       double deadline_ms, char **out, shrink_stats *stats)
{
  memset(stats, 0, sizeof *stats);
  *out = NULL;
  shrinker s = {canonicalize(canon), {0}, still_fails, ctx, max_tries, deadline_ms, stats};
  if (!s.best || shrink_measure(s.best, s.size)) {
    free(s.best);
    return tbe_error(TBE_EINVAL, "case", -1, "cannot shrink '%s': it does not generate", canon);
  }
  int round = 1;
  while (round > 0) {
    int a = drop_tokens(&s);
    int b = a < 0 ? -1 : add_small_shape(&s);
    int c = b < 0 ? -1 : lower_numbers(&s);
    round = a < 0 || b < 0 || c < 0 ? -1 : a | b | c;
  }
  if (round < 0 && stats->stopped == SHRINK_DONE) /* out of memory */
    stats->stopped = SHRINK_FAILED;
  *out = s.best;
  return tbe_ok();
}
