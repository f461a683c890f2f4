#!/usr/bin/env bash
# rebal_local.sh — local-swarm tests of issue 12 (ctest rebal_*): real peer processes.
#   shares-slow   stage 1 holds an emulated device of this CPU's speed and one 4x slower
#                 (--slowdown 2:4; local gives the others X = 1): each one's
#                 share of the stage's microbatches is within 0.10 of its throughput share;
#   shares-equal  stage 1 holds two equal peers (emulated devices, --slowdown '*:2': on
#                 the wall clock, two processes on a loaded machine are not equal): their
#                 shares are within 0.10 of each other;
#   no-thrash     --placement 3,1 with rebalancing: exactly one move (to 2,2, near step 10) and no peer
#                 moves twice, nothing lost; the mover contributes with its old pool's pace.
# What happened is read from the record local and the peers keep for programs
# (DIR/summary.json and DIR/peerN.events.jsonl, docs/events.md), with python3's json:
# shares are the microbatches each peer served over the run, throughput the peer's own
# gossiped estimate at the end (both from its "left" event, the summary's "processes").
# Without --no-rebalance peers would move.
set -u
BIN=${SWARMTRAIN_BIN:?set by ctest}
what=${1:?shares-slow, shares-equal or no-thrash}
dir=$(mktemp -d /tmp/st_rebalXXXXXX)
trap 'rm -rf "$dir"' EXIT
export OMP_WAIT_POLICY=PASSIVE
fail() {
    echo "rebal_local $what: $*" >&2
    for f in "$dir"/*.log; do
        [ -f "$f" ] || continue
        echo "== $f"
        # a mover's whole story (what it followed, refused, re-synced), others' ends
        if grep -qs '"kind":"moved"' "${f%.log}.events.jsonl"; then
            grep -v '^step' "$f" | head -n 80
        else
            grep -v '^step' "$f" | tail -n 6
        fi
    done
    exit 1
}
# python3 reading the run's record: $1 the program, with `summary` (DIR/summary.json) and
# `events(i)` (peer i's events, a list of dicts) at hand
record() {
    python3 - "$dir" "$1" <<'EOF'
import glob, json, os, sys
d = sys.argv[1]
summary = json.load(open(os.path.join(d, "summary.json")))
def events(i):
    with open(os.path.join(d, "peer%d.events.jsonl" % i)) as f:
        return [json.loads(line) for line in f if line.strip()]
exec(sys.argv[2])
EOF
}
case $what in
shares-slow | shares-equal)
    # emulated devices (peer --slowdown): compute timed in CPU seconds, so that peers are
    # as equal (or as unequal) as said whatever else runs on the machine's cores
    slow=(--slowdown '*:2')
    [ "$what" = shares-slow ] && slow=(--slowdown 2:4)
    "$BIN" local --placement 1,2 --threads 1 --steps 40 --accum 4 --quiet --no-rebalance \
        --log-every 40 --dir "$dir" "${slow[@]}" > "$dir/out.txt" 2>&1 || fail "local failed: $(tail -3 "$dir/out.txt")"
    cat "$dir/out.txt"
    # the stage-1 peers that ended the run there: served, throughput
    rows=$(record '
for p in summary["processes"]:
    if p.get("done_stage") == 1:
        print(p["served"], p["throughput"])') || fail "no summary"
    echo "$rows" | sed 's/^/  stage 1 peer: served, throughput: /'
    [ "$(echo "$rows" | wc -l)" = 2 ] || fail "want two stage-1 peers"
    echo "$rows" | awk -v what="$what" '
        { s[NR] = $1; t[NR] = $2 }
        END {
            ss = s[1] + s[2]; tt = t[1] + t[2]
            if (ss <= 0 || tt <= 0) { print "no work or no throughput"; exit 1 }
            for (i = 1; i <= 2; i++)
                printf "  peer %d: share of microbatches %.3f, share of throughput %.3f\n", i, s[i] / ss, t[i] / tt
            if (what == "shares-slow") {
                for (i = 1; i <= 2; i++) if ((s[i] / ss - t[i] / tt) > 0.10 || (t[i] / tt - s[i] / ss) > 0.10) exit 1
                lo = t[1] < t[2] ? t[1] / tt : t[2] / tt
                if (lo > 0.35) { print "the slow peer does not look slow"; exit 1 }
            } else if ((s[1] - s[2]) / ss > 0.10 || (s[2] - s[1]) / ss > 0.10) exit 1
        }' || fail "shares out of bounds"
    ;;
no-thrash)
    "$BIN" local --placement 3,1 --threads 1 --steps 60 --accum 4 --quiet --rebalance-cooldown 3 \
        --log-every 50 --dir "$dir" > "$dir/out.txt" 2>&1 || fail "local failed: $(tail -3 "$dir/out.txt")"
    cat "$dir/out.txt"
    moves=$(record 'print(summary["moves"])') || fail "no summary"
    [ "$moves" -ge 1 ] || fail "no move from 3,1"
    [ "$moves" -le 2 ] || fail "$moves moves: thrashing"
    record '
sys.exit(any(p.get("moves", 0) > 1 for p in summary["processes"]))' || fail "a peer moved more than once"
    [ "$(record 'print(summary["lost"])')" = 0 ] || fail "microbatches lost"
    # a mover brings its old pool's pace (peer/move.c) and follows 3 steps, not 4, before
    # it names its first contributing step (or more, while fewer of them were timed at the
    # pool's head) (whether it gets there before the run ends
    # depends on when the move was made: a join margin is about 3 s of the pool's steps)
    # each mover's first "following" (the step it names) and "contributing" after its move
    record '
named = []
for i in sorted({m["peer"] for m in summary["moved"]}):
    moved, seen = False, set()
    for e in events(i):
        if e["kind"] == "moved":
            moved, seen = True, set()
        elif moved and e["kind"] in ("following", "contributing") and e["kind"] not in seen:
            seen.add(e["kind"])
            print("  mover peer %d %s: %s" % (i, e["kind"], json.dumps(e)))
            if e["kind"] == "following":
                named.append(e)
sys.exit(2 if not named else 0 if any(e["pace_known"] == 1 for e in named) else 3)'
    case $? in
    0) ;;
    2) fail "the mover never named a step to contribute from" ;;
    3) fail "a mover timed its new pool from scratch" ;;
    *) fail "no events" ;;
    esac
    ;;
*) fail "unknown test" ;;
esac
exit 0
