#!/bin/sh
# Runs an aarch64 program under user-mode QEMU: the cross build's CMAKE_CROSSCOMPILING_EMULATOR.
# MLPH_QEMU_CPU picks the CPU: a64fx (default: 512-bit SVE), max,sve256=on, max,sve128=on, ...
# No -L: the arm64 libraries are multiarch-installed, and a second glibc would hang the first thread.
exec qemu-aarch64 -cpu "${MLPH_QEMU_CPU:-a64fx}" "$@"
