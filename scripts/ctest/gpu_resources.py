#!/usr/bin/env python3
"""gpu_resources.py: CTest's GPU resource allocation for the gpu tests: the resource spec of this
host (read from nvidia-smi) and the launcher every gpu test runs under. Not a scheduler: CTest
places the tests; this only describes the GPUs and hands each test the one CTest gave it.

  gpu_resources.py spec [--nvidia-smi PATH] [-o FILE]
      The resource spec file (CTest's JSON, version 1.0): one resource "gpus" per device, its id
      the device index, its slots the device memory in GiB (a gpu test asks for the GiB it
      needs, RESOURCE_GROUPS gpus:N, so small tests share a GPU and big ones do not).
  gpu_resources.py run -- COMMAND [ARG ...]
      Runs COMMAND with CUDA_VISIBLE_DEVICES set to the GPU CTest allocated to the test
      (CTEST_RESOURCE_GROUP_0_GPUS="id:I,slots:N"), before CUDA starts in it. Without an
      allocation (ctest run without --resource-spec-file) it runs COMMAND as it is.

  ctest -L gpu -j 8 --resource-spec-file <(gpu_resources.py spec)   # tests spread over the GPUs
Exit 2 on bad usage or a malformed allocation, else COMMAND's exit status.
"""
import json
import os
import subprocess
import sys


def spec(smi):
    """The resource spec of the GPUs nvidia-smi lists."""
    try:
        out = subprocess.run([smi, "--query-gpu=index,memory.total",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"gpu_resources.py: cannot list the GPUs with {smi}: {e}")
    gpus = []
    for line in out.splitlines():
        if not line.strip():
            continue
        try:
            index, mib = (int(x) for x in line.split(","))
        except ValueError:
            sys.exit(f"gpu_resources.py: {smi} printed '{line}', not 'index, memory MiB'")
        gpus.append({"id": str(index), "slots": mib // 1024})
    return {"version": {"major": 1, "minor": 0}, "local": [{"gpus": gpus}]}


def allocated(env):
    """The device index CTest allocated to this test, or None without an allocation."""
    if not env.get("CTEST_RESOURCE_GROUP_COUNT"):
        return None
    if env["CTEST_RESOURCE_GROUP_COUNT"] != "1":
        raise ValueError("a gpu test takes one resource group (one GPU), not "
                         f"{env['CTEST_RESOURCE_GROUP_COUNT']}")
    groups = env.get("CTEST_RESOURCE_GROUP_0_GPUS", "")
    ids = [dict(kv.split(":", 1) for kv in g.split(","))["id"] for g in groups.split(";") if g]
    if len(ids) != 1 or not ids[0].isdigit():
        raise ValueError(f"CTEST_RESOURCE_GROUP_0_GPUS='{groups}': expected one 'id:I,slots:N'")
    return ids[0]


def main(argv):
    if len(argv) >= 2 and argv[1] == "spec":
        smi, out = "nvidia-smi", None
        args = argv[2:]
        while args:
            if args[0] == "--nvidia-smi" and len(args) > 1:
                smi, args = args[1], args[2:]
            elif args[0] == "-o" and len(args) > 1:
                out, args = args[1], args[2:]
            else:
                print(__doc__, file=sys.stderr)
                return 2
        text = json.dumps(spec(smi), indent=2) + "\n"
        if out:
            with open(out, "w") as f:
                f.write(text)
        else:
            sys.stdout.write(text)
        return 0
    if len(argv) >= 4 and argv[1] == "run" and argv[2] == "--":
        env = dict(os.environ)
        try:
            dev = allocated(env)
        except (ValueError, KeyError) as e:
            print(f"gpu_resources.py: {e}", file=sys.stderr)
            return 2
        if dev is not None:
            env["CUDA_VISIBLE_DEVICES"] = dev
            print(f"gpu_resources.py: CUDA_VISIBLE_DEVICES={dev} (CTest's allocation)",
                  file=sys.stderr, flush=True)
        try:
            os.execvpe(argv[3], argv[3:], env)
        except OSError as e:
            print(f"gpu_resources.py: cannot run {argv[3]}: {e}", file=sys.stderr)
            return 2
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
