/* gpu — private to the engine: the layers a CUDA device runs (config device = cuda:N or
 * auto, DESIGN.md 3.7).
 *
 * A context on cuda:N runs its last gpu_layers layers (all by default) on that GPU and
 * the rest, with the token embeddings and the gemma4 per-layer inputs, on the CPU
 * device(s). At load the GPU gets its layers' weights, the final norm and the classifier
 * (uploaded once, kernels/cuda), the KV rows of its layers (kv-cache.c's device slots:
 * same layout as on the host, so state blobs, sequence copies and the context shift work
 * unchanged through kv_mem) and its activations for n_batch tokens. A step uploads the
 * residual stream of its tokens and their positions and KV cells (one copy each), runs
 * the layers there, and downloads only the logits of the tokens that want them; sampling,
 * stop strings and cancellation stay on the host, so they behave exactly as on the CPU.
 *
 * The Gated DeltaNet layers of a hybrid (qwen35) keep their recurrent state there too
 * (per layer and sequence, updated in place by the steps): kv-cache.c's kv_rstate stays
 * the state everything outside a step reads and writes, synced lazily through kv_rs_mem
 * (a host read pulls a sequence whose GPU copy moved; a host write marks it, and the next
 * step pushes it), so a decoding sequence's state never crosses PCIe. A tensor split over
 * GPUs refuses hybrids and mixtures of experts (no per-head ops for their layers there
 * yet).
 *
 * A mixture of experts runs there too: the router's top-k on the device (no host round
 * trip: the decode step still records as a graph), the selected experts' rows only, a
 * prefill's tokens grouped by expert. Where its routed experts do not fit (or the params
 * say experts = cpu) they stay on the host and the CPU runs them over the host's copy,
 * each MoE layer's rows crossing PCIe; engine_context_device_info() then lists the CPU
 * with their bytes.
 *
 * Built with the CUDA tier (WARM_CUDA) only; otherwise gpu_open() says why not and the
 * rest is never reached (ctx->gpu stays NULL). */
#pragma once

#include "engine/context.h"
#include "engine/kv-cache.h"

struct engine_context;
struct engine_batch;
struct gpu;

/* Opens cuda:index for ctx (ctx->model and ->params set): checks that the model's shapes
 * and types run there (ERR_UNSUPPORTED naming what does not), decides the first GPU layer
 * (ctx->n_layer_host) and sets ctx->gpu. The KV cache is created after it, with
 * gpu_kv_mem(). ERR_UNSUPPORTED naming why for no CUDA build, no device, a bad index. */
int gpu_open(struct engine_context *ctx, int index, struct err_detail *d);
const struct kv_mem *gpu_kv_mem(struct engine_context *ctx);
/* After the KV cache: uploads the weights and allocates the activations. */
int gpu_load(struct engine_context *ctx, struct err_detail *d);
void gpu_close(struct engine_context *ctx); /* NULL-safe on ctx->gpu */

/* The GPU's part of one step over tokens [t0, t0 + n) of b, which forward.c runs as
 * gpu_step_begin(), the recipe on gpu_exec() (its layers from n_layer_host on, the final
 * norm and the classifier) between gpu_graph_begin() and gpu_graph_end(), gpu_step_end().
 * Begin: the step's positions and cells, and ctx->x (the residual stream after the host's
 * layers) and the per-layer inputs onto the device; *ret_n_out = the rows that want
 * logits. A one-token step with one row of logits is recorded as a CUDA graph the first
 * time and replayed after (GPU_GRAPH_REPLAYED: the recipe is not run again); any other
 * step runs as it is (GPU_GRAPH_NONE). End: waits for the device and copies the logits of
 * the rows to `logits` (batch order), or with argmax set only each row's argmax there;
 * fails with d naming the device when any op of the step failed (errors are sticky). */
struct exec *gpu_exec(struct engine_context *ctx);
int gpu_step_begin(struct engine_context *ctx, const struct engine_batch *b, int32_t t0, int32_t n,
                   int32_t *ret_n_out, struct err_detail *d);
enum gpu_graph { GPU_GRAPH_NONE, GPU_GRAPH_RECORDING, GPU_GRAPH_REPLAYED };
enum gpu_graph gpu_graph_begin(struct engine_context *ctx, int32_t n, int32_t n_out);
void gpu_graph_end(struct engine_context *ctx);
int gpu_step_end(struct engine_context *ctx, float *logits, int32_t n, int32_t n_out,
                 int32_t *argmax, struct err_detail *d);

/* The GPU's entry of engine_context_device_info(). */
void gpu_device_info(const struct engine_context *ctx, struct engine_device_info *ret);
/* Bytes of the routed experts of GPU layers that run on the host instead
 * (engine_context_params.experts); 0 without a GPU or when they are on it. */
uint64_t gpu_host_expert_bytes(const struct engine_context *ctx);

/* ---- a tensor split over GPUs (devices = cuda:0,cuda:1 or cuda:0,cuda:0) ----------------
 * Every device of the split is a partition: its own CUDA context (two on one GPU act as
 * two devices), its slices of the weights (engine/device.h's plan), its KV heads' bytes of
 * every row, its activations. The residual stream, norms and the sum of the partial
 * products stay on the host, as under a split over CPU partitions: each layer uploads the
 * normed input to every partition and downloads each partition's partial sum. */
struct device;
/* After devices_init() made the devices (names, threads): a CUDA context for each, named
 * "cuda:N" (or "cuda:N.k", the k-th context on that GPU). */
int gpu_parts_open(struct engine_context *ctx, struct err_detail *d);
/* The cache's kv_mem for the split (its rows are allocated by gpu_parts_load()). */
const struct kv_mem *gpu_parts_kv_mem(struct engine_context *ctx);
/* After the plan: each partition's KV rows, weights and activations. */
int gpu_parts_load(struct engine_context *ctx, struct err_detail *d);
void gpu_parts_close(struct engine_context *ctx);
void gpu_part_info(const struct device *dv, struct engine_device_info *ret);
/* Run on each partition's own thread (devices_run) at the start of a step: the step's
 * index arrays onto it, and its executor's error cleared. Its share of each layer and of
 * the classifier then runs through its executor (dv->ex, engine/exec.h), which keeps the
 * first failure (the step fails). */
void gpu_part_begin(struct engine_context *ctx, struct device *dv, const struct engine_batch *b,
                    int32_t t0, int32_t n);
