/* philox_test.c: Philox4x32-10 against the known-answer vectors published with Random123
 * (kat_vectors: counter, key, expected output). Not a statistical test of the generator.
 */
#include "philox.h"
#include "test_util.h"

int main(void)
{
  static const struct {
    uint32_t ctr[4], key[2], out[4];
  } kat[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
    uint32_t out[4];
    ref_philox4x32_10(kat[i].ctr, kat[i].key, out);
    for (int w = 0; w < 4; w++)
      CHECK(out[w] == kat[i].out[w], "vector %zu word %d: 0x%08x, expected 0x%08x", i, w,
            out[w], kat[i].out[w]);
  }
  return TEST_MAIN_RESULT();
}
