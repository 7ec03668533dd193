#!/bin/sh
# hbm gen llm: writes a trace that replays and reloads, lists every option with
# its default, and rejects bad options with exit 2 and a message naming the option
# (leaving no output file behind).
set -u
fail=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# a small run writes a loadable trace with a capacity line and step boundaries
"$HBM" gen llm --layers 4 --hidden 512 --seq 256:1024 --micro-batch 2 --grad-accum 2 --dp 4 \
  --checkpoint-every 2 --bucket 8MiB --steps 3 --capacity 8GiB -o "$dir/small.trace" > "$dir/out" 2> "$dir/err"
rc=$?
if [ $rc -ne 0 ]; then echo "FAIL small: exit $rc"; cat "$dir/err"; fail=1; fi
grep -q "^hbm-trace 1" "$dir/small.trace" || { echo "FAIL small: no header"; fail=1; }
grep -q "^capacity " "$dir/small.trace" || { echo "FAIL small: no capacity line"; fail=1; }
[ "$(grep -c '^s ' "$dir/small.trace")" -eq 3 ] || { echo "FAIL small: expected 3 step lines"; fail=1; }
for tag in param grad optim act comm temp; do
  grep -q "^a [^ ]* [0-9]* $tag" "$dir/small.trace" || { echo "FAIL small: no '$tag' allocation"; fail=1; }
done
grep -q "^a [^ ]* [0-9]* comm 1" "$dir/small.trace" || { echo "FAIL small: no comm on stream 1"; fail=1; }
grep -q "wrote .*small.trace" "$dir/out" || { echo "FAIL small: no summary"; cat "$dir/out"; fail=1; }
"$HBM" replay "$dir/small.trace" --policy bestfit > "$dir/replay" 2>&1 || { echo "FAIL small: does not replay"; cat "$dir/replay"; fail=1; }

# the same seed gives the same trace, another seed another
"$HBM" gen llm --layers 4 --hidden 512 --seq 256:1024 --micro-batch 2 --grad-accum 2 --dp 4 \
  --checkpoint-every 2 --bucket 8MiB --steps 3 --capacity 8GiB -o "$dir/again.trace" > /dev/null 2>&1
cmp -s "$dir/small.trace" "$dir/again.trace" || { echo "FAIL determinism: same seed differs"; fail=1; }
"$HBM" gen llm --layers 4 --hidden 512 --seq 256:1024 --micro-batch 2 --grad-accum 2 --dp 4 \
  --checkpoint-every 2 --bucket 8MiB --steps 3 --capacity 8GiB --seed 7 -o "$dir/other.trace" > /dev/null 2>&1
cmp -s "$dir/small.trace" "$dir/other.trace" && { echo "FAIL determinism: seed 7 gives the same trace"; fail=1; }

# --help lists every option with its default; --list-presets the three presets
"$HBM" gen llm --help > "$dir/help"
for o in --preset --list-presets --params --arch --layers --hidden --heads --kv-heads --ffn --vocab \
         --attention --dropout --seq --seq-align --micro-batch --grad-accum --dp --tp --pp --stage \
         --sequence-parallel --zero --offload --no-offload --checkpoint-every --bucket --optimizer --tflops \
         --comm-bw --steps --seed --capacity --output --estimate --json; do
  grep -q -- "$o" "$dir/help" || { echo "FAIL --help does not list $o"; fail=1; }
done
[ "$(grep -c 'default' "$dir/help")" -ge 25 ] || { echo "FAIL --help: defaults missing"; fail=1; }
"$HBM" gen llm --list-presets > "$dir/presets"
for p in 910c-dense 7b-1gpu-80g 70b-zero3-64; do
  grep -q "^$p " "$dir/presets" || { echo "FAIL --list-presets lacks $p"; fail=1; }
done
"$HBM" gen llm --list-presets --json > "$dir/presets.json" || { echo "FAIL --list-presets --json exits non-zero"; fail=1; }
if command -v python3 >/dev/null; then
python3 - "$dir/presets.json" "$dir/presets" <<'PY' || fail=1
import json, sys
r = json.load(open(sys.argv[1]))
text = [l.split(None, 1) for l in open(sys.argv[2]).read().splitlines()]
if list(r) != ["presets"] or any(list(p) != ["name", "summary"] for p in r["presets"]):
    print("FAIL --list-presets --json keys:", r); sys.exit(1)
if [[p["name"], p["summary"]] for p in r["presets"]] != text:
    print("FAIL --list-presets --json differs from the text list:", r); sys.exit(1)
if not {"910c-dense", "7b-1gpu-80g", "70b-zero3-64"} <= {p["name"] for p in r["presets"]}:
    print("FAIL --list-presets --json lacks a preset:", r); sys.exit(1)
PY
else
  echo "skip: JSON values (no python3)"
fi
"$HBM" gen llm --preset 910c-dense --estimate > "$dir/est" || { echo "FAIL --estimate"; fail=1; }
grep -q "peak live" "$dir/est" || { echo "FAIL --estimate prints no peak"; cat "$dir/est"; fail=1; }
# the shape --params chose is said, in words, before the figures
"$HBM" gen llm --params 1.3B --estimate > "$dir/est_params" &&
  head -1 "$dir/est_params" | grep -q "^workload       gpt 1.3B (18 layers, hidden 2304, 18 heads/18 kv" ||
  { echo "FAIL --estimate does not name the shape --params chose"; cat "$dir/est_params"; fail=1; }
grep -q "^fits           yes, 14.72 GiB to spare" "$dir/est" || { echo "FAIL --estimate's verdict"; cat "$dir/est"; fail=1; }
# a peak over the capacity, its static state inside it: an estimate, not a refusal
"$HBM" gen llm --preset 7b-1gpu-80g --capacity 40GiB --estimate > "$dir/est_over" 2>&1; rc=$?
[ $rc -eq 0 ] && grep -q "^fits           no: the estimated peak is 1.27 GiB over the capacity" "$dir/est_over" ||
  { echo "FAIL --estimate with the peak over --capacity: exit $rc: $(cat "$dir/est_over")"; fail=1; }
"$HBM" gen llm --preset 7b-1gpu-80g --capacity 40GiB --estimate --json | grep -q '"fits":false}$' ||
  { echo "FAIL --estimate --json fits:false"; fail=1; }
"$HBM" gen llm --preset 7b-1gpu-80g --estimate --json | grep -q '"fits":true}$' || { echo "FAIL --estimate --json fits:true"; fail=1; }
# a peak of exactly the capacity fits, with nothing to spare; a granule less does not
# (these shapes put the peak, step 2's optimizer, on the 2 MiB grid: 28103933952 B,
# 13401 granules; one device and short sequences keep the backward under it)
eq="--layers 118 --hidden 1024 --vocab 50688 --seq 64 --dp 1 --micro-batch 1 --grad-accum 1 --steps 2 --estimate"
# shellcheck disable=SC2086
{ "$HBM" gen llm $eq --capacity 28103933952 | grep -qx "fits           yes, 0 B to spare before any allocator's overhead" &&
  "$HBM" gen llm $eq --capacity 28103933952 --json | grep -q '"peak_estimate":28103933952,.*"fits":true}$' &&
  "$HBM" gen llm $eq --capacity 28101836800 | grep -qx "fits           no: the estimated peak is 2.00 MiB over the capacity, before any allocator's overhead" &&
  "$HBM" gen llm $eq --capacity 28101836800 --json | grep -q '"fits":false}$'; } ||
  { echo "FAIL --estimate with the peak at exactly --capacity: $("$HBM" gen llm $eq --capacity 28103933952 2>&1 | tail -n 1)"; fail=1; }
"$HBM" gen llm --preset 910c-dense --estimate --json | grep -q '"peak_estimate"' || { echo "FAIL --estimate --json"; fail=1; }

# --no-offload undoes a preset's offload; --offload alone runs on ZeRO-2
"$HBM" gen llm --preset 7b-1gpu-80g --no-offload --dp 8 --zero 1 --steps 1 --estimate --json > "$dir/nooff" 2>&1
grep -q '"workload":"[^"]*, zero 1, ' "$dir/nooff" || { echo "FAIL --no-offload: $(cat "$dir/nooff")"; fail=1; }
"$HBM" gen llm --layers 2 --hidden 256 --seq 128 --offload --steps 1 --estimate --json > "$dir/off" 2>&1
grep -q '"workload":"[^"]*, zero 2 + offload, ' "$dir/off" || { echo "FAIL --offload: $(cat "$dir/off")"; fail=1; }

# the estimate's 'every sequence at' is the longest the range can draw: 192 of 100:200 by 64
"$HBM" gen llm --layers 2 --hidden 256 --seq 100:200 --steps 1 --estimate > "$dir/longest" 2>&1
grep -q "per layer at seq 192;" "$dir/longest" && grep -q "with every sequence at 192;" "$dir/longest" ||
  { echo "FAIL --seq 100:200's longest draw: $(cat "$dir/longest")"; fail=1; }
# ... while a list, or a range of one length, draws its lengths as given, aligned or not
for seq in 512,1000 1000:1000; do
  "$HBM" gen llm --layers 2 --hidden 256 --seq $seq --steps 1 --estimate > "$dir/longest" 2>&1
  grep -q "with every sequence at 1000;" "$dir/longest" || { echo "FAIL --seq $seq's longest: $(cat "$dir/longest")"; fail=1; }
done
# a range of one length is that length, aligned or not
"$HBM" gen llm --layers 2 --hidden 256 --seq 100:100 --seq-align 64 --steps 1 --estimate > "$dir/one" 2>&1 ||
  { echo "FAIL --seq 100:100 --seq-align 64: $(cat "$dir/one")"; fail=1; }

# the estimate to the letter, where no ZeRO-3 shard is held apart
"$HBM" gen llm --layers 3 --hidden 384 --steps 1 --estimate > "$dir/est20m" 2>&1
cat > "$dir/want" <<'EOF2'
workload       gpt 24.6M (3 layers, hidden 384, 3 heads/3 kv, ffn 1536, vocab 50304), flash attention, seq 2048 x micro-batch 4 x 4, tp 1 pp 1 (stage 0) dp 8, zero 0, no checkpointing, buckets 25.00 MiB, 1 step, seed 1
parameters     24.6M in the model, 24.6M on this device
static         422.99 MiB = BF16 weights 47.00 MiB + FP32 master 94.00 MiB + FP32 grads 94.00 MiB + Adam m,v 188.00 MiB
activations    102.09 MiB per layer at seq 2048; 2.61 GiB at the peak
buckets        1 per reduction, largest 94.00 MiB; 0 B in flight at the peak
peak live      2.84 GiB estimated (forward), 2.84 GiB with every sequence at 2048; capacity 80.00 GiB
made of        234.99 MiB static, 2.61 GiB activations and temporaries
fits           yes, 77.16 GiB to spare before any allocator's overhead
EOF2
cmp -s "$dir/est20m" "$dir/want" || { echo "FAIL 3 x 384 (24.6M) --estimate:"; diff "$dir/want" "$dir/est20m"; fail=1; }

# --seq in each form: a length, a range, a list (taken, not refused); a form of
# both is refused as a form; a MIN or list entry of 31 bytes is read, one of 32 refused
seq_of() { "$HBM" gen llm --layers 2 --hidden 256 --seq "$1" --steps 1 --estimate --json 2>&1 | sed -n 's/.*flash attention, seq \(.*\) x micro-batch.*/\1/p'; }
z31=$(printf '%031d' 512); z32=$(printf '%032d' 512)
for pair in "1024|1024" "512:1024|512..1024" "512,1024|2 lengths in 512..1024" "768,256,512|3 lengths in 256..768" \
            "$z31:1024|512..1024" "1024,$z31|2 lengths in 512..1024"; do
  got=$(seq_of "${pair%%|*}"); [ "$got" = "${pair#*|}" ] || { echo "FAIL --seq ${pair%%|*}: '$got', expected '${pair#*|}'"; fail=1; }
done
for form in "1:2,3" "1,2:3" "$z32:1024" "1024,$z32"; do
  "$HBM" gen llm --seq "$form" --estimate > /dev/null 2> "$dir/err"; rc=$?
  [ $rc -eq 2 ] && grep -qx "hbm: --seq: expected N, MIN:MAX or a list A,B,C (at most [0-9]*), got '$form'" "$dir/err" ||
    { echo "FAIL --seq $form: exit $rc, $(cat "$dir/err")"; fail=1; }
done
# the bucket's range holds its ends
for b in 4KiB 16TiB; do
  "$HBM" gen llm --layers 2 --hidden 256 --seq 128 --bucket $b --steps 1 --estimate > /dev/null 2> "$dir/err" ||
    { echo "FAIL --bucket $b refused: $(cat "$dir/err")"; fail=1; }
done

# an abbreviated --preset is the preset, as getopt_long reads any unique prefix
for abbrev in "--pre 70b-zero3-64" "--pres=70b-zero3-64"; do
  # shellcheck disable=SC2086
  "$HBM" gen llm $abbrev --steps 1 --estimate > "$dir/abbrev" 2>&1
  "$HBM" gen llm --preset 70b-zero3-64 --steps 1 --estimate > "$dir/full" 2>&1
  cmp -s "$dir/abbrev" "$dir/full" || { echo "FAIL '$abbrev' is not --preset 70b-zero3-64: $(head -n 1 "$dir/abbrev")"; fail=1; }
done

# under ZeRO-3 a device holds a shard of the weights at rest: the estimate says so
"$HBM" gen llm --preset 70b-zero3-64 --estimate > "$dir/z3" || { echo "FAIL 70b-zero3-64 --estimate"; fail=1; }
grep -q "^parameters .*68.98B in the model, 68.98B computed on this device, 1.08B of them held at rest (its ZeRO-3 shard, 1/64" "$dir/z3" ||
  { echo "FAIL ZeRO-3 estimate: $(head -n 1 "$dir/z3")"; fail=1; }
"$HBM" gen llm --preset 70b-zero3-64 --estimate --json | grep -q '"params_resident":1077760128,' || { echo "FAIL --json params_resident"; fail=1; }
# and its peak's parts, which add up to it: 51,993,716,992 bytes
grep -q "^made of        18.07 GiB static, 23.57 GiB activations and temporaries, 3.60 GiB gradient buckets, 3.19 GiB ZeRO-3's gathered weights$" "$dir/z3" ||
  { echo "FAIL the peak's parts: $(grep '^made of' "$dir/z3")"; fail=1; }
"$HBM" gen llm --preset 70b-zero3-64 --estimate --json |
  grep -q '"static_at_peak_bytes":19399682304,"act_peak_bytes":25304236032,"comm_bytes":3867181056,"transient_bytes":3422617600,"transient":"ZeRO-3.s gathered weights",.*"peak_estimate":51993716992,' ||
  { echo "FAIL --json the peak's parts"; fail=1; }

# the description counts one layer and one head in the singular, and gives bucket
# sizes as every size (not "1e+03 GB" or "4.1e-06 GB")
"$HBM" gen llm --layers 1 --hidden 128 --heads 1 --seq 128 --bucket 4KiB --steps 1 --estimate --json > "$dir/one_layer"
grep -q '"workload":"[^"]*(1 layer, hidden 128, 1 head/1 kv, [^"]*, buckets 4.00 KiB, ' "$dir/one_layer" ||
  { echo "FAIL singular or bucket size: $(cat "$dir/one_layer")"; fail=1; }
"$HBM" gen llm --layers 2 --hidden 256 --seq 128 --bucket 1000GB --steps 1 --estimate --json > "$dir/big_bucket"
grep -q '"workload":"[^"]*, buckets 931.32 GiB, ' "$dir/big_bucket" || { echo "FAIL bucket size: $(cat "$dir/big_bucket")"; fail=1; }

# the description says when nothing is checkpointed, not "checkpoint every 0"
"$HBM" gen llm --layers 2 --hidden 256 --seq 128 --steps 1 --estimate --json > "$dir/nockpt"
grep -q '"workload":"[^"]*, no checkpointing, buckets' "$dir/nockpt" || { echo "FAIL no checkpointing: $(cat "$dir/nockpt")"; fail=1; }
"$HBM" gen llm --layers 2 --hidden 256 --seq 128 --steps 1 --checkpoint-every 1 --estimate --json > "$dir/ckpt"
grep -q '"workload":"[^"]*, checkpoint every 1, buckets' "$dir/ckpt" || { echo "FAIL checkpoint every 1: $(cat "$dir/ckpt")"; fail=1; }

# docs/workload.md quotes the 3-step peaks the tests see; 910c-dense's is not its full run's
"$HBM" gen llm --preset 910c-dense --steps 3 -o "$dir/three.trace" > "$dir/three" 2>&1 || { echo "FAIL 910c-dense 3 steps"; fail=1; }
peak=$(sed -n 's/.*peak live \([0-9.]* GiB\) (closed form \([0-9.]* GiB\).*/\1 (closed form \2)/p' "$dir/three")
grep -q "peak at $peak" "$HBM_ROOT/docs/workload.md" ||
  { echo "FAIL docs/workload.md does not quote 910c-dense's 3-step peak, $peak"; fail=1; }
rm -f "$dir/three.trace"

# --params picks a shape the split can run: 7B as GPT is 33 layers alone, which --pp 2 cannot split
"$HBM" gen llm --params 7B --pp 2 --tp 4 --dp 8 --zero 3 --seq 128 --steps 1 -o "$dir/split.trace" > "$dir/split" 2>&1 ||
  { echo "FAIL --params 7B --pp 2 --tp 4: $(cat "$dir/split")"; fail=1; }
grep -q "(32 layers, hidden 4096, 32 heads" "$dir/split" || { echo "FAIL --params 7B --pp 2: shape"; cat "$dir/split"; fail=1; }
"$HBM" gen llm --params 7B --dp 8 --zero 3 --seq 128 --steps 1 -o "$dir/closest.trace" 2>&1 | grep -q "(33 layers" || { echo "FAIL --params 7B: closest shape"; fail=1; }
# where a split leaves the family far from the count (70B as llama, --tp 8 --pp 4: 63.1B or
# 100B there), a width off the family's 128 per layer comes closer
"$HBM" gen llm --params 70B --arch llama --kv-heads 8 --tp 8 --pp 4 --seq 128 --steps 1 -o "$dir/wide.trace" > "$dir/wide" 2>&1 ||
  { echo "FAIL --params 70B --tp 8 --pp 4: $(cat "$dir/wide")"; fail=1; }
grep -q "llama 70.1B (80 layers, hidden 9216, 72 heads/8 kv" "$dir/wide" || { echo "FAIL --params 70B --tp 8 --pp 4: shape"; cat "$dir/wide"; fail=1; }

# the shape options mean the same in any order: what is not given follows from what is
# (--params solves for the rest; heads and ffn follow the hidden size given)
# (a capacity the static state fits in: --estimate refuses one it does not)
shape() { "$HBM" gen llm "$@" --capacity 1TiB --steps 1 --estimate --json | sed -n 's/.*"workload":"[a-z]* [0-9.]*[BMT] (\([^)]*\)).*/\1/p'; }
for pair in "--hidden 4096|--params 7B" "--layers 32|--params 7B" "--heads 64|--params 7B" "--ffn 8192|--params 7B"; do
  a=${pair%%|*}; b=${pair#*|}
  # shellcheck disable=SC2086
  x=$(shape $a $b); y=$(shape $b $a)
  if [ -z "$x" ] || [ "$x" != "$y" ]; then echo "FAIL order: '$a $b' gives '$x', '$b $a' '$y'"; fail=1; fi
done
shape --heads 64 --params 7B | grep -q ", 64 heads/64 kv," || { echo "FAIL --heads before --params dropped"; fail=1; }
shape --ffn 8192 --params 7B | grep -q ", ffn 8192," || { echo "FAIL --ffn before --params dropped"; fail=1; }
# with a preset, --params picks heads its kv heads divide (GQA: 8 of 72); an MHA
# preset stays MHA when --params, --hidden or --heads change the heads
preset_shape() { "$HBM" gen llm "$@" --steps 1 --estimate --json 2>&1 | sed -n 's/.*"workload":"[^:]*: [a-z]* [0-9.]*[BMT] (\([^)]*\)).*/\1/p'; }
preset_shape --preset 70b-zero3-64 --params 70B | grep -q ", [0-9]* heads/8 kv," || { echo "FAIL 70b-zero3-64 --params 70B: $(preset_shape --preset 70b-zero3-64 --params 70B)"; fail=1; }
preset_shape --preset 7b-1gpu-80g --params 13B | grep -q "^40 layers, hidden 5120, 40 heads/40 kv," || { echo "FAIL 7b-1gpu-80g --params 13B: $(preset_shape --preset 7b-1gpu-80g --params 13B)"; fail=1; }
preset_shape --preset 7b-1gpu-80g --hidden 2048 | grep -q ", 16 heads/16 kv," || { echo "FAIL 7b-1gpu-80g --hidden 2048: $(preset_shape --preset 7b-1gpu-80g --hidden 2048)"; fail=1; }
preset_shape --preset 7b-1gpu-80g --heads 16 | grep -q ", 16 heads/16 kv," || { echo "FAIL 7b-1gpu-80g --heads 16: $(preset_shape --preset 7b-1gpu-80g --heads 16)"; fail=1; }
preset_shape --preset 7b-1gpu-80g --heads 16 --kv-heads 4 | grep -q ", 16 heads/4 kv," || { echo "FAIL 7b-1gpu-80g --kv-heads 4 dropped"; fail=1; }
shape --hidden 4096 | grep -q "^24 layers, hidden 4096, 32 heads/32 kv, ffn 16384," || { echo "FAIL --hidden 4096: heads not hidden/128: $(shape --hidden 4096)"; fail=1; }

# bad options: exit 2, a message naming the option, no output file
bad() { # name, expected substring, options...
  name=$1; want=$2; shift 2
  "$HBM" gen llm "$@" -o "$dir/$name.trace" > /dev/null 2> "$dir/err"
  rc=$?
  if [ $rc -ne 2 ]; then echo "FAIL $name: exit $rc, expected 2"; cat "$dir/err"; fail=1; return; fi
  if ! grep -q -- "$want" "$dir/err"; then echo "FAIL $name: message lacks '$want':"; cat "$dir/err"; fail=1; return; fi
  if [ -e "$dir/$name.trace" ]; then echo "FAIL $name: left an output file"; fail=1; return; fi
  echo "ok   $name: $(cat "$dir/err")"
}
bad negative_seq   "--seq"        --seq -5
bad negative_size  "--bucket"     --bucket -4MiB
bad tp_heads       "--tp 3"       --heads 16 --tp 3
bad pp_layers      "--pp 5"       --layers 24 --pp 5
bad zero           "--zero"       --zero 4
bad seq_range      "--seq"        --seq 4096:1024
bad seq_trailing   "^hbm: --seq: expected N, MIN:MAX or a list A,B,C (at most [0-9]*), got '1024,2048,'$" --seq 1024,2048,
bad seq_empty      "^hbm: --seq: expected N, MIN:MAX or a list A,B,C (at most [0-9]*), got '1024,,2048'$" --seq 1024,,2048
bad seq_unaligned  "^hbm: --seq 100:120 holds no multiple of --seq-align 64: " --seq 100:120 --seq-align 64
bad arch           "--arch"       --arch rnn
bad preset         "--preset"     --preset nosuch
bad preset_abbrev  "--preset: unknown preset 'nosuch'" --pre nosuch
bad preset_twice   "--preset given twice" --preset 910c-dense --pre 7b-1gpu-80g
bad unknown        "--frobnicate" --frobnicate 3
bad no_value       "--layers"     --layers
bad too_big        "--capacity"   --params 70B --dp 1 --capacity 80GiB
bad params_shape   "--params"     --params 7B --layers 32 --hidden 4096
bad shape_params   "--params"     --layers 32 --hidden 4096 --params 7B
bad hidden_heads   "^hbm: --hidden 1000: the default heads (hidden/128 = 7) do not divide it; give --heads$" --hidden 1000
bad params_split   "--pp 7"       --params 7B --layers 30 --pp 7
bad params_kv      "^hbm: --params: no shape that --tp 4, --pp 1 and --kv-heads 5 can run .*: change --kv-heads, --tp or --pp$" --params 7B --kv-heads 5 --tp 4
bad hidden_kv      "^hbm: --kv-heads 8 does not divide the default heads of --hidden 4224 (hidden/128 = 33); give --heads or --kv-heads$" --preset 70b-zero3-64 --hidden 4224
bad params_heads   "--params: no shape" --params 7B --heads 7 --tp 4
bad tflops_huge    "^hbm: --tflops: expected a number of TFLOP/s above 0 and below 1000000, got '1e308'$" --tflops 1e308
bad commbw_zero    "^hbm: --comm-bw: expected a number of GB/s above 0 and below 1000000, got '0'$" --comm-bw 0
bad bucket_small   "^hbm: --bucket: expected a size from 4KiB to 16TiB, got '1B'$" --bucket 1B
# a tensor past the 1 PiB a trace's SIZE holds (eager scores of 8192 heads x 1M^2) is
# refused, not written for replay to refuse
bad huge_alloc     "^hbm: --seq 1048576 x --micro-batch 1: one allocation (the attention scores.* more than the 1 PiB a trace holds: .*--attention flash$" \
  --hidden 8192 --heads 8192 --layers 1 --seq 1048576 --micro-batch 1 --grad-accum 1 --attention eager --steps 1
"$HBM" gen llm --hidden 8192 --heads 8192 --layers 1 --seq 1048576 --attention eager --steps 1 --estimate > /dev/null 2> "$dir/err"
rc=$?; [ $rc -eq 2 ] && grep -q "more than the 1 PiB a trace holds" "$dir/err" || { echo "FAIL huge --estimate: exit $rc: $(cat "$dir/err")"; fail=1; }
# ZeRO-Offload runs on stage 2 or 3: a stage below given with it, from --offload or
# a preset's, is refused, not raised to 2 (nor kept as 1 while run as 2)
bad offload_zero0  "^hbm: --zero 0 with --offload: ZeRO-Offload runs on ZeRO stage 2 or 3; give --zero 2 or 3, or no --offload$" --offload --zero 0
bad offload_zero1  "^hbm: --zero 1 with --offload: ZeRO-Offload runs on ZeRO stage 2 or 3" --zero 1 --offload
bad preset_zero0   "^hbm: --zero 0 with the preset's offload: .*, or --no-offload$" --preset 7b-1gpu-80g --zero 0
bad offload_both   "^hbm: --offload and --no-offload: give one$" --offload --no-offload
bad list_o         "^hbm: --list-presets prints the presets and writes no trace: drop -o" --list-presets
bad estimate_o     "--estimate prints the closed form and writes no trace: drop -o" --steps 1 --estimate
# counts past what the shape search reaches are refused, naming the largest or
# smallest model it reaches; zero and negative counts name --params, no range
bad params_huge    "more than the largest model --params reaches, 26.39T (512 layers, hidden 65536" --params 100T
bad params_tiny    "less than the smallest model --params reaches, 6.64M (1 layer, hidden 128" --params 1M
bad params_zero    "^hbm: --params: expected a positive parameter count like 1.3B or 70e9, got '0'$" --params 0
bad params_minus   "^hbm: --params: expected a positive parameter count like 1.3B or 70e9, got '-7B'$" --params -7B
"$HBM" gen llm --layers 2 > /dev/null 2> "$dir/err"; rc=$?
[ $rc -eq 2 ] && grep -q -- "-o" "$dir/err" || { echo "FAIL missing -o: exit $rc"; fail=1; }
"$HBM" gen nosuch > /dev/null 2>&1; [ $? -eq 2 ] || { echo "FAIL unknown generator: expected exit 2"; fail=1; }
# gen llm with no option at all asks for -o, as with any; gen alone is usage (2), gen --help not (0)
"$HBM" gen llm > "$dir/out" 2> "$dir/err"; rc=$?
[ $rc -eq 2 ] && [ ! -s "$dir/out" ] && [ "$(cat "$dir/err")" = "hbm: gen llm: -o TRACE is required (or --estimate)" ] ||
  { echo "FAIL gen llm alone: exit $rc, $(cat "$dir/out" "$dir/err")"; fail=1; }
"$HBM" gen > "$dir/out" 2> "$dir/err"; rc=$?
[ $rc -eq 2 ] && [ ! -s "$dir/out" ] && grep -q "^usage: hbm gen llm" "$dir/err" || { echo "FAIL gen alone: exit $rc"; fail=1; }
"$HBM" gen --help > "$dir/out" 2> "$dir/err"; rc=$?
[ $rc -eq 0 ] && [ ! -s "$dir/err" ] && grep -q "^  llm  " "$dir/out" || { echo "FAIL gen --help: exit $rc"; fail=1; }
# a trace larger than the host's memory (a million 910c-dense steps, 3 TiB with
# its text) is refused before generating, naming the memory and the steps that fit
bad host_memory "host memory, more than the .* available; give --steps" --preset 910c-dense --steps 1000000
# a static state larger than the device: --estimate refuses it as generating does
"$HBM" gen llm --preset 910c-dense --capacity 50GiB --estimate > /dev/null 2> "$dir/est_cap"; rc=$?
"$HBM" gen llm --preset 910c-dense --capacity 50GiB -o "$dir/cap.trace" > /dev/null 2> "$dir/gen_cap"
if [ $rc -ne 2 ] || ! grep -q -- "more than --capacity 50.00 GiB" "$dir/est_cap" || ! cmp -s "$dir/est_cap" "$dir/gen_cap"; then
  echo "FAIL --estimate over --capacity: exit $rc: $(cat "$dir/est_cap"), generating: $(cat "$dir/gen_cap")"; fail=1
fi

# a model of trillions is counted in trillions, as --params counts it, in the
# estimate and the trace's name (not "26392.01B")
"$HBM" gen llm --layers 512 --hidden 65536 --seq 128 --dp 1000000 --zero 3 --steps 1 --estimate > "$dir/huge_model" 2>&1
grep -q "^parameters     26.39T in the model" "$dir/huge_model" || { echo "FAIL trillions in the estimate: $(head -1 "$dir/huge_model")"; fail=1; }
"$HBM" gen llm --layers 512 --hidden 65536 --seq 128 --dp 1000000 --zero 3 --steps 1 --estimate --json > "$dir/huge_model" 2>&1
grep -q '"workload":"gpt 26.4T (512 layers' "$dir/huge_model" || { echo "FAIL trillions in the name: $(cat "$dir/huge_model")"; fail=1; }
# a count in a gap between the shapes --params reaches is refused, naming the nearest
"$HBM" gen llm --params 10M --estimate > "$dir/out" 2> "$dir/err"; rc=$?
[ $rc -eq 2 ] && [ ! -s "$dir/out" ] &&
  grep -q "params 10.00M: no shape within 6% of it; the nearest --params reaches is 6.64M (1 layer, hidden 128" "$dir/err" ||
  { echo "FAIL --params 10M in a gap: exit $rc, $(cat "$dir/out" "$dir/err")"; fail=1; }
# a model under a billion parameters is counted in millions, in the estimate and the trace's name
"$HBM" gen llm --layers 3 --hidden 384 --steps 1 --estimate > "$dir/small" 2>&1
grep -q "^parameters     24.6M in the model" "$dir/small" || { echo "FAIL small model estimate: $(head -1 "$dir/small")"; fail=1; }
"$HBM" gen llm --layers 3 --hidden 384 --steps 1 -o "$dir/small.trace" > /dev/null 2>&1
grep -q "^# gpt 24.6M (3 layers" "$dir/small.trace" || { echo "FAIL small model name: $(sed -n 2p "$dir/small.trace")"; fail=1; }
# a capacity in decimal units is what the device gives, whole 2 MiB granules,
# in the trace, the JSON and demo's header alike (not the 80,000,000,000 typed)
"$HBM" gen llm --layers 3 --hidden 384 --steps 1 --capacity 80GB --json -o "$dir/gb.trace" > "$dir/gb.json" 2>&1
grep -q '"capacity":79997960192[,}]' "$dir/gb.json" && grep -qx "capacity 79997960192" "$dir/gb.trace" ||
  { echo "FAIL --capacity 80GB: $(cat "$dir/gb.json"; grep capacity "$dir/gb.trace")"; fail=1; }
"$HBM" demo --preset 7b-1gpu-80g --steps 1 --capacity 80GB --policy caching --html "$dir/gb.html" > "$dir/gb.demo" 2>&1
grep -q "capacity 74.50 GiB" "$dir/gb.demo" || { echo "FAIL demo --capacity 80GB: $(head -3 "$dir/gb.demo")"; fail=1; }

# Progress on a terminal (under script(1), where it is installed), none where
# standard error is a file: generating shows it, as bench alloc and compact do.
if command -v script > /dev/null 2>&1; then
  script -qc "\"$HBM\" gen llm --steps 40 -o \"$dir/tty.trace\"" /dev/null < /dev/null > "$dir/tty.out" 2>&1
  grep -q "generating .*100%" "$dir/tty.out" || { echo "FAIL gen llm shows no progress on a terminal: $(tr '\r' '\n' < "$dir/tty.out" | tail -3)"; fail=1; }
  script -qc "\"$HBM\" bench compact --capacity 256MiB --rounds 2" /dev/null < /dev/null > "$dir/tty.out" 2>&1
  grep -q "bench compact .*100%" "$dir/tty.out" || { echo "FAIL bench compact shows no progress on a terminal"; fail=1; }
  # with --json, none: the commands that report show their bars only beside their text
  s437="$HBM_ROOT/tests/fixtures/step437.trace"
  for cmd in "mincap \"$s437\" --policy zoned|mincap: searching" \
             "bench sweep --jobs 1 --steps 2|job 1/1" \
             "bench alloc --pairs 2000|bench alloc" \
             "bench compact --capacity 256MiB --rounds 1|bench compact" \
             "demo --preset 7b-1gpu-80g --steps 1 --policy caching --html \"$dir/tty.html\"|generating" \
             "replay \"$s437\" --policy zoned --layout-at 3|zoned"; do
    args=${cmd%|*} label=${cmd##*|}
    script -qc "\"$HBM\" $args" /dev/null < /dev/null > "$dir/tty.out" 2>&1
    grep -q "$label" "$dir/tty.out" || { echo "FAIL $args shows no '$label' on a terminal"; fail=1; }
    script -qc "\"$HBM\" $args --json" /dev/null < /dev/null > "$dir/tty.out" 2>&1
    tr '\r' '\n' < "$dir/tty.out" | grep -q "^$label\|\[#*\.*\]" &&
      { echo "FAIL $args --json shows progress: $(tr '\r' '\n' < "$dir/tty.out" | grep "$label" | head -2)"; fail=1; }
    # nor a line cleared after it (a carriage return that ends no line: the terminal's own CR LF aside)
    if command -v python3 > /dev/null 2>&1 &&
      ! python3 -c 'import sys; sys.exit(b"\r" in open(sys.argv[1], "rb").read().replace(b"\r\n", b""))' "$dir/tty.out"; then
      echo "FAIL $args --json clears a line on the terminal"; fail=1
    fi
  done
  echo "ok   progress on a terminal"
else
  echo "skip progress on a terminal: script(1) is not installed"
fi
"$HBM" gen llm --steps 40 -o "$dir/file.trace" > /dev/null 2> "$dir/err"
grep -q "generating" "$dir/err" && { echo "FAIL gen llm shows progress into a file"; fail=1; }
# options that cannot go together are refused, not ignored
"$HBM" gen llm --list-presets --estimate --json > "$dir/out" 2> "$dir/err"; rc=$?
[ $rc -eq 2 ] && [ ! -s "$dir/out" ] && grep -q "give one" "$dir/err" ||
  { echo "FAIL --list-presets --estimate: exit $rc, $(cat "$dir/out" "$dir/err")"; fail=1; }
# a ZeRO-3 shard of a few thousand parameters is counted, not "0.0M"
"$HBM" gen llm --dp 1000000 --zero 3 --estimate > "$dir/out" 2>&1
grep -q " 1546 of them held at rest" "$dir/out" || { echo "FAIL small shard: $(grep parameters "$dir/out")"; fail=1; }
exit $fail
