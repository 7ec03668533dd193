#!/bin/sh
# Host memory, as the commands that hold a whole trace in memory check it
# before the work (cli/cli.c): the machine's MemAvailable, or less where a
# container's cgroup limit leaves less (v2's memory.max, else v1's
# memory.limit_in_bytes; "max" or no file is no limit), and the --steps that
# fit said exactly. Each case runs in a mount namespace of its own, where
# /proc/meminfo and /sys/fs/cgroup are files this script wrote; skipped where
# no such namespace can be made.
set -u
fail=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

ns="unshare -m"; [ "$(id -u)" -eq 0 ] || ns="unshare -rm"
cat > "$dir/ns.sh" << 'EOF'
# ns.sh MEMAVAILABLE_KB CGROUP_DIR COMMAND...: COMMAND with those as /proc/meminfo and /sys/fs/cgroup
printf 'MemTotal: %s kB\nMemAvailable: %s kB\n' "$1" "$1" > "$2.meminfo"
mount --bind "$2.meminfo" /proc/meminfo && mount --bind "$2" /sys/fs/cgroup || exit 125
shift 2
exec "$@"
EOF
mkdir "$dir/none"
if ! $ns sh "$dir/ns.sh" 1 "$dir/none" true 2> /dev/null; then
  echo "skip: no mount namespace here to give hbm a host memory of the test's own"
  exit 77
fi
run() { # MemAvailable in kB, cgroup dir, hbm arguments...
  kb=$1; cg=$2; shift 2
  $ns sh "$dir/ns.sh" "$kb" "$cg" "$HBM" "$@" > "$dir/out" 2> "$dir/err"
}

# A limit of 3 GiB with 1 GiB used leaves 2 GiB, less than the machine's 8 GiB:
# from cgroup v2; from v1 where v2 has no file, or says "max"; none from a v1
# "limit" of 2^63 rounded down to a page (v1's way of saying none).
mkdir -p "$dir/v2" "$dir/v1/memory" "$dir/v1max/memory" "$dir/v1none/memory"
echo 3221225472 > "$dir/v2/memory.max"; echo 1073741824 > "$dir/v2/memory.current"
for d in v1 v1max; do
  echo 3221225472 > "$dir/$d/memory/memory.limit_in_bytes"; echo 1073741824 > "$dir/$d/memory/memory.usage_in_bytes"
done
echo max > "$dir/v1max/memory.max"; echo 1073741824 > "$dir/v1max/memory.current"
echo 9223372036854771712 > "$dir/v1none/memory/memory.limit_in_bytes"; echo 1073741824 > "$dir/v1none/memory/memory.usage_in_bytes"
for case in v2:2.00 v1:2.00 v1max:2.00 v1none:8.00 none:8.00; do
  cg=${case%%:*}; want=${case#*:}
  run 8388608 "$dir/$cg" gen llm --layers 2 --hidden 256 --seq 128 --steps 1000000 -o "$dir/never.trace"; rc=$?
  [ $rc -eq 2 ] && grep -q "more than the $want GiB available; give --steps [0-9]* or fewer$" "$dir/err" ||
    { echo "FAIL cgroup $cg: exit $rc, expected 2 and $want GiB available: $(cat "$dir/err")"; fail=1; }
done
[ -e "$dir/never.trace" ] && { echo "FAIL a refused gen llm wrote its output"; fail=1; }

# The steps said to fit do, and one more does not: 16 MiB here.
run 16384 "$dir/none" gen llm --layers 2 --hidden 256 --seq 128 --steps 1000000 -o /dev/null; rc=$?
n=$(sed -n 's/.*; give --steps \([0-9]*\) or fewer$/\1/p' "$dir/err")
if [ $rc -ne 2 ] || [ -z "$n" ]; then
  echo "FAIL 16 MiB: exit $rc, no steps that fit said: $(cat "$dir/err")"; fail=1
else
  run 16384 "$dir/none" gen llm --layers 2 --hidden 256 --seq 128 --steps "$n" -o /dev/null; rc=$?
  [ $rc -eq 0 ] || { echo "FAIL 16 MiB: --steps $n, said to fit, exit $rc: $(cat "$dir/err")"; fail=1; }
  run 16384 "$dir/none" gen llm --layers 2 --hidden 256 --seq 128 --steps $((n + 1)) -o /dev/null; rc=$?
  [ $rc -eq 2 ] && grep -q "; give --steps $n or fewer$" "$dir/err" ||
    { echo "FAIL 16 MiB: --steps $((n + 1)), one more than said to fit: exit $rc: $(cat "$dir/err")"; fail=1; }
fi
# and where not even the first step fits, that is said (32 KiB)
run 32 "$dir/none" gen llm --layers 2 --hidden 256 --seq 128 --steps 2 -o /dev/null; rc=$?
[ $rc -eq 2 ] && grep -q "more than the 32.00 KiB available; not even one step fits$" "$dir/err" ||
  { echo "FAIL 32 KiB: exit $rc: $(cat "$dir/err")"; fail=1; }

[ $fail -eq 0 ] && echo "ok   host memory: cgroup v2, v1, none; the steps that fit, and not one"
exit $fail
