/* Tensor split over CPU partitions (DESIGN.md 3.7, engine/device.h): on N = 2, 3, 4
 * devices every architecture gives the logits of N = 1 within NMSE 1e-4 and the same
 * greedy tokens, with KV head counts N does not divide (6 KV heads on 4 devices, 5 on
 * 3 and 4, 3 on 2 and 4), quantized weights whose blocks bound the cuts, a rotated q8_0
 * cache, gemma3's SWA ring and gemma4's shared KV. A shared-KV layer whose attention is
 * forced onto its own rotation (the placement llama.cpp #31406 fixed) is refused; state
 * blobs move between split and single-device contexts both ways; every device reports
 * its memory, and the devices' shares add up to the single device's. */
#include "test.h"

#include "engine/engine.h"
#include "engine/forward.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_PROMPT = 7, N_GEN = 8, MAX_DEV = 4 };

struct split_case {
    const char *name;
    const char *mk;     /* warm-mkmodel options, or NULL: */
    const char *shared; /* a file under ../shared/models */
    enum kern_type kv_type;
};

static const struct split_case cases[] = {
    /* 6 KV heads: 6 = 2+1+2+1 on 4 devices, 2+2+2 on 3; hd 64 for the rotated q8_0 cache */
    {"llama-f32", "--arch llama --n-embd 192 --n-layer 3 --n-head 12 --n-head-kv 6 "
                  "--head-dim 64 --n-ff 200 --n-vocab 301 --type f32", NULL, KERN_TYPE_F32},
    {"llama-q8kv", "--arch llama --n-embd 192 --n-layer 3 --n-head 12 --n-head-kv 6 "
                   "--head-dim 64 --n-ff 256 --n-vocab 301 --type q8_0", NULL, KERN_TYPE_Q8_0},
    /* 3 KV heads, q8_0 weights: FFN cut in 32-unit blocks, 224 = 7 blocks */
    {"qwen2-q8_0", "--arch qwen2 --n-embd 384 --n-layer 3 --n-head 6 --n-head-kv 3 "
                   "--head-dim 64 --n-ff 224 --n-vocab 300 --tied --type q8_0", NULL,
     KERN_TYPE_F16},
    /* 5 KV heads, q4_0 weights (5 = 1+1+1+2 on 4 devices, rotated per layer) */
    {"qwen3-q4_0", "--arch qwen3 --n-embd 256 --n-layer 3 --n-head 10 --n-head-kv 5 "
                   "--head-dim 32 --n-ff 192 --n-vocab 300 --type q4_0", NULL, KERN_TYPE_F32},
    /* shared KV: layers 3 and 4 read layer 2's 3 KV heads */
    {"llama-shared", "--arch llama --n-embd 192 --n-layer 5 --n-head 6 --n-head-kv 3 "
                     "--head-dim 32 --n-ff 160 --n-vocab 300 --shared-kv-layers 2 --type f32",
     NULL, KERN_TYPE_F32},
    {"gemma3", NULL, "gemma/gemma3-tiny.gguf", KERN_TYPE_F32},
    {"gemma4", NULL, "gemma/gemma4-tiny.gguf", KERN_TYPE_F32},
    {"gemma4e", NULL, "gemma/gemma4e-tiny.gguf", KERN_TYPE_F32},
};

/* The model file of a case, made or found; NULL when it cannot be had. */
static const char *case_path(const struct split_case *c) {
    return c->shared ? test_shared_path(c->shared) : test_mkmodel(c->name, "%s --seed 11", c->mk);
}

/* context_new() flags */
enum {
    OWN_ROTATION = 1, /* params.split_own_rotation */
    PLAIN = 2,        /* params.plain_weights: no repacked copies */
};

static int context_new(const struct engine_model *m, uint32_t n_dev, enum kern_type kv_type,
                       unsigned flags, struct engine_context **ret, struct err_detail *d) {
    struct engine_context_params p;
    engine_context_params_default(&p);
    p.n_ctx = 64;
    p.n_batch = 16;
    p.n_outputs = N_PROMPT;
    p.n_threads = (int)n_dev; /* one thread per partition */
    p.type_k = p.type_v = kv_type;
    p.n_devices = n_dev;
    p.split = n_dev > 1 ? ENGINE_SPLIT_TENSOR : ENGINE_SPLIT_NONE;
    p.split_own_rotation = flags & OWN_ROTATION;
    p.plain_weights = flags & PLAIN;
    return engine_context_new(m, &p, ret, d);
}

static void prompt_of(int32_t *tok, int32_t n_vocab) {
    for (int i = 0; i < N_PROMPT; i++) tok[i] = (i * 53 + 3) % n_vocab;
}

/* Prefill from position p0 (tokens [p0, N_PROMPT) of the prompt), then N_GEN greedy
 * steps: the logits of every prompt position decoded and every step into logits (rows of
 * n_vocab), the tokens into gen. */
static int run_from(struct engine_context *ctx, uint32_t p0, int32_t *gen, float *logits,
                    size_t *n_rows, struct err_detail *d) {
    const int32_t n_vocab = (int32_t)engine_context_model(ctx)->hp.n_vocab;
    int32_t tok[N_PROMPT], pos[N_PROMPT];
    bool want[N_PROMPT];
    prompt_of(tok, n_vocab);
    for (int i = 0; i < N_PROMPT; i++) pos[i] = i, want[i] = true;
    struct engine_batch b = {.n_tok = N_PROMPT - (int32_t)p0, .token = tok + p0, .pos = pos + p0,
                             .want_logits = want};
    int r = engine_context_decode(ctx, &b, d);
    size_t rows = 0;
    for (int i = 0; r >= 0 && i < b.n_tok; i++, rows++)
        memcpy(logits + rows * (size_t)n_vocab, engine_context_logits(ctx, i), sizeof(float) * (size_t)n_vocab);
    const float *last = r >= 0 ? engine_context_logits(ctx, b.n_tok - 1) : NULL;
    for (int k = 0; r >= 0 && k < N_GEN; k++) {
        int32_t t = gen[k] = test_top_index(last, n_vocab), p = N_PROMPT + k;
        struct engine_batch one = {.n_tok = 1, .token = &t, .pos = &p};
        if ((r = engine_context_decode(ctx, &one, d)) < 0) break;
        last = engine_context_logits(ctx, 0);
        memcpy(logits + rows++ * (size_t)n_vocab, last, sizeof(float) * (size_t)n_vocab);
    }
    *n_rows = rows;
    return r;
}

static struct engine_model *case_model(const struct split_case *c) {
    const char *path = case_path(c);
    if (!path) return NULL;
    struct engine_model *m = NULL;
    struct err_detail d = {0};
    if (engine_model_load(path, NULL, &m, &d) < 0) return NULL;
    return m;
}

/* Every case on N = 1..4 partitions against N = 1. */
TEST(split_matches_single_device) {
    int ran = 0;
    for (size_t ci = 0; ci < ARRAY_SIZE(cases); ci++) {
        const struct split_case *c = &cases[ci];
        struct engine_model *m = case_model(c);
        if (!m) {
            printf("  %-12s not available, skipped\n", c->name);
            continue;
        }
        ran++;
        const size_t n_vocab = m->hp.n_vocab, cap = (N_PROMPT + N_GEN) * n_vocab;
        float *ref = malloc(cap * sizeof *ref), *got = malloc(cap * sizeof *got);
        int32_t ref_gen[N_GEN], gen[N_GEN];
        size_t rows = 0, rows_n = 0;
        struct err_detail d = {0};
        struct engine_context *ctx = NULL;
        ASSERT_TRUE(ref && got);
        ASSERT_OK_D(context_new(m, 1, c->kv_type, 0, &ctx, &d), &d);
        ASSERT_OK_D(run_from(ctx, 0, ref_gen, ref, &rows, &d), &d);
        engine_context_free(ctx);
        printf("  %-12s n_head %u, n_head_kv %u:", c->name, m->hp.n_head, m->hp.layer[0].n_head_kv);
        for (uint32_t n = 2; n <= MAX_DEV; n++) {
            ASSERT_OK_D(context_new(m, n, c->kv_type, 0, &ctx, &d), &d);
            ASSERT_EQ(engine_context_n_devices(ctx), n);
            int r = run_from(ctx, 0, gen, got, &rows_n, &d);
            engine_context_free(ctx);
            ASSERT_OK_D(r, &d);
            ASSERT_EQ(rows_n, rows);
            double e = test_nmse(got, ref, rows * n_vocab);
            printf(" N=%u %.1e", n, e);
            if (!(e <= 1e-4)) TEST_FAIL_("%s on %u devices: NMSE %.3g above 1e-4", c->name, n, e);
            if (memcmp(gen, ref_gen, sizeof gen))
                TEST_FAIL_("%s on %u devices: greedy tokens differ from one device", c->name, n);
        }
        printf("\n");
        free(ref);
        free(got);
        engine_model_free(m);
    }
    if (!ran) SKIP("no model could be made or found (WARM_BIN, WARM_SHARED_MODELS)");
}

/* A shared-KV layer cut with its own rotation would put query heads on a device that
 * does not hold their KV heads: the context is refused, naming the layers; with the
 * source's rotation the same split is accepted. 3 KV heads on 2 or 4 devices and the
 * layers 2 / 3 / 4 (rotations 2, 3, 4 mod N) make the cuts differ. */
TEST(shared_kv_wrong_rotation_refused) {
    struct engine_model *m = case_model(&cases[4]);
    if (!m) SKIP("warm-mkmodel is not available (WARM_BIN)");
    ASSERT_EQ(m->hp.n_layer_kv_shared, 2);
    for (uint32_t n = 2; n <= MAX_DEV; n++) {
        struct engine_context *ctx = NULL;
        struct err_detail d = {0};
        int r = context_new(m, n, KERN_TYPE_F32, OWN_ROTATION, &ctx, &d);
        if (n != 3) { /* 3 heads on 3 devices cut evenly: every rotation places the same */
            ASSERT_ERR(r, ERR_INVALID);
            ASSERT_TRUE(strstr(d.msg, "reads layer 2's KV") != NULL);
            printf("  N=%u forced own rotation: %s\n", n, d.msg);
        } else {
            ASSERT_OK_D(r, &d);
            engine_context_free(ctx);
        }
        ASSERT_OK_D(context_new(m, n, KERN_TYPE_F32, 0, &ctx, &d), &d);
        engine_context_free(ctx);
    }
    engine_model_free(m);
    /* the gemma4e reference: wherever its own rotation differs, refused likewise */
    if (!(m = case_model(&cases[7]))) return;
    for (uint32_t n = 2; n <= MAX_DEV; n++) {
        struct engine_context *ctx = NULL;
        struct err_detail d = {0};
        int r = context_new(m, n, KERN_TYPE_F32, OWN_ROTATION, &ctx, &d);
        printf("  gemma4e N=%u forced own rotation: %s\n", n, r < 0 ? d.msg : "same placement");
        if (r < 0) ASSERT_TRUE(strstr(d.msg, "KV, but") != NULL);
        engine_context_free(ctx);
    }
    engine_model_free(m);
}

/* A blob exported after the prompt on `from` devices, imported into a fresh context on
 * `to` devices, continues with the greedy tokens of the uninterrupted single device. */
static void blob_move(const struct engine_model *m, enum kern_type kv_type, uint32_t from,
                      uint32_t to, const int32_t *ref_gen) {
    const size_t n_vocab = m->hp.n_vocab;
    float *logits = malloc((N_PROMPT + N_GEN) * n_vocab * sizeof *logits);
    struct err_detail d = {0};
    struct engine_context *a = NULL, *b = NULL;
    int32_t gen[N_GEN], tok[N_PROMPT], pos[N_PROMPT];
    size_t rows, size = 0;
    ASSERT_TRUE(logits != NULL);
    prompt_of(tok, (int32_t)n_vocab);
    for (int i = 0; i < N_PROMPT; i++) pos[i] = i;
    ASSERT_OK_D(context_new(m, from, kv_type, 0, &a, &d), &d);
    struct engine_batch pb = {.n_tok = N_PROMPT - 1, .token = tok, .pos = pos};
    ASSERT_OK_D(engine_context_decode(a, &pb, &d), &d);
    ASSERT_OK_D(engine_kv_export(a, 0, 0, N_PROMPT - 1, NULL, 0, &size, &d), &d);
    void *blob = malloc(size);
    ASSERT_TRUE(blob != NULL);
    ASSERT_OK_D(engine_kv_export(a, 0, 0, N_PROMPT - 1, blob, size, &size, &d), &d);
    engine_context_free(a);
    ASSERT_OK_D(context_new(m, to, kv_type, 0, &b, &d), &d);
    ASSERT_OK_D(engine_kv_import(b, 0, blob, size, tok, N_PROMPT, NULL, &d), &d);
    /* the last prompt token, then the steps */
    int r = run_from(b, N_PROMPT - 1, gen, logits, &rows, &d);
    engine_context_free(b);
    free(blob);
    free(logits);
    ASSERT_OK_D(r, &d);
    if (memcmp(gen, ref_gen, sizeof gen))
        TEST_FAIL_("blob from %u devices into %u: greedy continuation differs", from, to);
}

TEST(state_blobs_between_split_and_single) {
    const size_t picks[] = {1, 4, 5, 7}; /* rotated q8_0 cache, shared KV, SWA ring, gemma4e */
    int ran = 0;
    for (size_t i = 0; i < ARRAY_SIZE(picks); i++) {
        const struct split_case *c = &cases[picks[i]];
        struct engine_model *m = case_model(c);
        if (!m) continue;
        ran++;
        const size_t n_vocab = m->hp.n_vocab;
        float *ref = malloc((N_PROMPT + N_GEN) * n_vocab * sizeof *ref);
        int32_t ref_gen[N_GEN];
        size_t rows;
        struct err_detail d = {0};
        struct engine_context *ctx = NULL;
        ASSERT_TRUE(ref != NULL);
        ASSERT_OK_D(context_new(m, 1, c->kv_type, 0, &ctx, &d), &d);
        ASSERT_OK_D(run_from(ctx, 0, ref_gen, ref, &rows, &d), &d);
        engine_context_free(ctx);
        free(ref);
        for (uint32_t n = 2; n <= MAX_DEV; n++) {
            blob_move(m, c->kv_type, n, 1, ref_gen);
            if (test_failed_) return;
            blob_move(m, c->kv_type, 1, n, ref_gen);
            if (test_failed_) return;
        }
        printf("  %-12s blobs 2..4 -> 1 and 1 -> 2..4: same continuation\n", c->name);
        engine_model_free(m);
    }
    if (!ran) SKIP("no model could be made or found");
}

/* Every device reports its threads and bytes; weights and KV heads are cut, not copied
 * whole: the devices' weight and KV bytes add up to the single device's (with the file's
 * layout: repacked copies, test-repack's business, would count as copies). */
TEST(memory_per_device) {
    struct engine_model *m = case_model(&cases[2]); /* q8_0 weights: column copies by block */
    if (!m) SKIP("warm-mkmodel is not available (WARM_BIN)");
    struct err_detail d = {0};
    struct engine_context *ctx = NULL;
    struct engine_device_info one, info;
    ASSERT_OK_D(context_new(m, 1, KERN_TYPE_Q8_0, PLAIN, &ctx, &d), &d);
    ASSERT_EQ(engine_context_n_devices(ctx), 1);
    ASSERT_OK(engine_context_device_info(ctx, 0, &one));
    ASSERT_ERR(engine_context_device_info(ctx, 1, &info), ERR_INVALID);
    ASSERT_STREQ(one.name, "cpu");
    ASSERT_EQ(one.copied_bytes, 0);
    ASSERT_EQ(one.kv_bytes, engine_context_kv_bytes(ctx));
    ASSERT_TRUE(one.weight_bytes > 0 && one.scratch_bytes > 0);
    engine_context_free(ctx);
    for (uint32_t n = 2; n <= MAX_DEV; n++) {
        ASSERT_OK_D(context_new(m, n, KERN_TYPE_Q8_0, PLAIN, &ctx, &d), &d);
        uint64_t w = 0, kvb = 0;
        for (uint32_t i = 0; i < n; i++) {
            char name[16];
            ASSERT_OK(engine_context_device_info(ctx, i, &info));
            snprintf(name, sizeof name, "cpu%u", i);
            ASSERT_STREQ(info.name, name);
            ASSERT_EQ(info.n_threads, 1);
            ASSERT_TRUE(info.weight_bytes < one.weight_bytes && info.copied_bytes > 0);
            ASSERT_TRUE(info.kv_bytes < one.kv_bytes);
            w += info.weight_bytes;
            kvb += info.kv_bytes;
        }
        ASSERT_EQ(w, one.weight_bytes);
        ASSERT_EQ(kvb, one.kv_bytes);
        engine_context_free(ctx);
    }
    engine_model_free(m);
}

/* Parameters a split cannot take are refused with a reason. */
TEST(split_params_refused) {
    struct engine_model *m = case_model(&cases[0]);
    if (!m) SKIP("warm-mkmodel is not available (WARM_BIN)");
    struct engine_context_params p;
    struct engine_context *ctx = NULL;
    struct err_detail d = {0};
    engine_context_params_default(&p);
    p.n_ctx = 32;
    p.n_devices = 2; /* split none */
    ASSERT_ERR(engine_context_new(m, &p, &ctx, &d), ERR_INVALID);
    ASSERT_TRUE(strstr(d.msg, "split = tensor") != NULL);
    p.split = ENGINE_SPLIT_TENSOR;
    p.n_devices = ENGINE_MAX_DEVICES + 1;
    ASSERT_ERR(engine_context_new(m, &p, &ctx, &d), ERR_INVALID);
    p.n_devices = 2;
    p.tensor_split[1] = -1;
    ASSERT_ERR(engine_context_new(m, &p, &ctx, &d), ERR_INVALID);
    ASSERT_TRUE(strstr(d.msg, "tensor_split[1]") != NULL);
    /* uneven shares: 3:1 puts 4 and 2 of the 6 KV heads, output still equal */
    p.tensor_split[0] = 3, p.tensor_split[1] = 1;
    ASSERT_OK_D(engine_context_new(m, &p, &ctx, &d), &d);
    ASSERT_EQ(ctx->dev[0].layer[0].n_kv + ctx->dev[1].layer[0].n_kv, 6);
    ASSERT_TRUE(ctx->dev[0].layer[0].n_kv >= 4 || ctx->dev[1].layer[0].n_kv >= 4);
    engine_context_free(ctx);
    ASSERT_EQ(engine_split_from_name("tensor"), ENGINE_SPLIT_TENSOR);
    ASSERT_EQ(engine_split_from_name("none"), ENGINE_SPLIT_NONE);
    ASSERT_ERR(engine_split_from_name("row"), ERR_INVALID);
    engine_model_free(m);
}

TEST_MAIN(T(split_matches_single_device), T(shared_kv_wrong_rotation_refused),
          T(state_blobs_between_split_and_single), T(memory_per_device),
          T(split_params_refused))
