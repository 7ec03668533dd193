#!/bin/sh
# Where outputs go: a regular file is replaced atomically (through a symbolic
# link, the file it names, the link kept; its mode kept; a link that cannot be
# followed is refused, a dangling one replaced); standard output is
# written where it stands; a FIFO or a device is written in place, never
# replaced by a regular file; an empty path is refused as usage
# before any work; a directory is not written; a missing directory is said
# before any work.
set -u
fail=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
printf 'id,lower,upper,size\na,0,1,2\nb,0,1,3\n' > "$dir/p.csv"

# Through a symbolic link: the target gets the plan, the link stays a link.
echo old > "$dir/real.csv"
ln -s real.csv "$dir/link.csv"
"$HBM" plan "$dir/p.csv" -o "$dir/link.csv" > /dev/null || { echo "FAIL symlink: exit $?"; fail=1; }
[ -L "$dir/link.csv" ] || { echo "FAIL symlink: the link was replaced"; fail=1; }
grep -q '^a,0,1,2,' "$dir/real.csv" || { echo "FAIL symlink: the target does not hold the plan"; fail=1; }
ls "$dir" | grep -q tmp && { echo "FAIL symlink: a temporary file was left"; fail=1; }
# A link that cannot be followed (a loop): refused, exit 1, the link kept.
ln -s loop2 "$dir/loop1"
ln -s loop1 "$dir/loop2"
"$HBM" plan "$dir/p.csv" -o "$dir/loop1" > /dev/null 2> "$dir/err"; rc=$?
[ $rc -eq 1 ] && [ -L "$dir/loop1" ] && grep -q "loop1: cannot follow the symbolic link: " "$dir/err" ||
  { echo "FAIL link loop: exit $rc: $(cat "$dir/err")"; fail=1; }
# ... said before the work, as a missing directory is: no replay runs, no table
"$HBM" replay "$HBM_ROOT/tests/fixtures/step437.trace" --policy bestfit --html "$dir/loop1" > "$dir/out" 2> "$dir/err"; rc=$?
[ $rc -eq 1 ] && [ ! -s "$dir/out" ] && grep -q "loop1: cannot follow the symbolic link: " "$dir/err" ||
  { echo "FAIL link loop up front: exit $rc, stdout $(wc -c < "$dir/out") bytes: $(cat "$dir/err")"; fail=1; }
# A dangling link names no file yet: the output replaces it, as a new file.
ln -s nothing.csv "$dir/dangling.csv"
"$HBM" plan "$dir/p.csv" -o "$dir/dangling.csv" > /dev/null || { echo "FAIL dangling link: exit $?"; fail=1; }
[ ! -L "$dir/dangling.csv" ] && grep -q '^a,0,1,2,' "$dir/dangling.csv" && [ ! -e "$dir/nothing.csv" ] ||
  { echo "FAIL dangling link: not replaced by the output"; fail=1; }

# A replaced file keeps its mode.
printf 'x\n' > "$dir/mode.csv"
chmod 600 "$dir/mode.csv"
"$HBM" plan "$dir/p.csv" -o "$dir/mode.csv" > /dev/null || { echo "FAIL mode: exit $?"; fail=1; }
[ "$(stat -c %a "$dir/mode.csv")" = 600 ] || { echo "FAIL mode: $(stat -c %a "$dir/mode.csv"), expected 600"; fail=1; }

# Standard output that is a file: written where it stands, after what the
# shell and earlier commands put there, never replacing the file.
printf 'log line\n' > "$dir/log"
"$HBM" plan "$dir/p.csv" -o /dev/stdout >> "$dir/log" 2> /dev/null || { echo "FAIL -o /dev/stdout >>: exit $?"; fail=1; }
{ echo header; "$HBM" plan "$dir/p.csv" -o /dev/fd/1 2> /dev/null; echo footer; } > "$dir/framed"
[ "$(head -n 1 "$dir/log")" = "log line" ] && grep -q '^a,0,1,2,' "$dir/log" ||
  { echo "FAIL -o /dev/stdout >> FILE: $(head -c 200 "$dir/log")"; fail=1; }
[ "$(head -n 1 "$dir/framed")" = header ] && [ "$(tail -n 1 "$dir/framed")" = footer ] && grep -q '^b,0,1,3,' "$dir/framed" ||
  { echo "FAIL -o /dev/fd/1 between two echoes: $(head -c 200 "$dir/framed")"; fail=1; }
# however standard output is spelled (and the file's own name is one spelling)
for spelling in //dev/stdout /dev/./stdout /proc/self/fd/1 "$dir/log2"; do
  printf 'log line\n' > "$dir/log2"
  "$HBM" plan "$dir/p.csv" -o "$spelling" >> "$dir/log2" 2> /dev/null
  [ "$(head -n 1 "$dir/log2")" = "log line" ] && grep -q '^a,0,1,2,' "$dir/log2" ||
    { echo "FAIL -o $spelling >> FILE: $(head -c 200 "$dir/log2")"; fail=1; }
done
# standard input is read-only: the write fails and its file is kept
printf 'keep\n' > "$dir/in"
"$HBM" plan "$dir/p.csv" -o /dev/stdin < "$dir/in" > /dev/null 2> "$dir/err"; rc=$?
[ $rc -eq 1 ] && [ "$(cat "$dir/in")" = keep ] || { echo "FAIL -o /dev/stdin: exit $rc, the file holds $(head -c 100 "$dir/in")"; fail=1; }
# a device standard input also is (/dev/null here) is written as any device
# (standard output elsewhere, so that it is standard input the path matches)
"$HBM" plan "$dir/p.csv" -o /dev/null < /dev/null > "$dir/plain_out" 2> "$dir/err" ||
  { echo "FAIL -o /dev/null < /dev/null: exit $?: $(cat "$dir/err")"; fail=1; }
# a closed standard output: refused, not made into a file
"$HBM" plan "$dir/p.csv" -o /dev/stdout >&- 2> "$dir/err"; rc=$?
[ $rc -eq 1 ] && grep -q "descriptor is not open" "$dir/err" || { echo "FAIL -o /dev/stdout, closed: exit $rc: $(cat "$dir/err")"; fail=1; }

# A FIFO: written into, and still a FIFO.
if mkfifo "$dir/fifo" 2>/dev/null; then
  cat "$dir/fifo" > "$dir/from_fifo" &
  reader=$!
  "$HBM" plan "$dir/p.csv" -o "$dir/fifo" > /dev/null || { echo "FAIL fifo: exit $?"; fail=1; }
  if [ -p "$dir/fifo" ]; then
    wait $reader
    grep -q '^b,0,1,3,' "$dir/from_fifo" || { echo "FAIL fifo: the reader did not get the plan"; fail=1; }
    echo "ok   fifo"
  else
    kill $reader 2>/dev/null  # nobody will write to it now
    echo "FAIL fifo: replaced by a regular file"; fail=1
  fi
else
  echo "note: mkfifo unavailable: the FIFO case was not run"
fi

# A character device (a private copy of /dev/null, where this user may make one).
if mknod "$dir/null" c 1 3 2>/dev/null; then
  "$HBM" gen llm --preset 7b-1gpu-80g --steps 2 -o "$dir/null" > /dev/null || { echo "FAIL device: exit $?"; fail=1; }
  if [ -c "$dir/null" ]; then echo "ok   device"; else echo "FAIL device: replaced by a regular file"; fail=1; fi
else
  echo "note: mknod not permitted: the device case was not run"
fi

# An empty path: usage, exit 2, before any work.
for cmd in "plan $dir/p.csv -o" "gen llm --preset 7b-1gpu-80g -o" "import $dir/p.csv -o" \
           "replay $HBM_ROOT/tests/fixtures/step437.trace --html" "demo --html"; do
  # shellcheck disable=SC2086
  "$HBM" $cmd '' > "$dir/out" 2> "$dir/err"
  rc=$?
  if [ $rc -ne 2 ] || ! grep -q "expected a file path, got an empty one" "$dir/err"; then
    echo "FAIL empty path ($cmd): exit $rc: $(cat "$dir/err")"; fail=1
  fi
done

# A directory: not written, exit 1, the directory intact.
mkdir "$dir/adir"
"$HBM" plan "$dir/p.csv" -o "$dir/adir" > /dev/null 2> "$dir/err"
rc=$?
[ $rc -eq 1 ] && [ -d "$dir/adir" ] && grep -q "adir: cannot write: Is a directory" "$dir/err" ||
  { echo "FAIL directory: exit $rc: $(cat "$dir/err")"; fail=1; }

# Standard output as the output: it carries the output alone (the summary, text or
# JSON, goes to standard error), so the next command in a pipe reads it whole.
"$HBM" plan "$dir/p.csv" -o /dev/stdout 2> "$dir/plan_err" | "$HBM" plan /dev/stdin > "$dir/plan_again" 2>&1 ||
  { echo "FAIL plan -o /dev/stdout | plan: $(cat "$dir/plan_again")"; fail=1; }
grep -q "wrote /dev/stdout" "$dir/plan_err" || { echo "FAIL plan -o /dev/stdout: no summary on stderr"; fail=1; }
"$HBM" gen llm --layers 2 --hidden 256 --seq 128 --steps 2 --json -o /dev/stdout 2> "$dir/gen_err" |
  "$HBM" replay /dev/stdin --policy caching > "$dir/gen_replay" 2>&1 ||
  { echo "FAIL gen llm -o /dev/stdout | replay: $(cat "$dir/gen_replay")"; fail=1; }
grep -q '"output":"/dev/stdout"' "$dir/gen_err" || { echo "FAIL gen llm -o /dev/stdout: no JSON on stderr"; fail=1; }
"$HBM" replay "$HBM_ROOT/tests/fixtures/step437.trace" --policy caching --html /dev/stdout \
  > "$dir/page.html" 2> "$dir/page_err" || { echo "FAIL replay --html /dev/stdout: $(cat "$dir/page_err")"; fail=1; }
head -n 1 "$dir/page.html" | grep -q "^<!DOCTYPE html>$" && tail -n 1 "$dir/page.html" | grep -q "</html>$" || { echo "FAIL replay --html /dev/stdout: the page is not alone on stdout"; fail=1; }
grep -q "peak reserv" "$dir/page_err" && grep -q "report: /dev/stdout" "$dir/page_err" ||
  { echo "FAIL replay --html /dev/stdout: no table on stderr"; fail=1; }
"$HBM" demo --preset 7b-1gpu-80g --steps 1 --policy caching --html /dev/stdout > "$dir/demo.html" 2> "$dir/demo_err" ||
  { echo "FAIL demo --html /dev/stdout: $(cat "$dir/demo_err")"; fail=1; }
tail -n 1 "$dir/demo.html" | grep -q "</html>$" && grep -q "peak reserved" "$dir/demo_err" ||
  { echo "FAIL demo --html /dev/stdout: the page is not alone on stdout"; fail=1; }
"$HBM" gen llm --layers 2 --hidden 256 --seq 128 --steps 2 -o "$dir/small.trace" > "$dir/gen_out" 2>&1
grep -q "wrote .*small.trace" "$dir/gen_out" || { echo "FAIL gen llm -o FILE: summary not on stdout"; fail=1; }
# ... and where standard error is closed, or is the output too, the summary
# has nowhere to go but into the output: it goes nowhere, exit 0. (A wrapper
# such as valgrind does not start with standard error closed: skipped there.)
if ! "$HBM" --version > /dev/null 2>&-; then
  echo "skip standard error closed: $HBM does not start without standard error (a wrapper's limit)"
else
  "$HBM" plan "$dir/p.csv" -o /dev/stdout > "$dir/plan_alone" 2>&- &&
    "$HBM" plan "$dir/p.csv" -o /dev/stdout > "$dir/plan_both" 2>&1 &&
    [ "$(cat "$dir/plan_alone")" = "$(cat "$dir/plan_both")" ] && [ "$(tail -n 1 "$dir/plan_alone" | cut -d, -f1)" = b ] ||
    { echo "FAIL plan -o /dev/stdout, standard error closed or the same: $(tail -n 2 "$dir/plan_alone" "$dir/plan_both")"; fail=1; }
  "$HBM" replay "$HBM_ROOT/tests/fixtures/step437.trace" --policy caching --html /dev/stdout > "$dir/page2.html" 2>&- &&
    tail -n 1 "$dir/page2.html" | grep -q "</html>$" ||
    { echo "FAIL replay --html /dev/stdout, standard error closed: $(tail -n 2 "$dir/page2.html")"; fail=1; }
fi

# A directory that is not there, or a file where a directory should be: said
# before any work (a replay or a demo would otherwise run to the end first),
# as writing would say it, exit 1, nothing written.
for cmd in "plan $dir/p.csv -o" "replay $HBM_ROOT/tests/fixtures/step437.trace --policy caching --html" \
           "demo --preset 7b-1gpu-80g --steps 1 --policy caching --html" "gen llm --layers 3 --hidden 384 --steps 1 -o"; do
  for out in "$dir/none/out" "$dir/p.csv/out"; do
    # shellcheck disable=SC2086
    "$HBM" $cmd "$out" > "$dir/out" 2> "$dir/err"; rc=$?
    [ $rc -eq 1 ] && grep -q "cannot create: \(No such file or directory\|Not a directory\)" "$dir/err" &&
      ! grep -q "peak reserv\|wrote" "$dir/out" "$dir/err" ||
      { echo "FAIL hbm $cmd $out: exit $rc, $(cat "$dir/out" "$dir/err")"; fail=1; }
  done
done

# A name near NAME_MAX (255 bytes) is a file one may write: its temporary
# name is cut to fit beside it, and nothing is left there.
long=$(printf '%0240d' 0 | tr 0 n).csv
mkdir "$dir/long"
"$HBM" plan "$dir/p.csv" -o "$dir/long/$long" > /dev/null 2> "$dir/err" && grep -q '^a,0,1,2,' "$dir/long/$long" &&
  [ "$(ls "$dir/long")" = "$long" ] || { echo "FAIL a 244-byte name: $(cat "$dir/err"); $(ls "$dir/long")"; fail=1; }
# A path longer than a diagnostic's 255 bytes is said whole.
deep="$dir/$(printf '%0200d' 0 | tr 0 d)/$(printf '%0100d' 0 | tr 0 x).csv"
"$HBM" plan "$dir/p.csv" -o "$deep" > /dev/null 2> "$dir/err"; rc=$?
[ $rc -eq 1 ] && grep -qF "$deep: cannot create: " "$dir/err" || { echo "FAIL a long path's message: exit $rc: $(cat "$dir/err")"; fail=1; }

# A file in the root directory: "/" is the directory checked before the work
# (not "."), so where one may not write there, that is said before any
# replay, with nothing on standard output, though the working directory takes
# files. Run as a user who cannot write "/" (root drops to 65534 for it).
as=""; [ "$(id -u)" -eq 0 ] && as="setpriv --reuid=65534 --regid=65534 --clear-groups"
chmod 711 "$dir" && mkdir "$dir/anyone" && chmod 777 "$dir/anyone"
if (cd "$dir/anyone" && $as sh -c '[ ! -w / ] && [ -w . ] && [ -r "$1" ] && "$2" --version' sh \
      "$HBM_ROOT/tests/fixtures/step437.trace" "$HBM") > /dev/null 2>&1; then
  (cd "$dir/anyone" && $as "$HBM" replay "$HBM_ROOT/tests/fixtures/step437.trace" --policy bestfit \
    --html "/hbm-output-paths-$$.html") > "$dir/anyone/out" 2> "$dir/anyone/err"; rc=$?
  [ $rc -eq 1 ] && grep -q "^hbm: /hbm-output-paths-$$.html: cannot create: " "$dir/anyone/err" && [ ! -s "$dir/anyone/out" ] ||
    { echo "FAIL --html /FILE where / takes no file: exit $rc, stdout $(wc -c < "$dir/anyone/out") bytes: $(cat "$dir/anyone/err")"; fail=1; }
else
  echo "skip a file in the root directory: no user here who cannot write / and can run hbm"
fi

# A file that is there is replaced by a new one made beside it: where its
# directory takes no new file, that is said before the work too (not after a
# whole replay), exit 1, the file kept; through a link, the directory of the
# file it names is the one checked.
mkdir "$dir/shut" && printf 'keep\n' > "$dir/shut/page.html" && chmod 555 "$dir/shut" && chmod 666 "$dir/shut/page.html"
ln -s ../shut/page.html "$dir/anyone/via.html"
if $as sh -c '[ ! -w "$1" ] && [ -w "$1/page.html" ]' sh "$dir/shut" 2> /dev/null; then
  for out in "$dir/shut/page.html" "$dir/anyone/via.html"; do
    $as "$HBM" replay "$HBM_ROOT/tests/fixtures/step437.trace" --policy bestfit --html "$out" \
      > "$dir/anyone/out" 2> "$dir/anyone/err"; rc=$?
    [ $rc -eq 1 ] && grep -qF "$out: cannot create: " "$dir/anyone/err" && [ ! -s "$dir/anyone/out" ] &&
      [ "$(cat "$dir/shut/page.html")" = keep ] ||
      { echo "FAIL --html over a file whose directory takes no file ($out): exit $rc, stdout $(wc -c < "$dir/anyone/out") bytes: $(cat "$dir/anyone/err")"; fail=1; }
  done
else
  echo "skip a file whose directory takes no new file: no user here for whom a directory of mode 555 is shut"
fi
chmod 755 "$dir/shut"

# Under /dev and /proc only a descriptor's name is left to the writer (a
# process's fd directory is not writable); any other path there is checked
# before the work, as a file's: nothing replayed, nothing on standard output.
"$HBM" replay "$HBM_ROOT/tests/fixtures/step437.trace" --policy bestfit --html /proc/nonexistent/x.html \
  > "$dir/out" 2> "$dir/err"; rc=$?
[ $rc -eq 1 ] && grep -q "^hbm: /proc/nonexistent/x.html: cannot create: " "$dir/err" && [ ! -s "$dir/out" ] ||
  { echo "FAIL --html under /proc naming no descriptor: exit $rc, stdout $(wc -c < "$dir/out") bytes: $(cat "$dir/err")"; fail=1; }

# The output is checked again as it is written, not only before the work: a
# path made a link to the input while the work ran (gdb holds hbm there) is
# refused then, exit 2 as before the work, and the input is kept. replay
# still prints its table; where standard output fails too, the exit stays 2
# (the failure is said, and does not make the bad input a failed run). import
# is refused by the writer itself (its trace knows its source): exit 2 too.
if command -v gdb > /dev/null 2>&1; then
  mkdir "$dir/race"
  cp "$HBM_ROOT/tests/fixtures/step437.trace" "$dir/race/t.trace"
  cp "$HBM_ROOT/tests/fixtures/snapshots/snapshot_basic_p2.pickle" "$dir/race/s.pickle"
  race() { # name, function to stop in, output to make a link to INPUT there, INPUT, stdout, hbm arguments...
    name=$1 stop=$2 out=$3 input=$4 stdout=$5; shift 5
    rm -f "$out"
    printf 'set pagination off\nset confirm off\ntbreak %s\nrun %s > %s 2> %s\nshell ln -s %s %s\ncontinue\n' \
      "$stop" "$*" "$stdout" "$dir/race/$name.err" "$input" "$out" > "$dir/race/$name.gdb"
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" gdb -q -batch -x "$dir/race/$name.gdb" "$HBM" \
      > "$dir/race/$name.log" 2>&1
    sed -n 's/.*exited with code 0*\([0-9][0-9]*\)\]$/\1/p; s/.*exited normally\]$/0/p' "$dir/race/$name.log"
  }
  rc=$(race replay hbm_replay "$dir/race/page.html" t.trace "$dir/race/replay.out" \
    replay "$dir/race/t.trace" --policy bestfit --html "$dir/race/page.html")
  if [ -z "$rc" ]; then
    echo "skip an output made the input during the work: gdb could not run hbm: $(tail -n 1 "$dir/race/replay.log")"
  else
    [ "$rc" -eq 2 ] && grep -q "page.html: refusing to overwrite an input file" "$dir/race/replay.err" &&
      grep -q "^bestfit " "$dir/race/replay.out" && cmp -s "$dir/race/t.trace" "$HBM_ROOT/tests/fixtures/step437.trace" ||
      { echo "FAIL replay --html made the trace during the replay: exit $rc: $(cat "$dir/race/replay.err")"; fail=1; }
    if [ -w /dev/full ]; then
      rc=$(race full hbm_replay "$dir/race/page.html" t.trace /dev/full \
        replay "$dir/race/t.trace" --policy bestfit --html "$dir/race/page.html")
      [ "$rc" = 2 ] && grep -q "refusing to overwrite an input file" "$dir/race/full.err" &&
        grep -q "writing to standard output" "$dir/race/full.err" ||
        { echo "FAIL the same > /dev/full: exit $rc, expected 2: $(cat "$dir/race/full.err")"; fail=1; }
    fi
    rc=$(race import hbm_snapshot_import "$dir/race/s.trace" s.pickle "$dir/race/import.out" \
      import "$dir/race/s.pickle" -o "$dir/race/s.trace")
    [ "$rc" = 2 ] && grep -q "s.trace: refusing to overwrite the input file" "$dir/race/import.err" &&
      cmp -s "$dir/race/s.pickle" "$HBM_ROOT/tests/fixtures/snapshots/snapshot_basic_p2.pickle" ||
      { echo "FAIL import -o made the snapshot during the import: exit $rc: $(cat "$dir/race/import.err")"; fail=1; }
    [ $fail -eq 0 ] && echo "ok   an output made the input during the work: refused as it is written, exit 2"
  fi
fi

[ $fail -eq 0 ] && echo "output_paths: ok"
exit $fail
