/* forward_small_probe_test.cu: holds this GPU's mma.sync m16n8k16 f16 -> f32 to the recorded
 * model ref_mma_f16_f32 (ref/forward_small.h), bit for bit, and names the feature that moved.
 * Not the small-table path's test (gpu/forward_test.c runs the path); SKIPs (exit 77) without a
 * GPU. `--list` prints the targeted vectors with the model's d and needs no GPU.
 *
 * Three sets, every dot product d = sum a[k] * b[k] + c through one mma: targeted vectors, each
 * built so that one feature of the model decides its bits (a runner-up model with that feature
 * changed gives other bits); the 208 vectors recorded on the H200 (ref/mma_h200_vectors.h),
 * whose recorded d must come back; and 800 random 16x8 blocks (102,400 dot products).
 */
#include <cuda_fp16.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <vector>

#include "bits.h"
#include "forward_small.h"
#include "half.h"
#include "mma_h200_vectors.h"
#include "tbe_gpu.h"

namespace {

/* one mma's operands and result: D = A * B + C, A 16x16 row-major, B 16x8 (column j = b) */
struct mma_block {
  uint16_t A[16][16];
  uint16_t B[16][8];
  float C[16][8];
  float D[16][8];
};

__device__ __forceinline__ uint32_t pack(uint16_t lo, uint16_t hi)
{
  return (uint32_t)lo | ((uint32_t)hi << 16);
}

/* one warp per block, the fragment layout of gpu/forward_small.cu (PTX ISA, m16n8k16 .f16) */
__global__ void mma_kernel(mma_block *blocks, int n)
{
  const int w = (int)((blockIdx.x * blockDim.x + threadIdx.x) / 32), lane = threadIdx.x & 31;
  if (w >= n)
    return;
  mma_block &m = blocks[w];
  const int g = lane >> 2, t = lane & 3;
  const uint32_t a0 = pack(m.A[g][t * 2], m.A[g][t * 2 + 1]);
  const uint32_t a1 = pack(m.A[g + 8][t * 2], m.A[g + 8][t * 2 + 1]);
  const uint32_t a2 = pack(m.A[g][t * 2 + 8], m.A[g][t * 2 + 9]);
  const uint32_t a3 = pack(m.A[g + 8][t * 2 + 8], m.A[g + 8][t * 2 + 9]);
  const uint32_t b0 = pack(m.B[t * 2][g], m.B[t * 2 + 1][g]);
  const uint32_t b1 = pack(m.B[t * 2 + 8][g], m.B[t * 2 + 9][g]);
  float c[4] = {m.C[g][t * 2], m.C[g][t * 2 + 1], m.C[g + 8][t * 2], m.C[g + 8][t * 2 + 1]};
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  m.D[g][t * 2] = c[0];
  m.D[g][t * 2 + 1] = c[1];
  m.D[g + 8][t * 2] = c[2];
  m.D[g + 8][t * 2 + 1] = c[3];
}

/* one dot product: a, b (fp16 bits), c; what it measures */
struct vec {
  const char *feature, *what;
  uint16_t a[16], b[16];
  float c;
};

uint16_t h(double x) { return ref_double_to_half(x); } /* exact for every value used here */

/* c + a0 * b0 (k = 0) + n terms of x * y (k = 1..n) */
vec make(const char *feature, const char *what, float c, double a0, double b0, int n, double x,
         double y)
{
  vec v = {feature, what, {0}, {0}, c};
  v.a[0] = h(a0);
  v.b[0] = h(b0);
  for (int k = 1; k <= n; k++) {
    v.a[k] = h(x);
    v.b[k] = h(y);
  }
  return v;
}

/* v with term k set to x * y */
vec put(vec v, int k, double x, double y)
{
  v.a[k] = h(x);
  v.b[k] = h(y);
  return v;
}

std::vector<vec> targeted(void)
{
  const double t14 = 0x1p-14; /* fp16's smallest normal */
  const double big = 0x1.ffcp+0; /* fp16's largest significand */
  std::vector<vec> v = {
      /* alignment: terms below 2^(emax - 25) vanish, those at it stay */
      make("alignment width 25", "1 + 15 * 2^-25: kept (24 bits would drop them)", 0, 1, 1, 15,
           t14, 0x1p-11),
      make("alignment width 25", "1 + 15 * 2^-26: dropped (26 bits would keep them)", 0, 1, 1,
           15, t14, 0x1p-12),
      make("alignment width 25", "2^30 + 15 * 2^4: dropped", 0, 0x1p15, 0x1p15, 15, 0x1p10,
           0x1p-6),
      make("alignment width 25", "c = 1 sets emax: 16 * 2^-26 dropped", 1.0f, t14, 0x1p-12, 15,
           t14, 0x1p-12),
      /* the exponent that aligns is ea + eb, not the product's normalised one */
      make("product exponent ea+eb", "2.25 + 15 * 2^-25: kept (normalised emax 1 drops them)", 0,
           1.5, 1.5, 15, t14, 0x1p-11),
      make("product exponent ea+eb", "subnormal a = 2^-24 aligns at -14: 2^-24 * 2^10 + 15 * 2^-30",
           0, 0x1p-24, 0x1p10, 15, t14, 0x1p-16),
      /* truncation toward zero, not toward -inf */
      make("truncation toward zero", "1 - 15 * 1.5 * 2^-25", 0, 1, 1, 15, -1.5 * t14, 0x1p-11),
      make("truncation toward zero", "-1 + 15 * 1.5 * 2^-25", 0, -1, 1, 15, 1.5 * t14, 0x1p-11),
      make("truncation toward zero", "-1 - 15 * 1.5 * 2^-25", 0, -1, 1, 15, -1.5 * t14, 0x1p-11),
      /* c is a term of the same alignment (truncated with the products), not added after */
      make("c in the alignment", "1024 + 15 * 2^-15 + c = 1.5 * 2^-15", 0x1.8p-15f, 1024, 1, 15,
           t14, 0.5),
      make("c in the alignment", "c = 2^20 sets emax for products of 2^-6", 0x1p20f, 0x1.8p-3,
           0x1p-3, 15, 0x1.8p-3, 0x1p-3),
      make("c in the alignment", "c = 1 + 2^-23 under products of 2^11", 0x1.000002p0f, 0x1p11,
           1, 15, 0x1.8p-4, 0x1p-10),
      /* one fused sum of 16 products: no normalisation after 4 or 8 of them (blocks of 8
       * would give 1 + 2^-23 for both, blocks of 4 1 + 2^-22 for the second) */
      put(make("one fused step of 16", "8 * 1.5 * 2^-26 in k = 0..7, then 1 at k = 8", 0,
               1.5 * t14, 0x1p-12, 7, 1.5 * t14, 0x1p-12),
          8, 1, 1),
      put(make("one fused step of 16", "12 * 1.5 * 2^-26 in k = 0..11, then 1 at k = 12", 0,
               1.5 * t14, 0x1p-12, 11, 1.5 * t14, 0x1p-12),
          12, 1, 1),
      make("one fused step of 16", "1 at k = 0, 15 * 1.5 * 2^-26 after it", 0, 1, 1, 15,
           1.5 * t14, 0x1p-12),
      /* the sum keeps its carries: 16 products near 4 and c */
      make("carries", "16 * (2 - 2^-10)^2", 0, big, big, 15, big, big),
      make("carries", "16 * (2 - 2^-10)^2 + c = 127.99", 0x1.fffffep6f, big, big, 15, big, big),
      /* the sum is rounded toward zero into fp32 */
      make("final rounding RZ", "1 + 3 * 2^-24 (RN: 1 + 2^-22)", 0, 1, 1, 3, 0x1p-12, 0x1p-12),
      make("final rounding RZ", "-1 - 3 * 2^-24 (RD: -1 - 2^-22)", 0, -1, 1, 3, -0x1p-12,
           0x1p-12),
      make("final rounding RZ", "1 + 2^-23 + 2^-24 (RN: 1 + 2^-22)", 0x1.000002p0f, 1, 0x1p-24,
           0, 0, 0),
      /* subnormals: fp16 ones count at their value; an fp32 one in c is kept */
      make("subnormals", "a = 2^-24 (fp16 subnormal) * 1", 0, 0x1p-24, 1, 0, 0, 0),
      make("subnormals", "2^-24 * 2^-24 = 2^-48", 0, 0x1p-24, 0x1p-24, 0, 0, 0),
      make("subnormals", "c = 2^-149, products 0 (unmeasured before this test)", 0x1p-149f, 0, 0,
           0, 0, 0),
      make("subnormals", "c = -2^-130 * 1.5, products 0 (unmeasured)", -0x1.8p-130f, 0, 0, 0, 0,
           0),
      make("subnormals", "c = 2^-140 under 2^-48", 0x1p-140f, 0x1p-24, 0x1p-24, 0, 0, 0),
      /* zeros: exact cancellation and all-zero terms (a sum of -0 terms is +0 on the H200) */
      make("signed zeros", "1 - 1 = +0", 0, 1, 1, 1, -1, 1),
      make("signed zeros", "c = 1, product -1: +0", 1.0f, -1, 1, 0, 0, 0),
      make("signed zeros", "c = -0, products -0 * 1: +0 (not IEEE's -0)", -0.0f, -0.0, 1, 15,
           -0.0, 1),
      make("signed zeros", "c = -0, products +0: +0", -0.0f, 0, 1, 0, 0, 0),
      make("signed zeros", "c = +0, products -0: +0", 0.0f, -0.0, 1, 15, 1, -0.0),
      /* Inf and NaN */
      make("inf and nan", "inf * 1", 0, INFINITY, 1, 0, 0, 0),
      make("inf and nan", "inf * -1 + 65504^2", 0, INFINITY, -1, 1, 65504, 65504),
      make("inf and nan", "inf * 0: NaN", 0, INFINITY, 0, 0, 0, 0),
      make("inf and nan", "inf - inf: NaN", 0, INFINITY, 1, 1, -INFINITY, 1),
      make("inf and nan", "c = inf + 1", INFINITY, 1, 1, 0, 0, 0),
      make("inf and nan", "c = -inf + inf * 1: NaN", -INFINITY, INFINITY, 1, 0, 0, 0),
      make("inf and nan", "c = NaN (payload 1): 0x7fffffff (unmeasured)",
           ref_bits_f32(0xFFC00001u), 1, 1, 0, 0, 0),
      make("inf and nan", "a = NaN (payload 1): 0x7fffffff", 0, 1, 1, 0, 0, 0),
  };
  v.back().a[0] = 0xFC01; /* an fp16 NaN with a sign and a payload */
  return v;
}

uint64_t rng_state = 0x9E3779B97F4A7C15ull;
uint64_t rnd(void)
{
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* a random fp16 of style s: 0 any finite (subnormals and zeros included), 1 exponents -3..3,
 * 2 a count 0..256, 3 any bits (Inf, NaN) */
uint16_t rand_half(int s)
{
  const uint16_t sign = (uint16_t)((rnd() & 1) << 15);
  switch (s) {
  case 0: return (uint16_t)(rnd() % 8 == 0 ? sign : sign | (rnd() % 0x7C00));
  case 1: return (uint16_t)(sign | ((12 + rnd() % 7) << 10) | (rnd() & 0x3FF));
  case 2: return h((double)(rnd() % 2 ? rnd() % 5 : rnd() % 257));
  }
  return (uint16_t)rnd();
}

float rand_c(void)
{
  const uint32_t sign = (uint32_t)(rnd() & 1) << 31;
  switch (rnd() % 4) {
  case 0: return 0.0f;
  case 1: return ref_bits_f32(sign | (uint32_t)(rnd() & 0x7FFFFF)); /* subnormal */
  }
  return ref_bits_f32(sign | (uint32_t)(87 + rnd() % 80) << 23 | (uint32_t)(rnd() & 0x7FFFFF));
}

/* block r's A style: 0, 1, 2 in turn, then 0 again or, in every 16th block, 3 (any bits) */
int block_style(size_t r) { return r % 16 == 15 ? 3 : r % 4 == 3 ? 0 : (int)(r % 4); }

/* random block r: A of block_style(r), B of style 0, 1, or 3 with A's 3 */
void random_block(mma_block &m, size_t r)
{
  const int sa = block_style(r), sb = sa == 2 ? 0 : sa;
  for (int i = 0; i < 16; i++)
    for (int k = 0; k < 16; k++)
      m.A[i][k] = rand_half(sa);
  for (int k = 0; k < 16; k++)
    for (int j = 0; j < 8; j++)
      m.B[k][j] = rand_half(sb);
  for (int i = 0; i < 16; i++)
    for (int j = 0; j < 8; j++)
      m.C[i][j] = rand_c();
}

/* dot product e of block m: row e / 8 of A, column e % 8 of B */
uint32_t model_of(const mma_block &m, int e)
{
  uint16_t b[16];
  for (int k = 0; k < 16; k++)
    b[k] = m.B[k][e % 8];
  return ref_f32_bits(ref_mma_f16_f32(m.A[e / 8], b, m.C[e / 8][e % 8]));
}

/* vectors go 8 to a block, vector i at row i % 8 and column i % 8 */
void place(std::vector<mma_block> &blocks, int i, const uint16_t *a, const uint16_t *b, float c)
{
  if (i % 8 == 0) {
    blocks.emplace_back();
    memset(&blocks.back(), 0, sizeof(mma_block));
  }
  mma_block &m = blocks.back();
  memcpy(m.A[i % 8], a, sizeof m.A[0]);
  for (int k = 0; k < 16; k++)
    m.B[k][i % 8] = b[k];
  m.C[i % 8][i % 8] = c;
}
uint32_t placed(const std::vector<mma_block> &blocks, size_t first, int i)
{
  return ref_f32_bits(blocks[first + (size_t)(i / 8)].D[i % 8][i % 8]);
}

int run_mma(std::vector<mma_block> &blocks)
{
  mma_block *d = nullptr;
  const size_t bytes = sizeof(mma_block) * blocks.size();
  cudaError_t e = cudaMalloc(&d, bytes);
  if (e == cudaSuccess)
    e = cudaMemcpy(d, blocks.data(), bytes, cudaMemcpyHostToDevice);
  if (e == cudaSuccess) {
    mma_kernel<<<(unsigned)((blocks.size() * 32 + 127) / 128), 128>>>(d, (int)blocks.size());
    e = cudaGetLastError();
  }
  if (e == cudaSuccess)
    e = cudaMemcpy(blocks.data(), d, bytes, cudaMemcpyDeviceToHost);
  cudaFree(d);
  if (e != cudaSuccess)
    fprintf(stderr, "mma kernel: %s\n", cudaGetErrorString(e));
  return e == cudaSuccess;
}

} // namespace

int main(int argc, char **argv)
{
  const std::vector<vec> tv = targeted();
  if (argc > 1 && !strcmp(argv[1], "--list")) {
    for (const vec &v : tv) {
      printf("%s | %s |", v.feature, v.what);
      for (int k = 0; k < 16; k++)
        printf(" %04x", v.a[k]);
      printf(" |");
      for (int k = 0; k < 16; k++)
        printf(" %04x", v.b[k]);
      printf(" | %08x | %08x\n", ref_f32_bits(v.c), ref_f32_bits(ref_mma_f16_f32(v.a, v.b, v.c)));
    }
    return 0;
  }
  if (argc > 1) {
    fprintf(stderr, "usage: %s [--list]\n", argv[0]);
    return 2;
  }
  char desc[256];
  tbe_status s = gpu_probe(desc, sizeof desc);
  if (s.code == TBE_ENODEV) {
    printf("SKIP: %s\n", s.message);
    return 77;
  }
  cudaDeviceProp prop;
  if (s.code != TBE_OK || cudaGetDeviceProperties(&prop, 0) != cudaSuccess || prop.major != 9 ||
      prop.minor != 0) {
    fprintf(stderr, "%s: the model was recorded on sm_90 (H200)\n",
            s.code == TBE_OK ? desc : s.message);
    return 1;
  }
  printf("GPU: %s\n", desc);

  std::vector<mma_block> blocks;
  const int nv = (int)(sizeof ref_mma_h200 / sizeof ref_mma_h200[0]);
  for (int i = 0; i < (int)tv.size(); i++)
    place(blocks, i, tv[i].a, tv[i].b, tv[i].c);
  const size_t rec0 = blocks.size();
  for (int i = 0; i < nv; i++)
    place(blocks, i, ref_mma_h200[i].a, ref_mma_h200[i].b, ref_bits_f32(ref_mma_h200[i].c));
  const size_t rnd0 = blocks.size(), nrand = 800;
  blocks.resize(rnd0 + nrand);
  for (size_t r = 0; r < nrand; r++)
    random_block(blocks[rnd0 + r], r);
  if (!run_mma(blocks))
    return 1;

  int failures = 0;
  for (int i = 0; i < (int)tv.size(); i++) {
    const uint32_t hw = placed(blocks, 0, i);
    const uint32_t m = ref_f32_bits(ref_mma_f16_f32(tv[i].a, tv[i].b, tv[i].c));
    if (hw != m) {
      failures++;
      printf("FEATURE MOVED: %s: %s: GPU %a (0x%08x), model %a (0x%08x)\n", tv[i].feature,
             tv[i].what, (double)ref_bits_f32(hw), hw, (double)ref_bits_f32(m), m);
    }
  }
  int rec_bad = 0;
  for (int i = 0; i < nv; i++) {
    const uint32_t hw = placed(blocks, rec0, i);
    if (hw != ref_mma_h200[i].d && rec_bad++ < 10)
      printf("RECORDED VECTOR MOVED: %d (%s): GPU 0x%08x, recorded 0x%08x\n", i,
             ref_mma_h200_family[ref_mma_h200[i].family], hw, ref_mma_h200[i].d);
  }
  int64_t rand_bad = 0;
  for (size_t r = 0; r < nrand; r++)
    for (int e = 0; e < 128; e++) {
      const uint32_t hw = ref_f32_bits(blocks[rnd0 + r].D[e / 8][e % 8]);
      const uint32_t m = model_of(blocks[rnd0 + r], e);
      if (hw != m && rand_bad++ < 10)
        printf("RANDOM MISMATCH: block %zu (style %d) element %d: GPU 0x%08x, model 0x%08x\n", r,
               block_style(r), e, hw, m);
    }
  printf("targeted: %d of %zu differ; recorded: %d of %d differ; random: %lld of %zu differ\n",
         failures, tv.size(), rec_bad, nv, (long long)rand_bad, nrand * 128);
  if (failures || rec_bad || rand_bad) {
    printf("FAIL: this GPU's mma no longer matches ref_mma_f16_f32 (ref/forward_small.h)\n");
    return 1;
  }
  printf("all %zu dot products match the model bit for bit\n",
         tv.size() + (size_t)nv + nrand * 128);
  return 0;
}
