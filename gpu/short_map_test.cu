/* short_map_test.cu: bwd.short_block's map of steps to runs (bwd_blocked), run on the host the
 * way short_kernel's pipeline takes it: every run is taken exactly once, a warp's groups agree
 * on each step's `in`, and with K = 1 it is the grid-stride loop's map. Needs no GPU.
 */
#include <stdio.h>

#include <vector>

#include "backward_impl.cuh"
#include "run_config.h"

static int failures = 0;

#define EXPECT(cond, ...)                                                                         \
  do {                                                                                            \
    if (!(cond)) {                                                                                \
      printf("FAIL: " __VA_ARGS__);                                                               \
      printf("\n");                                                                               \
      failures++;                                                                                 \
    }                                                                                             \
  } while (0)

/* Every group of nw warps of G groups with blocks of K steps, through short_kernel's loop
 * (AHEAD: a run further ahead in the pipeline), over n runs. */
template <int G> static void check(int32_t n, uint32_t nw, int32_t k, bool ahead)
{
  std::vector<int> taken((size_t)n, 0);
  for (uint32_t v = 0; v < nw; v++) {
    std::vector<bool> ins0; /* group 0's `in` per take: the warp's */
    for (int lag = 0; lag < G; lag++) {
      bwd_blocked<G> bl;
      bl.start(k, lag, nw, v);
      std::vector<bool> ins;
      auto take = [&](bool &in) {
        const int32_t r = bl.take(n, lag, in);
        EXPECT(ins.empty() || ins.back() || !in, "G=%d n=%d nw=%u K=%d: warp %u group %d is in "
               "again after a step out", G, n, nw, k, v, lag);
        ins.push_back(in);
        return r;
      };
      bool in = false;
      std::vector<int32_t> pipe; /* the runs taken and not yet summed, in order */
      pipe.push_back(take(in));
      int32_t left = in;
      if (ahead) {
        pipe.push_back(take(in));
        left += in;
      }
      int steps = 0;
      while (left > 0 && steps++ < 4 * n + 8) {
        const int32_t r = pipe.front();
        pipe.erase(pipe.begin());
        pipe.push_back(take(in));
        left += (int32_t)in - 1;
        if (r < n) /* past n: the empty run */
          taken[(size_t)r]++;
      }
      if (lag == 0)
        ins0 = ins;
      EXPECT(ins == ins0, "G=%d n=%d nw=%u K=%d: warp %u group %d steps differently from group 0",
             G, n, nw, k, v, lag);
    }
  }
  for (int32_t r = 0; r < n; r++)
    EXPECT(taken[(size_t)r] == 1, "G=%d n=%d nw=%u K=%d ahead=%d: run %d taken %d times", G, n,
           nw, k, (int)ahead, r, taken[(size_t)r]);
}

/* With K = 1, step j of group lag of warp v takes run (j * nw + v) * G + lag: the grid stride's. */
template <int G> static void check_stride(uint32_t nw)
{
  for (uint32_t v = 0; v < nw; v++)
    for (int lag = 0; lag < G; lag++) {
      bwd_blocked<G> bl;
      bl.start(1, lag, nw, v);
      for (uint32_t j = 0; j < 50; j++) {
        bool in;
        const int32_t r = bl.take(1 << 30, lag, in);
        EXPECT(r == (int32_t)((j * nw + v) * G + (uint32_t)lag), "G=%d nw=%u: warp %u group %d "
               "step %u takes %d, not the grid stride's", G, nw, v, lag, j, r);
      }
    }
}

template <int G> static void check_all()
{
  static const int32_t ns[] = {0, 1, 5, 63, 64, 65, 1000, 4097};
  static const uint32_t nws[] = {1, 3, 8};
  for (int32_t n : ns)
    for (uint32_t nw : nws)
      for (int32_t k = 1; k <= GPU_MAX_SHORT_BLOCK; k *= 2)
        for (int ahead = 0; ahead < 2; ahead++)
          check<G>(n, nw, k, ahead != 0);
  check_stride<G>(5);
}

int main()
{
  check_all<1>();
  check_all<2>();
  check_all<8>();
  check_all<32>();
  printf("%s: bwd.short_block's map (G = 1, 2, 8, 32 groups per warp; 1 to 8 warps; K = 1 to "
         "%d; n = 0 to 4097 runs; with and without the run ahead)\n", failures ? "FAIL" : "pass",
         GPU_MAX_SHORT_BLOCK);
  return failures != 0;
}
