/* backward_long.c: the chunked row gradient of a long run (SL >= threshold): chunk partials of
 * `chunk` entries, combined in fp32 in ascending chunk order, or in atomic mode in fp64 rounded
 * once. Twin of gpu/backward_long.cu; not short runs nor the sum of a chunk (backward_short.c).
 *
 * Accumulation order: each chunk summed from +0 in sorted order (ref_bwd_sum_entries). Both
 * combines start from the first partial and add the others in ascending chunk order: in fp32
 * (deterministic mode), or each partial widened exactly to fp64, one fp64 add per partial, and
 * the row rounded once to fp32 (atomic mode; ref/SEMANTICS.md 4 allows any order there, and
 * backward_exact.c bounds it).
 */
#include "backward_impl.h"

int64_t ref_bwd_chunks(const ref_bwd_work *w, int64_t r)
{
  int64_t sl = w->tr.run_start[r + 1] - w->tr.run_start[r];
  return ref_bwd_is_long(w->cfg, sl) ? (sl + w->cfg->chunk - 1) / w->cfg->chunk : 1;
}

void ref_bwd_long_grad(const ref_bwd_work *w, int64_t r, int32_t D, float *g, float *part)
{
  int64_t s = w->tr.run_start[r], e = w->tr.run_start[r + 1];
  int64_t chunk = w->cfg->chunk;
  const int wide = w->cfg->combine == REF_COMBINE_ATOMIC; /* fp64, rounded once (section 4) */
  double sum[TBE_MAX_D];
  ref_bwd_sum_entries(w, s, s + chunk < e ? s + chunk : e, D, g);
  for (int32_t d = 0; wide && d < D; d++)
    sum[d] = g[d];
#if defined(TBE_FAULT_CHUNK_OFF_BY_ONE) /* planted: the chunks after the first start one late */
  s++;
#endif
  for (int64_t c = s + chunk; c < e; c += chunk) {
    ref_bwd_sum_entries(w, c, c + chunk < e ? c + chunk : e, D, part);
    if (wide)
      for (int32_t d = 0; d < D; d++)
        sum[d] += part[d];
    else
      ref_bwd_add_row(g, part, D);
  }
  for (int32_t d = 0; wide && d < D; d++)
    g[d] = (float)sum[d];
}
