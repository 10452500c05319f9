#!/bin/sh
# version.sh -- libhora and horad of different protocol versions
# (it_version.c):
#   daemon: a rank says hello as a libhora of another release would (frame
#     protocol version 99; shared-memory protocol version 99 in the hello):
#     horad refuses each with HORA_EVERSION and a message naming the rank
#     and both versions, in a frame of its own version, logs it, and the
#     rank's real hora_init() then works;
#   client: hora_init() against a stand-in horad of another release (a
#     frame of version 99, a REFUSE, a segment of version 99) returns
#     HORA_EVERSION with a clear message each time.
. "$(dirname "$0")/lib.sh"

hrun daemon 60 -np 2 "$T/it_version" daemon
expect_rc daemon 0
expect_count daemon out "^\[[01]\]<stdout>:rank [01]: version: [0-9]+ checks, 0 failures" 2 \
  "every rank's checks passed"
expect_nogrep daemon out "FAIL" "no check failed"
expect_grep daemon err "WARNING: rank [01] \(pid [0-9]+\) uses a libhora of protocol version 99, but this horad speaks version [0-9]+" \
  "horad logs the libhora of another frame version, naming the rank"
expect_grep daemon err "WARNING: rank [01] \(pid [0-9]+\) uses a libhora of shared-memory protocol version 99" \
  "horad logs the libhora of another shared-memory version"

solo client 60 "$T/it_version" client
expect_rc client 0
expect_grep client out "^rank 0: version: [0-9]+ checks, 0 failures" "libhora's checks passed"
expect_nogrep client out "FAIL" "no check failed"
assert_no_leftovers "$MARK"
finish
