#!/usr/bin/env python3
"""partition_check.py — reads the events files of tests/partition.sh's swarm
(DIR/peerI.events.jsonl, docs/events.md) and says whether they show a partition that
healed into one swarm.

  partition_check.py deaths --dir D --hosts N --side-b "I J .." --since T
      prints how many peers have recorded a `failed` event, at or after T, for every
      peer on the other side of the cut
  partition_check.py check --dir D --hosts N --side-b "I J .." --since T --healed H --steps S
      (a) every peer recorded every peer across the cut as failed between T and H;
      (b) every peer left at step S, the members of each stage with one hash, and the
          swarm wrote one final val_loss, after H;
      (c) every peer's exit event says code 0.
      Prints what it found (per pool: each side's members, who re-synced after the heal
      and why); exits 1 when a check fails.
  partition_check.py live < STATUS_JSON
      prints how many members a status document (docs/protocol.md 7.7) lists as live
      (0: no document)"""
import argparse
import json
import os
import sys


def load(d, hosts, partial):
    ev = {}
    for i in range(1, hosts + 1):
        path = os.path.join(d, "peer%d.events.jsonl" % i)
        ev[i] = []
        if os.path.exists(path):
            with open(path) as f:
                for line in f:
                    line = line.strip()
                    if not line:
                        continue
                    try:
                        ev[i].append(json.loads(line))
                    except ValueError:  # a line being written (deaths, while it runs)
                        if not partial:
                            raise
    return ev


def ids(ev):
    """host -> the 8 hex digits other peers name it by (its `serving` event's id)"""
    out = {}
    for i, es in ev.items():
        for e in es:
            if e["kind"] == "serving":
                out[i] = e["id"][:8]
                break
    return out


def deaths(ev, idof, sideb, since, until=None):
    """host -> (hosts across the cut it recorded as failed in [since, until], the last t)"""
    out = {}
    for i, es in ev.items():
        other = [j for j in ev if (j in sideb) != (i in sideb)]
        seen, last = set(), None
        for e in es:
            if e["kind"] != "failed" or e["t"] < since or (until and e["t"] > until):
                continue
            for j in other:
                if idof.get(j) == e["peer"] and j not in seen:
                    seen.add(j)
                    last = e["t"]
        out[i] = (seen, set(other), last)
    return out


def check(a, ev, idof, sideb):
    ok = True

    def bad(msg):
        nonlocal ok
        ok = False
        print("partition_check: " + msg)

    hosts = sorted(ev)
    for i in hosts:
        if i not in idof:
            bad("host %d recorded no serving event" % i)
    # (a) each side declared the other dead while the cut held
    worst = 0.0
    for i, (seen, other, last) in sorted(deaths(ev, idof, sideb, a.since, a.healed).items()):
        if seen != other:
            bad("(a) host %d did not record hosts %s as failed during the cut"
                % (i, sorted(other - seen)))
        elif last is not None:
            worst = max(worst, last - a.since)
    print("partition_check: (a) every peer recorded every peer across the cut as failed, "
          "the last %.1f s after the cut began (cut held %.1f s)" % (worst, a.healed - a.since))
    # (b) one swarm: all at the last step, one hash a stage, one final val_loss
    left = {}
    for i in hosts:
        ls = [e for e in ev[i] if e["kind"] == "left"]
        if not ls:
            bad("(b) host %d has no left event" % i)
            continue
        left[i] = ls[-1]
        if ls[-1]["step"] != a.steps:
            bad("(b) host %d left at step %s, not the run's last (%d)" % (i, ls[-1]["step"], a.steps))
    by_stage = {}
    for i, e in left.items():
        by_stage.setdefault(e["stage"], {})[i] = e["hash"]
    for s in sorted(by_stage):
        hs = by_stage[s]
        side = lambda i: "B" if i in sideb else "A"
        at_cut, at_heal = {}, {}
        for i in hs:
            for at, t in ((at_cut, a.since), (at_heal, a.healed)):
                steps = [e["step"] for e in ev[i] if e["kind"] == "step" and e["t"] <= t]
                at[i] = steps[-1] + 1 if steps else 0
        resynced = ["host %d (%s) at %.1f s: %s" % (i, side(i), e["t"] - a.healed, e.get("why"))
                    for i in sorted(hs) for e in ev[i]
                    if e["kind"] == "resynced" and e["t"] >= a.healed]
        print("partition_check: pool %s: %s; steps at the cut and at the heal %s; "
              "re-synced after it: %s; hashes %s"
              % (s, " ".join("%d%s" % (i, side(i)) for i in sorted(hs)),
                 " ".join("%d:%d-%d" % (i, at_cut[i], at_heal[i]) for i in sorted(hs)),
                 "; ".join(resynced) or "none",
                 " ".join("%d:%s" % (i, hs[i]) for i in sorted(hs))))
        if len(set(hs.values())) != 1:
            bad("(b) pool %s ends with %d different hashes" % (s, len(set(hs.values()))))
    finals = [(i, e) for i in hosts for e in ev[i] if e["kind"] == "val_loss" and e.get("final") == 1]
    if len(finals) != 1:
        bad("(b) %d final val_loss events (hosts %s), not one" % (len(finals), [i for i, _ in finals]))
    elif finals[0][1]["t"] < a.healed:
        bad("(b) the run ended before the heal: raise --steps")
    else:
        print("partition_check: (b) one final val_loss %.4f (host %d), %.1f s after the heal"
              % (finals[0][1]["val_loss"], finals[0][0], finals[0][1]["t"] - a.healed))
    # (c) every peer exited 0
    for i in hosts:
        ex = [e for e in ev[i] if e["kind"] == "exit"]
        if not ex:
            bad("(c) host %d wrote no exit event" % i)
        elif ex[-1]["code"] != 0:
            bad("(c) host %d exited %s: %s" % (i, ex[-1]["code"], ex[-1].get("error")))
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["deaths", "check", "live"])
    ap.add_argument("--dir")
    ap.add_argument("--hosts", type=int)
    ap.add_argument("--side-b")
    ap.add_argument("--since", type=float)
    ap.add_argument("--healed", type=float)
    ap.add_argument("--steps", type=int)
    a = ap.parse_args()
    if a.mode == "live":
        try:
            doc = json.load(sys.stdin)
        except ValueError:  # no answer
            print(0)
            return 0
        print(sum(1 for m in doc.get("peers", []) if m.get("state") != "dead"))
        return 0
    ev = load(a.dir, a.hosts, a.mode == "deaths")
    idof = ids(ev)
    sideb = set(int(x) for x in a.side_b.split())
    if a.mode == "deaths":
        d = deaths(ev, idof, sideb, a.since)
        print(sum(1 for seen, other, _ in d.values() if seen == other))
        return 0
    return 0 if check(a, ev, idof, sideb) else 1


if __name__ == "__main__":
    sys.exit(main())
