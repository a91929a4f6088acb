#!/usr/bin/env bash
# The device kit's check (docs/cuda.md, "Checking on a GPU"): run from the repository root on a lent
# GPU machine with the bundle carried (tools/gpu/bundle.sh; the device tool's carry:
# ["gpu-bundle.tar.xz"], unpacked here, or a gpu-bundle/ folder), in at most 7 minutes, writing
# check.log, summary.json, bench.json and logs.tar.gz into $OUT as it goes.
#   tools/gpu/check.sh                       every step: env, tests, conformance, cosmoflow, deepcam,
#                                            resume, pipeline, bench (each PASS, FAIL or SKIP, and why)
#   tools/gpu/check.sh --only bench,2        some steps again (names or numbers; env always runs)
#   tools/gpu/check.sh --timeout-scale 1.5   every time limit (and the 7-minute budget) times 1.5
#   tools/gpu/check.sh --only bench --budget 150   a rerun within 150 s
#   tools/gpu/check.sh --only profile        every speed question within 300 s: backend.profile's nodes,
#                                            mlph-cuda-probe, PyTorch layer by layer, ncu; profile.json
#   tools/gpu/check.sh --dry-run             no GPU (here, CI): the bundle is self-contained, its plug-ins
#                                            load, reference conformance passes from it
# The steps and their limits: tools/gpu/check.py --help (the package tools/gpu/kit, a module per step). It runs on the Python that holds PyTorch
# on the GPU machine (/opt/torch/.venv), else python3.
set -euo pipefail
cd "$(dirname "$0")/../.."
python=python3
[ -x /opt/torch/.venv/bin/python3 ] && python=/opt/torch/.venv/bin/python3
command -v "$python" >/dev/null || { echo "check.sh: error: no python3 here" >&2; exit 2; }
exec "$python" -u tools/gpu/check.py "$@"
