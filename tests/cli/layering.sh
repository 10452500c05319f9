#!/bin/sh
# layering.sh -- how horarun's files depend on each other, read from the
# objects the build made:
#  - the command line calls the config file reader, never the reverse:
#    config.o and opts.o use no symbol that cli.o defines, and opts.o none
#    that config.o defines (cli.c -> config.c -> opts.c);
#  - no launcher object has writable data of its own (.data, .bss): a job's
#    state lives in the job, and callbacks find it through their handle.
. "$(dirname "$0")/lib.sh"
obj=$BUILD/obj/launcher
for t in nm objdump; do
  command -v $t >/dev/null || { echo "no $t here"; exit 77; }
done
[ -f "$obj/cli.o" ] || { echo "no $obj/cli.o: run make first"; exit 77; }

defined() { nm --defined-only "$1" | awk '$2 ~ /^[A-Z]$/ {print $3}' | sort; }
used() { nm -u "$1" | awk '{print $2}' | sort; }

# calls_into USER DEFINER: the symbols USER uses that DEFINER defines
calls_into() { defined "$2" >"$TMP/def"; used "$1" | comm -12 - "$TMP/def"; }

for pair in "config cli" "opts cli" "opts config"; do
  set -- $pair
  bad=$(calls_into "$obj/$1.o" "$obj/$2.o")
  [ -z "$bad" ] || fail "$1.c calls $2.c:" $bad
done
note "cli.c -> config.c -> opts.c, no call back"

for o in "$obj"/*.o; do
  bad=$(objdump -t "$o" | awk '$3 == "O" && ($4 == ".bss" || $4 == ".data" ||
    $4 ~ /^\.(bss|data)\./) && $4 !~ /rel\.ro/ {print $NF}')
  [ -z "$bad" ] || fail "$(basename "$o") has writable data of its own:" $bad
done
note "no launcher object has writable data of its own"
exit 0
