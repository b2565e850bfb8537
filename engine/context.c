/* Contexts: creation (every buffer sized here), batch validation, decode. */
#include "engine/forward.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

void engine_context_params_default(struct engine_context_params *p) {
    *p = (struct engine_context_params){
        .n_ctx = 0,
        .n_seq = 1,
        .n_batch = 512,
        .n_outputs = 0,
        .n_threads = 1,
        .type_k = KERN_TYPE_F16,
        .type_v = KERN_TYPE_F16,
        .kv_rotation = true,
        .swa_chunk = ENGINE_CHUNK_TOKENS,
        .swa_full = false,
        .n_rs_snapshots = 2,
    };
}

void engine_context_free(struct engine_context *ctx) {
    if (!ctx) return;
    /* the cache first: its device slots go back through the GPUs' kv_mem */
    kv_cache_done(&ctx->kv);
    gpu_close(ctx);
    devices_done(ctx);
    free(ctx->x);
    free(ctx->xb);
    for (int i = 0; i < KV_MAX_STORES; i++) free(ctx->rope_cs[i]);
    free(ctx->ple);
    free(ctx->k_row);
    free(ctx->ple_row);
    free(ctx->pl_g);
    free(ctx->out_x);
    free(ctx->argmax);
    free(ctx->logits);
    free(ctx->seq_next);
    free(ctx->embd);
    free(ctx->embd_row);
    free(ctx->embd_seq);
    free(ctx->pool_in);
    free(ctx->pool_n);
    free(ctx->dense_mid);
    free(ctx->dense_scratch);
    free(ctx);
}

/* rows × cols floats, or NULL (overflow, no memory) */
static float *floats_new(size_t rows, uint64_t cols) {
    return malloc_array_aligned(rows, (size_t)cols * sizeof(float));
}

/* the shared work's matmuls: the gemma4 per-layer branch (the devices size their own) */
static int context_new(const struct engine_model *m, struct engine_context_params p,
                       struct engine_context **ret, struct err_detail *d);

int engine_context_new(const struct engine_model *m, const struct engine_context_params *params,
                       struct engine_context **ret, struct err_detail *d) {
    struct engine_context_params p;
    if (params)
        p = *params;
    else
        engine_context_params_default(&p);
    if (p.device == ENGINE_DEVICE_AUTO && p.n_devices > 1) p.device = ENGINE_DEVICE_CPU; /* the split names them */
    if (p.device != ENGINE_DEVICE_AUTO) return context_new(m, p, ret, d);
    /* auto: cuda:0 when the model runs and fits there, else the CPU, saying why */
    p.device = ENGINE_DEVICE_CUDA;
    p.device_index = 0;
    struct err_detail why = {0};
    int r_gpu = context_new(m, p, ret, &why), r;
    if (r_gpu >= 0) return r_gpu;
    p.device = ENGINE_DEVICE_CPU;
    if ((r = context_new(m, p, ret, d)) < 0) return r;
    snprintf((*ret)->device_note, sizeof (*ret)->device_note, "%s", err_msg(&why, r_gpu));
    return 0;
}

const char *engine_context_device_note(const struct engine_context *ctx) {
    return ctx->device_note;
}

/* The host's executor (engine/exec.h): the recipe's residual stream, norms and per-layer
 * branch on device 0's threads; with one CPU device also its layer kinds, on that
 * device's slices and scratch. */
static void host_exec_init(struct engine_context *ctx) {
    struct device *d0 = &ctx->dev[0];
    ctx->host = (struct exec_cpu){
        .e = {.ops = &exec_cpu_ops, .ctx = ctx, .name = d0->name, .layer = d0->layer,
              .whole = ctx->model->layers, .x = ctx->x, .xb = ctx->xb, .q = d0->q, .k = d0->k,
              .v = d0->v, .att = d0->att, .hb = d0->hb, .hb2 = d0->hb2, .pl_g = ctx->pl_g,
              .xo = ctx->out_x, .output_norm = &ctx->model->output_norm, .output = &d0->output,
              .impl = d0, .qg = d0->qg, .gate = d0->gate, .dn_qkv = d0->dn_qkv,
              .dn_z = d0->dn_z, .dn_g = d0->dn_g, .dn_beta = d0->dn_beta, .dn_o = d0->dn_o},
        .pool = d0->pool,
        .mm_scratch = d0->mm_scratch,
        .attn_scratch = d0->attn_scratch,
        .attn_scratch_floats = d0->attn_scratch_floats,
        .dn_scratch = d0->dn_scratch,
        .dn_scratch_bytes = d0->dn_scratch_bytes,
    };
}

/* An embeddings context for an embedding model, and only there; on the CPU; positions
 * within a position table. */
static int embeddings_check(const struct engine_model *m, const struct engine_context_params *p,
                            struct err_detail *d) {
    const struct engine_hparams *hp = &m->hp;
    if (hp->embedding && !p->embeddings)
        return err_set(d, ERR_UNSUPPORTED, "%s model with %s pooling is an embedding model: it "
                       "computes embeddings, not text (a context for it needs embeddings = true)",
                       m->arch_name, engine_pooling_name(hp->pooling));
    if (!hp->embedding && p->embeddings)
        return err_set(d, ERR_UNSUPPORTED, "%s model is not an embedding model (its file has no "
                       "%s.pooling_type): it generates text and cannot compute embeddings",
                       m->arch_name, m->arch_name);
    const bool cuda = p->device == ENGINE_DEVICE_CUDA || (p->n_devices > 0 && p->split_cuda[0]);
    if (p->embeddings && cuda)
        return err_set(d, ERR_UNSUPPORTED, "embedding models run on the CPU only (the CUDA "
                       "backend has no bidirectional attention, LayerNorm or pooling yet)");
    if (m->pos_embd.data && p->n_ctx > m->pos_embd.n_out)
        return err_set(d, ERR_INVALID, "n_ctx %u is past the %lld positions of the model's "
                       "position table (position_embd)", p->n_ctx, (long long)m->pos_embd.n_out);
    return 0;
}

/* An embeddings context's buffers: the final states of a step, the pooled rows and the
 * projections' scratch. */
static int embeddings_alloc(struct engine_context *ctx) {
    const struct engine_model *m = ctx->model;
    const struct engine_hparams *hp = &m->hp;
    const size_t n_seq = ctx->params.n_seq;
    size_t mm = 0;
    if (m->dense_2.data)
        mm = kern_matmul_scratch_bytes(m->dense_2.type, m->dense_2.n_in, (int64_t)n_seq);
    if (m->dense_3.data)
        mm = MAX(mm, kern_matmul_scratch_bytes(m->dense_3.type, m->dense_3.n_in, (int64_t)n_seq));
    ctx->embd = floats_new(ctx->params.n_batch, hp->n_embd);
    ctx->embd_row = malloc_array(n_seq, sizeof *ctx->embd_row);
    ctx->embd_seq = floats_new(n_seq, hp->n_embd_out);
    ctx->pool_in = floats_new(n_seq, hp->n_embd);
    ctx->pool_n = malloc_array(n_seq, sizeof *ctx->pool_n);
    ctx->dense_mid = floats_new(n_seq, MAX(hp->n_embd_dense, 1));
    ctx->dense_scratch = malloc(mm ? mm : 1);
    if (!ctx->embd || !ctx->embd_row || !ctx->embd_seq || !ctx->pool_in || !ctx->pool_n ||
        !ctx->dense_mid || !ctx->dense_scratch)
        return -ENOMEM;
    for (size_t q = 0; q < n_seq; q++) ctx->embd_row[q] = -1;
    return 0;
}

static int context_new(const struct engine_model *m, struct engine_context_params p,
                       struct engine_context **ret, struct err_detail *d) {
    const struct engine_hparams *hp = &m->hp;
    if (p.n_ctx == 0) p.n_ctx = MIN(hp->n_ctx_train, 4096u);
    if (p.n_seq == 0) p.n_seq = 1;
    if (p.n_batch == 0) p.n_batch = 512;
    if (p.n_outputs == 0) p.n_outputs = p.n_seq;
    if (p.n_threads <= 0) p.n_threads = 1;
    if (p.n_ctx > INT32_MAX || p.n_seq > (1u << 16) || p.n_batch > (1u << 20) ||
        p.n_outputs > (1u << 20) || p.n_threads > 1024 || p.n_rs_snapshots > 64)
        return err_set(d, ERR_INVALID, "context parameters out of range (n_ctx %u, n_seq %u, "
                       "n_batch %u, n_outputs %u, threads %d, recurrent snapshots %u)", p.n_ctx,
                       p.n_seq, p.n_batch, p.n_outputs, p.n_threads, p.n_rs_snapshots);
    int r = embeddings_check(m, &p, d);
    if (r < 0) return r;

    struct engine_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return -ENOMEM;
    ctx->model = m;
    ctx->params = p;
    /* an SWA ring holds the window, one chunk (exported before its rows leave) and one
     * batch (DESIGN.md 3.6) */
    uint32_t ring_extra =
        p.swa_full ? 0 : p.n_batch + (p.swa_chunk ? p.swa_chunk : ENGINE_CHUNK_TOKENS);
    /* a GPU first: it decides which layers' KV lives on the device */
    ctx->n_layer_host = hp->n_layer;
    ctx->split_gpu = p.n_devices > 0 && p.split_cuda[0] != 0;
    if (p.device == ENGINE_DEVICE_CUDA && (r = gpu_open(ctx, p.device_index, d)) < 0) goto fail;
    const struct kv_mem *mem = ctx->gpu ? gpu_kv_mem(ctx) : ctx->split_gpu ? gpu_parts_kv_mem(ctx) : NULL;
    r = kv_cache_init(&ctx->kv, m, p.type_k, p.type_v, p.n_seq, p.n_ctx, p.kv_rotation,
                      ring_extra, mem, ctx->split_gpu ? 0 : ctx->n_layer_host,
                      p.n_rs_snapshots, d);
    if (r < 0) goto fail;
    /* global layers: the file's RoPE (scaling, factors); gemma's SWA layers: their own
     * base, scale 1, and no frequency factors (gemma4's proportional RoPE is global-only) */
    for (int s = 0; s < KV_MAX_STORES; s++) {
        bool swa = s == KV_STORE_SWA;
        uint32_t n_rot = hp->n_rot;
        for (uint32_t il = 0; il < hp->n_layer; il++)
            if (hp->layer[il].swa == swa) n_rot = hp->layer[il].n_rot;
        const float base = swa ? hp->rope_freq_base_swa : hp->rope_freq_base;
        swa = swa && !hp->swa_rope_global; /* gpt-oss: the global RoPE but its SWA base */
        ctx->rope[s] = (struct kern_rope_params){
            .n_dims = n_rot,
            .neox = hp->rope_kind == ENGINE_ROPE_NEOX,
            .freq_base = base,
            .freq_scale = swa ? 1.0f : hp->rope_freq_scale,
            .ext_factor = swa ? 0.0f : hp->yarn_ext_factor,
            .attn_factor = swa ? 1.0f : hp->yarn_attn_factor,
            .beta_fast = hp->yarn_beta_fast,
            .beta_slow = hp->yarn_beta_slow,
            .n_ctx_orig = hp->rope_n_ctx_orig,
            .freq_factors = swa ? NULL : m->rope_freqs.data,
        };
    }

    size_t nb = p.n_batch;
    ctx->n_out_step = MIN(p.n_batch, p.n_outputs);
    /* the attention's and FFN's scratch, each device's own, and its threads */
    if ((r = devices_init(ctx, d)) < 0) goto fail;
    if (ctx->gpu && (r = gpu_load(ctx, d)) < 0) goto fail;
    if (ctx->split_gpu && (r = gpu_parts_load(ctx, d)) < 0) goto fail;
    uint64_t n_ple = (uint64_t)hp->n_layer * hp->n_embd_per_layer;
    ctx->x = floats_new(nb, hp->n_embd);
    ctx->xb = floats_new(nb, hp->n_embd);
    for (int s = 0; s < KV_MAX_STORES; s++) ctx->rope_cs[s] = floats_new(nb, MAX(hp->max_n_rot, 1));
    ctx->ple = floats_new(n_ple ? nb : 1, MAX(n_ple, 1));
    ctx->ple_row = floats_new(1, MAX(n_ple, 1));
    ctx->k_row = floats_new(1, hp->max_n_embd_k);
    ctx->pl_g = floats_new(nb, MAX(hp->n_embd_per_layer, 1));
    ctx->out_x = floats_new(ctx->n_out_step, hp->n_embd);
    /* (an embeddings context computes no logits) */
    ctx->logits = p.embeddings ? floats_new(1, 1) : floats_new(p.n_outputs, hp->n_vocab);
    ctx->argmax = malloc_array(p.n_outputs, sizeof *ctx->argmax);
    ctx->seq_next = malloc_array(p.n_seq, sizeof *ctx->seq_next);
    if (!ctx->x || !ctx->xb || !ctx->rope_cs[0] || !ctx->rope_cs[1] || !ctx->ple ||
        !ctx->ple_row || !ctx->k_row || !ctx->pl_g || !ctx->out_x || !ctx->logits ||
        !ctx->argmax || !ctx->seq_next) {
        r = err_set(d, -ENOMEM, "cannot allocate the context's scratch buffers");
        goto fail;
    }
    if (p.embeddings && (r = embeddings_alloc(ctx)) < 0) {
        r = err_set(d, r, "cannot allocate the context's embedding buffers");
        goto fail;
    }
    host_exec_init(ctx);
    *ret = ctx;
    return 0;
fail:
    engine_context_free(ctx);
    return r;
}

const struct engine_model *engine_context_model(const struct engine_context *ctx) {
    return ctx->model;
}

const struct engine_context_params *engine_context_params(const struct engine_context *ctx) {
    return &ctx->params;
}

size_t engine_context_kv_bytes(const struct engine_context *ctx) {
    return kv_cache_bytes(&ctx->kv);
}

/* Checks every token of b before anything runs; fills ctx->seq_next with one past the
 * last position of each sequence in the batch (-1 for sequences it does not touch). */
static int batch_check(struct engine_context *ctx, const struct engine_batch *b,
                       struct err_detail *d) {
    const struct kv_cache *kv = &ctx->kv;
    if (b->n_tok <= 0 || !b->token || !b->pos)
        return err_set(d, ERR_INVALID, "empty batch");
    const bool whole = ctx->params.embeddings; /* whole inputs in one step */
    if (whole && (uint32_t)b->n_tok > ctx->params.n_batch)
        return err_set(d, ERR_INVALID, "an embeddings context takes a batch in one step: %d "
                       "tokens, n_batch %u", b->n_tok, ctx->params.n_batch);
    for (uint32_t s = 0; s < kv->n_seq; s++) ctx->seq_next[s] = -1;
    int64_t n_out = 0;
    for (int32_t i = 0; i < b->n_tok; i++) {
        int32_t tok = b->token[i], pos = b->pos[i], seq = b->seq ? b->seq[i] : 0;
        if (tok < 0 || (uint32_t)tok >= ctx->model->hp.n_vocab)
            return err_set(d, ERR_TOKEN, "batch token %d: id %d is not in [0, %u)", i, tok,
                           ctx->model->hp.n_vocab);
        if (seq < 0 || (uint32_t)seq >= kv->n_seq)
            return err_set(d, ERR_INVALID, "batch token %d: sequence %d is not in [0, %u)", i, seq,
                           kv->n_seq);
        if (pos < 0)
            return err_set(d, ERR_INVALID, "batch token %d: negative position %d", i, pos);
        if ((uint32_t)pos >= kv->n_ctx)
            return err_set(d, ERR_CTX_FULL, "batch token %d: position %d is past the context "
                           "size %u", i, pos, kv->n_ctx);
        int32_t expect = ctx->seq_next[seq];
        if (whole && expect < 0 && pos != 0)
            return err_set(d, ERR_INVALID, "batch token %d: an embeddings context takes whole "
                           "inputs, and sequence %d starts at position %d, not 0", i, seq, pos);
        if (expect < 0 && (uint32_t)pos > kv->seq_len[seq])
            return err_set(d, ERR_INVALID, "batch token %d: position %d leaves a gap after the "
                           "%u cached positions of sequence %d", i, pos, kv->seq_len[seq], seq);
        if (expect < 0 && !kv_rs_can_resume(kv, seq, (uint32_t)pos))
            return err_set(d, ERR_INVALID, "batch token %d: sequence %d cannot continue at "
                           "position %d: its recurrent state is held there neither live nor "
                           "as a snapshot (the latest before it: position %u)", i, seq, pos,
                           engine_kv_seq_resume_pos(ctx, seq, (uint32_t)pos));
        if (expect < 0 && !kv_can_resume(kv, seq, (uint32_t)pos))
            return err_set(d, ERR_INVALID, "batch token %d: sequence %d cannot continue at "
                           "position %d: its sliding-window cache no longer holds the %u "
                           "positions before it", i, seq, pos, kv->store[KV_STORE_SWA].window - 1);
        if (expect >= 0 && pos != expect)
            return err_set(d, ERR_INVALID, "batch token %d: position %d of sequence %d, expected "
                           "%d (consecutive positions)", i, pos, seq, expect);
        ctx->seq_next[seq] = pos + 1;
        n_out += b->want_logits ? b->want_logits[i] : i == b->n_tok - 1;
    }
    if (!whole && n_out > ctx->params.n_outputs)
        return err_set(d, ERR_INVALID, "batch wants %lld rows of logits, the context holds %u",
                       (long long)n_out, ctx->params.n_outputs);
    return 0;
}

/* the index of the largest of n values, the lowest on ties (as kern_cuda_argmax) */
static int32_t row_argmax(const float *x, int64_t n) {
    int32_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = (int32_t)i;
    return best;
}

int engine_context_decode(struct engine_context *ctx, const struct engine_batch *b,
                          struct err_detail *d) {
    int r = batch_check(ctx, b, d);
    if (r < 0) return r;
    /* a token at position p < len rewrites the tail: the sequence becomes [0, p) first */
    for (int32_t i = b->n_tok - 1; i >= 0; i--) {
        int32_t seq = b->seq ? b->seq[i] : 0;
        if ((uint32_t)b->pos[i] < ctx->kv.seq_len[seq]) engine_kv_seq_rm(ctx, seq, (uint32_t)b->pos[i]);
    }
    ctx->n_outputs = 0;
    ctx->argmax_only = b->argmax_only;
    int32_t out_row = 0;
    for (int32_t t0 = 0; t0 < b->n_tok; t0 += (int32_t)ctx->params.n_batch) {
        int32_t n = MIN(b->n_tok - t0, (int32_t)ctx->params.n_batch);
        if ((r = forward_step(ctx, b, t0, n, &out_row, d)) < 0) return r;
    }
    ctx->n_outputs = out_row;
    if (ctx->params.embeddings) forward_pool(ctx, b);
    /* greedy rows: the GPU computed them on the device; here from the logits */
    for (int32_t i = 0; ctx->argmax_only && !ctx->gpu && i < out_row; i++)
        ctx->argmax[i] = row_argmax(ctx->logits + (size_t)i * ctx->model->hp.n_vocab, ctx->model->hp.n_vocab);
    for (int32_t i = 0; i < b->n_tok; i++)
        *kv_tok(&ctx->kv, b->seq ? b->seq[i] : 0, b->pos[i]) = b->token[i];
    for (uint32_t s = 0; s < ctx->kv.n_seq; s++)
        if (ctx->seq_next[s] >= 0) {
            kv_written(&ctx->kv, (int32_t)s, ctx->kv.seq_len[s], (uint32_t)ctx->seq_next[s]);
            kv_rs_advanced(&ctx->kv, (int32_t)s, (uint32_t)ctx->seq_next[s]);
        }
    return 0;
}

const float *engine_context_logits(const struct engine_context *ctx, int32_t i) {
    if (i < 0 || i >= ctx->n_outputs || ctx->argmax_only) return NULL;
    return ctx->logits + (size_t)i * ctx->model->hp.n_vocab;
}

int32_t engine_context_argmax(const struct engine_context *ctx, int32_t i) {
    if (i < 0 || i >= ctx->n_outputs) return -1;
    if (ctx->argmax_only) return ctx->argmax[i];
    return row_argmax(ctx->logits + (size_t)i * ctx->model->hp.n_vocab, ctx->model->hp.n_vocab);
}

int32_t engine_context_n_outputs(const struct engine_context *ctx) {
    return ctx->n_outputs;
}

int engine_context_embeddings(const struct engine_context *ctx, int32_t seq, float *out,
                              bool normalize, struct err_detail *d) {
    const struct engine_hparams *hp = &ctx->model->hp;
    if (!ctx->params.embeddings)
        return err_set(d, ERR_INVALID, "not an embeddings context");
    if (hp->pooling == ENGINE_POOLING_NONE)
        return err_set(d, ERR_UNSUPPORTED, "the model pools nothing (pooling none): it has one "
                       "embedding per token");
    if (seq < 0 || (uint32_t)seq >= ctx->kv.n_seq || ctx->embd_row[seq] < 0)
        return err_set(d, ERR_INVALID, "sequence %d was not in the last decode", seq);
    const float *x = ctx->embd_seq + (size_t)ctx->embd_row[seq] * hp->n_embd_out;
    const int64_t n = hp->n_embd_out;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float s = !normalize ? 1.0f : sum > 0 ? (float)(1.0 / sqrt(sum)) : 0.0f;
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * s;
    return 0;
}

int engine_context_embeddings_token(struct engine_context *ctx, int32_t i, float *out,
                                    struct err_detail *d) {
    if (!ctx->params.embeddings)
        return err_set(d, ERR_INVALID, "not an embeddings context");
    if (i < 0 || i >= ctx->embd_n_tok)
        return err_set(d, ERR_INVALID, "token %d is not in [0, %d) of the last decode", i,
                       ctx->embd_n_tok);
    forward_token_embedding(ctx, i, out);
    return 0;
}
