#!/bin/sh
# The main job, end to end: installs what is missing, builds, starts warmd on a private
# socket with a model, sends a demo request with warmctl, restarts the daemon and sends the
# same prompt plus a few words again, which now resumes from the persistent prompt cache.
#
# The model is ../shared/models/stories260K.gguf (a tiny trained story model) when that
# file exists, otherwise a generated llama model with random weights (its text is noise).
# Everything lives under build/demo/ and is removed by the next run.
set -e
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh build -DCMAKE_BUILD_TYPE=Release

demo=$(pwd)/build/demo
rm -rf "$demo" && mkdir -p "$demo/models" "$demo/state"
if [ -f ../shared/models/stories260K.gguf ]; then
    cp ../shared/models/stories260K.gguf "$demo/models/stories.gguf"
    model=stories
else
    build/bin/warm-mkmodel --arch llama --n-embd 256 --n-layer 4 --n-head 8 --n-head-kv 4 \
        --n-ff 512 --type q8_0 --seed 1 -o "$demo/models/demo.gguf"
    model=demo
fi
build/bin/warm-gguf --check "$demo/models/$model.gguf"

sock=$demo/warmd.sock
start_daemon() {
    build/bin/warmd --socket="$sock" --models-dir="$demo/models" --state-dir="$demo/state" \
        --threads=2 --ctx-size=512 --cache-chunk-tokens=32 --log-level=info \
        2>>"$demo/warmd.log" &
    pid=$!
    i=0
    until build/bin/warmctl --socket "$sock" status >/dev/null 2>&1; do
        i=$((i + 1)); [ $i -lt 100 ] || { cat "$demo/warmd.log"; exit 1; }
        sleep 0.1
    done
}
stop_daemon() { kill -TERM "$pid"; wait "$pid" || true; }
trap 'kill -TERM $pid 2>/dev/null || true' EXIT

prompt="Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. One day,"
start_daemon
echo "== warmd is serving $model on $sock (log: $demo/warmd.log)"
build/bin/warmctl --socket "$sock" status
build/bin/warmctl --socket "$sock" models
echo "== first request (cold: the whole prompt is evaluated)"
build/bin/warmctl --socket "$sock" run "$model" "$prompt" --greedy -n 40 -v
echo
echo "== restarting warmd"
stop_daemon
start_daemon
echo "== the same prompt and more words (resumed from the persistent prompt cache)"
build/bin/warmctl --socket "$sock" run "$model" "$prompt She saw a big" --greedy -n 40 -v
echo
build/bin/warmctl --socket "$sock" cache stats
stop_daemon
trap - EXIT
echo "== done: warmd exited cleanly"
