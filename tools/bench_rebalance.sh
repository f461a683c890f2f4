#!/usr/bin/env bash
# bench_rebalance.sh — live rebalancing, one command (issue 12): the same local swarm
# started unbalanced (--placement 4,1: four peers on stage 0, one on stage 1) run twice in
# one go, with rebalancing and with --no-rebalance; prints both tokens/s (the stage-0
# leader's, over the training steps), their ratio, the moves and the final placement.
# Not for: correctness (tests/test_rebalance.c, tests/rebalance.cmake).
#
#   tools/bench_rebalance.sh                      # defaults below
#   tools/bench_rebalance.sh --placement 4,1 --steps 150 -- --accum 8
#
# On a small machine (2 cores) five CPU-bound peers compete for the cores, and then the
# placement hardly matters (every stage shares the same two cores). --slowdown makes each
# peer a slower device that leaves the cores idle most of the time (the peer waits X-1
# times its compute after each unit of work), so that a stage's throughput is its peers'
# and the bottleneck stage is real. Default: every peer 4x (--slowdown '*:4').
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${SWARMTRAIN_BIN:-$HERE/../build-dev/tools/swarmtrain}
placement=4,1 steps=150 slowdown='*:4' cooldown=5 dir=""
while [ $# -gt 0 ]; do
    case $1 in
    --placement) placement=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --slowdown) slowdown=$2; shift 2 ;;
    --cooldown) cooldown=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "bench_rebalance: unknown option $1" >&2; exit 2 ;;
    esac
done
[ -n "$dir" ] || dir=$(mktemp -d /tmp/bench-rebalance-XXXXXX)
mkdir -p "$dir" || exit 1
export OMP_WAIT_POLICY=PASSIVE
common=(local --placement "$placement" --threads 1 --steps "$steps" --quiet --accum 8
        --log-every 10 --slowdown "$slowdown" --rebalance-cooldown "$cooldown" "$@")
run() { # name, extra options
    local name=$1; shift
    rm -rf "$dir/$name"
    "$BIN" "${common[@]}" --dir "$dir/$name" "$@" > "$dir/$name.out" 2>&1
    echo "rc=$?" >> "$dir/$name.out"
}
run rebalance
run static --no-rebalance
tps() { sed -n 's/.*tokens\/s \([0-9]*\),.*/\1/p' "$dir/$1.out" | tail -1; }
place() { sed -n 's/.*placement at the end (peers per stage): \(.*\)/\1/p' "$dir/$1.out" | tail -1; }
a=$(tps rebalance) b=$(tps static)
echo "bench_rebalance: --placement $placement --steps $steps --slowdown '$slowdown' ($dir)"
grep "moved:" "$dir/rebalance.out" | sed 's/^/  /'
printf "  %-14s tokens/s %8s   placement at the end %s   (%s)\n" rebalancing "$a" "$(place rebalance)" "$(tail -1 "$dir/rebalance.out")"
printf "  %-14s tokens/s %8s   placement at the end %s   (%s)\n" --no-rebalance "$b" "$(place static)" "$(tail -1 "$dir/static.out")"
if [ -n "$a" ] && [ -n "$b" ] && [ "$b" -gt 0 ]; then
    awk -v a="$a" -v b="$b" 'BEGIN { printf "  ratio rebalancing / --no-rebalance: %.2f\n", a / b }'
fi
