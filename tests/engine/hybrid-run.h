/* hybrid-run — running the hybrid folder's models in the MoE, gpt-oss and Gemma 4 MoE
 * tests: a file of ../shared/models/hybrid, contexts on one device or CPU partitions, the
 * largest difference of two rows, a prompt prefilled in batches, greedy steps. */
#pragma once

#include "hybrid-ref.h"

#include <math.h>

static inline struct engine_model *model_open(const char *file) {
    char rel[128];
    snprintf(rel, sizeof rel, "hybrid/%s.gguf", file);
    return model_load(test_shared_path(rel));
}

/* A context of n_dev CPU partitions (1: one device) */
static inline struct engine_context *ctx_new(const struct engine_model *m, uint32_t n_batch,
                                      int n_threads, uint32_t n_dev) {
    struct engine_context_params p;
    engine_context_params_default(&p);
    p.n_ctx = 1024;
    p.n_seq = 1;
    p.n_batch = n_batch;
    p.n_outputs = MAX_PROMPT;
    p.n_threads = n_threads;
    p.type_k = p.type_v = KERN_TYPE_F32;
    p.n_devices = n_dev;
    p.split = n_dev > 1 ? ENGINE_SPLIT_TENSOR : ENGINE_SPLIT_NONE;
    struct engine_context *ctx = NULL;
    struct err_detail d = {0};
    int r = engine_context_new(m, &p, &ctx, &d);
    if (r < 0) fprintf(stderr, "context: %s\n", err_msg(&d, r));
    return ctx;
}

static inline double max_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = MAX(m, fabs((double)a[i] - b[i]));
    return m;
}

/* Decodes prompt[0, n) in batches of step; every position's logits into all (when not
 * NULL), else only the last one wanted. */
static inline int prefill(struct engine_context *ctx, const int32_t *tok, uint32_t n, uint32_t step,
                   float *all, uint32_t n_vocab) {
    static int32_t pos[MAX_PROMPT];
    static bool want[MAX_PROMPT];
    for (uint32_t i = 0; i < n; i++) pos[i] = (int32_t)i, want[i] = all != NULL;
    for (uint32_t p = 0; p < n; p += step) {
        uint32_t k = MIN(step, n - p);
        want[p + k - 1] = true;
        struct engine_batch b = {.n_tok = (int32_t)k, .token = tok + p, .pos = pos + p,
                                 .want_logits = want + p};
        struct err_detail d = {0};
        int r = engine_context_decode(ctx, &b, &d);
        if (r < 0) {
            fprintf(stderr, "decode [%u, %u): %s\n", p, p + k, err_msg(&d, r));
            return r;
        }
        for (uint32_t i = 0; all && i < k; i++)
            memcpy(all + (size_t)(p + i) * n_vocab, engine_context_logits(ctx, (int32_t)i),
                   n_vocab * sizeof *all);
    }
    return 0;
}

/* N_STEPS greedy steps from the last decode's row `row` at position next: each step's
 * logits into got (N_STEPS, n_vocab), its argmax into gen; the token fed back is the
 * argmax, or force[k] where force is not NULL (the reference's, so that every step is
 * compared on the same context even where an argmax differs). */
static inline int greedy(struct engine_context *ctx, uint32_t next, int32_t row, uint32_t n_vocab,
                  const int32_t *force, float *got, int32_t *gen) {
    for (int k = 0; k < N_STEPS; k++) {
        const float *l = engine_context_logits(ctx, row);
        if (!l) return ERR_INVALID;
        memcpy(got + (size_t)k * n_vocab, l, n_vocab * sizeof *got);
        gen[k] = test_top_index(l, (int32_t)n_vocab);
        int32_t p = (int32_t)next + k, t = force ? force[k] : gen[k];
        struct engine_batch one = {.n_tok = 1, .token = &t, .pos = &p};
        int r;
        if (k + 1 < N_STEPS && (r = engine_context_decode(ctx, &one, NULL)) < 0) return r;
        row = 0;
    }
    return 0;
}
