#!/bin/sh
# make install's layout works: the README's example (examples/quickstart.c)
# builds against the installed header and libraries with exactly the command
# lines its top comment gives (the README's, for app.c), shared and static,
# and each program starts with no LD_LIBRARY_PATH and prints what the README says.
set -eu
command -v pkg-config >/dev/null || { echo "skip: pkg-config is not installed"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cmake --install "$HBM_BUILD" --prefix "$dir/prefix" > /dev/null
libdir=$(ls -d "$dir"/prefix/lib*/pkgconfig | head -n 1)
test -f "$dir/prefix/include/hbm.h"
test -x "$dir/prefix/bin/hbm"
export PKG_CONFIG_PATH="$libdir"
unset LD_LIBRARY_PATH # the program must find the library by itself
# A sanitizer build installs instrumented libraries: link the example the same
# way. The documented lines run as written; only the compiler they call is
# stricter (and instrumented where the build is).
san=$(sed -n 's/^HBM_SANITIZE:STRING=//p' "$HBM_BUILD/CMakeCache.txt")
case "$san" in
  address) sanflags="-fsanitize=address,undefined" ;;
  thread) sanflags="-fsanitize=thread" ;;
  memory) sanflags="-fsanitize=memory" ;;
  *) sanflags="" ;;
esac
compiler=cc
[ "$san" = memory ] && compiler=clang # gcc has no MemorySanitizer
# shellcheck disable=SC2086
cc() { command $compiler -std=c11 -Wall -Werror $sanflags "$@"; }
sed -n 's/^ \*   \(cc quickstart\.c .*\)$/\1/p' "$HBM_ROOT/examples/quickstart.c" > "$dir/commands"
[ "$(grep -c . "$dir/commands")" -eq 2 ] || { echo "FAIL examples/quickstart.c does not give two cc lines:"; cat "$dir/commands"; exit 1; }
cp "$HBM_ROOT/examples/quickstart.c" "$dir/quickstart.c"
cd "$dir"
while read -r line; do
  readme=$(echo "$line" | sed 's/quickstart/app/g')
  grep -qxF "$readme" "$HBM_ROOT/README.md" || { echo "FAIL README does not give: $readme"; exit 1; }
  echo "\$ $line"
  rm -f quickstart
  eval "$line"
  out=$(./quickstart) || { echo "FAIL ./quickstart, built by '$line', does not run"; exit 1; }
  echo "$out"
  echo "$out" | grep -q "free total 16.0 GiB, largest free 4.0 GiB, fragmentation ratio 3.00"
  echo "$out" | grep -q "4.2 GiB AllReduce buffer: out of device memory"
done < "$dir/commands"
# The shared library exports only hbm_ names: nothing of its own can clash
# with a symbol of the program that links it.
if command -v nm >/dev/null; then
  so=$(ls "$(dirname "$libdir")"/libhbm.so* | head -n 1)
  stray=$(nm -D --defined-only "$so" | awk '$3 !~ /^(hbm_|_)/ { print $3 }')
  [ -z "$stray" ] || { echo "FAIL libhbm.so exports names without the hbm_ prefix: $stray"; exit 1; }
fi
