#!/bin/bash
# The whole GPU check in one go, for a machine with an NVIDIA GPU (run from anywhere):
#   tests/tools/device-check.sh [BUILD_DIR]        (default build-cuda)
# 1. builds the CUDA tier: the full CMake project with -DWARM_CUDA=ON when its system
#    dependencies are there; otherwise (a bare GPU machine without liblmdb, grpc, ...)
#    only what the checks need, with gcc and nvcc directly;
# 2. runs the `cuda`-labelled tests (every CUDA op against the CPU reference);
# 3. runs warm-cuda-bench on the weights of a generated ~1B llama (n_embd 2048, 16 layers,
#    32/8 heads, head 64, n_ff 8192, vocab 32000) in f16, q8_0 and q4_0: prefill and
#    decode tokens/s, decode GB/s and % of the device copy bandwidth measured in the same
#    run;
# 4. says what is not covered yet (the engine's forward pass on the GPU).
# With $OUT set, the log goes to $OUT/device-check.log and a summary to
# $OUT/device-check.json. WARM_DEVICE_CHECK_DIRECT=1 forces the direct build. Meant to finish in well under 6 minutes on an H100/H200.
set -u
cd "$(dirname "$0")/../.."
src=$PWD
dir=${1:-build-cuda}
out=${OUT:-}
log=${out:+$out/device-check.log}
log=${log:-/dev/null}
t_start=$(date +%s)
jobs=$(nproc 2>/dev/null || echo 4)

say() { echo "$*" | tee -a "$log"; }
run() { # run CMD...: output to the terminal and the log, exit status kept
    set -o pipefail
    "$@" 2>&1 | tee -a "$log"
    local rc=$?
    set +o pipefail
    return $rc
}

export PATH=$PATH:/usr/local/cuda/bin
nvcc=$(command -v nvcc || true)
say "== device-check $(date -u +%FT%TZ) in $src"
command -v nvidia-smi >/dev/null && run nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
[ -n "$nvcc" ] && say "nvcc: $($nvcc --version | tail -1)"

# ---- 1. build -----------------------------------------------------------------------
mode=cmake
build_ok=0
if [ -z "${WARM_DEVICE_CHECK_DIRECT:-}" ] && cmake -S "$src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DWARM_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES="90-real;75-virtual" >>"$log" 2>&1; then
    targets="test-cuda-ops warm-cuda-bench"
    for t in warm-mkmodel warm-bench warm-run; do targets="$targets $t"; done
    if run ninja -C "$dir" -j"$jobs" $targets; then build_ok=1; fi
    test_bin=$dir/tests/test-cuda-ops
    bench_bin=$dir/bin/warm-cuda-bench
else
    # bare machine: base (without hashing), kernels, the test harness, kernels/cuda
    mode=direct
    dir=$dir-direct
    say "cmake configure failed (system libraries missing?); building the CUDA checks directly in $dir"
    mkdir -p "$dir/obj"
    cflags="-O2 -std=c11 -D_GNU_SOURCE -I$src -I$src/tests -DWARM_SHARED_MODELS_DIR=\"$src/../shared/models\""
    csrc="base/err.c base/time.c tests/test.c $(find kernels -name '*.c' -not -path '*/cuda/*' | sort)"
    pids=""
    for f in $csrc; do
        o=$dir/obj/$(echo "$f" | tr / _).o
        gcc $cflags -c "$f" -o "$o" >>"$log" 2>&1 &
        pids="$pids $!"
    done
    for f in kernels/cuda/*.cu; do
        o=$dir/obj/$(echo "$f" | tr / _).o
        "$nvcc" -O3 -std=c++20 --expt-relaxed-constexpr -I"$src" \
            -gencode arch=compute_90,code=sm_90 -c "$f" -o "$o" >>"$log" 2>&1 &
        pids="$pids $!"
    done
    fail=0
    for p in $pids; do wait "$p" || fail=1; done
    if [ $fail = 0 ]; then
        objs=$(ls "$dir"/obj/*.o | grep -v tests_test.c.o)
        gcc $cflags -c tests/cuda/test-cuda-ops.c -o "$dir/test-cuda-ops.o" >>"$log" 2>&1 &&
        gcc $cflags -c tests/tools/warm-cuda-bench.c -o "$dir/warm-cuda-bench.o" >>"$log" 2>&1 &&
        "$nvcc" -o "$dir/test-cuda-ops" "$dir/test-cuda-ops.o" $objs "$dir/obj/tests_test.c.o" -lm -lpthread >>"$log" 2>&1 &&
        "$nvcc" -o "$dir/warm-cuda-bench" "$dir/warm-cuda-bench.o" $objs -lm -lpthread >>"$log" 2>&1 && build_ok=1
    fi
    [ $build_ok = 1 ] || { say "direct build failed:"; tail -40 "$log"; }
    test_bin=$dir/test-cuda-ops
    bench_bin=$dir/warm-cuda-bench
fi
t_build=$(date +%s)
say "== build ($mode): $([ $build_ok = 1 ] && echo ok || echo FAILED) in $((t_build - t_start)) s"

# ---- 2. the cuda tests ----------------------------------------------------------------
tests_rc=1
if [ $build_ok = 1 ]; then
    if [ $mode = cmake ]; then
        run ctest --test-dir "$dir" -L cuda --output-on-failure --timeout 240 -V; tests_rc=$?
    else
        run timeout 240 "$test_bin"; tests_rc=$?
    fi
fi
tests_word=$([ $tests_rc = 0 ] && echo passed || { [ $tests_rc = 77 ] && echo "skipped (no device)"; } || echo "FAILED (rc $tests_rc)")
say "== cuda tests: $tests_word"

# ---- 3. kernel benchmark on the 1B llama's weights -------------------------------------
bench_rc=1
bench_json=${out:+$out/warm-cuda-bench.json}
bench_json=${bench_json:-$dir/warm-cuda-bench.json}
if [ $build_ok = 1 ]; then
    run timeout 180 "$bench_bin" --types f16,q8_0,q4_0 --tokens 32 --prefill 512 --json "$bench_json"; bench_rc=$?
fi
bench_word=$([ $bench_rc = 0 ] && echo ok || { [ $bench_rc = 77 ] && echo "skipped (no device)"; } || echo "FAILED (rc $bench_rc)")
say "== warm-cuda-bench: $bench_word"

# ---- 4. the engine on the GPU -----------------------------------------------------------
engine="not integrated"
missing="engine forward pass on the GPU (device = cuda:N, warm-bench --device), whole-model logits NMSE vs CPU, GPU<->CPU KV state blob round trip"
if [ $mode = cmake ] && [ -x "$dir/bin/warm-bench" ] && "$dir/bin/warm-bench" --help 2>&1 | grep -q -- "--device"; then
    engine="warm-bench has --device: see the log"
    gguf=$dir/llama-1b-f16.gguf
    for t in f16 q8_0 q4_0; do
        run "$dir/bin/warm-mkmodel" --arch llama --n-embd 2048 --n-layer 16 --n-head 32 --n-head-kv 8 \
            --n-ff 8192 --n-vocab 32000 --type "$t" -o "$dir/llama-1b-$t.gguf" &&
            run timeout 120 "$dir/bin/warm-bench" --device cuda:0 "$dir/llama-1b-$t.gguf"
    done
    missing=""
    : "$gguf"
else
    say "== NOT COVERED: $missing"
fi

t_end=$(date +%s)
say "== device-check done in $((t_end - t_start)) s"
if [ -n "$out" ]; then
    {
        printf '{"build": "%s", "build_mode": "%s", "cuda_tests": "%s", "bench": "%s", ' \
            "$([ $build_ok = 1 ] && echo ok || echo failed)" "$mode" \
            "$tests_word" "$bench_word"
        printf '"engine": "%s", "not_covered": "%s", "seconds": %d, "bench_results": ' "$engine" "$missing" \
            $((t_end - t_start))
        if [ -s "$bench_json" ]; then cat "$bench_json"; else echo null; fi
        echo '}'
    } >"$out/device-check.json"
fi
[ $build_ok = 1 ] && [ $tests_rc = 0 ] && [ $bench_rc = 0 ]
