#!/usr/bin/env bash
# bench_checkfree.sh — losing whole stages, one command: a local swarm (`tiny` with 6
# layers in 3 stages, 6 peers: pools of two) trained with no failures, then with stage
# failures at 5%, 10% and 16% per stage per hour, each rate once with checkpoint
# recovery (nobody moves; the lost stage's peers come back after RESTART_S and restore
# their newest checkpoint: the stage rolls back) and once with CheckFree(+) (a peer of a
# neighbouring pool moves over at once and rebuilds the stage from its neighbours; the
# lost peers come back after RESTART_S and join as any newcomer), and once more with
# CheckFree+'s swaps (`--swap SHARE` on the run: stage 1 trains to stand in for stage 0's
# blocks and stage 1 for stage 2's, so a rebuilt first or last stage copies a neighbour
# that has learned the part; rows "-cfs", with a no-failure row "none-swap" for the cost
# of the swaps themselves). Printed per run: the
# failures, the wall-clock to a target validation loss (the held-out loss the leader of
# stage 0 measures every VAL_EVERY steps during the run, `--val-every`; the time from
# `local`'s start), the whole run's wall-clock, the final held-out loss, and the median
# time from a stage's loss to its pool's next step (MTTR).
#
# Scaling: the paper's rates are per stage per hour of a long run; this run stands for
# HOURS hours (default 10), so a rate r gives round(r x stages x HOURS) whole-stage
# failures at steps drawn from --fault-seed between 10% and 80% of the run (the same
# steps and stages for both recoveries).
# Not for: correctness (tests/: swarm_lost_stages, sim --faults stage).
#
#   tools/bench_checkfree.sh                      # 300 steps, rates 0.05,0.10,0.16
#   tools/bench_checkfree.sh --steps 200 --rates 0.10 --target 2.4
#
# Options: --steps N (300)  --rates LIST (0.05,0.10,0.16)  --hours H (10)
#          --target LOSS (2.3)  --restart S (5)  --seed N (7)  --val-every N (10)  --dir DIR
#          --swap SHARE (0.5; 0: no swap rows)
#          -- RUN OPTIONS for every swarm
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${SWARMTRAIN_BIN:-}
if [ -z "$BIN" ]; then
    for b in "$HERE/../build/tools/swarmtrain" "$HERE/../build-dev/tools/swarmtrain"; do
        [ -x "$b" ] && BIN=$b && break
    done
fi
[ -n "$BIN" ] && [ -x "$BIN" ] || { echo "bench_checkfree.sh: set SWARMTRAIN_BIN to the swarmtrain binary" >&2; exit 2; }
steps=300 rates=0.05,0.10,0.16 hours=10 target=2.3 restart=5 seed=7 val_every=10 dir="" swap=0.5
while [ $# -gt 0 ]; do
    case $1 in
    --steps) steps=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    --hours) hours=$2; shift 2 ;;
    --target) target=$2; shift 2 ;;
    --restart) restart=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --val-every) val_every=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --swap) swap=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "bench_checkfree.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
[ -n "$dir" ] || dir=$(mktemp -d /tmp/bench_checkfree.XXXXXX)
mkdir -p "$dir"
stages=3
export OMP_WAIT_POLICY=PASSIVE

# one run: name, recovery mode, failures, then run options
run() {
    local name=$1 mode=$2 k=$3
    shift 3
    local d="$dir/$name"
    rm -rf "$d"
    local extra=""
    [ "$k" -gt 0 ] && extra="--stage-failures $k:$restart --fault-seed $seed"
    nice "$BIN" local --peers 6 --stages $stages --layers 6 --steps "$steps" --log-every 10 \
        --val-every "$val_every" --stage-recovery "$mode" $extra --dir "$d" "$@" > "$dir/$name.out" 2>&1
    local rc=$?
    # the first validation during the run at or under the target: "local: val step 40
    # val_loss 2.2914 at 11.7 s"
    local t_target
    t_target=$(awk -v tg="$target" '/^local: val step/ { if ($6 + 0 <= tg) { print $8; exit } }' "$dir/$name.out")
    local total val mttr
    total=$(sed -nE 's/^local: done in ([0-9.]+) s.*/\1/p' "$dir/$name.out")
    val=$(sed -nE 's/^local: done in .* val_loss ([0-9.na]+),.*/\1/p' "$dir/$name.out")
    mttr=$(sed -nE 's/.*MTTR .* median ([0-9.]+) s.*/\1/p' "$dir/$name.out")
    printf "%-10s %-10s %8s %10s %9s %9s %8s %4s\n" "$name" "$mode" "$k" "${t_target:--}" \
        "${total:--}" "${val:--}" "${mttr:--}" "$rc"
}

echo "bench_checkfree: tiny, 6 layers in 3 stages, 6 peers, $steps steps; a run stands for $hours h;"
echo "  target validation loss $target (measured every $val_every steps); lost peers back after ${restart}s; logs in $dir"
printf "%-10s %-10s %8s %10s %9s %9s %8s %4s\n" run recovery failures "t_target_s" total_s val_loss mttr_s rc
run none auto 0 "$@"
sw=$(awk -v s="$swap" 'BEGIN { print (s > 0) }')
[ "$sw" = 1 ] && run none-swap auto 0 --swap "$swap" "$@"
IFS=, read -ra R <<< "$rates"
for r in "${R[@]}"; do
    k=$(awk -v r="$r" -v s=$stages -v h="$hours" 'BEGIN { printf "%d", r * s * h + 0.5 }')
    run "r$r-ck" checkpoint "$k" "$@"
    run "r$r-cf" checkfree "$k" "$@"
    [ "$sw" = 1 ] && run "r$r-cfs" checkfree "$k" --swap "$swap" "$@"
done
echo "CheckFree paper (Blagoev et al.): over 12% faster wall-clock than checkpointing at 5-10% stage failures per hour."
