#!/bin/bash
# The whole GPU check in one go, for a machine with an NVIDIA GPU (run from anywhere):
#   tests/tools/device-check.sh [--prebuilt DIR] [BUILD_DIR]     (default build-cuda)
#   tests/tools/device-check.sh --pack DIR                        (on a build machine)
# 1. gets the CUDA programs: from DIR (--prebuilt, or ./.devcheck when present) as made by
#    --pack on a machine with nvcc and the project's system libraries; else the full CMake
#    project with -DWARM_CUDA=ON; else (a bare GPU machine without liblmdb, grpc, ...) only
#    the kernel checks, compiled with gcc and nvcc directly;
# 2. runs the `cuda` tests: every CUDA op against the CPU reference (test-cuda-ops); the
#    engine on cuda:0 against the CPU engine for every architecture, weight types,
#    gpu_layers, every cache type pair, greedy decoding with the argmax on the device and
#    the one-token step replayed as a CUDA graph, two sequences in one batch, state blobs
#    crossing GPU <-> CPU and a context shift, and the qwen35 hybrid of
#    ../shared/models/hybrid (Gated DeltaNet state on the GPU: llama.cpp's greedy ids,
#    gpu_layers, interleaved sequences, graphs, blobs and snapshots across devices), and
#    its mixtures of experts (qwen3moe, qwen35moe, gpt-oss, gemma4moe: llama.cpp's greedy
#    ids, the decode graph with the router on the device, experts = cpu)
#    (test-cuda-device; it needs the engine, so not in the direct build; the Gated
#    DeltaNet kernels are in test-cuda-ops, so in every build);
# 3. runs warm-cuda-bench on the weights of a ~1B llama (n_embd 2048, 16 layers, 32/8
#    heads, head 64, n_ff 8192, vocab 32000) in f16, q8_0, q4_0 and q4_K: prefill and decode
#    tokens/s, decode GB/s and % of the device copy bandwidth measured in the same run;
# 4. generates those 1B models with warm-mkmodel and runs the engine on them on the GPU
#    (warm-cuda-bench --model: an engine context on cuda:0, prefill 512 tokens, decode 64
#    greedy tokens, each step a CUDA graph replay with the argmax on the device);
# 5. the engine on the GPU: warm-run --device cuda:0 on each 1B model (prefill 512, decode
#    128 tokens/s), and the Q8_0 model's greedy ids on the GPU and on a tensor split over
#    two contexts on it equal to the CPU's;
# 6. warmd with device = cuda:0 serving the Q8_0 model: a greedy Generate equal to a CPU
#    daemon's, then after a restart the same prompt restored from the store into GPU KV
#    with the same continuation;
# 7. says what is not covered yet.
# On a machine without an NVIDIA GPU it says so and exits 0 at once (nothing is built).
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
progs="test-cuda-ops test-cuda-device warm-cuda-bench warm-mkmodel warm-run warmd warmctl"

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
    cp "$dir/tests/test-cuda-ops" "$dir/tests/test-cuda-device" "$dir/bin/warm-cuda-bench" \
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
if [ $have_gpu = 0 ]; then
    say "== no NVIDIA GPU here (nvidia-smi lists none): nothing to check; the cuda-labelled tests skip in the normal suite"
    [ -n "$out" ] && printf '{"gpu": false, "seconds": %d, "message": "no NVIDIA GPU: nothing checked"}\n' \
        $(($(date +%s) - t_start)) >"$out/device-check.json"
    exit 0
fi

# ---- 1. the programs ----------------------------------------------------------------------
build_ok=0
tests="" # test programs to run directly (prebuilt and direct modes)
if [ -n "$prebuilt" ]; then
    mode=prebuilt
    bin=$(cd "$prebuilt" && pwd)
    export LD_LIBRARY_PATH=$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    [ -x "$bin/warm-cuda-bench" ] && build_ok=1
    tests="$bin/test-cuda-ops $bin/test-cuda-device"
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
    # (engine/moe.c: the router's plain-C spec, test-cuda-ops' reference for the CUDA router)
    csrc="base/err.c base/time.c tests/test.c engine/moe.c $(find kernels -name '*.c' -not -path '*/cuda/*' | sort)"
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
    for t in f16 q8_0 q4_0 q4_K; do
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
    run timeout 120 "$bench_bin" --types f16,q8_0,q4_0,q4_K --tokens 32 --prefill 512 --json "$bench_json"
    bench_rc=$?
fi
bench_word=$([ $bench_rc = 0 ] && echo ok || { [ $bench_rc = 77 ] && echo "skipped (no device)"; } || echo "FAILED (rc $bench_rc)")
say "== warm-cuda-bench (weights only): $bench_word"

# ---- 4. the engine on the 1B models on the GPU (warm-cuda-bench --model) ---------------
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

# ---- 5. the engine on the GPU: warm-run with device = cuda:0 against the CPU ------------
engine_word="not run (needs the CMake build and the 1B models)"
q8=$mdir/llama-1b-q8_0.gguf
engine_json=${out:+$out/warm-engine.json}
engine_json=${engine_json:-$mdir/warm-engine.json}
if [ $mode = cmake ] && [ -n "$models" ]; then
    ids=$(python3 -c "print(' '.join(str((i * 37 + 5) % 32000) for i in range(512)))")
    : >"$engine_json"
    engine_word=ok
    for f in $models; do
        for dev in cuda:0 cpu split; do
            [ $dev != cuda:0 ] && [ "$f" != "$q8" ] && continue
            where="--device $dev"
            [ $dev = split ] && where="--devices cuda:0,cuda:0 --split tensor" # two contexts on the GPU
            o=$(timeout 120 "$dir/bin/warm-run" -m "$f" --prompt-ids "$ids" -n 700 --max-new 128 --ids $where \
                -t "$jobs" 2>&1) || engine_word="FAILED ($dev, $(basename "$f"))"
            echo "$o" | tail -2 | tee -a "$log"
            echo "$o" | python3 -c '
import re, sys, json
t = sys.stdin.read()
m = re.search(r"prompt (\d+) tokens in ([\d.]+) ms .*generated (\d+) tokens in ([\d.]+) ms", t)
ids = re.search(r"generated_ids: ([\d ]+)", t)
print(json.dumps({"model": sys.argv[1], "device": sys.argv[2],
    "prefill_tok_s": int(m.group(1)) / float(m.group(2)) * 1e3 if m else None,
    "decode_tok_s": int(m.group(3)) / float(m.group(4)) * 1e3 if m else None,
    "ids": ids.group(1).split()[:32] if ids else None}))' "$(basename "$f")" $dev >>"$engine_json"
        done
    done
    # greedy ids of the Q8_0 model: the GPU's must be the CPU's
    set -o pipefail
    python3 - "$engine_json" <<'PY' | tee -a "$log" || engine_word="FAILED (GPU greedy ids differ from the CPU's)"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
q8 = {r["device"]: r["ids"] for r in rows if "q8_0" in r["model"]}
for r in rows:
    print(f'{r["model"]:>22} {r["device"]:>7}: prefill {r["prefill_tok_s"] or 0:9.1f} tok/s, decode {r["decode_tok_s"] or 0:8.1f} tok/s')
ok = q8.get("cpu") and q8.get("cpu") == q8.get("cuda:0") == q8.get("split")
print("q8_0 greedy ids, GPU and a 2-context split on it vs CPU:", "equal" if ok else f"DIFFER {q8}")
sys.exit(0 if ok else 1)
PY
    set +o pipefail
fi
say "== the engine on the GPU (warm-run --device cuda:0): $engine_word"

# ---- 6. the daemon on the GPU: Generate equal to the CPU's, a restore after a restart -----
daemon_word="not run (needs the CMake build and the Q8_0 model)"
if [ $mode = cmake ] && [ -s "$q8" ]; then
    prompt=$(python3 -c "print(' '.join(['the quick brown fox jumps over the lazy dog'] * 60))")
    gen() { # gen DIR DEVICE: one greedy Generate as JSON lines
        printf 'socket = %s/s\nmodels_dir = %s/models\nstate_dir = %s\ndevice = %s\n' "$1" "$1" "$1" "$2" >"$1/warmd.conf"
        "$dir/bin/warmd" --config "$1/warmd.conf" >>"$1/log" 2>&1 &
        local wpid=$!
        for _ in $(seq 300); do [ -S "$1/s" ] && "$dir/bin/warmctl" --socket "$1/s" status >/dev/null 2>&1 && break; sleep 0.1; done
        "$dir/bin/warmctl" --socket "$1/s" run q8 "$prompt" --greedy -n 32 --json
        "$dir/bin/warmctl" --socket "$1/s" status >>"$1/status" 2>&1
        kill "$wpid" 2>/dev/null; wait "$wpid" 2>/dev/null
    }
    dd=$(mktemp -d)
    for k in gpu cpu; do mkdir -p "$dd/$k/models" && ln -s "$(cd "$(dirname "$q8")" && pwd)/$(basename "$q8")" "$dd/$k/models/q8.gguf"; done
    gen "$dd/gpu" cuda:0 >"$dd/gpu1.json" 2>&1
    gen "$dd/gpu" cuda:0 >"$dd/gpu2.json" 2>&1 # after a restart: restored from the store into GPU KV
    gen "$dd/cpu" cpu >"$dd/cpu.json" 2>&1
    cat "$dd/gpu/status" "$dd/gpu/log" >>"$log"
    daemon_word=$(python3 - "$dd" <<'PY'
import json, sys
def run(name):
    toks, summ = [], None
    for l in open(f"{sys.argv[1]}/{name}.json"):
        try: j = json.loads(l)
        except ValueError: continue
        if "token" in j: toks.append(j["token"]["id"])
        if "summary" in j: summ = j["summary"]
    return toks, summ
g1, s1 = run("gpu1"); g2, s2 = run("gpu2"); c, sc = run("cpu")
if not s1 or not sc or not s2: print("FAILED (a run did not finish)"); sys.exit()
print(("ok" if g1 == c and g2 == c and s2["store_tokens"] > 0 else "FAILED") +
      f": GPU greedy {'equals' if g1 == c else 'DIFFERS from'} the CPU's ({len(c)} tokens); after a restart "
      f"{s2['store_tokens']} of {s2['prompt_tokens']} prompt tokens restored into GPU KV, prefill "
      f"{s1['prefill_usec'] / 1e3:.1f} ms cold vs restore {s2['restore_usec'] / 1e3:.1f} + prefill {s2['prefill_usec'] / 1e3:.1f} ms, "
      f"continuation {'equal' if g2 == c else 'DIFFERS'}")
PY
)
    grep -q "on cuda:0" "$dd/gpu/log" || daemon_word="FAILED (the model did not load on cuda:0): $daemon_word"
    rm -rf "$dd"
fi
say "== daemon on the GPU: $daemon_word"

missing="CUDA graphs for the engine's decode steps (warm-cuda-bench --model uses them; the engine launches each kernel); a split over GPUs keeps the residual stream on the host (one upload and download per layer and partition); a split over GPUs of hybrids and mixtures of experts (refused: Gated DeltaNet layers, gated attention and experts run on one GPU); MoE prefill multiplies each expert's group of tokens 8 at a time on the CUDA cores (no tensor-core grouped GEMM yet)"
say "== NOT COVERED: $missing"

t_end=$(date +%s)
say "== device-check done in $((t_end - t_start)) s"
if [ -n "$out" ]; then
    {
        printf '{"gpu": true, "programs": "%s", "mode": "%s", "cuda_tests": "%s", "bench": "%s", "models": "%s", "engine": "%s", "daemon": "%s", ' \
            "$([ $build_ok = 1 ] && echo ok || echo failed)" "$mode" "$tests_word" "$bench_word" "$model_word" "$engine_word" "$daemon_word"
        printf '"not_covered": "%s", "seconds": %d, "bench_results": ' "$missing" $((t_end - t_start))
        if [ -s "$bench_json" ]; then cat "$bench_json"; else echo null; fi
        printf ', "model_results": ['
        [ -s "$model_json" ] && paste -sd, "$model_json"
        printf '], "engine_results": ['
        [ -s "$engine_json" ] && paste -sd, "$engine_json"
        echo ']}'
    } >"$out/device-check.json"
fi
[ $build_ok = 1 ] && [ $tests_rc = 0 ] && [ $bench_rc = 0 ] && { [ -z "$models" ] || [ $model_rc = 0 ]; }
