#!/bin/sh
# hbm bench adamw: --help works, --json carries the keys the issue names (and
# the fused step agrees with the reference and the unfused sequence: exit 0),
# bad options exit 2. Small and short: timings are never asserted here.
set -u
fail=0
out=$(mktemp)
help_out=$(mktemp)
trap 'rm -f "$out" "$help_out"' EXIT

"$HBM" bench adamw --help > "$out" 2>&1 || { echo "FAIL --help exits non-zero"; fail=1; }
cp "$out" "$help_out"
grep -q "usage: hbm bench adamw" "$out" || { echo "FAIL --help prints no usage"; fail=1; }

"$HBM" bench adamw --json --params 100003 --reps 1 --threads 2 > "$out" 2>&1
rc=$?
[ $rc -eq 0 ] || { echo "FAIL --json exits $rc:"; cat "$out"; fail=1; }
for key in params fused_ms unfused_ms fused_gbps copy_gbps max_rel_err; do
  grep -q "\"$key\":" "$out" || { echo "FAIL key $key missing: $(cat "$out")"; fail=1; }
done
grep -q '"params":100003' "$out" || { echo "FAIL params not echoed: $(cat "$out")"; fail=1; }
grep -q '"max_rel_err":0[,}]' "$out" || { echo "FAIL fused step differs from the reference: $(cat "$out")"; fail=1; }
# the figures hold together: every time measured (finite, above 0), each rate
# the bytes over its time, each ratio that of its two figures, nothing differs
if command -v python3 > /dev/null; then
  python3 - "$out" <<'EOF' || { echo "FAIL --json figures: $(cat "$out")"; fail=1; }
import json, math, sys
d = json.load(open(sys.argv[1]))
for k in ("fused_ms", "unfused_ms", "unfused_five_pass_ms", "fused_gbps", "copy_gbps", "stream_copy_gbps"):
    assert isinstance(d[k], float) and math.isfinite(d[k]) and d[k] > 0, (k, d)
close = lambda a, b: abs(a - b) <= 1e-9 * abs(b)
assert close(d["fused_gbps"], d["params"] * 28 / (d["fused_ms"] * 1e6)), d
assert close(d["unfused_vs_fused"], d["unfused_ms"] / d["fused_ms"]), d
assert close(d["five_pass_vs_fused"], d["unfused_five_pass_ms"] / d["fused_ms"]), d
assert close(d["fused_vs_copy"], d["fused_gbps"] / d["copy_gbps"]), d
assert close(d["fused_vs_stream_copy"], d["fused_gbps"] / d["stream_copy_gbps"]), d
assert d["unfused_mismatches"] == 0 and d["reference_mismatches"] == 0, d
assert d["impl"] in ("scalar", "avx2", "avx512") and d["threads"] == 2 and d["reps"] == 1, d
EOF
fi
echo "ok   json: $(cat "$out")"
# the copy baselines move the step's 28 bytes a parameter (read + written):
# their rate times their time is that many bytes, give or take the printed
# digits and the 64-byte rounding
"$HBM" bench adamw --params 1000000 --reps 1 --threads 1 > "$out" 2>&1
for row in "memcpy of 28 B/param" "non-temporal copy of 28 B/param"; do
  bytes=$(sed -n "s|^  $row  *\([0-9.]*\) ms  *\([0-9.]*\) GB/s.*|\1 \2|p" "$out" | awk '{printf "%.0f", $1 * $2 * 1e6}')
  if [ -z "$bytes" ] || [ "$bytes" -lt 26600000 ] || [ "$bytes" -gt 29400000 ]; then
    echo "FAIL '$row' moves ${bytes:-?} bytes, not about 28,000,000: $(cat "$out")"; fail=1
  else echo "ok   $row: about $bytes bytes"; fi
done

# --opt=value, as every command takes it
"$HBM" bench adamw --params=64Ki --reps=1 --threads=1 --json > "$out" 2>&1
grep -q '"params":65536,' "$out" || { echo "FAIL --params=64Ki: $(cat "$out")"; fail=1; }

for bad in "--params 0" "--params lots" "--reps 0" "--threads 65" "--impl avx3" "--frobnicate" "--params" "extra"; do
  # shellcheck disable=SC2086
  "$HBM" bench adamw $bad > "$out" 2>&1
  rc=$?
  if [ $rc -ne 2 ]; then echo "FAIL '$bad' exits $rc, expected 2"; fail=1
  else echo "ok   '$bad': $(cat "$out")"; fi
done
# one thread, one round: said in the singular
"$HBM" bench adamw --params 64Ki --reps 1 --threads 1 > "$out" 2>&1
head -n 1 "$out" | grep -q ", 1 thread, best of 1 interleaved round$" || { echo "FAIL plurals: $(head -n 1 "$out")"; fail=1; }
"$HBM" bench adamw --params 1 --reps 1 > "$out" 2>&1
head -n 1 "$out" | grep -q "^adamw: 1 parameter, " || { echo "FAIL plurals: $(head -n 1 "$out")"; fail=1; }
# the threads printed are those used: one for the single-threaded reference,
# and at most one per 64 parameters (hbm.h) however many are asked for
"$HBM" bench adamw --impl reference --threads 2 --params 64Ki --reps 1 > "$out" 2>&1
head -n 1 "$out" | grep -q ", impl reference, 1 thread, " || { echo "FAIL reference threads: $(head -n 1 "$out")"; fail=1; }
"$HBM" bench adamw --params 100 --threads 64 --reps 1 --json > "$out" 2>&1
threads=$(sed -n 's/.*"threads":\([0-9]*\).*/\1/p' "$out")
if [ -z "$threads" ] || [ $(( (threads - 1) * 64 )) -ge 100 ]; then echo "FAIL --params 100 --threads 64: threads '$threads' reported"; fail=1
else echo "ok   --params 100 --threads 64: $threads threads reported"; fi
# automatic threads on a step too small to share: the step runs on one, and so says the report;
# --help says where that ends (one per 65,536 parameters), as the code has it
grep -q "default 0: one per CPU this$" "$help_out" && grep -q "process may run on, at most one per 65,536 parameters, so that fewer$" "$help_out" &&
  grep -q "than 131,072 take 1, and at most 64); N > 0: at most one per 64$" "$help_out" ||
  { echo "FAIL --help on automatic threads: $(grep -A3 -- --threads "$help_out")"; fail=1; }
"$HBM" bench adamw --params 131071 --reps 1 --impl scalar > "$out" 2>&1
head -n 1 "$out" | grep -q ", 1 thread, " || { echo "FAIL --params 131071 automatic threads: $(head -n 1 "$out")"; fail=1; }
"$HBM" bench adamw --params 32Ki --reps 1 --impl scalar > "$out" 2>&1
head -n 1 "$out" | grep -q ", 1 thread, " || { echo "FAIL --params 32Ki automatic threads: $(head -n 1 "$out")"; fail=1; }
# a value that is the next option is no value
"$HBM" bench adamw --impl --reps 3 > "$out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "^hbm: bench adamw: --impl needs a value" "$out" || { echo "FAIL --impl --reps 3: exit $rc, $(cat "$out")"; fail=1; }
# more parameters than the host can hold: refused before anything is allocated
# (exit 2, naming the memory needed and available), not left to the OOM killer
"$HBM" bench adamw --params 1000000000000 --reps 1 > "$out" 2>&1
rc=$?
if [ $rc -ne 2 ] || ! grep -q "host memory, more than the .* available" "$out"; then
  echo "FAIL --params 1e12: exit $rc, expected 2 naming host memory: $(cat "$out")"; fail=1
else echo "ok   --params 1e12: $(cat "$out")"; fi
# host memory that runs out part way through the set-up (an address-space
# limit under the host check): exit 1 naming it, not a crash freeing the
# states never allocated. Skipped where the limit stops the program starting
# at all (a sanitizer build reserves its shadow memory up front).
if (ulimit -v 400000 && "$HBM" --help) > /dev/null 2>&1; then
  (ulimit -v 400000; exec "$HBM" bench adamw --params 20M --reps 1 --threads 1) > "$out" 2>&1
  rc=$?
  if [ $rc -ne 1 ] || ! grep -q "cannot allocate" "$out"; then
    echo "FAIL allocation failure: exit $rc, expected 1 naming it: $(cat "$out")"; fail=1
  else echo "ok   allocation failure: $(cat "$out")"; fi
else echo "skip allocation failure: the program does not start under ulimit -v"; fi
exit $fail
