/* outputs.c: an engine run's named outputs: pushing copies of them, finding, freeing, and the
 * shapes the bounds check, the forward and the backward push. Not the comparison (engine.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backward.h"
#include "outputs.h"

size_t eng_elem_size(const eng_output *o)
{
  return o->is_int ? tbe_itype_size(o->itype) : tbe_dtype_size(o->dtype);
}

/* Appends a copy of n elements of data as output `name`. */
static tbe_status eng_push(eng_run *r, const eng_output *proto, const void *data)
{
  if (r->n_out == ENG_MAX_OUT)
    return tbe_error(TBE_EINTERNAL, "outputs", -1, "more than %d outputs", ENG_MAX_OUT);
  eng_output *o = &r->out[r->n_out];
  *o = *proto;
  o->small = NULL;
  size_t bytes = tbe_mul_size((size_t)o->n, eng_elem_size(o));
  o->data = malloc(bytes ? bytes : 1);
  if (!o->data)
    return tbe_error(TBE_ENOMEM, o->name, -1, "cannot copy %zu bytes of %s", bytes, o->name);
  if (bytes)
    memcpy(o->data, data, bytes);
  r->n_out++;
  return tbe_ok();
}

tbe_status eng_push_float(eng_run *r, const char *name, const char *path, eng_coord coord,
                                 tbe_dtype t, const void *data, int64_t n)
{
  eng_output o = {.name = name, .path = path, .coord = coord, .dtype = t, .n = n};
  return eng_push(r, &o, data);
}

tbe_status eng_push_int(eng_run *r, const char *name, const char *path, eng_coord coord,
                               tbe_itype t, const void *data, int64_t n)
{
  eng_output o = {.name = name, .path = path, .coord = coord, .is_int = 1, .itype = t, .n = n};
  return eng_push(r, &o, data);
}

/* Pushes the forward's output on path "forward": l->out_elems values of b->out_dtype; with
 * small (NULL: none), a copy of the [T] flags of the features computed on the small-table path,
 * when any is set. */
tbe_status eng_push_output(eng_run *r, const tbe_batch *b, const tbe_layout *l,
                                  const void *data, const unsigned char *small)
{
  tbe_status s = eng_push_float(r, "output", "forward",
                                b->pool == TBE_POOL_NONE ? COORD_UNPOOLED : COORD_POOLED,
                                b->out_dtype, data, l->out_elems);
  int any = 0;
  for (int32_t t = 0; small && t < b->T; t++)
    any |= small[t];
  if (s.code != TBE_OK || !any)
    return s;
  eng_output *o = &r->out[r->n_out - 1];
  if (!(o->small = malloc((size_t)b->T)))
    return tbe_error(TBE_ENOMEM, "output", -1, "cannot copy %d small-table flags", b->T);
  memcpy(o->small, small, (size_t)b->T);
  return s;
}

tbe_status eng_mark_small_tc(eng_run *r, const tbe_batch *b, const unsigned char *small_tc)
{
  int any = 0;
  for (int32_t t = 0; small_tc && t < b->T; t++)
    any |= small_tc[t];
  for (int i = 0; any && i < r->n_out; i++) {
    eng_output *o = &r->out[i];
    if (strcmp(o->name, "weights") && strcmp(o->name, "momentum"))
      continue;
    if (!(o->small = malloc((size_t)b->T)))
      return tbe_error(TBE_ENOMEM, o->name, -1, "cannot copy %d small_tc flags", b->T);
    memcpy(o->small, small_tc, (size_t)b->T);
  }
  return tbe_ok();
}

const eng_output *eng_find(const eng_run *r, const char *name)
{
  for (int i = 0; i < r->n_out; i++)
    if (!strcmp(r->out[i].name, name))
      return &r->out[i];
  return NULL;
}

const char *eng_declined_why(const eng_run *r, const char *name, int *raised)
{
  for (int i = 0; i < r->n_declined; i++)
    if (!strcmp(r->declined[i].output, name)) {
      *raised = r->declined[i].raised;
      return r->declined[i].reason;
    }
  return NULL;
}

void eng_run_free(eng_run *r)
{
  for (int i = 0; i < r->n_out; i++) {
    free(r->out[i].data);
    free(r->out[i].small);
  }
  r->n_out = 0;
  r->n_declined = 0;
}

/* Marks the run as having produced nothing, for the reason given by s. */
void eng_fail_run(eng_run *r, eng_status st, tbe_status s)
{
  eng_run_free(r);
  r->status = st;
  snprintf(r->reason, sizeof r->reason, "%s: %s", tbe_code_name(s.code), s.message);
}

/* The bounds check's outputs: repaired indices and offsets, the warning counter, and for a
 * FATAL stop the offender: (feature, bag) for an offset offender, (feature, bag, position,
 * value) for an index offender (TBE_SEMANTICS.md section 2 leaves an offset offender's position
 * and value to the implementation). */
tbe_status eng_push_bounds(eng_run *r, const char *path, tbe_itype t, const void *indices,
                                  int64_t N, const void *offsets, int64_t total_B,
                                  int64_t warnings, tbe_status bounds)
{
  tbe_status s = eng_push_int(r, "indices", path, COORD_POSITION, t, indices, N);
  if (s.code == TBE_OK)
    s = eng_push_int(r, "offsets", path, COORD_BAG, t, offsets, total_B + 1);
  if (s.code == TBE_OK)
    s = eng_push_int(r, "warnings", path, COORD_VECTOR, TBE_I64, &warnings, 1);
  if (s.code == TBE_OK && bounds.code == TBE_EBOUNDS) {
    int64_t who[4] = {bounds.feature, bounds.bag, bounds.position, bounds.value};
    int index_offender = !strcmp(bounds.field, "indices");
    s = eng_push_int(r, "offender", path, COORD_VECTOR, TBE_I64, who, index_offender ? 4 : 2);
    snprintf(r->stopped, sizeof r->stopped, "its FATAL bounds check stopped the call: %s",
             bounds.message);
  }
  return s;
}

/* The backward's outputs: the updated weights and (Adagrad) momentum, on path "backward", or
 * "backward.atomic" where the combine order is free, and the per-sample-weight gradients
 * (weighted batches; their order is always normative). */
tbe_status eng_push_backward(eng_run *r, const tbe_batch *b, const ref_bwd_config *cfg,
                                    const void *weights, const float *momentum,
                                    const float *psw_grad)
{
  int atomic = cfg->combine == REF_COMBINE_ATOMIC;
  const char *path = atomic ? "backward.atomic" : "backward";
  tbe_status s = eng_push_float(r, "weights", path, COORD_WEIGHT, b->wdtype, weights,
                                b->table_offset[b->num_tables]);
  if (s.code == TBE_OK && momentum)
    s = eng_push_float(r, "momentum", path, COORD_ROW, TBE_FP32, momentum, ref_bwd_rows(b));
  if (s.code == TBE_OK && psw_grad)
    s = eng_push_float(r, "psw_grad", "backward", COORD_POSITION, TBE_FP32, psw_grad, b->N);
  return s;
}
