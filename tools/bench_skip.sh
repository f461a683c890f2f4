#!/usr/bin/env bash
# bench_skip.sh — the SkipPipe benchmark, one command: a local swarm of one peer per
# stage (`swarmtrain local`, 4 stages) at several skip ratios, against the same swarm
# without skipping (ratio 0) measured in the same run. For each model config and ratio it
# prints the step time (training span / steps), tokens/s, the ratio of step time to
# ratio 0's, the CPU seconds per step of the whole swarm (user + system of every peer over
# the whole run, start-up and validation included: robust where other work shares the
# cores, unlike wall-clock) and its ratio to ratio 0's, the validation loss after the same number of steps, the validation loss of
# a second run given ratio 0's training time (its steps = steps x t0 / t), and the
# validation loss of the trained model run without half of its middle stages
# (--skip-stages, SkipPipe at inference).
# Not for: correctness (tests/), or swarms of more than one peer per stage.
#
#   tools/bench_skip.sh                                    # tiny (8 layers) and small
#   tools/bench_skip.sh --configs tiny --ratios 0,0.5 --steps-tiny 60
#
# Options (lists are comma-separated):
#   --configs tiny,small   --ratios 0,0.25,0.5   --stages 4
#   --steps-tiny N (30)    --steps-small N (4)   --accum M (4 microbatches a step)
#   --in-flight K (2)      --repeat N (1: runs per ratio; the fastest step time counts)
#   --val-batches-small N (4; tiny validates on the default 20)
#   --dir DIR (logs; default a new /tmp dir)
#   -- RUN OPTIONS         for every swarm (e.g. --codec f32; not --batch or --seq: the
#                          step time assumes the preset's tokens per microbatch)
# Every swarm: AdamW, one replica, M microbatches a step, warmup 2, no checkpoints, one
# thread per peer (as `swarmtrain local` gives them), niced.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${SWARMTRAIN_BIN:-}
if [ -z "$BIN" ]; then
    for b in "$HERE/../build-dev/tools/swarmtrain" "$HERE/../build/tools/swarmtrain"; do
        [ -x "$b" ] && BIN=$b && break
    done
fi
[ -n "$BIN" ] && [ -x "$BIN" ] || { echo "bench_skip.sh: set SWARMTRAIN_BIN to the swarmtrain binary" >&2; exit 2; }
configs=tiny,small ratios=0,0.25,0.5 stages=4 steps_tiny=30 steps_small=4 accum=4 inflight=2 dir=""
repeat=1 val_small=4
while [ $# -gt 0 ]; do
    case $1 in
    --configs) configs=$2; shift 2 ;;
    --ratios) ratios=$2; shift 2 ;;
    --stages) stages=$2; shift 2 ;;
    --steps-tiny) steps_tiny=$2; shift 2 ;;
    --steps-small) steps_small=$2; shift 2 ;;
    --accum) accum=$2; shift 2 ;;
    --in-flight) inflight=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --val-batches-small) val_small=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --) shift; break ;;
    -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "bench_skip.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
[ "$stages" -ge 3 ] || { echo "bench_skip.sh: --stages must be >= 3 (middle stages to skip)" >&2; exit 2; }
[ -n "$dir" ] || dir=$(mktemp -d /tmp/st-bench-skip-XXXXXX)
mkdir -p "$dir"
# half of the middle stages (at least one), left out at inference: 1 .. (S-2)/2
half=$(((stages - 2) / 2)); [ "$half" -ge 1 ] || half=1
skip_list=1; [ "$half" -gt 1 ] && skip_list="1-$half"

# one swarm; prints "steps tokens/s step_s val_loss val_loss_skip cpu_s_per_step" or dashes
one() {
    local name=$1 cfg=$2 steps=$3 ratio=$4
    shift 4
    local extra=()
    [ "$cfg" = tiny ] && extra=(--layers 8)
    # small: few steps, so few validation batches, lest validation be most of the CPU
    [ "$cfg" = small ] && extra=(--val-batches "$val_small")
    rm -rf "${dir:?}/$name"
    /usr/bin/time -f "%U %S" -o "$dir/$name.cpu" nice "$BIN" local --config "$cfg" "${extra[@]}" --peers "$stages" --stages "$stages" \
        --steps "$steps" --replicas 1 --accum "$accum" --optimizer adamw --warmup 2 \
        --in-flight "$inflight" --checkpoint-every 0 --skip "$ratio" --skip-stages "$skip_list" \
        --quiet --dir "$dir/$name" "$@" >"$dir/$name.out" 2>&1
    awk -v steps="$steps" -v M="$accum" -v cfg="$cfg" '
        /^local: done/ { for (i = 1; i <= NF; i++) { if ($i == "tokens/s") t = $(i+1); if ($i == "val_loss") v = $(i+1) } }
        END { gsub(",", "", t); gsub(",", "", v)
              bt = cfg == "small" ? 8 * 256 : 16 * 64   # batch x seq of the preset
              if (t == "" || t + 0 <= 0) print "- - - -"
              else printf "%d %s %.4f %s", steps, t, M * bt / t, v }' "$dir/$name.out"
    local vs
    vs=$(grep -h '^val_loss_skip' "$dir/$name"/peer*.log 2>/dev/null | awk '{print $2; exit}')
    local cpu
    cpu=$(awk -v n="$steps" 'NR == 1 && NF == 2 { printf "%.3f", ($1 + $2) / n }' "$dir/$name.cpu" 2>/dev/null)
    echo " ${vs:--} ${cpu:--}"
}

# the fastest of `repeat` runs (by step time); prints what one() prints
best() {
    local out="" line
    for ((k = 1; k <= repeat; k++)); do
        line=$(one "$1-r$k" "${@:2}")
        if [ -z "$out" ] || { [ "${line%% *}" != "-" ] &&
            awk -v a="$(echo "$line" | cut -d' ' -f3)" -v b="$(echo "$out" | cut -d' ' -f3)" \
                'BEGIN { exit !(b == "-" || a + 0 < b + 0) }'; }; then
            out=$line
        fi
    done
    echo "$out"
}

printf "%-6s %5s | %6s %9s %8s %6s | %9s %6s | %10s | %6s %10s | %12s\n" config skip steps \
    tokens/s step_s ratio cpu_s/step ratio "val@=steps" steps "val@=clock" "val-half-mid"
IFS=, read -ra C <<<"$configs"
IFS=, read -ra R <<<"$ratios"
for cfg in "${C[@]}"; do
    case $cfg in
    tiny) steps=$steps_tiny ;;
    small) steps=$steps_small ;;
    *) echo "bench_skip.sh: unknown config $cfg" >&2; exit 2 ;;
    esac
    base_s="" base_cpu="" # ratio 0's step time and CPU per step
    for ratio in "${R[@]}"; do
        read -r n tps step_s val vskip cpu <<<"$(best "$cfg-$ratio" "$cfg" "$steps" "$ratio" "$@")"
        if [ "$tps" = "-" ]; then
            printf "%-6s %5s | failed (see %s)\n" "$cfg" "$ratio" "$dir/$cfg-$ratio.out"
            continue
        fi
        if [ -z "$base_s" ]; then
            base_s=$step_s base_cpu=$cpu
        fi
        rel=$(awk -v a="$step_s" -v b="$base_s" 'BEGIN { printf "%.2f", a / b }')
        relc=$(awk -v a="$cpu" -v b="$base_cpu" 'BEGIN { if (b + 0 > 0) printf "%.2f", a / b; else print "-" }')
        # equal wall-clock: as many steps as fit in ratio 0's training time
        n2=$(awk -v s="$steps" -v a="$step_s" -v b="$base_s" 'BEGIN { printf "%d", s * b / a + 0.5 }')
        if [ "$n2" = "$steps" ]; then
            val2=$val
        else
            read -r _ _ _ val2 _ _ <<<"$(one "$cfg-$ratio-clock" "$cfg" "$n2" "$ratio" "$@")"
        fi
        printf "%-6s %5s | %6d %9s %8s %6s | %9s %6s | %10s | %6d %10s | %12s\n" "$cfg" "$ratio" \
            "$n" "$tps" "$step_s" "$rel" "$cpu" "$relc" "$val" "$n2" "$val2" "$vskip"
    done
done
echo "bench_skip: logs in $dir; val-half-mid: stages $skip_list of $stages left out at validation;"
echo "  wall-clock numbers are only as good as the machine is quiet (load now: $(cut -d' ' -f1-3 /proc/loadavg))"
