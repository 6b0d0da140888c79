#!/usr/bin/env bash
# prebuild.sh: builds GPU binaries here for the H200 (sm_90 machine code only, stripped) into
# .prebuilt/, for gpu_host.sh's PREBUILT=.prebuilt, so that a device call spends no time building.
#
#   bash bench/prebuild.sh [FAULT:]TARGET ...
#   e.g. bash bench/prebuild.sh tbecheck gpu_forward_bench hoist_stale:gpu_backward_test
#
# TARGET builds in build/pre (Release, CMAKE_CUDA_ARCHITECTURES=90-real: no PTX beside the
# machine code, a quarter less to carry) and lands as DEST/TARGET; FAULT:TARGET builds in
# build/pre-FAULT with -DTBE_FAULT=FAULT (fuzz/FAULTS.md) and lands as DEST/FAULT_TARGET. DEST is
# $PREBUILD_DIR, default .prebuilt (two calls in a row carry two sets: .prebuilt, .prebuilt-b).
# The binaries read cases/ and the anchors at this checkout's absolute path, which the GPU host
# shares. A device call carries 64 MiB in all and every binary links every kernel (19-24 MB
# each), so they go into DEST/bin.tar.xz, which gpu_host.sh unpacks there: xz on one thread with
# a dictionary wider than all of them, since the binaries' machine code is mostly the same bytes
# and xz finds a repeat only within its dictionary (one binary packs to about four fifths, each
# one after it to a small part of that). Then, on the device:
#   carry [".prebuilt"]; PREBUILT=.prebuilt bash bench/gpu_host.sh race bench ...
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || { sed -n '4,5p' "$0" | sed 's/^# *//' >&2; exit 2; }
jobs=$(nproc)
dest=${PREBUILD_DIR:-.prebuilt}
mkdir -p build "$dest"
rm -f "$dest"/* # it holds what this call builds
for spec in "$@"; do
  target=${spec#*:}
  fault=
  [ "$target" != "$spec" ] && fault=${spec%%:*}
  tree=build/pre${fault:+-$fault}
  cmake -S . -B "$tree" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real \
    -DTBE_CUDA=ON -DTBE_FAULT="$fault" >"$tree.configure.log" 2>&1 ||
    { tail -20 "$tree.configure.log" >&2; exit 2; }
  cmake --build "$tree" -j "$jobs" --target "$target" >"$tree.build.log" 2>&1 ||
    { grep -E "error" -A3 "$tree.build.log" | head -40 >&2; exit 1; }
  exe=$(find "$tree" -type f -name "$target" -perm -u+x | head -1)
  [ -n "$exe" ] || { echo "prebuild.sh: no executable $target in $tree" >&2; exit 2; }
  strip -o "$dest/${fault:+${fault}_}$target" "$exe"
done
raw=$(du -cb "$dest"/* | tail -1 | cut -f1)
dict=$(((raw / 1048576 + 64) / 64 * 64))
[ "$dict" -le 1536 ] || dict=1536 # xz's widest
tar -cf - -C "$dest" . | xz -T1 --lzma2=preset=6,dict=${dict}MiB >build/bin.tar.xz
rm -f "$dest"/*
mv build/bin.tar.xz "$dest"/
total=$(du -cb "$dest"/* | tail -1 | cut -f1)
ls -l "$dest"
echo "prebuild.sh: $((total / 1048576)) MiB in $dest (a device call carries 64 MiB in all)"
[ "$total" -le $((64 * 1048576)) ] || { echo "prebuild.sh: too much to carry: remove some" >&2; exit 1; }
