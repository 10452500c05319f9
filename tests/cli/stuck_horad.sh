#!/bin/sh
# stuck_horad.sh -- a horad that stops answering (SIGSTOP) while horarun
# stops the job: horarun kills it after the grace period and exits with
# the signal's status; nothing of the job is left.
HORARUN="$BUILD/bin/horarun"
mark="stuck-horad-$$"
out=$(mktemp)
trap 'rm -f "$out"; pkill -KILL -f "$mark" 2>/dev/null' EXIT
HORA_KILL_GRACE=1 "$HORARUN" -np 2 sh -c "sleep 60 # $mark" >"$out" 2>&1 &
hr=$!
for i in $(seq 50); do
  hd=$(pgrep -f "horad --control-fd" -P "$hr" | head -n 1)
  [ -n "$hd" ] && pgrep -f "$mark" >/dev/null && break
  sleep 0.1
done
[ -n "$hd" ] || { echo "horad did not start"; cat "$out"; exit 1; }
kill -STOP "$hd"
kill -TERM "$hr"  # (SIGINT is ignored in a background job)
start=$(date +%s)
wait "$hr"
rc=$?
took=$(($(date +%s) - start))
cat "$out"
echo "horarun exited $rc after ${took}s"
[ "$rc" -eq 143 ] || { echo "expected exit 143"; exit 1; }
grep -q "did not stop the job within" "$out" || { echo "no message about the stuck horad"; exit 1; }
[ "$took" -le 15 ] || { echo "took too long"; exit 1; }
sleep 0.3
if pgrep -f "$mark" >/dev/null; then echo "leftover processes:"; pgrep -af "$mark"; exit 1; fi
