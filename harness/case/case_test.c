/* case_test.c: the case language: canonical round trips, every error path (each naming its key),
 * random cases, mutated texts, .cases files. Not the generator's tests (gen_test.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "case.h"
#include "case_random.h"
#include "prng.h"
#include "test_util.h"

#define BUF 8192

/* text parses and prints as `canonical`, which parses to an equal case and prints unchanged */
static void check_canonical(const char *text, const char *canonical)
{
  tbe_case *a = NULL, *b = NULL;
  tbe_status st = case_parse(text, &a);
  CHECK(st.code == TBE_OK && a, "'%s' does not parse: %s: %s", text, st.field, st.message);
  if (!a)
    return;
  char buf[BUF], buf2[BUF];
  int n = case_format(a, buf, sizeof buf);
  CHECK(n == (int)strlen(buf), "'%s': case_format returned %d for '%s'", text, n, buf);
  CHECK(strcmp(buf, canonical) == 0, "'%s' prints as '%s', expected '%s'", text, buf, canonical);
  st = case_parse(buf, &b);
  CHECK(st.code == TBE_OK && b, "canonical '%s' does not parse: %s", buf, st.message);
  if (b) {
    CHECK(case_equal(a, b), "'%s' and its canonical '%s' differ", text, buf);
    case_format(b, buf2, sizeof buf2);
    CHECK(strcmp(buf, buf2) == 0, "format is not idempotent: '%s' then '%s'", buf, buf2);
  }
  case_free(a);
  case_free(b);
}

/* text fails with TBE_EINVAL naming `field`, and leaves *out NULL */
static void check_error(const char *text, const char *field)
{
  tbe_case *c = (tbe_case *)&c; /* not NULL, so the test sees case_parse clear it */
  tbe_status st = case_parse(text, &c);
  CHECK(st.code == TBE_EINVAL, "'%s' should fail (field %s) but gave %s", text, field,
        tbe_code_name(st.code));
  CHECK(c == NULL, "'%s' failed but left a case", text);
  CHECK(strcmp(st.field, field) == 0, "'%s' names field '%s', expected '%s' (%s)", text,
        st.field, field, st.message);
  CHECK(strlen(st.message) > 10, "'%s': message too short: '%s'", text, st.message);
  if (st.code == TBE_OK)
    case_free(c);
}

static void test_canonical(void)
{
  check_canonical("", "seed=1");
  check_canonical("   # only a comment", "seed=1");
  check_canonical("seed=1 B=4 T=1 vbe=0 E=1000 D=64 L=4 dist=uniform wdtype=fp32 out=fp32 "
                  "idx=int64 pool=sum weighted=0 invalid=0 invalid_kind=past bounds=warning", "seed=1");
  check_canonical("seed=7 D=16 T=4 B=512  L=20\tE=100", "T=4 B=512 E=100 D=16 L=20 seed=7");
  check_canonical("T=2 E=5,5 D=8..8", "T=2 E=5 D=8 seed=1");
  check_canonical("T=2 E=5,6 D=8..9", "T=2 E=5,6 D=8..9 seed=1");
  check_canonical("E=007", "E=7 seed=1");
  check_canonical("vbe=1 B=1/2,3/1", "T=2 B=1/2,3/1 R=2 vbe=1 seed=1");
  check_canonical("vbe=1 B=1/2,3/1 R=2 T=2", "T=2 B=1/2,3/1 R=2 vbe=1 seed=1");
  check_canonical("B=3,3 vbe=1", "T=2 B=3 vbe=1 seed=1");
  check_canonical("B=0..3 vbe=1 R=3 T=2", "T=2 B=0..3 R=3 vbe=1 seed=1");
  check_canonical("B=2..2 vbe=1 R=1", "B=2 vbe=1 seed=1");
  check_canonical("vbe=1 B=5", "B=5 vbe=1 seed=1");
  check_canonical("map=0,1,0 E=10,20 D=4", "T=3 E=10,20 D=4 map=0,1,0 seed=1");
  check_canonical("map=0,1", "T=2 seed=1");
  check_canonical("map=0,0,0", "T=3 map=0,0,0 seed=1");
  check_canonical("map=2,0 D=8,16,32", "T=2 D=8,16,32 map=2,0 seed=1");
  check_canonical("L=normal:3,0", "L=3 seed=1");
  check_canonical("L=normal:-1,0", "L=0 seed=1");
  check_canonical("L=normal:2.5,1.50", "L=normal:2.5,1.5 seed=1");
  check_canonical("L=normal:1e1,3e-1", "L=normal:10,0.3 seed=1");
  check_canonical("L=0..30", "L=0..30 seed=1");
  check_canonical("L=4..4", "seed=1");
  check_canonical("dist=zipf:1.10", "dist=zipf:1.1 seed=1");
  check_canonical("dist=zipf:+0.1", "dist=zipf:0.1 seed=1");
  check_canonical("hot=0:5:3,0:2:1", "hot=0:2:1,0:5:3 seed=1");
  check_canonical("T=2 B=250000 hot=1:7:1000000,0:999:1",
                  "T=2 B=250000 hot=0:999:1,1:7:1000000 seed=1");
  check_canonical("invalid=0.50 invalid_kind=negative", "invalid=0.5 invalid_kind=negative seed=1");
  check_canonical("invalid=0 invalid_kind=mix", "seed=1");
  check_canonical("invalid=-0", "seed=1");
  check_canonical("invalid=1e-3", "invalid=0.001 seed=1");
  check_canonical("invalid=0.1000000000000000055511151231257827", "invalid=0.1 seed=1");
  check_canonical("invalid=0.30000000000000004", "invalid=0.30000000000000004 seed=1");
  check_canonical("corrupt=wrong_last,negative:1,past_end:3",
                  "corrupt=negative,past_end:3,wrong_last seed=1");
  check_canonical("bounds=none invalid=0.5 invalid_kind=pruned",
                  "invalid=0.5 invalid_kind=pruned bounds=none seed=1");
  check_canonical("seed=18446744073709551615", "seed=18446744073709551615");
  check_canonical("seed=0", "seed=0");
  check_canonical("pool=none T=3 map=0,1,0 D=8,8", "T=3 D=8 map=0,1,0 pool=none seed=1");
  check_canonical("pool=none T=2 map=0,0 D=8..16", "T=2 D=8..16 map=0,0 pool=none seed=1");
  check_canonical("idx=int32 E=2147483647", "E=2147483647 idx=int32 seed=1");
  check_canonical("wdtype=bf16 out=fp16 idx=int32 pool=mean",
                  "wdtype=bf16 out=fp16 idx=int32 pool=mean seed=1");
  check_canonical("weighted=1 pool=sum", "weighted=1 seed=1");
  /* psw: one fp32 value, printed after weighted as lr is */
  check_canonical("psw=0.750 weighted=1", "weighted=1 psw=0.75 seed=1");
  check_canonical("invalid=0.1 psw=-1.5 weighted=1", "weighted=1 psw=-1.5 invalid=0.1 seed=1");
  check_canonical("weighted=1 psw=0.1000000001", "weighted=1 psw=0.1 seed=1");
  check_canonical("weighted=1 psw=-0", "weighted=1 psw=0 seed=1");
  check_canonical("weighted=1 psw=+2", "weighted=1 psw=2 seed=1");
  check_canonical("weighted=1 psw=-2e0", "weighted=1 psw=-2 seed=1");
  check_canonical("weighted=1 psw=1 opt=sgd", "weighted=1 psw=1 opt=sgd seed=1");
  tbe_case *p = NULL, *q = NULL, *u = NULL;
  case_parse("weighted=1 psw=1", &p);
  case_parse("weighted=1 psw=0.5", &q);
  case_parse("weighted=1", &u);
  CHECK(p && q && u && !case_equal(p, q) && !case_equal(p, u) && !case_equal(u, p),
        "psw=1, psw=0.5 and drawn weights are three cases");
  case_free(p);
  case_free(q);
  case_free(u);
  check_canonical("T=2 B=8 corrupt=decreasing:2 bounds=fatal # trailing comment",
                  "T=2 B=8 corrupt=decreasing:2 bounds=fatal seed=1");
  /* knobs: GPU forward configuration and the backward */
  check_canonical("fused_bounds=1 fwd.small=off fwd.width=8 fwd.bags=2",
                  "fwd.bags=2 fwd.width=8 fwd.small=off fused_bounds=1 seed=1");
  check_canonical("fwd.small=auto fused_bounds=0 opt=none", "seed=1");
  check_canonical("fused_bounds=1 fwd.gather=window fwd.small=on",
                  "fwd.small=on fwd.gather=window fused_bounds=1 seed=1");
  check_canonical("fwd.gather=direct", "fwd.gather=direct seed=1");
  check_canonical("fwd.gather=lean fwd.width=4", "fwd.width=4 fwd.gather=lean seed=1");
  check_canonical("fwd.gather=auto", "seed=1");
  check_canonical("opt=sgd", "opt=sgd seed=1");
  check_canonical("seed=3 opt=rowwise_adagrad lr=0.010 eps=1e-8 wd=none bwd.threshold=256 "
                  "bwd.chunk=256 bwd.combine=deterministic sr=0", "opt=rowwise_adagrad seed=3");
  check_canonical("opt=rowwise_adagrad wd=l2 lambda=0.5 lr=0.1 eps=1e-3 clip=2.50 sr=1 "
                  "wdtype=fp16 step=9 bwd.threshold=3 bwd.chunk=2 bwd.combine=atomic",
                  "wdtype=fp16 opt=rowwise_adagrad lr=0.1 eps=0.001 wd=l2 lambda=0.5 clip=2.5 "
                  "sr=1 step=9 bwd.threshold=3 bwd.chunk=2 bwd.combine=atomic seed=1");
  check_canonical("opt=sgd lr=0.1000000001", "opt=sgd lr=0.1 seed=1");      /* one fp32 value */
  check_canonical("opt=sgd lr=0.0099999998", "opt=sgd seed=1");            /* fp32 0.01 */
  check_canonical("opt=sgd lr=0.333333333333", "opt=sgd lr=0.33333334 seed=1");
  check_canonical("opt=sgd lr=0 clip=1e30", "opt=sgd lr=0 clip=1e+30 seed=1");
  check_canonical("opt=rowwise_adagrad wd=decouple", "opt=rowwise_adagrad wd=decouple seed=1");
  check_canonical("wdtype=bf16 opt=sgd sr=1 step=4294967295",
                  "wdtype=bf16 opt=sgd sr=1 step=4294967295 seed=1");
  /* the GPU backward's schedule: defaults left out, canonical order after bwd.width */
  check_canonical("bwd.delay=2000 bwd.noise=1 bwd.order=shuffle bwd.grid=3 bwd.long=fused opt=sgd",
                  "opt=sgd bwd.long=fused bwd.grid=3 bwd.order=shuffle bwd.noise=1 bwd.delay=2000 "
                  "seed=1");
  check_canonical("opt=sgd bwd.order=asc bwd.noise=0 bwd.delay=0", "opt=sgd seed=1");
  check_canonical("opt=sgd bwd.delay=100000 seed=5", "opt=sgd bwd.delay=100000 seed=5");
  check_canonical("opt=rowwise_adagrad bwd.order=desc bwd.grid=65535",
                  "opt=rowwise_adagrad bwd.grid=65535 bwd.order=desc seed=1");
  /* bwd.steal: on printed after bwd.delay, off (the default) left out */
  check_canonical("bwd.steal=on bwd.delay=500 bwd.grid=2 opt=sgd",
                  "opt=sgd bwd.grid=2 bwd.delay=500 bwd.steal=on seed=1");
  check_canonical("opt=sgd bwd.steal=off", "opt=sgd seed=1");
  /* bwd.short_block: printed after bwd.delay, before bwd.steal */
  check_canonical("bwd.short_block=8 bwd.delay=500 opt=sgd",
                  "opt=sgd bwd.delay=500 bwd.short_block=8 seed=1");
  check_canonical("opt=rowwise_adagrad bwd.short_block=1 bwd.hoist=on",
                  "opt=rowwise_adagrad bwd.short_block=1 bwd.hoist=on seed=1");
  /* bwd.bulk: on and off printed after bwd.steal, auto (the default) left out; off is allowed
   * with either combine (auto resolves to it with the deterministic one) */
  check_canonical("bwd.bulk=on bwd.steal=on bwd.combine=atomic opt=sgd",
                  "opt=sgd bwd.combine=atomic bwd.steal=on bwd.bulk=on seed=1");
  check_canonical("opt=sgd bwd.bulk=auto", "opt=sgd seed=1");
  check_canonical("opt=sgd bwd.bulk=off", "opt=sgd bwd.bulk=off seed=1");
  check_canonical("opt=sgd bwd.combine=atomic bwd.bulk=off",
                  "opt=sgd bwd.combine=atomic bwd.bulk=off seed=1");
  /* bwd.hoist: on printed after bwd.steal, off (the default) left out */
  check_canonical("bwd.hoist=on bwd.steal=on opt=sgd",
                  "opt=sgd bwd.steal=on bwd.hoist=on seed=1");
  check_canonical("opt=sgd bwd.hoist=off", "opt=sgd seed=1");
  check_canonical("bwd.hoist=on bwd.bulk=on bwd.combine=atomic opt=sgd",
                  "opt=sgd bwd.combine=atomic bwd.bulk=on bwd.hoist=on seed=1");
  /* bwd.small_tc: on printed after bwd.hoist, off (the default) left out */
  check_canonical("bwd.small_tc=on bwd.hoist=on E=50 D=128 wdtype=fp16 opt=rowwise_adagrad "
                  "fwd.small=on",
                  "E=50 D=128 wdtype=fp16 fwd.small=on opt=rowwise_adagrad bwd.hoist=on "
                  "bwd.small_tc=on seed=1");
  check_canonical("opt=rowwise_adagrad bwd.small_tc=off", "opt=rowwise_adagrad seed=1");
  tbe_case *c = NULL;
  case_parse("opt=sgd bwd.grid=7 bwd.order=desc bwd.noise=1 bwd.delay=500", &c);
  const tbe_knobs *k = c ? case_knobs(c) : NULL;
  CHECK(k && k->gpu_bwd.grid == 7 && k->gpu_bwd.order == 1 && k->gpu_bwd.noise == 1 &&
            k->gpu_bwd.delay == 500 && k->gpu_bwd.steal == 0,
        "schedule knobs");
  case_free(c);
  case_parse("opt=rowwise_adagrad bwd.steal=on", &c);
  k = c ? case_knobs(c) : NULL;
  CHECK(k && k->gpu_bwd.steal == 1, "bwd.steal=on");
  tbe_case *d = NULL;
  case_parse("opt=rowwise_adagrad", &d);
  CHECK(c && d && !case_equal(c, d), "bwd.steal=on and off are different cases");
  case_free(d);
  case_free(c);
  case_parse("opt=rowwise_adagrad bwd.hoist=on", &c);
  k = c ? case_knobs(c) : NULL;
  CHECK(k && k->gpu_bwd.hoist == 1 && k->gpu_bwd.steal == 0, "bwd.hoist=on");
  case_parse("opt=rowwise_adagrad", &d);
  CHECK(c && d && !case_equal(c, d), "bwd.hoist=on and off are different cases");
  case_free(d);
  case_free(c);
  case_parse("T=2 E=50,1000 D=128 wdtype=fp16 opt=rowwise_adagrad bwd.small_tc=on", &c);
  k = c ? case_knobs(c) : NULL;
  CHECK(k && k->gpu_bwd.small_tc == 1 && k->gpu_bwd.hoist == 0,
        "bwd.small_tc=on with one small table of two");
  case_parse("T=2 E=50,1000 D=128 wdtype=fp16 opt=rowwise_adagrad", &d);
  CHECK(c && d && !case_equal(c, d), "bwd.small_tc=on and off are different cases");
  case_free(d);
  case_free(c);
  case_parse("opt=sgd", &c);
  k = c ? case_knobs(c) : NULL;
  CHECK(k && k->gpu_bwd.small_tc == 0 && k->gpu_bwd.grid == 0 && k->gpu_bwd.order == 0 &&
            k->gpu_bwd.noise == 0 && k->gpu_bwd.delay == 0 && k->gpu_bwd.steal == 0 &&
            k->gpu_bwd.hoist == 0,
        "schedule knobs' defaults (today's schedule)");
  case_free(c);
}

static void test_errors(void)
{
  static const struct {
    const char *text, *field;
  } cases[] = {
    {"X=1", "X"}, {"T", "T"}, {"T=", "T"}, {"=5", ""}, {"T=1 T=2", "T"}, {"T=0", "T"},
    {"T=4097", "T"}, {"T=abc", "T"}, {"T=-1", "T"}, {"T=+1", "T"},
    {"T=99999999999999999999999", "T"}, {"T=1\x01", "T"}, {"t=1", "t"},
    {"B=-1", "B"}, {"B=1..2", "B"}, {"B=1,2", "B"}, {"B=1/2", "B"}, {"vbe=1 B=3..1", "B"},
    {"vbe=1 B=1/2,3", "B"}, {"vbe=1 B=1,2 T=3", "B"}, {"vbe=1 B=1/2 R=3", "B"},
    {"vbe=1 B=1,,2", "B"}, {"B=2147483648", "B"}, {"vbe=1 B=1..x", "B"},
    {"R=2", "R"}, {"R=1", "R"}, {"vbe=1 R=0", "R"}, {"vbe=1 R=1025", "R"},
    {"vbe=2", "vbe"}, {"vbe=yes", "vbe"},
    {"E=0", "E"}, {"E=1,2", "E"}, {"E=1099511627777", "E"}, {"E=5..2", "E"}, {"T=3 E=1,,2", "E"},
    {"E=1.5", "E"}, {"E=", "E"}, {"E=1..", "E"},
    {"D=0", "D"}, {"D=2049", "D"}, {"T=2 D=1,2,3", "D"}, {"D=0..4", "D"},
    {"map=0,1 T=3", "map"}, {"map=4096", "map"}, {"map=a", "map"}, {"map=", "map"},
    {"map=0,-1", "map"},
    {"L=-1", "L"}, {"L=normal:1", "L"}, {"L=normal:1,-1", "L"}, {"L=normal:x,1", "L"},
    {"L=3..1", "L"}, {"L=normal:1,2,3", "L"}, {"L=normal:1e10,1", "L"}, {"L=normal:", "L"},
    {"dist=zipf:0", "dist"}, {"dist=zipf", "dist"}, {"dist=zipf:-1", "dist"},
    {"dist=normal", "dist"}, {"dist=zipf:nan", "dist"}, {"dist=zipf:inf", "dist"},
    {"dist=zipf:0x1p1", "dist"}, {"dist=zipf:101", "dist"}, {"dist=zipf:1e", "dist"},
    {"hot=1:0:1", "hot"}, {"hot=0:1000:1", "hot"}, {"hot=0:0:0", "hot"}, {"hot=0:0", "hot"},
    {"hot=0:1:1,0:1:2", "hot"}, {"hot=0:0:1:1", "hot"}, {"E=2..9 hot=0:9:1", "hot"},
    {"hot=", "hot"},
    {"wdtype=fp64", "wdtype"}, {"out=f16", "out"}, {"idx=int16", "idx"}, {"pool=max", "pool"},
    {"weighted=1 pool=mean", "weighted"}, {"weighted=1 pool=none", "weighted"},
    {"weighted=2", "weighted"},
    {"psw=1", "psw"}, {"weighted=0 psw=0.5", "psw"}, {"pool=mean psw=1", "psw"},
    {"weighted=1 pool=mean psw=1", "weighted"}, {"weighted=1 psw=nan", "psw"},
    {"weighted=1 psw=inf", "psw"}, {"weighted=1 psw=-inf", "psw"}, {"weighted=1 psw=2.5", "psw"},
    {"weighted=1 psw=-3", "psw"}, {"weighted=1 psw=1e-50", "psw"}, {"weighted=1 psw=abc", "psw"},
    {"weighted=1 psw=", "psw"}, {"weighted=1 psw=0x1p-1", "psw"}, {"weighted=1 psw=1,2", "psw"},
    {"weighted=1 psw=0.5 psw=0.5", "psw"},
    {"pool=none vbe=1", "pool"}, {"pool=none T=2 D=8,16", "pool"},
    {"pool=none T=2 D=8..16", "pool"}, {"pool=none T=3 map=0,1,2 D=8,8,9", "pool"},
    {"invalid=1.5", "invalid"}, {"invalid=-0.1", "invalid"}, {"invalid=abc", "invalid"},
    {"invalid=.", "invalid"}, {"invalid_kind=wrong", "invalid_kind"},
    {"corrupt=bogus", "corrupt"}, {"corrupt=negative:0", "corrupt"},
    {"corrupt=negative,negative:2", "corrupt"}, {"corrupt=wrong_last:2", "corrupt"},
    {"corrupt=", "corrupt"}, {"corrupt=negative:1:2", "corrupt"}, {"corrupt=,", "corrupt"},
    {"bounds=none invalid=0.1", "bounds"}, {"bounds=none invalid=0.1 invalid_kind=mix", "bounds"},
    {"bounds=none invalid=1 invalid_kind=negative", "bounds"},
    {"bounds=none corrupt=negative", "bounds"}, {"bounds=strict", "bounds"},
    {"seed=18446744073709551616", "seed"}, {"seed=-1", "seed"}, {"seed=1.5", "seed"},
    {"idx=int32 E=2147483648", "idx"}, {"idx=int32 E=1..3000000000", "idx"},
    {"idx=int32 T=2 E=5,2147483648", "idx"},
    {"fwd.bags=3", "fwd.bags"}, {"fwd.bags=8", "fwd.bags"}, {"fwd.bags=0", "fwd.bags"},
    {"fwd.width=6", "fwd.width"}, {"fwd.small=yes", "fwd.small"},
    {"fwd.gather=lanes", "fwd.gather"}, {"fwd.gather=leaner", "fwd.gather"},
    {"fused_bounds=2", "fused_bounds"}, {"fused_bounds=1 bounds=none", "fused_bounds"},
    {"opt=adam", "opt"}, {"opt=", "opt"}, {"lr=0.1", "lr"}, {"opt=none lr=0.1", "lr"},
    {"eps=1", "eps"}, {"opt=sgd eps=1", "eps"}, {"opt=sgd wd=l2", "wd"},
    {"opt=sgd wd=decouple", "wd"}, {"opt=sgd lambda=1", "lambda"}, {"wd=l2", "wd"},
    {"opt=rowwise_adagrad lambda=1", "lambda"}, {"opt=rowwise_adagrad wd=none lambda=1", "lambda"},
    {"opt=rowwise_adagrad wd=l1", "wd"}, {"opt=sgd lr=-1", "lr"}, {"opt=sgd lr=1e11", "lr"},
    {"opt=sgd lr=1e-50", "lr"}, {"opt=sgd lr=nan", "lr"}, {"opt=sgd lr=0x1p3", "lr"},
    {"opt=rowwise_adagrad eps=-1e-8", "eps"}, {"opt=sgd clip=0", "clip"},
    {"opt=sgd clip=-1", "clip"}, {"clip=1", "clip"}, {"opt=sgd clip=1e31", "clip"},
    {"opt=sgd sr=1", "sr"}, {"opt=sgd sr=2 wdtype=fp16", "sr"}, {"sr=0", "sr"},
    {"opt=sgd wdtype=fp16 step=1", "step"}, {"opt=sgd wdtype=fp16 sr=0 step=1", "step"},
    {"opt=sgd wdtype=fp16 sr=1 step=4294967296", "step"}, {"step=1", "step"},
    {"opt=sgd bwd.threshold=0", "bwd.threshold"}, {"bwd.threshold=4", "bwd.threshold"},
    {"bwd.chunk=4", "bwd.chunk"}, {"opt=sgd bwd.chunk=0", "bwd.chunk"},
    {"opt=sgd bwd.chunk=2147483648", "bwd.chunk"}, {"opt=sgd bwd.combine=random", "bwd.combine"},
    {"bwd.combine=atomic", "bwd.combine"}, {"bwd.bogus=1", "bwd.bogus"},
    {"opt=sgd bwd.grid=0", "bwd.grid"}, {"opt=sgd bwd.grid=65536", "bwd.grid"},
    {"opt=sgd bwd.grid=-1", "bwd.grid"}, {"opt=sgd bwd.grid=x", "bwd.grid"},
    {"bwd.grid=4", "bwd.grid"}, {"opt=sgd bwd.order=random", "bwd.order"},
    {"opt=sgd bwd.order=", "bwd.order"}, {"bwd.order=desc", "bwd.order"},
    {"opt=sgd bwd.noise=2", "bwd.noise"}, {"opt=sgd bwd.noise=yes", "bwd.noise"},
    {"bwd.noise=1", "bwd.noise"}, {"opt=sgd bwd.delay=100001", "bwd.delay"},
    {"opt=sgd bwd.delay=-1", "bwd.delay"}, {"opt=sgd bwd.delay=1us", "bwd.delay"},
    {"bwd.delay=500", "bwd.delay"}, {"opt=sgd bwd.steal=1", "bwd.steal"},
    {"opt=sgd bwd.steal=yes", "bwd.steal"}, {"opt=sgd bwd.steal=", "bwd.steal"},
    {"bwd.steal=on", "bwd.steal"}, {"opt=sgd bwd.short_block=0", "bwd.short_block"},
    {"opt=sgd bwd.short_block=3", "bwd.short_block"},
    {"opt=sgd bwd.short_block=64", "bwd.short_block"},
    {"opt=sgd bwd.short_block=on", "bwd.short_block"}, {"bwd.short_block=8", "bwd.short_block"},
    {"opt=sgd bwd.short_block=8 bwd.steal=on", "bwd.short_block"},
    {"opt=sgd bwd.combine=atomic bwd.bulk=1", "bwd.bulk"},
    {"opt=sgd bwd.bulk=on", "bwd.bulk"}, {"bwd.bulk=on", "bwd.bulk"},
    {"opt=sgd bwd.hoist=1", "bwd.hoist"},
    {"opt=sgd bwd.hoist=yes", "bwd.hoist"}, {"opt=sgd bwd.hoist=", "bwd.hoist"},
    {"bwd.hoist=on", "bwd.hoist"},
    /* bwd.small_tc: its words, and every case where no table can take it */
    {"E=50 wdtype=fp16 opt=rowwise_adagrad bwd.small_tc=1", "bwd.small_tc"},
    {"E=50 wdtype=fp16 opt=rowwise_adagrad bwd.small_tc=", "bwd.small_tc"},
    {"E=50 wdtype=fp16 bwd.small_tc=on", "bwd.small_tc"},
    {"E=50 wdtype=fp16 opt=sgd bwd.small_tc=on", "bwd.small_tc"},
    {"E=50 wdtype=fp16 fwd.small=off opt=rowwise_adagrad bwd.small_tc=on", "bwd.small_tc"},
    {"E=50 wdtype=fp32 opt=rowwise_adagrad bwd.small_tc=on", "bwd.small_tc"},
    {"E=50 wdtype=fp16 out=fp16 opt=rowwise_adagrad bwd.small_tc=on", "bwd.small_tc"},
    {"E=50 wdtype=fp16 pool=none opt=rowwise_adagrad bwd.small_tc=on", "bwd.small_tc"},
    {"E=50 wdtype=fp16 weighted=1 opt=rowwise_adagrad bwd.small_tc=on", "bwd.small_tc"},
    {"E=50 wdtype=fp16 vbe=1 B=2..4 opt=rowwise_adagrad bwd.small_tc=on", "bwd.small_tc"},
    {"E=65 wdtype=fp16 opt=rowwise_adagrad bwd.small_tc=on", "bwd.small_tc"},
    {"E=50 D=32 wdtype=fp16 opt=rowwise_adagrad bwd.small_tc=on", "bwd.small_tc"},
    {"E=50 D=256 wdtype=fp16 opt=rowwise_adagrad bwd.small_tc=on", "bwd.small_tc"},
    /* hot rows that need more lookups than their table's features can ever make */
    {"B=1 L=4 hot=0:0:100", "hot"}, {"B=4 L=4 hot=0:1:1000000000", "hot"},
    {"T=2 B=5 E=1,9 map=1,1 hot=0:0:1", "hot"}, {"B=1 L=0..4 hot=0:0:2,0:1:3", "hot"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    check_error(cases[i].text, cases[i].field);
}

static void test_format_truncation(void)
{
  tbe_case *c = NULL;
  case_parse("T=3 B=5 E=10,20,30 seed=99", &c);
  char full[BUF], small[8];
  int n = case_format(c, full, sizeof full);
  int m = case_format(c, small, sizeof small);
  CHECK(n == m && n == (int)strlen(full), "lengths %d %d", n, m);
  CHECK(strlen(small) == sizeof small - 1 && strncmp(small, full, sizeof small - 1) == 0,
        "truncated '%s' of '%s'", small, full);
  CHECK(case_format(c, NULL, 0) == n, "length with no buffer");
  CHECK(case_bounds(c) == TBE_BOUNDS_WARNING && case_seed(c) == 99, "accessors");
  case_free(c);
  case_parse("wdtype=bf16 fwd.bags=4 fwd.small=on opt=rowwise_adagrad lr=0.5 eps=0.25 wd=l2 "
             "lambda=0.125 clip=3 sr=1 step=7 bwd.threshold=5 bwd.chunk=6 bwd.combine=atomic "
             "seed=12345678901", &c);
  const tbe_knobs *k = case_knobs(c);
  const ref_bwd_config *b = &k->bwd;
  CHECK(k->fwd.bags == 4 && k->fwd.width == 0 && k->fwd.small == GPU_SMALL_ON &&
            !k->fwd.fused_bounds, "forward knobs");
  CHECK(b->opt.kind == REF_OPT_ROWWISE_ADAGRAD && b->opt.lr == 0.5f && b->opt.eps == 0.25f &&
            b->opt.wd == REF_WD_L2 && b->opt.lambda == 0.125f && b->clip == 3.0f &&
            b->opt.sr == 1 && b->opt.step == 7 && b->threshold == 5 && b->chunk == 6 &&
            b->combine == REF_COMBINE_ATOMIC && b->opt.seed == UINT64_C(12345678901),
        "backward knobs");
  case_free(c);
}

/* random valid cases: parse, canonical round trip */
static void test_random_cases(void)
{
  char text[BUF], canon[BUF];
  enum { WORDS = 15 };
  int keys_seen[WORDS] = {0};
  for (uint64_t i = 0; i < 3000; i++) {
    int n = case_random(5, i, text, sizeof text);
    CHECK(n > 0 && n < BUF, "case_random length %d", n);
    tbe_case *c = NULL;
    tbe_status st = case_parse(text, &c);
    CHECK(st.code == TBE_OK, "random case %llu '%s': %s: %s", (unsigned long long)i, text,
          st.field, st.message);
    if (!c)
      continue;
    case_format(c, canon, sizeof canon);
    check_canonical(text, canon);
    check_canonical(canon, canon);
    const char *words[WORDS] = {"vbe=1", "weighted=1", "map=", "pool=none", "invalid=",
                                "corrupt=", "hot=", "bounds=none", "opt=sgd",
                                "opt=rowwise_adagrad", "sr=1", "bwd.combine=atomic", "wd=",
                                "fused_bounds=1", "psw="};
    for (int k = 0; k < WORDS; k++)
      keys_seen[k] += strstr(canon, words[k]) != NULL;
    case_free(c);
  }
  for (int k = 0; k < WORDS; k++)
    CHECK(keys_seen[k] > 30, "random cases rarely draw key %d (%d times)", k, keys_seen[k]);
  char a[BUF], b[BUF];
  case_random(5, 17, a, sizeof a);
  case_random(5, 17, b, sizeof b);
  CHECK(strcmp(a, b) == 0, "case_random is not a function of (seed, index)");
  case_random(6, 17, b, sizeof b);
  CHECK(strcmp(a, b) != 0, "case_random ignores its seed");
}

/* mutated texts: parse must never crash, and whatever it accepts must round-trip */
static void test_mutations(void)
{
  static const char alphabet[] = "0123456789.,:/=-+ #eTBREDLxabcdfgimnoprstuvwz\t\x80";
  char text[BUF], canon[BUF];
  uint64_t key = prng_key(11, 3);
  int accepted = 0;
  for (uint64_t i = 0; i < 20000; i++) {
    int n = case_random(9, i / 4, text, sizeof text - 64);
    for (uint64_t m = 0; m < 1 + prng_at(key, 4 * i) % 4; m++) {
      uint64_t x = prng_at(key, 4 * i + 1 + m);
      int pos = (int)prng_below(x, (uint64_t)n + 1);
      char ch = alphabet[(x >> 32) % (sizeof alphabet - 1)];
      switch ((x >> 60) % 3) {
      case 0: /* replace */
        if (pos < n)
          text[pos] = ch;
        break;
      case 1: /* insert */
        memmove(text + pos + 1, text + pos, (size_t)(n - pos) + 1);
        text[pos] = ch;
        n++;
        break;
      default: /* delete */
        if (pos < n) {
          memmove(text + pos, text + pos + 1, (size_t)(n - pos));
          n--;
        }
      }
    }
    tbe_case *c = NULL;
    tbe_status st = case_parse(text, &c);
    CHECK((st.code == TBE_OK) == (c != NULL), "status and result disagree on '%s'", text);
    CHECK(st.code == TBE_OK || st.code == TBE_EINVAL, "'%s' gave %s", text,
          tbe_code_name(st.code));
    if (c) {
      accepted++;
      case_format(c, canon, sizeof canon);
      check_canonical(canon, canon);
      case_free(c);
    }
  }
  CHECK(accepted > 300 && accepted < 19000, "mutations accepted %d of 20000", accepted);
}

static void test_file_read(void)
{
  char path[] = "/tmp/case_test_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0, "mkstemp");
  FILE *f = fdopen(fd, "w");
  fputs("# header comment\n\nT=2 B=3   # two features\r\n   \n  E=5#no space\nL=1\n# end", f);
  fclose(f);
  case_list l;
  tbe_status st = case_file_read(path, &l);
  CHECK(st.code == TBE_OK, "read: %s", st.message);
  CHECK(l.count == 3, "%d cases", l.count);
  if (l.count == 3) {
    CHECK(strcmp(l.lines[0].text, "T=2 B=3") == 0 && l.lines[0].line == 3 &&
              strcmp(l.lines[0].comment, "two features") == 0,
          "line 0: '%s' '%s' %d", l.lines[0].text, l.lines[0].comment, l.lines[0].line);
    CHECK(strcmp(l.lines[1].text, "E=5") == 0 && strcmp(l.lines[1].comment, "no space") == 0 &&
              l.lines[1].line == 5,
          "line 1");
    CHECK(strcmp(l.lines[2].text, "L=1") == 0 && strcmp(l.lines[2].comment, "") == 0 &&
              l.lines[2].line == 6,
          "line 2");
  }
  case_list_free(&l);
  remove(path);
  st = case_file_read("/nonexistent/x.cases", &l);
  CHECK(st.code == TBE_EINVAL && strstr(st.message, "/nonexistent/x.cases"), "missing file: %s",
        st.message);
  st = case_file_read("/", &l);
  CHECK(st.code == TBE_EINVAL && strstr(st.message, "not a regular file"), "directory: %s",
        st.message);
  /* a NUL byte would end the case early: "B=4\0 seed=9" would run as seed=1 */
  strcpy(path, "/tmp/case_test_XXXXXX");
  fd = mkstemp(path);
  CHECK(fd >= 0, "mkstemp");
  CHECK(write(fd, "B=2\nB=4\0 seed=9\n", 17) == 17, "write");
  close(fd);
  st = case_file_read(path, &l);
  CHECK(st.code == TBE_EINVAL && st.position == 2 && strstr(st.message, "NUL byte at column 4"),
        "NUL byte: %s", st.message);
  remove(path);
}

/* every line of the shipped .cases files parses, is written canonically and says why */
static void test_case_files(void)
{
  const char *files[] = {"smoke.cases", "edge.cases", "slow.cases", "faults.cases"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    char path[1024], canon[BUF];
    snprintf(path, sizeof path, "%s/%s", CASES_DIR, files[i]);
    case_list l;
    tbe_status st = case_file_read(path, &l);
    CHECK(st.code == TBE_OK, "%s: %s", path, st.message);
    CHECK(l.count > 1, "%s has %d cases", files[i], l.count);
    for (int k = 0; k < l.count; k++) {
      tbe_case *c = NULL;
      st = case_parse(l.lines[k].text, &c);
      CHECK(st.code == TBE_OK, "%s:%d: '%s': %s: %s", files[i], l.lines[k].line,
            l.lines[k].text, st.field, st.message);
      CHECK(l.lines[k].comment[0], "%s:%d has no comment saying why", files[i], l.lines[k].line);
      if (!c)
        continue;
      case_format(c, canon, sizeof canon);
      CHECK(strcmp(canon, l.lines[k].text) == 0, "%s:%d is not canonical; write '%s'",
            files[i], l.lines[k].line, canon);
      for (int m = 0; m < k; m++)
        CHECK(strcmp(l.lines[m].text, l.lines[k].text) != 0, "%s:%d repeats line %d", files[i],
              l.lines[k].line, l.lines[m].line);
      case_free(c);
    }
    case_list_free(&l);
  }
}

/* b parses, differs from a (case_equal compares the field it changes), and prints back to
 * itself. */
static void check_differs(const tbe_case *a, const char *text, const char *what)
{
  tbe_case *b = NULL;
  tbe_status st = case_parse(text, &b);
  CHECK(st.code == TBE_OK && b, "'%s' does not parse: %s: %s", text, st.field, st.message);
  if (!b)
    return;
  CHECK(!case_equal(a, b), "'%s' equals the base case: case_equal does not compare %s", text,
        what);
  char buf[BUF];
  case_format(b, buf, sizeof buf);
  check_canonical(text, buf);
  case_free(b);
}

/* Every key changes the case: the base and the base with one key at another value (with what
 * that value needs) are different cases. A field that case_equal skipped would let the round
 * trips above drop or garble its key unseen, so the lists hold every key of the language: those
 * of the base as whole texts, the others as tokens added to it. */
static void test_every_key_counts(void)
{
  static const char base[] = "T=2 E=50,1000 D=128 wdtype=fp16 opt=rowwise_adagrad seed=1";
  static const char *const whole[] = {
    "T=3 E=50 D=128 wdtype=fp16 opt=rowwise_adagrad seed=1",
    "T=2 E=60,1000 D=128 wdtype=fp16 opt=rowwise_adagrad seed=1",
    "T=2 E=50 map=0,0 D=128 wdtype=fp16 opt=rowwise_adagrad seed=1",
    "T=2 E=50,1000 D=64 wdtype=fp16 opt=rowwise_adagrad seed=1",
    "T=2 E=50,1000 D=128 wdtype=fp32 opt=rowwise_adagrad seed=1",
    "T=2 E=50,1000 D=128 wdtype=fp16 opt=sgd seed=1",
    "T=2 E=50,1000 D=128 wdtype=fp16 opt=rowwise_adagrad seed=2"};
  static const char *const added[] = {
    "B=5", "vbe=1", "vbe=1 R=2", "L=5", "dist=zipf:1.1", "B=8 L=8 hot=0:3:20", "out=fp16",
    "idx=int32", "pool=mean", "weighted=1", "weighted=1 psw=0.5", "invalid=0.1",
    "invalid=0.1 invalid_kind=negative", "corrupt=negative", "bounds=fatal", "fwd.bags=2",
    "fwd.width=4", "fwd.small=on", "fwd.gather=direct", "fused_bounds=1", "lr=0.5", "eps=0.5",
    "wd=l2", "wd=l2 lambda=0.5", "clip=1", "sr=1", "sr=1 step=3", "bwd.threshold=8",
    "bwd.chunk=8", "bwd.combine=atomic", "bwd.long=fused", "bwd.bucket=0", "bwd.direct=0",
    "bwd.width=4", "bwd.grid=7", "bwd.order=desc", "bwd.noise=1", "bwd.delay=500",
    "bwd.short_block=4", "bwd.steal=on", "bwd.combine=atomic bwd.bulk=on", "bwd.hoist=on",
    "bwd.small_tc=on"};
  tbe_case *a = NULL;
  tbe_status st = case_parse(base, &a);
  CHECK(st.code == TBE_OK && a, "'%s' does not parse: %s", base, st.message);
  if (!a)
    return;
  for (size_t i = 0; i < sizeof whole / sizeof whole[0]; i++)
    check_differs(a, whole[i], "the key that differs");
  for (size_t i = 0; i < sizeof added / sizeof added[0]; i++) {
    char text[512];
    snprintf(text, sizeof text, "%s %s", base, added[i]);
    check_differs(a, text, added[i]);
  }
  case_free(a);
}

int main(void)
{
  test_canonical();
  test_every_key_counts();
  test_errors();
  test_format_truncation();
  test_random_cases();
  test_mutations();
  test_file_read();
  test_case_files();
  return TEST_MAIN_RESULT();
}
