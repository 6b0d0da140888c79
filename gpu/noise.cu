/* noise.cu: a kernel that computes nothing: launched on a second stream just before a backward
 * (bwd.noise=1), it keeps SMs, L2 and the atomic units busy for a bounded time so that the
 * backward's blocks are scheduled beside it in other orders. No CPU twin: it has no result.
 *
 * It touches only its own scratch buffer (never the backward's memory) and ends by itself:
 * after NOISE_STEPS iterations per thread or NOISE_NS nanoseconds of the global timer, whichever
 * comes first. One block per SM of NOISE_BLOCK threads leaves room for the backward's blocks on
 * every SM, so the two share them rather than run one after the other.
 */
#include "cuda_check.h"
#include "gpu_internal.h"

namespace {

const int NOISE_BLOCK = 256;
const unsigned NOISE_WORDS = 1u << 16; /* 256 KiB: atomics contend in L2 */
const int NOISE_STEPS = 1 << 14;
const unsigned long long NOISE_NS = 2000000; /* how long the noise kernel runs at most, in ns */

__device__ __forceinline__ unsigned long long global_ns()
{
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* Atomic adds and uncached loads at xorshift-drawn words of buf, until the budget is spent. */
__global__ void __launch_bounds__(NOISE_BLOCK) noise_kernel(unsigned *buf)
{
  const unsigned long long t0 = global_ns();
  unsigned x = (blockIdx.x * NOISE_BLOCK + threadIdx.x) * 2654435761u + 1u;
  for (int s = 0; s < NOISE_STEPS; s++) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    atomicAdd(buf + x % NOISE_WORDS, 1u);
    x += __ldcg(buf + (x >> 7) % NOISE_WORDS);
    if ((s & 63) == 0 && global_ns() - t0 > NOISE_NS)
      break;
  }
}

} // namespace

tbe_status gpu_noise_launch(gpu_noise *n)
{
  if (!n->stream)
    GPU_TRY(cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking));
  if (!n->buf)
    STATUS_TRY(n->arena.alloc(sizeof(unsigned) * NOISE_WORDS, (void **)&n->buf));
  noise_kernel<<<(unsigned)gpu_sm_count(), NOISE_BLOCK, 0, n->stream>>>(n->buf);
  GPU_TRY(cudaGetLastError());
  return tbe_ok();
}

void gpu_noise_free(gpu_noise *n)
{
  if (n->stream) {
    cudaStreamSynchronize(n->stream);
    cudaStreamDestroy(n->stream);
  }
  n->stream = nullptr;
  n->buf = nullptr;
}
