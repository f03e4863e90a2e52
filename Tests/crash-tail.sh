#!/bin/bash
# Runs a test command with its output kept in a log; if it crashed, prints the crash's first frames once more
# at the very end. CI keeps only the last lines of a run, and a backtrace's top frames (where it crashed) are
# printed first: without this they are cut off.
# Usage: Tests/crash-tail.sh LOG COMMAND [ARGUMENT...]
log=$1
shift
"$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
if [ "$status" -ne 0 ] && grep -q '^\*\*\* Program crashed' "$log"; then
    echo "=== the crash, again (whole output in $log) ==="
    grep -m1 '^\*\*\* Program crashed' "$log"
    grep -m1 -A24 '^Thread [0-9]* .*crashed:' "$log"
fi
exit "$status"
