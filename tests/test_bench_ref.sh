#!/bin/sh
# test_bench_ref.sh — `bench model` gives a ratio only against a reference measured in the
# same command: none without one (no python, or no torch), and this run's tokens/s over the
# reference's when tools/ref_llama.py --bench answers (here a stand-in script, so that the
# test needs no torch). Never a figure from another machine. It reads the run's record
# (--json), not its report's wording. Args: BINARY.
set -eu
bin=$1
tmp=$(mktemp -d /tmp/st_benchref_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
run() { "$bin" bench model --config tiny --steps 1 --threads 1 --json "$tmp/out.json" "$@" >"$tmp/out" 2>&1; }
# check PYTHON-EXPRESSION MESSAGE: the expression over r, the JSON record, must hold
check() {
    /usr/bin/python3 -c "import json,sys; r=json.load(open('$tmp/out.json')); sys.exit(0 if ($1) else 1)" ||
        { cat "$tmp/out" "$tmp/out.json"; echo "FAIL: $2"; exit 1; }
}
# no python: no reference, no ratio
SWARMTRAIN_PYTHON=$tmp/none run
check "r['tokens_s'] > 0 and 'ratio' not in r['reference'] and 'not found' in r['reference']['none']" "without python"
# the reference answers: its figure and the ratio to it
cat >"$tmp/ref.sh" <<'REF'
case " $* " in *" --bench --dim 64 "*" --threads 1 "*) ;; *) echo "bad args: $*"; exit 1 ;; esac
echo "ref_llama bench: tokens/s 1000.0 torch 9.9.9 threads 1 steps 1"
REF
SWARMTRAIN_PYTHON=/bin/sh SWARMTRAIN_REF_LLAMA=$tmp/ref.sh run
check "r['reference']['tokens_s'] == 1000.0 and r['reference']['torch'] == '9.9.9' and abs(r['reference']['ratio'] - r['tokens_s'] / 1000.0) < 1e-3 * r['reference']['ratio']" "with a reference"
# it fails: no ratio
printf 'echo "ref_llama bench: torch not importable" >&2; exit 3\n' >"$tmp/fail.sh"
SWARMTRAIN_PYTHON=/bin/sh SWARMTRAIN_REF_LLAMA=$tmp/fail.sh run
check "'ratio' not in r['reference'] and 'torch' in r['reference']['none']" "without torch"
# --no-reference: none, said so
SWARMTRAIN_PYTHON=/bin/sh SWARMTRAIN_REF_LLAMA=$tmp/ref.sh run --no-reference
check "r['reference'] == {'none': '--no-reference'}" "with --no-reference"
if grep -q 'ANCHORS' "$tmp/out"; then cat "$tmp/out"; echo "FAIL: a figure from elsewhere"; exit 1; fi
echo "bench model: a ratio only against a reference measured in the same command"
