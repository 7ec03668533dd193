#!/bin/sh
# Bad input to the CLI: each case exits 2 with "file:line: what was expected",
# and a failed command leaves no output file behind.
set -u
fail=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

expect() { # name, expected-substring, trace text
  name=$1; want=$2
  printf '%b' "$3" > "$dir/$name.trace"
  "$HBM" replay "$dir/$name.trace" --policy bestfit --capacity 1GiB > "$dir/out" 2> "$dir/err"
  rc=$?
  if [ $rc -ne 2 ]; then echo "FAIL $name: exit $rc, expected 2"; fail=1; return; fi
  if ! grep -q "$dir/$name.trace:[0-9]*: .*$want" "$dir/err"; then
    echo "FAIL $name: message does not name file:line and '$want':"; cat "$dir/err"; fail=1; return
  fi
  echo "ok   $name: $(cat "$dir/err")"
}

expect malformed      "expected 'a ID SIZE"  'hbm-trace 1\na x\n'
expect unknown_id     "unknown id"           'hbm-trace 1\nf ghost\n'
expect double_free    "double free"          'hbm-trace 1\na x 1KiB\nf x\nf x\n'
expect duplicate_live "already live"         'hbm-trace 1\na x 1KiB\na x 2KiB\n'
expect zero_size      "at least 1 byte"      'hbm-trace 1\na x 0\n'
expect absurd_size    "absurd"               'hbm-trace 1\na x 5000TiB\n'
expect missing_header "header"               'a x 1KiB\n'
expect bad_suffix     "expected a size"      'hbm-trace 1\na x 12QB\n'
expect init_overlap   "overlaps the segment \[0x0, 0x200000) at line 2" \
  'hbm-trace 1\ninit-seg 0x0 2MiB 0 large\ninit-blk 0x0 2MiB -\ninit-seg 0x100000 2MiB 0 large\ninit-blk 0x100000 2MiB -\na x 10\n'
expect init_wrap      "wrap past the top of the address space" \
  'hbm-trace 1\ninit-seg 0xfffffffffffffe00 2MiB 0 large\ninit-blk 0xfffffffffffffe00 2MiB -\na x 10\n'
expect init_past_end  "init-blk at 0x0 of 3145728 bytes runs past its segment's end 0x200000: expected at most 2097152" \
  'hbm-trace 1\ninit-seg 0x0 2MiB 0 large\ninit-blk 0x0 3MiB a\n'
expect init_gap       "init-blk at 0x100200: expected the next block of its segment (0x0..0x200000) at 0x100000" \
  'hbm-trace 1\ninit-seg 0x0 2MiB 0 large\ninit-blk 0x0 1MiB a\ninit-blk 0x100200 512 b\n'
expect init_seg_size  "init-seg size 1000 is not a multiple of 512 bytes" \
  'hbm-trace 1\ninit-seg 0x0 1000 0 small\ninit-blk 0x0 512 -\na x 10\n'
expect step_past_last "'s' after step 18446744073709551615 (line 2): no step number follows it" \
  'hbm-trace 1\ns 18446744073709551615\ns\n'
expect small_capacity "capacity: 1MiB is smaller than one 2 MiB granule" 'hbm-trace 1\ncapacity 1MiB\na x 10\n'
expect conf           "conf: byte 18 of the setting 'max_split_size_mb:abc': max_split_size_mb: expected" \
  'hbm-trace 1\nconf max_split_size_mb:abc\na x 10 @0x0\nf x\n'
# a CR is a line end only before LF; a file of CR line ends is said to be one,
# not refused for want of the header it has
expect cr_inside      "a carriage return inside the line (byte 15): expected lines that end in LF or CR LF" \
  'hbm-trace 1\na x\r100\n'
expect cr_only        "lines that end in CR alone" 'hbm-trace 1\ra x 10\rf x\r'
# ... and a UTF-8 byte order mark before the header is read past, as hbm plan does
printf '\357\273\277hbm-trace 1\r\na x 10\r\nf x\r\n' > "$dir/bom.trace"
"$HBM" replay "$dir/bom.trace" --policy bestfit --capacity 1GiB > "$dir/out" 2> "$dir/err" ||
  { echo "FAIL bom: a byte order mark before the header: $(cat "$dir/err")"; fail=1; }
# the message quotes the file, never a control byte of it: an escape sequence
# would reach the terminal
expect control_bytes  "free of unknown id '?]0;pwned?'" 'hbm-trace 1\nf \033]0;pwned\007\n'
if LC_ALL=C grep -q "$(printf '[\001-\037\177]')" "$dir/err"; then
  echo "FAIL control_bytes: a control byte of the file reached the message: $(od -c "$dir/err" | head -3)"; fail=1
fi
# a pickle of a protocol the reader does not take is named as such by every command,
# not read as a text trace without its header
printf '\200\006N.' > "$dir/proto6.pickle"
for cmd in "replay --policy caching --capacity 1GiB" "mincap --policy caching" "fidelity" "import -q -o $dir/p6.trace"; do
  # shellcheck disable=SC2086
  "$HBM" $cmd "$dir/proto6.pickle" > /dev/null 2> "$dir/err"; rc=$?
  [ $rc -eq 2 ] && grep -q "proto6.pickle: byte 1: PROTO: protocol 6 is not supported (expected 2 to 5)" "$dir/err" ||
    { echo "FAIL hbm $cmd with a protocol 6 pickle: exit $rc, $(cat "$dir/err")"; fail=1; }
done
# ... refused by every command that reads the trace, not only by the one that uses it
for cmd in "replay --policy caching --capacity 1GiB" "mincap --policy caching" "fidelity"; do
  # shellcheck disable=SC2086
  "$HBM" $cmd "$dir/conf.trace" > /dev/null 2> "$dir/err"; rc=$?
  [ $rc -eq 2 ] && grep -q "conf.trace:2: conf: byte 18 of the setting" "$dir/err" ||
    { echo "FAIL hbm $cmd with a bad conf: exit $rc, $(cat "$dir/err")"; fail=1; }
done

# Two blocks live at once whose recorded ranges ([@ADDR, @ADDR + request)) share
# a byte: no allocator made that, and fidelity's "placed where PyTorch placed it"
# would mean nothing. Every command that reads the trace refuses it, at the later
# block's line, naming the other block, its range and its line.
expect rec_overlap    "b1's recorded range \[0x1000, 0x1064) overlaps b0's \[0x1000, 0x1064) (line 3), live at once" \
  'hbm-trace 1\ncapacity 1GiB\na b0 100 @4096\na b1 100 @4096\n'
expect rec_partial    "y's recorded range \[0x1100, 0x110a) overlaps x's \[0x1000, 0x13e8) (line 2)" \
  'hbm-trace 1\na x 1000 @0x1000\na y 10 @0x1100\n'
expect rec_init       "x's recorded range \[0x200200, 0x200264) overlaps w's \[0x200000, 0x2003e8) (line 3)" \
  'hbm-trace 1\ninit-seg 0x200000 2MiB 0 large\ninit-blk 0x200000 1MiB w 1000\ninit-blk 0x300000 1MiB -\na x 100 @0x200200\n'
expect rec_wrap       "recorded address 0xffffffffffffffc0: 100 bytes from there wrap past the top" \
  'hbm-trace 1\na x 100 @0xffffffffffffffc0\n'
for cmd in "replay --policy caching --capacity 1GiB" "mincap --policy caching" "fidelity"; do
  # shellcheck disable=SC2086
  "$HBM" $cmd "$dir/rec_overlap.trace" > /dev/null 2> "$dir/err"; rc=$?
  [ $rc -eq 2 ] && grep -qF "rec_overlap.trace:4: b1's recorded range [0x1000, 0x1064) overlaps b0's [0x1000, 0x1064) (line 3), live at once" "$dir/err" ||
    { echo "FAIL hbm $cmd with overlapping recorded ranges: exit $rc, $(cat "$dir/err")"; fail=1; }
done
# ... but a free ends a range: the same address again after it is what a cache
# does; ranges side by side share no byte; a refused request was never placed
accept() { # name, trace text
  printf '%b' "$2" > "$dir/$1.trace"
  for cmd in "replay --policy caching --capacity 1GiB" "fidelity"; do
    # shellcheck disable=SC2086
    "$HBM" $cmd "$dir/$1.trace" > /dev/null 2> "$dir/err" || { echo "FAIL hbm $cmd $1: exit $?, $(cat "$dir/err")"; fail=1; }
  done
}
accept rec_reuse      'hbm-trace 1\na b0 100 @4096\nf b0\na b1 100 @4096\nf b1\n'
accept rec_adjacent   'hbm-trace 1\na b0 512 @0x1000\na b1 512 @0x1200\na b2 100 @0x1400\na b3 100 @0x1464\n'
accept rec_refused    'hbm-trace 1\na b0 100 @4096\na r 100 @4096 refused\nf r\nf b0\n'
accept rec_init_freed 'hbm-trace 1\ninit-seg 0x200000 2MiB 0 large\ninit-blk 0x200000 1MiB w 1000\ninit-blk 0x300000 1MiB -\nf w\na x 100 @0x200200\n'

# usage errors exit 2 too
"$HBM" replay > /dev/null 2>&1; [ $? -eq 2 ] || { echo "FAIL no input: expected exit 2"; fail=1; }
"$HBM" replay "$dir/malformed.trace" "$dir/unknown_id.trace" > /dev/null 2> "$dir/err"; rc=$?
[ $rc -eq 2 ] && grep -q "^hbm: replay: expected one input file, got more$" "$dir/err" ||
  { echo "FAIL two inputs: exit $rc, expected 2 and 'expected one input file, got more': $(cat "$dir/err")"; fail=1; }
"$HBM" replay "$dir/none.trace" > /dev/null 2> "$dir/err"; rc=$?
[ $rc -eq 2 ] && grep -q "none.trace" "$dir/err" || { echo "FAIL missing file: exit $rc"; cat "$dir/err"; fail=1; }
"$HBM" replay "$dir/malformed.trace" --policy nosuch > /dev/null 2>&1; [ $? -eq 2 ] || { echo "FAIL unknown policy: expected exit 2"; fail=1; }
"$HBM" replay "$dir/malformed.trace" --capacity 12QB > /dev/null 2>&1; [ $? -eq 2 ] || { echo "FAIL bad capacity: expected exit 2"; fail=1; }

# Counts: every command reads them one way; a sign, hexadecimal, a fraction or
# a number past 64 bits is refused by name, and the suffixes are the same everywhere.
count_bad() { # expected-substring, command...
  want=$1; shift
  "$HBM" "$@" > /dev/null 2> "$dir/err"; rc=$?
  if [ $rc -ne 2 ] || ! grep -q -- "$want" "$dir/err"; then
    echo "FAIL '$*': exit $rc, expected 2 and '$want':"; cat "$dir/err"; fail=1
  fi
}
good="$dir/good.trace"
printf 'hbm-trace 1\na x 1KiB\nf x\n' > "$good"
count_bad "--every: expected a whole number of at least 1, got '-1'" replay "$good" --every -1
count_bad "--every: expected a whole number of at least 1, got '0x10'" replay "$good" --every 0x10
count_bad "--check: expected a whole number of at least 1, got '1.5'" replay "$good" --check 1.5
count_bad "got '18446744073709551616'" replay "$good" --every 18446744073709551616
count_bad "--device: expected a whole number 0..1024, got ''" import "$good" --device ''
count_bad "^hbm: --snapshot-device: expected a whole number 0..1024, got 'x'$" import "$good" --snapshot-device x -o "$dir/never.trace"
count_bad "--jobs: expected a whole number 1..64, got '65'" demo --jobs 65
count_bad "--seed: expected a whole number, got '-1'" gen llm --preset 7b-1gpu-80g --seed -1
count_bad "--rounds: expected a whole number 1..1000, got '-1'" bench replay --rounds -1
# Sizes: each way a size can be wrong is said as that way.
count_bad "--capacity: expected a whole number of bytes, got '1.5B'" replay "$good" --capacity 1.5B
count_bad "--capacity: expected a whole number of bytes, got '0.1'" replay "$good" --capacity 0.1
count_bad "--capacity: expected a size above zero, got '0'" replay "$good" --capacity 0
count_bad "got '0.0001KiB' (0 bytes once rounded)" replay "$good" --capacity 0.0001KiB
count_bad "--capacity: expected a size like 96GiB, 512MiB or 4.2GB" replay "$good" --capacity 5x5GiB
count_bad "--capacity: '99999999TiB' is too large: expected a device capacity of 2MiB (one page) to 1PiB" replay "$good" \
  --capacity 99999999TiB
count_bad "--resolution: '99999999TiB' is too large (at most 16 EiB, 2^64 - 1 bytes)" mincap "$good" \
  --resolution 99999999TiB
count_bad "--capacity: expected a size like 96GiB, 512MiB or 4.2GB (B/KiB" replay "$good" --capacity 12QB
count_bad "--resolution: expected a size like" mincap "$good" --resolution -1MiB
"$HBM" replay "$good" --capacity 1GiB --every 1e3 > /dev/null || { echo "FAIL --every 1e3 refused"; fail=1; }
"$HBM" gen llm --preset 7b-1gpu-80g --steps 1 --seed 18446744073709551615 -o "$dir/seed.trace" > /dev/null \
  || { echo "FAIL a 64-bit --seed refused"; fail=1; }
"$HBM" gen llm --params 1.3B --seq 1Ki --steps 1 -o "$dir/k.trace" > /dev/null || { echo "FAIL --seq 1Ki refused"; fail=1; }

# Settings and devices are checked before the first replay: nothing is printed
# on stdout, and a setting that would run one allocator under the other's name
# is refused.
before_work() { # expected-substring, command...
  want=$1; shift
  "$HBM" "$@" > "$dir/out" 2> "$dir/err"; rc=$?
  if [ $rc -ne 2 ] || [ -s "$dir/out" ] || ! grep -q -- "$want" "$dir/err"; then
    echo "FAIL '$*': exit $rc, stdout $(wc -c < "$dir/out") bytes, expected 2, none and '$want':"; cat "$dir/err"; fail=1
  fi
}
before_work "expandable_segments:False contradicts policy expandable" replay "$good" --capacity 1GiB \
  --policy caching,expandable --alloc-conf expandable_segments:False
before_work "expandable_segments:True contradicts policy caching" replay "$good" --capacity 1GiB \
  --policy caching --alloc-conf caching=expandable_segments:True
before_work "policy bestfit: takes no settings" replay "$good" --capacity 1GiB --policy caching,bestfit \
  --alloc-conf max_split_size_mb:128
before_work "settings for expandable, which this run does not use (it runs caching)" replay "$good" --capacity 1GiB \
  --policy caching --alloc-conf expandable=max_split_size_mb:128
before_work "policy bestfit: takes no settings" mincap "$good" --policy caching,bestfit --alloc-conf max_split_size_mb:128
before_work "contradicts policy caching" bench replay --trace "$good" --rounds 1 --policy caching \
  --alloc-conf expandable_segments:True
before_work "settings for bestfit, which this run does not use (it runs caching,expandable,zoned)" \
  bench sweep --jobs 1 --alloc-conf bestfit=x
before_work "--capacity and --device each name the device: give one of them, once (a second: 'sim:2GiB')" \
  replay "$good" --capacity 1GiB --device sim:2GiB
# settings that went to every policy and one policy refused: one line, the
# CLI's (a mistyped POLICY=, or why that policy refused them), not the
# policy's message and then the CLI's
one_line() { # expected start after "hbm: ", command...
  want=$1; shift
  "$HBM" "$@" > "$dir/out" 2> "$dir/err"; rc=$?
  if [ $rc -ne 2 ] || [ -s "$dir/out" ] || [ "$(wc -l < "$dir/err")" -ne 1 ] || ! grep -q -- "^hbm: $want" "$dir/err"; then
    echo "FAIL '$*': exit $rc, expected 2 and one line 'hbm: $want...':"; cat "$dir/err"; fail=1
  else echo "ok   '$*': $(cat "$dir/err")"; fi
}
one_line "--alloc-conf 'nope=moves:off': 'nope' is not a policy" replay "$good" --alloc-conf nope=moves:off
one_line "--alloc-conf 'nope=moves:off': 'nope' is not a policy" bench replay --alloc-conf nope=moves:off
one_line "--alloc-conf 'nope=moves:off': 'nope' is not a policy" mincap "$good" --alloc-conf nope=moves:off
one_line "--alloc-conf 'moves:off' went to every policy; policy bestfit: takes no settings" \
  bench replay --steps 1 --alloc-conf moves:off
one_line "--alloc-conf 'chunk:16MiB' went to every policy; policy caching: " bench sweep --alloc-conf chunk:16MiB --jobs 1
one_line "policy zoned: bad setting 'moves:maybe'" replay "$good" --policy zoned --alloc-conf moves:maybe
# a policy's own settings replace the common ones: common settings that every
# policy of the run replaces would go nowhere, unread, so they are refused
no_policy="would go to no policy: each one this run uses has its own (POLICY=SETTINGS)"
one_line "--alloc-conf 'chunk:32MiB' $no_policy" replay "$good" --policy zoned --alloc-conf chunk:32MiB \
  --alloc-conf zoned=trim:off
one_line "--alloc-conf 'garbage' $no_policy" mincap "$good" --policy zoned --alloc-conf zoned=trim:off \
  --alloc-conf garbage
one_line "--alloc-conf 'garbage' $no_policy" bench sweep --jobs 1 --alloc-conf garbage --alloc-conf zoned=trim:off \
  --alloc-conf caching=max_split_size_mb:128 --alloc-conf expandable=max_split_size_mb:128
one_line "--alloc-conf 'chunk:32MiB' went to every policy without settings of its own; policy caching: " \
  replay "$good" --policy zoned,caching --alloc-conf chunk:32MiB --alloc-conf zoned=trim:off
# a name before '=' longer than any policy's is no policy, and not copied as one
long=$(printf '%0300d' 0)
count_bad "--alloc-conf '$long=1': '$long' is not a policy" replay "$good" --alloc-conf "$long=1"
before_work "--capacity given twice ('1GiB', then '2GiB'): give it once" replay "$good" --capacity 1GiB --capacity 2GiB
# any option with a value, given twice: which one was meant is a guess (--alloc-conf may repeat)
"$HBM" replay "$good" --capacity 1GiB --policy caching,expandable --alloc-conf caching=max_split_size_mb:128 \
  --alloc-conf expandable=max_split_size_mb:128 > /dev/null 2> "$dir/err" ||
  { echo "FAIL --alloc-conf for two policies refused: $(cat "$dir/err")"; fail=1; }
# a flag may repeat; the snapshot's device named twice is refused, also where the first is device 0
"$HBM" gen llm --preset 7b-1gpu-80g --steps 1 --estimate --json --json > /dev/null 2> "$dir/err" ||
  { echo "FAIL --json given twice refused: $(cat "$dir/err")"; fail=1; }
before_work "--snapshot-device: the snapshot's device is given twice (a second: '1')" \
  import "$HBM_ROOT/tests/fixtures/snapshots/snapshot_basic_p2.pickle" --device 0 --snapshot-device 1 -o "$dir/twice.trace"
before_work "--policy given twice ('caching', then 'zoned'): give it once" mincap "$good" --policy caching --policy zoned
before_work "--policy given twice ('caching', then 'expandable'): give it once" \
  fidelity "$good" --policy caching --policy=expandable
before_work "-o given twice ('$dir/a.trace', then '$dir/b.trace'): give it once" \
  gen llm --preset 7b-1gpu-80g --steps 1 -o "$dir/a.trace" -o "$dir/b.trace"
before_work "^hbm: bench replay: --preset given twice ('7b-1gpu-80g', then '70b-zero3-64'): give it once" \
  bench replay --preset 7b-1gpu-80g --preset 70b-zero3-64
# a benchmark's messages name it, as its other messages do
before_work "^hbm: bench adamw: --params given twice ('1', then '2')" bench adamw --params 1 --params 2
# an unknown preset: the option named, and the presets there are, alike in each command
known="(known: 910c-dense, 7b-1gpu-80g, 70b-zero3-64; hbm gen llm --list-presets describes them)"
before_work "^hbm: bench gen: --preset: unknown preset 'nope' $known$" bench gen --preset nope
before_work "^hbm: bench replay: --preset: unknown preset 'nope' $known$" bench replay --preset nope
before_work "^hbm: --preset: unknown preset 'nope' $known$" demo --preset nope
before_work "^hbm: bench gen: --steps: expected a whole number" bench gen --steps 0
# an unknown option, or one without its value: one line naming it and the
# command, the same in every command (not getopt's own words and the usage)
for cmd in replay mincap import fidelity plan demo "gen llm" "bench replay" "bench alloc" "bench adamw" \
           "bench gen" "bench compact" "bench sweep"; do
  # shellcheck disable=SC2086
  "$HBM" $cmd --bogus > "$dir/out" 2> "$dir/err"; rc=$?
  [ $rc -eq 2 ] && [ ! -s "$dir/out" ] && [ "$(wc -l < "$dir/err")" -eq 1 ] &&
    grep -q "^hbm: $cmd: unknown option '--bogus' (try: hbm $cmd --help)$" "$dir/err" ||
    { echo "FAIL hbm $cmd --bogus: exit $rc, $(cat "$dir/err")"; fail=1; }
done
# a prefix two options share is refused as ambiguous, naming them (a unique
# prefix is taken, as getopt takes it)
count_bad "^hbm: replay: ambiguous option '--c': --capacity, --check (try: hbm replay --help)$" replay "$good" --c 1GiB
"$HBM" replay "$good" --cap 1GiB --policy caching > /dev/null 2>&1 || { echo "FAIL a unique prefix (--cap) refused"; fail=1; }
count_bad "^hbm: replay: --json takes no value, got '--json=yes' (try: hbm replay --help)$" replay "$good" --json=yes
# the same where the next option follows at once: it is not taken for the
# value ("--impl --reps 3" is not an implementation named --reps)
for cmd in "replay x --policy" "import x -o" "gen llm --preset" "bench sweep --jobs" "bench adamw --impl"; do
  opt=${cmd##* }; name=${cmd% x*}; name=${name% --*}
  for next in "" "--json" "--help"; do
    # shellcheck disable=SC2086
    "$HBM" $cmd $next > "$dir/out" 2> "$dir/err"; rc=$?
    [ $rc -eq 2 ] && [ "$(wc -l < "$dir/err")" -eq 1 ] && grep -q -- "^hbm: $name: $opt needs a value (try: hbm $name --help)$" "$dir/err" ||
      { echo "FAIL hbm $cmd $next: exit $rc, $(cat "$dir/err")"; fail=1; }
  done
done
# a negative number is still a value (refused for its range, not as missing)
before_work "bench sweep: --seed: expected a whole number, got '-1'" bench sweep --seed -1
before_work "--verify fills and checks real memory" replay "$good" --capacity 1GiB --verify
printf 'hbm-trace 1\na x 900TiB\nf x\n' > "$dir/huge.trace" # --verify would write 900 TiB
# (a host that cannot even reserve 32 TiB of address space, as under ThreadSanitizer, refuses the device first)
if "$HBM" replay "$dir/huge.trace" --policy zoned --device host:32TiB --verify 2>&1 | grep -q "cannot reserve"; then
  echo "note: this host cannot reserve 32 TiB of address space: the --verify memory case was not run"
else
  before_work "huge.trace (every live byte written) needs about 32.00 TiB of host memory, more than the" \
    replay "$dir/huge.trace" --policy zoned --device host:32TiB --verify
fi
# a host device is host address space: one the host cannot reserve is refused as it opens
before_work "host device: the host cannot reserve 1.00 PiB of address space for its capacity" \
  replay "$good" --policy bestfit --device host:1PiB
before_work "expected a device capacity of 2MiB (one page) to 1PiB, got '1B'" replay "$good" --capacity 1B
# a device spec's capacity: from one granule (the device's, 2 MiB unless given) to 1 PiB, said so for 0 too
before_work "^hbm: device 'sim:0': capacity '0' is not a size between one granule (2097152 B) and 1 PiB$" \
  replay "$good" --device sim:0
before_work "^hbm: device 'sim:0,granule=4KiB': capacity '0' is not a size between one granule (4096 B) and 1 PiB$" \
  replay "$good" --device sim:0,granule=4KiB
before_work "^hbm: device 'sim:2PiB': capacity '2PiB' is not a size between one granule (2097152 B) and 1 PiB$" \
  replay "$good" --device sim:2PiB
before_work "^hbm: device 'sim:1KiB': capacity '1KiB' is smaller than one granule (2097152 B)$" \
  replay "$good" --device sim:1KiB
before_work "expected a device capacity of 2MiB (one page) to 1PiB, got '2097151'" replay "$good" --capacity 2097151
"$HBM" replay "$good" --capacity 2MiB --policy bestfit > /dev/null 2> "$dir/err" ||
  { echo "FAIL --capacity 2MiB (one page, the least) refused: $(cat "$dir/err")"; fail=1; }
# and the most, 1 PiB, taken; a byte more refused
"$HBM" replay "$good" --capacity 1PiB --policy bestfit > /dev/null 2> "$dir/err" ||
  { echo "FAIL --capacity 1PiB (the most) refused: $(cat "$dir/err")"; fail=1; }
before_work "expected a device capacity of 2MiB (one page) to 1PiB, got '1125899906842625'" \
  replay "$good" --capacity 1125899906842625
before_work "expected a device capacity of 2MiB (one page) to 1PiB, got '2PiB'" \
  gen llm --preset 7b-1gpu-80g --steps 1 --capacity 2PiB -o "$dir/never.trace"
[ -e "$dir/never.trace" ] && { echo "FAIL gen --capacity 2PiB wrote a trace"; fail=1; }
cp "$good" "$dir/in.trace"
before_work "in.trace: refusing to overwrite an input file" replay "$dir/in.trace" --capacity 1GiB --html "$dir/in.trace"
mkdir -p "$dir/outdir"
"$HBM" replay "$good" --capacity 1GiB --html "$dir/outdir" > "$dir/out" 2> "$dir/err"; rc=$?
[ $rc -eq 1 ] && [ ! -s "$dir/out" ] && grep -q "cannot write: Is a directory" "$dir/err" ||
  { echo "FAIL replay --html DIR: exit $rc, stdout $(wc -c < "$dir/out") bytes, $(cat "$dir/err")"; fail=1; }
printf 'hbm-trace 1\nconf expandable_segments:True\na x 1KiB @0x7f0000000000\nf x\n' > "$dir/es.trace"
# fidelity: the recorded expandable_segments gives way to the policy asked for
"$HBM" fidelity "$dir/es.trace" | grep -q "^fidelity of expandable" || { echo "FAIL fidelity's own pick"; fail=1; }
"$HBM" fidelity "$dir/es.trace" --policy caching | grep -q "^fidelity of caching" || { echo "FAIL fidelity --policy caching"; fail=1; }
before_work "expandable_segments:True contradicts policy caching" fidelity "$dir/es.trace" --policy caching \
  --alloc-conf expandable_segments:True
"$HBM" fidelity "$dir/es.trace" --alloc-conf caching=max_split_size_mb:30 | grep -q "^fidelity of caching" ||
  { echo "FAIL fidelity --alloc-conf caching=..."; fail=1; }
before_work "settings for expandable, but --policy caching" fidelity "$dir/es.trace" --policy caching \
  --alloc-conf expandable=max_split_size_mb:30
before_work "given twice" fidelity "$dir/es.trace" --alloc-conf max_split_size_mb:30 --alloc-conf max_split_size_mb:40
"$HBM" replay "$good" --capacity 1GiB --policy caching,expandable --alloc-conf caching=expandable_segments:False \
  > /dev/null || { echo "FAIL caching=expandable_segments:False (the default, said) refused"; fail=1; }

# A long trace: 3000 steps of one 1 KiB block each, whose JSON with every
# sample is far larger than one write (below, and with | head)
awk 'BEGIN { print "hbm-trace 1"; print "capacity 1GiB"; for (i = 1; i <= 3000; i++) { print "a x" i " 1KiB"; print "s " i } }' > "$dir/long.trace"

# a report that cannot be written is a failed run, said on stderr, not a silent exit 0
if [ -w /dev/full ]; then
  for cmd in "replay $good --capacity 1GiB --json" "replay $good --capacity 1GiB" "gen llm --preset 910c-dense --estimate --json" "--help"; do
    # shellcheck disable=SC2086
    "$HBM" $cmd > /dev/full 2> "$dir/err"; rc=$?
    [ $rc -eq 1 ] && grep -q "writing to standard output" "$dir/err" ||
      { echo "FAIL hbm $cmd > /dev/full: exit $rc, $(cat "$dir/err")"; fail=1; }
  done
  # one large JSON whose first write fails leaves nothing for the last flush,
  # errno long gone: the failure is said, but not as a broken pipe, which it was not
  "$HBM" replay "$dir/long.trace" --policy all --samples --every 1 --json > /dev/full 2> "$dir/err"; rc=$?
  [ $rc -eq 1 ] && grep -q "writing to standard output: " "$dir/err" && ! grep -q "Broken pipe" "$dir/err" ||
    { echo "FAIL a large JSON > /dev/full: exit $rc, $(cat "$dir/err")"; fail=1; }
else
  echo "skip: no /dev/full to test write errors on"
fi

# An output file that cannot be written is a failed run (1), not bad input (2):
# a missing directory ("cannot create"), a directory in the way ("cannot write: Is a directory").
# Reading an input that is not there stays bad input.
snap="$HBM_ROOT/tests/fixtures/snapshots/snapshot_basic_p2.pickle"
mkdir "$dir/adir"
write_fails() { # what, command...
  what=$1; shift
  "$HBM" "$@" > /dev/null 2> "$dir/err"; rc=$?
  [ $rc -eq 1 ] && grep -q "$what" "$dir/err" || { echo "FAIL hbm $*: exit $rc, expected 1 and '$what': $(cat "$dir/err")"; fail=1; }
}
for out in "$dir/none/x" "$dir/adir"; do
  what="cannot create"; [ "$out" = "$dir/adir" ] && what="cannot write: Is a directory"
  write_fails "$what" import "$snap" -o "$out"
  write_fails "$what" import "$snap" -o "$out" --json
  write_fails "$what" gen llm --preset 7b-1gpu-80g --steps 1 -o "$out"
  write_fails "$what" replay "$good" --capacity 1GiB --html "$out"
  write_fails "$what" demo --steps 1 --policy bestfit --html "$out"
done
ls "$dir/adir" | grep -q . && { echo "FAIL a failed write left files behind: $(ls "$dir/adir")"; fail=1; }
"$HBM" import "$dir/none.pickle" -o "$dir/x.trace" > /dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || { echo "FAIL import of a missing input: exit $rc, expected 2"; fail=1; }

# A reader that stops early (| head) is a failed write too: exit 1 with one
# line on stderr that says why (the pipe broke: also where the write that
# failed was an earlier one and the last flush had nothing left, as for the
# one large JSON), not a death by SIGPIPE (141).
for json in "" --json; do
  # shellcheck disable=SC2086
  { "$HBM" replay "$dir/long.trace" --policy all --samples --every 1 $json 2> "$dir/err"; echo $? > "$dir/rc"; } | head -c 100 > /dev/null
  rc=$(cat "$dir/rc")
  [ "$rc" -eq 1 ] && [ "$(wc -l < "$dir/err")" -eq 1 ] && grep -q "writing to standard output: Broken pipe$" "$dir/err" ||
    { echo "FAIL replay $json | head -c 100: exit $rc, stderr '$(cat "$dir/err")'"; fail=1; }
done

# an input past the reader's limit (16 GiB) is refused by its size, before a
# byte is read, by every command that reads one (a sparse file: no disk used)
if truncate -s 17G "$dir/huge.trace" 2> /dev/null; then
  for cmd in "replay HUGE --capacity 1GiB" "mincap HUGE" "fidelity HUGE" "import HUGE -o $dir/huge.out" \
             "bench replay --trace HUGE"; do
    # shellcheck disable=SC2086
    "$HBM" $(echo "$cmd" | sed "s|HUGE|$dir/huge.trace|") > /dev/null 2> "$dir/err"; rc=$?
    [ $rc -eq 2 ] && grep -q "huge.trace: 18253611008 bytes, more than the 16.00 GiB the reader takes" "$dir/err" ||
      { echo "FAIL hbm $cmd on a 17 GiB file: exit $rc, $(cat "$dir/err")"; fail=1; }
  done
  [ -e "$dir/huge.out" ] && { echo "FAIL import of a 17 GiB file left an output"; fail=1; }
  rm -f "$dir/huge.trace"
else
  echo "skip: no sparse files here to test the input limit on"
fi

# out of host memory is a failed run (exit 1), still with the file and the words
# (skipped where the binary cannot start under the limit, e.g. AddressSanitizer)
if (ulimit -v 600000 && "$HBM" --version) > /dev/null 2>&1; then
  (ulimit -v 600000 && exec "$HBM" replay /dev/zero --capacity 1GiB) > /dev/null 2> "$dir/err"; rc=$?
  [ $rc -eq 1 ] && grep -q "^hbm: /dev/zero: out of host memory reading [0-9]* bytes" "$dir/err" ||
    { echo "FAIL replay /dev/zero under ulimit -v: exit $rc, $(cat "$dir/err")"; fail=1; }
else
  echo "skip: hbm does not start under ulimit -v 600000"
fi

# every message starts with "hbm: ", a reader's or a writer's naming its file
# after it: a file that cannot be opened, a line that cannot be read, an
# output that cannot be written
printf 'id,lower,upper,size\na,0,1,1\n' > "$dir/one.csv"
printf 'id,lower,upper,size\na,0,1\n' > "$dir/short.csv"
for args in "replay /nonexistent|2|hbm: /nonexistent: cannot open: " \
            "plan $dir/short.csv|2|hbm: $dir/short.csv:2: 3 fields: expected 4" \
            "plan $dir/one.csv -o /dev/full|1|hbm: /dev/full: write failed: " \
            "import /nonexistent -o $dir/never.trace|2|hbm: /nonexistent: cannot open: "; do
  cmd=${args%%|*} rest=${args#*|}
  want_rc=${rest%%|*} want=${rest#*|}
  if [ "$want" = "hbm: /dev/full: write failed: " ] && [ ! -w /dev/full ]; then echo "skip: no /dev/full"; continue; fi
  # shellcheck disable=SC2086
  "$HBM" $cmd > /dev/null 2> "$dir/err"; rc=$?
  if [ $rc -ne "$want_rc" ] || ! head -n 1 "$dir/err" | grep -qF "$want" || grep -qv "^hbm: " "$dir/err"; then
    echo "FAIL hbm $cmd: exit $rc (expected $want_rc), stderr '$(cat "$dir/err")', expected one starting '$want'"; fail=1
  else echo "ok   hbm $cmd: $(head -n 1 "$dir/err")"; fi
done

"$HBM" nosuchcommand > /dev/null 2>&1; [ $? -eq 2 ] || { echo "FAIL unknown command: expected exit 2"; fail=1; }
# a command missing what it needs says what, on its first line, before the usage
for args in "|hbm: expected a COMMAND" "bench|hbm: bench: expected a benchmark NAME" \
            "gen|hbm: gen: expected a generator (llm)" "gen llm|hbm: gen llm: -o TRACE is required (or --estimate)"; do
  cmd=${args%%|*} want=${args#*|}
  # shellcheck disable=SC2086
  "$HBM" $cmd > /dev/null 2> "$dir/err"; rc=$?
  [ $rc -eq 2 ] && [ "$(head -n 1 "$dir/err")" = "$want" ] ||
    { echo "FAIL hbm $cmd: exit $rc, first line '$(head -n 1 "$dir/err")', expected '$want'"; fail=1; }
done
"$HBM" --help | grep -q "replay" || { echo "FAIL --help lists no commands"; fail=1; }
"$HBM" replay --help | grep -q -- "--policy" || { echo "FAIL replay --help"; fail=1; }
# an empty path names no file: every reader says so, exit 2
for args in "replay ''" "import '' -o $dir/x.trace" "mincap ''" "fidelity ''" "plan ''" "bench replay --trace '' --device sim:1GiB"; do
  eval "\"\$HBM\" $args" > /dev/null 2> "$dir/err"; rc=$?
  [ $rc -eq 2 ] && grep -q "expected a file path, got an empty one" "$dir/err" ||
    { echo "FAIL empty path, $args: exit $rc, $(cat "$dir/err")"; fail=1; }
done
exit $fail
