#!/bin/sh
# Installs what is missing, builds, and runs the main job: generate a demo model with
# warm-mkmodel and inspect it with warm-gguf.
set -e
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh build -DCMAKE_BUILD_TYPE=Release
mkdir -p build/demo
vocab=../shared/models/vocab/ggml-vocab-llama-spm.gguf
if [ -f "$vocab" ]; then vf="--vocab-from $vocab"; else vf=""; fi
build/bin/warm-mkmodel --arch llama --n-embd 256 --n-layer 4 --n-head 8 --n-head-kv 4 \
    --n-ff 512 --type q8_0 --seed 1 $vf -o build/demo/demo-llama-q8_0.gguf
build/bin/warm-gguf --check build/demo/demo-llama-q8_0.gguf
build/bin/warm-gguf build/demo/demo-llama-q8_0.gguf | head -40
