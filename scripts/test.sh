#!/bin/sh
# Installs what is missing, builds, and runs the test suite.
#   scripts/test.sh           Release build in build/
#   scripts/test.sh --asan    ASan + UBSan build in build-asan/ (-fno-sanitize-recover=all)
set -e
cd "$(dirname "$0")/.."
scripts/deps.sh
if [ "$1" = "--asan" ]; then
    scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=Debug -DWARM_SANITIZE=ON -DWARM_WERROR=ON
    export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1
    ctest --test-dir build-asan --output-on-failure -j2 -LE "cuda|bench"
    dir=build-asan
else
    scripts/build.sh build -DCMAKE_BUILD_TYPE=Release -DWARM_WERROR=ON
    ctest --test-dir build --output-on-failure -j2 -LE "cuda|bench"
    dir=build
fi
# summaries that passing tests print (ctest keeps their output in LastTest.log)
grep -h "^state matrix:" "$dir/Testing/Temporary/LastTest.log" || true
