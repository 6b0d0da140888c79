#!/usr/bin/env python3
"""oracle_backward_test.py: unit tests of the oracle's backward and optimizers against examples
worked by hand from TBE_SEMANTICS.md sections 4-5 and against Random123's published Philox
vectors. Not the cross-check against the C reference (check.py).

Expected values come from the spec, from exact rational arithmetic (fractions) or from the
published known answers, never from running the oracle. Exit 77 (skip) when NumPy is missing.
"""

import os
import sys
import unittest
from fractions import Fraction

try:
    import numpy as np
except ImportError as e:
    print(f"SKIP: the oracle needs NumPy: {e}")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tbe_oracle as oracle  # noqa: E402
import tbe_oracle_backward as bwd  # noqa: E402
from oracle_test import exact_round_f32 as rne32  # noqa: E402

f32 = np.float32


def manifest(E, D, opt="sgd", lr=1.0, pool="sum", wdtype="fp32", out_dtype="fp32", B=1, T=None,
             **kw):
    m = dict(case="test", num_tables=len(E), T=T or len(E), B=B, R=0, wdtype=wdtype,
             out_dtype=out_dtype, itype="int64", pool=pool, bounds="warning", opt=opt, lr=lr,
             eps=0.0, wd="none", clip=0.0, **{"lambda": 0.0}, sr=0, step=0, seed=1,
             bwd_threshold=256, bwd_chunk=256, bwd_combine="deterministic", ref_backward="ok")
    m.update(kw)
    return m


def inputs(E, D, weights, offsets, indices, grad, momentum=None, psw=None, ftm=None):
    E, D = np.array(E, np.int64), np.array(D, np.int32)
    a = dict(weights=np.array(weights, np.float32), E=E, D=D,
             table_offset=np.concatenate([[0], np.cumsum(E * D)]).astype(np.int64),
             feature_table_map=np.array(ftm if ftm is not None else range(len(E)), np.int32),
             offsets=np.array(offsets, np.int64), indices=np.array(indices, np.int64),
             grad_output=np.array(grad, np.float32))
    if momentum is not None:
        a["momentum"] = np.array(momentum, np.float32)
    if psw is not None:
        a["per_sample_weights"] = np.array(psw, np.float32)
    return a


def run(m, a):
    return bwd.run_backward(m, a, oracle.run_case(m, a))


class Philox(unittest.TestCase):
    def test_random123_known_answers(self):
        kat = [((0, 0, 0, 0), (0, 0), (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)),
               ((0xffffffff,) * 4, (0xffffffff,) * 2,
                (0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd)),
               ((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), (0xa4093822, 0x299f31d0),
                (0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1))]
        for ctr, key, want in kat:
            got = bwd.philox4x32_10([np.array([c]) for c in ctr], key)
            self.assertEqual([int(w[0]) for w in got], list(want))


class StochasticRounding(unittest.TestCase):
    def sr(self, x, fmt, u):
        return int(bwd.store(np.array([x], np.float32), fmt, 1,
                             lambda: np.array([u], np.uint64))[0])

    def test_representable_values_stay(self):
        h = np.arange(65536, dtype=np.uint16)
        for fmt in ("fp16", "bf16"):
            x = bwd.widen(h.view(np.float16) if fmt == "fp16" else h, fmt)
            ok = np.isfinite(x)
            for u in (0, 0xFFFFFFFF):
                got = bwd.store(x[ok], fmt, 1, lambda: np.full(int(ok.sum()), u, np.uint64))
                self.assertTrue((got == h[ok]).all(), fmt)

    def test_threshold(self):
        # 1 + 2^-12 is a quarter of the fp16 spacing (2^-10) above 1: up iff u < 2^30
        self.assertEqual(self.sr(1 + 2**-12, "fp16", 2**30 - 1), 0x3C01)
        self.assertEqual(self.sr(1 + 2**-12, "fp16", 2**30), 0x3C00)
        self.assertEqual(self.sr(-(1 + 2**-12), "fp16", 0), 0xBC01)
        self.assertEqual(self.sr(2**-26, "fp16", 2**30 - 1), 0x0001)  # below the least subnormal
        self.assertEqual(self.sr(-(2**-26), "fp16", 2**30), 0x8000)
        # toward zero across a binade: 2 - 2^-13 truncates to 2 - 2^-10, not 2
        self.assertEqual(self.sr(2 - 2**-13, "fp16", 0xFFFFFFFF), 0x3FFF)
        # past 65504 (spacing 32): Inf with probability (x - 65504) / 32; 70000 always
        self.assertEqual(self.sr(65519.0, "fp16", 0x77FFFFFF), 0x7C00)
        self.assertEqual(self.sr(65519.0, "fp16", 0x78000000), 0x7BFF)
        self.assertEqual(self.sr(70000.0, "fp16", 0xFFFFFFFF), 0x7C00)
        # bf16: the dropped 16 bits are the threshold
        x = np.array([0x3F80ABCD], np.uint32).view(np.float32)[0]
        self.assertEqual(self.sr(x, "bf16", 0xABCD0000 - 1), 0x3F81)
        self.assertEqual(self.sr(x, "bf16", 0xABCD0000), 0x3F80)


class LaneSum(unittest.TestCase):
    def test_butterfly_order(self):
        # D = 3: lanes 0, 1, 2 hold one square each (fma from +0 rounds the product once);
        # the butterfly ends with (s0 + s2) + s1 (o = 2 joins lanes 0 and 2, o = 1 adds lane 1)
        g = np.array([[1 + 2**-12, 3 + 2**-20, 1 + 2**-11]], np.float32)
        s = [rne32(Fraction(float(v)) ** 2) for v in g[0]]
        want = rne32(Fraction(float(rne32(Fraction(float(s[0])) + Fraction(float(s[2])))))
                     + Fraction(float(s[1])))
        self.assertEqual(bwd.lane_sum(g, g)[0], want)

    def test_lane_chain(self):
        # D = 33: lane 0 is fma(g32, g32, fma(g0, g0, 0)), every other lane one square
        g = np.zeros((1, 33), np.float32)
        g[0, 0], g[0, 32] = 1 + 2**-12, 1 + 2**-13
        lane0 = rne32(Fraction(float(g[0, 32])) ** 2 + Fraction(float(rne32(
            Fraction(float(g[0, 0])) ** 2))))
        self.assertEqual(bwd.lane_sum(g, g)[0], lane0)


class Backward(unittest.TestCase):
    def test_sgd_clip_mean_untouched(self):
        # E = 5, D = 2, weights w[r][d] = 2 r + d; bags {1, 3}, {1}, {-1, 4}; lr 1, clip 4
        w = list(range(10))
        grad = [1, 2, 3, -5, 6, 0.5]
        for pool, h in (("sum", 1), ("mean", 0.5)):
            m = manifest([5], [2], pool=pool, B=3, clip=4.0)
            res = run(m, inputs([5], [2], w, [0, 2, 3, 5], [1, 3, 1, -1, 4], grad))
            want = [0, 1, 2 - (h + 3), 3 - (2 * h - 4), 4, 5, 6 - h, 7 - 2 * h, 8 - 4 * h,
                    9 - 0.5 * h]
            self.assertEqual(res.weights.tolist(), want, pool)

    def test_chunk_order(self):
        # one row hit five times, contributions 1, then 2^-24 four times, lr 1, zero weights:
        # the stored weight is -g. One sequence ties back to 1 each time; chunks of 2 give
        # partials 1, 2^-23, 2^-24 -> 1 + 2^-23 -> 1 + 2^-22 (the tie goes to even).
        grad = [1.0] + [2.0**-24] * 4
        for threshold, chunk, want in ((6, 2, -1.0), (5, 2, -(1 + 2**-22)), (2, 3, -(1 + 2**-23)),
                                       (2, 4, -1.0), (5, 1, -1.0)):
            m = manifest([2], [1], B=5, bwd_threshold=threshold, bwd_chunk=chunk)
            res = run(m, inputs([2], [1], [0, 0], range(6), [1] * 5, grad))
            self.assertEqual(res.weights.tolist(), [0.0, want], (threshold, chunk))

    def test_atomic_combine_in_fp64(self):
        # the same row in atomic mode: the partials are added in fp64 and rounded once, so
        # 1 + 4 * 2^-24 = 1 + 2^-22 survives where the fp32 chain ties back to 1
        grad = [1.0] + [2.0**-24] * 4
        for combine, want in (("deterministic", -1.0), ("atomic", -(1 + 2**-22))):
            m = manifest([2], [1], B=5, bwd_threshold=2, bwd_chunk=1, bwd_combine=combine)
            res = run(m, inputs([2], [1], [0, 0], range(6), [1] * 5, grad))
            self.assertEqual(res.weights.tolist(), [0.0, want], combine)

    def test_adagrad_and_shared_table(self):
        # features 0 and 1 share one table (E = 2, D = 1): row 1 gets 2 + 1 = 3 (feature order);
        # m = 1 + 9/1 = 10, mu = 1 / sqrt(10), w = 5 - mu * 3; row 0 untouched
        m = manifest([2], [1], opt="rowwise_adagrad", T=2, B=1)
        a = inputs([2], [1], [7, 5], [0, 1, 2], [1, 1], [2, 1], momentum=[0.5, 1.0],
                   ftm=[0, 0])
        res = run(m, a)
        mu = f32(1) / np.sqrt(f32(10))
        self.assertEqual(res.momentum.tolist(), [0.5, 10.0])
        self.assertEqual(res.weights[0], f32(7))
        self.assertEqual(res.weights[1], rne32(5 - Fraction(float(mu)) * 3))

    def test_weight_decay_modes(self):
        # D = 1, g = 1, w = 2, lambda = 0.5, lr = 1, eps = 0, m = 0
        for wd, gd, c in (("l2", 2.0, "mu"), ("decouple", 1.0, 0.5)):
            m = manifest([1], [1], opt="rowwise_adagrad", wd=wd)
            m["lambda"] = 0.5
            res = run(m, inputs([1], [1], [2], [0, 1], [0], [1], momentum=[0]))
            mu = f32(1) / np.sqrt(f32(gd * gd))
            cc = f32(1) - mu * f32(0.5) if c == "mu" else f32(c)
            self.assertEqual(res.momentum[0], f32(gd * gd), wd)
            self.assertEqual(res.weights[0], rne32(Fraction(float(cc * f32(2))) -
                                                   Fraction(float(mu))), wd)

    def test_psw_grad_and_pruned(self):
        # psw_grad[p] = the lane sum of g * w for the bag's g and the row before the update;
        # a -1 position gets 0
        m = manifest([3], [2], B=1)
        a = inputs([3], [2], [1, 2, 3, 4, 5, 6], [0, 3], [2, -1, 0], [0.5, -1],
                   psw=[2, 7, 3])
        res = run(m, a)
        self.assertEqual(res.psw_grad.tolist(), [0.5 * 5 - 6, 0, 0.5 * 1 - 2])
        # row 2 gets 2 * g, row 0 gets 3 * g: SGD with lr 1
        self.assertEqual(res.weights.tolist(), [1 - 1.5, 2 + 3, 3, 4, 5 - 1, 6 + 2])


if __name__ == "__main__":
    unittest.main()
