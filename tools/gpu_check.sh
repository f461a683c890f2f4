#!/usr/bin/env bash
# gpu_check.sh — the one prepared GPU check of issue #6, for a lent GPU machine (an H200:
# docs/gpu-check.md says how to run it there). In the repository root it configures a
# Release build for sm_90 into build-gpu/, builds it, runs the CUDA parity tests
# (test_cuda, and test_cuda_compress when the build has it) with TF32 on and off, and
# benchmarks `swarmtrain bench model` on the GPU for `small` and `large` and on 16 CPU
# threads for `small`. No step stops the script: each one's exit status and time are
# logged, and a summary table ends the log, $OUT/gpu_check.log (build-gpu/gpu_check.log
# when OUT is unset). About 2-4 minutes on an H200 machine with 16 cores, build included.
# Exit status: 0 when every step passed or was skipped for want of a GPU, else 1.
#
# The build needs the Debian dev packages of tools/setup.sh. The lent machine reaches no
# package registry, so nothing is installed here; where pkg-config misses a module and
# .gpu-deps/gpu-deps.tar.gz exists (made by `tools/gpu_check.sh --bundle` on a machine that
# has the packages, and carried along), its headers and libraries are used instead.
#
# Environment: OUT (where the log goes), GPU_CHECK_BUILD_DIR (build-gpu), GPU_CHECK_JOBS
# (16), GPU_CHECK_CPU_THREADS (16), GPU_CHECK_BUDGET (seconds for all steps, 540: the
# summary comes before a 10-minute limit), GPU_CHECK_LARGE_STEPS (10).
# Not for: CI (no GPU there), regression timing (one run, few steps).

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MODULES="openblas sqlite3 libsodium libzmq libcurl cmocka"

# --- --bundle: pack the build's dependencies for a machine without them ----------------
# Headers and shared libraries of each pkg-config module, every library they load that a
# plain Linux with a C compiler may lack (glibc, libgcc_s, libstdc++ and libgomp are left to
# the machine), pkgconf, and one .pc file per module with no Requires, into
# .gpu-deps/gpu-deps.tar.gz (~22 MB; .gpu-deps/ is ignored through .git/info/exclude). On
# the GPU machine its libraries serve only where the machine has no library of that soname
# (the modules' own libraries always).
bundle() {
    local stage dest="$ROOT/.gpu-deps" m l f so inc
    command -v pkg-config >/dev/null || { echo "bundle: pkg-config is missing here" >&2; return 1; }
    for m in $MODULES; do
        pkg-config --exists "$m" || { echo "bundle: module $m is missing here" >&2; return 1; }
    done
    stage=$(mktemp -d) || return 1
    mkdir -p "$stage/include" "$stage/lib" "$stage/pkgconfig" "$stage/bin"
    copy_lib() { # copy_lib FILE: the library under its soname, and what it loads
        local real soname dep
        real=$(readlink -f "$1") || return 1
        soname=$(objdump -p "$real" 2>/dev/null | awk '$1 == "SONAME" {print $2}')
        soname=${soname:-$(basename "$1")}
        [ -e "$stage/lib/$soname" ] && return 0
        cp "$real" "$stage/lib/$soname" || return 1
        for dep in $(ldd "$real" | awk '$3 ~ /^\// {print $3}'); do
            case $(basename "$dep") in
            libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | libresolv.so.* | \
                ld-linux* | libgcc_s.so.* | libstdc++.so.* | libgomp.so.*) ;;
            *) copy_lib "$dep" || return 1 ;;
            esac
        done
    }
    for m in $MODULES; do
        # headers: every file of the package that owns the module's .pc, under /usr/include
        local pc pkg
        pc=$(readlink -f "$(pkg-config --variable=pcfiledir "$m")/$m.pc")
        pkg=$(dpkg -S "$pc" 2>/dev/null | head -1 | cut -d: -f1)
        [ -n "$pkg" ] || { echo "bundle: no package owns $pc" >&2; return 1; }
        dpkg -L "$pkg" | grep '^/usr/include/.' | while read -r f; do
            [ -f "$f" ] && mkdir -p "$stage/include/$(dirname "${f#/usr/include/}")" &&
                cp "$f" "$stage/include/${f#/usr/include/}"
        done
        inc=$(pkg-config --cflags-only-I "$m" | sed "s|-I/usr/include|-I\${prefix}/include|g")
        local libs="" libdirs
        libdirs="$(pkg-config --libs-only-L "$m" | sed 's/-L//g') /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu"
        for l in $(pkg-config --libs-only-l "$m" | sed 's/-l//g'); do
            so=""
            for f in $libdirs; do [ -e "$f/lib$l.so" ] && so="$f/lib$l.so" && break; done
            [ -n "$so" ] || { echo "bundle: lib$l.so not found" >&2; return 1; }
            copy_lib "$so" || return 1
            ln -sf "$(objdump -p "$(readlink -f "$so")" | awk '$1 == "SONAME" {print $2}')" \
                "$stage/lib/lib$l.so"
            libs="$libs -l$l"
        done
        # shellcheck disable=SC2016 # ${prefix} is for pkg-config
        printf 'prefix=@PREFIX@\nName: %s\nDescription: bundled by tools/gpu_check.sh --bundle\nVersion: %s\nCflags: -I${prefix}/include %s\nLibs: -L${prefix}/lib%s\n' \
            "$m" "$(pkg-config --modversion "$m")" "$inc" "$libs" >"$stage/pkgconfig/$m.pc"
    done
    cp "$(readlink -f "$(command -v pkg-config)")" "$stage/bin/pkg-config" &&
        copy_lib "$(ldd "$stage/bin/pkg-config" | awk '/libpkgconf/ {print $3}')" || return 1
    mkdir -p "$dest" && tar -C "$stage" -czf "$dest/gpu-deps.tar.gz" . || return 1
    rm -rf "$stage"
    local exclude
    if exclude=$(git -C "$ROOT" rev-parse --git-path info/exclude 2>/dev/null) &&
        ! grep -qs '^/.gpu-deps/$' "$ROOT/$exclude" "$exclude"; then
        case $exclude in /*) ;; *) exclude="$ROOT/$exclude" ;; esac
        echo /.gpu-deps/ >>"$exclude"
    fi
    echo "bundle: $dest/gpu-deps.tar.gz ($(du -h "$dest/gpu-deps.tar.gz" | cut -f1)); carry .gpu-deps"
}

if [ "${1:-}" = "--bundle" ]; then
    bundle
    exit
elif [ $# -gt 0 ]; then
    echo "usage: tools/gpu_check.sh [--bundle]" >&2
    exit 2
fi

# --- the check --------------------------------------------------------------------------
cd "$ROOT" || exit 1
BUILD=${GPU_CHECK_BUILD_DIR:-build-gpu}
JOBS=${GPU_CHECK_JOBS:-16}
CPU_THREADS=${GPU_CHECK_CPU_THREADS:-16}
BUDGET=${GPU_CHECK_BUDGET:-540}
LARGE_STEPS=${GPU_CHECK_LARGE_STEPS:-10}
OUTDIR=${OUT:-$ROOT/$BUILD}
mkdir -p "$OUTDIR" "$BUILD" || exit 1
LOG=$OUTDIR/gpu_check.log
STEPS_DIR=$(mktemp -d)
: >"$LOG"
START=$SECONDS

log() { echo "$*" | tee -a "$LOG"; }

names=() results=() codes=() times=() notes=()
record() { # record NAME RESULT RC SECONDS NOTE
    names+=("$1") results+=("$2") codes+=("$3") times+=("$4") notes+=("$5")
    log "=== [$1] $2 (exit $3, $4 s)${5:+: $5}"
}

# step NAME LIMIT COMMAND...: runs COMMAND with at most LIMIT seconds (less when the
# budget is nearly spent), output into the log and $STEPS_DIR/NAME.out. Exit 77 is a skip.
step() {
    local name=$1 limit=$2 left t0 rc result
    shift 2
    left=$((BUDGET - (SECONDS - START)))
    [ "$limit" -gt "$left" ] && limit=$left
    if [ "$limit" -lt 5 ]; then
        record "$name" NOTIME - 0 "not run: no time left in the ${BUDGET} s budget"
        return
    fi
    log ""
    log "=== [$name] $* (limit ${limit} s)"
    t0=$SECONDS
    timeout -k 10 "$limit" "$@" </dev/null 2>&1 | tee "$STEPS_DIR/$name.out" >>"$LOG"
    rc=${PIPESTATUS[0]}
    tail -n 30 "$STEPS_DIR/$name.out"
    case $rc in
    0) result=PASS ;;
    77) result=SKIP ;;
    124 | 137) result=TIMEOUT ;;
    *) result=FAIL ;;
    esac
    record "$name" "$result" "$rc" $((SECONDS - t0)) ""
}

# skip_step NAME WHY
skip_step() { record "$1" SKIP - 0 "$2"; }

# A bench step's numbers, for the summary: "tokens/s N, MFU M%".
bench_note() {
    local f="$STEPS_DIR/$1.out" tps mfu
    [ -f "$f" ] || return
    tps=$(awk '$1 == "tokens/s" {print $2}' "$f")
    mfu=$(awk '$1 == "MFU" {print $2}' "$f")
    echo "${tps:+tokens/s $tps}${mfu:+, MFU $mfu}"
}

log "gpu_check: $(date -u '+%Y-%m-%d %H:%M:%S UTC') in $ROOT, build $BUILD, -j$JOBS, budget ${BUDGET} s"
if rev=$(git rev-parse --short HEAD 2>/dev/null); then
    log "git: $rev, $(git status --short 2>/dev/null | wc -l) changed file(s)"
else
    log "git: not a checkout (a copy of the tree)"
fi
log "host: $(uname -sm), $(nproc) cores, $(awk '/MemTotal/ {print int($2 / 1048576) " GiB"}' /proc/meminfo)"

# --- tools and packages -------------------------------------------------------------------
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH="/usr/local/cuda/bin:$PATH"
fi
GPU=0
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    GPU=1
    log "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm \
        --format=csv,noheader 2>&1 | head -4 | tr '\n' ';')"
else
    log "gpu: none (nvidia-smi -L fails or is missing): the CUDA steps will be skipped"
fi
for t in cmake nvcc gcc pkg-config; do
    log "$t: $( (command -v $t && $t --version 2>&1 | grep -m1 -iE 'version|release|gcc') | tr '\n' ' ')"
done

missing=""
for m in $MODULES; do
    command -v pkg-config >/dev/null && pkg-config --exists "$m" || missing="$missing $m"
done
if [ -n "$missing" ] && [ -f .gpu-deps/gpu-deps.tar.gz ]; then
    DEPS=/tmp/gpu-deps
    rm -rf "$DEPS" && mkdir -p "$DEPS" && tar -C "$DEPS" -xzf .gpu-deps/gpu-deps.tar.gz &&
        sed -i "s|@PREFIX@|$DEPS|" "$DEPS"/pkgconfig/*.pc
    # Of the libraries the modules load, the machine's own copies win: only what it lacks
    # stays in the bundle (the modules' own libraries, with a lib*.so beside them, stay).
    for f in "$DEPS"/lib/*.so.*; do
        so=$(basename "$f")
        [ -e "$DEPS/lib/${so%%.so.*}.so" ] && continue
        ldconfig -p 2>/dev/null | grep -q "^[[:space:]]$so " && rm -f "$f"
    done
    log "packages: bundle libraries kept: $(cd "$DEPS/lib" && echo *.so.* | tr '\n' ' ')"
    command -v pkg-config >/dev/null || export PATH="$PATH:$DEPS/bin"
    export PKG_CONFIG_PATH="$DEPS/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
    export LD_LIBRARY_PATH="$DEPS/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    log "packages: missing$missing; using the carried bundle in $DEPS"
    missing=""
    for m in $MODULES; do pkg-config --exists "$m" || missing="$missing $m"; done
fi
if [ -n "$missing" ]; then
    log "packages: pkg-config modules missing:$missing. This machine reaches no registry:" \
        "make .gpu-deps with 'tools/gpu_check.sh --bundle' where they are installed and" \
        "carry it (docs/gpu-check.md). Configure will fail."
else
    log "packages: every pkg-config module is there ($MODULES)"
fi

# --- build ---------------------------------------------------------------------------------
step configure 180 cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DSWARMTRAIN_SANITIZE=OFF \
    -DCMAKE_CUDA_ARCHITECTURES=90
step build 300 cmake --build "$BUILD" -j"$JOBS"
BIN=$BUILD/tools/swarmtrain

# --- parity tests --------------------------------------------------------------------------
export OMP_WAIT_POLICY=PASSIVE SWARMTRAIN_BIN="$ROOT/$BIN" SWARMTRAIN_SOURCE="$ROOT"
run_test() { # run_test NAME TF32(1|0) BINARY
    local name=$1 tf32=$2 exe=$3 i
    if [ ! -x "$exe" ]; then
        record "$name" FAIL - 0 "$exe was not built"
        return
    elif [ "$tf32" = 1 ]; then
        # with TF32 (the default) also the per-op timings (SWARMTRAIN_CUDA_BENCH, test_cuda)
        step "$name" 240 env SWARMTRAIN_CUDA_BENCH=1 "$exe"
    else
        step "$name" 240 env SWARMTRAIN_CUDA_TF32=0 "$exe"
    fi
    i=$((${#results[@]} - 1))
    if [ "$GPU" = 1 ] && [ "${codes[i]}" = 77 ]; then # a skip with a GPU is a failure
        results[i]=FAIL notes[i]="skipped although nvidia-smi sees a GPU (see its first line)"
        log "=== [$name] counted as FAIL: ${notes[i]}"
    fi
}
run_test test_cuda 1 "$BUILD/tests/test_cuda"
run_test test_cuda_tf32off 0 "$BUILD/tests/test_cuda"
if [ -x "$BUILD/tests/test_cuda_compress" ]; then
    run_test test_cuda_compress 1 "$BUILD/tests/test_cuda_compress"
    run_test test_cuda_compress_tf32off 0 "$BUILD/tests/test_cuda_compress"
else
    skip_step test_cuda_compress "not in this tree (tests/cuda.cmake does not build it)"
fi

# --- benchmarks ----------------------------------------------------------------------------
bench() { # bench NAME TF32(1|0) ARGS...
    local name=$1 tf32=$2 note
    shift 2
    if [ ! -x "$BIN" ]; then
        record "$name" FAIL - 0 "$BIN was not built"
        return
    fi
    step "$name" 150 env SWARMTRAIN_CUDA_TF32="$tf32" "$BIN" bench model "$@"
    note=$(bench_note "$name")
    [ -n "$note" ] && notes[${#notes[@]} - 1]=$note
}
if [ "$GPU" = 1 ]; then
    bench bench_small_cuda 1 --device cuda --config small --steps 20
    bench bench_large_cuda 1 --device cuda --config large --steps "$LARGE_STEPS"
    bench bench_large_cuda_tf32off 0 --device cuda --config large --steps 5
else
    skip_step bench_small_cuda "no GPU"
    skip_step bench_large_cuda "no GPU"
    skip_step bench_large_cuda_tf32off "no GPU"
fi
bench bench_small_cpu 1 --device cpu --config small --threads "$CPU_THREADS" --steps 6

# --- summary -------------------------------------------------------------------------------
fail=0
log ""
log "=== summary ($((SECONDS - START)) s in all)"
log "$(printf '%-28s %-8s %5s %6s  %s' step result exit secs note)"
for i in "${!names[@]}"; do
    log "$(printf '%-28s %-8s %5s %6s  %s' "${names[i]}" "${results[i]}" "${codes[i]}" "${times[i]}" "${notes[i]}")"
    case ${results[i]} in PASS | SKIP) ;; *) fail=1 ;; esac
done
tps() { awk '$1 == "tokens/s" {print $2}' "$STEPS_DIR/$1.out" 2>/dev/null; }
g=$(tps bench_small_cuda) c=$(tps bench_small_cpu)
if [ -n "$g" ] && [ -n "$c" ]; then
    log "small: cuda / cpu ($CPU_THREADS threads) tokens/s = $(awk -v g="$g" -v c="$c" 'BEGIN {printf "%.1f", g / c}')"
fi
verdict=FAILED
[ $fail = 0 ] && verdict=OK && [ "$GPU" = 0 ] && verdict="OK, but no GPU: nothing ran on a device"
log "gpu_check: $verdict; log in $LOG"
rm -rf "$STEPS_DIR"
exit $fail
