#!/usr/bin/env python3
"""triton_adapter_test.py: the ext.triton adapter's host-side rules that need no GPU and no
torchrec checkout (the offsets the fused check leaves, the refusal of a first table's -1).

Runs under $TBECHECK_PYTHON (the adapter imports torch; the ext tier's venv has it); a skip
(exit 77) where no interpreter here can import torch.
"""

import os
import subprocess
import sys
import unittest

SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))


class RepairedOffsets(unittest.TestCase):
    def test_semantics_worked_example(self):
        # ref/SEMANTICS.md 2's example: a running clamp, the last offset N
        got = adapter.repaired_offsets(np.array([0, 3, 2, 6, 8, 7, 13]), 11)
        self.assertEqual(got.tolist(), [0, 3, 3, 6, 8, 8, 11])

    def test_negative_and_past_the_end(self):
        got = adapter.repaired_offsets(np.array([-4, 2, 50, 1, 3]), 6)
        self.assertEqual(got.tolist(), [0, 2, 6, 6, 6])


def case(offsets, indices, E=(10, 20)):
    """Manifest and arrays of a fixed batch of two features, one per table, two bags each."""
    m = {"T": 2, "B": 2, "R": 0}
    a = {"indices": np.array(indices, np.int32), "offsets": np.array(offsets, np.int32),
         "table_offset": np.array([0, E[0], E[0] + E[1]], np.int64),
         "feature_table_map": np.array([0, 1], np.int32)}
    return m, a


class RefusePruned(unittest.TestCase):
    def test_corrupt_offsets_without_pruned_rows(self):
        # offsets whose positive steps cover more positions than there are indices (the case
        # `invalid=0.1 corrupt=negative,decreasing:2,wrong_last seed=33` of triton.cases)
        m, a = case([0, 9, 3, 12, 40], [1, 2, 3, 4, 5, 6, 7, 8])
        adapter.refuse_pruned(m, a)

    def test_second_table_pruned_row_runs(self):
        m, a = case([0, 2, 4, 6, 8], [1, 2, 3, 4, -1, 5, 6, 7])
        adapter.refuse_pruned(m, a)

    def test_first_table_pruned_row_refused(self):
        m, a = case([0, 2, 4, 6, 8], [1, -1, 3, 4, 5, 5, 6, 7])
        with self.assertRaises(NotImplementedError):
            adapter.refuse_pruned(m, a)

    def test_owner_by_repaired_offsets(self):
        # repaired, [0, 2, 9, 1, 8] is [0, 2, 8, 8, 8]: every position is feature 0's, so the
        # -1 at 5 is the first table's (by the raw offsets it would be the second's)
        m, a = case([0, 2, 9, 1, 8], [1, 2, 3, 4, 5, -1, 6, 7])
        with self.assertRaises(NotImplementedError):
            adapter.refuse_pruned(m, a)


def main():
    global np, adapter
    try:
        import numpy as np
        import torch  # noqa: F401 (the adapter's import)
    except ImportError:
        python = os.environ.get("TBECHECK_PYTHON")
        if python and not os.environ.get("TBECHECK_ADAPTER_TEST_CHILD"):
            env = dict(os.environ, TBECHECK_ADAPTER_TEST_CHILD="1")
            return subprocess.run([python, os.path.abspath(__file__)], env=env).returncode
        print(f"SKIP: {sys.executable} cannot import numpy and torch (the ext tier's venv can)")
        return SKIP
    sys.path.insert(0, HERE)
    import tbecheck_ext_triton as adapter
    r = unittest.main(argv=[sys.argv[0]], exit=False, verbosity=2).result
    return 0 if r.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
