/* progress.c: the counters and the text of the progress line of `tbecheck run`.
 * Not a terminal driver: where and how the line is redrawn is tbecheck.c's business.
 */
#include "progress.h"

#include <stdio.h>

void progress_start(progress *p, int64_t total, double now_ms)
{
  p->total = total;
  p->done = p->failed = 0;
  p->t0_ms = now_ms;
}

void progress_step(progress *p, int failed)
{
  p->done++;
  p->failed += failed != 0;
}

int progress_format(const progress *p, double now_ms, char *buf, size_t n)
{
  int width = snprintf(NULL, 0, "%lld", (long long)p->total);
  double secs = (now_ms - p->t0_ms) / 1e3;
  if (p->done == 0 || secs <= 0)
    return snprintf(buf, n, "[%*lld/%lld] %lld failed, - cases/s, ETA -", width,
                    (long long)p->done, (long long)p->total, (long long)p->failed);
  double rate = (double)p->done / secs;
  long long eta = (long long)((double)(p->total - p->done) / rate + 0.5);
  return snprintf(buf, n, "[%*lld/%lld] %lld failed, %.1f cases/s, ETA %lld:%02lld", width,
                  (long long)p->done, (long long)p->total, (long long)p->failed, rate,
                  eta / 60, eta % 60);
}
