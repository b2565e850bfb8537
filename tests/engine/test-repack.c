/* Weights repacked at load (engine/device.c, kernels/types.h rows8): a context that
 * repacks gives the logits of one that multiplies by the file's rows and the same greedy
 * tokens, on one device and on a 2-device split (its column slices repacked in place of
 * the plain copies), with a classifier that is repacked (304 rows) and one that is not
 * (301, tied to the embeddings), for each rows8 type (f16, bf16, q4_0, q4_1, q5_0, q5_1,
 * iq4_nl, q8_0, q2_K to q6_K, iq4_xs); it owns exactly the bytes of the matrices it
 * repacked; and a repacked context run on the reference level (no rows8 kernels) still
 * gives the same logits.
 * Bound: NMSE 2e-4. Both layouts' products equal the reference dot to ~1e-14 (NMSE); what
 * is left is the float summation order, ~1e-7 of an output, and where that moves an
 * activation across a q8 rounding boundary the next layer sees a different code (1/127
 * of that value): these random 2-layer models turn a few such flips into 1e-5 to 1e-4
 * (q5_0 at the AVX-512 level: 1.0e-4; at AVX2: 1.8e-5), while a wrong layout gives ~1. */
#include "test.h"

#include "engine/engine.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_PROMPT = 9, N_GEN = 8, N_ROWS = N_PROMPT + N_GEN };
#define NMSE_MAX 2e-4 /* see the top */

struct repack_case {
    const char *name, *mk;
    bool output_repacked; /* n_vocab a multiple of 8 and its own tensor */
};

static const struct repack_case cases[] = {
    {"llama-q4_0", "--arch llama --n-embd 256 --n-layer 2 --n-head 8 --n-head-kv 4 "
                   "--head-dim 32 --n-ff 224 --n-vocab 304 --type q4_0", true},
    {"llama-f16", "--arch llama --n-embd 256 --n-layer 2 --n-head 8 --n-head-kv 4 "
                  "--head-dim 32 --n-ff 224 --n-vocab 304 --type f16", true},
    {"llama-bf16", "--arch llama --n-embd 256 --n-layer 2 --n-head 8 --n-head-kv 4 "
                   "--head-dim 32 --n-ff 224 --n-vocab 304 --type bf16", true},
    {"llama-q8_0", "--arch llama --n-embd 256 --n-layer 2 --n-head 8 --n-head-kv 4 "
                   "--head-dim 32 --n-ff 224 --n-vocab 304 --type q8_0", true},
    {"llama-q5_K", "--arch llama --n-embd 256 --n-layer 2 --n-head 8 --n-head-kv 4 "
                   "--head-dim 32 --n-ff 512 --n-vocab 304 --type q5_K", true},
    {"llama-q6_K", "--arch llama --n-embd 256 --n-layer 2 --n-head 8 --n-head-kv 4 "
                   "--head-dim 32 --n-ff 512 --n-vocab 304 --type q6_K", true},
    {"llama-q3_K", "--arch llama --n-embd 256 --n-layer 2 --n-head 8 --n-head-kv 4 "
                   "--head-dim 32 --n-ff 512 --n-vocab 304 --type q3_K", true},
    {"llama-q2_K", "--arch llama --n-embd 256 --n-layer 2 --n-head 8 --n-head-kv 4 "
                   "--head-dim 32 --n-ff 512 --n-vocab 304 --type q2_K", true},
    {"llama-iq4_xs", "--arch llama --n-embd 256 --n-layer 2 --n-head 8 --n-head-kv 4 "
                     "--head-dim 32 --n-ff 512 --n-vocab 304 --type iq4_xs", true},
    {"llama-q4_1", "--arch llama --n-embd 256 --n-layer 2 --n-head 8 --n-head-kv 4 "
                   "--head-dim 32 --n-ff 224 --n-vocab 304 --type q4_1", true},
    {"llama-q5_0", "--arch llama --n-embd 256 --n-layer 2 --n-head 8 --n-head-kv 4 "
                   "--head-dim 32 --n-ff 224 --n-vocab 304 --type q5_0", true},
    {"llama-q5_1", "--arch llama --n-embd 256 --n-layer 2 --n-head 8 --n-head-kv 4 "
                   "--head-dim 32 --n-ff 224 --n-vocab 304 --type q5_1", true},
    {"llama-iq4_nl", "--arch llama --n-embd 256 --n-layer 2 --n-head 8 --n-head-kv 4 "
                     "--head-dim 32 --n-ff 224 --n-vocab 304 --type iq4_nl", true},
    {"llama-q4_K", "--arch llama --n-embd 256 --n-layer 2 --n-head 8 --n-head-kv 4 "
                   "--head-dim 32 --n-ff 512 --n-vocab 304 --type q4_K", true},
    /* biases, tied embeddings and a classifier of 301 rows, which stays as it is */
    {"qwen2-q4_0", "--arch qwen2 --n-embd 192 --n-layer 2 --n-head 6 --n-head-kv 2 "
                   "--head-dim 32 --n-ff 320 --n-vocab 301 --tied --type q4_0", false},
};

/* The case's model, mapped or (copy) read into the model's own memory as the daemon
 * loads it. */
static struct engine_model *case_model_as(const struct repack_case *c, bool copy) {
    const char *path = test_mkmodel(c->name, "%s --seed 5", c->mk);
    if (!path) return NULL;
    struct engine_model *m = NULL;
    struct err_detail d = {0};
    const struct engine_model_params p = {.private_copy = copy};
    return engine_model_load(path, &p, &m, &d) < 0 ? NULL : m;
}

static struct engine_model *case_model(const struct repack_case *c) {
    return case_model_as(c, false);
}

static int context_new(const struct engine_model *m, uint32_t n_dev, bool plain,
                       struct engine_context **ret, struct err_detail *d) {
    struct engine_context_params p;
    engine_context_params_default(&p);
    p.n_ctx = 64;
    p.n_batch = 16;
    p.n_outputs = N_PROMPT;
    p.n_threads = 2;
    p.n_devices = n_dev;
    p.split = n_dev > 1 ? ENGINE_SPLIT_TENSOR : ENGINE_SPLIT_NONE;
    p.plain_weights = plain;
    return engine_context_new(m, &p, ret, d);
}

/* The prompt's logits at every position, then N_GEN greedy steps: N_ROWS rows of logits
 * and the generated tokens. */
static int run(struct engine_context *ctx, float *logits, int32_t *gen, struct err_detail *d) {
    const int32_t n_vocab = (int32_t)engine_context_model(ctx)->hp.n_vocab;
    int32_t tok[N_PROMPT], pos[N_PROMPT];
    bool want[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) tok[i] = (i * 71 + 5) % n_vocab, pos[i] = i, want[i] = true;
    engine_kv_seq_rm(ctx, 0, 0); /* -ENODATA on a fresh context: nothing to drop */
    struct engine_batch b = {.n_tok = N_PROMPT, .token = tok, .pos = pos, .want_logits = want};
    int r = engine_context_decode(ctx, &b, d);
    for (int i = 0; r >= 0 && i < N_PROMPT; i++)
        memcpy(logits + (size_t)i * n_vocab, engine_context_logits(ctx, i), sizeof(float) * (size_t)n_vocab);
    for (int k = 0; r >= 0 && k < N_GEN; k++) {
        int32_t t = gen[k] = test_top_index(logits + (size_t)(N_PROMPT - 1 + k) * n_vocab, n_vocab), p = N_PROMPT + k;
        struct engine_batch one = {.n_tok = 1, .token = &t, .pos = &p};
        if ((r = engine_context_decode(ctx, &one, d)) < 0) break;
        memcpy(logits + (size_t)(N_PROMPT + k) * n_vocab, engine_context_logits(ctx, 0),
               sizeof(float) * (size_t)n_vocab);
    }
    return r;
}

/* bytes of the matrices a single CPU device repacks: a rows8 type, a multiple of 8 rows */
static uint64_t repackable_bytes(const struct engine_model *m, bool output) {
    uint64_t b = 0;
    for (uint32_t il = 0; il < m->hp.n_layer; il++) {
        const struct engine_layer *l = &m->layers[il];
        const struct engine_weight *ws[] = {&l->wq, &l->wk, &l->wv, &l->wo, &l->w_gate, &l->w_up, &l->w_down};
        for (size_t i = 0; i < ARRAY_SIZE(ws); i++)
            if (ws[i]->data && kern_rows8_supported(ws[i]->type, ws[i]->n_in, ws[i]->n_out))
                b += (uint64_t)ws[i]->n_out * ws[i]->row_bytes;
    }
    if (output) b += (uint64_t)m->output.n_out * m->output.row_bytes;
    return b;
}

TEST(repacked_matches_plain) {
    static const enum kern_type types[] = {
        KERN_TYPE_F16,  KERN_TYPE_BF16, KERN_TYPE_Q4_0, KERN_TYPE_Q4_1, KERN_TYPE_Q5_0,
        KERN_TYPE_Q5_1, KERN_TYPE_IQ4_NL, KERN_TYPE_Q8_0, KERN_TYPE_Q4_K, KERN_TYPE_Q5_K,
        KERN_TYPE_Q6_K, KERN_TYPE_Q3_K, KERN_TYPE_Q2_K, KERN_TYPE_IQ4_XS};
    for (size_t i = 0; i < ARRAY_SIZE(types); i++) {
        if (!kern_rows8_supported(types[i], 256, 8))
            SKIP("kernels level %s has no rows8 kernels", kern_cpu()->level);
    }
    int ran = 0;
    for (size_t ci = 0; ci < ARRAY_SIZE(cases); ci++) {
        const struct repack_case *c = &cases[ci];
        struct engine_model *m = case_model(c);
        if (!m) SKIP("warm-mkmodel is not available (WARM_BIN) or failed for %s", c->name);
        const size_t n_vocab = m->hp.n_vocab, n = N_ROWS * n_vocab;
        float *want = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
        int32_t gen_want[N_GEN], gen_got[N_GEN];
        struct err_detail d = {0};
        for (uint32_t n_dev = 1; n_dev <= 2; n_dev++) {
            struct engine_context *plain = NULL, *packed = NULL;
            struct engine_device_info pi, ki;
            ASSERT_OK_D(context_new(m, n_dev, true, &plain, &d), &d);
            ASSERT_OK_D(context_new(m, n_dev, false, &packed, &d), &d);
            ASSERT_OK_D(run(plain, want, gen_want, &d), &d);
            ASSERT_OK_D(run(packed, got, gen_got, &d), &d);
            double e = test_nmse(got, want, n);
            printf("  %-11s %u device(s): NMSE %.2e, tokens %s, repacked %llu bytes\n", c->name, n_dev, e,
                   memcmp(gen_got, gen_want, sizeof gen_got) ? "DIFFER" : "equal",
                   (unsigned long long)repackable_bytes(m, c->output_repacked));
            ASSERT_TRUE(e <= NMSE_MAX);
            ASSERT_TRUE(memcmp(gen_got, gen_want, sizeof gen_got) == 0);
            uint64_t plain_copied = 0, packed_copied = 0;
            for (uint32_t i = 0; i < n_dev; i++) {
                ASSERT_OK(engine_context_device_info(plain, i, &pi));
                ASSERT_OK(engine_context_device_info(packed, i, &ki));
                ASSERT_EQ(ki.weight_bytes, pi.weight_bytes);
                plain_copied += pi.copied_bytes;
                packed_copied += ki.copied_bytes;
            }
            if (n_dev == 1) {
                ASSERT_EQ(plain_copied, 0);
                ASSERT_EQ(packed_copied, repackable_bytes(m, c->output_repacked));
            } else {
                /* the column slices repacked replace their plain copies */
                ASSERT_TRUE(plain_copied > 0 && packed_copied > plain_copied);
            }
            if (n_dev == 1) {
                /* the reference level has no rows8 kernels: it rebuilds the blocks */
                const char *level = kern_cpu()->level;
                ASSERT_OK(kern_set_level("ref"));
                float *ref_plain = malloc(n * sizeof(float));
                int32_t gen_ref[N_GEN];
                ASSERT_OK_D(run(plain, ref_plain, gen_ref, &d), &d);
                ASSERT_OK_D(run(packed, got, gen_got, &d), &d);
                double er = test_nmse(got, ref_plain, n);
                printf("  %-11s on level ref: NMSE %.2e\n", c->name, er);
                ASSERT_TRUE(er <= NMSE_MAX);
                ASSERT_TRUE(memcmp(gen_got, gen_ref, sizeof gen_got) == 0);
                free(ref_plain);
                /* a context made at the reference level keeps the file's rows */
                struct engine_context *at_ref = NULL;
                ASSERT_OK_D(context_new(m, 1, false, &at_ref, &d), &d);
                ASSERT_OK(engine_context_device_info(at_ref, 0, &ki));
                ASSERT_EQ(ki.copied_bytes, 0);
                engine_context_free(at_ref);
                ASSERT_OK(kern_set_level(level));
            }
            engine_context_free(plain);
            engine_context_free(packed);
        }
        free(want);
        free(got);
        engine_model_free(m);
        ran++;
    }
    ASSERT_EQ(ran, (int)ARRAY_SIZE(cases));
}

/* A model that owns its weights (the daemon's private copy) is repacked where it is: no
 * byte held twice (copied 0), the same logits as the file's layout, the model's matrices
 * marked rows8 (the classifier too, unless tied to the token embeddings, which are read by
 * rows); a second context of one CPU device reuses them; a split, a GPU or the file's
 * layout on that model is refused with the reason. */
TEST(private_copy_repacked_in_place) {
    if (!kern_rows8_supported(KERN_TYPE_Q4_0, 256, 8))
        SKIP("kernels level %s has no rows8 kernels", kern_cpu()->level);
    /* a classifier repacked with the rest, and one tied to the embeddings (left as is) */
    static const char *const which[] = {"llama-q4_0", "qwen2-q4_0"};
    for (size_t wi = 0; wi < ARRAY_SIZE(which); wi++) {
        const struct repack_case *c = NULL;
        for (size_t ci = 0; ci < ARRAY_SIZE(cases) && !c; ci++)
            if (!strcmp(cases[ci].name, which[wi])) c = &cases[ci];
        ASSERT_TRUE(c != NULL);
        struct engine_model *mapped = case_model_as(c, false), *own = case_model_as(c, true);
        if (!mapped || !own) SKIP("warm-mkmodel is not available (WARM_BIN) or failed for %s", c->name);
        const size_t n = N_ROWS * (size_t)own->hp.n_vocab;
        float *want = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float)), *again = malloc(n * sizeof(float));
        int32_t gen_want[N_GEN], gen_got[N_GEN], gen_again[N_GEN];
        struct err_detail d = {0};
        struct engine_context *plain = NULL, *a = NULL, *b = NULL, *bad = NULL;
        struct engine_device_info info;
        ASSERT_OK_D(context_new(mapped, 1, true, &plain, &d), &d);
        ASSERT_OK_D(run(plain, want, gen_want, &d), &d);
        ASSERT_TRUE(!own->repacked && own->layers[0].wq.layout == KERN_LAYOUT_ROWS);
        ASSERT_OK_D(context_new(own, 1, false, &a, &d), &d);
        ASSERT_OK(engine_context_device_info(a, 0, &info));
        ASSERT_EQ(info.copied_bytes, 0);
        ASSERT_TRUE(own->repacked);
        for (uint32_t il = 0; il < own->hp.n_layer; il++) {
            ASSERT_EQ(own->layers[il].wq.layout, KERN_LAYOUT_ROWS8);
            ASSERT_EQ(own->layers[il].w_down.layout, KERN_LAYOUT_ROWS8);
        }
        ASSERT_EQ(own->output.layout, c->output_repacked ? KERN_LAYOUT_ROWS8 : KERN_LAYOUT_ROWS);
        ASSERT_OK_D(run(a, got, gen_got, &d), &d);
        double e = test_nmse(got, want, n);
        printf("  %-11s repacked in its own copy: NMSE %.2e\n", c->name, e);
        ASSERT_TRUE(e <= NMSE_MAX);
        ASSERT_TRUE(memcmp(gen_got, gen_want, sizeof gen_got) == 0);
        ASSERT_OK_D(context_new(own, 1, false, &b, &d), &d);
        ASSERT_OK_D(run(b, again, gen_again, &d), &d);
        ASSERT_TRUE(memcmp(again, got, n * sizeof(float)) == 0);
        ASSERT_ERR(context_new(own, 2, false, &bad, &d), ERR_UNSUPPORTED);
        ASSERT_TRUE(strstr(d.msg, "repacked this model's weights in place") != NULL);
        ASSERT_ERR(context_new(own, 1, true, &bad, &d), ERR_UNSUPPORTED);
        ASSERT_TRUE(bad == NULL);
        engine_context_free(plain);
        engine_context_free(a);
        engine_context_free(b);
        free(want);
        free(got);
        free(again);
        engine_model_free(mapped);
        engine_model_free(own);
    }
}

TEST_MAIN(T(repacked_matches_plain), T(private_copy_repacked_in_place))
