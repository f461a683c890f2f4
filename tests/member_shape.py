#!/usr/bin/env python3
"""member_shape.py — the swarm member's shape, checked on its sources (issue 23):

1. no field of the member (struct peer, and a field of one of its parts) is written from
   two of peer/'s files: a part's state is written by the part's own file, others call
   its functions (assignments, ++/--, memcpy/memset into it, destroy/free of an object
   it holds);
2. no loop of calls between the member's files other than through the composition
   (peer.c): the parts depend on the composition's interface and on swarm/, not on each
   other both ways;
3. struct peer has at most MAX_OWN fields of its own;
4. every timer the member makes (timeout_make) is one its loop wakes for (next_wake in
   peer.c lists them): a timer left out there would fire only at the loop's idle cap.

Usage: member_shape.py SOURCE_DIR. Prints what it found; exits 1 on a breach."""
import collections
import glob
import os
import re
import sys

MAX_OWN = 31  # fields declared in struct peer (a composed part counts as one); issue 23 asks ~30
COMPOSITION = "peer.c"

F = r"p->([a-z_0-9]+)((?:\.[a-z_0-9]+)?)"
WRITES = [
    re.compile(F + r"(?:\[[^\]]*\])?(?:\.[a-z_0-9]+)?\s*(?:=(?!=)|\+=|-=|\*=|/=|\|=|&=|\+\+|--)"),
    re.compile(r"(?:\+\+|--)" + F),
    re.compile(r"mem(?:cpy|set|move)\(&?" + F),
    re.compile(r"(?:kern|pool|xfer|view|stage|data|wiring|demo_opt|xfer_snap|peer_store)"
               r"_(?:destroy|free|close)\(&" + F),
]
DEF = re.compile(r"^[a-z][a-z_0-9 \*]*?\b([a-z_][a-z_0-9]*)\(", re.M)


def strip_comments(src):
    return re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), src, flags=re.S)


def main(root):
    files = sorted(glob.glob(os.path.join(root, "peer", "*.c")))
    if len(files) < 5:
        print("member_shape: no member sources under", root)
        return 1
    src = {os.path.basename(f): strip_comments(open(f).read()) for f in files}
    bad = 0

    writers = collections.defaultdict(set)
    for name, text in src.items():
        for line in text.splitlines():
            for pat in WRITES:
                for m in pat.finditer(line):
                    writers[m.group(1) + m.group(2)].add(name)
    multi = {k: sorted(v) for k, v in writers.items() if len(v) > 1}
    for k in sorted(multi):
        print("member_shape: p->%s is written from %s" % (k, ", ".join(multi[k])))
    print("member_shape: %d fields written, %d of them from two or more files"
          % (len(writers), len(multi)))
    bad |= bool(multi)

    defs = {}
    for name, text in src.items():
        for m in DEF.finditer(text):
            if not text.startswith("static ", m.start()):
                defs[m.group(1)] = name
    calls = collections.defaultdict(set)
    for name, text in src.items():
        for fn, where in defs.items():
            if where != name and re.search(r"\b" + fn + r"\(", text):
                calls[name].add(where)
    graph = {a: {b for b in bs if b != COMPOSITION} for a, bs in calls.items() if a != COMPOSITION}
    loops = strongly_connected(graph)
    for comp in loops:
        print("member_shape: a loop of calls between " + ", ".join(comp))
        for a in comp:
            for b in sorted(graph.get(a, ())):
                if b in comp:
                    used = sorted(fn for fn, w in defs.items()
                                  if w == b and re.search(r"\b" + fn + r"\(", src[a]))
                    print("member_shape:   %s calls %s: %s" % (a, b, ", ".join(used)))
    print("member_shape: %d files, %d calls between them, %d loops"
          % (len(src), sum(len(v) for v in calls.values()), len(loops)))
    bad |= bool(loops)

    impl = strip_comments(open(os.path.join(root, "peer", "peer_impl.h")).read())
    body = re.search(r"^struct peer \{(.*?)^\};", impl, re.S | re.M)
    if not body:
        print("member_shape: struct peer not found in peer/peer_impl.h")
        return 1
    own = 0
    for decl in body.group(1).split(";"):
        decl = decl.strip()
        if decl:
            own += decl.count(",") + 1 if "(" not in decl else 1
    print("member_shape: struct peer has %d fields of its own (at most %d)" % (own, MAX_OWN))
    bad |= own > MAX_OWN
    bad |= check_timers(root, src)
    return 1 if bad else 0


# the member of struct peer a part's file keeps its state in (its init takes a pointer)
PART_OF_FILE = {"contrib.c": "contrib", "follow.c": "follow", "join_rules.c": "join",
                "rebal.c": "rebal", "recover.c": "rec", "resume.c": "resume"}
MAKE = re.compile(r"(?:p->|\b([a-z])->)([a-z_0-9.]+?)(?:\[[^\]]*\])?\s*=\s*timeout_make\(")


def check_timers(root, src):
    wake = re.search(r"static double next_wake\(.*?\n\}", src["peer.c"], re.S)
    if not wake:
        print("member_shape: next_wake not found in peer/peer.c")
        return True
    woken = set(re.findall(r"&p->([a-z_0-9.]+)", wake.group(0)))
    woken |= set(re.findall(r"p->([a-z_0-9.]+)\[s\]\.deadline", wake.group(0)))
    made, bad = set(), False
    for name, text in src.items():
        for m in MAKE.finditer(text):
            if m.group(1):  # a part's own pointer: the member of struct peer it is
                part = PART_OF_FILE.get(name)
                if not part:
                    print("member_shape: %s makes a timer in a part member_shape does not map "
                          "(PART_OF_FILE)" % name)
                    bad = True
                    continue
                made.add(part + "." + m.group(2))
            else:
                made.add(m.group(2))
    missing = sorted(t for t in made if t not in woken)
    for t in missing:
        print("member_shape: timer p->%s is made but next_wake does not wake for it" % t)
    print("member_shape: %d timers made, %d of them not woken for" % (len(made), len(missing)))
    return bad or bool(missing)


def strongly_connected(graph):
    """Tarjan's algorithm; the components of more than one file."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("SWARMTRAIN_SOURCE", ".")))
