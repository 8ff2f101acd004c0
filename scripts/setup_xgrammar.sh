#!/usr/bin/env bash
# Builds xgrammar's C++ core (the constrained-decoding library TensorRT-LLM
# links) from its PyPI sdist, outside the repository, as a static library with
# its headers: $AGENTKV_XGRAMMAR_DIR (default ~/.cache/agentkv/xgrammar-VER)
# gets include/ and lib/libxgrammar.a. CMake finds it there
# (AGENTKV_XGRAMMAR_DIR). No Python bindings, no tests; -fno-lto so that gcc,
# the ASan build and clang's fuzz build all link the same archive.
# Idempotent: nothing is done when the library is there. About 4 minutes on 2
# cores the first time.
#   scripts/setup_xgrammar.sh
set -euo pipefail
cd "$(dirname "$0")/.."

VER=0.2.8
SHA256=8305646fd2b319d6c3003f51a1665e54cbbe9cba1fb636bc41d0b46434ccbb80
DIR=${AGENTKV_XGRAMMAR_DIR:-$HOME/.cache/agentkv/xgrammar-$VER}
say() { echo "[setup_xgrammar] $*"; }
case ${1:-} in
  -h | --help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac

if [ -f "$DIR/lib/libxgrammar.a" ] && [ -f "$DIR/include/xgrammar/xgrammar.h" ]; then
  exit 0
fi
mkdir -p "$DIR"
if [ ! -f "$DIR/src/CMakeLists.txt" ]; then
  # The sdist from PyPI's simple index (`pip download` would build the
  # package's metadata, which pulls and compiles its build dependencies),
  # checked against the pinned sha256.
  url=$(curl -sSfL "https://pypi.org/simple/xgrammar/" | grep -o "https://[^\"#]*/xgrammar-$VER\.tar\.gz" | head -1)
  [ -n "$url" ] || { echo "[setup_xgrammar] error: no sdist of xgrammar $VER on PyPI" >&2; exit 1; }
  say "downloading $url"
  tmp=$(mktemp -d)
  curl -sSfL -o "$tmp/sdist.tar.gz" "$url"
  echo "$SHA256  $tmp/sdist.tar.gz" | sha256sum -c --status ||
    { echo "[setup_xgrammar] error: sha256 of the sdist is not $SHA256" >&2; exit 1; }
  tar -xzf "$tmp/sdist.tar.gz" -C "$tmp"
  src=$(find "$tmp" -maxdepth 2 -name CMakeLists.txt -path '*xgrammar-*/CMakeLists.txt' | head -1)
  [ -n "$src" ] || { echo "[setup_xgrammar] error: no xgrammar tree in the sdist" >&2; exit 1; }
  rm -rf "$DIR/src"
  mv "$(dirname "$src")" "$DIR/src"
  rm -rf "$tmp"
fi
say "building xgrammar $VER into $DIR (log: $DIR/build.log)"
t0=$SECONDS
# xgrammar reads build/config.cmake before its own cmake/config.cmake (which
# turns the Python bindings on).
mkdir -p "$DIR/build"
printf 'set(XGRAMMAR_BUILD_PYTHON_BINDINGS OFF)\nset(XGRAMMAR_BUILD_CXX_TESTS OFF)\n' >"$DIR/build/config.cmake"
{
  cmake -S "$DIR/src" -B "$DIR/build" -DCMAKE_BUILD_TYPE=Release -DXGRAMMAR_BUILD_PYTHON_BINDINGS=OFF \
    -DXGRAMMAR_BUILD_CXX_TESTS=OFF -DCMAKE_INSTALL_PREFIX="$DIR" -DCMAKE_INSTALL_LIBDIR=lib \
    "-DCMAKE_CXX_FLAGS=-fno-lto -Wno-error" &&
    cmake --build "$DIR/build" -j"${CMAKE_BUILD_PARALLEL_LEVEL:-2}" &&
    cmake --install "$DIR/build"
} >"$DIR/build.log" 2>&1 || { tail -30 "$DIR/build.log"; echo "[setup_xgrammar] error: build failed" >&2; exit 1; }
# picojson is a header the public headers do not need; dlpack's are installed.
say "built in $((SECONDS - t0)) s"
