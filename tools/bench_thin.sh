#!/usr/bin/env bash
# bench_thin.sh — the thin-link benchmark, one command: a swarm of 4 hosts (2 stages x 2,
# tools/netns.sh) at several link rates with a one-way delay, against the same swarm with
# unshaped links and no relay ("loopback": veth pairs on one bridge, no tbf, no delay).
# For each model config, activation codec and DeMo value format it prints tokens/s, the
# mean wire MB/s per peer (bytes on each host's link, both directions, TCP/IP included),
# the ratio of tokens/s to loopback's, the held-out loss (val_loss: the stage-0 leader's
# final one) and the codec's bytes per element (B/elem: the activation and gradient
# tensors the peers sent, header included, over their elements; their `left` events).
# Not for: correctness (tests/) or links other than the namespaces netns.sh makes.
#
#   sudo tools/bench_thin.sh                       # the whole matrix (long: 48 swarms)
#   tools/bench_thin.sh --configs tiny --codecs int8 --demo sign --rates 100mbit --steps 30
#
# Options (lists are comma-separated):
#   --configs tiny,small   --codecs f32,int8,int4,lowrank,subspace   --demo f32,sign
#   --rates 1gbit,100mbit,20mbit   --delay-ms 50   --steps N (40)
#   --accum N (8: microbatches per replica per step)
#   --in-flight K (2 x accum: stage 0's owners take a step's microbatches by rendezvous,
#     so one owner's share is often above the mean; a window of the mean sends the rest
#     in a second wave, a round trip later)
#   --overlap (every swarm, loopback too, overlaps each step's exchange with the next
#     step's stage-0 forwards: the run's --overlap, docs/thin-links.md)
#   --dir DIR (logs; default a new /tmp dir)   -- RUN OPTIONS for every peer
# Each swarm runs with DeMo between the 2 replicas of a pool (--replicas 2 --optimizer demo),
# one thread per peer, as `swarmtrain local` does. A step costs a thin link about four
# one-way delays whatever it computes (forward, backward, exchange, progress): the
# defaults give a step enough microbatches (--accum) and keep them in flight at once
# (--in-flight) to cover them; both runs of a row use the same (docs/thin-links.md).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
configs=tiny,small codecs=f32,int8,int4,lowrank,subspace demos=f32,sign rates=1gbit,100mbit,20mbit
delay=50 steps=40 inflight= accum=8 dir="" overlap=()
while [ $# -gt 0 ]; do
    case $1 in
    --configs) configs=$2; shift 2 ;;
    --codecs) codecs=$2; shift 2 ;;
    --demo) demos=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    --delay-ms) delay=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --in-flight) inflight=$2; shift 2 ;;
    --accum) accum=$2; shift 2 ;;
    --overlap) overlap=(--overlap); shift ;;
    --dir) dir=$2; shift 2 ;;
    --) shift; break ;;
    -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "bench_thin.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
[ -n "$inflight" ] || inflight=$((2 * accum))
[ -n "$dir" ] || dir=$(mktemp -d /tmp/st-bench-thin-XXXXXX)
mkdir -p "$dir"
trap '"$HERE/netns.sh" down; exit 130' INT TERM

# the codec's bytes per element in a swarm's logs: every peer's `left` event counts the
# activation and gradient tensors it sent, encoded (act_bytes, header included), and their
# elements (act_elems); "-" when none left cleanly
bpe() {
    cat "$1"/peer*.events.jsonl 2>/dev/null | awk '/"kind":"left"/ {
            if (match($0, /"act_bytes":[0-9]+/)) b += substr($0, RSTART + 12, RLENGTH - 12)
            if (match($0, /"act_elems":[0-9]+/)) e += substr($0, RSTART + 12, RLENGTH - 12) }
        END { if (e > 0) printf "%.4f", b / e; else print "-" }'
}

# one swarm; prints "tokens/s mean-MB/s val_loss B/elem" or "- - - -"
one() {
    local name=$1 cfg=$2 rate=$3 d=$4
    shift 4
    local out
    out=$("$HERE/netns.sh" swarm --hosts 4 --stages 2 --config "$cfg" --rate "$rate" --delay-ms "$d" \
        --steps "$steps" --in-flight "$inflight" --dir "$dir/$name" -- "$@" 2>"$dir/$name.err")
    echo "$out" >"$dir/$name.out"
    echo "$out" | awk -v e="$(bpe "$dir/$name")" '/^thin:/{for(i=1;i<=NF;i++){if($i=="tokens/s")t=$(i+1); if($i=="mean")m=$(i+1); if($i=="val_loss")v=$(i+1)}}
        END{if(t=="")print "- - - -"; else print t, m, v, e}'
}

printf "%-6s %-8s %-5s %-16s %10s %12s %8s %9s %8s\n" config codec demo link tokens/s "MB/s/peer" ratio val_loss B/elem
IFS=, read -ra C <<<"$configs"
IFS=, read -ra K <<<"$codecs"
IFS=, read -ra D <<<"$demos"
IFS=, read -ra R <<<"$rates"
for cfg in "${C[@]}"; do
    for codec in "${K[@]}"; do
        for dv in "${D[@]}"; do
            opts=(--replicas 2 --optimizer demo --codec "$codec" --demo-values "$dv" --accum "$accum" "${overlap[@]}" "$@")
            read -r base mb val bpe <<<"$(one "$cfg-$codec-$dv-loopback" "$cfg" none 0 "${opts[@]}")"
            printf "%-6s %-8s %-5s %-16s %10s %12s %8s %9s %8s\n" "$cfg" "$codec" "$dv" loopback \
                "$base" "$mb" "1.00" "$val" "$bpe"
            for rate in "${R[@]}"; do
                read -r tps mb val bpe <<<"$(one "$cfg-$codec-$dv-$rate" "$cfg" "$rate" "$delay" "${opts[@]}")"
                ratio=$(awk -v a="$tps" -v b="$base" 'BEGIN{if(a=="-"||b=="-"||b==0)print "-"; else printf "%.2f", a/b}')
                printf "%-6s %-8s %-5s %-16s %10s %12s %8s %9s %8s\n" "$cfg" "$codec" "$dv" \
                    "$rate+${delay}ms" "$tps" "$mb" "$ratio" "$val" "$bpe"
            done
        done
    done
done
echo "logs in $dir"
