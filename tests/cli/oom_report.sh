#!/bin/sh
# The first failure as every command reports it (cli/cli.c): in JSON, the
# fragmentation a number where a request failed and "refused_too" whether the
# recorded allocator refused that request as well; in text, a ratio with no
# largest free piece is "inf", not a made-up billion.
set -u
fail=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# 2 MiB of 1000-byte requests, each rounded to 1 KiB: the device is full with
# 48 KiB free in the rounding, in no piece (largest free 0): the 2049th fails,
# "overhead". One trace asks it plainly, the other records that PyTorch
# refused it too.
awk 'BEGIN { print "hbm-trace 1"; print "capacity 2MiB"; for (i = 1; i <= 2049; i++) print "a x" i " 1000" }' > "$dir/full.trace"
awk 'BEGIN { print "hbm-trace 1"; print "capacity 2MiB"; for (i = 1; i <= 2048; i++) print "a x" i " 1000"
             print "a r 1000 refused"; print "a y 1000" }' > "$dir/refused.trace"
oom='"oom":{"event":2048,"step":0,"request":1000,"free_total":49152,"largest_free":0,"fragmentation":1000000000,"allocated":2097152,"limit":2097152,"cause":"overhead","refused_too"'
for t in full refused; do
  want=false; [ $t = refused ] && want=true
  "$HBM" replay "$dir/$t.trace" --policy bestfit --json > "$dir/$t.json" 2> "$dir/err" ||
    { echo "FAIL replay $t --json: exit $?: $(cat "$dir/err")"; fail=1; }
  grep -qF "$oom:$want}" "$dir/$t.json" ||
    { echo "FAIL $t: first failure in JSON, want refused_too $want: $(grep -o '"oom":{[^}]*}' "$dir/$t.json")"; fail=1; }
  "$HBM" replay "$dir/$t.trace" --policy bestfit > "$dir/$t.txt" 2> "$dir/err" ||
    { echo "FAIL replay $t: exit $?: $(cat "$dir/err")"; fail=1; }
  grep -q '^bestfit .* inf .* largest free 0 B, ratio inf: overhead' "$dir/$t.txt" ||
    { echo "FAIL $t: max frag and ratio not inf: $(cat "$dir/$t.txt")"; fail=1; }
done
grep -q 'overhead (PyTorch refused it too)$' "$dir/refused.txt" ||
  { echo "FAIL refused: the text does not say PyTorch refused it too"; fail=1; }
grep -q 'refused it too' "$dir/full.txt" && { echo "FAIL full: 'refused it too' where nothing was refused"; fail=1; }
[ $fail -eq 0 ] && echo "ok   first failure: fragmentation inf (JSON 1e9), refused_too as recorded"
exit $fail
