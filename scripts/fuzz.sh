#!/bin/sh
# Builds one libFuzzer target of tests/fuzz/ with clang and runs it from its seed corpus.
#
#   scripts/fuzz.sh TARGET [SECONDS] [libFuzzer options...]    e.g. scripts/fuzz.sh fuzz-gguf 60
#
# The build (WARM_FUZZ_BUILD, default build-fuzz/) instruments the whole libraries with
# coverage, ASan and UBSan (-DWARM_LIBFUZZER=ON); the target links libFuzzer. The corpus
# (build-fuzz/corpus/TARGET) starts as the seeds the deterministic driver uses
# (TARGET-seeds --write-seeds) and keeps what libFuzzer adds, so later runs go on from it;
# crashes land in build-fuzz/artifacts/TARGET/. Installs clang-14 and libclang-rt-14-dev
# (libFuzzer's runtime) when they are missing; the normal build does not need them.
set -e
[ $# -ge 1 ] || { echo "usage: $0 TARGET [SECONDS] [libFuzzer options...]" >&2; exit 2; }
target=$1
seconds=${2:-60}
[ $# -ge 2 ] && shift 2 || shift
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${WARM_FUZZ_BUILD:-$root/build-fuzz}
# fuzz-vocab's real vocabularies, where the tests look for them
export WARM_SHARED_MODELS=${WARM_SHARED_MODELS:-$root/../shared/models}
if [ ! -f "$root/tests/fuzz/$target.c" ]; then
    echo "$0: no target tests/fuzz/$target.c; there are:" >&2
    ls "$root/tests/fuzz" | sed -n 's/^\(fuzz-.*\)\.c$/  \1/p' | grep -v fuzz-driver >&2
    exit 2
fi

# clang and its libFuzzer runtime
cc=$(command -v clang-14 || command -v clang || true)
have_fuzzer() {
    [ -n "$cc" ] && [ -e "$("$cc" -print-resource-dir)/lib/linux/libclang_rt.fuzzer-x86_64.a" ]
}
if ! have_fuzzer; then
    echo "$0: installing clang-14 and libclang-rt-14-dev (libFuzzer)" >&2
    sudo=; [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get install -y clang-14 libclang-rt-14-dev
    cc=$(command -v clang-14)
    have_fuzzer || { echo "$0: $cc has no libFuzzer runtime" >&2; exit 1; }
fi

if [ ! -f "$dir/CMakeCache.txt" ]; then
    CC=$cc cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DWARM_LIBFUZZER=ON -DWARM_CUDA=OFF >/dev/null
fi
ninja -C "$dir" "$target" "$target-seeds"

corpus=$dir/corpus/$target
artifacts=$dir/artifacts/$target
mkdir -p "$corpus" "$artifacts"
"$dir/bin/$target-seeds" --write-seeds "$corpus"
# -use_value_profile: comparisons against magic numbers and lengths count as coverage.
exec "$dir/bin/$target" -max_total_time="$seconds" -print_final_stats=1 -use_value_profile=1 \
    -artifact_prefix="$artifacts/" -rss_limit_mb=4096 "$@" "$corpus"
