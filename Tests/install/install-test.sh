#!/usr/bin/env bash
# `make install-test`: installs Skillbus into a temporary PREFIX with `make install` and checks that the
# installed binary needs no Swift toolchain and no libcurl: `ldd` names no Swift library and no libcurl, the
# binary's own NEEDED entries (`readelf -d`) are only glibc's, libstdc++, libgcc_s, libzmq, libsqlite3, libsodium and libpq
# (what those pull in themselves, libzmq's libsodium or libgssapi say, is theirs), and — as root, in a mount namespace
# where the toolchain's folder is hidden under an empty directory — it prints its version and help and serves
# a real round (a coordinator, a worker and a client on 127.0.0.1). Without root it says why it skipped that.
set -euo pipefail
cd "$(dirname "$0")/../.."

work=$(mktemp -d /tmp/skillbus-install-test.XXXXXX)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

make install PREFIX="$work/prefix"
binary="$work/prefix/bin/skillbus"
[ -x "$binary" ] || { echo "FAIL: make install left no $binary"; exit 1; }
[ -f "$work/prefix/lib/systemd/system/skillbus-worker@.service" ] || { echo "FAIL: no units installed"; exit 1; }
grep -q "ExecStart=$binary " "$work/prefix/lib/systemd/system/skillbus-coordinator.service" \
    || { echo "FAIL: the installed unit does not name $binary"; exit 1; }

# The toolchain's library folder, as the compiler reports it (e.g. /opt/swift/usr/lib/swift).
toolchain=$(swift -print-target-info | sed -n 's/.*"runtimeResourcePath": "\(.*\)".*/\1/p')
toolchain=${toolchain%/lib/swift}
echo "toolchain: $toolchain"

libraries=$(ldd "$binary")
echo "$libraries"
if echo "$libraries" | grep -Ei 'libswift|libFoundation|libdispatch|libBlocksRuntime|_FoundationICU|not found' \
    || echo "$libraries" | grep -F "$toolchain"; then
    echo "FAIL: the installed binary still needs a Swift library (above)"
    exit 1
fi
echo "$libraries" | grep -q 'libzmq\.so\.5' || { echo "FAIL: not linked with libzmq.so.5"; exit 1; }
echo "$libraries" | grep -q 'libsqlite3\.so\.0' || { echo "FAIL: not linked with libsqlite3.so.0"; exit 1; }
# libcurl is loaded at run time by the openai planner alone (dlopen), never linked, not even through another library.
if echo "$libraries" | grep -E 'libcurl'; then
    echo "FAIL: the installed binary links libcurl (above): a host without libcurl4 could not start it"
    exit 1
fi
needed=$(readelf -d "$binary" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
echo "NEEDED:" $needed
[ -n "$needed" ] || { echo "FAIL: readelf -d shows no NEEDED entries"; exit 1; }
# glibc's own libraries (libdl, libpthread, librt, libutil are parts of it), the C++ and GCC runtimes, libzmq, SQLite,
# libsodium (the own engine's CURVE; Debian's libzmq5 depends on libsodium23, so every such host has it), and libpq
# (a coordinator group's journal in PostgreSQL; Debian's libpq5).
allowed='^(libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|libutil\.so\.1|ld-linux-x86-64\.so\.2|ld-linux-aarch64\.so\.1|libstdc\+\+\.so\.6|libgcc_s\.so\.1|libzmq\.so\.5|libsqlite3\.so\.0|libsodium\.so\.23|libpq\.so\.5)$'
unexpected=$(printf '%s\n' $needed | grep -Ev "$allowed" || true)
if [ -n "$unexpected" ]; then
    echo "FAIL: the binary itself needs libraries a host with only libzmq5, libsqlite3-0 and libpq5 lacks:" $unexpected
    exit 1
fi
if readelf -d "$binary" 2>/dev/null | grep -E 'RUNPATH|RPATH' | grep -F "$toolchain"; then
    echo "FAIL: the binary's RUNPATH points into the toolchain"
    exit 1
fi

"$binary" --version
"$binary" help > /dev/null

# A session across two agents, read back whole: optimised code paths the debug-built tests never run (a release
# build once lost which agent an answer came from, and `history` crashed on it).
python3 - "$work" <<'PY'
import json, sys
for worker in json.load(open("configs/team.json"))["workers"]:
    if worker["name"] in ("lead", "critic"):
        json.dump({"version": 1, **worker}, open(f"{sys.argv[1]}/{worker['name']}.json", "w"))
PY
XDG_STATE_HOME="$work/state" "$binary" coordinator --bus 'tcp://127.0.0.1:*' --feed 'tcp://127.0.0.1:*' \
    > "$work/team-coordinator.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q 'ready:' "$work/team-coordinator.log" && break; sleep 0.1; done
team_bus=$(sed -n 's/.*ready: bus=\([^ ]*\) .*/\1/p' "$work/team-coordinator.log")
[ -n "$team_bus" ] || { echo "FAIL: no coordinator for the team"; cat "$work/team-coordinator.log"; exit 1; }
for agent in lead critic; do
    XDG_STATE_HOME="$work/state" "$binary" worker --coordinator "$team_bus" --config "$work/$agent.json" \
        > "$work/$agent.log" 2>&1 &
    pids+=($!)
done
team_joined() {
    grep -q "agent 'lead' joined" "$work/team-coordinator.log" \
        && grep -q "agent 'critic' joined" "$work/team-coordinator.log"
}
for _ in $(seq 100); do team_joined && break; sleep 0.1; done
team_joined || { cat "$work/team-coordinator.log"; echo "FAIL: the team's agents did not join within 10 s"; exit 1; }
"$binary" ask --coordinator "$team_bus" --agent lead --session s1 "review Skillbus runs agents" < /dev/null
"$binary" history s1 --coordinator "$team_bus" < /dev/null > "$work/history.txt" 2>&1 \
    || { cat "$work/history.txt"; echo "FAIL: history of a session across agents"; exit 1; }
"$binary" sessions --coordinator "$team_bus" < /dev/null > "$work/sessions.txt" 2>&1
cat "$work/history.txt" "$work/sessions.txt"
grep -q '^session s1 on lead, critic' "$work/history.txt" && ! grep -q 'no answer' "$work/sessions.txt" \
    || { echo "FAIL: the release build does not read a session back from both of its agents"; exit 1; }
echo "PASS: the release build reads a session back from both of its agents"
kill "${pids[@]}" 2> /dev/null || true

if [ "$(id -u)" != 0 ] || ! command -v unshare > /dev/null \
    || ! unshare --mount --propagation private mount --bind "$work" "$work" 2> /dev/null; then
    echo "SKIPPED the run without the toolchain: it needs root, unshare (util-linux) and the right to make a"
    echo "mount namespace and bind-mount in it (a container without CAP_SYS_ADMIN has not)"
    echo "PASS (ldd only)"
    exit 0
fi

# In a mount namespace of its own: the toolchain's folder becomes an empty directory and libcurl an empty
# file, then the installed binary runs a coordinator, a worker and a round, and a worker with the openai
# planner refuses to start, saying what to install.
mkdir "$work/empty"
curl_library=$({ /sbin/ldconfig -p 2>/dev/null || ldconfig -p; } | sed -n 's/^[[:space:]]*libcurl\.so\.4 (.*) => //p' | head -n 1)
cat > "$work/openai.json" <<'CONFIG'
{"version": 1, "planner": {"openai": {"baseURL": "http://127.0.0.1:9/v1", "model": "m"}}}
CONFIG
cat > "$work/round.sh" <<SCRIPT
set -euo pipefail
mount --bind "$work/empty" "$toolchain"
if [ -e "$toolchain/lib/swift/linux/libswiftCore.so" ]; then echo "FAIL: the toolchain is still visible"; exit 1; fi
if [ -n "$curl_library" ]; then mount --bind /dev/null "$curl_library"; fi
"$binary" --version
"$binary" coordinator --bus 'tcp://127.0.0.1:*' --feed 'tcp://127.0.0.1:*' > "$work/coordinator.log" 2>&1 &
coordinator=\$!
trap 'kill \$coordinator \${worker:-} 2>/dev/null || true' EXIT
for _ in \$(seq 100); do grep -q 'ready:' "$work/coordinator.log" && break; sleep 0.1; done
bus=\$(sed -n 's/.*ready: bus=\([^ ]*\) .*/\1/p' "$work/coordinator.log")
[ -n "\$bus" ] || { echo "FAIL: no coordinator"; cat "$work/coordinator.log"; exit 1; }
"$binary" worker --name installed --coordinator "\$bus" --skills echo > "$work/worker.log" 2>&1 &
worker=\$!
for _ in \$(seq 100); do grep -q "agent 'installed' joined" "$work/coordinator.log" && break; sleep 0.1; done
"$binary" send echo text=portable --coordinator "\$bus" --json | tee "$work/reply.json"
grep -q '"text":"portable"' "$work/reply.json" || { echo "FAIL: no round"; exit 1; }
if timeout 20 "$binary" worker --name thinker --coordinator "\$bus" --config "$work/openai.json" > "$work/openai.log" 2>&1; then
    echo "FAIL: a worker with the openai planner started without libcurl"; exit 1
fi
cat "$work/openai.log"
grep -q 'apt-get install libcurl4' "$work/openai.log" || { echo "FAIL: the refusal does not say what to install"; exit 1; }
SCRIPT
unshare --mount --propagation private bash "$work/round.sh"
echo "PASS: the installed binary runs without the toolchain at $toolchain and without libcurl"
