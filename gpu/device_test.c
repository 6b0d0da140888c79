/* device_test.c: checks that a CUDA device is found and described; SKIPs (exit 77) where there
 * is none, so a machine without a GPU never counts it as passed.
 */
#include <stdio.h>

#include "tbe_gpu.h"

int main(void)
{
  char desc[256];
  tbe_status s = gpu_probe(desc, sizeof desc);
  if (s.code == TBE_ENODEV) {
    printf("SKIP: %s\n", s.message);
    return 77;
  }
  if (s.code != TBE_OK) {
    fprintf(stderr, "gpu_probe failed: %s\n", s.message);
    return 1;
  }
  printf("GPU: %s\n", desc);
  return desc[0] ? 0 : 1;
}
