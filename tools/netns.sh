#!/usr/bin/env bash
# netns.sh — the thin-link harness: test hosts as network namespaces on one bridge, each
# host's link rate-limited with `tc ... tbf` (both directions), one-way latency added by a
# user-space relay (tools/delay_relay.py; the kernel's netem is not available here), and a
# swarm of one `swarmtrain peer` per host. Everything is torn down on exit, error or
# Ctrl-C (trap), and only addresses inside these namespaces are used.
# Not for: real networks. Needs root (ip netns, tc).
#
#   tools/netns.sh up N RATE DELAY_MS      hosts PREFIX-h1..hN (10.77.0.1..N), switch PREFIX-sw
#   tools/netns.sh down                    kill what runs in them, delete them
#   tools/netns.sh exec I CMD...           run CMD on host I
#   tools/netns.sh nat I                   host I lets no TCP connection in, as behind NAT or a
#                                          firewall: its switch port drops every SYN without
#                                          ACK towards it; connections it opens work (run it
#                                          after `up`; the host's download is left unshaped)
#   tools/netns.sh swarm [options] [-- RUN OPTIONS]
#        --hosts N (4) --stages S (2) --rate R|none (none) --delay-ms D (0) --steps N (30)
#        --in-flight K (2) --dir DIR (new /tmp dir) --timeout S (600) --config NAME (tiny)
#        --serve-data FILE  serve FILE over HTTP from host 1 (tests/http_server.py) and give
#                           every peer --data http://<host 1>:PORT/FILE's name
#        --cut-data N       the first download of it breaks off after N bytes (it resumes)
#        --db               every peer keeps a store, DIR/peerI.db (peer --db)
#        starts peer 1 with --new (stage 0), the others with --join through host 1, host i
#        taking stage (i-1) mod S; RUN OPTIONS go to every peer (codec, optimizer, ...).
#        Exits 77 when this machine cannot make namespaces (not root, no ip/tc).
#        Prints one line:  thin: rate R delay D ms: tokens/s X  wire MB/s per peer A B ..
#        mean M  val_loss V  train_s T  (wire = bytes on each host's link, both directions,
#        over the training steps, from the interface counters: TCP/IP framing included)
#
# Environment: ST_NS_PREFIX (st15), ST_NET (10.77.0), SWARMTRAIN_BIN (build-dev's binary).
# RATE is tc's syntax: 1gbit, 100mbit, 20mbit; "none" leaves the link unshaped.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
P=${ST_NS_PREFIX:-st15}
NET=${ST_NET:-10.77.0}
STATE=/tmp/$P-netns
BIN=${SWARMTRAIN_BIN:-$HERE/../build-dev/tools/swarmtrain}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
LPORT=7100 # where a peer listens
APORT=7000 # what it advertises: the relay in front of it (LPORT itself without delay)

die() {
    echo "netns.sh: $*" >&2
    exit 1
}

# bits per second of a tc rate (1gbit, 100mbit, 20mbit, 500kbit)
rate_bps() {
    local r=${1,,} n u
    n=${r%%[a-z]*}
    u=${r#"$n"}
    case $u in
    gbit) echo $((n * 1000000000)) ;;
    mbit) echo $((n * 1000000)) ;;
    kbit) echo $((n * 1000)) ;;
    bit | "") echo "$n" ;;
    *) die "rate '$1': use gbit, mbit or kbit" ;;
    esac
}

# tbf on one device: 10 ms worth of burst (at least 16 KB, so one TSO segment fits), a
# queue that holds at most 100 ms before tbf drops.
shape() {
    local ns=$1 dev=$2 rate=$3 burst
    burst=$(($(rate_bps "$rate") / 8 / 100))
    [ "$burst" -lt 16384 ] && burst=16384
    ip netns exec "$ns" tc qdisc replace dev "$dev" root tbf rate "$rate" burst "$burst" \
        latency 100ms || die "tc tbf on $ns/$dev failed"
}

ns_list() {
    ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$P-(sw|h[0-9]+)$"
}

ns_down() {
    local ns pid
    if [ -f "$STATE/pids" ]; then
        while read -r pid; do kill "$pid" 2>/dev/null; done <"$STATE/pids"
    fi
    # whatever still runs inside our namespaces was started by this script
    for ns in $(ns_list); do
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill "$pid" 2>/dev/null; done
    done
    sleep 0.3
    for ns in $(ns_list); do
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
        ip netns del "$ns" 2>/dev/null
    done
    rm -rf "$STATE"
}

ns_up() {
    local n=$1 rate=$2 delay=$3 i h
    [ "$(id -u)" = 0 ] || die "needs root (ip netns, tc)"
    ns_down
    mkdir -p "$STATE"
    ip netns add "$P-sw" || die "ip netns add failed"
    ip -n "$P-sw" link set lo up
    ip -n "$P-sw" link add br0 type bridge
    ip -n "$P-sw" link set br0 up
    for i in $(seq 1 "$n"); do
        h=$P-h$i
        ip netns add "$h"
        ip -n "$h" link set lo up
        ip -n "$P-sw" link add "v$i" type veth peer name eth0 netns "$h"
        ip -n "$P-sw" link set "v$i" master br0
        ip -n "$P-sw" link set "v$i" up
        ip -n "$h" addr add "$NET.$i/24" dev eth0
        ip -n "$h" link set eth0 up
        if [ "$rate" != none ]; then
            shape "$h" eth0 "$rate"     # host -> switch: the host's upload
            shape "$P-sw" "v$i" "$rate" # switch -> host: its download
        fi
        if [ "$delay" != 0 ]; then
            ip netns exec "$h" "$PY" "$HERE/delay_relay.py" --listen "$NET.$i:$APORT" \
                --to "$NET.$i:$LPORT" --delay-ms "$delay" >"$STATE/relay$i.log" 2>&1 &
            echo $! >>"$STATE/pids"
        fi
    done
    if [ "$delay" != 0 ]; then
        for i in $(seq 1 "$n"); do
            for _ in $(seq 50); do
                ip netns exec "$P-h$i" bash -c "exec 3<>/dev/tcp/$NET.$i/$APORT" 2>/dev/null && break
                sleep 0.1
            done
        done
    fi
}

# Host i behind NAT: the switch port towards it (its download) queues TCP segments with
# SYN set and ACK clear in an htb class whose queue holds nothing (pfifo limit 0), so they
# are dropped; everything else passes unshaped. (The kernels here have no tc actions, so
# `action drop` is not an option; htb and u32 are.)
nat() {
    local i=$1 d="ip netns exec $P-sw tc"
    ip netns list | grep -q "^$P-h$i\b" || die "nat: no host $i (run up first)"
    $d qdisc replace dev "v$i" root handle 1: htb default 10 &&
        $d class add dev "v$i" parent 1: classid 1:10 htb rate 10gbit quantum 60000 &&
        $d class add dev "v$i" parent 1: classid 1:20 htb rate 10gbit quantum 60000 &&
        $d qdisc add dev "v$i" parent 1:20 handle 20: pfifo limit 0 &&
        $d filter add dev "v$i" parent 1: protocol ip prio 1 u32 match ip protocol 6 0xff \
            match u8 0x02 0x12 at 33 flowid 1:20 || die "nat: tc on v$i failed"
}

# counters of host i's link: "tx rx"
link_bytes() {
    ip netns exec "$P-h$1" cat /sys/class/net/eth0/statistics/tx_bytes \
        /sys/class/net/eth0/statistics/rx_bytes | tr '\n' ' '
}

serving() { # peers the swarm counts as serving, as host 1 sees it
    ip netns exec "$P-h1" "$BIN" status --connect "tcp://$NET.1:$LPORT" --json 2>/dev/null |
        grep -o '"state": *"serving"' | wc -l
}

swarm() {
    local hosts=4 stages=2 rate=none delay=0 steps=30 inflight=2 dir="" timeout=600
    local config=tiny serve="" cut="" db=0
    while [ $# -gt 0 ]; do
        case $1 in
        --hosts) hosts=$2; shift 2 ;;
        --stages) stages=$2; shift 2 ;;
        --rate) rate=$2; shift 2 ;;
        --delay-ms) delay=$2; shift 2 ;;
        --steps) steps=$2; shift 2 ;;
        --in-flight) inflight=$2; shift 2 ;;
        --dir) dir=$2; shift 2 ;;
        --timeout) timeout=$2; shift 2 ;;
        --config) config=$2; shift 2 ;;
        --serve-data) serve=$2; shift 2 ;;
        --cut-data) cut=$2; shift 2 ;;
        --db) db=1; shift ;;
        --) shift; break ;;
        *) die "swarm: unknown option $1" ;;
        esac
    done
    [ -x "$BIN" ] || die "no binary at $BIN (build first, or set SWARMTRAIN_BIN)"
    if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
        echo "netns.sh: needs root, ip and tc: skipped" >&2
        exit 77
    fi
    [ -n "$dir" ] || dir=$(mktemp -d /tmp/st-thin-XXXXXX)
    mkdir -p "$dir"
    trap 'ns_down' EXIT
    trap 'echo "netns.sh: interrupted" >&2; exit 130' INT TERM
    ns_up "$hosts" "$rate" "$delay"
    local adv_port=$APORT
    [ "$delay" = 0 ] && adv_port=$LPORT
    local common=(--config "$config" --steps "$steps" --threads 1 --in-flight "$inflight" "$@")
    if [ -n "$serve" ]; then
        [ -f "$serve" ] || die "--serve-data $serve: no such file"
        local cutarg=() port=""
        [ -n "$cut" ] && cutarg=(--cut "$(basename "$serve")=$cut")
        ip netns exec "$P-h1" "$PY" "$HERE/../tests/http_server.py" --bind "$NET.1" \
            --root "$(dirname "$serve")" --port-file "$STATE/http.port" --log "$dir/http.log" \
            "${cutarg[@]}" >"$dir/http.err" 2>&1 &
        echo $! >>"$STATE/pids"
        for _ in $(seq 100); do
            [ -s "$STATE/http.port" ] && break
            sleep 0.1
        done
        port=$(cat "$STATE/http.port" 2>/dev/null) || die "the HTTP server did not start"
        common+=(--data "http://$NET.1:$port/$(basename "$serve")")
    fi
    local i pids=()
    for i in $(seq 1 "$hosts"); do
        local role=(--join "tcp://$NET.1:$adv_port")
        [ "$i" = 1 ] && role=(--new --wait-peers "$hosts")
        # a cache per host, so that every host downloads over its own link
        [ -n "$serve" ] && role+=(--data-cache "$dir/cache$i")
        [ $db = 1 ] && role+=(--db "$dir/peer$i.db")
        ip netns exec "$P-h$i" nice -n 5 "$BIN" peer "${role[@]}" --stage $(((i - 1) % stages)) \
            --listen "tcp://$NET.$i:$LPORT" --advertise "tcp://$NET.$i:$adv_port" \
            --stages "$stages" --events "$dir/peer$i.events.jsonl" "${common[@]}" \
            >"$dir/peer$i.log" 2>&1 &
        pids+=($!)
        echo $! >>"$STATE/pids"
        # the next one once this one serves (host 1 first answers the status query)
        for _ in $(seq 300); do
            [ "$(serving)" -ge "$i" ] && break
            kill -0 "${pids[-1]}" 2>/dev/null || die "peer $i exited: $(tail -3 "$dir/peer$i.log")"
            sleep 0.1
        done
    done
    # sample the link counters and the leader's step count until the peers are done
    local t_end=$((SECONDS + timeout)) samples="$dir/samples" timed_out=0
    : >"$samples"
    while :; do
        local alive=0 p
        for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
        local line
        line="$(date +%s.%N) $(grep -c '"kind":"step"' "$dir/peer1.events.jsonl" 2>/dev/null)"
        for i in $(seq 1 "$hosts"); do line+=" $(link_bytes "$i")"; done
        echo "$line" >>"$samples"
        [ $alive = 0 ] && break
        [ $SECONDS -ge $t_end ] && { echo "netns.sh: timed out after $timeout s" >&2; timed_out=1; break; }
        sleep 0.5
    done
    # the run's end as the stage-0 leader recorded it (its final val_loss event)
    local tps val
    read -r tps val < <(cat "$dir"/peer*.events.jsonl 2>/dev/null | "$PY" -c '
import json, sys
for line in sys.stdin:
    e = json.loads(line)
    if e.get("kind") == "val_loss" and e.get("final") == 1:
        print("%.0f %s" % (e["tokens_per_s"], e["val_loss"])); break')
    # training window: from the first logged step to the last one
    awk -v rate="$rate" -v delay="$delay" -v tps="${tps:-0}" -v val="${val:-nan}" -v n="$hosts" '
        { t[NR] = $1; s[NR] = $2; for (i = 1; i <= 2 * n; i++) b[NR, i] = $(2 + i) }
        END {
            last = s[NR]; a = 0; z = 0
            for (r = 1; r <= NR; r++) { if (!a && s[r] >= 1) a = r; if (!z && s[r] >= last) z = r }
            if (!a || z <= a) { a = 1; z = NR }
            dt = t[z] - t[a]; if (dt <= 0) dt = 1
            printf "thin: rate %s delay %s ms: tokens/s %s  wire MB/s per peer", rate, delay, tps
            sum = 0
            for (h = 1; h <= n; h++) {
                mb = (b[z, 2*h-1] - b[a, 2*h-1] + b[z, 2*h] - b[a, 2*h]) / dt / 1e6
                sum += mb; printf " %.2f", mb
            }
            printf "  mean %.2f  val_loss %s  train_s %.1f\n", sum / n, val, dt
        }' "$samples"
    local bad=0
    if [ $timed_out = 1 ]; then # stopped, not waited for: a hung peer would hang this too
        for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
        sleep 3
        for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
        bad=1
    fi
    for p in "${pids[@]}"; do wait "$p" || bad=1; done
    [ -z "$tps" ] && { echo "netns.sh: no final val_loss event; logs in $dir" >&2; return 1; }
    [ $bad = 0 ] || { echo "netns.sh: a peer exited with an error; logs in $dir" >&2; return 1; }
    return 0
}

case ${1:-} in
up)
    [ $# = 4 ] || die "usage: netns.sh up N RATE DELAY_MS"
    ns_up "$2" "$3" "$4"
    ;;
down) ns_down ;;
exec)
    shift
    i=$1
    shift
    ip netns exec "$P-h$i" "$@"
    ;;
swarm)
    shift
    swarm "$@"
    ;;
nat)
    [ $# = 2 ] || die "usage: netns.sh nat I"
    nat "$2"
    ;;
*)
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
    exit 2
    ;;
esac
