#!/bin/sh
# zoned through hbm replay: joins --policy all, completes the field report's
# layout with no fragmentation at any step boundary, and keeps every byte on
# the host device (--verify) under pressure.
set -u
fail=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
trace="$HBM_ROOT/tests/fixtures/step437.trace"

"$HBM" --help | grep -q "zoned" || { echo "FAIL: zoned is not among the policies"; fail=1; }
text=$("$HBM" replay "$trace" --policy all --device sim:96GiB) || { echo "FAIL replay all exited $?"; fail=1; }
echo "$text"
echo "$text" | grep -q "^zoned .* none$" || { echo "FAIL: zoned did not complete step 437"; fail=1; }

out=$("$HBM" replay "$trace" --policy zoned --device sim:96GiB --samples --json) || { echo "FAIL replay exited $?"; exit 1; }
if command -v python3 >/dev/null; then
  echo "$out" | python3 -c '
import json, sys
p = json.load(sys.stdin)["policies"][0]
assert p["oom"] is None, p["oom"]
fr = [s["fragmentation"] for s in p["samples"]]
assert len(fr) >= 2 and max(fr) <= 0.05, fr
assert p["max_frag"] <= 0.05
# each sample carries the calls so far: what the steps between samples cost
calls = [s["backend_calls"] for s in p["samples"]]
assert calls == sorted(calls) and calls[-1] == p["backend_calls"], (calls, p["backend_calls"])
assert calls[-1] - calls[1] == p["backend_calls_after_first_step"], (calls, p["backend_calls_after_first_step"])
# and the allocations so far: the last sample has them all
allocs = [s["alloc_events"] for s in p["samples"]]
assert allocs == sorted(allocs) and allocs[0] < allocs[-1] == p["alloc_events"], (allocs, p["alloc_events"])
print("step437 under zoned: fragmentation at the boundaries", fr, "calls", calls)
' || { echo "FAIL: step 437 fragmentation"; fail=1; }
fi

# A job that comes close to the device's capacity, on real memory, verified.
{
  echo "hbm-trace 1"
  i=0
  while [ $i -lt 40 ]; do
    echo "a p$i $((3 + i % 5))MiB param"
    i=$((i + 1))
  done
  s=1
  while [ $s -le 6 ]; do
    echo "s $s"
    i=0
    while [ $i -lt 12 ]; do
      echo "a x$i $((7 + (i * s) % 9))MiB act"
      echo "a t$i 700KiB temp"
      echo "f t$i"
      i=$((i + 1))
    done
    echo "a c 40MiB comm 1"
    i=0
    while [ $i -lt 12 ]; do echo "f x$i"; i=$((i + 1)); done
    echo "f c"
    s=$((s + 1))
  done
} > "$dir/job.trace"
if out=$("$HBM" replay "$dir/job.trace" --policy zoned --device host:384MiB --verify --json 2> "$dir/err"); then
  echo "$out"
  echo "$out" | grep -q '"verified_blocks":[1-9]' || { echo "FAIL: no block verified"; fail=1; }
  echo "$out" | grep -q '"oom":null' || { echo "FAIL: the job did not fit on host:384MiB"; fail=1; }
  # the text says it too, the same count
  n=$(echo "$out" | sed -n 's/.*"verified_blocks":\([0-9]*\).*/\1/p')
  "$HBM" replay "$dir/job.trace" --policy zoned --device host:384MiB --verify 2> /dev/null | grep -q "verified_blocks = $n\$" ||
    { echo "FAIL: the text does not give verified_blocks = $n"; fail=1; }
elif grep -q "memfd" "$dir/err"; then
  echo "skip --verify: $(cat "$dir/err")"
else
  echo "FAIL: replay --verify on the host device:"; cat "$dir/err"; fail=1
fi

# A recorded starting state: blocks A, B and C share pages as zoned packs
# them (A and B share one). Once A dies, the page it alone touched is an idle
# chunk, so a device one page short is made room for by a move, not by
# copying B out of a chunk it shares with A (re-chunking).
cat > "$dir/seeded.trace" <<'EOF'
hbm-trace 1
init-seg 0x10000000 10485760 0 large
init-blk 0x10000000 3145728 A
init-blk 0x10300000 3145728 B
init-blk 0x10600000 3145728 C
init-blk 0x10900000 1048576 -
f A
a F 4MiB
EOF
out=$("$HBM" replay "$dir/seeded.trace" --policy zoned --device sim:12MiB --json) || { echo "FAIL: seeded replay exited $?"; fail=1; }
echo "$out"
echo "$out" | grep -q '"oom":null' || { echo "FAIL: the seeded trace did not fit on sim:12MiB"; fail=1; }
echo "$out" | grep -q '"chunks_moved":1,' || { echo "FAIL: the dead recorded block's page was not moved"; fail=1; }
echo "$out" | grep -q '"rechunks":0,' || { echo "FAIL: a recorded block's chunk was copied"; fail=1; }

if out=$("$HBM" replay "$dir/seeded.trace" --policy zoned --device host:12MiB --verify --json 2> "$dir/err"); then
  echo "$out" | grep -q '"verified_blocks":4,' || { echo "FAIL: the seeded blocks were not all verified"; fail=1; }
elif ! grep -q "memfd" "$dir/err"; then
  echo "FAIL: seeded replay --verify on the host device:"; cat "$dir/err"; fail=1
fi

# A starting state larger than the device: a run that fails at its start
# (a result, exit 0), for the policies that seed it and those that place it.
out=$("$HBM" replay "$dir/seeded.trace" --policy zoned,caching,bestfit --device sim:8MiB --json) \
  || { echo "FAIL: a starting state too big for the device is an error, not a result"; fail=1; }
[ "$(echo "$out" | grep -o '"oom":{"event":0,' | wc -l)" -eq 3 ] || { echo "FAIL: the too-big starting state not reported as a failure at event 0"; echo "$out"; fail=1; }

# The policy's invariants after every event, for bug reports.
"$HBM" replay "$dir/seeded.trace" --policy zoned,caching,compact --device sim:12MiB --check 1 > /dev/null \
  || { echo "FAIL: --check 1 found a broken invariant"; fail=1; }
"$HBM" replay "$dir/seeded.trace" --policy zoned --check 0 2> "$dir/err"
[ $? -eq 2 ] && grep -q "check" "$dir/err" || { echo "FAIL: --check 0 not refused"; fail=1; }

# Settings for one policy: caching and zoned with moves in one run.
out=$("$HBM" replay "$dir/job.trace" --policy caching,zoned --device sim:1GiB --alloc-conf zoned=moves:on --json) \
  || { echo "FAIL: --alloc-conf zoned=moves:on beside caching"; fail=1; }
echo "$out" | grep -q '"policy":"zoned","alloc_conf":"moves:on"' || { echo "FAIL: zoned's own settings not reported"; fail=1; }
echo "$out" | grep -q '"policy":"caching","alloc_conf":null' || { echo "FAIL: caching got zoned's settings"; fail=1; }
"$HBM" replay "$dir/job.trace" --policy zoned --device sim:1GiB --alloc-conf zoned=moves:on --alloc-conf zoned=moves:off 2> "$dir/err"
[ $? -eq 2 ] && grep -q "given twice" "$dir/err" || { echo "FAIL: settings for one policy given twice not refused"; fail=1; }
"$HBM" replay "$dir/job.trace" --policy zoned --device sim:1GiB --alloc-conf zoned=moves:maybe 2> "$dir/err"
[ $? -eq 2 ] && grep -q "moves:maybe" "$dir/err" || { echo "FAIL: a bad zoned setting not refused"; cat "$dir/err"; fail=1; }

# A setting zoned does not read on this device is said, once a run however
# many heaps the run makes, on stderr, and the run goes on; JSON stays clean.
out=$("$HBM" bench replay --trace "$dir/job.trace" --policy caching,zoned --device sim:1GiB --rounds 3 \
  --alloc-conf zoned=vmm:off,chunk:128MiB --json 2> "$dir/err") || { echo "FAIL: an unread setting stopped the run"; fail=1; }
[ "$(grep -c '^hbm: note: zoned: fixed zones (vmm:off): chunk ignored' "$dir/err")" -eq 1 ] \
  && [ "$(wc -l < "$dir/err")" -eq 1 ] || { echo "FAIL: an unread setting not said once:"; cat "$dir/err"; fail=1; }
if command -v python3 >/dev/null; then
  echo "$out" | python3 -c 'import json, sys; json.load(sys.stdin)' || { echo "FAIL: the note reached the JSON"; fail=1; }
fi
out=$("$HBM" replay "$dir/job.trace" --policy zoned --device sim:1GiB --alloc-conf vmm:off --json 2> "$dir/err")
[ ! -s "$dir/err" ] && echo "$out" | grep -q '"fixed_zones":1,' \
  || { echo "FAIL: fixed zones said as a note, or not in the record:"; cat "$dir/err"; fail=1; }
exit $fail
