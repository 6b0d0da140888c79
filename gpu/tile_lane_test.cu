/* tile_lane_test.cu: the keys kernel's search of a position's bag among its warp's 32
 * (bwd_tile_lane), run on the host with the lanes' first positions as an array: every position
 * of random tiles (empty bags, tiles of 1 to 32 bags, near 2^31) lands in its bag. No GPU.
 */
#include <stdint.h>
#include <stdio.h>

#include <vector>

#include "backward_impl.cuh"

static int failures = 0;

/* The lanes' first positions, as bwd_tile_lane asks for them (a shuffle on the GPU). */
struct lanes {
  const int32_t *first;
  __host__ __device__ int32_t operator()(int l) const { return first[l]; }
};

/* One tile: nb bags of the given lengths from position s0; every position checked against the
 * bag that holds it. */
static void check(const std::vector<int64_t> &len, int64_t s0)
{
  const int nb = (int)len.size();
  int32_t first[32];
  int64_t at = s0;
  for (int l = 0; l < 32; l++) {
    first[l] = l < nb ? (int32_t)at : INT32_MAX;
    if (l < nb)
      at += len[(size_t)l];
  }
  const int64_t e = at;
  int bag = 0;
  for (int64_t p = s0; p < e; p++) {
    while (p >= first[bag] + len[(size_t)bag]) /* the bag that holds p: the next non-empty one */
      bag++;
    const int j = bwd_tile_lane(lanes{first}, p);
    if (j != bag && failures++ < 10)
      printf("FAIL: %d bags from %lld: position %lld lands in bag %d, not %d\n", nb,
             (long long)s0, (long long)p, j, bag);
  }
}

int main()
{
  uint64_t x = 88172645463325252ull; /* xorshift64: the tiles' draws */
  auto next = [&]() {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  int tiles = 0;
  for (int nb = 1; nb <= 32; nb++)
    for (int rep = 0; rep < 200; rep++) {
      std::vector<int64_t> len((size_t)nb);
      int64_t total = 0;
      for (auto &n : len) { /* a third empty, most short, a few long */
        const uint64_t r = next() % 12;
        n = r < 4 ? 0 : r < 10 ? (int64_t)(1 + next() % 8) : (int64_t)(1 + next() % 200);
        total += n;
      }
      check(len, (int64_t)(next() % 100000));
      check(len, (int64_t)INT32_MAX - total); /* the tile ends at 2^31 - 1 */
      tiles += 2;
    }
  check(std::vector<int64_t>(32, 0), 7); /* every bag empty: no position */
  printf("%s: bwd_tile_lane on %d tiles of 1 to 32 bags (empty, short and long bags; ending at "
         "2^31 - 1 too)\n", failures ? "FAIL" : "pass", tiles);
  return failures != 0;
}
