#!/usr/bin/env python3
"""join_check.py — reads the events files of tests/join_netns.sh's peers
(DIR/hI.events.jsonl, docs/events.md) and says whether the joiners of a running pool
joined as README's "A swarm across machines" promises (issue 24).

  join_check.py count --dir D --host I --kind K
      prints how many K events host I has written so far (0: none, or no file)
  join_check.py contributed --dir D --hosts "I J .."
      prints how many of those hosts have contributed (`contributing` or `takes_over`)
      or ended (an `exit` event) so far
  join_check.py check --dir D --hosts N --joiners "I J .." --launched "T T .."
          --until T --max-join-s S [--join-steps K] [--min-mbps R] --label TEXT
      for each joiner (launched at wall-clock T, from the script):
        (a) its `joined` event is a download from the pool (`source` pool);
        (b) its `contributing` (or `takes_over`) event comes at most S seconds after it
            was launched, and K of the pool's steps more: the median `dur_s` of the
            founders' `step` events before T (the pool's pace on this machine: a
            joiner waits on it for the donor's first answer, to catch up and to be
            named, so a bound in seconds alone holds on one machine's speed only);
        (c) no `resynced` event after that until T (the SIGTERM);
        (d) with --min-mbps, its download's rate once a donor answered (`joined`: `mb` /
            (`seconds` - `wait_s`), the link's part) is at least R MB/s; the rate from its
            first request (`mb` / `seconds`, the wait for the donor's first answer
            included) and the joiner's own set-up before its first request (`prep_s`)
            are printed beside. The wait is the donor's: it snapshots its state between
            two compute passes, a second or so on a CPU `small` (0.18 and 0.79 s in two
            runs of one machine); it counts in (b), the time to contribute;
      and for every host: (e) a `left` event and an `exit` event with code 0.
      Prints one summary line (per joiner: seconds from launch to contributing, from its
      first event, MB and MB/s of its download, re-syncs after) then what failed;
      exits 1 when a check fails.
  join_check.py live < STATUS_JSON
      prints how many members a status document (docs/protocol.md 7.7) lists as live
      (0: no document)

Not for: the protocol's rules (swarmtrain sim); the wording of the logs (never read)."""
import argparse
import json
import os
import sys


def load(d, i):
    path = os.path.join(d, "h%d.events.jsonl" % i)
    out = []
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except ValueError:  # a line being written while the peer runs
                pass
    return out


def first(es, *kinds):
    for e in es:
        if e["kind"] in kinds:
            return e
    return None


def check(a):
    ok = True
    fails = []

    def bad(msg):
        nonlocal ok
        ok = False
        fails.append(msg)

    joiners = [int(x) for x in a.joiners.split()]
    launched = [float(x) for x in a.launched.split()]
    steps = sorted(e["dur_s"] for i in range(1, a.hosts + 1) if i not in joiners
                   for e in load(a.dir, i)
                   if e["kind"] == "step" and e.get("dur_s") is not None and e["t"] <= a.until)
    step_s = steps[len(steps) // 2] if steps else 0.0
    max_join = a.max_join_s + a.join_steps * step_s
    parts = []
    for i, t0 in zip(joiners, launched):
        es = load(a.dir, i)
        lis = first(es, "listening")
        joined = first(es, "joined")
        contrib = first(es, "contributing", "takes_over")
        stage = joined["stage"] if joined else None
        join_s = contrib["t"] - t0 if contrib else None
        from_first = contrib["t"] - es[0]["t"] if contrib and es else None
        mb = joined.get("mb") if joined else None
        sec = joined.get("seconds") if joined else None
        wait = joined.get("wait_s") if joined else None
        prep = joined.get("prep_s") if joined else None
        whole = mb / sec if mb is not None and sec else None
        link = sec - wait if sec is not None and wait is not None else None
        mbps = mb / link if mb is not None and link and link > 0 else None
        resyncs = [e for e in es if e["kind"] == "resynced" and contrib
                   and contrib["t"] <= e["t"] <= a.until]
        # where the time went: seconds from launch to each of the join's events
        at = [(k, first(es, *ks)) for k, ks in (("listening", ("listening",)), ("swarm", ("swarm",)),
                                                ("joined", ("joined",)), ("following", ("following",)),
                                                ("contributing", ("contributing", "takes_over")))]
        phases = "/".join("%.2f" % (e["t"] - t0) if e else "-" for _, e in at)
        parts.append("h%d stage %s: contributed %s s after launch (%s s after its first event%s; "
                     "listening/swarm/joined/following/contributing at %s s), "
                     "state %s MB in %s s = %s MB/s (%s s waiting for a donor's first answer, "
                     "then %s MB/s; %s s of its own set-up before its first request), resyncs %d"
                     % (i, stage, "%.2f" % join_s if join_s is not None else "never",
                        "%.2f" % from_first if from_first is not None else "-",
                        ", " + contrib["kind"] if contrib and contrib["kind"] != "contributing" else "",
                        phases, mb, sec, "%.1f" % whole if whole is not None else "-",
                        wait, "%.1f" % mbps if mbps is not None else "-", prep, len(resyncs)))
        if not lis:
            bad("h%d wrote no listening event" % i)
        if not joined or joined.get("source") != "pool":
            bad("(a) h%d's state did not come from the pool (%s)"
                % (i, joined.get("source") if joined else "no joined event"))
        if join_s is None:
            bad("(b) h%d never contributed" % i)
        elif join_s > max_join:
            bad("(b) h%d contributed %.2f s after launch, more than %.2f s (%.1f s and %g of the "
                "pool's %.2f s steps)" % (i, join_s, max_join, a.max_join_s, a.join_steps, step_s))
        if resyncs:
            bad("(c) h%d re-synced %d times after contributing: %s"
                % (i, len(resyncs), "; ".join("%.1f s after: %s" % (e["t"] - contrib["t"], e.get("why"))
                                             for e in resyncs)))
        if a.min_mbps is not None and (mbps is None or mbps < a.min_mbps):
            bad("(d) h%d downloaded at %s MB/s once a donor answered, less than %.2f"
                % (i, "%.1f" % mbps if mbps is not None else "-", a.min_mbps))
    for i in range(1, a.hosts + 1):
        es = load(a.dir, i)
        if not first(es, "left"):
            bad("(e) h%d has no left event" % i)
        ex = [e for e in es if e["kind"] == "exit"]
        if not ex:
            bad("(e) h%d wrote no exit event" % i)
        elif ex[-1]["code"] != 0:
            bad("(e) h%d exited %s: %s" % (i, ex[-1]["code"], ex[-1].get("error")))
    others = sum(1 for i in range(1, a.hosts + 1) if i not in joiners
                 for e in load(a.dir, i) if e["kind"] == "resynced")
    print("join: %s: %s; founders' resyncs %d; bound %.2f s (%.1f s and %g of the pool's "
          "%.2f s steps): %s" % (a.label, "; ".join(parts), others, max_join, a.max_join_s,
                                 a.join_steps, step_s, "ok" if ok else "FAILED"))
    for f in fails:
        print("join_check: " + f)
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["count", "contributed", "check", "live"])
    ap.add_argument("--dir")
    ap.add_argument("--host", type=int)
    ap.add_argument("--kind")
    ap.add_argument("--hosts")
    ap.add_argument("--joiners")
    ap.add_argument("--launched")
    ap.add_argument("--until", type=float, default=float("inf"))
    ap.add_argument("--max-join-s", type=float)
    ap.add_argument("--join-steps", type=float, default=0.0)
    ap.add_argument("--min-mbps", type=float)
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    if a.mode == "live":
        try:
            doc = json.load(sys.stdin)
        except ValueError:  # no answer
            print(0)
            return 0
        print(sum(1 for m in doc.get("peers", []) if m.get("state") != "dead"))
        return 0
    if a.mode == "count":
        print(sum(1 for e in load(a.dir, a.host) if e["kind"] == a.kind))
        return 0
    if a.mode == "contributed":
        print(sum(1 for i in a.hosts.split()
                  if first(load(a.dir, int(i)), "contributing", "takes_over", "exit")))
        return 0
    a.hosts = int(a.hosts)
    return 0 if check(a) else 1


if __name__ == "__main__":
    sys.exit(main())
