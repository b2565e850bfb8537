#!/bin/sh
# Configures and builds. Usage: scripts/build.sh [BUILD_DIR] [extra cmake args...]
set -e
dir=${1:-build}; [ $# -gt 0 ] && shift
cmake -S "$(dirname "$0")/.." -B "$dir" -G Ninja "$@" >/dev/null
ninja -C "$dir"
