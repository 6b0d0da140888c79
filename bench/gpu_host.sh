#!/usr/bin/env bash
# gpu_host.sh: one call on the GPU host: configure, build, run the gpu-labelled tests (and, with
# "bench", the forward benchmarks; "bwdbench", the backward's with its peers; "sanitize",
# compute-sanitizer over the smoke cases; "notest" skips the tests, "quicktest" runs only the CLI
# and small-table ones); logs under $OUT. Not for CI: CI has no GPU. The anchor yardstick
# (../shared/anchors/backward_probe.cu) runs when a copy is carried in .probe/.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/gpu.txt"
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DSQLite3_INCLUDE_DIR="$PWD/.gpu-deps/root/usr/include" \
  -DSQLite3_LIBRARY=/usr/lib/x86_64-linux-gnu/libsqlite3.so.0 >"$OUT/configure.log" 2>&1 ||
  { tail -30 "$OUT/configure.log"; exit 1; }
cmake --build build-gpu -j16 >"$OUT/build.log" 2>&1 || { grep -E "error" -A3 "$OUT/build.log" | head -40; exit 1; }
rc=0
if [[ " $* " == *" quicktest "* ]]; then
  # the CLI's gpu engine and the small-table lines of gpu.cases (model statistics)
  ctest --test-dir build-gpu -R "cli_gpu|device_test" -V >"$OUT/ctest-gpu.log" 2>&1
  rc=$?
  grep -E "fwd.small|E=50 |E=17,33" cases/gpu.cases >"$OUT/small.cases"
  build-gpu/gpu/gpu_forward_test "$OUT/small.cases" >>"$OUT/ctest-gpu.log" 2>&1 || rc=1
elif [[ " $* " != *" notest "* ]]; then
  ctest --test-dir build-gpu -L gpu -j4 -V >"$OUT/ctest-gpu.log" 2>&1
  rc=$?
fi
grep -E "FAIL|failures|Test +#|tests passed|small-table path:|vs reference:" "$OUT/ctest-gpu.log" | head -40
for arg in "$@"; do
  case "$arg" in
    sanitize)
      ctest --test-dir build-gpu -L sanitizer -V >"$OUT/sanitizer.log" 2>&1
      echo "ctest -L sanitizer: exit $? ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|SYNCCHECK SUMMARY|tests passed' "$OUT/sanitizer.log" | tr '\n' ' '))" ;;
    bwdbench)
      build-gpu/bench/gpu_backward_bench --db "$OUT/bench.db" | tee "$OUT/bwdbench.txt"
      python3 bench/torch_backward_peer.py | tee "$OUT/torch_bwd.txt"
      if [ -f .probe/backward_probe.cu ]; then
        nvcc -O3 -arch=sm_90 -std=c++17 -o /tmp/backward_probe .probe/backward_probe.cu &&
          /tmp/backward_probe | tee "$OUT/anchor.txt"
      fi ;;
    bench)
      build-gpu/bench/gpu_forward_bench | tee "$OUT/bench.txt"
      python3 bench/torch_peer.py | tee "$OUT/torch.txt" ;;
  esac
done
exit $rc
