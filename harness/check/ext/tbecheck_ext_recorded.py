"""tbecheck_ext_recorded.py: the ext.recorded engine: replays what another engine recorded elsewhere
(an adapter's TBECHECK_..._DUMP: DIR/<SHA-1 of the case's text, 16 hex>.npz), in the order of the
engine that recorded them (TBECHECK_RECORDED_ORDER, default "triton"). Not an adapter.

What the recording lacks is declined (a case it has no file for is refused). With it, a model of
that order is held to a GPU's bits on a machine without one (recorded_test.py, recorded/).
"""

import hashlib
import os

import numpy as np

ORDER = os.environ.get("TBECHECK_RECORDED_ORDER", "triton")
WHERE = os.environ.get("TBECHECK_RECORDED", "")
OUTPUTS = ("indices", "offsets", "warnings", "output", "weights", "momentum", "psw_grad")


def version():
    if not os.path.isdir(WHERE):
        raise RuntimeError(f"TBECHECK_RECORDED names no directory ({WHERE!r})")
    return f"outputs recorded in {os.path.abspath(WHERE)}, order {ORDER}"


def run(case):
    name = hashlib.sha1(case.manifest["case"].encode()).hexdigest()[:16] + ".npz"
    path = os.path.join(WHERE, name)
    if not os.path.exists(path):
        raise NotImplementedError(f"no recording of this case ({name})")
    with np.load(path) as z:
        got = {k: z[k] for k in z.files if k in OUTPUTS}
    if "warnings" in got:
        got["warnings"] = int(got["warnings"])
    missing = [k for k in ("indices", "offsets", "warnings") if k not in got]
    if missing:
        got["declined"] = dict.fromkeys(missing, "the recording has no bounds check's results")
    return got
