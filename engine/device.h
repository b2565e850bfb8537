/* device — private to the engine: where a context's work runs (DESIGN.md 3.7).
 *
 * A context runs on n devices. Today a device is a CPU partition: its own thread pool,
 * its slices of the weights, its KV heads and its scratch. With one device it holds
 * everything and the forward pass is the plain layer loop. With n > 1 (split = tensor)
 * every layer is cut by heads and FFN units (notes/gemma.md §C, llama.cpp's -sm tensor):
 *
 *   Q, K, V, FFN gate and up, the classifier: by output rows (each device computes its
 *     rows, nothing to combine; the classifier's rows are copied into the logits);
 *   attention output and FFN down: by input columns (each device a partial sum of the
 *     whole row, device_sum() adds them in device order);
 *   a mixture-of-experts FFN: every expert like a dense FFN, by its hidden units (each
 *     device the same units of every expert: gate and up rows, down columns), the shared
 *     expert likewise; the router whole on every device, which all route alike. Cutting
 *     whole experts instead would leave a device idle whenever a token's experts sit on
 *     the others: by units every device reads its share of exactly the selected experts;
 *   the KV cache: by KV heads (a device writes and reads only its heads);
 *   a Gated DeltaNet layer (notes/hybrid.md §A.6): by key heads, each with the value heads
 *     that read it (tiled order, qwen35: value heads kh, kh + H_k, kh + 2·H_k, ...;
 *     grouped, qwen3next: the run kh·r .. kh·r + r − 1, r = H_v / H_k), so that no two
 *     devices compute, or update the conv state of, the same channel: its rows of
 *     attn_qkv (q and k of its key heads, v of its value heads), of attn_gate, alpha,
 *     beta, dt and a, its conv channels, its heads of S, the gated norm per head, and
 *     its columns of ssm_out, whose partial sums are added like the attention output's.
 *     The device's heads sit in a local order with the arch's map (its key head i is
 *     local key head i; tiled: local value head j·n_dk + i is global value head
 *     j·H_k + dk0 + i), the state stays the context's, in the global order: a device
 *     reads and writes its heads' S and its channels of the conv state there.
 *
 * Cuts fall on whole KV heads and their GQA groups of query heads, and on whole quant
 * blocks of the column-split tensors (a unit of `u` KV heads where one head's group is
 * not a whole block). Cut points: chunk j ends at floor(n_units·(r_0 + … + r_j)) units
 * (r = the tensor_split ratios, equal by default); the last chunk takes the remainder.
 * Rotation: chunk j goes to device (j + rot) mod n, rot = the number of earlier layers
 * of the same kind (SWA or not) mod n, so the remainders of uneven cuts spread over the
 * devices; the classifier takes n_layer mod n. Devices hold their ranges in device order.
 *
 * Shared-KV layers (#31406): the attention of layer il (Q, its norm, the output
 * projection) is cut with the unit and rotation of kv_source(il), so every query head
 * sits on the device that holds its KV head; its FFN keeps il's own rotation.
 * devices_init() checks this placement for every layer and device and refuses a context
 * that breaks it (params.split_own_rotation reproduces the bug for the tests).
 *
 * The KV cache stays one kv_cache (its blobs, bookkeeping and context shift are those of
 * one device); on CPU partitions a device's KV slice is its heads' bytes of each row. */
#pragma once

#include "engine/exec-cpu.h"
#include "engine/model.h"
#include "kernels/deltanet.h"

struct engine_context;
struct kern_pool;
struct gpu;

/* One layer's share of one device. Empty ranges (n_kv or n_ff 0) do no work there. */
struct dev_layer {
    int64_t kv0, n_kv;    /* KV heads [kv0, kv0 + n_kv) of kv_source(il) its attention uses */
    int64_t ff0, n_ff;    /* FFN hidden units [ff0, ff0 + n_ff) */
    /* a mixture-of-experts layer's: units [fe0, fe0 + n_fe) of every expert, units
     * [fs0, fs0 + n_fs) of the shared expert (0 elsewhere) */
    int64_t fe0, n_fe, fs0, n_fs;
    /* a Gated DeltaNet layer's: key heads [dk0, dk0 + n_dk), its n_dv value heads, its
     * n_dchan conv channels, the shape of its heads in the local order (0 elsewhere) */
    int64_t dk0, n_dk, n_dv, n_dchan;
    struct kern_dn_shape dn;
    /* Its weights, cut as each one's spec says (engine/arch.h): the rows of its heads or
     * units (views), the columns of them (copies), the whole per-head norms; absent
     * (NULL data) where the host's loop reads the model's own. */
    struct engine_layer w;
};

struct device {
    char name[16]; /* "cpu" (one device), "cpu0", "cpu1", ... */
    int n_threads;
    struct kern_pool *pool;
    struct dev_layer *layer;  /* n_layer */
    int64_t vocab0, n_vocab;  /* classifier rows */
    struct engine_weight output;

    /* scratch, sized for n_batch tokens and this device's largest slices */
    float *q, *k, *v, *att;   /* (n_batch, its heads × head size) */
    float *hb, *hb2;          /* (n_batch, its FFN units) */
    float *part;              /* (n_batch, n_embd) its partial sum of a column-split product */
    float *logits;            /* (n_out_step, its classifier rows); n > 1 only */
    float *attn_scratch;      /* (n_threads, attn_scratch_floats) */
    size_t attn_scratch_floats;
    /* gated attention's query and gate rows, its gates; Gated DeltaNet's projections and
     * kern_dn_delta's scratch (n_threads, dn_scratch_bytes): engine/exec.h */
    float *qg, *gate, *dn_qkv, *dn_z, *dn_g, *dn_beta, *dn_o;
    float *dn_scratch;
    size_t dn_scratch_bytes;
    size_t dn_kern_bytes;     /* the kernels' part of a thread's dn_scratch */
    float *dn_conv_state;     /* (K − 1, its conv channels): its share of a conv state */
    void *mm_scratch;
    /* mixture of experts (exec-cpu.c's moe ops): each token's experts and weights
     * (n_batch, n_expert_used); the (token, slot) pairs grouped by expert (moe_list) and
     * each expert's count (n_expert + 1); an expert's gathered input rows and its output
     * rows (n_batch, n_embd), its hidden units' (n_batch, n_fe); the sum (n_batch, n_embd) */
    int32_t *moe_sel, *moe_list, *moe_count;
    float *moe_wt, *moe_x, *moe_y, *moe_h, *moe_h2, *moe_acc;
    /* a few tokens' experts (MOE_FEW_TOKENS): each thread's row of n_embd floats (on 64
     * bytes) then its matmul scratch, moe_few_bytes apart */
    void *moe_few;
    size_t moe_few_bytes;

    struct gpu *gpu;          /* a partition of a split over GPUs (engine/gpu.h), else NULL */
    /* its executor (engine/exec.h): &cpu.e, or a GPU partition's */
    struct exec_cpu cpu;
    struct exec *ex;

    void **owned;             /* the column slices and repacked weights it copied */
    size_t n_owned;
    uint64_t weight_bytes, copied_bytes, kv_bytes, scratch_bytes;
};

/* Plans the split from ctx->params, slices the weights, starts each device's threads and
 * sizes its scratch. ctx->model, ->kv and ->params are set. */
int devices_init(struct engine_context *ctx, struct err_detail *d);
void devices_done(struct engine_context *ctx);

/* Runs fn(ctx, device, arg) on every device at once (each on its own threads) and
 * returns when all are done. */
typedef void (*device_fn)(struct engine_context *ctx, struct device *dv, void *arg);
void devices_run(struct engine_context *ctx, device_fn fn, void *arg);
/* y[0..n) = the sum of every device's part[0..n), in device order. */
void devices_sum(struct engine_context *ctx, float *y, int64_t n);

/* Gated DeltaNet on a device's heads of layer il (dev_layer's local order), for one run
 * of one sequence's tokens (kernels/deltanet.h):
 * device_dn_conv: kern_dn_conv of its local channels [c0, c1) (x, y: (n_tok, n_dchan)),
 *   with those channels of the sequence's conv state `state` (K − 1, conv_dim), which
 *   they update; threads may run disjoint channel ranges at once;
 * device_dn_delta: kern_dn_delta of its local value heads [h0, h1) (s in the local order)
 *   over those heads of the sequence's S `state` (H_v, d_v, d_k). */
void device_dn_conv(struct device *de, int il, float *y, float *state, const float *x,
                    int64_t n_tok, int64_t c0, int64_t c1);
void device_dn_delta(const struct device *de, int il, float *state, const struct kern_dn_seq *s,
                     int64_t h0, int64_t h1, void *scratch);
