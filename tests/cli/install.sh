#!/bin/sh
# make install's layout works: the README's example (examples/quickstart.c)
# compiles against the installed header and libraries through pkg-config,
# statically and dynamically, and prints what the README says.
set -eu
command -v pkg-config >/dev/null || { echo "skip: pkg-config is not installed"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cmake --install "$HBM_BUILD" --prefix "$dir/prefix" > /dev/null
libdir=$(ls -d "$dir"/prefix/lib*/pkgconfig | head -n 1)
test -f "$dir/prefix/include/hbm.h"
test -x "$dir/prefix/bin/hbm"
export PKG_CONFIG_PATH="$libdir"
# A sanitizer build installs instrumented libraries: link the example the same way.
san=$(sed -n 's/^HBM_SANITIZE:STRING=//p' "$HBM_BUILD/CMakeCache.txt")
case "$san" in
  address) sanflags="-fsanitize=address,undefined" ;;
  thread) sanflags="-fsanitize=thread" ;;
  *) sanflags="" ;;
esac
cc -std=c11 -Wall -Werror $sanflags "$HBM_ROOT/examples/quickstart.c" $(pkg-config --cflags hbm) \
   $(pkg-config --libs hbm) -Wl,-rpath,"$(dirname "$libdir")" -o "$dir/quick_shared"
cc -std=c11 -Wall -Werror $sanflags "$HBM_ROOT/examples/quickstart.c" $(pkg-config --cflags hbm) \
   "$(dirname "$libdir")/libhbm.a" -lpthread -lm -ldl -o "$dir/quick_static"
for bin in quick_shared quick_static; do
  out=$("$dir/$bin")
  echo "$out"
  echo "$out" | grep -q "free total 16.0 GiB, largest free 4.0 GiB, fragmentation ratio 3.00"
  echo "$out" | grep -q "4.2 GiB AllReduce buffer: out of device memory"
done
# The shared library exports only hbm_ names: nothing of its own can clash
# with a symbol of the program that links it.
if command -v nm >/dev/null; then
  so=$(ls "$(dirname "$libdir")"/libhbm.so* | head -n 1)
  stray=$(nm -D --defined-only "$so" | awk '$3 !~ /^(hbm_|_)/ { print $3 }')
  [ -z "$stray" ] || { echo "FAIL libhbm.so exports names without the hbm_ prefix: $stray"; exit 1; }
fi
