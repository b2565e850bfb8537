#!/bin/sh
# kernel-table.sh — warm against llama.cpp on the CPU, per weight type × 1 and 2 threads.
#
#   tests/tools/kernel-table.sh [-b BUILD_DIR] [-l LLAMA_BIN_DIR] [-o WORK_DIR]
#                               [-t TYPES] [-p PROMPT] [-g GEN] [-r ROUNDS] [-k LEVEL]
#
# Writes the yardstick model (llama, n_embd 1024, 16 layers, 16/4 heads, n_ff 2816, 32k
# vocab: 246M parameters) with warm-mkmodel, once per type into WORK_DIR (default
# /tmp/warm-kernel-table), then for each type and thread count (1, 2) runs
# `warm-bench --peer llama-bench` ROUNDS times (default 3), the types and thread counts
# interleaved within each round so that every file sees the same load, and prints the best
# of the rounds: prefill and decode t/s of both, their ratios, and warm's decode as % of
# its memory bound. The CPU's features and warm's kernel level and paths head the table
# (from warm-bench's own lines).
#
# llama.cpp: LLAMA_BIN_DIR (or $LLAMA_BIN) holds llama-bench and llama-quantize built
# outside this repository (this script never builds it). With llama-quantize, the k-quant
# and iq4_xs files are written by it from warm-mkmodel's f16 file (its --pure: every
# matrix of the type, as warm-mkmodel writes them; Q4_K_M, Q5_K_M: its default mixes; mxfp4:
# its MXFP4_MOE with --pure, every matrix MXFP4), the others by warm-mkmodel. Without
# LLAMA_BIN_DIR, warm's own figures only (and no mxfp4, Q4_K_M, Q5_K_M).
#
# Types (-t, comma-separated; default all): f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl
# q2_K q3_K q4_K q5_K q6_K iq4_xs mxfp4 Q4_K_M Q5_K_M. -k LEVEL sets WARM_KERNELS (e.g.
# avx2 on an AVX-512 machine); for the figures an AVX2-only machine would see, give it a
# llama.cpp built for AVX2 alone as well (cmake -DGGML_NATIVE=OFF -DGGML_AVX=ON
# -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON, targets llama-bench and
# llama-quantize), so that both sides use the same instructions; for -k avxvnni (AVX2 +
# AVX-VNNI: Intel cores without AVX-512), one built with -DGGML_AVX_VNNI=ON added. On a
# shared machine the absolute figures fall with the load; the ratios, measured back to
# back, hold better.
# KERNEL_TABLE_REPORT_ONLY=1: no runs, the table from WORK_DIR's earlier ones.
set -eu

build=build
llama=${LLAMA_BIN:-}
work=/tmp/warm-kernel-table
types="f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl q2_K q3_K q4_K q5_K q6_K iq4_xs mxfp4
    Q4_K_M Q5_K_M"
prompt=64
gen=64
rounds=3
level=
while getopts b:l:o:t:p:g:r:k: opt; do
    case $opt in
    b) build=$OPTARG ;;
    l) llama=$OPTARG ;;
    o) work=$OPTARG ;;
    t) types=$(echo "$OPTARG" | tr , ' ') ;;
    p) prompt=$OPTARG ;;
    g) gen=$OPTARG ;;
    r) rounds=$OPTARG ;;
    k) level=$OPTARG ;;
    *) sed -n '2,32p' "$0" >&2; exit 2 ;;
    esac
done
bin=$build/bin
for t in warm-mkmodel warm-bench; do
    [ -x "$bin/$t" ] || { echo "kernel-table: no $bin/$t (build it, or -b BUILD_DIR)" >&2; exit 2; }
done
if [ -n "$llama" ]; then
    for t in llama-bench llama-quantize; do
        [ -x "$llama/$t" ] || { echo "kernel-table: no $llama/$t" >&2; exit 2; }
    done
fi
[ -n "$level" ] && export WARM_KERNELS="$level"
mkdir -p "$work"

shape="--arch llama --n-embd 1024 --n-layer 16 --n-head 16 --n-head-kv 4 --n-ff 2816 --n-vocab 32000"
# llama-quantize's name of a type (its --pure ftype), empty where warm-mkmodel writes it
qname() {
    case $1 in
    q2_K) echo Q2_K ;; q3_K) echo Q3_K_S ;; q4_K) echo Q4_K_S ;; q5_K) echo Q5_K_S ;;
    q6_K) echo Q6_K ;; iq4_xs) echo IQ4_XS ;; mxfp4) echo MXFP4_MOE ;;
    Q4_K_M) echo Q4_K_M ;; Q5_K_M) echo Q5_K_M ;; *) echo ;;
    esac
}
for t in $types; do
    f=$work/$t.gguf
    [ -s "$f" ] && continue
    q=$(qname "$t")
    if [ -n "$q" ] && [ -n "$llama" ]; then
        [ -s "$work/f16.src.gguf" ] || "$bin/warm-mkmodel" $shape --type f16 -o "$work/f16.src.gguf" >/dev/null
        pure=--pure
        case $t in *_M) pure= ;; esac
        "$llama/llama-quantize" $pure "$work/f16.src.gguf" "$f" "$q" >"$work/$t.quantize.log" 2>&1 ||
            { echo "kernel-table: llama-quantize $t failed, see $work/$t.quantize.log" >&2; exit 1; }
    elif [ "$t" = Q4_K_M ] || [ "$t" = Q5_K_M ] || [ "$t" = mxfp4 ]; then
        echo "kernel-table: $t needs llama-quantize (-l), skipped" >&2
        continue
    else
        "$bin/warm-mkmodel" $shape --type "$t" -o "$f" >/dev/null
    fi
done

peer=
[ -n "$llama" ] && peer="--peer $llama/llama-bench"
# rounds × types × threads, interleaved; each run's output kept. A type's rounds from an
# earlier run go first: the table is the best of this run's rounds, not of older ones.
if [ -z "${KERNEL_TABLE_REPORT_ONLY:-}" ]; then
    for t in $types; do rm -f "$work/$t".t[12].r*.txt; done
fi
for r in $(seq 1 "$rounds"); do
    [ -n "${KERNEL_TABLE_REPORT_ONLY:-}" ] && break
    for t in $types; do
        [ -s "$work/$t.gguf" ] || continue
        for n in 1 2; do
            "$bin/warm-bench" "$work/$t.gguf" -t "$n" -p "$prompt" -g "$gen" -r 1 $peer \
                >"$work/$t.t$n.r$r.txt" 2>&1 || echo "kernel-table: warm-bench $t -t $n failed" >&2
        done
    done
done

first=$(ls "$work"/*.t1.r1.txt 2>/dev/null | head -1)
[ -n "$first" ] || { echo "kernel-table: no runs" >&2; exit 1; }
echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg)"
grep -m1 '^cpu features' "$first"
[ -n "$llama" ] && echo "llama.cpp: $llama (build $(grep -m1 -o 'build [0-9a-f]*' "$first" | cut -d' ' -f2))"
echo "model: llama 246M ($shape), pp$prompt / tg$gen, best of $rounds rounds (interleaved)"
echo
echo "| type | thr | warm path (decode; prefill) | warm pp | llama pp | pp ratio | warm tg | llama tg | tg ratio | warm tg % bound |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for t in $types; do
    for n in 1 2; do
        ls "$work/$t.t$n".r*.txt >/dev/null 2>&1 || continue
        # the thread row of the threads asked (warm-bench -t 1 prints one row, -t 2 two)
        cat "$work/$t.t$n".r*.txt | awk -v n="$n" -v t="$t" '
            /^  [a-z0-9_A-Z]+ +decode / { sub(/,$/, "", $3); if (!(($1) in path)) { path[$1] = $3 "; " $5; order[++np] = $1 } }
            $1 == n && NF >= 6 { if ($2 > wpp) wpp = $2; if ($3 > wtg) { wtg = $3; pct = $6 } ; mine = 1; next }
            $1 == "peer" && mine { if ($2 > lpp) lpp = $2; if ($3 > ltg) ltg = $3 }
            $1 != "peer" { mine = 0 }
            END {
                p = ""; for (i = 1; i <= np; i++) p = p (i > 1 ? ", " : "") order[i] ": " path[order[i]]
                r1 = "-"; r2 = "-"; l1 = "-"; l2 = "-"
                if (lpp > 0) { r1 = sprintf("%.2fx", wpp / lpp); l1 = sprintf("%.1f", lpp) }
                if (ltg > 0) { r2 = sprintf("%.2fx", wtg / ltg); l2 = sprintf("%.1f", ltg) }
                printf "| %s | %d | %s | %.1f | %s | %s | %.1f | %s | %s | %s |\n", t, n, p, wpp, l1, r1, wtg, l2, r2, pct
            }'
    done
done
