#!/usr/bin/env bash
# fuzz/coverage.sh: line coverage of ref/ and harness/ (tests, fuzz targets, gpu/ left out) reached
# by the quick tier plus the fuzz tier's inputs, with clang's source-based coverage (preset
# coverage). Not a test: it prints llvm-cov's table and the total. Run the fuzz tier first
# (ctest --preset fuzz) so build/fuzz/fuzz/corpus holds what it found; without it, the seeds.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${JOBS:-2}
ver=$(clang --version | sed -n 's/.*clang version \([0-9]*\).*/\1/p')
profdata=$(command -v llvm-profdata-"$ver" || command -v llvm-profdata)
cov=$(command -v llvm-cov-"$ver" || command -v llvm-cov)
cmake --preset coverage >/dev/null
cmake --build --preset coverage -j "$jobs" >/dev/null
out=$PWD/build/coverage/profiles
rm -rf "$out"
mkdir -p "$out"
export LLVM_PROFILE_FILE="$out/%p-%m.profraw"
ctest --preset coverage -j "$jobs" >/dev/null || echo "coverage: some quick tests failed (ctest --preset coverage)"
for t in bounds case npy import db; do
  inputs=(fuzz/corpus/$t)
  for d in fuzz/crashes/$t build/fuzz/fuzz/corpus/$t; do
    [ -d "$d" ] && inputs+=("$d")
  done
  build/coverage/fuzz/fuzz_$t "${inputs[@]}"
done
# a process killed on purpose (cli_kill) leaves a torn profile: skip it, keep the rest
"$profdata" merge -sparse -failure-mode=all "$out"/*.profraw -o build/coverage/all.profdata
objects=()
while IFS= read -r f; do objects+=(-object "$f"); done < <(
  find build/coverage -type f -perm -u+x -newer build/coverage/CMakeCache.txt \
    ! -name '*.so' ! -name '*.sh' ! -path '*/CMakeFiles/*' | sort)
"$cov" report "${objects[@]}" -instr-profile build/coverage/all.profdata \
  -ignore-filename-regex="(_test\\.c\$|^$PWD/(fuzz|gpu|bench|build)/|^/usr/)"
