#!/usr/bin/env python3
"""Seeds for checkpoint_fuzzer and score_fuzzer made from real files, within their -max_len.

  make_real_corpus.py checkpoint OUT_DIR CHECKPOINT...   real checkpoints (DIR/epoch-NNNNNN of a mini run)
  make_real_corpus.py score OUT_DIR LOG...               real MLPerf logs (/work/shared/fixtures/mllog, ours)

A checkpoint seed is its manifest.json, a line "--tensors.bin--", then its tensors.bin (the harness's
input). A checkpoint larger than the seed limit keeps its real manifest with only its smallest
tensors (their bytes and CRC32 as they were, repacked at 64-byte offsets), so that the seed still
reads and reaches the export. A log seed keeps the first line of every key, the last metric line and
run_stop, cut to the limit from the middle. Each seed is named by its SHA-1, as libFuzzer names them.
"""
import hashlib
import json
import pathlib
import sys

SEPARATOR = b"\n--tensors.bin--\n"
CHECKPOINT_LIMIT = 65536  # checkpoint_fuzzer's -max_len (tests/fuzz/CMakeLists.txt)
SCORE_LIMIT = 16384       # score_fuzzer's


def save(out_dir, data):
    out_dir.mkdir(parents=True, exist_ok=True)
    name = hashlib.sha1(data).hexdigest()
    (out_dir / name).write_bytes(data)
    print(f"{out_dir / name}: {len(data)} bytes")


def checkpoint_seed(checkpoint):
    manifest = (checkpoint / "manifest.json").read_bytes()
    tensors = (checkpoint / "tensors.bin").read_bytes()
    whole = manifest + SEPARATOR + tensors
    if len(whole) <= CHECKPOINT_LIMIT:
        return whole
    m = json.loads(manifest)
    kept, packed = [], b""
    seed = lambda: json.dumps(dict(m, tensors=kept, tensors_bytes=len(packed)), indent=2).encode() + b"\n" + SEPARATOR + packed
    for t in sorted(m["tensors"], key=lambda t: t["bytes"]):
        offset = (len(packed) + 63) // 64 * 64
        data = tensors[t["offset"]:t["offset"] + t["bytes"]]
        kept.append(dict(t, offset=offset))
        packed, before = packed + b"\0" * (offset - len(packed)) + data, packed
        if len(seed()) > CHECKPOINT_LIMIT:
            kept.pop()
            packed = before
            break
    return seed()


def log_seed(log):
    lines = log.read_bytes().splitlines(keepends=True)
    marked = [l for l in lines if b":::MLLOG " in l]
    keys = [json.loads(l[l.rindex(b":::MLLOG ") + 9:])["key"] for l in marked]
    metric = max((i for i, k in enumerate(keys) if k in ("eval_error", "eval_accuracy")), default=None)
    keep = [i for i, k in enumerate(keys) if keys.index(k) == i or i == metric or k == "run_stop"]
    while sum(len(marked[i]) for i in keep) > SCORE_LIMIT:
        del keep[len(keep) // 2]
    return b"".join(marked[i] for i in keep)


def main():
    if len(sys.argv) < 4 or sys.argv[1] not in ("checkpoint", "score"):
        sys.exit(__doc__)
    out_dir = pathlib.Path(sys.argv[2])
    for path in map(pathlib.Path, sys.argv[3:]):
        save(out_dir, checkpoint_seed(path) if sys.argv[1] == "checkpoint" else log_seed(path))


if __name__ == "__main__":
    main()
