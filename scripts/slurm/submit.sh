#!/usr/bin/env bash
# submit.sh: submits a tbecheck campaign to Slurm: a job array of N tasks (campaign.sbatch, one
# shard each) and the merge job that waits for all of them (merge.sbatch); not a scheduler.
#
#   scripts/slurm/submit.sh [--tasks N] [--gpus-per-task G] [--dir DIR] [--engines LIST]
#                           [--tbecheck PATH] [-- SBATCH_OPTION ...] CASEFILE|CASE ...
#
# --gpus-per-task 0 (or a cluster without GPUs) submits a CPU campaign; the default asks each
# task for one GPU (gres gpu:1). Options after `--` before the cases go to both sbatch calls
# (a partition, an account, a time limit). Prints the two job ids; the merged database is
# DIR/campaign.db and the report DIR/report.html once the merge job has ended.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tasks=4 gpus=1 dir=campaign engines="" tbecheck=$(command -v tbecheck || true) extra=()
usage() { sed -n '5,11p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --tasks) tasks=${2:?}; shift 2 ;;
    --gpus-per-task) gpus=${2:?}; shift 2 ;;
    --dir) dir=${2:?}; shift 2 ;;
    --engines) engines=${2:?}; shift 2 ;;
    --tbecheck) tbecheck=${2:?}; shift 2 ;;
    --) shift; while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do extra+=("$1"); shift; done ;;
    -h|--help) usage ;;
    -*) echo "submit.sh: unknown option $1" >&2; usage ;;
    *) break ;;
  esac
done
[[ "$tasks" =~ ^[1-9][0-9]*$ ]] || { echo "submit.sh: --tasks $tasks: a positive integer" >&2; exit 2; }
[[ "$gpus" =~ ^[0-9]+$ ]] || { echo "submit.sh: --gpus-per-task $gpus: an integer >= 0" >&2; exit 2; }
[ $# -gt 0 ] || { echo "submit.sh: no case file or case given" >&2; exit 2; }
[ -n "$tbecheck" ] && [ -x "$tbecheck" ] ||
  { echo "submit.sh: no tbecheck program (put it on PATH or give --tbecheck)" >&2; exit 2; }
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
tbecheck=$(cd "$(dirname "$tbecheck")" && pwd)/$(basename "$tbecheck")
# case files named relative to here must resolve inside the job, which starts elsewhere
cases=()
for c in "$@"; do
  if [ -f "$c" ]; then cases+=("$(cd "$(dirname "$c")" && pwd)/$(basename "$c")"); else cases+=("$c"); fi
done
gres=()
[ "$gpus" -gt 0 ] && gres=(--gres="gpu:$gpus")
export TBECHECK=$tbecheck CAMPAIGN_DIR=$dir TBE_ENGINES=$engines
array=$(sbatch --parsable --array="1-$tasks" "${gres[@]}" --output="$dir/task-%a.out" \
  --export=ALL "${extra[@]}" "$here/campaign.sbatch" "${cases[@]}")
array=${array%%;*}
merge=$(sbatch --parsable --dependency="afterany:$array" --output="$dir/merge.out" --export=ALL \
  "${extra[@]}" "$here/merge.sbatch")
merge=${merge%%;*}
echo "array $array ($tasks tasks), merge $merge: $dir/campaign.db, $dir/report.html"
