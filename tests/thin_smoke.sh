#!/usr/bin/env bash
# thin_smoke.sh — ctest http_thin_swarm: a swarm of 2 test hosts (tools/netns.sh: network
# namespaces, 20 Mbit/s tbf links, 20 ms relay delay) trains from --data http://<host 1>/...
# whose first download breaks off midway and resumes with a Range request.
# Exits 77 (skipped) where namespaces cannot be made (not root, no ip or tc).
set -u
BIN=${SWARMTRAIN_BIN:?set by ctest}
SRC=${SWARMTRAIN_SOURCE:?set by ctest}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
dir=$(mktemp -d /tmp/st_thinXXXXXX)
trap 'rm -rf "$dir"' EXIT
fail() {
    echo "thin_smoke: $*" >&2
    for f in "$dir"/run/*.log "$dir"/run/*.err; do [ -f "$f" ] && { echo "== $f"; tail -n 5 "$f"; }; done
    exit 1
}
# 200 kB of deterministic text
"$PY" -c 'import random,sys; r=random.Random(7); sys.stdout.write("".join(r.choice("abcdefghij klmnop\n") for _ in range(200000)))' >"$dir/corpus.txt"
out=$(ST_NS_PREFIX="stt$$" SWARMTRAIN_BIN="$BIN" "$SRC/tools/netns.sh" swarm --hosts 2 --stages 2 \
    --rate 20mbit --delay-ms 20 --steps 5 --timeout 50 --serve-data "$dir/corpus.txt" \
    --cut-data 50000 --dir "$dir/run" -- --codec int8)
rc=$?
[ $rc = 77 ] && exit 77
echo "$out"
[ $rc = 0 ] || fail "netns.sh exited $rc"
grep -q 'range=bytes=50000- status=206' "$dir/run/http.log" || fail "no Range request after the cut"
# the leader recorded the run's end: a finite held-out loss and the swarm's tokens/s
cat "$dir"/run/peer*.events.jsonl | "$PY" -c '
import json, math, sys
ends = [e for e in map(json.loads, sys.stdin) if e.get("kind") == "val_loss" and e.get("final") == 1]
sys.exit(0 if ends and math.isfinite(ends[0]["val_loss"]) and ends[0]["tokens_per_s"] > 0 else 1)' ||
    fail "no final val_loss event with a finite loss"
ip netns list | grep -q "^stt$$-" && fail "namespaces left behind"
exit 0
