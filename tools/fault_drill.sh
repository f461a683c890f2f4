#!/usr/bin/env bash
# tools/fault_drill.sh — issue 10's drill: N runs of a 6-peer, 3-stage local swarm, each
# with one SIGKILL from outside at a random moment (local --kill random: any peer, the
# founding one too), seeds FIRST..FIRST+N-1. One line per run, then "drill: K of N exit 0".
#   tools/fault_drill.sh [N] [FIRST] [extra local options...]
# SWARMTRAIN_BIN picks the binary (default build/tools/swarmtrain).
set -u
n=${1:-20}
first=${2:-1}
shift $(($# < 2 ? $# : 2))
bin=${SWARMTRAIN_BIN:-"$(dirname "$0")/../build/tools/swarmtrain"}
dir=$(mktemp -d /tmp/swarmtrain-drill-XXXXXX)
ok=0
for ((s = first; s < first + n; s++)); do
    "$bin" local --peers 6 --stages 3 --layers 6 --steps 150 --kill random --fault-seed "$s" \
        --quiet --dir "$dir/run$s" "$@" >"$dir/run$s.out" 2>&1
    rc=$?
    [ "$rc" = 0 ] && ok=$((ok + 1))
    kill_line=$(grep -h 'fault: SIGKILL' "$dir/run$s.out" | sed 's/.*SIGKILL //')
    done_line=$(grep -h 'local: done' "$dir/run$s.out" | sed 's/local: //')
    mttr=$(grep -h 'MTTR' "$dir/run$s.out" | sed 's/.*MTTR[^m]*//')
    echo "seed $s: exit $rc; killed $kill_line; $done_line; MTTR $mttr"
done
echo "drill: $ok of $n exit 0 (logs in $dir)"
[ "$ok" = "$n" ]
