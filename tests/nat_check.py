#!/usr/bin/env python3
"""nat_check.py — reads what tests/nat.sh's swarm recorded (DIR/peerI.events.jsonl,
docs/events.md) and status documents (docs/protocol.md 7.7).

  nat_check.py relay --dir D --hosts N --of I < STATUS_JSON
      prints the host whose peer host I's peer names as its relay (its entry's relay
      endpoint, docs/protocol.md 3.4); nothing when none (or I is not listed)
  nat_check.py listed --dir D --hosts N --nated "I J" < STATUS_JSON
      exits 0 when the document lists each NATed host's peer serving, with a relay
      endpoint that names a relay
  nat_check.py check --dir D --hosts N --nated "I J" --killed K --since T --steps S
      (b) each NATed peer contributed: a `contributing` or `takes_over` event naming the
          step it contributes from, and `step` events of steps at or after it, some
          after T (the kill);
      (d) every peer but K left at step S with exit code 0, the members of each stage
          with one hash, and one final val_loss.
      Prints what it found; exits 1 when a check fails."""
import argparse
import json
import sys

from partition_check import load  # the events files, a line being written skipped

RELAY = "relay:"


def ids(ev):
    """host -> its id (64 hex), from its `serving` event"""
    out = {}
    for i, es in ev.items():
        for e in es:
            if e["kind"] == "serving":
                out[i] = e["id"]
                break
    return out


def document():
    text = sys.stdin.read().strip()
    try:
        return json.loads(text) if text else None
    except ValueError:
        return None


def relay_named(doc, pid):
    """the relay id (64 hex) the entry of peer pid names; None: none or not listed"""
    for p in (doc or {}).get("peers", []):
        if p["id"] == pid and p["addr"].startswith(RELAY) and len(p["addr"]) == len(RELAY) + 64:
            return p["addr"][len(RELAY):]
    return None


def cmd_relay(a):
    idof = ids(load(a.dir, a.hosts, True))
    rid = relay_named(document(), idof.get(a.of))
    host = [i for i, x in idof.items() if x == rid]
    if host:
        print(host[0])


def cmd_listed(a):
    idof = ids(load(a.dir, a.hosts, True))
    doc = document()
    for i in a.nated:
        entry = [p for p in (doc or {}).get("peers", []) if p["id"] == idof.get(i)]
        if not entry or entry[0]["state"] != "serving" or not relay_named(doc, idof[i]):
            print("nat_check: host %d is not listed serving behind a relay: %s" % (i, entry))
            return 1
    print("nat_check: the status document lists hosts %s serving, at %s" % (
        " ".join(map(str, a.nated)),
        ", ".join(p["addr"][:len(RELAY) + 8] + ".." for p in doc["peers"]
                  if p["id"] in [idof[i] for i in a.nated])))
    return 0


def cmd_check(a):
    ev = load(a.dir, a.hosts, True)
    ok = True

    def bad(msg):
        nonlocal ok
        ok = False
        print("nat_check: " + msg)

    # (b) the NATed peers contributed, before and after the kill
    for i in a.nated:
        c = [e for e in ev[i] if e["kind"] in ("contributing", "takes_over")]
        if not c:
            bad("(b) host %d never contributed" % i)
            continue
        # the step it contributes from: takes_over names it, contributing follows the
        # `following` event that named it
        named = [e for e in ev[i] if e["kind"] == "following" and e["t"] <= c[0]["t"]]
        frm = c[0]["from"] if c[0]["kind"] == "takes_over" else named[-1]["from"] if named else 0
        applied = [e["step"] for e in ev[i] if e["kind"] == "step" and e["step"] >= frm]
        after = [e["step"] for e in ev[i] if e["kind"] == "step" and e["t"] >= a.since]
        if not applied or not after:
            bad("(b) host %d applied %d steps from step %s, %d after the kill"
                % (i, len(applied), frm, len(after)))
        else:
            print("nat_check: (b) host %d contributes from step %s: applied steps %d..%d, %d of "
                  "them after the kill" % (i, frm, applied[0], applied[-1], len(after)))
    # (d) one swarm to the end
    left, vals = {}, 0
    for i in ev:
        vals += sum(1 for e in ev[i] if e["kind"] == "val_loss" and e.get("final") == 1)
        if i == a.killed:
            continue
        ls = [e for e in ev[i] if e["kind"] == "left"]
        ex = [e for e in ev[i] if e["kind"] == "exit"]
        if not ls or ls[-1]["step"] != a.steps:
            bad("(d) host %d did not leave at step %d: %s" % (i, a.steps, ls[-1:]))
        else:
            left[i] = ls[-1]
        if not ex or ex[-1]["code"] != 0:
            bad("(d) host %d exit event: %s" % (i, ex[-1:]))
    stages = {}
    for i, e in left.items():
        stages.setdefault(e["stage"], {})[i] = e["hash"]
    for s in sorted(stages):
        hs = stages[s]
        print("nat_check: (d) pool %s: %s" % (s, " ".join("%d:%s" % (i, h) for i, h in sorted(hs.items()))))
        if len(set(hs.values())) != 1:
            bad("(d) pool %s ends with %d hashes" % (s, len(set(hs.values()))))
    if vals != 1:
        bad("(d) %d final val_loss events, not 1" % vals)
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("relay", "listed", "check"):
        p = sub.add_parser(name)
        p.add_argument("--dir", required=True)
        p.add_argument("--hosts", type=int, required=True)
        if name == "relay":
            p.add_argument("--of", type=int, required=True)
        else:
            p.add_argument("--nated", type=lambda v: [int(x) for x in v.split()], required=True)
        if name == "check":
            p.add_argument("--killed", type=int, required=True)
            p.add_argument("--since", type=float, required=True)
            p.add_argument("--steps", type=int, required=True)
    a = ap.parse_args()
    if a.cmd == "relay":
        cmd_relay(a)
        return 0
    return cmd_listed(a) if a.cmd == "listed" else cmd_check(a)


if __name__ == "__main__":
    sys.exit(main())
