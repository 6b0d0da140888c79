#!/usr/bin/env python3
"""oracle_test.py: unit tests of the NumPy oracle against small examples computed by hand from
TBE_SEMANTICS.md. Not the cross-check against the C reference (check.py).

Every expected value here comes from the spec or from exact rational arithmetic (fractions),
never from running the oracle; the rounding helpers are also checked against NumPy's own
single-rounding casts where NumPy has them. Exit 77 (skip) when NumPy is missing.
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

f32 = np.float32


def exact_round_f32(x):
    """The fp32 value nearest the Fraction x, ties to even, chosen by exact comparison among the
    neighbours of a first guess (independent of the oracle's rounding code)."""
    guess = np.float32(float(x))
    cands = [np.nextafter(guess, f32(-np.inf)), guess, np.nextafter(guess, f32(np.inf))]
    return min(cands, key=lambda v: (abs(Fraction(float(v)) - x),
                                     int(np.array(v).view(np.uint32)) & 1))


def case(T, B, E, D, wdtype="fp32", out_dtype="fp32", pool="sum", bounds="warning", R=0):
    """A manifest as export writes it, for run_case."""
    return dict(case="test", num_tables=len(E), T=T, B=B, R=R, wdtype=wdtype,
                out_dtype=out_dtype, itype="int64", pool=pool, bounds=bounds)


def arrays(E, D, weights, offsets, indices, ftm=None, psw=None, B_vbe=None):
    E, D = np.array(E, np.int64), np.array(D, np.int32)
    a = dict(weights=weights, E=E, D=D,
             table_offset=np.concatenate([[0], np.cumsum(E * D)]).astype(np.int64),
             feature_table_map=np.array(ftm if ftm is not None else range(len(E)), np.int32),
             offsets=np.array(offsets, np.int64), indices=np.array(indices, np.int64))
    if psw is not None:
        a["per_sample_weights"] = np.array(psw, np.float32)
    if B_vbe is not None:
        a["B_vbe"] = np.array(B_vbe, np.int32)
    return a


class BoundsCheck(unittest.TestCase):
    """Section 2's worked example: T=2, B=3, E = 10 and 20, N = 11."""

    offsets = np.array([0, 3, 2, 6, 8, 7, 13], np.int64)
    indices = np.array([1, 10, -5, 2, 3, 4, -1, 19, 25, 0, 5], np.int64)
    E_feat = [10, 20]
    bag_feature = np.array([0, 0, 0, 1, 1, 1])

    def run_mode(self, mode, offsets=None, indices=None):
        return oracle.bounds_check(self.offsets if offsets is None else offsets,
                                   self.indices if indices is None else indices,
                                   self.E_feat, self.bag_feature, mode)

    def test_warning_repairs_and_counts(self):
        o, i, w, off = self.run_mode("warning")
        self.assertEqual(o.tolist(), [0, 3, 3, 6, 8, 8, 11])
        self.assertEqual(i.tolist(), [1, 0, 0, 2, 3, 4, -1, 19, 0, 0, 5])
        self.assertEqual(w, 6)  # bags 1 and 4, the last offset, indices 10, -5, 25
        self.assertIsNone(off)
        self.assertEqual(self.offsets.tolist(), [0, 3, 2, 6, 8, 7, 13], "input modified")

    def test_ignore_repairs_without_counting(self):
        o, i, w, off = self.run_mode("ignore")
        self.assertEqual(o.tolist(), [0, 3, 3, 6, 8, 8, 11])
        self.assertEqual(i.tolist(), [1, 0, 0, 2, 3, 4, -1, 19, 0, 0, 5])
        self.assertEqual(w, 0)

    def test_fatal_names_bag_1_and_repairs_nothing(self):
        o, i, w, off = self.run_mode("fatal")
        self.assertEqual(o.tolist(), self.offsets.tolist())
        self.assertEqual(i.tolist(), self.indices.tolist())
        self.assertEqual((off["kind"], off["feature"], off["bag"]), ("offset", 0, 1))
        self.assertEqual((off["position"], off["value"]), (2, 2))  # end 2 < start 3

    def test_fatal_last_offset_is_bag_total_B(self):
        o = np.array([0, 3, 3, 6, 8, 8, 12])
        off = self.run_mode("fatal", offsets=o)[3]
        self.assertEqual((off["kind"], off["feature"], off["bag"], off["position"],
                          off["value"]), ("offset", -1, 6, 6, 12))

    def test_fatal_lowest_bag_wins_and_last_bag_ends_at_N(self):
        # bags 2 (end 5 < start 6) and 4 (end 12 > N) are bad, and the last offset
        o = np.array([0, 3, 6, 5, 8, 12, 12])
        off = self.run_mode("fatal", offsets=o)[3]
        self.assertEqual((off["feature"], off["bag"], off["position"], off["value"]),
                         (0, 2, 3, 5))
        # a negative start names the start's position
        o = np.array([-1, 3, 3, 6, 8, 8, 11])
        off = self.run_mode("fatal", offsets=o)[3]
        self.assertEqual((off["bag"], off["position"], off["value"]), (0, 0, -1))
        # the last bag's end is N, whatever offsets[total_B] says: start 12 > N = 11
        off = oracle.bounds_check(np.array([12, 11]), self.indices, [10], [0], "fatal")[3]
        self.assertEqual((off["feature"], off["bag"], off["position"], off["value"]),
                         (0, 0, 0, 12))
        # ... and a start <= N with offsets[total_B] > N is only the last offset's fault
        off = oracle.bounds_check(np.array([11, 12]), self.indices, [10], [0], "fatal")[3]
        self.assertEqual((off["feature"], off["bag"], off["position"]), (-1, 1, 1))

    def test_fatal_index_offender_is_lowest_position(self):
        o = np.array([0, 3, 3, 6, 8, 8, 11])
        off = self.run_mode("fatal", offsets=o)[3]
        self.assertEqual((off["kind"], off["feature"], off["bag"], off["position"],
                          off["value"]), ("index", 0, 0, 1, 10))
        idx = self.indices.copy()
        idx[[1, 2, 8]] = [0, 0, 0]
        idx[7] = 20  # E of feature 1 is 20
        off = self.run_mode("fatal", offsets=o, indices=idx)[3]
        self.assertEqual((off["feature"], off["bag"], off["position"], off["value"]),
                         (1, 3, 7, 20))
        idx[7] = 19
        self.assertIsNone(self.run_mode("fatal", offsets=o, indices=idx)[3])

    def test_none_trusts_everything(self):
        o, i, w, off = self.run_mode("none")
        self.assertEqual(o.tolist(), self.offsets.tolist())
        self.assertEqual(i.tolist(), self.indices.tolist())
        self.assertEqual((w, off), (0, None))

    def test_no_bags_and_dtype_kept(self):
        o, i, w, _ = oracle.bounds_check(np.array([3], np.int32), np.array([7, 7], np.int32),
                                         [5], np.zeros(0, np.int64), "warning")
        self.assertEqual((o.tolist(), i.tolist(), w), ([2], [7, 7], 1))  # only the last offset
        self.assertEqual((o.dtype, i.dtype), (np.int32, np.int32))


class Layout(unittest.TestCase):
    def test_vbe_example_of_section_1(self):
        # T=2, D=(4, 8), R=2, B=[[1,2],[3,1]]: blocks start at 0, 4, 28, 36; 44 values
        lay = oracle.Layout(2, 0, [4, 8], [[1, 2], [3, 1]])
        self.assertEqual(lay.out_elems, 44)
        # bags of feature 0: rank 0 sample 0, rank 1 samples 0, 1; then feature 1's
        self.assertEqual(lay.bag_out.tolist(), [0, 28, 32, 4, 12, 20, 36])
        self.assertEqual(lay.bag_feature.tolist(), [0, 0, 0, 1, 1, 1, 1])

    def test_fixed_batch(self):
        lay = oracle.Layout(2, 3, [2, 3])
        self.assertEqual(lay.out_elems, 15)
        self.assertEqual(lay.bag_out.tolist(), [0, 5, 10, 2, 7, 12])


class Rounding(unittest.TestCase):
    def bits(self, x, fmt):
        return int(oracle.store_bits(np.array([x], np.float64), fmt)[0])

    def test_fp16_rounds_once_from_double(self):
        self.assertEqual(self.bits(1 + 2**-11 + 2**-40, "fp16"), 0x3C01)  # above the tie
        self.assertEqual(self.bits(1 + 2**-11, "fp16"), 0x3C00)  # tie to even
        self.assertEqual(self.bits(1 + 3 * 2**-11, "fp16"), 0x3C02)
        self.assertEqual(self.bits(-(1 + 2**-11 + 2**-40), "fp16"), 0xBC01)
        self.assertEqual(self.bits(2**-25, "fp16"), 0x0000)  # half the least subnormal: even
        self.assertEqual(self.bits(3 * 2**-25, "fp16"), 0x0002)
        self.assertEqual(self.bits(2**-25 + 2**-60, "fp16"), 0x0001)
        self.assertEqual(self.bits(65519.99, "fp16"), 0x7BFF)
        self.assertEqual(self.bits(65520.0, "fp16"), 0x7C00)  # the tie above 65504 overflows
        self.assertEqual(self.bits(-1e300, "fp16"), 0xFC00)
        self.assertEqual(self.bits(-0.0, "fp16"), 0x8000)
        self.assertEqual(self.bits(1e-300, "fp16"), 0x0000)
        self.assertEqual(self.bits(np.nan, "fp16") & 0x7C00, 0x7C00)
        self.assertNotEqual(self.bits(np.nan, "fp16") & 0x03FF, 0)

    def test_bf16_rounds_once_from_double(self):
        # the spec's measurement: 1 + 2^-8 + 2^-40 is 0x3F81 directly, 0x3F80 via fp32
        self.assertEqual(self.bits(1 + 2**-8 + 2**-40, "bf16"), 0x3F81)
        self.assertEqual(self.bits(1 + 2**-8, "bf16"), 0x3F80)
        self.assertEqual(self.bits(1 + 3 * 2**-8, "bf16"), 0x3F82)
        self.assertEqual(self.bits(2**-134, "bf16"), 0x0000)  # half the least subnormal
        self.assertEqual(self.bits(3 * 2**-134, "bf16"), 0x0002)
        self.assertEqual(self.bits(2**-134 * (1 + 2**-30), "bf16"), 0x0001)
        self.assertEqual(self.bits(2**-126 * (1 - 2**-9), "bf16"), 0x0080)  # up to min normal
        big = float(np.finfo(np.float32).max)
        self.assertEqual(self.bits(big, "bf16"), 0x7F80)  # past bf16's max (0x7F7F) + half ulp
        self.assertEqual(self.bits((2 - 2**-7) * 2**127, "bf16"), 0x7F7F)
        self.assertEqual(self.bits((2 - 2**-8) * 2**127, "bf16"), 0x7F80)  # the tie overflows
        self.assertEqual(self.bits(-np.inf, "bf16"), 0xFF80)
        self.assertEqual(self.bits(-0.0, "bf16"), 0x8000)
        nan = self.bits(np.nan, "bf16")
        self.assertTrue(nan & 0x7F80 == 0x7F80 and nan & 0x7F)

    def test_agrees_with_numpy_single_roundings(self):
        # NumPy's float32 -> float16 and float64 -> float32 casts round once, to nearest even
        rng = np.random.default_rng(5)
        x = (rng.standard_normal(200000) * np.exp2(rng.integers(-30, 20, 200000)))
        x32 = x.astype(np.float32).astype(np.float64)
        ties = np.array([1 + 2**-11, 1 + 3 * 2**-11, 2**-25, 3 * 2**-25, 65520.0, 2048 + 1])
        for v in (x32, ties):
            np.testing.assert_array_equal(oracle.store_bits(v, "fp16"),
                                          v.astype(np.float16).view(np.uint16))
        np.testing.assert_array_equal(oracle.store_bits(x, "fp32"),
                                      x.astype(np.float32).view(np.uint32))
        # bf16 against exact rounding of the fp32 bits (an fp32 value has no tail past 32 bits)
        b32 = x32.astype(np.float32).view(np.uint32)
        low, high = b32 & 0xFFFF, b32 >> 16
        up = (low > 0x8000) | ((low == 0x8000) & (high & 1 == 1))
        np.testing.assert_array_equal(oracle.store_bits(x32, "bf16"), (high + up).astype(np.uint16))


class Fma(unittest.TestCase):
    def check(self, a, b, c):
        got = oracle.fma_f32(np.array([a], f32), np.array([b], f32), np.array([c], f32))[0]
        want = exact_round_f32(Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c)))
        self.assertEqual(np.array(got).view(np.uint32), np.array(want).view(np.uint32),
                         f"fma({float(a).hex()}, {float(b).hex()}, {float(c).hex()})")
        return got

    def test_double_rounding_cases(self):
        # (w, r, acc, correct): fl32(fl64(w*r + acc)) lands on an fp32 tie and rounds wrongly
        cases = [
            # r = 1 + 2^-10 (fp16): w*r = 2^-24 + 2^-54, exact sum just above the tie at 1
            (f32(2**-24 * (1 - 2**-10 + 2**-20)), f32(1 + 2**-10), f32(1), 1 + 2**-23),
            # r = 1 - 2^-11 (fp16): w*r = 2^-24 - 2^-57 under a tie whose even side is up
            (f32(2**-24 * (1 + 2**-11 + 2**-22)), f32(1 - 2**-11), f32(1 + 2**-23), 1 + 2**-23),
            # r = 0xcd/128 (bf16 0x3FCD)
            (f32(float.fromhex("0x1.3fb014p-25")), f32(205 / 128), f32(1), 1 + 2**-23),
        ]
        for w, r, acc, correct in cases:
            naive = np.float32(float(w) * float(r) + float(acc))
            self.assertNotEqual(float(naive), correct, "not a double-rounding case")
            self.assertEqual(float(self.check(w, r, acc)), correct)

    def test_random_against_exact(self):
        rng = np.random.default_rng(11)
        n = 3000
        w = (rng.standard_normal(n) * np.exp2(rng.integers(-20, 20, n))).astype(f32)
        r = rng.standard_normal(n).astype(np.float16).astype(f32)
        acc = (rng.standard_normal(n) * np.exp2(rng.integers(-20, 20, n))).astype(f32)
        acc[::3] = -(w[::3] * r[::3])  # cancellation, exact zero
        acc[1::7] = f32(2**-140)  # fp32 subnormal results
        w[1::7] = f32(2**-130)
        for i in range(n):
            self.check(w[i], r[i], acc[i])
        self.assertEqual(self.check(f32(-1), f32(1), f32(1)), 0)
        self.assertFalse(np.signbit(self.check(f32(-1), f32(1), f32(1))))  # +0 under RNE


class Forward(unittest.TestCase):
    def test_sum_fp32_weights_accumulate_in_fp64(self):
        # 1 + 2^-30 - 1 in fp64 keeps 2^-30; an fp32 sum would give 0
        W = np.array([1, 2**-30, -1], f32)
        m = case(1, 1, [3], [1])
        res = oracle.run_case(m, arrays([3], [1], W, [0, 3], [0, 1, 2]))
        self.assertEqual(res.output_bits.view(f32).tolist(), [2**-30])

    def test_sum_fp16_weights_accumulate_in_fp32(self):
        # 2048 + 1 + 1 in fp32 is 2050; fp16 arithmetic would give 2048
        W = np.array([2048, 1], np.float16)
        m = case(1, 1, [2], [1], wdtype="fp16", out_dtype="fp16")
        res = oracle.run_case(m, arrays([2], [1], W, [0, 3], [0, 1, 1]))
        self.assertEqual(res.output_bits.tolist(), [np.float16(2050).view(np.uint16)])

    def test_mean_uses_the_reciprocal_and_counts_pruned(self):
        # bag 0: rows 1, 2, 4 and a -1: L = 4, (1+2+4) * (1/4) = 1.75; bag 1 empty: 0
        W = np.array([[1, 10], [2, 20], [4, 40]], np.float16).reshape(-1)
        m = case(1, 2, [3], [2], wdtype="fp16", out_dtype="fp32", pool="mean")
        res = oracle.run_case(m, arrays([3], [2], W, [0, 4, 4], [0, 1, -1, 2]))
        self.assertEqual(res.output_bits.view(f32).tolist(), [1.75, 17.5, 0, 0])
        # L = 3 and sum 7 in fp32: 7 * fl32(1/3) rounds differently from 7 / 3
        W = np.array([7, 0], np.float16)
        res = oracle.run_case(case(1, 1, [2], [1], wdtype="fp16", pool="mean"),
                              arrays([2], [1], W, [0, 3], [0, 1, 1]))
        want = exact_round_f32(7 * Fraction(float(np.float32(1) / np.float32(3))))
        self.assertNotEqual(want, np.float32(7) / np.float32(3))
        self.assertEqual(res.output_bits.view(f32)[0], want)

    def test_weighted_fp16_is_a_chain_of_fmas(self):
        # acc = fma(w1, r1, fma(w0, r0, 0)) with the first double-rounding case above
        w = [1.0, 2**-24 * (1 - 2**-10 + 2**-20)]
        W = np.array([1, 1 + 2**-10], np.float16)
        m = case(1, 1, [2], [1], wdtype="fp16", out_dtype="fp32")
        res = oracle.run_case(m, arrays([2], [1], W, [0, 2], [0, 1], psw=w))
        self.assertEqual(res.output_bits.view(f32).tolist(), [1 + 2**-23])

    def test_vbe_output_and_pool_none(self):
        W = np.arange(1, 1 + 4 * 2 + 2 * 3, dtype=f32)  # table 0: 4x2, table 1: 2x3
        m = case(2, 0, [4, 2], [2, 3], R=2)
        a = arrays([4, 2], [2, 3], W, [0, 1, 2, 3, 4], [3, 0, 1, -1], B_vbe=[[1, 1], [2, 0]])
        res = oracle.run_case(m, a)
        # blocks: (r0,f0) bag 0 at 0; (r0,f1) bags 2, 3 at 2, 5; (r1,f0) bag 1 at 8
        self.assertEqual(res.output_bits.view(f32).tolist(),
                         [7, 8, 12, 13, 14, 0, 0, 0, 1, 2])
        m = case(2, 2, [4, 2], [2, 2], pool="none", out_dtype="bf16")
        W = np.arange(1, 13, dtype=f32)
        a = arrays([4, 2], [2, 2], W, [0, 1, 2, 2, 3], [3, 0, 1], ftm=[0, 1])
        a["indices"] = np.array([3, 0, -1], np.int64)
        res = oracle.run_case(m, a)
        self.assertEqual((res.output_bits.astype(np.uint32) << 16).view(f32).tolist(),
                         [7, 8, 1, 2, 0, 0])


if __name__ == "__main__":
    unittest.main()
