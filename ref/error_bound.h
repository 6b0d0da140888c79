/* error_bound.h: the primitives of TBE_SEMANTICS.md section 6's derived bounds: unit roundoff,
 * gamma(k), and the error of one rounding into a dtype. Not a comparison (harness/check/compare.c).
 */
#ifndef REF_ERROR_BOUND_H
#define REF_ERROR_BOUND_H

#include <stdint.h>

#include "tbe.h"

#ifdef __cplusplus
extern "C" {
#endif

#define REF_U32 0x1p-24 /* unit roundoff of fp32 */
#define REF_U64 0x1p-53 /* unit roundoff of fp64 */

/* gamma(k) = k*u / (1 - k*u): bounds the relative error of k chained roundings with unit
 * roundoff u. Returns +Inf when k*u >= 1 (no bound). */
double ref_gamma(int64_t k, double u);

/* Largest error of one round-to-nearest of a value of magnitude <= mag into dtype t: half an
 * ulp of mag's binade, u_t * 2^floor(log2 mag), or half the dtype's subnormal spacing where
 * that is larger (the subnormal range). */
double ref_store_error(tbe_dtype t, double mag);

#ifdef __cplusplus
}
#endif

#endif
