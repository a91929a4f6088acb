#!/usr/bin/env bash
# CI: fuzzes the readers of untrusted input (tests/fuzz: TFRecord+gzip, npy, HDF5 sample and stats,
# storage/stage's pack manifest and tar.zst parts, YAML configs, MLPerf logs and YAML of log keys,
# checkpoints with mlph-export's conversion, mlperf-score's judging of a log)
# with libFuzzer, ASan and UBSan. Installs what it needs (Debian 12's clang 14 and its runtimes),
# builds the harnesses in a build tree of their own, replays every committed corpus file once (a
# crash that was fixed stays fixed), then fuzzes each harness for a bounded time. Fails on any
# crash, leak, timeout or out-of-memory, printing the reproducer.
#   tools/ci/fuzz.sh [SECONDS_PER_HARNESS]   default 30; 0 replays the corpus only
# Environment: FUZZ_BUILD_DIR (default build-fuzz), JOBS (default: all cores).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
seconds=${1:-30}
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
jobs=${JOBS:-$(nproc)}
corpus=$root/tests/fuzz/corpus
started=$SECONDS

# llvm-14: its llvm-symbolizer names the frames of a report, without which a defect inside libhdf5
# cannot be told from one of ours.
packages=(clang-14 libclang-rt-14-dev llvm-14 cmake ninja-build zlib1g-dev libdeflate-dev libhdf5-dev libarchive-dev libyaml-cpp-dev libfmt-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing: ${missing[*]}"
  sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

export ASAN_SYMBOLIZER_PATH=/usr/lib/llvm-14/bin/llvm-symbolizer

echo "== building the harnesses ($build)"
cmake -S "$root" -B "$build" -G Ninja -DMLPH_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 >"$build.configure.log" 2>&1 \
  || { cat "$build.configure.log"; exit 1; }
cmake --build "$build" -j "$jobs"

work=$(mktemp -d "${TMPDIR:-/tmp}/mlph-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
failed=() upstream=()

# True when the report's first frame of code that is not the fuzzing or sanitizer runtime, nor libc,
# lies in libhdf5: a defect of the library reading a corrupt file, which this project cannot fix.
in_libhdf5() {
  grep -E "^ +#[0-9]+ 0x" "$1" \
    | grep -vE "fuzzer::|__sanitizer|__asan|__lsan|__interceptor|in (malloc|calloc|realloc|free|operator new|memcpy|memmove|memset)|__mem(cpy|move|set)|sysdeps/|libc\.so|libc_start|__restore_rt|sigaction" \
    | head -n 1 | grep -q "libhdf5"
}

# Shows what libFuzzer left behind for a failure: the input, as a path, hex and base64.
show_reproducer() {
  local name=$1
  for artifact in "$work/$name-"*; do
    [ -e "$artifact" ] || continue
    echo "-- reproducer $(basename "$artifact") ($(stat -c %s "$artifact") bytes): replay with"
    echo "   $build/fuzz/$name $(cat "$build/fuzz/$name.options" | tr -d '\n') FILE"
    echo "   and commit it to tests/fuzz/corpus/$name/ with the fix"
    echo "   base64: $(base64 -w0 "$artifact" | head -c 4000)"
    od -A x -t x1z -v "$artifact" | head -n 16 || true  # (od: coreutils; head ends it early: SIGPIPE)
  done
}

for options in "$build"/fuzz/*.options; do
  name=$(basename "$options" .options)
  harness=$build/fuzz/$name
  read -r -a flags <"$options"
  flags+=(-artifact_prefix="$work/$name-" -print_final_stats=0)

  echo "== $name: the committed corpus, once ($(ls "$corpus/$name" | wc -l) files)"
  if ! "$harness" "${flags[@]}" -detect_leaks=1 -runs=0 "$corpus/$name" >"$work/$name.replay.log" 2>&1; then
    tail -n 60 "$work/$name.replay.log"
    show_reproducer "$name"
    failed+=("$name (corpus)")
    continue
  fi
  [ "$seconds" -gt 0 ] || continue

  echo "== $name: fuzzing for ${seconds}s"
  mkdir -p "$work/$name.corpus"  # new inputs go here, not into the checkout
  # A harness that checks leaks only at replay (-detect_leaks=0) skips the check at exit too.
  leaks_at_exit=1
  [[ " ${flags[*]} " == *" -detect_leaks=0 "* ]] && leaks_at_exit=0
  deadline=$((SECONDS + seconds))
  while [ $SECONDS -lt $deadline ]; do
    rm -f "$work/$name-"*
    if ASAN_OPTIONS="detect_leaks=$leaks_at_exit" "$harness" "${flags[@]}" -max_total_time=$((deadline - SECONDS)) \
         "$work/$name.corpus" "$corpus/$name" >"$work/$name.log" 2>&1; then
      grep -E "^Done [0-9]+ runs" "$work/$name.log" | tail -n 1 || true
      break
    fi
    if in_libhdf5 "$work/$name.log"; then  # not ours to fix: reported, and fuzzing goes on
      echo "-- a defect inside libhdf5 (Debian's, not this project's):"
      grep -E "ERROR|SUMMARY" "$work/$name.log" | head -n 2
      upstream+=("$name: $(grep -m1 -oE "(timeout|out-of-memory|SEGV|leak|[a-z-]+-overflow)" "$work/$name.log" || echo crash)")
      show_reproducer "$name"
      continue
    fi
    tail -n 60 "$work/$name.log"
    show_reproducer "$name"
    failed+=("$name")
    break
  done
done

echo "== fuzzing took $((SECONDS - started)) s"
if [ ${#upstream[@]} -gt 0 ]; then
  echo "fuzz: defects found inside libhdf5, not failing the job: ${upstream[*]}"
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: every harness passed"
