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
for _ in $(seq 50); do "$PY" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$http/peers.txt')" 2>/dev/null && break; sleep 0.1; done
"$BIN" peer --join "http://127.0.0.1:$http/peers.txt" --stage 1 --threads 1 >"$dir/peer1.log" 2>&1 &
j=$!
pids+=($j)
for _ in $(seq 50); do grep -q "nothing to join through yet" "$dir/peer1.log" && break; sleep 0.1; done
grep -q "nothing to join through yet" "$dir/peer1.log" || fail "the joiner did not say it waits for the list's peers"
"$BIN" peer --new --listen "tcp://127.0.0.1:$p0" --stage 0 --stages 2 --steps 8 --threads 1 \
    --wait-peers 2 --data "$corpus" >"$dir/peer0.log" 2>&1 &
p0pid=$!
pids+=($p0pid)
for _ in $(seq 600); do kill -0 "$j" 2>/dev/null || break; sleep 0.1; done
kill -0 "$j" 2>/dev/null && fail "the joiner did not finish in 60 s"
wait "$j" || fail "the joiner exited $?"
wait "$p0pid" || fail "the founding peer exited $?"
grep -q "127.0.0.1:$dead" "$dir/peer1.log" || fail "the joiner did not say why the dead endpoint failed"
grep -q "swarm: joined .* through tcp://127.0.0.1:$p0" "$dir/peer1.log" || fail "the joiner did not join through the live endpoint"
grep -q '^val_loss ' "$dir/peer0.log" || fail "no val_loss"
grep -h "127.0.0.1:$dead\|joined\|^val_loss" "$dir"/peer*.log
exit 0
