#!/bin/sh
# sys.countdown: counts down from FROM to 1, one line every MS milliseconds, then says "liftoff".
# A Skillbus command skill (configs/local.json, worker gamma): the worker runs it without a shell in
# between, as `countdown.sh FROM MS`, and streams each line to the caller the moment it is printed.
from=${1:-5}
ms=${2:-300}
case "$from$ms" in
  '' | *[!0-9]*) echo "from and ms must be whole numbers, got '$from' and '$ms'" >&2; exit 2 ;;
esac
if [ "$from" -gt 100 ]; then echo "from must be at most 100, got $from" >&2; exit 2; fi
pause=$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))
i=$from
while [ "$i" -gt 0 ]; do
  echo "$i"
  sleep "$pause"
  i=$((i - 1))
done
echo "liftoff"
