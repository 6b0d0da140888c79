#!/usr/bin/env python3
"""gpu_resources_test.py: gpu_resources.py without a GPU: the spec from a stand-in nvidia-smi,
the launcher's CUDA_VISIBLE_DEVICES from CTest's allocation (and a malformed one refused), and
CTest itself spreading two tests that cannot share a GPU over two stand-in GPUs."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu_resources.py")
PY = sys.executable


def check(cond, what):
    if not cond:
        print(f"FAIL: {what}")
        sys.exit(1)


def main():
    work = tempfile.mkdtemp(prefix="gpu_resources_test.")
    try:
        smi = os.path.join(work, "nvidia-smi")
        with open(smi, "w") as f:
            f.write("#!/bin/sh\nprintf '0, 143771\\n1, 143771\\n'\n")
        os.chmod(smi, 0o755)
        spec = json.loads(subprocess.run([PY, TOOL, "spec", "--nvidia-smi", smi],
                                         capture_output=True, text=True, check=True).stdout)
        check(spec["version"] == {"major": 1, "minor": 0} and
              spec["local"][0]["gpus"] == [{"id": "0", "slots": 140}, {"id": "1", "slots": 140}],
              f"spec: {spec}")
        show = [PY, TOOL, "run", "--", PY, "-c",
                "import os; print(os.environ.get('CUDA_VISIBLE_DEVICES', '-'))"]
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("CTEST_RESOURCE") and k != "CUDA_VISIBLE_DEVICES"}
        r = subprocess.run(show, capture_output=True, text=True, env=env)
        check(r.returncode == 0 and r.stdout.strip() == "-", f"no allocation: {r.stdout}")
        r = subprocess.run(show, capture_output=True, text=True,
                           env=dict(env, CTEST_RESOURCE_GROUP_COUNT="1",
                                    CTEST_RESOURCE_GROUP_0_GPUS="id:1,slots:4"))
        check(r.returncode == 0 and r.stdout.strip() == "1", f"allocated GPU 1: {r.stdout}")
        for bad in ("", "id:x,slots:4", "id:0,slots:4;id:1,slots:4"):
            r = subprocess.run(show, capture_output=True, text=True,
                               env=dict(env, CTEST_RESOURCE_GROUP_COUNT="1",
                                        CTEST_RESOURCE_GROUP_0_GPUS=bad))
            check(r.returncode == 2 and "gpu_resources.py:" in r.stderr, f"'{bad}': {r}")
        # CTest: two tests of 100 GiB each cannot share a 140 GiB GPU, so they get both
        ctest = shutil.which("ctest")
        cmake = shutil.which("cmake")
        if not ctest or not cmake:
            print("SKIP: no cmake/ctest for the end-to-end part")
            return 77
        proj = os.path.join(work, "proj")
        os.makedirs(proj)
        with open(os.path.join(proj, "CMakeLists.txt"), "w") as f:
            f.write(f"""cmake_minimum_required(VERSION 3.25)
project(p NONE)
enable_testing()
foreach(i 1 2)
  add_test(NAME t${{i}} COMMAND {PY} {TOOL} run -- sh -c
    "echo $CUDA_VISIBLE_DEVICES > {work}/dev${{i}}; sleep 1")
  set_tests_properties(t${{i}} PROPERTIES RESOURCE_GROUPS "gpus:100")
endforeach()
""")
        subprocess.run([cmake, "-S", proj, "-B", os.path.join(proj, "b")], check=True,
                       capture_output=True)
        spec_file = os.path.join(work, "spec.json")
        subprocess.run([PY, TOOL, "spec", "--nvidia-smi", smi, "-o", spec_file], check=True)
        r = subprocess.run([ctest, "--test-dir", os.path.join(proj, "b"), "-j", "2",
                            "--resource-spec-file", spec_file], capture_output=True, text=True,
                           env=env)
        check(r.returncode == 0, f"ctest: {r.stdout}\n{r.stderr}")
        devs = sorted(open(os.path.join(work, f"dev{i}")).read().strip() for i in (1, 2))
        check(devs == ["0", "1"], f"the two tests ran on GPUs {devs}, not 0 and 1")
        print("pass: spec, launcher, and CTest's allocation over two GPUs")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
