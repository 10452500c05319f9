#!/bin/sh
# layering.sh -- how horarun's files depend on each other, read from the
# objects the build made:
#  - the command line calls the config file reader, never the reverse:
#    config.o and opts.o use no symbol that cli.o defines, and opts.o none
#    that config.o defines (cli.c -> config.c -> opts.c).
. "$(dirname "$0")/lib.sh"
obj=$BUILD/obj/launcher
for t in nm; do
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

exit 0
