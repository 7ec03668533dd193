#!/bin/sh
# hbm bench all: its own --help, and an option not every benchmark takes is
# refused before any benchmark runs (exit 2, naming it), not passed on bare;
# an argument no benchmark takes (a trace named bare) is refused by each, not
# ignored while the defaults are measured. Runs no benchmark at its defaults
# (they are long): only alloc and compact, tiny, for their JSON names (and
# alloc's ratio to glibc malloc, in JSON and text). Every benchmark's --help
# names the top-level keys its --json has, run tiny.
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

# hbm bench with no name says so and prints the list of benchmarks (exit 2); a
# name that is none of them is named back, with where to look
"$HBM" bench > "$out" 2> "$err"; rc=$?
if [ $rc -ne 2 ] || [ -s "$out" ] || [ "$(head -n 1 "$err")" != "hbm: bench: expected a benchmark NAME" ] ||
   ! sed -n 2p "$err" | grep -q "^usage: hbm bench NAME" || ! grep -q "^  alloc " "$err"; then
  echo "FAIL bench with no name: exit $rc, stdout '$(cat "$out")', stderr '$(head -n 3 "$err")'"; fail=1
else echo "ok   bench with no name: the list, exit 2"; fi
"$HBM" bench nosuch > "$out" 2> "$err"; rc=$?
if [ $rc -ne 2 ] || [ -s "$out" ] || [ "$(cat "$err")" != "hbm: unknown benchmark 'nosuch' (try: hbm bench --help)" ]; then
  echo "FAIL bench nosuch: exit $rc, stdout '$(cat "$out")', stderr '$(cat "$err")'"; fail=1
else echo "ok   bench nosuch: $(cat "$err")"; fi

# bench alloc: live blocks whose sizes cannot fit the allocators' 1 TiB are
# refused before any round (every round would fail, or malloc map terabytes)
"$HBM" bench alloc --live 1000000 --pairs 10 > "$out" 2> "$err"; rc=$?
if [ $rc -ne 2 ] || [ -s "$out" ] || ! grep -q "bench alloc: --live 1000000 holds about .*; give --live [0-9]* or fewer" "$err"; then
  echo "FAIL bench alloc --live 1000000: exit $rc, stdout '$(head -n 2 "$out")', stderr '$(cat "$err")'"; fail=1
else echo "ok   bench alloc --live 1000000: $(cat "$err")"; fi

# Small options, so that a benchmark that ignores the stray argument ends soon.
for args in "alloc --pairs 10" "replay --steps 1 --rounds 1 --policy bestfit" "gen --steps 1" \
            "compact --capacity 256MiB --rounds 1" "adamw --params 1024 --reps 1" "sweep --jobs 1 --steps 2"; do
  name=${args%% *}
  # shellcheck disable=SC2086
  "$HBM" bench $args stray.trace > "$out" 2> "$err"
  rc=$?
  if [ $rc -ne 2 ] || [ -s "$out" ] || ! grep -q "bench $name: unexpected argument 'stray.trace'" "$err"; then
    echo "FAIL bench $args stray.trace: exit $rc, stdout '$(head -n 2 "$out")', stderr '$(cat "$err")'"; fail=1
  else echo "ok   bench $name stray.trace: $(cat "$err")"; fi
done

# Each benchmark's --help lists its JSON's top-level keys, every one and no
# other: the list after "JSON keys:" up to its first ';' or '.' outside
# brackets, what is in (), [] and {} left out. bench all has none of its own.
if command -v python3 >/dev/null; then
  for args in "alloc --pairs 1000 --live 16" "adamw --params 1024 --reps 1 --threads 1" \
              "replay --steps 1 --rounds 1 --policy bestfit" "gen --steps 1" \
              "compact --capacity 256MiB --rounds 1" "sweep --jobs 1 --steps 2"; do
    name=${args%% *}
    "$HBM" bench "$name" --help > "$err" 2>&1
    # shellcheck disable=SC2086
    "$HBM" bench $args --json > "$out" 2> /dev/null
    if python3 - "$err" "$out" <<'EOF'
import json, re, sys
text = open(sys.argv[1]).read()
at = text.index("JSON keys:") + len("JSON keys:")
depth, end = 0, at
while end < len(text) and (depth or text[end] not in ";."):
    depth += (text[end] in "([{") - (text[end] in ")]}")
    end += 1
flat, group = text[at:end], r"\([^()]*\)|\[[^][]*\]|\{[^{}]*\}"
while re.search(group, flat):
    flat = re.sub(group, "", flat)
said = [re.match(r"\s*([a-z_]+)", item).group(1) for item in flat.split(",")]
has = list(json.load(open(sys.argv[2])))
assert said == has, ("help", said, "json", has)
EOF
    then echo "ok   bench $name --help lists its JSON keys"
    else echo "FAIL bench $name --help's JSON keys: $(head -c 300 "$out")"; fail=1; fi
  done
fi

# JSON names as replay's (docs/report.md): a count of blocks is live_blocks
# ("live" is bytes), and compact's heap reports live and free_total bytes.
if command -v python3 >/dev/null; then
  "$HBM" bench alloc --json --pairs 1000 --live 64 > "$out" 2> "$err" &&
    python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["live_blocks"] == 64 and "live" not in d, d' < "$out" ||
    { echo "FAIL bench alloc --json: $(cat "$out" "$err")"; fail=1; }
  # hbm against glibc malloc side by side, with mimalloc or without: the
  # ratio of the two figures, and as many sizes as the text's table says
  python3 - "$out" <<'EOF' || { echo "FAIL bench alloc --json ratios and sizes: $(cat "$out")"; fail=1; }
import json, sys
d = json.load(open(sys.argv[1]))
assert 0 < d["small_sizes"] <= d["sizes"], d
for p in ("", "small_"):
    r = d[p + "ratio_hbm_glibc"]
    assert abs(r - d[p + "hbm_ns"] / d[p + "glibc_ns"]) <= 1e-9 * r, (p, d)
    assert (d[p + "ratio_hbm_mimalloc"] is None) == (d[p + "mimalloc_ns"] is None), (p, d)
EOF
  # the sizes are those of bench/alloc_sizes.h, and the small ones those up to
  # 1 MiB inclusive, as the table's heading says
  python3 - "$out" "${HBM_ROOT:-.}/bench/alloc_sizes.h" <<'EOF' || { echo "FAIL bench alloc --json sizes: $(cat "$out")"; fail=1; }
import json, re, sys
d = json.load(open(sys.argv[1]))
text = open(sys.argv[2]).read()
sizes = [int(x) for x in re.findall(r"(\d+)ull", text[text.index("{"):])]
assert d["sizes"] == len(sizes) and d["small_sizes"] == sum(s <= 1 << 20 for s in sizes), (d, len(sizes))
assert 1 << 20 in sizes  # the boundary is one of the sizes
EOF
  "$HBM" bench alloc --pairs 1000 --live 64 > "$err" 2>&1
  sizes=$(python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["sizes"], d["small_sizes"])' < "$out")
  # shellcheck disable=SC2086
  set -- ${sizes:-none none}
  grep -q "^real request sizes  *$1  *$2$" "$err" && grep -q "^ratio hbm / glibc  *[0-9.]*  *[0-9.]*$" "$err" ||
    { echo "FAIL bench alloc text: no ratio to glibc, or other sizes than the JSON's ($sizes): $(cat "$err")"; fail=1; }
  # mimalloc where it can be loaded, and then not as the tool's malloc: linked
  # in, it replaced malloc everywhere and the "glibc" row timed mimalloc
  if python3 -c 'import ctypes; ctypes.CDLL("libmimalloc.so.2")' 2> /dev/null; then
    python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["mimalloc_ns"] is not None, d' < "$out" ||
      { echo "FAIL bench alloc: mimalloc is installed but not timed: $(cat "$out")"; fail=1; }
  fi
  if command -v ldd > /dev/null && ldd "$HBM" 2> /dev/null | grep -q mimalloc; then
    echo "FAIL the tool is linked with mimalloc, whose malloc replaces glibc's: $(ldd "$HBM" | grep mimalloc)"; fail=1
  fi
  "$HBM" bench compact --json --capacity 256MiB --rounds 1 > "$out" 2> "$err" &&
    python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["free_total"] == d["capacity"] - d["live"] > 0 and d["live_blocks"] > 0, d' < "$out" ||
    { echo "FAIL bench compact --json: $(cat "$out" "$err")"; fail=1; }
  # the largest block it drew is the one it reports: --max-block, cut to 1/16 of the capacity
  "$HBM" bench compact --json --capacity 256MiB --rounds 1 --max-block 512MiB > "$err.json" 2> "$err" &&
    python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["max_block"] == 16 << 20, d' < "$err.json" &&
    "$HBM" bench compact --json --capacity 256MiB --rounds 1 --max-block 1MiB > "$err.json" 2> "$err" &&
    python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["max_block"] == 1 << 20, d' < "$err.json" ||
    { echo "FAIL bench compact --json max_block: $(cat "$err.json" "$err")"; fail=1; }
  rm -f "$err.json"
  # its figures hold together: one round measured, bytes moved by each pass,
  # rates that are the bytes over the times, and (one round) the ratios those
  # of the two times
  python3 - "$out" <<'EOF' || { echo "FAIL bench compact --json figures: $(cat "$out")"; fail=1; }
import json, math, sys
d = json.load(open(sys.argv[1]))
assert d["rounds"] == 1 and d["verified"] is True, d
assert 0 < d["min_moved_bytes"] <= d["moved_bytes"] and d["moved_blocks"] > 0 and d["copies"] > 0, d
for k in ("compact_gbps", "memmove_gbps", "memmove_disjoint_gbps", "compact_seconds", "memmove_seconds",
          "partial_compact_gbps", "partial_memmove_gbps", "ratio", "ratio_disjoint"):
    assert isinstance(d[k], float) and math.isfinite(d[k]) and d[k] > 0, (k, d)
close = lambda a, b: abs(a - b) <= 1e-6 * abs(b)
assert close(d["compact_gbps"], d["moved_bytes"] / d["compact_seconds"] / 1e9), d
assert close(d["memmove_gbps"], d["moved_bytes"] / d["memmove_seconds"] / 1e9), d
assert close(d["ratio"], d["compact_gbps"] / d["memmove_gbps"]), d
assert d["largest_free"] < d["request"] < d["free_total"], d
assert 0 < d["partial_min_moved_bytes"] <= d["partial_moved_bytes"] <= d["partial_full_moved_bytes"] == d["moved_bytes"], d
EOF
  # --max-block: a multiple of 64 KiB, from 64 KiB
  "$HBM" bench compact --json --capacity 256MiB --rounds 1 --max-block 64KiB > "$out" 2> "$err" ||
    { echo "FAIL bench compact --max-block 64KiB: $(cat "$err")"; fail=1; }
  "$HBM" bench compact --capacity 256MiB --rounds 1 --max-block 100KiB > "$out" 2> "$err"; rc=$?
  if [ $rc -ne 2 ] || ! grep -q "bench compact: --max-block: expected a multiple of 64KiB, got '100KiB'" "$err"; then
    echo "FAIL bench compact --max-block 100KiB: exit $rc, $(cat "$err")"; fail=1
  fi
  # bench gen: the preset's events, the two rates and their ratio, and the
  # goal judged on the model's rate
  events=$("$HBM" gen llm --preset 7b-1gpu-80g --steps 1 --json -o /dev/null 2> /dev/null |
           python3 -c 'import json,sys; print(json.load(sys.stdin)["events"])')
  "$HBM" bench gen --preset 7b-1gpu-80g --steps 1 --json > "$out" 2> "$err" &&
    python3 - "$out" "${events:-0}" <<'EOF' || { echo "FAIL bench gen --json: $(cat "$out" "$err")"; fail=1; }
import json, sys
d = json.load(open(sys.argv[1]))
assert d["bench"] == "gen" and d["preset"] == "7b-1gpu-80g" and d["steps"] == 1, d
assert d["events"] == int(sys.argv[2]) > 0, d
assert d["gen_events_per_s"] > 0 and d["builder_events_per_s"] > 0, d
r = d["ratio_gen_builder"]
assert abs(r - d["gen_events_per_s"] / d["builder_events_per_s"]) <= 1e-9 * r, d
assert d["meets_goal"] == (d["gen_events_per_s"] >= d["goal_events_per_s"] == 1e7), d
EOF
  "$HBM" bench gen --preset 7b-1gpu-80g --steps 1 > "$out" 2> "$err" &&
    grep -q "^gen llm --preset 7b-1gpu-80g, 1 step: ${events:-0} events per round, best of 3$" "$out" &&
    grep -q "^  ratio  *[0-9.]* (model / builder); goal >= 10 M events/s: \(met\|NOT met\)$" "$out" ||
    { echo "FAIL bench gen text: $(cat "$out" "$err")"; fail=1; }
fi
exit $fail
