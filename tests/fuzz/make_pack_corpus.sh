#!/usr/bin/env bash
# Writes the seed corpora of manifest_fuzzer and tar_fuzzer with mlph-pack-data, from three small
# files (a short one, an empty one, a longer one): the manifests of a packed and of a plain split,
# and the packed part, compressed (as staged) and not (so that mutations reach the tar reader).
# tar_fuzzer's manifest (kManifest there) is the packed one printed at the end: keep them equal.
#   tests/fuzz/make_pack_corpus.sh [BUILD_DIR]   (default: build; needs zstd)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
pack=${1:-$root/build}/bin/mlph-pack-data
corpus=$root/tests/fuzz/corpus
work=$(mktemp -d "${TMPDIR:-/tmp}/mlph-pack-corpus.XXXXXX")
trap 'rm -rf "$work"' EXIT

mkdir -p "$work/src/train"
printf 'alpha\n' >"$work/src/train/a.bin"
: >"$work/src/train/b.bin"
for i in $(seq 0 29); do printf '0123456789'; done >"$work/src/train/c.bin"
"$pack" "$work/src" "$work/packed" --parts 1 --level 3 >/dev/null
"$pack" "$work/src" "$work/plain" --parts 0 >/dev/null

mkdir -p "$corpus/manifest_fuzzer" "$corpus/tar_fuzzer"
cp "$work/packed/train/MANIFEST.mlph" "$corpus/manifest_fuzzer/packed.mlph"
cp "$work/plain/train/MANIFEST.mlph" "$corpus/manifest_fuzzer/plain.mlph"
cp "$work/packed/train/part-00000.tar.zst" "$corpus/tar_fuzzer/part-00000.tar.zst"
zstd -q -d -c "$work/packed/train/part-00000.tar.zst" >"$corpus/tar_fuzzer/part-00000.tar"
cat "$work/packed/train/MANIFEST.mlph"
