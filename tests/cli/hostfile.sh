#!/bin/sh
# hostfile.sh -- horarun --hostfile: every accepted line form runs a local
# job with the slots it gives; -np defaults to them and may not exceed them;
# the last of -H and --hostfile counts; every bad file exits 2 with one
# "horarun: error:" line naming the file and line.
. "$(dirname "$0")/lib.sh"
use_horad
me=$(hostname)

# count_lines PATTERN: lines of $TMP/out that are exactly PATTERN.
count_lines() { grep -cxF -- "$1" "$TMP/out"; }

# ---- accepted forms -------------------------------------------------------------
printf 'localhost slots=2\n' >"$TMP/hosts"
run_hr --hostfile "$TMP/hosts" -np 2 sh -c 'echo "size=$HORA_SIZE"'
expect_rc 0 "localhost slots=2"
[ "$(count_lines '[0]<stdout>:size=2')" -eq 1 ] &&
  [ "$(count_lines '[1]<stdout>:size=2')" -eq 1 ] || fail "two ranks of 2"
note "'localhost slots=2' with -np 2"

# Comments, blank lines, tabs, CRLF, and names of this machine that merge
# into one host: 1 + 1 + 1 + 2 slots; -np defaults to all of them.
printf '# the hosts\r\n\r\n  localhost slots=1   # me\r\n\t127.0.0.1:1\n%s\n[::1] slots=2#v6\n' \
  "$me" >"$TMP/hosts"
run_hr -hostfile "$TMP/hosts" sh -c 'echo "$HORA_SIZE $HORA_LOCAL_SIZE"'
expect_rc 0 "comments, CRLF, aliases"
[ "$(count_lines '[4]<stdout>:5 5')" -eq 1 ] || fail "5 ranks on one host"
[ "$(grep -c '<stdout>:5 5$' "$TMP/out")" -eq 5 ] || fail "5 ranks"
note "comments, blanks, tabs, CRLF, IPv6 and local aliases: 5 ranks, 1 host"

run_hr --hostfile="$HORA_TOP/configs/hostfile.example" -np 3 true
expect_rc 0 "configs/hostfile.example"
note "configs/hostfile.example runs"

# ---- -np and the slots ------------------------------------------------------------
printf 'localhost slots=2\n' >"$TMP/hosts"
run_hr --hostfile "$TMP/hosts" -np 3 true
expect_rc 2 "-np above the slots"
expect_in err "requested 3 processes but the hosts give only 2 slots" \
  "-np above the slots"
note "-np 3 on 2 slots -> $(head -n 1 "$TMP/err")"

# ---- the last of -H and --hostfile counts ----------------------------------------------
run_hr -H localhost:1 --hostfile "$TMP/hosts" sh -c 'echo "$HORA_SIZE"'
expect_rc 0 "-H then --hostfile"
[ "$(grep -c '<stdout>:2$' "$TMP/out")" -eq 2 ] || fail "--hostfile counts"
run_hr --hostfile "$TMP/hosts" -H localhost:1 sh -c 'echo "$HORA_SIZE"'
expect_rc 0 "--hostfile then -H"
[ "$(grep -c '<stdout>:1$' "$TMP/out")" -eq 1 ] || fail "-H counts"
note "the last of -H and --hostfile gives the hosts"

# ---- errors -----------------------------------------------------------------------------
# bad_file WHAT CONTENT EXPECTED-MESSAGE-AFTER-"horarun: error: "
bad_file() {
  printf "$2" >"$TMP/bad hosts"
  run_hr --hostfile "$TMP/bad hosts" -np 1 true
  expect_rc 2 "$1"
  [ "$(grep -c '^horarun: error: ' "$TMP/err")" -eq 1 ] || fail "$1: lines"
  head -n 1 "$TMP/err" | grep -qxF -- "horarun: error: $3" ||
    fail "$1: expected 'horarun: error: $3'"
  note "$1 -> $(head -n 1 "$TMP/err")"
}
slots="expected a whole number from 1 to 1000000"
bad_file "bad slots" '# c\nlocalhost slots=2\nnode2 slots=x\n' \
  "$TMP/bad hosts:3: bad slots value 'x': $slots"
bad_file "zero slots" 'localhost slots=0\n' \
  "$TMP/bad hosts:1: bad slots value '0': $slots"
bad_file "unknown field" '\n\nlocalhost max_slots=4\n' \
  "$TMP/bad hosts:3: unexpected 'max_slots=4' after host 'localhost' (expected slots=N)"
bad_file "slots twice" 'localhost:2 slots=2\n' \
  "$TMP/bad hosts:1: slots given twice for host 'localhost'"
bad_file "bad host" 'localhost\nno/such slots=1\n' \
  "$TMP/bad hosts:2: bad host 'no/such': expected HOST or HOST:SLOTS, e.g. node1:4 (IPv6 as [::1]:4)"
bad_file "empty file" '' \
  "$TMP/bad hosts: no hosts in the file (expected lines like 'node1 slots=4')"
bad_file "only comments" '# nothing\n\n' \
  "$TMP/bad hosts: no hosts in the file (expected lines like 'node1 slots=4')"

run_hr --hostfile "$TMP/missing" -np 1 true
expect_rc 2 "missing file"
expect_in err "horarun: error: cannot read host file '$TMP/missing': No such file or directory" \
  "missing file"
run_hr --hostfile "$TMP" -np 1 true
expect_rc 2 "a directory"
expect_in err "cannot read host file '$TMP': Is a directory" "a directory"
if [ "$(id -u)" -ne 0 ]; then
  printf 'localhost\n' >"$TMP/secret" && chmod 0 "$TMP/secret"
  run_hr --hostfile "$TMP/secret" -np 1 true
  expect_rc 2 "unreadable file"
  expect_in err "cannot read host file '$TMP/secret': Permission denied" \
    "unreadable file"
fi
# Binary and huge files are refused at once (HR_HOSTFILE_MAX, 16 MiB;
# lines of at most 64 KiB).
run_hr_bounded 10 --hostfile /dev/zero -np 1 true
expect_rc 2 "/dev/zero"
expect_in err "horarun: error: /dev/zero:1: NUL byte in the line (not a text file?)" \
  "/dev/zero"
yes 'localhost slots=1 # padding padding padding' | head -c 17000000 \
  >"$TMP/huge" || fail "cannot write $TMP/huge"
run_hr_bounded 10 --hostfile "$TMP/huge" -np 1 true
expect_rc 2 "huge file"
expect_in err "$TMP/huge: larger than 16 MiB (the most a host file may hold)" \
  "huge file"
yes 'localhost slots=1 # padding padding padding' | head -c 17000000 |
  run_hr_bounded 10 --hostfile /dev/stdin -np 1 true
expect_rc 2 "huge stream"
expect_in err "/dev/stdin: larger than 16 MiB" "huge stream"
head -c 70000 /dev/zero | tr '\0' x >"$TMP/long"
run_hr_bounded 10 --hostfile "$TMP/long" -np 1 true
expect_rc 2 "long line"
expect_in err "$TMP/long:1: line longer than 65536 bytes (the most a host file allows)" \
  "long line"
note "/dev/zero, 17 MB (file and pipe), a 70000-byte line: exit 2 at once"

run_hr --hostfile
expect_rc 2 "--hostfile without a value"
expect_in err "option '--hostfile' needs a value (FILE)" "no value"
note "missing, directory, unreadable: exit 2 with the file and the reason"
exit 0
