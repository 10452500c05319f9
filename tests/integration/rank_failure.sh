#!/bin/sh
# rank_failure.sh -- a rank that fails mid-job:
#   exit3: rank 1 exits with 3 while ranks 0 and 2 are blocked in an
#     allreduce: they get HORA_EPEERGONE naming rank 1 (and so does a later
#     call), print it and exit 4; horarun exits 3 and its stderr names rank
#     1 and the host;
#   sigkill: the same with SIGKILL (rank 1, and rank 0 with 2 ranks):
#     horarun exits 137 and says SIGKILL;
#   exit3sleep: rank 1 exits 3 while the others sleep outside hora: horarun
#     has to stop them, and exits 3 within a few seconds;
#   sigkill8: rank 5 of 8 (more ranks than cores) killed, 7 blocked;
#   noinit: rank 1 exits 0 without ever calling hora_init while ranks 0
#     and 2 are blocked in an allreduce: their error names rank 1 and says
#     it never initialised hora; horarun names rank 1 (not the ranks that
#     failed because of it) as the cause, and exits 1.
# After each, no process of the job (ranks, horad, horarun) is left, and
# horad removed its socket directory.
. "$(dirname "$0")/lib.sh"

host=$(hostname 2>/dev/null || uname -n)
short=$(hostname -s 2>/dev/null || echo "${host%%.*}")
hostre="($host|$short|localhost)"

survivors_ok() { # NAME VICTIM SURVIVOR...
  _n=$1 _v=$2
  shift 2
  for _s in "$@"; do
    expect_grep "$_n" out "^\[$_s\]<stdout>:rank $_s: got HORA_EPEERGONE as expected: .*rank $_v" \
      "rank $_s reports HORA_EPEERGONE naming rank $_v"
    expect_grep "$_n" out "^\[$_s\]<stdout>:rank $_s: a later allreduce: HORA_(EPEERGONE|ESHUTDOWN)" \
      "a later allreduce of rank $_s fails too"
  done
  expect_nogrep "$_n" out "FAIL" "no rank saw anything unexpected"
}

hrun exit3 60 -np 3 "$T/it_fail" exit3 1
expect_rc exit3 3
survivors_ok exit3 1 0 2
expect_grep exit3 err "rank 1.*$hostre|$hostre.*rank 1" "horarun's stderr names rank 1 and the host"
expect_grep exit3 err "(code|status) 3" "horarun's stderr gives the exit code"
assert_no_leftovers "$MARK"
assert_clean_tmp exit3

hrun sigkill 60 -np 3 "$T/it_fail" sigkill 1
expect_rc sigkill 137
survivors_ok sigkill 1 0 2
expect_grep sigkill err "SIGKILL" "horarun's stderr says SIGKILL"
expect_grep sigkill err "rank 1.*$hostre|$hostre.*rank 1" "horarun's stderr names rank 1 and the host"
assert_no_leftovers "$MARK"
assert_clean_tmp sigkill

hrun sigkill0 60 -np 2 "$T/it_fail" sigkill 0
expect_rc sigkill0 137
survivors_ok sigkill0 0 1
expect_grep sigkill0 err "rank 0.*SIGKILL|SIGKILL.*rank 0" "horarun's stderr names rank 0 and SIGKILL"
assert_no_leftovers "$MARK"
assert_clean_tmp sigkill0

hrun exit3sleep 60 -np 3 "$T/it_fail" exit3sleep 1
expect_rc exit3sleep 3
expect_grep exit3sleep err "rank 1" "horarun's stderr names rank 1"
if [ "${ELAPSED%.*}" -ge 15 ]; then
  fail "exit3sleep: horarun took ${ELAPSED}s to stop the sleeping ranks (expected a few seconds)"
fi
expect_nogrep exit3sleep out "still alive" "the sleeping ranks were stopped"
assert_no_leftovers "$MARK"
assert_clean_tmp exit3sleep

# 8 ranks (more than cores), rank 5 killed while 7 are blocked
hrun sigkill8 60 -np 8 "$T/it_fail" sigkill 5
expect_rc sigkill8 137
survivors_ok sigkill8 5 0 1 2 3 4 6 7
assert_no_leftovers "$MARK"
assert_clean_tmp sigkill8

hrun noinit 60 -np 3 "$T/it_fail" noinit 1
expect_rc noinit 1
survivors_ok noinit 1 0 2
expect_grep noinit out "^\[0\]<stdout>:rank 0: got HORA_EPEERGONE as expected: .*rank 1 on host .* exited with code 0 without initialising hora" \
  "the survivors' error says rank 1 never initialised hora"
expect_grep noinit err "^horarun: error: rank 1 on host $hostre exited with code 0 without initialising hora" \
  "horarun names rank 1 and says it never initialised hora"
first=$(grep -E '^horarun: (error: )?rank [0-9]' "$IT_TMP/noinit.err" | head -n 1)
case "$first" in
*"rank 1 "*) ;;
*) fail "noinit: horarun's first word on a rank should name rank 1, the cause; it said: $first" ;;
esac
assert_no_leftovers "$MARK"
assert_clean_tmp noinit
finish
