#!/usr/bin/env python3
"""sh_commands_test.py: every CTest command of the form `sh -c SCRIPT` ends at SCRIPT, and each
stand-in that says SKIP exits 77 under a SKIP_RETURN_CODE of 77. Not the tests themselves.

Why: CMake splits a quoted argument at each ';' when it passes through a function's argument
list (tbe_gpu_test's COMMAND), so "echo SKIP; exit 77" reached sh as the script "echo SKIP"
and a stray argument: the test exited 0 and CTest counted a GPU test passed on a machine
without one. Usage: sh_commands_test.py CTEST BUILD_DIR
"""
import json
import subprocess
import sys


def main():
    ctest, build = sys.argv[1], sys.argv[2]
    out = subprocess.run([ctest, "--test-dir", build, "--show-only=json-v1"], check=True,
                         capture_output=True, text=True).stdout
    tests = json.loads(out)["tests"]
    bad = []
    shells = 0
    for t in tests:
        cmd = t.get("command", [])
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        for i in range(len(cmd) - 1):
            if cmd[i].endswith("sh") and cmd[i + 1] == "-c":
                shells += 1
                script = cmd[i + 2] if i + 2 < len(cmd) else ""
                if i + 3 != len(cmd):
                    bad.append(f"{t['name']}: sh -c {script!r} is followed by {cmd[i + 3:]!r} "
                               "(a ';' in the CMake string split it)")
                if "SKIP" in script and ("exit 77" not in script or
                                         str(props.get("SKIP_RETURN_CODE")) != "77"):
                    bad.append(f"{t['name']}: the SKIP stand-in {script!r} must exit 77 under "
                               f"SKIP_RETURN_CODE 77 (has {props.get('SKIP_RETURN_CODE')})")
                break
    for b in bad:
        print("FAIL:", b)
    print(f"{'FAIL' if bad else 'pass'}: {shells} sh -c commands among {len(tests)} tests")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
