#!/bin/sh
# pytest.sh -- runs the Python package's tests (tests/python) with the
# interpreter that has torch, against the libhora of this build.
PYTHON=${PYTHON:-/usr/bin/python3}
"$PYTHON" -c 'import torch, numpy, pytest' 2>/dev/null || {
  echo "$PYTHON lacks torch, numpy or pytest (Debian: python3-torch python3-numpy python3-pytest; ./quickstart.sh test installs them)"
  exit 1
}
export PYTHONPATH="$HORA_TOP/python${PYTHONPATH:+:$PYTHONPATH}"
export HORA_LIBRARY="$BUILD/lib/libhora.so"
export PATH="$BUILD/bin:$PATH"
if ldd "$HORA_LIBRARY" | grep -q libasan; then
  # A sanitized libhora inside the interpreter: the runtime goes first, and
  # the interpreter's own allocations are not ours to judge.
  LD_PRELOAD="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)"
  ASAN_OPTIONS="detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
  export LD_PRELOAD ASAN_OPTIONS
fi
cd "$HORA_TOP" && exec "$PYTHON" -m pytest -q -p no:cacheprovider tests/python
