#!/bin/sh
# test_package.sh — tools/package builds the .deb (here around the tested binary), dpkg -x
# installs it into a temporary root, and the installed binary prints its version and
# trains a few steps; the unit template and the example config are where systemd and the
# unit look for them, and every command has its man page.
# Exit 77 (skipped) when dpkg-deb is missing. Args: SOURCE_DIR BINARY.
set -eu
src=$1
bin=$2
if ! command -v dpkg-deb >/dev/null 2>&1 || ! command -v dpkg >/dev/null 2>&1; then
    echo "SKIP: dpkg-deb/dpkg not installed (not a Debian-based system): no package test"
    exit 77
fi
corpus=${SWARMTRAIN_CORPUS:-$HOME/.cache/swarmtrain/kjv.txt}
tmp=$(mktemp -d /tmp/st_package_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
deb=$("$src/tools/package" --binary "$bin" --out "$tmp")
case "$deb" in */swarmtrain_*_*.deb) ;; *) echo "FAIL: package name: $deb"; exit 1 ;; esac
[ -s "$deb" ] || { echo "FAIL: no $deb"; exit 1; }
dpkg-deb -I "$deb" | grep -q '^ Package: swarmtrain$' || { echo "FAIL: control"; exit 1; }
dpkg -x "$deb" "$tmp/root"
st=$tmp/root/usr/bin/swarmtrain
v=$("$st" --version)
echo "installed: $v"
echo "$v" | grep -Eq '^swarmtrain [0-9]+\.[0-9]+\.[0-9]+ \(git [0-9a-z-]+\)$' ||
    { echo "FAIL: --version: $v"; exit 1; }
ver=$(echo "$v" | cut -d' ' -f2)
case "$deb" in *"/swarmtrain_${ver}_"*) ;; *) echo "FAIL: $deb is not version $ver"; exit 1 ;; esac
unit=$tmp/root/lib/systemd/system/swarmtrain-peer@.service
for want in 'EnvironmentFile=/etc/swarmtrain/%i.conf' \
    'ExecStart=/usr/bin/swarmtrain peer --db /var/lib/swarmtrain/%i/peer.db $SWARMTRAIN_ARGS' \
    'KillSignal=SIGTERM' 'Restart=on-failure'; do
    grep -qxF "$want" "$unit" || { echo "FAIL: $unit lacks: $want"; exit 1; }
done
[ -f "$tmp/root/etc/swarmtrain/example.conf" ] || { echo "FAIL: no example.conf"; exit 1; }
for c in local peer status keygen train export sample bench sim; do
    [ -s "$tmp/root/usr/share/man/man1/swarmtrain-$c.1.gz" ] || { echo "FAIL: no man page for $c"; exit 1; }
done
if command -v systemd-analyze >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    SYSTEMD_LOG_LEVEL=err systemd-analyze verify --man=no "$unit" 2>&1 | grep -v 'Unit is bound\|not found' || true
fi
"$st" train --data "$corpus" --steps 3 --threads 1 --log-every 1 --val-batches 1 \
    --events "$tmp/train.events.jsonl" >"$tmp/train.log" 2>&1 ||
    { cat "$tmp/train.log"; echo "FAIL: the installed binary's train"; exit 1; }
# its record (docs/events.md): a final held-out loss, a finite number
val=$(python3 -c 'import json,math,sys
v=[e["val_loss"] for e in map(json.loads,open(sys.argv[1])) if e["kind"]=="val_loss" and e.get("final")==1]
print(v[-1] if v and v[-1] is not None and math.isfinite(v[-1]) else "")' "$tmp/train.events.jsonl")
[ -n "$val" ] || { cat "$tmp/train.log"; echo "FAIL: no final val_loss event"; exit 1; }
echo "installed binary trained: val_loss $val"
