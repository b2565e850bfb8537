/* A tensor split of hybrid models over CPU partitions (DESIGN.md 3.7, engine/device.h): the
 * Gated DeltaNet layers cut by key heads, each with the value heads that read it, their
 * conv channels and their heads of the state. qwen35-tiny and qwen35moe-tiny
 * (../shared/models/hybrid) on 2 and 3 partitions give one device's greedy ids (which are
 * llama.cpp's) and its logits within the split tolerance (NMSE 1e-4, test-split), P3's 800
 * tokens prefilled in steps of 64 (the chunked delta rule) then decoded one by one; the
 * devices' weight shares add up to one device's. warm-mkmodel qwen35 files with H_v = 2·H_k
 * (the tiled V-head order: value head h reads key head h mod H_k, so a device's value heads
 * are not one run) on 2, 3 and 4 partitions, f32 and q8_0 (ssm_out cut in whole blocks),
 * and one without attention layers, likewise; and a state blob written by a split context
 * continues on one device. */
#include "test.h"

#include "engine/engine.h"
#include "engine/forward.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_STEPS 24
#define MAX_PROMPT 1024
#define NMSE_SPLIT 1e-4

struct reference {
    int32_t prompt[MAX_PROMPT];
    size_t n_prompt;
    int32_t gen[N_STEPS];
};

static size_t ids_parse(const char *s, int32_t *ids, size_t cap) {
    size_t n = 0;
    char *end;
    for (;;) {
        long v = strtol(s, &end, 10);
        if (end == s || n == cap) break;
        ids[n++] = (int32_t)v;
        s = end;
    }
    return n;
}

/* The README's prompt and llama.cpp's greedy ids (hybrid/<name>-<prompt>.txt). */
static bool reference_load(const char *name, const char *prompt, struct reference *r) {
    char rel[128];
    snprintf(rel, sizeof rel, "hybrid/%s-%s.txt", name, prompt);
    const char *path = test_shared_path(rel);
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f) return false;
    static char line[1 << 16];
    size_t n_gen = 0;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "prompt_ids: ", 12))
            r->n_prompt = ids_parse(line + 12, r->prompt, MAX_PROMPT);
        if (!strncmp(line, "generated_ids: ", 15)) n_gen = ids_parse(line + 15, r->gen, N_STEPS);
    }
    fclose(f);
    return r->n_prompt > 0 && n_gen == N_STEPS;
}

static struct engine_model *model_load(const char *path) {
    struct engine_model *m = NULL;
    struct err_detail d = {0};
    if (!path) return NULL;
    int r = engine_model_load(path, NULL, &m, &d);
    if (r < 0) fprintf(stderr, "load %s: %s\n", path, err_msg(&d, r));
    return m;
}

static int ctx_new(const struct engine_model *m, uint32_t n_dev, struct engine_context **ret,
                   struct err_detail *d) {
    struct engine_context_params p;
    engine_context_params_default(&p);
    p.n_ctx = 1024;
    p.n_batch = 64;
    p.n_outputs = MAX_PROMPT;
    p.n_threads = (int)MAX(n_dev, 2);
    p.type_k = p.type_v = KERN_TYPE_F32;
    p.n_devices = n_dev;
    p.split = n_dev > 1 ? ENGINE_SPLIT_TENSOR : ENGINE_SPLIT_NONE;
    return engine_context_new(m, &p, ret, d);
}

/* prompt[from, to) in steps of 64, the last position's logits into *last */
static int prefill(struct engine_context *ctx, const int32_t *tok, uint32_t from, uint32_t to,
                   struct err_detail *d) {
    static int32_t pos[MAX_PROMPT];
    for (uint32_t p = from; p < to; p += 64) {
        const uint32_t n = MIN(64u, to - p);
        for (uint32_t i = 0; i < n; i++) pos[i] = (int32_t)(p + i);
        struct engine_batch b = {.n_tok = (int32_t)n, .token = tok + p, .pos = pos};
        int r = engine_context_decode(ctx, &b, d);
        if (r < 0) return r;
    }
    return 0;
}

/* N_STEPS greedy steps after a prompt of np tokens whose last logits are row 0: the ids
 * into gen, each step's logits (the prompt end's first) into out (N_STEPS rows). */
static int greedy(struct engine_context *ctx, uint32_t np, uint32_t n_vocab, float *out,
                  int32_t *gen, struct err_detail *d) {
    const float *last = engine_context_logits(ctx, 0);
    for (int k = 0; k < N_STEPS; k++) {
        memcpy(out + (size_t)k * n_vocab, last, n_vocab * sizeof *out);
        int32_t t = gen[k] = test_top_index(last, (int32_t)n_vocab), p = (int32_t)np + k;
        if (k + 1 == N_STEPS) break;
        struct engine_batch one = {.n_tok = 1, .token = &t, .pos = &p};
        int r = engine_context_decode(ctx, &one, d);
        if (r < 0) return r;
        last = engine_context_logits(ctx, 0);
    }
    return 0;
}

/* The prompt then N_STEPS greedy steps on n_dev partitions; the devices' weight bytes. */
static int run(const struct engine_model *m, const int32_t *prompt, uint32_t np, uint32_t n_dev,
               float *out, int32_t *gen, uint64_t *ret_w) {
    struct engine_context *ctx = NULL;
    struct err_detail d = {0};
    int r = ctx_new(m, n_dev, &ctx, &d);
    if (r >= 0) r = prefill(ctx, prompt, 0, np, &d);
    if (r >= 0) r = greedy(ctx, np, m->hp.n_vocab, out, gen, &d);
    uint64_t w = 0;
    for (uint32_t i = 0; r >= 0 && i < n_dev; i++) {
        struct engine_device_info info;
        if ((r = engine_context_device_info(ctx, i, &info)) >= 0) w += info.weight_bytes;
    }
    if (r < 0) fprintf(stderr, "%u devices: %s\n", n_dev, err_msg(&d, r));
    *ret_w = w;
    engine_context_free(ctx);
    return r;
}

/* m on 2 .. max_dev partitions against one device: the same ids (and ref_gen's, when
 * given), logits within NMSE_SPLIT, the same weight bytes in all. */
static void split_check(const char *name, const struct engine_model *m, const int32_t *prompt,
                        uint32_t np, uint32_t max_dev, const int32_t *ref_gen) {
    const size_t V = m->hp.n_vocab, n = N_STEPS * V;
    float *one = malloc(n * sizeof *one), *many = malloc(n * sizeof *many);
    int32_t gen1[N_STEPS], gen[N_STEPS];
    uint64_t w1 = 0, w = 0;
    ASSERT_TRUE(one && many);
    ASSERT_OK(run(m, prompt, np, 1, one, gen1, &w1));
    if (ref_gen) ASSERT_TRUE(memcmp(gen1, ref_gen, sizeof gen1) == 0);
    printf("  %-22s H_k %u, H_v %u, %u tokens:", name, m->hp.ssm_n_head_k, m->hp.ssm_n_head_v,
           np);
    for (uint32_t n_dev = 2; n_dev <= max_dev; n_dev++) {
        ASSERT_OK(run(m, prompt, np, n_dev, many, gen, &w));
        const double e = test_nmse(many, one, n);
        printf(" N=%u %.1e", n_dev, e);
        if (!(e <= NMSE_SPLIT))
            TEST_FAIL_("%s on %u partitions: NMSE %.3g above %g", name, n_dev, e, NMSE_SPLIT);
        if (memcmp(gen, gen1, sizeof gen))
            TEST_FAIL_("%s on %u partitions: greedy ids differ from one device", name, n_dev);
        ASSERT_EQ(w, w1);
    }
    printf("\n");
    free(one);
    free(many);
}

/* The reference files on 2 and 3 partitions: P2 (60 tokens) and P3 (800). */
static void reference_split(const char *name) {
    char rel[128];
    snprintf(rel, sizeof rel, "hybrid/%s.gguf", name);
    struct engine_model *m = model_load(test_shared_path(rel));
    if (!m) SKIP("../shared/models/hybrid/%s.gguf is absent", name);
    const char *prompts[] = {"P2", "P3"};
    for (size_t i = 0; i < ARRAY_SIZE(prompts); i++) {
        static struct reference ref;
        memset(&ref, 0, sizeof ref);
        ASSERT_TRUE(reference_load(name, prompts[i], &ref));
        char label[64];
        snprintf(label, sizeof label, "%s %s", name, prompts[i]);
        split_check(label, m, ref.prompt, (uint32_t)ref.n_prompt, 3, ref.gen);
    }
    engine_model_free(m);
}

TEST(qwen35_tiny) {
    reference_split("qwen35-tiny");
}

TEST(qwen35moe_tiny) {
    reference_split("qwen35moe-tiny");
}

static void prompt_of(int32_t *tok, uint32_t n, int32_t n_vocab) {
    for (uint32_t i = 0; i < n; i++) tok[i] = (int32_t)((i * 53 + 3) % (uint32_t)n_vocab);
}

/* H_v = 2·H_k in the tiled order on 2, 3 (key heads 1 + 1 + 2, rotated per recurrent
 * layer) and 4 partitions; q8_0: ssm_out's columns cut on 32-value blocks; a model whose
 * layers are all recurrent. */
TEST(tiled_heads) {
    static const struct {
        const char *name, *opts;
    } cases[] = {
        {"q35-hv2hk-f32", "--arch qwen35 --n-embd 128 --n-layer 8 --n-head 4 --n-head-kv 2 "
                          "--head-dim 32 --n-ff 192 --n-vocab 300 --ssm-groups 4 --ssm-heads 8 "
                          "--ssm-head-dim 32 --full-attn-interval 4 --n-rot 16 --type f32"},
        {"q35-hv2hk-q8_0", "--arch qwen35 --n-embd 128 --n-layer 4 --n-head 4 --n-head-kv 2 "
                           "--head-dim 32 --n-ff 192 --n-vocab 300 --ssm-groups 2 --ssm-heads 4 "
                           "--ssm-head-dim 32 --full-attn-interval 4 --n-rot 16 --type q8_0"},
        /* no attention layer at all (interval past the layers): no KV heads to cut */
        {"q35-allrec", "--arch qwen35 --n-embd 128 --n-layer 3 --n-head 4 --n-head-kv 2 "
                       "--head-dim 32 --n-ff 192 --n-vocab 300 --ssm-groups 2 --ssm-heads 4 "
                       "--ssm-head-dim 32 --full-attn-interval 4 --n-rot 16 --type f32"},
    };
    int ran = 0;
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct engine_model *m = model_load(test_mkmodel(cases[i].name, "%s --seed 5",
                                                         cases[i].opts));
        if (!m) continue;
        ran++;
        ASSERT_EQ(m->hp.ssm_n_head_v, 2 * m->hp.ssm_n_head_k);
        int32_t prompt[100];
        prompt_of(prompt, 100, (int32_t)m->hp.n_vocab);
        split_check(cases[i].name, m, prompt, 100, 4, NULL);
        engine_model_free(m);
    }
    if (!ran) SKIP("warm-mkmodel is not available (WARM_BIN)");
}

/* A split context's state blob (attention rows and the recurrent snapshot, engine/kv-state)
 * imported into a one-device context goes on with the ids of a context never interrupted:
 * the split reads and writes the state in its global order. */
TEST(blob_from_split) {
    struct engine_model *m = model_load(test_mkmodel("q35-hv2hk-f32", "%s --seed 5",
        "--arch qwen35 --n-embd 128 --n-layer 8 --n-head 4 --n-head-kv 2 --head-dim 32 "
        "--n-ff 192 --n-vocab 300 --ssm-groups 4 --ssm-heads 8 --ssm-head-dim 32 "
        "--full-attn-interval 4 --n-rot 16 --type f32"));
    if (!m) SKIP("warm-mkmodel is not available (WARM_BIN)");
    const uint32_t np = 70, V = m->hp.n_vocab;
    int32_t prompt[70], gen1[N_STEPS], gen[N_STEPS];
    float *out = malloc((size_t)N_STEPS * V * sizeof *out);
    uint64_t w;
    ASSERT_TRUE(out);
    prompt_of(prompt, np, (int32_t)V);
    ASSERT_OK(run(m, prompt, np, 1, out, gen1, &w));
    struct engine_context *split = NULL, *one = NULL;
    struct err_detail d = {0};
    ASSERT_OK_D(ctx_new(m, 3, &split, &d), &d);
    ASSERT_OK_D(prefill(split, prompt, 0, np - 1, &d), &d);
    size_t n_blob = 0;
    ASSERT_OK_D(engine_kv_export_snap(split, 0, 0, np - 1, ENGINE_KV_SNAP_NEED, NULL, 0, &n_blob,
                                      &d), &d);
    void *blob = malloc(n_blob);
    ASSERT_TRUE(blob);
    ASSERT_OK_D(engine_kv_export_snap(split, 0, 0, np - 1, ENGINE_KV_SNAP_NEED, blob, n_blob,
                                      &n_blob, &d), &d);
    ASSERT_OK_D(ctx_new(m, 1, &one, &d), &d);
    ASSERT_OK_D(engine_kv_import(one, 0, blob, n_blob, prompt, np, NULL, &d), &d);
    ASSERT_OK_D(prefill(one, prompt, np - 1, np, &d), &d);
    ASSERT_OK_D(greedy(one, np, V, out, gen, &d), &d);
    printf("  blob of %zu bytes from 3 partitions; ids on one device %d %d %d ...\n", n_blob,
           gen[0], gen[1], gen[2]);
    ASSERT_TRUE(memcmp(gen, gen1, sizeof gen) == 0);
    free(blob);
    free(out);
    engine_context_free(split);
    engine_context_free(one);
    engine_model_free(m);
}

TEST_MAIN(T(qwen35_tiny), T(qwen35moe_tiny), T(tiled_heads), T(blob_from_split))
