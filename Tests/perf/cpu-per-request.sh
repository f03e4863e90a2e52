#!/usr/bin/env bash
# Coordinator CPU per echo request under the C load generator (drive.c): a coordinator and four echo
# workers of BINARY on 127.0.0.1, REQUESTS requests at IN_FLIGHT (64 by default), the coordinator's
# user+system CPU from /proc/PID/stat around the run. Steadier than `skillbus bench` for comparing two
# builds, because the client costs almost nothing. Not part of the product; needs gcc and libzmq3-dev.
#
#   Tests/perf/cpu-per-request.sh BINARY REQUESTS [IN_FLIGHT]
#   PERF=coordinator (or PERF=worker, the first of the four, or PERF=watcher with WATCH=1) ... also records that
#   process with perf
#   (perf.data in the working directory); PERF_EVENT=probe_libc:malloc (after `perf probe -x libc.so.6 malloc`)
#   records where allocations come from instead of where the time goes.
#   STAT=1 ... also counts the coordinator's context switches and socket syscalls, per thread and request
#   (STAT=worker: the first worker's, per request it served, a quarter of them).
#   PROXY=1 ... measures the bench's raw baseline instead: its ROUTER->DEALER proxy and echo workers.
#   PROXY=zmtp ... the same with zmtp-proxy.c in the proxy's place: one thread speaking ZMTP itself, no libzmq.
#   MALLOCS=1 ... also counts allocations per request in the coordinator and the workers (malloc-count.c).
#   WORKER_ENGINE=libzmq ... the workers talk to the bus through libzmq's DEALER instead of their own.
#   COORDINATOR_OPTIONS='--data-dir DIR' ... more options for the coordinator (a journal, say).
#   KEYS=1 ... CURVE on the bus and the feed: keys for the coordinator, the driver and the workers.
#   FOLD=1 ... the driver folds each message into one frame (PROTOCOL §2.1), as Skillbus's keyed clients do.
#   BATCH=1 ... it also sends what a burst of answers makes it send as BATCH frames (§2.2), as the bench's load
#   generator does with keys; the bus then batches its answers to it.
#   WATCH=1 ... a `skillbus feed` reading every event while the load runs (as the bench's deployed row has).
#   With KEYS=1 WATCH=1 INVOKE=1 COORDINATOR_OPTIONS="--data-dir DIR": the deployed configuration.
#   WORKER_OPTIONS='--policy ...' ... more options for the four workers (with UNIQUE=1, drive.c's unique texts:
#   a pure echo with a cache lifetime then misses every time).
#   MEMORY=1 ... sends each request in a round of its own with the bench's 100-byte text, and prints the
#   coordinator's resident memory idle and after them (on huge pages, as its systemd unit and skillbus-perf run it).
set -euo pipefail
binary=$(realpath "$1"); requests=${2:-100000}; in_flight=${3:-64}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
gcc -O2 -o "$work/drive" "$here/drive.c" -lzmq
preload=
if [ "${MALLOCS:-0}" = 1 ]; then
    gcc -O2 -shared -fPIC -o "$work/malloc-count.so" "$here/malloc-count.c" -ldl
    preload=$work/malloc-count.so
fi

if [ "${PROXY:-0}" != 0 ]; then
    export ECHOED=1
    if [ "$PROXY" = zmtp ]; then
        gcc -O2 -o "$work/zmtp-proxy" "$here/zmtp-proxy.c"
        LD_PRELOAD=$preload "$work/zmtp-proxy" >"$work/coordinator.out" 2>&1 &
    else
        LD_PRELOAD=$preload "$binary" bench-baseline-proxy >"$work/coordinator.out" 2>&1 &
    fi
    coordinator=$!; pids+=("$coordinator")
    for _ in $(seq 200); do grep -q 'ready: frontend=' "$work/coordinator.out" && break; sleep 0.05; done
    bus=$(sed -n 's/.*frontend=\([^ ]*\).*/\1/p' "$work/coordinator.out")
    backend=$(sed -n 's/.*backend=\([^ ]*\).*/\1/p' "$work/coordinator.out")
    for _ in 0 1 2 3; do
        LD_PRELOAD=$preload "$binary" bench-baseline-worker --connect "$backend" >/dev/null 2>&1 &
        pids+=("$!")
    done
else
    keyed=(); key_for() { :; }
    if [ "${KEYS:-0}" = 1 ]; then
        mkdir "$work/keys"
        for name in coordinator client perf-0 perf-1 perf-2 perf-3; do
            "$binary" keygen "$name" --dir "$work/keys" >/dev/null
        done
        cat >"$work/keys/coordinator.json" <<EOF
{"version": 1, "security": {"secretKey": "coordinator.key", "keys": [
  {"name": "client", "role": "client", "publicKey": "client.pub"},
  {"name": "perf-0", "role": "worker", "agents": ["perf-0"], "publicKey": "perf-0.pub"},
  {"name": "perf-1", "role": "worker", "agents": ["perf-1"], "publicKey": "perf-1.pub"},
  {"name": "perf-2", "role": "worker", "agents": ["perf-2"], "publicKey": "perf-2.pub"},
  {"name": "perf-3", "role": "worker", "agents": ["perf-3"], "publicKey": "perf-3.pub"}]}}
EOF
        keyed=(--config "$work/keys/coordinator.json")
        key_for() { echo "--server-key $work/keys/coordinator.pub --key $work/keys/$1.key"; }
        export CURVE_SERVER=$(cat "$work/keys/coordinator.pub") CURVE_PUBLIC=$(cat "$work/keys/client.pub")
        export CURVE_SECRET=$(cat "$work/keys/client.key")
    fi
    # glibc's huge pages for MEMORY alone, as deploy/skillbus-coordinator.service sets them.
    huge_pages=(); [ "${MEMORY:-0}" = 1 ] && huge_pages=(GLIBC_TUNABLES=glibc.malloc.hugetlb=1:glibc.malloc.arena_max=1)
    LD_PRELOAD=$preload env "${huge_pages[@]}" "$binary" coordinator --bus 'tcp://127.0.0.1:*' \
        --feed 'tcp://127.0.0.1:*' --log-level warning "${keyed[@]}" ${COORDINATOR_OPTIONS:-} \
        >"$work/coordinator.out" 2>&1 &
    coordinator=$!; pids+=("$coordinator")
    for _ in $(seq 200); do grep -q 'ready: bus=' "$work/coordinator.out" && break; sleep 0.05; done
    bus=$(sed -n 's/.*ready: bus=\([^ ]*\).*/\1/p' "$work/coordinator.out")
    for index in 0 1 2 3; do
        LD_PRELOAD=$preload env ${WORKER_ENGINE:+SKILLBUS_BUS_ENGINE=$WORKER_ENGINE} "$binary" worker --name "perf-$index" --coordinator "$bus" --skills echo --capacity 64 \
            ${WORKER_OPTIONS:-} $(key_for "perf-$index") --log-level warning --data-dir "$work/agent-$index" \
            >/dev/null 2>&1 &
        pids+=("$!")
    done
fi
[ -n "$bus" ] || { echo "the coordinator did not start:"; cat "$work/coordinator.out"; exit 1; }
# All four workers registered (the raw ones need only connect), then a warm-up.
if [ "${PROXY:-0}" = 0 ]; then
    for _ in $(seq 100); do
        [ "$("$binary" agents --coordinator "$bus" $(key_for client) 2>/dev/null | grep -c perf-)" = 4 ] && break
        sleep 0.1
    done
    if [ "${WATCH:-0}" = 1 ]; then
        feed=$(sed -n 's/.*ready: bus=[^ ]* feed=\([^ ]*\).*/\1/p' "$work/coordinator.out")
        "$binary" feed --feed "$feed" $(key_for client) >/dev/null 2>&1 &
        watcher=$!; pids+=("$watcher")
    fi
fi
resident() { awk '/^(VmRSS|RssAnon|RssFile):/ { printf "%s %.1f MB ", $1, $2 / 1024 }' "/proc/$coordinator/status"; }
if [ "${MEMORY:-0}" = 1 ]; then
    export ROUNDS=1 PARAMS="{\"text\":\"$(printf 'x%.0s' $(seq 100))\"}"
    echo "idle: $(resident)"
fi
"$work/drive" "$bus" 2000 64 >/dev/null

ticks=$(getconf CLK_TCK)
cpu() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
workers_cpu() { local sum=0; for pid in "${pids[@]:1:4}"; do sum=$((sum + $(cpu "$pid"))); done; echo "$sum"; }
# Allocations so far, from the shim (SIGUSR2 makes each process write its count).
mallocs() {
    local sum=0
    for pid in "$@"; do
        rm -f "/tmp/skillbus-mallocs.$pid"; kill -USR2 "$pid"
        for _ in $(seq 100); do [ -s "/tmp/skillbus-mallocs.$pid" ] && break; sleep 0.01; done
        sum=$((sum + $(cat "/tmp/skillbus-mallocs.$pid"))); rm -f "/tmp/skillbus-mallocs.$pid"
    done
    echo "$sum"
}
if [ -n "$preload" ]; then
    coordinator_mallocs=$(mallocs "$coordinator"); worker_mallocs=$(mallocs "${pids[@]:1:4}")
fi
before=$(cpu "$coordinator"); workers_before=$(workers_cpu); watcher_before=$(cpu "${watcher:-$coordinator}")
if [ -n "${PERF:-}" ]; then
    recorded=$coordinator; [ "$PERF" = worker ] && recorded=${pids[1]}; [ "$PERF" = watcher ] && recorded=$watcher
    perf record -q -e "${PERF_EVENT:-cpu-clock}" --call-graph dwarf -p "$recorded" -o perf.data -- sleep 1000 &
    recorder=$!; sleep 1
fi
if [ "${STAT:-0}" != 0 ]; then
    counted=$coordinator; [ "$STAT" = worker ] && counted=${pids[1]}
    perf stat --per-thread -x, -o "$work/stat" -e context-switches,syscalls:sys_enter_sendto,syscalls:sys_enter_recvfrom \
        -e syscalls:sys_enter_epoll_wait,syscalls:sys_enter_poll,syscalls:sys_enter_write,syscalls:sys_enter_read \
        -e syscalls:sys_enter_getpid -e syscalls:sys_enter_fcntl -e syscalls:sys_enter_pwrite64 \
        -e syscalls:sys_enter_fdatasync -p "$counted" &
    counter=$!; sleep 1
fi
result=$("$work/drive" "$bus" "$requests" "$in_flight")
if [ "${STAT:-0}" != 0 ]; then
    kill -INT "$counter"; wait "$counter" || true
    served=$requests; [ "$STAT" = worker ] && served=$((requests / 4))
    awk -F, -v n="$served" '$2 / n >= 0.005 { split($1, t, "-"); printf "  %-18s %-34s %.2f per request\n", t[1], $4, $2 / n }' "$work/stat"
fi
if [ -n "${PERF:-}" ]; then kill -INT "$recorder"; wait "$recorder" || true; fi
after=$(cpu "$coordinator"); workers_after=$(workers_cpu); watcher_after=$(cpu "${watcher:-$coordinator}")
per_request() { awk -v t="$1" -v hz="$ticks" -v n="$requests" 'BEGIN { printf "%.1f", t / hz * 1e6 / n }'; }
echo "$result coordinator_cpu_us_per_request $(per_request $((after - before)))" \
    "workers_cpu_us_per_request $(per_request $((workers_after - workers_before)))" \
    ${watcher:+watcher_cpu_us_per_request $(per_request $((watcher_after - watcher_before)))}
if [ "${MEMORY:-0}" = 1 ]; then echo "after $((requests + 2000)) rounds: $(resident)"; fi
if [ -n "$preload" ]; then
    echo "coordinator_mallocs_per_request" \
        "$(awk -v n=$(($(mallocs "$coordinator") - coordinator_mallocs)) -v r="$requests" 'BEGIN { printf "%.1f", n / r }')" \
        "workers_mallocs_per_request" \
        "$(awk -v n=$(($(mallocs "${pids[@]:1:4}") - worker_mallocs)) -v r="$requests" 'BEGIN { printf "%.1f", n / r }')"
fi
