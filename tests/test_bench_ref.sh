#!/bin/sh
# test_bench_ref.sh — `bench model` prints a ratio only against a reference measured in the
# same command: none without one (no python, or no torch), and this run's tokens/s over the
# reference's when tools/ref_llama.py --bench answers (here a stand-in script, so that the
# test needs no torch). Never a figure from another machine. Args: BINARY.
set -eu
bin=$1
tmp=$(mktemp -d /tmp/st_benchref_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
run() { "$bin" bench model --config tiny --steps 1 --threads 1 "$@" >"$tmp/out" 2>&1; }
# no python: no reference, no ratio
SWARMTRAIN_PYTHON=$tmp/none run
grep -q '^  reference        none measured here (.*not found): no ratio$' "$tmp/out" ||
    { cat "$tmp/out"; echo "FAIL: without python"; exit 1; }
# the reference answers: its figure and the ratio to it
cat >"$tmp/ref.sh" <<'REF'
case " $* " in *" --bench --dim 64 "*" --threads 1 "*) ;; *) echo "bad args: $*"; exit 1 ;; esac
echo "ref_llama bench: tokens/s 1000.0 torch 9.9.9 threads 1 steps 1"
REF
SWARMTRAIN_PYTHON=/bin/sh SWARMTRAIN_REF_LLAMA=$tmp/ref.sh run
grep -Eq '^  reference        1000 tok/s: PyTorch 9\.9\.9, same model, 1 threads, measured now .* -> this run is [0-9.]+x of it$' "$tmp/out" ||
    { cat "$tmp/out"; echo "FAIL: with a reference"; exit 1; }
# it fails: no ratio
printf 'echo "ref_llama bench: torch not importable" >&2; exit 3\n' >"$tmp/fail.sh"
SWARMTRAIN_PYTHON=/bin/sh SWARMTRAIN_REF_LLAMA=$tmp/fail.sh run
grep -q '^  reference        none measured here (torch is not importable' "$tmp/out" ||
    { cat "$tmp/out"; echo "FAIL: without torch"; exit 1; }
if grep -q 'ANCHORS' "$tmp/out"; then cat "$tmp/out"; echo "FAIL: a figure from elsewhere"; exit 1; fi
echo "bench model: a ratio only against a reference measured in the same command"
