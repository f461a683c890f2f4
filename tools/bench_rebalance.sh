#!/usr/bin/env bash
# bench_rebalance.sh — live rebalancing, one command (issue 12): the same local swarm
# started unbalanced (--placement 4,1: four peers on stage 0, one on stage 1) run twice in
# one go, with rebalancing and with --no-rebalance, the same peers and settings; prints a
# table: tokens/s of each run over the same window (the stage-0 leader's, from its first
# microbatch to the last step: the moves' cost is inside it) and over the last half of the
# steps, their ratios, every move with what it cost (state download, steps followed before
# contributing) and the final placement.
# Not for: correctness (tests/test_rebalance.c, tests/rebalance.cmake, the simulator).
#
#   tools/bench_rebalance.sh                      # defaults below
#   tools/bench_rebalance.sh --placement 4,1 --steps 150 --accum 4 --slowdown '*:6' -- --in-flight 3
#
# --slowdown makes every peer a device X times slower than this CPU whose compute does not
# compete for the cores (peer/run.c: a unit of work keeps the peer busy X times the CPU
# seconds it used, sleeping in the network wait), so that five peers on two shared cores
# behave like five equal GPUs: a stage's throughput is its peers', and with one peer on
# stage 1 that stage is the bottleneck. Default '*:8' (five peers use ~5/8 of a core).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${SWARMTRAIN_BIN:-$HERE/../build-dev/tools/swarmtrain}
placement=4,1 steps=100 slowdown='*:8' cooldown=3 accum=8 dir=""
while [ $# -gt 0 ]; do
    case $1 in
    --placement) placement=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --slowdown) slowdown=$2; shift 2 ;;
    --cooldown) cooldown=$2; shift 2 ;;
    --accum) accum=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --) shift; break ;;
    *) echo "bench_rebalance: unknown option $1" >&2; exit 2 ;;
    esac
done
[ -n "$dir" ] || dir=$(mktemp -d /tmp/bench-rebalance-XXXXXX)
mkdir -p "$dir" || exit 1
export OMP_WAIT_POLICY=PASSIVE
common=(local --placement "$placement" --threads 1 --steps "$steps" --quiet --accum "$accum"
        --log-every 10 --slowdown "$slowdown" --rebalance-cooldown "$cooldown" "$@")
run() { # name, extra options
    local name=$1; shift
    rm -rf "${dir:?}/$name"
    "$BIN" "${common[@]}" --dir "$dir/$name" "$@" > "$dir/$name.out" 2>&1
    echo "rc=$?" >> "$dir/$name.out"
}
run rebalance
run static --no-rebalance
leader() { grep -l '^tokens/s ' "$dir/$1"/peer*.log 2>/dev/null | head -1; }
tps() { local l; l=$(leader "$1"); [ -n "$l" ] && sed -n 's/^tokens\/s \([0-9]*\)$/\1/p' "$l" | tail -1; }
tps_half() { local l; l=$(leader "$1"); [ -n "$l" ] && sed -n 's/^tokens\/s of the last [0-9]* steps \([0-9]*\)$/\1/p' "$l" | tail -1; }
place() { sed -n 's/.*placement at the end (peers per stage): *\(.*\)/\1/p' "$dir/$1.out" | tail -1; }
nmoves() { grep -c "moved:" "$dir/$1.out"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else printf "-" }'; }
echo "bench_rebalance: local --placement $placement --steps $steps --accum $accum --slowdown '$slowdown' --rebalance-cooldown $cooldown $* ($dir)"
printf "  %-16s %10s %22s %6s  %-16s %s\n" run tokens/s "tokens/s last $((steps - steps / 2)) steps" moves "final placement" exit
for r in rebalance static; do
    name=rebalancing; [ $r = static ] && name=--no-rebalance
    printf "  %-16s %10s %22s %6s  %-16s %s\n" "$name" "$(tps $r)" "$(tps_half $r)" "$(nmoves $r)" \
        "$(place $r)" "$(tail -1 "$dir/$r.out")"
done
printf "  %-16s %10s %22s\n" "ratio" "$(ratio "$(tps rebalance)" "$(tps static)")" \
    "$(ratio "$(tps_half rebalance)" "$(tps_half static)")"
# each move: the decision, the state download and the following before it contributed
for log in "$dir"/rebalance/peer*.log; do
    awk -v peer="$(basename "$log" .log)" '
        /^moved: / { mv = $0; sub(/ \(rebalance: .*/, "", mv); sub(/^moved: /, "", mv); dl = ""; next }
        mv != "" && /^state: downloaded/ { match($0, /in [0-9.]+ s from [0-9]+ peer/)
            dl = substr($0, RSTART + 3, RLENGTH - 8); next }
        mv != "" && /^contributing: / { c = $0; sub(/^contributing: /, "", c)
            printf "  move: %s %s; state in %s donor(s); contributing %s\n", peer, mv, dl, c; mv = "" }
        END { if (mv != "") printf "  move: %s %s; state in %s donor(s); never contributed\n", peer, mv, dl }' "$log"
done
