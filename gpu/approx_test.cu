/* approx_test.cu: how far this GPU's sqrt.approx.ftz.f32 and div.full.f32 (Triton's tl.sqrt and
 * fp32 division) land from the exact result, measured; ref/approx_h200.h is held to it.
 *
 * The Triton TBE model's row-wise Adagrad bound (ref/backward_order_triton.c) rests on those two
 * constants; this test fails, naming the instruction, if the measured error exceeds either, so
 * the bound cannot outlive the hardware it was derived on. The error of one result r of exact x
 * is |r - x| / ulp(x) in fp32 ulps, x computed in fp64 (whose own roundings, below 2^-27 of an
 * fp32 ulp, are added to the measured value). Measured:
 *   sqrt   every normal non-negative fp32 (exhaustive), and subnormals, which must give 0;
 *   D      every 4th numerator mantissa in [1, 2) over each divisor D = 1..2048 (s / D: the ulp
 *          error of div.full does not depend on the numerator's exponent in the normal range);
 *   lr     each learning rate of cases/ over every divisor mantissa in [1, 2) at exponents
 *          -8..8 (lr / (sqrt(m) + eps)).
 * SKIPs (exit 77) without a GPU.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "approx_h200.h"
#include "cuda_check.h"
#include "tbe_gpu.h"

namespace {

__device__ __forceinline__ float sqrt_approx(float x)
{
  float r;
  asm("sqrt.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

__device__ __forceinline__ float div_full(float a, float b)
{
  float r;
  asm("div.full.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

/* the error of r against exact x in fp32 ulps of x, scaled by 2^32 into an integer for atomicMax */
__device__ __forceinline__ unsigned long long ulp_error(float r, double x)
{
  int e;
  frexp(fabs(x), &e);
  double ulp = ldexp(1.0, e - 24 > -149 ? e - 24 : -149);
  return (unsigned long long)(fabs((double)r - x) / ulp * 4294967296.0);
}

__global__ void sqrt_kernel(unsigned long long *worst, unsigned long long *bad_subnormal)
{
  unsigned long long w = 0, bad = 0;
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < 0x7f800000ull;
       i += (uint64_t)gridDim.x * blockDim.x) {
    float x = __uint_as_float((uint32_t)i), r = sqrt_approx(x);
    if (i < 0x00800000u)
      bad += r != 0.0f;
    else
      w = max(w, ulp_error(r, sqrt((double)x)));
  }
  atomicMax(worst, w);
  atomicAdd(bad_subnormal, bad);
}

/* numerators over every 4th mantissa in [1, 2), divisor D = blockIdx.y + 1 */
__global__ void div_d_kernel(unsigned long long *worst)
{
  const float d = (float)(blockIdx.y + 1);
  const double inv = 1.0 / (double)d;
  unsigned long long w = 0;
  for (uint32_t m = 4 * (blockIdx.x * blockDim.x + threadIdx.x); m < (1u << 23);
       m += 4 * gridDim.x * blockDim.x) {
    float a = __uint_as_float(0x3f800000u | m);
    w = max(w, ulp_error(div_full(a, d), (double)a * inv));
  }
  atomicMax(worst, w);
}

/* lr over every divisor mantissa in [1, 2) at exponent blockIdx.y - 8 */
__global__ void div_lr_kernel(float lr, unsigned long long *worst)
{
  unsigned long long w = 0;
  for (uint32_t m = blockIdx.x * blockDim.x + threadIdx.x; m < (1u << 23);
       m += gridDim.x * blockDim.x) {
    float b = ldexpf(__uint_as_float(0x3f800000u | m), (int)blockIdx.y - 8);
    w = max(w, ulp_error(div_full(lr, b), (double)lr / (double)b));
  }
  atomicMax(worst, w);
}

tbe_status measure(double *sqrt_ulp, unsigned long long *bad_subnormal, double *div_d_ulp,
                   double *div_lr_ulp)
{
  unsigned long long *dev, host[4] = {0, 0, 0, 0};
  GPU_TRY(cudaMalloc(&dev, sizeof host));
  GPU_TRY(cudaMemset(dev, 0, sizeof host));
  sqrt_kernel<<<4096, 256>>>(dev, dev + 1);
  div_d_kernel<<<dim3(64, 2048), 256>>>(dev + 2);
  const float lrs[] = {0.01f, 0.1f, 0.3f, 0.5f, 1.0f, 1e-3f, 1e5f};
  for (float lr : lrs)
    div_lr_kernel<<<dim3(64, 17), 256>>>(lr, dev + 3);
  GPU_TRY(cudaGetLastError());
  GPU_TRY(cudaMemcpy(host, dev, sizeof host, cudaMemcpyDeviceToHost));
  GPU_TRY(cudaFree(dev));
  const double fp64 = 0x1p-27; /* the exact value's own roundings, in fp32 ulps */
  *sqrt_ulp = (double)host[0] / 4294967296.0 + fp64;
  *bad_subnormal = host[1];
  *div_d_ulp = (double)host[2] / 4294967296.0 + fp64;
  *div_lr_ulp = (double)host[3] / 4294967296.0 + fp64;
  return tbe_ok();
}

} // namespace

int main(int argc, char **argv)
{
  if (argc > 1) {
    fprintf(stderr, "usage: %s\n", argv[0]);
    return 2;
  }
  char desc[256];
  tbe_status s = gpu_probe(desc, sizeof desc);
  if (s.code == TBE_ENODEV) {
    printf("SKIP: %s\n", s.message);
    return 77;
  }
  double sq, dd, dl;
  unsigned long long sub = 0;
  if (s.code == TBE_OK)
    s = measure(&sq, &sub, &dd, &dl);
  if (s.code != TBE_OK) {
    fprintf(stderr, "approx_test: %s\n", s.message);
    return 1;
  }
  printf("%s\n", desc);
  printf("sqrt.approx.ftz.f32: worst %.6f ulp over every normal input (bound %.1f); "
         "%llu subnormal inputs not flushed to 0\n", sq, REF_H200_SQRT_APPROX_ULP, sub);
  printf("div.full.f32: worst %.6f ulp for s / D, D = 1..2048; %.6f for lr / x (bound %.1f)\n", dd,
         dl, REF_H200_DIV_FULL_ULP);
  int fail = 0;
  if (sq > REF_H200_SQRT_APPROX_ULP || sub) {
    printf("FAIL: sqrt.approx.ftz.f32 is outside ref/approx_h200.h's REF_H200_SQRT_APPROX_ULP\n");
    fail = 1;
  }
  if (dd > REF_H200_DIV_FULL_ULP || dl > REF_H200_DIV_FULL_ULP) {
    printf("FAIL: div.full.f32 is outside ref/approx_h200.h's REF_H200_DIV_FULL_ULP\n");
    fail = 1;
  }
  return fail;
}
