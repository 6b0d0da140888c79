/* fuzz_case.c: libFuzzer target for the case language (harness/case/case.c): any text is refused
 * with a message naming a key, or parsed into a case whose canonical print parses back to an
 * equal case and prints the same (print(parse(x)) parses, round-trips, and is canonical).
 * Not the case tests (harness/case/case_test.c), which hold the named cases and their errors.
 */
#include <string.h>

#include "case.h"
#include "fuzz.h"

#define MAX_TEXT 4096

/* The canonical text of c, malloc'd. */
static char *canonical(const tbe_case *c)
{
  int n = case_format(c, NULL, 0);
  FUZZ_CHECK(n >= 0, "case_format returned %d", n);
  char *s = malloc((size_t)n + 1);
  FUZZ_CHECK(s, "out of memory");
  FUZZ_CHECK(case_format(c, s, (size_t)n + 1) == n, "case_format gave two lengths");
  FUZZ_CHECK(strlen(s) == (size_t)n, "case_format wrote %zu bytes, said %d", strlen(s), n);
  return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size > MAX_TEXT)
    return 0;
  char text[MAX_TEXT + 1];
  memcpy(text, data, size);
  text[size] = '\0'; /* a NUL inside ends the text here, as it does for every C caller */
  tbe_case *c;
  tbe_status s = case_parse(text, &c);
  if (s.code != TBE_OK) {
    FUZZ_CHECK(s.code == TBE_EINVAL || s.code == TBE_ENOMEM, "case_parse failed with %s",
               tbe_code_name(s.code));
    FUZZ_CHECK(!c, "case_parse failed and still returned a case");
    FUZZ_CHECK(s.message[0], "case_parse failed without a message");
    return 0;
  }
  char *canon = canonical(c);
  tbe_case *c2;
  s = case_parse(canon, &c2);
  FUZZ_CHECK(s.code == TBE_OK, "the canonical text '%s' of '%s' does not parse: %s", canon,
             text, s.message);
  FUZZ_CHECK(case_equal(c, c2), "'%s' parses to another case than '%s'", canon, text);
  char *canon2 = canonical(c2);
  FUZZ_CHECK(!strcmp(canon, canon2), "not canonical: '%s' prints as '%s'", canon, canon2);
  FUZZ_CHECK(case_seed(c) == case_seed(c2) && case_bounds(c) == case_bounds(c2),
             "seed or bounds mode changed through '%s'", canon);
  free(canon);
  free(canon2);
  case_free(c);
  case_free(c2);
  return 0;
}
