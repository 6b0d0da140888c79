#!/usr/bin/env bash
# gpu_host.sh: one call on the GPU host: configure, build, then the parts named (default: tests);
# logs bundled into $OUT/logs.tgz, a short table printed last. Not for CI: CI has no GPU.
#
#   tests     ctest -L gpu (every gpu-labelled test, gpu_forward_gpu_K first: the long ones;
#             TESTS_RE=regex: only those that match, ctest -R; RESOURCES=1: with CTest's GPU
#             allocation, scripts/ctest/gpu_resources.py's spec of this host)
#   sanitize  ctest -L sanitizer (compute-sanitizer memcheck, racecheck, synccheck;
#             SANITIZE_RE=regex: only those that match, ctest -R)
#   psanitize compute-sanitizer memcheck, racecheck and synccheck over PREBUILT's tbecheck on the
#             lines of cases/gpu_backward.cases that match SAN_LINES (default: bwd.small_tc=on)
#   ptests    PREBUILT's clean test binaries (gpu_*_test), each passes
#   pfaults   PREBUILT's planted-fault binaries (bench/prebuild.sh FAULT:TARGET), each must be
#             caught: FAULT_gpu_backward_test fails, FAULT_tbecheck finds the fault in the named
#             cases of the faults part's "cases" detector (faults.cases, gpu_backward.cases;
#             PFAULT_LINES=regex: only their lines that match, e.g. one mechanism's cases)
#   faults    the GPU planted faults, fuzz/faults.py run NAME for each (fuzz/FAULTS.md)
#   race      tbecheck race --seconds ${RACE_S:-60} (fused path, varied schedules, noise kernel)
#   random    edge.cases and gpu.cases (also with fwd.small=on), tbecheck random 300 607 --path
#             small, tbecheck random 300 606 (RANDOM_SETS picks), each through ref,gpu into
#             its own database; the small path's model-bitwise counts of each
#   bench     the forward benchmarks (FWD_ONLY=F1,F4: --only those), the anchor probe
#             ../shared/anchors/gather_probe.cu right after them when a copy is carried in
#             .probe/, and torch_peer.py
#   bwdbench  the backward benchmark with its peers (torch_backward_peer.py, the anchor probe
#             ../shared/anchors/backward_probe.cu when a copy is carried in .probe/, on F1
#             and, where the SL sweep runs, on its sweep --sl), then issue 20's targets on
#             those figures (bench/bwd_targets.py);
#             BWD_ONLY=F1,F2 passes --only (default: every shape and the SL sweep)
#   triton    torchrec's Triton TBE (ext.triton, from the checkout carried in .torchrec/) over
#             cases/triton.cases and cases/triton_vectors.cases through ref,ext.triton, their
#             reports, the raw outputs (TBECHECK_TRITON_DUMP) and Triton's compiled kernels
#             (TRITON_SETS=triton: only the first file)
#   sweep     the forward sweep (gpu_forward_bench --sweep: ours against the gather ceiling on
#             the SW- shapes of cases/bench.cases, one axis at a time; SWEEP_ONLY=SW-L1,SW-base:
#             only those)
#   wait      waits for the parts run in the background before it
#   fwdprofile  ncu on the forward's gaps, one kernel launch each (clocks left alone): ours
#             and the gather ceiling on F1, F3, F4 and SW-L1, the window and direct on F1, the
#             fused check on F1 (window) and F4 (lean), S1 generic, small and lean, the lean
#             window at 8 rows in flight on F4 (FWD_PROFILES="F4_fused F1_direct": only
#             those); the reports in logs/fwd_*.ncu-rep, a line of figures each in the table
#   profile   ncu on the backward's short tier, one launch each (clocks left alone): F1's
#             default schedule, then the anchor probe's short_runs on F1 when a copy is
#             carried in .probe/; F3's short tier (F3_short) and its metadata's kernels, keys
#             to classification (F3_meta); then SL<n>_ours and SL<n>_anchor, each SL of the sweep
#             (shuffled); DRAM bytes read and written and L2 sectors
#             by operation beside the sections (BWD_PROFILES="F1_short SL4_ours": only those;
#             default: F1's two);
#             then, for each knob set of BWD_KNOBS (e.g. "- bwd.grid=396 bwd.short_block=16"),
#             F1's first short-tier launch through tbecheck, those metrics alone; the reports
#             stay in /tmp/ncu on the host (too big to return), their details come back in
#             logs/ncu_bwd_*.txt, a line of figures each in the table
#
# Parts run one after another in the order given, each under what is left of DEADLINE seconds
# (default 540: a device call may run 600), or under its own limit (PART:SECONDS, e.g.
# tests:300), so the call always ends with its table; a part named with a trailing & (quoted:
# 'faults&') runs in the background beside the parts after it, and the part `wait` waits for
# every one of those (a benchmark after it runs alone). FAULTS="a b=d1,d2" picks the faults
# part's faults (default: all nine) and, after =, the detectors b runs; their trees build beside
# the clean build. The device returns at most 8 files: everything but the table goes into
# logs.tgz.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
LOGS="$OUT/logs"
mkdir -p "$LOGS"
T0=$(date +%s)
DEADLINE=${DEADLINE:-540}
CAP=0 # the current part's own limit in seconds (PART:SECONDS), 0: none
left() {
  local l=$((DEADLINE - ($(date +%s) - T0)))
  [ "$CAP" -gt 0 ] && [ $((PART_T0 + CAP - $(date +%s))) -lt "$l" ] && l=$((PART_T0 + CAP - $(date +%s)))
  echo $((l < 5 ? 5 : l))
}
# the table (a file: parts run in the background append to it too) and the failure mark
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
rm -f "$OUT/failed"
note() { printf '%-10s %s (%ss)\n' "$1" "$2" "$(($(date +%s) - T0))" >>"$SUMMARY"; }
failed() { touch "$OUT/failed"; }
# the anchor ../shared/anchors/backward_probe.cu as /tmp/backward_probe, built once (source lines
# kept for ncu), when a copy is carried in .probe/; fails without one
anchor_probe() {
  [ -f .probe/backward_probe.cu ] && { [ -x /tmp/backward_probe ] ||
    nvcc -O3 -arch=sm_90 -std=c++17 -lineinfo -o /tmp/backward_probe .probe/backward_probe.cu; }
}
# FILE (ncu --print-details all) NAMES (a regex of metric names): those metrics' lines, each
# once, on one line for the table
ncu_figures() {
  grep -E "^ +($2) " "$1" | tr -s ' ' | sed 's/^ //' | awk '!seen[$0]++' | tr '\n' ';' | cut -c1-330
}
finish() {
  tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$LOGS"
  cat "$SUMMARY"
  rm -f "$SUMMARY" "$OUT/failed"
}
trap finish EXIT

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$LOGS/gpu.txt"
# the fault trees (when the faults part is named) build beside the clean build: each compile's
# long pole is one big CUDA file, so three builds side by side take little longer than one
read -ra FAULT_SPECS <<<"${FAULTS:-fused_no_fence countdown_first drop_last_chunk threshold_gt sr_swap steal_skip bulk_no_wait hoist_stale small_tc_one_chain}"
configure_here() {
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DSQLite3_INCLUDE_DIR="$PWD/.gpu-deps/root/usr/include" \
    -DSQLite3_LIBRARY=/usr/lib/x86_64-linux-gnu/libsqlite3.so.0 >"$LOGS/configure.log" 2>&1 ||
    { tail -30 "$LOGS/configure.log"; exit 1; }
}
build_here() {
  configure_here
  local early=() fs
  if printf '%s\n' "$@" | grep -q '^faults'; then
    for fs in "${FAULT_SPECS[@]}"; do
      python3 fuzz/faults.py build "${fs%%=*}" --source . --build build-gpu --jobs 8 \
        >"$LOGS/fault_build_${fs%%=*}.log" 2>&1 &
      early+=($!)
    done
  fi
  cmake --build build-gpu -j16 >"$LOGS/build.log" 2>&1 ||
    { grep -E "error" -A3 "$LOGS/build.log" | head -40; exit 1; }
  note build ok
  if [ ${#early[@]} -gt 0 ]; then
    wait "${early[@]}"
    note "" "fault trees: $(cat "$LOGS"/fault_build_*.log | tr '\n' ' ' | cut -c1-200)"
  fi
}
# PREBUILT=DIR: the binaries of DIR (bench/prebuild.sh: built elsewhere for sm_90 and carried
# in: tbecheck, gpu_forward_bench, gpu_backward_bench, tests, planted faults) and no build
# here, for every part but faults (tests and sanitize run them in a configured build tree)
TBECHECK=build-gpu/tbecheck
FWD_BENCH=build-gpu/bench/gpu_forward_bench
BWD_BENCH=build-gpu/bench/gpu_backward_bench
if [ -n "${PREBUILT:-}" ]; then
  if [ -f "$PREBUILT/bin.tar.xz" ]; then # packed by prebuild.sh: too big to carry as they are
    mkdir -p /tmp/prebuilt && tar -xJf "$PREBUILT/bin.tar.xz" -C /tmp/prebuilt && PREBUILT=/tmp/prebuilt
  fi
  TBECHECK=$PREBUILT/tbecheck FWD_BENCH=$PREBUILT/gpu_forward_bench
  BWD_BENCH=$PREBUILT/gpu_backward_bench
  note build "prebuilt: $(cd "$PREBUILT" && ls | tr '\n' ' ')"
  # tests and sanitize on prebuilt binaries: the build tree configured here (CTest's commands
  # name its paths, and configuring finds this host's compute-sanitizer) with PREBUILT's
  # binaries where the build links them; a binary not carried fails its tests, as it should
  if printf '%s\n' "$@" | grep -qE '^(tests|sanitize)'; then
    configure_here
    for exe in "$PREBUILT"/*; do
      case $(basename "$exe") in
        tbecheck) cp "$exe" build-gpu/tbecheck ;;
        gpu_*_test | device_test | approx_test | forward_small_probe_test) cp "$exe" build-gpu/gpu/ ;;
      esac
    done
    note "" "build-gpu configured, the prebuilt binaries in it"
  fi
else
  build_here "$@"
fi

run_part() {
  local part=$1 r
  case "$part" in
    tests)
      # gpu_forward_gpu_K start first (their COST), the rest beside them; eight at a time (each
      # GPU-sized case holds about 9 GB of host memory by its arrays: outputs of 268M floats, the
      # exact twin's two fp64 arrays; the host has 128)
      # RESOURCES=1: through CTest's GPU allocation (scripts/ctest/gpu_resources.py's spec)
      local spec=()
      if [ "${RESOURCES:-0}" = 1 ]; then
        python3 scripts/ctest/gpu_resources.py spec -o "$LOGS/gpus.json" && spec=(--resource-spec-file "$LOGS/gpus.json")
        note "" "resource spec: $(tr -d ' \n' <"$LOGS/gpus.json" | cut -c1-150)"
      fi
      # gpu_fence_sass reads the library's machine code, which PREBUILT does not carry (CI
      # runs it on every commit)
      timeout "$(left)" ctest --test-dir build-gpu -L gpu ${TESTS_RE:+-R "$TESTS_RE"} \
        ${PREBUILT:+-E gpu_fence_sass} -j8 -V "${spec[@]}" >"$LOGS/ctest-gpu.log" 2>&1
      r=$?; [ $r -ne 0 ] && failed
      [ ${#spec[@]} -gt 0 ] && note "" "allocations seen: $(grep -oE 'CUDA_VISIBLE_DEVICES=[0-9]+|gpus.json' "$LOGS/ctest-gpu.log" | sort | uniq -c | tr '\n' ' ')"
      note tests "ctest -L gpu exit $r: $(grep -cE 'Test +#.*Passed' "$LOGS/ctest-gpu.log") passed, $(grep -E 'tests failed|tests passed' "$LOGS/ctest-gpu.log" | tail -1)"
      while read -r line; do note "" "$line"; done < <(grep -E "small-table path:|gpu forward vs reference:" \
        "$LOGS/ctest-gpu.log" | sed 's/^[0-9]*: //'; grep -E "Test +#.*(Failed|Timeout|Not Run)" \
        "$LOGS/ctest-gpu.log"; grep -E "s for the case's" "$LOGS/ctest-gpu.log" |
        awk '{n[$1]++; t[$1] += $2} END {for (k in n) printf "test %s %d cases, %.0f s\n", k, n[k], t[k]}') ;;
    sanitize)
      timeout "$(left)" ctest --test-dir build-gpu -L sanitizer \
        ${SANITIZE_RE:+-R "$SANITIZE_RE"} -j3 -V >"$LOGS/sanitizer.log" 2>&1
      r=$?; [ $r -ne 0 ] && failed
      note sanitize "exit $r; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|SYNCCHECK SUMMARY' "$LOGS/sanitizer.log" | sort | uniq -c | tr -s ' ' | tr '\n' ';')" ;;
    faults)
      # side by side, the host's 16 cores shared among them: each tree builds every CUDA file
      # (about 450 core-seconds; all five took 434 s of a call, builds 145-160 s)
      # FAULTS="a b=det1,det2": b runs only those detectors (fuzz/faults.py --detectors)
      local names=() fs f
      for fs in "${FAULT_SPECS[@]}"; do
        f=${fs%%=*}
        names+=("$f")
        timeout "$(left)" python3 fuzz/faults.py run "$f" --source . --build build-gpu \
          --tbecheck build-gpu/tbecheck --jobs $((16 / ${#FAULT_SPECS[@]})) --seconds 30 \
          $([ "$fs" != "$f" ] && echo "--detectors ${fs#*=}") >"$LOGS/fault_$f.log" 2>&1 &
      done
      wait
      python3 fuzz/faults.py table build-gpu >"$LOGS/faults_table.md" 2>&1
      for f in "${names[@]}"; do cp "build-gpu/faults/$f/result.json" "$LOGS/result_$f.json" 2>/dev/null; done
      for f in "${names[@]}"; do
        note "fault" "$f: $(grep -F "\`$f\`" "$LOGS/faults_table.md" | cut -d'|' -f4 | cut -c1-150)"
      done ;;
    ptests)
      local exe
      for exe in "$PREBUILT"/gpu_*_test; do
        [ -x "$exe" ] || continue
        timeout "$(left)" "$exe" >"$LOGS/$(basename "$exe").txt" 2>&1
        r=$?; [ $r -ne 0 ] && failed
        note ptests "$(basename "$exe") exit $r: $(grep -c '^pass' "$LOGS/$(basename "$exe").txt") pass, $(grep -c '^FAIL' "$LOGS/$(basename "$exe").txt") FAIL lines"
      done ;;
    psanitize)
      local tool
      grep -E "${SAN_LINES:-bwd.small_tc=on}" cases/gpu_backward.cases >"$LOGS/san.cases"
      for tool in memcheck racecheck synccheck; do
        timeout "$(left)" compute-sanitizer --tool "$tool" --error-exitcode 9 "$TBECHECK" run \
          --engines ref,gpu --db "$LOGS/san_$tool.db" "$LOGS/san.cases" >"$LOGS/san_$tool.txt" 2>&1
        r=$?; [ $r -ne 0 ] && failed
        note psanitize "$tool on $(grep -c . "$LOGS/san.cases") lines: exit $r; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|SYNCCHECK SUMMARY' "$LOGS/san_$tool.txt" | tr '\n' ' ')"
      done ;;
    pfaults)
      local exe name fault
      # the lines of faults.cases and gpu_backward.cases that match PFAULT_LINES (default: all)
      grep -hE "${PFAULT_LINES:-.}" cases/faults.cases cases/gpu_backward.cases |
        grep -vE '^[[:space:]]*(#|$)' >"$LOGS/pfault.cases"
      note fault "$(grep -c . "$LOGS/pfault.cases") case lines${PFAULT_LINES:+ matching $PFAULT_LINES}"
      # BINARY NAME: those cases through ref,gpu into logs/pfault_NAME.*; sets r, says the run
      pfault_cases() {
        timeout "$(left)" "$1" run --engines ref,gpu --db "$LOGS/pfault_$2.db" \
          "$LOGS/pfault.cases" >"$LOGS/pfault_$2.txt" 2>&1
        r=$?
        pfault_run=$(grep -E '^run [0-9]+:' "$LOGS/pfault_$2.txt" | cut -c1-80)
      }
      # the clean build first: it must pass the cases the fault binaries must fail
      pfault_cases "$TBECHECK" clean
      [ $r -ne 0 ] && failed
      note fault "clean: cases exit $r: $pfault_run"
      for exe in "$PREBUILT"/*_gpu_backward_test "$PREBUILT"/*_tbecheck; do
        [ -x "$exe" ] || continue
        name=$(basename "$exe") fault=${name%_gpu_backward_test} fault=${fault%_tbecheck}
        if [[ $name == *_gpu_backward_test ]]; then
          timeout "$(left)" "$exe" >"$LOGS/pfault_$name.txt" 2>&1
          r=$?; [ $r -eq 0 ] && failed
          note fault "$fault: gpu_backward exit $r (0: missed), $(grep -c '^FAIL' "$LOGS/pfault_$name.txt") FAIL lines"
        else
          pfault_cases "$exe" "$fault"
          [ $r -eq 0 ] && failed
          note fault "$fault: cases exit $r (0: missed): $pfault_run"
        fi
      done ;;
    race)
      timeout "$(left)" "$TBECHECK" race --seconds "${RACE_S:-60}" --seed 7 --db "$LOGS/race.db" \
        >"$LOGS/race.txt" 2>&1
      r=$?; [ $r -ne 0 ] && failed
      note race "exit $r: $(tail -1 "$LOGS/race.txt")" ;;
    random)
      # edge.cases and gpu.cases as they are and with every eligible feature on the small path
      # (fwd.small=on put before each line's comment, where the line does not set fwd.small: a
      # key given twice is a bad case), the small path's own campaign, then the
      # general one: each into its own database, each counted
      "$TBECHECK" random 300 607 --path small >"$LOGS/small.cases"
      "$TBECHECK" random 300 606 >"$LOGS/random.cases"
      local set f
      for f in edge gpu; do
        sed -E '/^[[:space:]]*(#|$)/!{/fwd\.small=/!s/^([^#]*)(#.*)?$/\1 fwd.small=on \2/}' cases/$f.cases \
          >"$LOGS/${f}_small.cases"
      done
      for set in ${RANDOM_SETS:-edge edge_small gpu_small small gpu random}; do
        local file=cases/$set.cases
        [ -f "$LOGS/$set.cases" ] && file=$LOGS/$set.cases
        timeout "$(left)" "$TBECHECK" run --engines ref,gpu --db "$LOGS/$set.db" \
          "$file" >"$LOGS/cases_$set.txt" 2>&1
        r=$?; [ $r -ne 0 ] && failed
        note random "$set: exit $r: $(python3 -c "
import sqlite3, sys
d = sqlite3.connect(sys.argv[1])
c = d.execute('select count(distinct case_id) from results').fetchone()[0]
n, e, x = d.execute(\"select count(*), sum(elements), sum(exact) from results where engine='gpu' and path='forward.small' and baseline='model'\").fetchone()
f = d.execute(\"select count(*) from results where status in ('fail', 'error')\").fetchone()[0]
print(f'{c} cases, {n} small-path outputs, {e} elements, {x} equal to the model; {f} failed results')
" "$LOGS/$set.db" 2>&1 | tail -1)"
      done ;;
    bench)
      timeout "$(left)" "$FWD_BENCH" ${FWD_ONLY:+--only "$FWD_ONLY"} >"$LOGS/bench.txt" 2>&1
      if [ -f .probe/gather_probe.cu ]; then
        nvcc -O3 -arch=sm_90 -std=c++17 -o /tmp/gather_probe .probe/gather_probe.cu &&
          timeout "$(left)" /tmp/gather_probe >"$LOGS/probe.txt" 2>&1
        while read -r line; do note "" "$line"; done < <(cut -c1-100 "$LOGS/probe.txt")
      fi
      timeout "$(left)" python3 bench/torch_peer.py >"$LOGS/torch.txt" 2>&1
      while read -r line; do note "" "$line"; done < <(grep -E "^(F[1-4]|S1) " \
        "$LOGS/bench.txt" | cut -c1-100)
      note bench "see logs/bench.txt, logs/probe.txt, logs/torch.txt" ;;
    triton)
      export TBECHECK_TORCHREC=$PWD/.torchrec TRITON_CACHE_DIR=$LOGS/triton_cache
      for f in ${TRITON_SETS:-triton triton_vectors}; do
        TBECHECK_TRITON_DUMP=$LOGS/triton_dump timeout "$(left)" "$TBECHECK" run \
          --engines ref,ext.triton --db "$LOGS/$f.db" cases/$f.cases >"$LOGS/$f.txt" 2>&1
        note "" "$f.cases: exit $? (1: findings)"
        "$TBECHECK" report --db "$LOGS/$f.db" >"$LOGS/${f}_report.txt" 2>&1
        while read -r line; do note "" "$line"; done < <(grep -E "^(ext|ref)" "$LOGS/$f.txt" |
          cut -c1-120)
      done
      # the raw outputs, and the kernels' TTGIR and PTX (where their reduction orders and fused
      # products can be read), each its own file beside logs.tgz, in parts of 15 MB
      find "$LOGS/triton_cache" -type f ! -name '*.ttgir' ! -name '*.ptx' -delete
      tar -czf "$OUT/triton_kernels.tgz" -C "$LOGS" triton_cache triton_dump &&
        rm -rf "$LOGS/triton_cache" "$LOGS/triton_dump"
      [ "$(stat -c %s "$OUT/triton_kernels.tgz")" -gt 15000000 ] &&
        split -b 15M "$OUT/triton_kernels.tgz" "$OUT/triton_kernels.tgz." &&
        rm "$OUT/triton_kernels.tgz"
      note triton "see logs/triton*.txt; raw outputs and kernels in triton_kernels.tgz*" ;;
    sweep)
      timeout "$(left)" "$FWD_BENCH" --sweep \
        ${SWEEP_ONLY:+--only "$SWEEP_ONLY"} --db "$LOGS/sweep.db" \
        >"$LOGS/sweep.txt" 2>&1 || failed
      while read -r line; do note "" "$line"; done < <(grep -E "^SW-" "$LOGS/sweep.txt" |
        cut -c1-150)
      note sweep "see logs/sweep.txt" ;;
    bwdbench)
      timeout "$(left)" "$BWD_BENCH" ${BWD_ONLY:+--only "$BWD_ONLY"} \
        --db "$LOGS/bench.db" >"$LOGS/bwdbench.txt" 2>&1
      timeout "$(left)" python3 bench/torch_backward_peer.py >"$LOGS/torch_bwd.txt" 2>&1
      if anchor_probe; then
        timeout "$(left)" /tmp/backward_probe >"$LOGS/anchor.txt" 2>&1
        # its segment-length sweep beside ours (the shuffled column is its data)
        if [ -z "${BWD_ONLY:-}" ] || [[ ",$BWD_ONLY," == *,SL,* ]]; then
          timeout "$(left)" /tmp/backward_probe --sl >>"$LOGS/anchor.txt" 2>&1
        fi
        while read -r line; do note anchor "$line"; done < <(cut -c1-150 "$LOGS/anchor.txt")
      fi
      while read -r line; do note "" "$line"; done < <(grep -E "^[A-Z0-9]+ |  accum |^ +[0-9]+ " \
        "$LOGS/bwdbench.txt" | cut -c1-120)
      note bwdbench "peers: $(tr '\n' ' ' <"$LOGS/torch_bwd.txt" | cut -c1-200)"
      # issue 20's targets on this run's figures (bench/bwd_targets.py)
      python3 bench/bwd_targets.py "$LOGS/bwdbench.txt" \
        $([ -f "$LOGS/anchor.txt" ] && echo "$LOGS/anchor.txt") >"$LOGS/targets.txt" 2>&1
      while read -r line; do note target "$line"; done < <(cut -c1-150 "$LOGS/targets.txt") ;;
    profile)
      # NAME, the program and its arguments, then ncu's kernel filter (demangled names; a space
      # in a regex is written '.'): F1's short tier (its first launch: the default schedule;
      # other schedules through BWD_KNOBS below) and the anchor's sum + Adagrad on the same F1;
      # each with the DRAM bytes read and written and the L2 sectors by operation, beside the
      # sections
      local probe=/tmp/backward_probe spec name prog filter
      anchor_probe
      mkdir -p /tmp/ncu # the reports stay there: a few of them outgrow what a call returns
      local lts=lts__t_sectors_srcunit_tex_op l1=l1tex__t_sectors_pipe_lsu_mem_global_op
      local metrics=dram__bytes_read.sum,dram__bytes_write.sum
      metrics+=,${lts}_read.sum,${lts}_read_lookup_hit.sum,${lts}_write.sum,${l1}_ld.sum,${l1}_st.sum
      # a table line of the sections' figures, then one of the metrics' (one line cuts them)
      local figs='Duration|DRAM Throughput|L2 Hit Rate|Registers Per Thread|Achieved Occupancy'
      figs+='|Warp Cycles Per Issued Instruction|Executed Instructions'
      local mfigs="dram__bytes_[a-z]+.sum|${lts}_[a-z_]+.sum|${l1}_[a-z]+.sum"
      # and, per SL of the sweep, ours (its short tier: at SL 256 too, every run one chunk)
      # beside the anchor's --sl launch of that SL (8 launches per SL before it)
      local specs=("F1_short|$BWD_BENCH --only F1|-k regex:short_kernel -c 1"
        "F1_anchor|$probe|-k regex:short_runs -c 1"
        "F3_short|$BWD_BENCH --only F3|-k regex:short_kernel -c 1"
        "F3_meta|$BWD_BENCH --only F3|-k regex:keys_kernel|Device|classify_kernel -c 11") sl j=0
      for sl in 1 2 4 8 16 32 64 128 256; do
        specs+=("SL${sl}_ours|$BWD_BENCH --only SL$sl|-k regex:short_kernel -c 1"
          "SL${sl}_anchor|$probe --sl|-k regex:short_runs -s $((8 * j)) -c 1")
        j=$((j + 1))
      done
      for spec in "${specs[@]}"; do
        IFS='|' read -r name prog filter <<<"$spec"
        [[ " ${BWD_PROFILES:-F1_short F1_anchor} " != *" $name "* ]] && continue
        [[ $prog == "$probe" && ! -x $probe ]] && continue
        # shellcheck disable=SC2086 # the arguments are word lists
        timeout "$(left)" ncu --clock-control none --kernel-name-base demangled $filter \
          --kill yes --section SpeedOfLight --section Occupancy --section LaunchStats \
          --section WarpStateStats --section InstructionStats --section MemoryWorkloadAnalysis \
          --metrics "$metrics" -o "/tmp/ncu/bwd_$name" -f $prog >"$LOGS/ncu_bwd_$name.log" 2>&1 ||
          failed
        ncu -i "/tmp/ncu/bwd_$name.ncu-rep" --print-details all >"$LOGS/ncu_bwd_$name.txt" 2>&1
        note "$name" "$(ncu_figures "$LOGS/ncu_bwd_$name.txt" "$figs")"
        note "" "$(ncu_figures "$LOGS/ncu_bwd_$name.txt" "$mfigs")"
        # several kernels: each one's duration, in launch order
        [[ $name == *_meta ]] && note "" "$(awk '/\)x\(/ {k = $0; sub(/<unnamed>::/, "", k); sub(/^ *void /, "", k)
          sub(/[<(].*/, "", k); sub(/.*::/, "", k)}
          /^ +Duration / {printf "%s %s %s; ", k, $3, $2}' "$LOGS/ncu_bwd_$name.txt" | cut -c1-330)"
      done
      # BWD_KNOBS="bwd.grid=396 bwd.short_block=16,bwd.width=4 ...": F1's first short-tier
      # launch under each knob set (commas between a set's knobs; "-" is none), through
      # tbecheck run, with the metrics above alone (a few replays, no sections)
      local f1 knobs occ=sm__warps_active.avg.pct_of_peak_sustained_active
      f1="$(grep '# F1:' cases/bench.cases | sed 's/ *#.*//') opt=rowwise_adagrad"
      for knobs in ${BWD_KNOBS:-}; do
        name=F1_${knobs//[=,]/_}
        [ "$knobs" = - ] && knobs=
        timeout "$(left)" ncu --clock-control none -k regex:short_kernel -c 1 --kill yes \
          --metrics "gpu__time_duration.sum,$occ,$metrics" \
          -o "/tmp/ncu/bwd_$name" -f "$TBECHECK" run --engines gpu --db /tmp/knobs.db \
          "$f1 ${knobs//,/ }" >"$LOGS/ncu_bwd_$name.log" 2>&1 || failed
        ncu -i "/tmp/ncu/bwd_$name.ncu-rep" --print-details all >"$LOGS/ncu_bwd_$name.txt" 2>&1
        note "$name" "$(ncu_figures "$LOGS/ncu_bwd_$name.txt" "gpu__time_duration.sum|$occ|$mfigs")"
      done ;;
    fwdprofile)
      # NAME, the bench's arguments, then ncu's kernel filter, on demangled names, where a bool
      # template argument reads (bool)1 or (bool)0 (ncu 2025 on the H200) and gather_kernel's
      # last four are GW, WEIGHTED, FUSED and LEAN; the filter is split into words, so a space
      # in a regex is written '.'.
      # The bench times each configuration in 23 launches (3 warm-up), hence -s 23 to pass one.
      local spec name args filter
      for spec in "F1_ours|--only F1|-k regex:gather_kernel -c 1" \
        "F1_ceiling|--only F1|-k regex:ceiling_kernel -s 23 -c 1" \
        "L1_ours|--sweep --only SW-L1|-k regex:gather_kernel -c 1" \
        "L1_ceiling|--sweep --only SW-L1|-k regex:ceiling_kernel -c 1" \
        "F1_direct|--only F1|-k regex:direct_kernel -c 1" \
        "F4_plain|--only F4|-k regex:gather_kernel -c 1" \
        "F3_ours|--only F3|-k regex:(gather|direct)_kernel -c 1" \
        "F3_ceiling|--only F3|-k regex:ceiling_kernel -c 1" \
        "F4_ceiling|--only F4|-k regex:ceiling_kernel -c 1" \
        "F1_fused|--only F1|-k regex:gather_kernel<.*\(bool\)1,.\(bool\)0> -c 1" \
        "F4_fused|--only F4|-k regex:gather_kernel<.*\(bool\)1,.\(bool\)1> -c 1" \
        "F4_lean8|--only F4|-k regex:gather_kernel<.*8,.\(bool\)0,.\(bool\)0,.\(bool\)1> -c 1" \
        "S1_generic|--only S1|-k regex:gather_kernel -c 1" \
        "S1_ceiling|--only S1|-k regex:ceiling_kernel -c 1" \
        "S1_small|--only S1|-k regex:small_kernel -c 1" \
        "S1_lean|--only S1|-k regex:gather_kernel<.*8,.\(bool\)0,.\(bool\)0,.\(bool\)1> -s 23 -c 1"; do
        IFS='|' read -r name args filter <<<"$spec"
        [ -n "${FWD_PROFILES:-}" ] && [[ " $FWD_PROFILES " != *" $name "* ]] && continue
        # shellcheck disable=SC2086 # the arguments are word lists
        timeout "$(left)" ncu --clock-control none --kernel-name-base demangled $filter \
          --section SpeedOfLight --section Occupancy --section LaunchStats \
          --section WarpStateStats --section MemoryWorkloadAnalysis --section SchedulerStats \
          -o "$LOGS/fwd_$name" -f "$FWD_BENCH" $args \
          >"$LOGS/ncu_fwd_$name.log" 2>&1 || failed
        ncu -i "$LOGS/fwd_$name.ncu-rep" --print-details all >"$LOGS/ncu_fwd_$name.txt" 2>&1
        note "$name" "$(ncu_figures "$LOGS/ncu_fwd_$name.txt" 'Duration|DRAM Throughput|Memory Throughput|Registers Per Thread|Achieved Occupancy|Warp Cycles Per Issued Instruction|Issued Warp Per Scheduler|No Eligible')"
      done ;;
    wait)
      wait # the parts before it that run in the background (so a benchmark after runs alone)
      ;;
    *)
      echo "gpu_host.sh: unknown part '$part'" >&2
      exit 2 ;;
  esac
}

parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(tests)
for spec in "${parts[@]}"; do
  bg=0
  [ "${spec%&}" != "$spec" ] && bg=1 && spec=${spec%&}
  part=${spec%%:*}
  CAP=0
  [ "$part" != "$spec" ] && CAP=${spec#*:}
  PART_T0=$(date +%s)
  if [ $bg -eq 1 ]; then
    run_part "$part" &
  else
    run_part "$part"
  fi
done
wait
[ ! -e "$OUT/failed" ]
