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

/* The GPU part of one step over tokens [t0, t0 + n) of b: ctx->x holds their residual
 * stream after the host layers; writes the logits of the tokens that want them (in batch
 * order) to logits, *ret_n_out rows. */
int gpu_step(struct engine_context *ctx, const struct engine_batch *b, int32_t t0, int32_t n,
             float *logits, int32_t *ret_n_out, struct err_detail *d);

/* The GPU's entry of engine_context_device_info(). */
void gpu_device_info(const struct engine_context *ctx, struct engine_device_info *ret);
