#!/bin/sh
# hbm bench all: its own --help, and an option not every benchmark takes is
# refused before any benchmark runs (exit 2, naming it), not passed on bare.
# Runs no benchmark: they are long.
set -u
fail=0
out=$(mktemp)
err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT

"$HBM" bench all --help > "$out" 2>&1 || { echo "FAIL --help exits non-zero"; fail=1; }
head -n 1 "$out" | grep -q "^usage: hbm bench all \[--json\]$" || { echo "FAIL --help is not all's own: $(cat "$out")"; fail=1; }
grep -q "usage: hbm bench alloc" "$out" && { echo "FAIL --help runs every benchmark's --help"; fail=1; }

for bad in "--steps 2" "--json --rounds 1" "--frobnicate"; do
  # shellcheck disable=SC2086
  "$HBM" bench all $bad > "$out" 2> "$err"
  rc=$?
  opt=$(echo "$bad" | sed 's/.*\(--[a-z]*\).*/\1/')
  if [ $rc -ne 2 ] || [ -s "$out" ] || [ "$(wc -l < "$err")" -ne 1 ] ||
     ! grep -q "bench all: '$opt' is not an option of every benchmark; all takes only --json" "$err"; then
    echo "FAIL '$bad': exit $rc, stdout '$(cat "$out")', stderr '$(cat "$err")'"; fail=1
  else echo "ok   '$bad': $(cat "$err")"; fi
done
exit $fail
