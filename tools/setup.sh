# setup.sh — sourced by tools/demo and tools/test: installs what is missing (Debian 12,
# apt-get) and extracts the default corpus. Idempotent; quiet and fast when all is there.

st_packages="build-essential cmake libzmq3-dev libsodium-dev libcurl4-openssl-dev
libsqlite3-dev libcmocka-dev libopenblas-dev pkg-config bible-kjv python3"
# (python3: the tests' local HTTP servers, test_http and peer_join_url; not the binary)

# What tools/fuzz needs besides: clang and its libFuzzer runtime (-fsanitize=fuzzer comes
# with libclang-rt-14-dev; libfuzzer-14-dev is the stand-alone library). Not for tools/test:
# CI runs the fuzz targets through their gcc driver (tests/fuzz/standalone.c).
st_fuzz_packages="clang-14 libclang-rt-14-dev libfuzzer-14-dev"

st_install_missing() {
    local missing="" p
    for p in ${1:-$st_packages}; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
            missing="$missing $p"
    done
    [ -z "$missing" ] && return 0
    echo "setup: installing$missing"
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -qq || return 1
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing >/dev/null || return 1
}

# The default corpus: the King James Bible from the bible-kjv package, one verse a line.
# The binary finds it at the same path (model/data.c, data_default_path).
st_corpus="${XDG_CACHE_HOME:-$HOME/.cache}/swarmtrain/kjv.txt"

st_extract_corpus() {
    [ -s "$st_corpus" ] && return 0
    mkdir -p "$(dirname "$st_corpus")"
    bible -l0 -m 8192 gen1:1-rev22:21 | sed -nE 's/^  [0-9]+ //p' >"$st_corpus.tmp" &&
        [ -s "$st_corpus.tmp" ] && mv "$st_corpus.tmp" "$st_corpus"
}

st_setup() {
    st_install_missing || { echo "setup: apt-get failed" >&2; return 1; }
    st_extract_corpus || { echo "setup: could not extract the corpus" >&2; return 1; }
}

st_setup_fuzz() {
    st_install_missing "$st_packages $st_fuzz_packages" || { echo "setup: apt-get failed" >&2; return 1; }
}
