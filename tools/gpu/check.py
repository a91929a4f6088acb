#!/usr/bin/env python3
"""The device kit's check (run through tools/gpu/check.sh; docs/cuda.md, "Checking on a GPU"): the package
kit/ beside this file, one module per step (kit/steps/) and the shared runner apart (kit/runner.py).
`check.py --help` lists the steps."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kit.cli import main  # noqa: E402  (the package is found beside this file)

if __name__ == "__main__":
    sys.exit(main())
