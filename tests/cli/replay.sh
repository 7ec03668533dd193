#!/bin/sh
# hbm replay on the step-437 trace: the text table and the JSON keys.
set -u
fail=0
trace="$HBM_ROOT/tests/fixtures/step437.trace"
# A policy's record in the replay JSON: these keys first, in this order, then
# the policy's own counters (read by the checks below).
export RECORD_KEYS="policy alloc_conf error peak_reserved peak_reserved_event peak_device peak_allocated peak_live efficiency max_frag
  backend_calls backend_calls_after_first_step alloc_events ns_per_event failures refused_requests refused_placed"
out=$("$HBM" replay "$trace" --policy bestfit --device sim:96GiB --json) || { echo "FAIL replay exited $?"; exit 1; }
echo "$out"
for key in '"trace"' '"events"' '"capacity"' '"peak_live"' '"policies"' '"policy":"bestfit"' '"peak_reserved"' '"peak_device"' \
           '"peak_allocated"' '"efficiency"' '"max_frag"' '"backend_calls"' '"ns_per_event"' '"oom":{' \
           '"step":437' '"free_total":15032385536' '"largest_free":3221225472' '"cause":"fragmentation"'; do
  echo "$out" | grep -q "$key" || { echo "FAIL: JSON lacks $key"; fail=1; }
done
echo "$out" | python3 -c 'import json,sys; json.load(sys.stdin)' 2>/dev/null || { command -v python3 >/dev/null && { echo "FAIL: not valid JSON"; fail=1; }; }
# Doubles keep their value: a reader recomputing a ratio from the integers
# beside it in double precision gets exactly the double printed (six
# significant digits printed 0.999828 for 0.99982834...).
if command -v python3 >/dev/null; then
"$HBM" replay "$trace" --policy all --samples --json | python3 -c '
import json, sys
def frag(free, largest):
    if free == 0: return 0.0
    if largest == 0: return 1e9
    return max(free / largest - 1.0, 0.0)
d, bad, n = json.load(sys.stdin), [], 0
for p in d["policies"]:
    if not p["failures"] and p["peak_live"] != d["peak_live"]: bad.append((p["policy"], "peak_live", p["peak_live"]))
    if p["peak_live"] > d["peak_live"]: bad.append((p["policy"], "peak_live above the trace", p["peak_live"]))
    if p["peak_reserved"]:  # its own peak live: a failed request is not live
        n += 1
        if p["efficiency"] != p["peak_live"] / p["peak_reserved"]: bad.append((p["policy"], "efficiency", p["efficiency"]))
    for s in p["samples"]:  # the figures hold together
        if not s["live"] <= s["allocated"] <= s["reserved"] <= d["capacity"]: bad.append((p["policy"], "figures", s))
    for s in p["samples"] + ([p["oom"]] if p["oom"] else []):
        if s["fragmentation"] is not None:
            n += 1
            if s["fragmentation"] != frag(s["free_total"], s["largest_free"]): bad.append((p["policy"], s))
    if p["max_frag"] < max(s["fragmentation"] or 0 for s in p["samples"]): bad.append((p["policy"], "max_frag"))
print("FAIL doubles do not read back:", bad) if bad else print("ok   %d ratios read back exactly" % n)
sys.exit(1 if bad or n < 10 else 0)' || fail=1
# peak_reserved_event: the first sample, one after every event, at peak reserved
"$HBM" replay "$trace" --policy all --every 1 --samples --json | python3 -c '
import json, sys
d, bad = json.load(sys.stdin), []
for p in d["policies"]:
    first = next(s["event"] for s in p["samples"] if s["reserved"] == p["peak_reserved"])
    if first != p["peak_reserved_event"] or max(s["reserved"] for s in p["samples"]) != p["peak_reserved"]:
        bad.append((p["policy"], p["peak_reserved_event"], first))
print("FAIL peak_reserved_event is not where the samples peak:", bad) if bad else print("ok   peak_reserved_event where the samples first reach peak reserved, every policy")
sys.exit(1 if bad else 0)' || fail=1
fi
# Under a memory fraction, memory past the limit is not free to the policy:
# every sample's free total is the limit less live, and the failure's limit is
# that same figure (not the device's capacity, which read as fragmentation).
if command -v python3 >/dev/null; then
  "$HBM" replay "$trace" --policy caching --device sim:96GiB --alloc-conf per_process_memory_fraction:0.5 --samples --json |
  python3 -c '
import json, sys
p = json.load(sys.stdin)["policies"][0]
limit = p["oom"]["limit"] if p["oom"] else None
rooms = {s["free_total"] + s["live"] for s in p["samples"]}
if limit != 48 << 30 or rooms != {limit} or p["oom"]["free_total"] > limit:
    print("FAIL free total under a memory fraction:", limit, sorted(rooms)[:5]); sys.exit(1)
print("ok   free total under a memory fraction: the limit less live")' || fail=1
  # the page says the same: 40 GiB live under the 48 GiB limit, 12 GiB over it with the request
  dir_frac=$(mktemp -d)
  "$HBM" replay "$trace" --policy caching --device sim:96GiB --alloc-conf per_process_memory_fraction:0.5 \
    --html "$dir_frac/r.html" > /dev/null
  grep -q "the policy's limit 48.00 GiB minus 40.00 GiB live" "$dir_frac/r.html" &&
    grep -q "exceed that by 12.00 GiB" "$dir_frac/r.html" || { echo "FAIL the page under a memory fraction"; fail=1; }
  rm -rf "$dir_frac"
  # expandable maps whole pages past the limit, as PyTorch does: what it
  # holds is its room then, and its free pages count as free
  printf 'hbm-trace 1\ncapacity 256MiB\na x 100MiB\na y 25MiB\nf y\na z 30MiB\nf z\nf x\n' |
    "$HBM" replay /dev/stdin --policy expandable --alloc-conf per_process_memory_fraction:0.5 --samples --every 1 --json |
  python3 -c '
import json, sys
p = json.load(sys.stdin)["policies"][0]
over = [s for s in p["samples"] if s["reserved"] > 128 << 20]
bad = [s for s in p["samples"] if s["free_total"] + s["live"] != max(128 << 20, s["reserved"]) or s["largest_free"] > s["free_total"]]
if not over or bad or p["oom"]:
    print("FAIL expandable past its limit:", over[:1], bad[:2], p["oom"]); sys.exit(1)
print("ok   expandable past its limit: its pages count as free (%d samples over)" % len(over))' || fail=1
fi
text=$("$HBM" replay "$trace" --policy bestfit --device sim:96GiB)
echo "$text"
echo "$text" | grep -q "step 437.*ratio 3.67: fragmentation" || { echo "FAIL: text table lacks the failure"; fail=1; }
# --html: one self-contained page, written atomically, never over the input
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$HBM" replay "$trace" --policy bestfit,caching --device sim:96GiB --html "$dir/r.html" > /dev/null || { echo "FAIL --html exited $?"; fail=1; }
grep -q "<svg" "$dir/r.html" || { echo "FAIL: report has no inline SVG"; fail=1; }
grep -q "<title>hbm replay</title>" "$dir/r.html" || { echo "FAIL: the page is not titled hbm replay"; fail=1; }
grep -q "fragmentation" "$dir/r.html" || { echo "FAIL: report lacks the diagnosis"; fail=1; }
grep -qE "(src|href)=.https?:" "$dir/r.html" && { echo "FAIL: report reaches the network"; fail=1; }
ls "$dir" | grep -q tmp && { echo "FAIL: a temporary file was left behind"; fail=1; }
cp "$trace" "$dir/in.trace"
"$HBM" replay "$dir/in.trace" --html "$dir/in.trace" > /dev/null 2>&1; rc=$?
[ $rc -eq 2 ] && cmp -s "$trace" "$dir/in.trace" || { echo "FAIL: --html over the input: exit $rc or input changed"; fail=1; }
# --policy: every name once; an empty item (a trailing comma) or a repeat is refused
for p in "caching," ",caching" "caching,,zoned" "caching,caching" "zoned,caching,zoned" "all,"; do
  "$HBM" replay "$trace" --policy "$p" > "$dir/out" 2> "$dir/err"; rc=$?
  [ $rc -eq 2 ] && [ ! -s "$dir/out" ] && grep -q -- "--policy" "$dir/err" ||
    { echo "FAIL --policy '$p': exit $rc, $(cat "$dir/err")"; fail=1; }
done
n=$("$HBM" replay "$trace" --policy all --json | grep -o '"policy":' | wc -l)
[ "$n" -eq "$("$HBM" --help | sed -n 's/^policies: //p' | tr ',' '\n' | wc -l)" ] || { echo "FAIL --policy all: $n policies"; fail=1; }
"$HBM" replay "$trace" --policy caching,zoned --alloc-conf zoned=moves:off --alloc-conf caching=max_split_size_mb:64 --json \
  > "$dir/out" 2> "$dir/err" || { echo "FAIL --policy with per-policy --alloc-conf: $(cat "$dir/err")"; fail=1; }
grep -q '"policy":"zoned","alloc_conf":"moves:off"' "$dir/out" || { echo "FAIL per-policy settings: $(cat "$dir/out")"; fail=1; }
# the text and the page name each policy's settings, as the JSON does: figures
# under settings are not the defaults'
"$HBM" replay "$trace" --policy caching,zoned,bestfit --alloc-conf zoned=moves:off --alloc-conf 'caching=max_split_size_mb:64' \
  --html "$dir/conf.html" > "$dir/out" 2> "$dir/err" || { echo "FAIL per-policy settings, text: $(cat "$dir/err")"; fail=1; }
[ "$(grep -c '^  *settings: ' "$dir/out")" -eq 2 ] && grep -A1 '^caching ' "$dir/out" | grep -q '^  *settings: max_split_size_mb:64$' &&
  grep -A1 '^zoned ' "$dir/out" | grep -q '^  *settings: moves:off$' ||
  { echo "FAIL the text names no settings: $(cat "$dir/out")"; fail=1; }
[ "$(grep -c "<p class='sub'>settings <span class='mono'>" "$dir/conf.html")" -eq 2 ] &&
  grep -q "<p class='sub'>settings <span class='mono'>moves:off</span></p>" "$dir/conf.html" ||
  { echo "FAIL the page names no settings: $(grep -o "settings <span[^<]*" "$dir/conf.html")"; fail=1; }
# a mistyped POLICY= goes to every policy as settings; the message names the name that is no policy
for p in caching zoned caching,zoned; do
  "$HBM" replay "$trace" --policy $p --alloc-conf zonedd=moves:on > "$dir/out" 2> "$dir/err"; rc=$?
  [ $rc -eq 2 ] && grep -q "^hbm: --alloc-conf 'zonedd=moves:on': 'zonedd' is not a policy (known: " "$dir/err" ||
    { echo "FAIL --policy $p --alloc-conf zonedd=: exit $rc, $(cat "$dir/err")"; fail=1; }
done
# a bad --device is said once, not once per policy, and nothing is printed
"$HBM" replay "$trace" --device sim:2PiB --policy bestfit,caching > "$dir/out" 2> "$dir/err"; rc=$?
[ $rc -eq 2 ] && [ ! -s "$dir/out" ] && [ "$(wc -l < "$dir/err")" -eq 1 ] ||
  { echo "FAIL bad --device: exit $rc, $(cat "$dir/err")"; fail=1; }
"$HBM" replay "$trace" --device sim:1PiB --policy bestfit > /dev/null || { echo "FAIL --device sim:1PiB refused"; fail=1; }
# hbm help CMD is CMD --help; an unknown CMD is a usage error
"$HBM" help replay > "$dir/out" 2>&1 && grep -q "usage: hbm replay" "$dir/out" || { echo "FAIL hbm help replay: $(head -n 2 "$dir/out")"; fail=1; }
"$HBM" help bench replay 2>&1 | grep -q "usage: hbm bench replay" || { echo "FAIL hbm help bench replay"; fail=1; }
"$HBM" help nosuch > /dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || { echo "FAIL hbm help nosuch: exit $rc"; fail=1; }
"$HBM" help | grep -q "^commands:" || { echo "FAIL hbm help"; fail=1; }
# a recorded starting state that does not fit as recorded is named as such,
# not as fragmentation (100 B live would fit; its 1 GiB segment does not)
printf 'hbm-trace 1\ninit-seg 0x0 1GiB 0 large\ninit-blk 0x0 1GiB b0 100\na x 10\n' > "$dir/unfit.trace"
text=$("$HBM" replay "$dir/unfit.trace" --capacity 512MiB --policy caching,expandable) || { echo "FAIL unfit replay exited $?"; fail=1; }
echo "$text"
[ "$(echo "$text" | grep -c "before event 0: the starting state does not fit as recorded (100 B live.*: start$")" -eq 2 ] ||
  { echo "FAIL: the unfit starting state is not named as the cause"; fail=1; }
echo "$text" | grep -q "fragmentation" && { echo "FAIL: the unfit starting state is called fragmentation"; fail=1; }
"$HBM" replay "$dir/unfit.trace" --capacity 512MiB --policy caching --json | grep -q '"request":100,.*"cause":"start"' ||
  { echo "FAIL: JSON cause of the unfit starting state is not start"; fail=1; }
# live bytes over the capacity: the starting state, for every policy, not a
# request at event 0, and no made-up ratio in max frag or the JSON; nothing
# ran, so no policy shows the part it placed (bestfit places the first block)
printf 'hbm-trace 1\ninit-seg 0x0 1GiB 0 large\ninit-blk 0x0 300MiB b0 300MiB\ninit-blk 0x12c00000 724MiB b1 300MiB\na x 10\n' \
  > "$dir/over.trace"
text=$("$HBM" replay "$dir/over.trace" --capacity 512MiB --policy all) || { echo "FAIL over replay exited $?"; fail=1; }
npol=$(echo "$text" | grep -c "^[a-z]\+ \+[0-9.]\+ [KMGiB]* \+[-0-9]")
[ "$npol" -ge 5 ] && [ "$(echo "$text" | grep -c " 0 B  *-  *0.000 .*before event 0: the starting state does not fit (600.00 MiB live, more than the capacity 512.00 MiB): start$")" -eq "$npol" ] ||
  { echo "FAIL: a starting state over the capacity is not named as such by every policy:"; echo "$text"; fail=1; }
"$HBM" replay "$dir/over.trace" --capacity 512MiB --policy bestfit,caching,zoned --json > "$dir/json" || fail=1
[ "$(grep -o '"max_frag":0,' "$dir/json" | wc -l)" -eq 3 ] &&
  [ "$(grep -o '"peak_reserved":0,' "$dir/json" | wc -l)" -eq 3 ] &&
  [ "$(grep -o '"event":0,"step":0,"request":629145600,"free_total":536870912,"largest_free":536870912,"fragmentation":null,"allocated":0,"limit":536870912,"cause":"start"' "$dir/json" | wc -l)" -eq 3 ] ||
  { echo "FAIL: JSON of a starting state over the capacity: $(cat "$dir/json")"; fail=1; }
"$HBM" replay "$dir/over.trace" --capacity 512MiB --policy bestfit,caching --html "$dir/over.html" > /dev/null || fail=1
grep -q "<td class='fail'>before event 0</td>" "$dir/over.html" && grep -q "starting state does not fit: its 600.00 MiB live exceed" "$dir/over.html" &&
  ! grep -q "first failure, step" "$dir/over.html" || { echo "FAIL: HTML of a starting state over the capacity"; fail=1; }
# the cause of a failure is the first that holds: capacity, the policy's own
# rules (a larger request would succeed; a cap; free memory in one piece its
# granularity cannot use), its blocks' overhead, and only then fragmentation
cause() { # name, policy, expected cause, alloc-conf (or -), trace text
  printf '%b' "$5" > "$dir/$1.trace"
  if [ "$4" = - ]; then set -- "$1" "$2" "$3"
  else set -- "$1" "$2" "$3" --alloc-conf "$4"; fi
  name=$1; policy=$2; want=$3; shift 3 # "$@": the settings, if any
  out=$("$HBM" replay "$dir/$name.trace" --policy "$policy" "$@" --json)
  echo "$out" | grep -q "\"cause\":\"$want\"" || { echo "FAIL cause $name ($policy): expected $want: $out"; fail=1; }
  "$HBM" replay "$dir/$name.trace" --policy "$policy" "$@" --html "$dir/$name.html" > /dev/null ||
    { echo "FAIL cause $name ($policy): the page"; fail=1; }
}
cause segment_rule caching rules - 'hbm-trace 1\ncapacity 1GiB\na a 1012MiB\na b 5MiB\n'
grep -q "would have succeeded: its own rules refused this one" "$dir/segment_rule.html" || { echo "FAIL: rules not explained"; fail=1; }
cause small_pool caching rules - 'hbm-trace 1\ncapacity 32MiB\na A 32MiB\nf A\na B 2MiB\na C 1000\n'
cause other_stream caching rules - 'hbm-trace 1\ncapacity 64MiB\na big 40MiB 1\nf big\na s 10MiB 1\na t 25MiB 2\n'
cause fraction caching rules caching=per_process_memory_fraction:0.5 'hbm-trace 1\ncapacity 1GiB\na a 600MiB\n'
grep -q "the policy may hold only 512.00 MiB of the capacity" "$dir/fraction.html" || { echo "FAIL: the cap not explained"; fail=1; }
cause page expandable rules - 'hbm-trace 1\ncapacity 32MiB\na a 32MiB\n'
grep -q "its granularity refused it" "$dir/page.html" || { echo "FAIL: granularity not explained"; fail=1; }
# expandable's hole at its segment's end goes on into the pages it maps next:
# one piece with the room, the device's last 12 MiB too few for a page; also
# with a tail in each of two streams' segments (the field report's step 437)
cause page_tail expandable rules - 'hbm-trace 1\ncapacity 8GiB\na x 6150MiB\na y 2031MiB\n'
cause page_full expandable rules - 'hbm-trace 1\ncapacity 8GiB\na a 2GiB\na b 2GiB\na c 2GiB\na d 2GiB\n'
cause page_streams expandable rules - "$(cat "$HBM_ROOT/tests/fixtures/step437.trace")\n"
# a hole between live blocks is a piece of its own under expandable too
cause page_hole expandable fragmentation - 'hbm-trace 1\ncapacity 60MiB\na a 10MiB\na b 10MiB\nf a\na c 45MiB\n'
cause rounding bestfit overhead - "hbm-trace 1\ncapacity 2MiB\n$(i=0; while [ $i -le 4096 ]; do printf 'a x%d 1\\n' $i; i=$((i+1)); done)"
grep -q "the policy's overhead, not fragmentation" "$dir/rounding.html" || { echo "FAIL: overhead not explained"; fail=1; }
# memory free and no block of it usable: "inf" in the text, "infinite" on the page, the table's cell too
printf 'hbm-trace 1\ncapacity 4MiB\ns 0\na x 4194204 act\ns 1\na y 50 temp\n' > "$dir/noblock.trace"
"$HBM" replay "$dir/noblock.trace" --policy bestfit --html "$dir/noblock.html" | grep -q "^bestfit  .*  inf  " &&
  grep -q "<td>infinite</td>" "$dir/noblock.html" && ! grep -q ">inf<" "$dir/noblock.html" ||
  { echo "FAIL an infinite ratio not said so on the page's table"; fail=1; }
cause holes bestfit fragmentation - 'hbm-trace 1\ncapacity 8MiB\na a 2MiB\na b 2MiB\na c 2MiB\na d 2MiB\nf a\nf c\na e 4MiB\n'
cause full bestfit capacity - 'hbm-trace 1\ncapacity 8MiB\na a 6MiB\na b 4MiB\n'
# a page's layout at the tightest moment starts from the trace's starting state,
# as the run does: bestfit's samples put it after event 3, 38 MiB live
printf 'hbm-trace 1\ncapacity 64MiB\ninit-seg 0x100000000 40MiB 0 large\ninit-blk 0x100000000 30MiB w 30MiB param\ninit-blk 0x101e00000 10MiB -\na x 4MiB act\nf x\na y 8MiB act\nf y\n' > "$dir/init3.trace"
"$HBM" replay "$dir/init3.trace" --policy bestfit --every 1 --html "$dir/init3.html" > /dev/null || fail=1
grep -q "tightest moment sampled (step 0, largest free 26.00 MiB, live 38.00 MiB" "$dir/init3.html" ||
  { echo "FAIL: the tightest moment's layout leaves out the starting state"; fail=1; }
# sizes that round alike are given in bytes, not as a contradiction
printf 'hbm-trace 1\ncapacity 4MiB\na x 2097153\na y 2MiB\n' > "$dir/round.trace"
"$HBM" replay "$dir/round.trace" --policy bestfit --html "$dir/round.html" | grep -q "request 2097152 B, free total 2097151 B, largest free 2096640 B, ratio 0.00: capacity$" &&
  grep -q "a 2097152 B request failed with 2097151 B free in total" "$dir/round.html" || { echo "FAIL: sizes that round alike"; fail=1; }
# and where the largest free block rounds to the request's text: the page's
# words (the layout's holes too) and its layout heading give bytes, as its table
printf 'hbm-trace 1\ncapacity 10MiB\na x 5MiB act\na y 1MiB temp\nf x\na big 5242881 act\n' > "$dir/round2.trace"
"$HBM" replay "$dir/round2.trace" --policy bestfit --html "$dir/round2.html" > /dev/null &&
  grep -q "a 5242881 B request failed with 9437184 B free in total (capacity 10.00 MiB minus 1.00 MiB live) but the largest free block only 5242880 B: fragmentation, not capacity (ratio 0.80 = 9437184 B / 5242880 B - 1)\. A perfectly packed device would have had room for it\. The layout then: 2 holes holding 9437184 B, the largest 5242880 B, across 1 range\." "$dir/round2.html" &&
  grep -q "<h3>Layout at the first failure (step 0, a 5242881 B request, largest free 5242880 B)</h3>" "$dir/round2.html" ||
  { echo "FAIL: a largest free that rounds alike with the request on the page: $(grep -o 'At step [^<]*\|<h3>Layout at[^<]*' "$dir/round2.html")"; fail=1; }
# a communication buffer that was itself live at the tightest moment raises no alarm
printf 'hbm-trace 1\ncapacity 10MiB\na w 1MiB param\ns 1\na c 8MiB comm\ns 2\nf c\na c2 8MiB comm\nf c2\ns 3\n' > "$dir/comm.trace"
"$HBM" replay "$dir/comm.trace" --policy bestfit --html "$dir/comm.html" > /dev/null || fail=1
grep -q "one that large was itself live at that moment" "$dir/comm.html" && ! grep -q "would not have fit" "$dir/comm.html" ||
  { echo "FAIL: a live communication buffer called a risk"; fail=1; }
# a block as large of another purpose is no communication buffer: that low is a risk
printf 'hbm-trace 1\ncapacity 10MiB\na w 1MiB param\ns 1\na big 8MiB act\ns 2\nf big\na c 8MiB comm\nf c\ns 3\n' > "$dir/notcomm.trace"
"$HBM" replay "$dir/notcomm.trace" --policy bestfit --html "$dir/notcomm.html" > /dev/null || fail=1
grep -q "is 8.00 MiB, so one that large would not have fit beside what was live at that moment" "$dir/notcomm.html" &&
  ! grep -q "itself live" "$dir/notcomm.html" || { echo "FAIL: a live block of another purpose taken for a communication buffer"; fail=1; }
# the same where the buffer live at that moment is the starting state's
printf 'hbm-trace 1\ncapacity 10MiB\ninit-seg 0x100000000 8MiB 0 large\ninit-blk 0x100000000 8MiB c 8MiB comm\ns 1\na w 1MiB param\ns 2\nf c\na c2 8MiB comm\nf c2\ns 3\n' > "$dir/initcomm.trace"
"$HBM" replay "$dir/initcomm.trace" --policy bestfit --html "$dir/initcomm.html" > /dev/null || fail=1
grep -q "never below 1.00 MiB (step 1), and the largest communication buffer is 8.00 MiB: one that large was itself live" "$dir/initcomm.html" &&
  ! grep -q "would not have fit" "$dir/initcomm.html" || { echo "FAIL: a starting state's live communication buffer called a risk"; fail=1; }

# Result figures at their edges: efficiency is peak live (requests, not their
# rounding) over peak reserved, and none (null, "-") where nothing was reserved
# (no allocation, every one failed, a start that did not fit); calls after the
# first step are 0 with one step mark; a run that replays no event (a trace
# without events, a starting state that does not fit) reports 0 ns per event,
# not NaN or the start's time.
printf 'hbm-trace 1\ncapacity 1GiB\ns 1\na x 1000\na y 3001\nf x\nf y\n' > "$dir/odd.trace"
printf 'hbm-trace 1\ncapacity 1GiB\n' > "$dir/none.trace"
printf 'hbm-trace 1\ncapacity 64MiB\ninit-seg 0x0 128MiB 0 large\ninit-blk 0x0 128MiB a\na b 1MiB\nf a\nf b\n' > "$dir/unfit.trace"
printf 'hbm-trace 1\ncapacity 2MiB\na x 4MiB\n' > "$dir/nofit.trace"
for t in odd none unfit nofit; do
  "$HBM" replay "$dir/$t.trace" --policy caching,zoned --json > "$dir/$t.json" 2> /dev/null
  "$HBM" replay "$dir/$t.trace" --policy caching,zoned --html "$dir/$t.html" > "$dir/$t.txt" 2> /dev/null
done
for t in none unfit nofit; do
  [ "$(grep -c '^[a-z]*  *0 B  *-  ' "$dir/$t.txt")" -eq 2 ] &&
    [ "$(grep -c "<td>0 B</td><td>-</td>" "$dir/$t.html")" -eq 2 ] &&
    [ "$(grep -c "efficiency - &middot;" "$dir/$t.html")" -eq 2 ] ||
    { echo "FAIL no efficiency without a reservation ($t): $(grep '^[a-z]' "$dir/$t.txt")"; fail=1; }
done
grep -q "No request failed. Peak reserved 0 B of 1.00 GiB (1.00 GiB to spare), peak live 0 B: nothing reserved, no efficiency. " "$dir/none.html" ||
  { echo "FAIL no efficiency in the words: $(grep -o 'No request failed[^<]*' "$dir/none.html" | head -1)"; fail=1; }
grep -q '^caching  .*  0\.[0-9][0-9][0-9]  ' "$dir/odd.txt" || { echo "FAIL an efficiency: $(cat "$dir/odd.txt")"; fail=1; }
python3 - "$dir" <<'PY' || fail=1
import json, sys
d = sys.argv[1]
bad = []
for p in json.load(open(d + "/odd.json"))["policies"]:
    if p["peak_live"] != 4001 or p["peak_allocated"] <= 4001 or p["efficiency"] != 4001 / p["peak_reserved"]:
        bad.append(("odd", p["policy"], p["peak_live"], p["peak_allocated"], p["efficiency"]))
    if p["backend_calls"] == 0 or p["backend_calls_after_first_step"] != 0:
        bad.append(("calls after a single step", p["policy"], p["backend_calls"], p["backend_calls_after_first_step"]))
for t in ("none", "unfit"):
    for p in json.load(open(d + "/" + t + ".json"))["policies"]:
        if p["ns_per_event"] != 0:
            bad.append((t, p["policy"], p["ns_per_event"]))
for t in ("none", "unfit", "nofit"):
    for p in json.load(open(d + "/" + t + ".json"))["policies"]:
        if p["peak_reserved"] != 0 or p["efficiency"] is not None:
            bad.append((t, p["policy"], "efficiency without a reservation", p["peak_reserved"], p["efficiency"]))
if bad:
    print("FAIL result figures:", bad); sys.exit(1)
print("ok   result figures: efficiency from live (none without a reservation), calls after one step 0, no time without events")
PY
# The table, the placed line, the counters and the samples to the letter, and
# the JSON's figures beside them: bestfit's device (the whole sim device) is
# not its reserve, allocated (512-byte blocks) is not live (the last sample's
# 100 B live are 512 allocated), two requests were refused by PyTorch and one
# placed, one failed; caching's calls come after its first step. Each text
# figure is the JSON's, in its column.
printf 'hbm-trace 1\ncapacity 64MiB\ns 1\na a 2MiB param\na b 2MiB\ns 2\nf a\na c 3000000 act\na r1 4MiB other 0 refused\nf r1\na r2 70MiB other 0 refused\nf r2\nf b\nf c\ns 3\na d 100 temp\n' \
  > "$dir/table.trace"
"$HBM" replay "$dir/table.trace" --policy bestfit,caching --samples --every 3 > "$dir/table.txt" || { echo "FAIL the table's replay exited $?"; fail=1; }
cat > "$dir/table.want" <<EOF
trace $dir/table.trace: 14 events, capacity 64.00 MiB, peak live 74.86 MiB

policy      peak reserv. efficiency  max frag  backend  first failure
bestfit        10.86 MiB      0.816     0.035        1  step 2 (event 8): request 70.00 MiB, free total 59.14 MiB, largest free 57.14 MiB, ratio 0.04: capacity (PyTorch refused it too)
              placed 1 of the 2 requests PyTorch refused (what the run would have asked next is not recorded)
              step 1 event 3: live 4.00 MiB, largest free 60.00 MiB, ratio 0.000, calls 1, allocs 2; live by purpose: other 2.00 MiB param 2.00 MiB
              step 2 event 6: live 4.86 MiB, largest free 57.14 MiB, ratio 0.035, calls 1, allocs 3; live by purpose: other 2.00 MiB act 2.86 MiB
              step 2 event 9: live 4.86 MiB, largest free 57.14 MiB, ratio 0.035, calls 1, allocs 5; live by purpose: other 2.00 MiB act 2.86 MiB
              step 2 event 12: live 0 B, largest free 64.00 MiB, ratio 0.000, calls 1, allocs 5
              step 3 event 14: live 100 B, largest free 64.00 MiB, ratio 0.000, calls 1, allocs 6; live by purpose: temp 100 B
caching        22.00 MiB      0.403     0.364        4  step 2 (event 8): request 70.00 MiB, free total 59.14 MiB, largest free 44.00 MiB, ratio 0.34: capacity (PyTorch refused it too)
              placed 1 of the 2 requests PyTorch refused (what the run would have asked next is not recorded)
              segment_allocs = 2
              segment_frees = 0
              alloc_retries = 1
              gc_releases = 0
              step 1 event 3: live 4.00 MiB, largest free 44.00 MiB, ratio 0.364, calls 1, allocs 2; live by purpose: other 2.00 MiB param 2.00 MiB
              step 2 event 6: live 4.86 MiB, largest free 44.00 MiB, ratio 0.344, calls 1, allocs 3; live by purpose: other 2.00 MiB act 2.86 MiB
              step 2 event 9: live 4.86 MiB, largest free 44.00 MiB, ratio 0.344, calls 3, allocs 5; live by purpose: other 2.00 MiB act 2.86 MiB
              step 2 event 12: live 0 B, largest free 64.00 MiB, ratio 0.000, calls 3, allocs 5
              step 3 event 14: live 100 B, largest free 62.00 MiB, ratio 0.032, calls 4, allocs 6; live by purpose: temp 100 B
EOF
cmp -s "$dir/table.want" "$dir/table.txt" || { echo "FAIL the table to the letter:"; diff "$dir/table.want" "$dir/table.txt"; fail=1; }
"$HBM" replay "$dir/table.trace" --policy bestfit,caching --samples --every 3 --json > "$dir/table.json" &&
  "$HBM" replay "$dir/table.trace" --policy bestfit,caching --json > "$dir/table_plain.json" || fail=1
python3 - "$dir" <<'PY' || fail=1
import json, os, sys
d = sys.argv[1]
def size(v):
    units, u, x = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"], 0, float(v)
    while x >= 1024 and u < 5: x, u = x / 1024, u + 1
    return "%d B" % v if u == 0 else "%.2f %s" % (x, units[u])
j, plain, text = json.load(open(d + "/table.json")), json.load(open(d + "/table_plain.json")), open(d + "/table.txt").read()
fixed = os.environ["RECORD_KEYS"].split()
assert (j["events"], j["capacity"], j["peak_live"]) == (14, 64 << 20, 78497472), j
want = ["trace %s: %d events, capacity %s, peak live %s" % (j["trace"], j["events"], size(j["capacity"]), size(j["peak_live"]))]
for p, q in zip(j["policies"], plain["policies"]):
    counters = [k for k in p if k not in fixed + ["oom", "samples"]]
    assert list(p) == fixed + counters + ["oom", "samples"] and list(q) == fixed + counters + ["oom"], (list(p), list(q))
    o = p["oom"]
    want.append("%-11s %12s %10.3f %9.3f %8d  step %d (event %d): request %s, free total %s, largest free %s, ratio %.2f: %s (PyTorch refused it too)"
                % (p["policy"], size(p["peak_reserved"]), p["efficiency"], p["max_frag"], p["backend_calls"], o["step"], o["event"],
                   size(o["request"]), size(o["free_total"]), size(o["largest_free"]), o["fragmentation"], o["cause"]))
    want.append("%-11s   placed %d of the %d requests PyTorch refused (what the run would have asked next is not recorded)"
                % ("", p["refused_placed"], p["refused_requests"]))
    want += ["%-11s   %s = %d" % ("", k, p[k]) for k in counters]
    want += ["%-11s   step %d event %d: live %s, largest free %s, ratio %.3f, calls %d, allocs %d%s"
             % ("", s["step"], s["event"], size(s["live"]), size(s["largest_free"]), s["fragmentation"], s["backend_calls"], s["alloc_events"],
                "; live by purpose:" + "".join(" %s %s" % (k, size(v)) for k, v in s["live_by_purpose"].items()) if s["live_by_purpose"] else "")
             for s in p["samples"]]
    assert all(sum(s["live_by_purpose"].values()) == s["live"] for s in p["samples"]), p["samples"]
lines = [l for l in text.split("\n") if l and not l.startswith("policy ")]
assert lines == want, "\n".join(a + "\n" + b for a, b in zip(lines, want) if a != b) or (len(lines), len(want))
b, c = j["policies"]
assert (b["peak_device"], b["peak_reserved"], b["peak_allocated"], b["peak_live"]) == (64 << 20, 11388928, 9291776, 9291456), b
assert (b["failures"], b["refused_requests"], b["refused_placed"], b["alloc_events"]) == (1, 2, 1, 6), b
assert (c["backend_calls"], c["backend_calls_after_first_step"], c["peak_device"]) == (4, 3, c["peak_reserved"]), c
assert [s["allocated"] for s in b["samples"]] == [4 << 20, 5097472, 5097472, 0, 512], b["samples"]
assert [s["reserved"] - s["allocated"] for s in c["samples"]] != [0] * 5, c["samples"]
print("ok   the table to the letter, each figure the JSON's")
PY
# a request as large as the largest free that fails (that memory is another
# stream's cache) is said in sizes, not bytes: they differ
printf 'hbm-trace 1\ncapacity 64MiB\na big 40MiB 1\nf big\na s 10MiB 1\na t 30MiB 2\n' > "$dir/stream.trace"
"$HBM" replay "$dir/stream.trace" --policy caching |
  grep -q "^caching        40.00 MiB      1.000     0.800        3  step 0 (event 3): request 30.00 MiB, free total 54.00 MiB, largest free 30.00 MiB, ratio 0.80: rules$" ||
  { echo "FAIL a failed request as large as the largest free: $("$HBM" replay "$dir/stream.trace" --policy caching)"; fail=1; }
# sizes are given in bytes where the request and the free total alone print
# alike (the largest free does not): "request 2.00 MiB, free total 2.00 MiB"
printf 'hbm-trace 1\ncapacity 4MiB\na A 1048576\na B 1048064\na C 1048576\na D 1048576\nf A\nf C\na E 2098176\n' > "$dir/bytes.trace"
"$HBM" replay "$dir/bytes.trace" --policy bestfit |
  grep -q "^bestfit         4.00 MiB      1.000     1.000        1  step 0 (event 6): request 2098176 B, free total 2097664 B, largest free 1048576 B, ratio 1.00: capacity$" ||
  { echo "FAIL sizes alike in request and free total only: $("$HBM" replay "$dir/bytes.trace" --policy bestfit)"; fail=1; }
# a request PyTorch refused that the policy did not place either: no "placed" line
printf 'hbm-trace 1\ncapacity 4MiB\na r 8MiB other 0 refused\nf r\na x 1MiB\n' > "$dir/refno.trace"
"$HBM" replay "$dir/refno.trace" --policy bestfit > "$dir/refno.txt" && grep -q "(PyTorch refused it too)$" "$dir/refno.txt" &&
  ! grep -q "placed" "$dir/refno.txt" || { echo "FAIL a refused request not placed: $(cat "$dir/refno.txt")"; fail=1; }
# a starting state of exactly the capacity live, in segments that do not fit
# as recorded, is not "more than the capacity"
printf 'hbm-trace 1\ncapacity 64MiB\ninit-seg 0x0 34MiB 0 large\ninit-blk 0x0 32MiB a 32MiB\ninit-blk 0x2000000 2MiB -\ninit-seg 0x10000000 34MiB 0 large\ninit-blk 0x10000000 32MiB b 32MiB\ninit-blk 0x12000000 2MiB -\na x 10\n' \
  > "$dir/eqcap.trace"
"$HBM" replay "$dir/eqcap.trace" --policy caching |
  grep -q "^caching              0 B          -     0.000        2  before event 0: the starting state does not fit as recorded (64.00 MiB live, free total 64.00 MiB, largest free 64.00 MiB): start$" ||
  { echo "FAIL a starting state of exactly the capacity: $("$HBM" replay "$dir/eqcap.trace" --policy caching)"; fail=1; }
# every counter in the text is the JSON's, whole: past six digits too
# (zoned's peak_touched_bytes, compact's moved bytes on step 437)
"$HBM" replay "$trace" --policy zoned,compact --device sim:96GiB > "$dir/counters.txt" &&
  "$HBM" replay "$trace" --policy zoned,compact --device sim:96GiB --json > "$dir/counters.json" || fail=1
python3 - "$dir" <<'PY' || fail=1
import json, os, sys
d = sys.argv[1]
known = set(os.environ["RECORD_KEYS"].split() + ["oom"])
want = ["%-11s   %s = %d" % ("", k, v) for p in json.load(open(d + "/counters.json"))["policies"] for k, v in p.items() if k not in known]
got = [l for l in open(d + "/counters.txt").read().split("\n") if l.startswith("   ")]
assert got == want and any(len(l.split(" = ")[1]) > 6 for l in got), (got, want)
print("ok   %d counters in the text, each the JSON's" % len(got))
PY
# a trace that names no capacity, replayed without one, is bad input: said, exit 2, nothing printed
printf 'hbm-trace 1\na x 1MiB\n' > "$dir/nocap.trace"
"$HBM" replay "$dir/nocap.trace" --policy bestfit > "$dir/out" 2> "$dir/err"; rc=$?
[ $rc -eq 2 ] && [ ! -s "$dir/out" ] &&
  [ "$(cat "$dir/err")" = "hbm: $dir/nocap.trace names no device capacity: pass --capacity SIZE (e.g. --capacity 80GiB) or --device SPEC" ] ||
  { echo "FAIL a trace without a capacity: exit $rc, $(cat "$dir/err")"; fail=1; }
# one event, not "1 events"; a run without a failure says none
printf 'hbm-trace 1\na a 2MiB\n' > "$dir/one.trace"
[ "$("$HBM" replay "$dir/one.trace" --capacity 4MiB --policy bestfit)" = "trace $dir/one.trace: 1 event, capacity 4.00 MiB, peak live 2.00 MiB

policy      peak reserv. efficiency  max frag  backend  first failure
bestfit         2.00 MiB      1.000     0.000        1  none" ] || { echo "FAIL one event: $("$HBM" replay "$dir/one.trace" --capacity 4MiB --policy bestfit)"; fail=1; }
# the page's layout at the tightest moment is replayed as the run was: on
# the device given and under the settings given (on the trace's 128 MiB its
# largest free is 68 MiB; without max_split_size_mb, caching splits the 30 MiB
# segment and 186 MiB is free in one piece)
printf 'hbm-trace 1\ncapacity 128MiB\ns 1\na a 30MiB\nf a\ns 2\na b 5MiB\na c 40MiB\ns 3\nf b\nf c\n' > "$dir/split.trace"
"$HBM" replay "$dir/split.trace" --policy caching --alloc-conf max_split_size_mb:20 --capacity 256MiB --every 1 --html "$dir/split.html" > /dev/null &&
  grep -q "Layout at the tightest moment sampled after steps 0 and 1 (step 2, largest free 196.00 MiB, live 45.00 MiB; no request failed)" "$dir/split.html" ||
  { echo "FAIL the layout replayed otherwise than the run: $(grep -o 'Layout at the tightest[^<]*' "$dir/split.html")"; fail=1; }
# a page that cannot be written is a failed run: exit 1, said, no "report:" line
if [ -w /dev/full ]; then
  "$HBM" replay "$dir/one.trace" --capacity 4MiB --policy bestfit --html /dev/full > "$dir/out" 2> "$dir/err"; rc=$?
  [ $rc -eq 1 ] && grep -q "/dev/full: write failed: " "$dir/err" && ! grep -q "report:" "$dir/out" ||
    { echo "FAIL --html /dev/full: exit $rc, $(cat "$dir/err")"; fail=1; }
fi
# the JSON's capacity is the device's, not the trace's (which names none here)
"$HBM" replay "$dir/one.trace" --capacity 4MiB --policy bestfit --json | grep -q '^{"trace":"[^"]*one.trace","events":1,"capacity":4194304,"peak_live":2097152,' ||
  { echo "FAIL the JSON's capacity: $("$HBM" replay "$dir/one.trace" --capacity 4MiB --policy bestfit --json)"; fail=1; }
# A policy that cannot run costs the comparison one row, not all: zoned
# reserves 16 times a host device's capacity of address space, which no
# x86-64 host with 47-bit addresses has for 8 TiB; caching after it still runs,
# and the page shows both, zoned's error in its place (no layout of a run that
# could not go on is asked for).
small="$HBM_ROOT/tests/fixtures/step437.trace"
"$HBM" replay "$small" --device host:8TiB --policy zoned,caching --html "$dir/two.html" > "$dir/two.txt" 2> "$dir/two.err"; rc=$?
if [ $rc -eq 0 ] && ! grep -q 'replay error' "$dir/two.txt"; then
  echo "skip one policy that cannot run: this host reserves 128 TiB of address space"
elif [ $rc -eq 2 ] && grep -q '^hbm: host device: the host cannot reserve 8.00 TiB' "$dir/two.err"; then
  echo "skip one policy that cannot run: the device itself cannot open (address space limited, as under valgrind)"
else
  [ $rc -eq 1 ] || { echo "FAIL one policy that cannot run: exit $rc, want 1"; fail=1; }
  grep -q '^zoned  *replay error: ' "$dir/two.txt" || { echo "FAIL no error row for zoned:"; cat "$dir/two.txt"; fail=1; }
  grep -q '^caching  *[0-9]' "$dir/two.txt" || { echo "FAIL caching did not run after zoned:"; cat "$dir/two.txt"; fail=1; }
  grep -q 'through zoned failed' "$dir/two.err" || { echo "FAIL stderr does not name zoned:"; cat "$dir/two.err"; fail=1; }
  grep -q 'not drawn' "$dir/two.err" && { echo "FAIL a layout asked of the run that failed:"; cat "$dir/two.err"; fail=1; }
  grep -q 'replay error: out of host memory' "$dir/two.html" && grep -q 'No request failed in 2 steps' "$dir/two.html" ||
    { echo "FAIL the page lacks zoned's error or caching's run"; fail=1; }
  "$HBM" replay "$small" --device host:8TiB --policy zoned,caching --json 2> /dev/null | python3 -c '
import json, sys
p = json.load(sys.stdin)["policies"]
assert [x["policy"] for x in p] == ["zoned", "caching"], p
assert p[0]["error"] and "peak_reserved" not in p[0], p[0]
assert p[1]["error"] is None and p[1]["peak_reserved"] > 0, p[1]
print("ok   one policy that cannot run: an error row, the next policy replayed")' || fail=1
fi
# A policy that cannot even open (made to run out of host memory as it
# starts, under gdb) leaves a cleared result: its row still names it, and the
# capacity said is the device's, from the run that opened it (200 GiB here,
# not the trace's 96 GiB, nor 0). An error that is the input's fault (here
# "unsupported") would be every policy's: the comparison stops at once, exit
# 2, no table, the next policy not run.
if command -v gdb > /dev/null 2>&1; then
  for err in 7 5; do
    printf 'set pagination off\nset confirm off\ntbreak hbm_replay\nrun\ntbreak zoned_create\ncontinue\nreturn (int)-%s\ncontinue\n' \
      $err > "$dir/open.gdb"
    # (LeakSanitizer cannot run under ptrace: in the sanitizer build it would change the exit)
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" gdb -q -batch -x "$dir/open.gdb" --args "$HBM" replay "$small" --device sim:200GiB --policy zoned,caching \
      --html "$dir/open$err.html" > "$dir/open$err.txt" 2>&1
  done
  if ! grep -q 'exited with code 0[12]' "$dir/open7.txt" || ! grep -q 'exited with code 0[12]' "$dir/open5.txt"; then
    echo "skip a policy that cannot open: gdb could not run hbm: $(tail -1 "$dir/open7.txt")"
  else
    grep -q 'exited with code 01' "$dir/open7.txt" && grep -q '^zoned  *replay error: out of host memory$' "$dir/open7.txt" &&
      grep -q '^caching  *[0-9]' "$dir/open7.txt" && grep -q 'capacity 200.00 GiB, peak live 96.00 GiB$' "$dir/open7.txt" ||
      { echo "FAIL a policy that cannot open:"; cat "$dir/open7.txt"; fail=1; }
    grep -q '<br>capacity 200.00 GiB &middot; 21 events' "$dir/open7.html" && grep -q 'replay error: out of host memory' "$dir/open7.html" ||
      { echo "FAIL a policy that cannot open: the page lacks its error or the device's capacity"; fail=1; }
    grep -q 'exited with code 02' "$dir/open5.txt" && grep -q 'through zoned failed: ' "$dir/open5.txt" &&
      ! grep -q '^zoned\|^caching\|^policy\|through caching' "$dir/open5.txt" && [ ! -e "$dir/open5.html" ] ||
      { echo "FAIL bad input in the first policy does not stop the comparison:"; cat "$dir/open5.txt"; fail=1; }
    echo "ok   a policy that cannot open: its row named, the device's capacity; bad input stops at once"
  fi
  # A run that fails after its first sample (zoned's first request made to
  # run out of host memory once a sample was taken) has samples, but the
  # page must show its error, not a layout drawn from them.
  printf 'set pagination off\nset confirm off\ntbreak hbm_replay\nrun\ntbreak take_sample\ncontinue\ntbreak zoned_alloc\ncontinue\nreturn (int)-7\ncontinue\n' \
    > "$dir/late.gdb"
  ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" gdb -q -batch -x "$dir/late.gdb" --args "$HBM" replay "$small" --device sim:200GiB --policy zoned,caching \
    --every 1 --html "$dir/late.html" > "$dir/late.txt" 2>&1
  if ! grep -q 'exited with code 0[12]' "$dir/late.txt"; then
    echo "skip a run that fails after its first sample: gdb could not run hbm: $(tail -1 "$dir/late.txt")"
  else
    if grep -q 'exited with code 01' "$dir/late.txt" && grep -q '^zoned  *replay error: out of host memory$' "$dir/late.txt" &&
      ! grep -q 'not drawn' "$dir/late.txt" && grep -q '<b>zoned</b>: The replay could not run (out of host memory).' "$dir/late.html" &&
      ! grep -q '<b>zoned</b>: No request failed' "$dir/late.html"; then
      echo "ok   a run that fails after its first sample: its error on the page, no layout"
    else
      echo "FAIL a run that fails after its first sample:"; cat "$dir/late.txt"; fail=1
    fi
  fi
  # A sample the run could not keep (its array's growth made to fail once)
  # leaves the run short of it: said as the run's error, not a report
  # silently missing a moment.
  printf 'set pagination off\nset confirm off\ntbreak hbm_report_keep_sample\nrun\ntbreak realloc\ncontinue\nreturn (void *)0\ncontinue\n' \
    > "$dir/keep.gdb"
  ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" gdb -q -batch -x "$dir/keep.gdb" --args "$HBM" replay "$small" --device sim:200GiB \
    --policy zoned,caching --samples --json > "$dir/keep.txt" 2>&1
  if ! grep -q 'exited with code 0[12]\|exited normally' "$dir/keep.txt" || ! grep -q '^{' "$dir/keep.txt"; then
    echo "skip a sample not kept: gdb could not run hbm: $(tail -1 "$dir/keep.txt")"
  elif grep -q 'exited with code 01' "$dir/keep.txt" &&
    grep -q '"policy":"zoned","alloc_conf":null,"error":"out of host memory"}' "$dir/keep.txt" &&
    grep -q '"policy":"caching","alloc_conf":null,"error":null,' "$dir/keep.txt"; then
    echo "ok   a sample not kept: the run's error"
  else
    echo "FAIL a sample not kept:"; grep -v '^\[' "$dir/keep.txt" | tail -3 | cut -c1-400; fail=1
  fi
else
  echo "skip a policy that cannot open: no gdb"
fi
exit $fail
