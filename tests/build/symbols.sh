#!/bin/sh
# libhora.so exports only hora_* symbols.
lib="$BUILD/lib/libhora.so"
[ -f "$lib" ] || { echo "missing $lib"; exit 1; }
bad=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^hora_' | grep -v '^$')
if [ -n "$bad" ]; then
  echo "libhora.so exports symbols outside hora_*:"
  echo "$bad"
  exit 1
fi
n=$(nm -D --defined-only "$lib" | grep -c ' hora_')
echo "libhora.so exports $n symbols, all hora_*"
for s in hora_init hora_shutdown hora_allreduce hora_broadcast hora_barrier \
  hora_allreduce_async hora_broadcast_async hora_wait hora_test hora_alloc \
  hora_free hora_strerror hora_last_error hora_rank hora_size; do
  nm -D --defined-only "$lib" | grep -q " $s\$" || { echo "missing $s"; exit 1; }
done
