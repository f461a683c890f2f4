# netns_lib.sh — what the tests on namespaced hosts share (tests/partition.sh, nat.sh,
# join_netns.sh), sourced by them. Not for: making the hosts (tools/netns.sh).
#
#   netns_preflight NAME PREFIX BIN   exits 77 (skipped, NAME: why) unless this machine can
#                                     make network namespaces (root, ip, tc); exits 1
#                                     when BIN is not an executable
#   netns_count KIND FILE             how many events of KIND the events file holds (0:
#                                     none, or no file yet)

netns_preflight() {
    local name=$1 prefix=$2 bin=$3 why=""
    if [ "$(id -u)" != 0 ]; then why="needs root (network namespaces)"
    elif ! command -v ip >/dev/null; then why="no ip(8)"
    elif ! command -v tc >/dev/null; then why="no tc(8) (tools/netns.sh needs it)"
    elif ! ip netns add "$prefix-probe" 2>/dev/null; then why="cannot make a network namespace here"
    else ip netns del "$prefix-probe"
    fi
    if [ -n "$why" ]; then
        echo "$name: skipped: $why" >&2
        exit 77
    fi
    [ -x "$bin" ] || { echo "$name: no binary at $bin (set SWARMTRAIN_BIN)" >&2; exit 1; }
}

netns_count() {
    local n
    n=$(grep -c "\"kind\":\"$1\"" "$2" 2>/dev/null)
    echo "${n:-0}"
}
