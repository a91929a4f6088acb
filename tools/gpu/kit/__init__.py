"""The device kit's check as a package: cli (arguments, the order of the steps), runner (the shared Kit),
common (helpers), sizes (what each step runs on a GPU and in a rehearsal), steps/ (one module per step).
tools/gpu/check.py runs it."""
