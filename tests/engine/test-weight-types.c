/* Models whose matrices are k-quants or iq4_xs (made by $WARM_BIN/warm-mkmodel, so no
 * outside tool is needed) load and run, and their logits match those of the same model
 * with every tensor dequantized to F32 (a second file written here).
 *
 * Named bound: LOGIT_TOL = LOGIT_REL_TOL (0.1) · max |logit of the F32 model| per position. The two
 * models have the same weights bit for bit (the F32 file holds the dequantized values);
 * they differ only in the activations: quantized matrices meet activations quantized to
 * q8_0 (round(x/d), relative error up to 1/254 per value, ~0.4 % of a dot's scale after
 * averaging over n_in), float matrices meet f32. Through 2 layers × 7 matmuls and the
 * classifier that stays near 2 % of the largest logit (seen: 1.8 %–2.5 %, a quarter of
 * the bound); a wrong block layout, scale or code gives errors of the logits' own size.
 * Greedy: wherever the F32 model's top two logits are more than 2·LOGIT_TOL apart, the
 * quantized model picks the same token. */
#include "test.h"

#include "engine/engine.h"
#include "engine/gguf.h"

#include <errno.h>
#include <stdio.h>

#define LOGIT_REL_TOL 0.1 /* LOGIT_TOL / max |logit| */

/* Writes a copy of src with every tensor converted to F32. */
static int write_f32_copy(const char *src, const char *dst) {
    struct gguf_file *f = NULL;
    struct gguf_writer *w = NULL;
    struct err_detail d = {0};
    int r = gguf_open(src, &f, &d);
    if (r >= 0) r = gguf_writer_new(&w);
    for (uint64_t i = 0; r >= 0 && i < gguf_n_kv(f); i++)
        r = gguf_writer_add_kv(w, gguf_kv_at(f, i));
    for (uint64_t i = 0; r >= 0 && i < gguf_n_tensors(f); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(f, i);
        int64_t n = 1;
        for (uint32_t k = 0; k < t->n_dims; k++) n *= t->ne[k];
        float *x = malloc((size_t)n * sizeof *x);
        if (!x) {
            r = -ENOMEM;
            break;
        }
        kern_type_traits(t->type)->to_f32(x, t->data, n);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        r = gguf_writer_add_tensor(w, name, KERN_TYPE_F32, t->n_dims, t->ne, x);
        free(x);
    }
    if (r >= 0) r = gguf_writer_save(w, dst);
    gguf_writer_free(w);
    gguf_close(f);
    return r;
}

enum { N_TOK = 24, N_VOCAB = 300 };

/* Logits of all N_TOK positions of a fixed prompt, f32 KV cache, 2 threads. */
static int run_logits(const char *path, const int32_t *tok, float *logits) {
    struct engine_model *m = NULL;
    struct engine_context *ctx = NULL;
    struct err_detail d = {0};
    int r = engine_model_load(path, NULL, &m, &d);
    if (r < 0) {
        fprintf(stderr, "%s: %s\n", path, err_msg(&d, r));
        return r;
    }
    struct engine_context_params p;
    engine_context_params_default(&p);
    p.n_ctx = 64, p.n_outputs = N_TOK, p.n_threads = 2;
    p.type_k = p.type_v = KERN_TYPE_F32;
    int32_t pos[N_TOK];
    bool want[N_TOK];
    for (int i = 0; i < N_TOK; i++) pos[i] = i, want[i] = true;
    struct engine_batch b = {.n_tok = N_TOK, .token = tok, .pos = pos, .want_logits = want};
    if ((r = engine_context_new(m, &p, &ctx, &d)) >= 0 &&
        (r = engine_context_decode(ctx, &b, &d)) >= 0)
        for (int i = 0; i < N_TOK; i++)
            memcpy(logits + (size_t)i * N_VOCAB, engine_context_logits(ctx, i),
                   N_VOCAB * sizeof(float));
    if (r < 0) fprintf(stderr, "%s: %s\n", path, err_msg(&d, r));
    engine_context_free(ctx);
    engine_model_free(m);
    return r;
}

static int argmax(const float *x, int n, float *ret_margin) {
    int best = 0, second = -1;
    for (int j = 1; j < n; j++) {
        if (x[j] > x[best])
            second = best, best = j;
        else if (second < 0 || x[j] > x[second])
            second = j;
    }
    *ret_margin = x[best] - x[second];
    return best;
}

TEST(quantized_vs_dequantized) {
    if (!test_tool_path("warm-mkmodel")) SKIP("WARM_BIN/warm-mkmodel is not built");
    static const char *const types[] = {"q2_K", "q3_K", "iq4_xs", "q4_K", "q5_K", "q6_K"};
    static float lq[N_TOK * N_VOCAB], lf[N_TOK * N_VOCAB];
    int32_t tok[N_TOK];
    for (int i = 0; i < N_TOK; i++) tok[i] = (int32_t)(1 + (i * 97 + 13) % (N_VOCAB - 1));
    for (size_t t = 0; t < ARRAY_SIZE(types); t++) {
        char fpath[512];
        snprintf(fpath, sizeof fpath, "%s/%s-f32.gguf", test_tmpdir(), types[t]);
        /* every matrix's n_in a multiple of 256 (n_embd, n_head·head_dim, n_ff) */
        const char *qpath = test_mkmodel(types[t], "--arch llama --type %s --n-embd 256 "
                                         "--n-layer 2 --n-head 4 --n-head-kv 2 --n-ff 512 "
                                         "--n-vocab %d --ctx 128 --seed 3", types[t], N_VOCAB);
        if (!qpath)
            TEST_FAIL_("warm-mkmodel --type %s failed (see %s/mkmodel.log)", types[t],
                       test_tmpdir());
        struct gguf_file *f = NULL;
        ASSERT_OK(gguf_open(qpath, &f, NULL));
        const struct gguf_tensor *wq = gguf_find_tensor(f, "blk.0.attn_q.weight");
        ASSERT_TRUE(wq != NULL);
        ASSERT_EQ(wq->type, kern_type_from_name(types[t]));
        gguf_close(f);
        ASSERT_OK(write_f32_copy(qpath, fpath));
        ASSERT_OK(run_logits(qpath, tok, lq));
        ASSERT_OK(run_logits(fpath, tok, lf));
        double worst = 0;
        int agree = 0, decided = 0;
        for (int i = 0; i < N_TOK; i++) {
            const float *a = lq + (size_t)i * N_VOCAB, *b = lf + (size_t)i * N_VOCAB;
            double amax = 0, err = 0;
            for (int j = 0; j < N_VOCAB; j++) {
                amax = fmax(amax, fabs(b[j]));
                err = fmax(err, fabs((double)a[j] - b[j])); /* NaN fails below */
                if (isnan(a[j])) err = INFINITY;
            }
            double tol = LOGIT_REL_TOL * amax;
            worst = fmax(worst, err / tol);
            float mq, mf;
            int gq = argmax(a, N_VOCAB, &mq), gf = argmax(b, N_VOCAB, &mf);
            if (mf > 2 * tol) {
                decided++;
                agree += gq == gf;
                if (gq != gf)
                    TEST_FAIL_("%s position %d: greedy %d, F32 model %d (margin %.3g)", types[t], i,
                               gq, gf, mf);
            }
        }
        printf("  %-6s max |logit - f32 model| = %.3f x bound; greedy agrees at %d/%d decided "
               "positions\n",
               types[t], worst, agree, decided);
        if (!(worst <= 1.0)) TEST_FAIL_("%s: logits off by %.3f x the bound", types[t], worst);
    }
}

TEST_MAIN(T(quantized_vs_dequantized))
