#!/bin/sh
# make install puts binaries, library, header, pkg-config file, man pages
# the systemd units (which systemd-analyze verify accepts) and the example
# settings file (which horad --service --check takes) in place, and
# a program builds against it with pkg-config alone.
set -e
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$HORA_TOP"
make -s BUILD="$BUILD" install PREFIX="$tmp/prefix" >"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
for f in bin/horarun bin/horad lib/libhora.so lib/libhora.a include/hora.h \
  lib/pkgconfig/hora.pc share/man/man1/horarun.1 share/man/man3/hora.3 \
  share/man/man5/hora.yaml.5 share/man/man8/horad.8 \
  lib/systemd/system/horad.service lib/systemd/system/horad.socket \
  share/hora/horad.yaml; do
  [ -e "$tmp/prefix/$f" ] || { echo "not installed: $f"; exit 1; }
done
# the systemd unit names the installed horad, and systemd finds no fault
grep -q "^ExecStart=$tmp/prefix/bin/horad --service\( \|$\)" "$tmp/prefix/lib/systemd/system/horad.service" ||
  { echo "horad.service does not start the installed horad"; exit 1; }
command -v systemd-analyze >/dev/null 2>&1 ||
  { echo "no systemd-analyze to check horad.service (Debian: systemd man-db)"; exit 1; }
MANPATH="$tmp/prefix/share/man" systemd-analyze verify \
  "$tmp/prefix/lib/systemd/system/horad.service" \
  "$tmp/prefix/lib/systemd/system/horad.socket" || { echo "systemd-analyze verify failed"; exit 1; }
# the example settings file is one the service takes (horad --check)
openssl rand -hex 32 >"$tmp/key"
chmod 600 "$tmp/key"
"$tmp/prefix/bin/horad" --service --config "$tmp/prefix/share/hora/horad.yaml" \
  --key-file "$tmp/key" --allow-root --check >"$tmp/check" 2>&1 ||
  { echo "the installed horad.yaml is refused:"; cat "$tmp/check"; exit 1; }
grep -q "^port: 17970$" "$tmp/check" && grep -q "^stop: end$" "$tmp/check" ||
  { echo "horad --check does not show the example's settings:"; cat "$tmp/check"; exit 1; }
cat >"$tmp/p.c" <<'C'
#include <hora.h>
#include <stdio.h>
int main(void) {
  if (hora_init() != 0) return 1;
  double x = 2.5;
  if (hora_allreduce("x", &x, &x, 1, HORA_FLOAT64, HORA_SUM) != 0) return 1;
  printf("size %d sum %.1f\n", hora_size(), x);
  return hora_shutdown();
}
C
PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
export PKG_CONFIG_PATH
san=""
# a sanitized libhora needs a sanitized program (make asan)
ldd "$BUILD/lib/libhora.so" | grep -q libasan && san="-fsanitize=address,undefined"
cc $san "$tmp/p.c" -o "$tmp/p" $(pkg-config --cflags --libs hora) -Wl,-rpath,"$tmp/prefix/lib"
out=$("$tmp/p")
echo "$out"
[ "$out" = "size 1 sum 2.5" ]
out=$("$tmp/prefix/bin/horarun" -np 2 "$tmp/p")
echo "$out"
echo "$out" | grep -q '^\[0\]<stdout>:size 2 sum 5.0$'
echo "$out" | grep -q '^\[1\]<stdout>:size 2 sum 5.0$'
# the Python package, for the interpreter that has torch
pydir=$(find "$tmp/prefix/lib" -maxdepth 2 -name dist-packages | head -n 1)
[ -f "$pydir/hora/torch/__init__.py" ] || { echo "Python package not installed"; exit 1; }
if /usr/bin/python3 -c 'import torch' 2>/dev/null && ! ldd "$BUILD/lib/libhora.so" | grep -q libasan; then
  out=$(cd "$tmp" && PYTHONPATH="$pydir" HORA_LIBRARY="$tmp/prefix/lib/libhora.so" \
    "$tmp/prefix/bin/horarun" -np 2 /usr/bin/python3 -c \
    'import torch, hora.torch as hvd; hvd.init(); print("py", hvd.size(), hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist())')
  echo "$out"
  echo "$out" | grep -q '^\[1\]<stdout>:py 2 \[2.0, 2.0\]$'
fi
