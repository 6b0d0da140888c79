/* test_util.h: the few macros unit tests share: CHECK counts failures and prints where, and
 * TEST_MAIN_RESULT turns the count into the exit code. Not a framework; tests are plain main()s.
 */
#ifndef REF_TEST_UTIL_H
#define REF_TEST_UTIL_H

#include <stdio.h>

static int test_failures;

#define CHECK(cond, ...)                                                             \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      test_failures++;                                                               \
      fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond);      \
      fprintf(stderr, __VA_ARGS__);                                                  \
      fputc('\n', stderr);                                                           \
    }                                                                                \
  } while (0)

#define TEST_MAIN_RESULT()                                                           \
  (test_failures ? (fprintf(stderr, "%d check(s) failed\n", test_failures), 1)       \
                 : (printf("all checks passed\n"), 0))

#endif
