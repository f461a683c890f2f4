#!/usr/bin/env bash
# partition.sh — ctest swarm_partition: a partition on the real network heals into one
# swarm. A swarm of `swarmtrain peer` processes on test hosts (tools/netns.sh: network
# namespaces on one bridge), 2 stages, trains; then the switch is cut in two (side B's
# ports moved to a second bridge: no frame crosses, either way) for longer than the peer
# timeout, with every pool holding members on both sides, and joined again. From what
# the peers record (--events, docs/events.md) it asserts:
#   (a) the cut lasted long enough: every peer recorded a `failed` event for every peer
#       on the other side while the cut held;
#   (b) one swarm afterwards: every peer `left` at the run's last step, the members of a
#       pool with one parameter hash, and one final `val_loss` (one leader);
#   (c) every peer exited 0 (its `exit` event, and netns.sh's status).
# Not for: the protocol's rules (swarmtrain sim checks thousands of partitions).
#
#   tests/partition.sh [--seed N] [--hosts N] [--steps N] [--keep]
#
# The moments of the cut (the step it starts at, its length beyond the timeout) and the
# hosts of side B are drawn from the seed, printed first and again on failure:
# `tests/partition.sh --seed N` replays the same draw (the network's timing is not).
# Exits 77 (skipped) where namespaces cannot be made (not root, no ip or tc).
# Environment: SWARMTRAIN_BIN (the binary), SWARMTRAIN_SOURCE (the tree; default: this
# script's), ST_PARTITION_SEED (instead of --seed), ST_SLOWDOWN (the peers' --slowdown;
# default 40: a Release build's pace, about 2.6 steps a second; a sanitized build computes
# about 2.3 times slower, and its ctest entry gives it 17 for the same pace).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=${SWARMTRAIN_SOURCE:-$HERE/..}
BIN=${SWARMTRAIN_BIN:-$SRC/build/tools/swarmtrain}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
P=stp$$ # our namespaces: $P-sw, $P-h1..
NET=10.77.0
LPORT=7100 # netns.sh's listening port
T=3        # --peer-timeout (s)
seed=${ST_PARTITION_SEED:-}
hosts=6
# The run must outlast the cut with time to spare: the cut holds until the smaller side
# has declared every peer across it dead, which SWIM's hold-back (10.7) makes slow there,
# up to 30 s past the drawn length, while the larger side trains on at ~2.6 steps a
# second; at 80 steps it once finished 4 s after the heal, before a stale peer re-synced.
# 150: at most ~110 at the heal, 15 s or more after it.
steps=150
keep=0
while [ $# -gt 0 ]; do
    case $1 in
    --seed) seed=$2; shift 2 ;;
    --hosts) hosts=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    *) echo "usage: partition.sh [--seed N] [--hosts N] [--steps N] [--keep]" >&2; exit 2 ;;
    esac
done
[ -n "$seed" ] || seed=$(((RANDOM << 15 | RANDOM) % 1000000000))
[ "$hosts" -ge 4 ] || { echo "partition: --hosts must be at least 4" >&2; exit 2; }

. "$HERE/netns_lib.sh"
netns_preflight partition "$P" "$BIN"

dir=$(mktemp -d /tmp/st_partXXXXXX)
swarm_pid=""
# shellcheck disable=SC2317 # called by the trap
cleanup() {
    if [ -n "$swarm_pid" ] && kill -0 "$swarm_pid" 2>/dev/null; then
        kill "$swarm_pid" 2>/dev/null # netns.sh's own trap takes its namespaces down
        wait "$swarm_pid" 2>/dev/null
    fi
    ST_NS_PREFIX=$P "$SRC/tools/netns.sh" down
    [ "$keep" = 1 ] || rm -rf "$dir"
}
trap cleanup EXIT
trap 'echo "partition: interrupted" >&2; exit 130' INT TERM

fail() {
    echo "partition: FAILED: $*" >&2
    echo "partition: seed $seed; replay: tests/partition.sh --seed $seed --hosts $hosts --steps $steps" >&2
    for f in "$dir"/run/peer*.log "$dir/swarm.out"; do
        [ -f "$f" ] && { echo "== $f" >&2; tail -n 6 "$f" >&2; }
    done
    keep=1
    echo "partition: files kept in $dir" >&2
    exit 1
}
now() { date +%s.%N; }

# --- the draw: host i holds stage (i-1) mod 2 (netns.sh); side B takes 1..n-1 hosts of
# each stage, so that each side has both stages and every pool members on both sides
RANDOM=$seed
sideb=()
for s in 0 1; do
    mates=()
    for i in $(seq 1 "$hosts"); do [ $(((i - 1) % 2)) = $s ] && mates+=("$i"); done
    k=$((1 + RANDOM % (${#mates[@]} - 1)))
    for _ in $(seq "$k"); do # k of them, drawn without replacement
        j=$((RANDOM % ${#mates[@]}))
        sideb+=("${mates[$j]}")
        mates=("${mates[@]:0:$j}" "${mates[@]:$((j + 1))}")
    done
done
sidea=()
for i in $(seq 1 "$hosts"); do
    [[ " ${sideb[*]} " == *" $i "* ]] || sidea+=("$i")
done
cut_step=$((6 + RANDOM % 10))              # cut once host 1 has applied this many steps
cut_ms=$((T * 1000 + 3000 + RANDOM % 3001)) # cut length: timeout + 3..6 s
echo "partition: seed $seed: hosts $hosts, steps $steps, side A ${sidea[*]}, side B ${sideb[*]}," \
    "cut at step $cut_step for $cut_ms ms (peer timeout ${T} s)"

# --- the swarm, in the background (netns.sh waits for its peers and tears down). --db:
# a peer without a store writes no `failed` events (peer/peer.c, on_view); --slowdown
# (ST_SLOWDOWN): about 2.6 steps a second, so that the run outlasts the cut and its heal on
# a busy machine
ST_NS_PREFIX=$P SWARMTRAIN_BIN="$BIN" "$SRC/tools/netns.sh" swarm --hosts "$hosts" --stages 2 \
    --steps "$steps" --timeout 300 --dir "$dir/run" --db -- --slowdown "${ST_SLOWDOWN:-40}" --no-rebalance \
    --peer-timeout "$T" >"$dir/swarm.out" 2>&1 &
swarm_pid=$!

count() { netns_count "$1" "$dir/run/peer$2.events.jsonl"; } # count KIND HOST
# every peer serving and host 1 at cut_step (bound: 180 s; startup takes ~20 s)
t_end=$((SECONDS + 180))
while :; do
    kill -0 "$swarm_pid" 2>/dev/null || fail "the swarm ended before the cut"
    ready=1
    for i in $(seq 1 "$hosts"); do [ "$(count serving "$i")" -ge 1 ] || ready=0; done
    [ $ready = 1 ] && [ "$(count step 1)" -ge "$cut_step" ] && break
    [ $SECONDS -ge $t_end ] && fail "not every peer served with host 1 at step $cut_step within 180 s"
    sleep 0.1
done

# a TCP connection from host I to host J's peer: 0 when it opens within 1 s
reach() {
    ip netns exec "$P-h$1" timeout 1 bash -c "exec 3<>/dev/tcp/$NET.$2/$LPORT" 2>/dev/null
}
sw() { ip -n "$P-sw" "$@"; }

# --- the cut: side B's switch ports onto a bridge of their own
t_cut=$(now)
sw link add br1 type bridge || fail "cannot make the second bridge"
sw link set br1 up
for i in "${sideb[@]}"; do sw link set "v$i" master br1 || fail "cannot move v$i"; done
a=${sidea[0]} b=${sideb[0]} a2=${sidea[1]} b2=${sideb[1]:-${sideb[0]}}
reach "$a" "$b" && fail "the cut lets host $a reach host $b"
reach "$b2" "$a2" && fail "the cut lets host $b2 reach host $a2"
reach "$a" "$a2" || fail "the cut also cut host $a from host $a2 (same side)"
echo "partition: cut at $t_cut: host $a cannot reach $b, nor $b2 reach $a2"

# the drawn length; should a peer not yet have recorded the other side's deaths (a very
# loaded machine), the cut holds until it has, up to 30 s more
deaths() { # peers that recorded a `failed` event of every peer across the cut so far
    "$PY" "$HERE/partition_check.py" deaths \
        --dir "$dir/run" --hosts "$hosts" --side-b "${sideb[*]}" --since "$t_cut"
}
sleep "$(awk -v c="$t_cut" -v n="$(now)" -v ms="$cut_ms" 'BEGIN { d = c + ms / 1000 - n; if (d < 0) d = 0; printf "%.3f", d }')"
t_end=$((SECONDS + 30))
until [ "$(deaths)" = "$hosts" ]; do
    [ $SECONDS -ge $t_end ] && break # (a) below says who did not
    kill -0 "$swarm_pid" 2>/dev/null || break
    sleep 0.2
done

# --- the heal
t_heal=$(now)
for i in "${sideb[@]}"; do sw link set "v$i" master br0 || fail "cannot move v$i back"; done
sw link del br1
t_end=$((SECONDS + 10))
until reach "$a" "$b" && reach "$b2" "$a2"; do
    [ $SECONDS -ge $t_end ] && fail "host $a or $b2 cannot reach the other side 10 s after the heal"
    sleep 0.2
done
echo "partition: healed at $t_heal, the cut held $(awk -v a="$t_cut" -v b="$t_heal" 'BEGIN { printf "%.1f", b - a }') s"

# one swarm again: every peer's status document (docs/protocol.md 7.7) lists every peer
# as a live member (bound: 30 s; probing finds a healed cut within a few gossip periods)
live() { # live members in host I's table (0: no answer)
    ip netns exec "$P-h$1" "$BIN" status --connect "tcp://$NET.$1:$LPORT" --json --timeout 1000 \
        2>/dev/null | "$PY" "$HERE/partition_check.py" live
}
t_end=$((SECONDS + 30))
merged=""
while [ -z "$merged" ]; do
    merged=$(now)
    for i in $(seq 1 "$hosts"); do [ "$(live "$i")" = "$hosts" ] || { merged=""; break; }; done
    [ -n "$merged" ] && break
    kill -0 "$swarm_pid" 2>/dev/null || fail "the run ended before every peer listed every other as live"
    [ $SECONDS -ge $t_end ] && fail "30 s after the heal not every peer lists all $hosts as live"
    sleep 0.2
done
echo "partition: one swarm again: every peer lists all $hosts as live" \
    "$(awk -v a="$t_heal" -v b="$merged" 'BEGIN { printf "%.1f", b - a }') s after the heal"

# --- the run's end (netns.sh's own bound: 300 s)
wait "$swarm_pid"
swarm_rc=$?
swarm_pid=""
cat "$dir/swarm.out"

# --- what the peers recorded
"$PY" "$HERE/partition_check.py" check --dir "$dir/run" --hosts "$hosts" --side-b "${sideb[*]}" \
    --since "$t_cut" --healed "$t_heal" --steps "$steps" ||
    fail "the record does not show one healed swarm (above)"
[ "$swarm_rc" = 0 ] || fail "netns.sh swarm exited $swarm_rc"
ip netns list | grep -q "^$P-" && fail "namespaces left behind"
echo "partition: seed $seed: ok"
exit 0
