#!/usr/bin/env bash
# nat.sh — ctest swarm_nat: peers behind NAT serve a running swarm, and outlive their
# relay. Six test hosts (tools/netns.sh: network namespaces on one bridge), two stages;
# hosts 1-4 reachable (host i at stage (i-1) mod 2, host 1 founding), hosts 5 (stage 0)
# and 6 (stage 1) behind NAT: their switch ports drop every inbound TCP SYN (netns.sh nat),
# and their peers run `peer --no-listen` (docs/protocol.md 3.4). The NATed peers join once
# training has begun; activations and gradients between them go through relays. Once both
# contribute, at a moment drawn from the seed, the relay one of them (drawn too) names is
# SIGKILLed. From what the peers record (--events, docs/events.md) and what a reachable
# peer's status document says (7.7) it asserts:
#   (a) nothing connects to a NATed host, and a NATed host connects out;
#   (b) both NATed peers served and contributed: a `contributing` (or `takes_over`) event,
#       then `step` events of steps at or after the one it contributes from, some of them
#       after the kill; the status document listed them serving with relay endpoints;
#   (c) the victim named another live relay within 15 s of the kill;
#   (d) every peer but the killed one left at the run's last step, exit code 0, the members
#       of each pool with one parameter hash, and one final val_loss.
# Not for: the protocol's rules (test_nat.c runs them on loopback).
#
#   tests/nat.sh [--seed N] [--steps N] [--keep]
#
# The draw (the victim, the delay) is printed first and on failure: --seed N replays it
# (the network's timing is not). Exits 77 (skipped) where namespaces cannot be made (not
# root, no ip or tc, no htb). Environment: SWARMTRAIN_BIN, SWARMTRAIN_SOURCE,
# ST_NAT_SEED (instead of --seed), ST_SLOWDOWN (the peers' --slowdown; default 40: a
# Release build's pace; a sanitized build computes about 2.3 times slower, and its ctest
# entry gives it 17 for the same pace).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=${SWARMTRAIN_SOURCE:-$HERE/..}
BIN=${SWARMTRAIN_BIN:-$SRC/build/tools/swarmtrain}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
P=stn$$ # our namespaces: $P-sw, $P-h1..
NET=10.77.0
LPORT=7100
HOSTS=6
NATED="5 6"
seed=${ST_NAT_SEED:-}
steps=120
keep=0
while [ $# -gt 0 ]; do
    case $1 in
    --seed) seed=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    *) echo "usage: nat.sh [--seed N] [--steps N] [--keep]" >&2; exit 2 ;;
    esac
done
[ -n "$seed" ] || seed=$(((RANDOM << 15 | RANDOM) % 1000000000))

. "$HERE/netns_lib.sh"
netns_preflight nat "$P" "$BIN"
ip netns add "$P-probe" && ip netns exec "$P-probe" tc qdisc add dev lo root handle 1: htb 2>/dev/null
htb=$?
ip netns del "$P-probe"
[ "$htb" = 0 ] || { echo "nat: skipped: no htb qdisc (tools/netns.sh nat needs it)" >&2; exit 77; }

dir=$(mktemp -d /tmp/st_natXXXXXX)
declare -A pid
ns() { ST_NS_PREFIX=$P "$SRC/tools/netns.sh" "$@"; }
# shellcheck disable=SC2317 # called by the trap
cleanup() {
    ns down
    [ "$keep" = 1 ] || rm -rf "$dir"
}
trap cleanup EXIT
trap 'echo "nat: interrupted" >&2; exit 130' INT TERM

fail() {
    echo "nat: FAILED: $*" >&2
    echo "nat: seed $seed; replay: tests/nat.sh --seed $seed --steps $steps" >&2
    for f in "$dir"/peer*.log; do
        [ -f "$f" ] && { echo "== $f" >&2; tail -n 6 "$f" >&2; }
    done
    keep=1
    echo "nat: files kept in $dir" >&2
    exit 1
}
count() { netns_count "$1" "$dir/peer$2.events.jsonl"; } # count KIND HOST
status() { # status document as reachable host I's peer answers it (empty: none)
    ip netns exec "$P-h$1" "$BIN" status --connect "tcp://$NET.$1:$LPORT" --json --timeout 1000 \
        2>/dev/null
}
# a TCP connection from host I to host J, port 7199: "open", "refused" (the SYN arrived:
# nothing listens there), or "dropped" (no answer within 2 s)
probe() {
    ip netns exec "$P-h$1" timeout 2 bash -c "exec 3<>/dev/tcp/$NET.$2/7199" 2>/dev/null
    case $? in 0) echo open ;; 124) echo dropped ;; *) echo refused ;; esac
}

# --- the draw
RANDOM=$seed
victim=$((5 + RANDOM % 2))            # the NATed peer whose relay dies
kill_ms=$((RANDOM % 4001))            # after both contribute, this much later
echo "nat: seed $seed: steps $steps, hosts 5 and 6 behind NAT, the relay of host $victim" \
    "killed $kill_ms ms after both contribute"

# --- the hosts; (a) the NATed ones let nothing in and get out
ns up "$HOSTS" none 0 >"$dir/netns.out" 2>&1 || fail "netns.sh up failed: $(tail -2 "$dir/netns.out")"
for i in $NATED; do ns nat "$i" || fail "netns.sh nat $i failed"; done
[ "$(probe 1 5)" = dropped ] || fail "(a) host 1 reached host 5's port: $(probe 1 5)"
[ "$(probe 6 5)" = dropped ] || fail "(a) host 6 reached host 5's port"
[ "$(probe 5 1)" = refused ] || fail "(a) host 5 cannot reach host 1: $(probe 5 1)"
[ "$(probe 2 3)" = refused ] || fail "(a) host 2 cannot reach host 3"
echo "nat: (a) hosts 5 and 6 get no inbound SYN through; they and the others connect out"

# --- the reachable swarm. --slowdown (ST_SLOWDOWN): about 2 steps a second, so that the run outlasts
# the joins and the kill on a busy machine; --custody-timeout 10: what the relay held when
# it died is lost like anything a dead connection held, and custody sends it again
common=(--config tiny --steps "$steps" --stages 2 --threads 1 --in-flight 2 --slowdown "${ST_SLOWDOWN:-40}"
    --no-rebalance --peer-timeout 3 --custody-timeout 10)
start() { # start HOST ROLE...
    local i=$1
    shift
    ip netns exec "$P-h$i" nice -n 5 "$BIN" peer "$@" --stage $(((i - 1) % 2)) \
        --events "$dir/peer$i.events.jsonl" "${common[@]}" >"$dir/peer$i.log" 2>&1 &
    pid[$i]=$!
}
start 1 --new --wait-peers 4 --listen "tcp://$NET.1:$LPORT"
for i in 2 3 4; do start "$i" --join "tcp://$NET.1:$LPORT" --listen "tcp://$NET.$i:$LPORT"; done
t_end=$((SECONDS + 120))
until [ "$(count step 1)" -ge 3 ]; do
    for i in 1 2 3 4; do kill -0 "${pid[$i]}" 2>/dev/null || fail "peer $i exited early"; done
    [ $SECONDS -ge $t_end ] && fail "host 1 applied no 3 steps within 120 s"
    sleep 0.2
done
# --- the NATed peers join the running swarm
for i in $NATED; do start "$i" --join "tcp://$NET.1:$LPORT" --no-listen; done
contributes() { [ "$(count contributing "$1")" -ge 1 ] || [ "$(count takes_over "$1")" -ge 1 ]; }
t_end=$((SECONDS + 120))
until contributes 5 && contributes 6; do
    for i in 1 2 3 4 5 6; do kill -0 "${pid[$i]}" 2>/dev/null || fail "peer $i exited early"; done
    [ $SECONDS -ge $t_end ] && fail "(b) the NATed peers did not both contribute within 120 s"
    sleep 0.2
done
sleep "$(awk -v ms="$kill_ms" 'BEGIN { printf "%.3f", ms / 1000 }')"

# --- the victim's relay, as host 2's status document names it; its host, by the ids in
# the serving events
relay_host() { # the host whose peer host $victim names as its relay (empty: none) per host $1
    status "$1" | "$PY" "$HERE/nat_check.py" relay --dir "$dir" --hosts "$HOSTS" --of "$victim"
}
doc=$(status 2)
echo "$doc" | "$PY" "$HERE/nat_check.py" listed --dir "$dir" --hosts "$HOSTS" --nated "$NATED" ||
    fail "(b) host 2's status document does not list the NATed peers serving behind relays"
r=$(relay_host 2)
[ -n "$r" ] || fail "host $victim names no relay"
t_kill=$(date +%s.%N)
{ kill -9 "${pid[$r]}" && wait "${pid[$r]}"; } 2>/dev/null # (bash would say "Killed")
echo "nat: killed host $r, the relay of host $victim, at $t_kill"

# --- (c) the victim names another relay, a live one, within 15 s (asked of a reachable
# survivor)
ask=2
[ "$r" = 2 ] && ask=3
t_end=$((SECONDS + 15))
while :; do
    r2=$(relay_host "$ask")
    [ -n "$r2" ] && [ "$r2" != "$r" ] && break
    [ $SECONDS -ge $t_end ] && fail "(c) host $victim still names host ${r2:-none} 15 s after host $r died"
    sleep 0.2
done
echo "nat: (c) host $victim names host $r2 as its relay" \
    "$(awk -v a="$t_kill" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s after the kill"

# --- the run's end (bound: 300 s)
t_end=$((SECONDS + 300))
for i in $(seq 1 "$HOSTS"); do
    [ "$i" = "$r" ] && continue
    while kill -0 "${pid[$i]}" 2>/dev/null; do
        [ $SECONDS -ge $t_end ] && fail "(d) peer $i still runs 300 s after the kill"
        sleep 0.5
    done
    wait "${pid[$i]}" || fail "(d) peer $i exited $?"
done
"$PY" "$HERE/nat_check.py" check --dir "$dir" --hosts "$HOSTS" --nated "$NATED" --killed "$r" \
    --since "$t_kill" --steps "$steps" || fail "the record does not show it (above)"
ip netns list | grep -q "^$P-" && ns down
echo "nat: seed $seed: ok"
exit 0
