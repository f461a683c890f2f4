#!/usr/bin/env bash
# join_url.sh — ctest peer_join_url: `peer --join http://...` (issue 15): a bootstrap list
# served over HTTP names a dead endpoint first and the founding peer second; a second
# peer joins through the list, says why the first endpoint failed, and both finish the
# run with a held-out loss. The joiner starts before the founding peer listens: it must
# wait for it (reading the list again each second), not give up.
set -u
BIN=${SWARMTRAIN_BIN:?set by ctest}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
dir=$(mktemp -d /tmp/st_joinurlXXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$dir"; }
trap cleanup EXIT
fail() {
    echo "join_url: $*" >&2
    for f in "$dir"/*.log; do [ -f "$f" ] && { echo "== $f"; tail -n 8 "$f"; }; done
    exit 1
}
# three distinct free ports: all held open at once, so the kernel cannot hand one out twice
free_ports() { "$PY" -c 'import socket
ss=[socket.socket() for _ in range(3)]
for s in ss: s.bind(("127.0.0.1",0))
print(*[s.getsockname()[1] for s in ss])'; }
export OMP_WAIT_POLICY=PASSIVE
corpus=${SWARMTRAIN_CORPUS:-$HOME/.cache/swarmtrain/kjv.txt}
read -r p0 dead http < <(free_ports)
mkdir -p "$dir/www"
printf '# bootstrap list\ntcp://127.0.0.1:%s  # nobody there\ntcp://127.0.0.1:%s\n' "$dead" "$p0" >"$dir/www/peers.txt"
"$PY" -m http.server "$http" --bind 127.0.0.1 --directory "$dir/www" >"$dir/http.log" 2>&1 &
pids+=($!)
# waits are deadlines, not counts of tries: on a loaded machine one try (a Python start, an
# ASan binary's first round) may take a second; each says what it waits for
end=$((SECONDS + 30)) # the HTTP server serves the list: up to 30 s
until "$PY" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$http/peers.txt')" 2>/dev/null; do
    [ $SECONDS -lt $end ] || fail "the HTTP server did not serve the list in 30 s"
    sleep 0.1
done
"$BIN" peer --join "http://127.0.0.1:$http/peers.txt" --stage 1 --threads 1 \
    --events "$dir/peer1.events.jsonl" >"$dir/peer1.log" 2>&1 &
j=$!
pids+=($j)
# what the peers recorded (docs/events.md): the events of a kind, one JSON object a line
kind() { "$PY" -c 'import json,sys
for l in open(sys.argv[1]):
    e=json.loads(l)
    if e["kind"]==sys.argv[2]: print(json.dumps(e))' "$@" 2>/dev/null; }
end=$((SECONDS + 30)) # the joiner found nobody and waits (its join_wait event): up to 30 s
until [ -n "$(kind "$dir/peer1.events.jsonl" join_wait)" ]; do
    [ $SECONDS -lt $end ] || fail "the joiner did not wait for the list's peers (no join_wait in 30 s)"
    sleep 0.1
done
"$BIN" peer --new --listen "tcp://127.0.0.1:$p0" --stage 0 --stages 2 --steps 8 --threads 1 \
    --wait-peers 2 --data "$corpus" --events "$dir/peer0.events.jsonl" >"$dir/peer0.log" 2>&1 &
p0pid=$!
pids+=($p0pid)
for _ in $(seq 600); do kill -0 "$j" 2>/dev/null || break; sleep 0.1; done
kill -0 "$j" 2>/dev/null && fail "the joiner did not finish in 60 s"
wait "$j" || fail "the joiner exited $?"
wait "$p0pid" || fail "the founding peer exited $?"
kind "$dir/peer1.events.jsonl" join_tried | grep -q "\"endpoint\": \"tcp://127.0.0.1:$dead\", \"error\": \"[^\"]" ||
    fail "the joiner did not record why the dead endpoint failed"
kind "$dir/peer1.events.jsonl" swarm | grep -q "\"through\": \"tcp://127.0.0.1:$p0\"" ||
    fail "the joiner did not join through the live endpoint"
kind "$dir/peer0.events.jsonl" val_loss | grep -q '"final": 1' || fail "no final val_loss"
kind "$dir/peer1.events.jsonl" join_tried; kind "$dir/peer1.events.jsonl" swarm
kind "$dir/peer0.events.jsonl" val_loss
exit 0
