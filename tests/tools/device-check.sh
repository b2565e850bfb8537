#!/bin/bash
# The whole GPU check in one go, for a machine with an NVIDIA GPU (run from anywhere):
#   tests/tools/device-check.sh [--prebuilt DIR] [BUILD_DIR]     (default build-cuda)
#   tests/tools/device-check.sh --pack DIR                        (on a build machine)
# 1. gets the CUDA programs: from DIR (--prebuilt, or ./.devcheck when present) as made by
#    --pack on a machine with nvcc and the project's system libraries; else the full CMake
#    project with -DWARM_CUDA=ON; else (a bare GPU machine without liblmdb, grpc, ...) only
#    the kernel checks, compiled with gcc and nvcc directly;
# 2. runs the `cuda` tests: every CUDA op against the CPU reference (test-cuda-ops);
#    whole-model logits against the CPU engine for each arch and weight type, and KV state
#    blobs crossing GPU <-> CPU with identical greedy continuations (test-cuda-forward;
#    needs the engine, so not in the direct build);
# 3. runs warm-cuda-bench on the weights of a ~1B llama (n_embd 2048, 16 layers, 32/8
#    heads, head 64, n_ff 8192, vocab 32000) in f16, q8_0 and q4_0: prefill and decode
#    tokens/s, decode GB/s and % of the device copy bandwidth measured in the same run;
# 4. generates those 1B models with warm-mkmodel and runs their whole forward pass on
#    the GPU (warm-cuda-bench --model: prefill 512 tokens, decode 64 greedy tokens);
# 5. says what is not covered yet.
# With $OUT set, the log goes to $OUT/device-check.log and a summary to
# $OUT/device-check.json. WARM_DEVICE_CHECK_DIRECT=1 forces the direct build. Meant to
# finish in well under 6 minutes on an H100/H200.
set -u
cd "$(dirname "$0")/../.."
src=$PWD
prebuilt=""
pack=""
while [ $# -gt 0 ]; do
    case $1 in
    --prebuilt) prebuilt=$2; shift 2 ;;
    --pack) pack=$2; shift 2 ;;
    *) break ;;
    esac
done
dir=${1:-build-cuda}
[ -z "$prebuilt" ] && [ -z "$pack" ] && [ -x .devcheck/warm-cuda-bench ] && prebuilt=.devcheck
out=${OUT:-}
log=${out:+$out/device-check.log}
log=${log:-/dev/null}
t_start=$(date +%s)
jobs=$(nproc 2>/dev/null || echo 4)
export PATH=$PATH:/usr/local/cuda/bin
nvcc=$(command -v nvcc || true)
progs="test-cuda-ops test-cuda-forward warm-cuda-bench warm-mkmodel"

say() { echo "$*" | tee -a "$log"; }
run() { # run CMD...: output to the terminal and the log, exit status kept
    set -o pipefail
    "$@" 2>&1 | tee -a "$log"
    local rc=$?
    set +o pipefail
    return $rc
}
cmake_build() {
    cmake -S "$src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DWARM_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES="90-real;75-virtual" >>"$log" 2>&1 &&
        run ninja -C "$dir" -j"$jobs" $progs
}

# ---- --pack: build here, copy what the device needs (the programs, libxxhash) ----------
if [ -n "$pack" ]; then
    cmake_build || { echo "build failed"; exit 1; }
    mkdir -p "$pack/lib"
    cp "$dir/tests/test-cuda-ops" "$dir/tests/test-cuda-forward" "$dir/bin/warm-cuda-bench" \
        "$dir/bin/warm-mkmodel" "$pack/"
    for p in $progs; do
        ldd "$pack/$p" | awk '/libxxhash/ {print $3}'
    done | sort -u | xargs -r -I{} cp -L {} "$pack/lib/"
    du -sh "$pack"
    exit 0
fi

say "== device-check $(date -u +%FT%TZ) in $src"
have_gpu=0
nvidia-smi -L >/dev/null 2>&1 && have_gpu=1
[ $have_gpu = 1 ] && run nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
[ -n "$nvcc" ] && say "nvcc: $($nvcc --version | tail -1)"

# ---- 1. the programs ----------------------------------------------------------------------
build_ok=0
tests="" # test programs to run directly (prebuilt and direct modes)
if [ -n "$prebuilt" ]; then
    mode=prebuilt
    bin=$(cd "$prebuilt" && pwd)
    export LD_LIBRARY_PATH=$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    [ -x "$bin/warm-cuda-bench" ] && build_ok=1
    tests="$bin/test-cuda-ops $bin/test-cuda-forward"
    bench_bin=$bin/warm-cuda-bench
    mkmodel_bin=$bin/warm-mkmodel
    export WARM_BIN=$bin
elif [ -z "${WARM_DEVICE_CHECK_DIRECT:-}" ] && cmake_build; then
    mode=cmake
    build_ok=1
    bench_bin=$dir/bin/warm-cuda-bench
    mkmodel_bin=$dir/bin/warm-mkmodel
else
    # bare machine: base (without hashing), kernels, the test harness, kernels/cuda
    mode=direct
    dir=$dir-direct
    say "no CMake build (system libraries missing?): building the kernel checks directly in $dir"
    mkdir -p "$dir/obj"
    cflags="-O2 -std=c11 -D_GNU_SOURCE -I$src -I$src/tests -DWARM_SHARED_MODELS_DIR=\"$src/../shared/models\""
    csrc="base/err.c base/time.c tests/test.c $(find kernels -name '*.c' -not -path '*/cuda/*' | sort)"
    pids=""
    for f in $csrc; do
        gcc $cflags -c "$f" -o "$dir/obj/$(echo "$f" | tr / _).o" >>"$log" 2>&1 &
        pids="$pids $!"
    done
    for f in kernels/cuda/*.cu; do
        "$nvcc" -O3 -std=c++20 --expt-relaxed-constexpr -I"$src" -gencode arch=compute_90,code=sm_90 \
            -c "$f" -o "$dir/obj/$(echo "$f" | tr / _).o" >>"$log" 2>&1 &
        pids="$pids $!"
    done
    fail=0
    for p in $pids; do wait "$p" || fail=1; done
    if [ $fail = 0 ]; then
        objs=$(ls "$dir"/obj/*.o | grep -v tests_test.c.o)
        gcc $cflags -c tests/cuda/test-cuda-ops.c -o "$dir/test-cuda-ops.o" >>"$log" 2>&1 &&
            gcc $cflags -DWARM_CUDA_BENCH_NO_ENGINE -c tests/tools/warm-cuda-bench.c -o "$dir/warm-cuda-bench.o" \
                >>"$log" 2>&1 &&
            "$nvcc" -o "$dir/test-cuda-ops" "$dir/test-cuda-ops.o" $objs "$dir/obj/tests_test.c.o" -lm -lpthread \
                >>"$log" 2>&1 &&
            "$nvcc" -o "$dir/warm-cuda-bench" "$dir/warm-cuda-bench.o" $objs -lm -lpthread >>"$log" 2>&1 &&
            build_ok=1
    fi
    [ $build_ok = 1 ] || { say "direct build failed:"; tail -40 "$log"; }
    tests=$dir/test-cuda-ops
    bench_bin=$dir/warm-cuda-bench
    mkmodel_bin=""
fi
t_build=$(date +%s)
say "== programs ($mode): $([ $build_ok = 1 ] && echo ok || echo FAILED) in $((t_build - t_start)) s"

# ---- 2. the cuda tests (the 1B models are generated meanwhile) ----------------------------
models=""
mdir=$dir
mkdir -p "$mdir"
if [ $build_ok = 1 ] && [ -n "$mkmodel_bin" ] && [ $have_gpu = 1 ]; then
    for t in f16 q8_0 q4_0; do
        f=$mdir/llama-1b-$t.gguf
        models="$models $f"
        [ -s "$f" ] || "$mkmodel_bin" --arch llama --n-embd 2048 --n-layer 16 --n-head 32 --n-head-kv 8 \
            --head-dim 64 --n-ff 8192 --n-vocab 32000 --type $t -o "$f" >>"$log" 2>&1 &
    done
fi
tests_rc=1
if [ $build_ok = 1 ]; then
    if [ $mode = cmake ]; then
        run ctest --test-dir "$dir" -L cuda --output-on-failure --timeout 150 -V
        tests_rc=$?
    else
        tests_rc=0
        for t in $tests; do
            run timeout 150 "$t"
            rc=$?
            [ $rc = 0 ] || { [ $rc = 77 ] && [ $tests_rc = 0 ] && tests_rc=77; } || tests_rc=$rc
        done
    fi
fi
tests_word=$([ $tests_rc = 0 ] && [ $have_gpu = 1 ] && echo passed ||
    { { [ $tests_rc = 77 ] || [ $tests_rc = 0 ]; } && echo "skipped (no device)"; } || echo "FAILED (rc $tests_rc)")
say "== cuda tests: $tests_word"

# ---- 3. kernel benchmark on the 1B llama's weights -------------------------------------
bench_rc=1
bench_json=${out:+$out/warm-cuda-bench.json}
bench_json=${bench_json:-$mdir/warm-cuda-bench.json}
if [ $build_ok = 1 ]; then
    run timeout 120 "$bench_bin" --types f16,q8_0,q4_0 --tokens 32 --prefill 512 --json "$bench_json"
    bench_rc=$?
fi
bench_word=$([ $bench_rc = 0 ] && echo ok || { [ $bench_rc = 77 ] && echo "skipped (no device)"; } || echo "FAILED (rc $bench_rc)")
say "== warm-cuda-bench (weights only): $bench_word"

# ---- 4. whole 1B models on the GPU (tests/cuda/gpu-forward.h, driven from outside) ------
wait
model_rc=1
model_json=${out:+$out/warm-cuda-model.json}
model_json=${model_json:-$mdir/warm-cuda-model.json}
if [ -n "$models" ]; then
    : >"$model_json"
    model_rc=0
    for f in $models; do
        run timeout 90 "$bench_bin" --model "$f" --prefill 512 --tokens 64 --json "$mdir/one.json" || model_rc=1
        [ -s "$mdir/one.json" ] && cat "$mdir/one.json" >>"$model_json"
        rm -f "$mdir/one.json"
    done
fi
model_word=$([ $model_rc = 0 ] && echo ok || { [ -z "$models" ] && echo "not run (no GPU, or a direct build without the engine)"; } || echo FAILED)
say "== 1B models on the GPU: $model_word"

missing="the engine's own device integration (engine_context with device = cuda:N, memory per device at load and in GetInfo, warm-bench/warm-run --device): the GPU forward here is tests/cuda/gpu-forward.h driving the ops from outside the engine; whole-model NMSE of k-quant models (warm-mkmodel does not write them; their matmuls are in test-cuda-ops)"
say "== NOT COVERED: $missing"

t_end=$(date +%s)
say "== device-check done in $((t_end - t_start)) s"
if [ -n "$out" ]; then
    {
        printf '{"programs": "%s", "mode": "%s", "cuda_tests": "%s", "bench": "%s", "models": "%s", ' \
            "$([ $build_ok = 1 ] && echo ok || echo failed)" "$mode" "$tests_word" "$bench_word" "$model_word"
        printf '"not_covered": "%s", "seconds": %d, "bench_results": ' "$missing" $((t_end - t_start))
        if [ -s "$bench_json" ]; then cat "$bench_json"; else echo null; fi
        printf ', "model_results": ['
        [ -s "$model_json" ] && paste -sd, "$model_json"
        echo ']}'
    } >"$out/device-check.json"
fi
[ $build_ok = 1 ] && [ $tests_rc = 0 ] && [ $bench_rc = 0 ] && { [ -z "$models" ] || [ $model_rc = 0 ]; }
