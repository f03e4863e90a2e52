#!/usr/bin/env bash
# Two builds side by side under the C load generator (cpu-per-request.sh), in pairs whose order alternates
# (A then B, B then A, ...), so that a machine that gets busier or quieter during the run weighs on both.
# Prints each pair and the medians of the per-pair differences B - A: coordinator and workers CPU per
# request and requests per second. On this shared machine single runs differ by 10-20%; a difference
# that keeps its sign over most pairs is the figure to believe. Not part of the product.
#
#   Tests/perf/compare-builds.sh BINARY_A BINARY_B [PAIRS (6)] [REQUESTS (100000)]
#   (cpu-per-request.sh's environment applies: ROUNDS=1 PARAMS=..., UNIQUE=1, WORKER_OPTIONS=...)
set -euo pipefail
a=$(realpath "$1"); b=$(realpath "$2"); pairs=${3:-6}; requests=${4:-100000}
here=$(cd "$(dirname "$0")" && pwd)
run() { "$here/cpu-per-request.sh" "$1" "$requests" 64 | tail -1 | awk '{ print $8, $10, $12 }'; }
for pair in $(seq "$pairs"); do
    if [ $((pair % 2)) = 1 ]; then first=$a; second=$b; else first=$b; second=$a; fi
    read -r rate1 coordinator1 workers1 <<<"$(run "$first")"
    read -r rate2 coordinator2 workers2 <<<"$(run "$second")"
    if [ "$first" = "$a" ]; then
        echo "$rate1 $coordinator1 $workers1 $rate2 $coordinator2 $workers2"
    else
        echo "$rate2 $coordinator2 $workers2 $rate1 $coordinator1 $workers1"
    fi
done | awk '
    function median(values, count,    i, j, swap) {
        for (i = 1; i <= count; i++) for (j = i + 1; j <= count; j++) if (values[j] < values[i]) {
            swap = values[i]; values[i] = values[j]; values[j] = swap
        }
        return count % 2 ? values[(count + 1) / 2] : (values[count / 2] + values[count / 2 + 1]) / 2
    }
    {
        n++
        printf "pair %d: A %d/s, coordinator %.1f us, workers %.1f us | B %d/s, coordinator %.1f us, workers %.1f us\n", n, $1, $2, $3, $4, $5, $6
        rate[n] = $4 - $1; coordinator[n] = $5 - $2; workers[n] = $6 - $3
    }
    END {
        printf "median B - A: %+d/s, coordinator %+.2f us, workers %+.2f us per request (%d pairs)\n", median(rate, n), median(coordinator, n), median(workers, n), n
    }'
