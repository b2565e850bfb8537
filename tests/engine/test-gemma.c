/* Gemma 3 and Gemma 4 against llama.cpp's references (../shared/models/gemma/README.md):
 * greedy ids equal and per-step logits within the README's tolerance (max |Δ| 0.05 for
 * f32 files, 0.1 for f16), on every reference prompt (P2 and P3 are several windows
 * long), with the SWA cache as a full cache and as a ring, prompts in one batch and in
 * small batches; through warm-run --logits too. Then the two caches' state blobs
 * (format 2): a chain of chunk exports imported into a fresh context continues exactly as
 * the context that computed them, a chunk alone after a prefix RAM holds does too, a
 * version-1 blob is refused with "incompatible state version (blob 1, runtime 3)". And
 * the load-time refusals: a gemma4 file with experts but no expert_used_count, a shared-KV
 * layer without an owner of its kind. */
#include "test.h"

#include "engine/engine.h"
#include "engine/chat.h"
#include "engine/forward.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_STEPS 24
#define MAX_PROMPT 512

struct reference {
    int32_t prompt[MAX_PROMPT];
    size_t n_prompt;
    int32_t gen[N_STEPS];
    float *logits; /* (N_STEPS, n_vocab) */
    uint32_t n_vocab;
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

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Reads the logits file format of the README into (n_rows, n_vocab) floats. */
static float *logits_read(const char *path, uint32_t *n_vocab, uint32_t *n_rows,
                          uint32_t *n_prompt, uint32_t *first_pos) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    uint8_t h[24];
    float *x = NULL;
    if (fread(h, 1, 24, f) == 24 && !memcmp(h, "LGTS\0\0\0\1", 8)) {
        *n_vocab = rd32(h + 8), *n_rows = rd32(h + 12), *n_prompt = rd32(h + 16);
        *first_pos = rd32(h + 20);
        size_t n = (size_t)*n_vocab * *n_rows;
        x = malloc(n * sizeof *x + 1);
        if (x && fread(x, sizeof *x, n, f) != n) free(x), x = NULL; /* little-endian host */
    }
    fclose(f);
    return x;
}

/* Loads <name>-<P>.txt and .logits; false when the files are absent. */
static bool reference_load(const char *name, const char *prompt, struct reference *r) {
    char rel[128];
    snprintf(rel, sizeof rel, "gemma/%s-%s.txt", name, prompt);
    const char *path = test_shared_path(rel);
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f) return false;
    static char line[1 << 16];
    size_t n_gen = 0;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "prompt_ids: ", 12)) r->n_prompt = ids_parse(line + 12, r->prompt, MAX_PROMPT);
        if (!strncmp(line, "generated_ids: ", 15)) n_gen = ids_parse(line + 15, r->gen, N_STEPS);
    }
    fclose(f);
    snprintf(rel, sizeof rel, "gemma/%s-%s.logits", name, prompt);
    uint32_t rows = 0, np = 0, fp = 0;
    path = test_shared_path(rel);
    r->logits = path ? logits_read(path, &r->n_vocab, &rows, &np, &fp) : NULL;
    return r->logits && n_gen == N_STEPS && rows == N_STEPS && np == r->n_prompt &&
           fp == r->n_prompt - 1;
}

static struct engine_model *model_open(const char *file) {
    char rel[128];
    snprintf(rel, sizeof rel, "gemma/%s.gguf", file);
    const char *path = test_shared_path(rel);
    struct engine_model *m = NULL;
    struct err_detail d = {0};
    if (!path) return NULL;
    int r = engine_model_load(path, NULL, &m, &d);
    if (r < 0) fprintf(stderr, "load %s: %s\n", path, err_msg(&d, r));
    return m;
}

static struct engine_context *ctx_new(const struct engine_model *m, uint32_t n_batch,
                                      uint32_t swa_chunk, bool swa_full, enum kern_type t) {
    struct engine_context_params p;
    engine_context_params_default(&p);
    p.n_ctx = 1024;
    p.n_batch = n_batch;
    p.swa_chunk = swa_chunk;
    p.swa_full = swa_full;
    p.type_k = p.type_v = t;
    struct engine_context *ctx = NULL;
    struct err_detail d = {0};
    int r = engine_context_new(m, &p, &ctx, &d);
    if (r < 0) fprintf(stderr, "context: %s\n", err_msg(&d, r));
    return ctx;
}

static int32_t argmax(const float *x, uint32_t n) {
    int32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = (int32_t)i;
    return best;
}

/* Decodes tokens [from, to) at their positions in batches of `step`; logits of the last. */
static int decode_range(struct engine_context *ctx, const int32_t *tok, uint32_t from, uint32_t to,
                        uint32_t step) {
    int32_t pos[MAX_PROMPT + N_STEPS];
    for (uint32_t i = from; i < to; i++) pos[i] = (int32_t)i;
    for (uint32_t p = from; p < to; p += step) {
        uint32_t n = MIN(step, to - p);
        struct engine_batch b = {.n_tok = (int32_t)n, .token = tok + p, .pos = pos + p};
        struct err_detail d = {0};
        int r = engine_context_decode(ctx, &b, &d);
        if (r < 0) {
            fprintf(stderr, "decode [%u, %u): %s\n", p, p + n, err_msg(&d, r));
            return r;
        }
    }
    return 0;
}

/* Greedy N_STEPS from the logits of the last decoded token (at next - 1); each step's
 * logits compared with the reference's row; returns the largest |Δ| or < 0. */
static double greedy_check(struct engine_context *ctx, const struct reference *ref, uint32_t next,
                           int32_t *gen) {
    double max_d = 0;
    for (int k = 0; k < N_STEPS; k++) {
        const float *l = engine_context_logits(ctx, 0);
        const float *e = ref->logits + (size_t)k * ref->n_vocab;
        for (uint32_t i = 0; i < ref->n_vocab; i++) {
            double dd = l[i] > e[i] ? l[i] - e[i] : e[i] - l[i];
            if (dd > max_d) max_d = dd;
        }
        gen[k] = argmax(l, ref->n_vocab);
        int32_t p = (int32_t)next + k;
        struct engine_batch one = {.n_tok = 1, .token = &gen[k], .pos = &p};
        if (k + 1 < N_STEPS && engine_context_decode(ctx, &one, NULL) < 0) return -1;
    }
    return max_d;
}

/* One model file against the three references: every cache layout and batching. */
static void check_model(const char *file, const char *ref_name, double tol) {
    struct engine_model *m = model_open(file);
    if (!m) SKIP("../shared/models/gemma/%s.gguf is absent", file);
    static const struct {
        uint32_t n_batch, swa_chunk;
        bool swa_full;
        uint32_t step;
        const char *what;
    } modes[] = {
        {512, 256, true, 512, "full SWA cache, one batch"},
        {8, 16, false, 8, "SWA ring of 32+16+8 cells, batches of 8"},
        {1, 1, false, 1, "SWA ring of 32+1+1 cells, one token at a time"},
    };
    const char *prompts[] = {"P1", "P2", "P3"};
    for (size_t pi = 0; pi < ARRAY_SIZE(prompts); pi++) {
        struct reference ref = {0};
        if (!reference_load(ref_name, prompts[pi], &ref)) {
            free(ref.logits);
            engine_model_free(m);
            SKIP("the %s-%s reference is absent", ref_name, prompts[pi]);
        }
        ASSERT_EQ(ref.n_vocab, m->hp.n_vocab);
        for (size_t mi = 0; mi < ARRAY_SIZE(modes); mi++) {
            if (modes[mi].step == 1 && pi == 2) continue; /* 300 single steps: P2 covers it */
            struct engine_context *ctx = ctx_new(m, modes[mi].n_batch, modes[mi].swa_chunk,
                                                 modes[mi].swa_full, KERN_TYPE_F32);
            ASSERT_TRUE(ctx != NULL);
            struct engine_kv_info info;
            engine_context_kv_info(ctx, &info);
            ASSERT_EQ(info.n_cache, 2);
            ASSERT_EQ(info.cache[1].window, 32);
            ASSERT_EQ(info.cache[1].n_cells,
                      modes[mi].swa_full ? 1024 : 32 + modes[mi].swa_chunk + modes[mi].n_batch);
            ASSERT_OK(decode_range(ctx, ref.prompt, 0, (uint32_t)ref.n_prompt, modes[mi].step));
            int32_t gen[N_STEPS];
            double max_d = greedy_check(ctx, &ref, (uint32_t)ref.n_prompt, gen);
            printf("  %s %s (%zu ids), %s: max |dlogit| %.4f\n", file, prompts[pi],
                   ref.n_prompt, modes[mi].what, max_d);
            ASSERT_TRUE(max_d >= 0 && max_d <= tol);
            for (int k = 0; k < N_STEPS; k++) ASSERT_EQ(gen[k], ref.gen[k]);
            engine_context_free(ctx);
        }
        free(ref.logits);
    }
    engine_model_free(m);
}

TEST(gemma3_f32) { check_model("gemma3-tiny", "gemma3-tiny", 0.05); }
TEST(gemma3_f16) { check_model("gemma3-tiny-f16", "gemma3-tiny-f16", 0.1); }
TEST(gemma4_f32) { check_model("gemma4-tiny", "gemma4-tiny", 0.05); }
TEST(gemma4_f16) { check_model("gemma4-tiny-f16", "gemma4-tiny-f16", 0.1); }
TEST(gemma4e_f32) { check_model("gemma4e-tiny", "gemma4e-tiny", 0.05); }

/* What the loader makes of the references' layouts (README: layer tables). */
TEST(layer_layout) {
    struct engine_model *m3 = model_open("gemma3-tiny"), *m4e = model_open("gemma4e-tiny");
    if (!m3 || !m4e) {
        engine_model_free(m3);
        engine_model_free(m4e);
        SKIP("../shared/models/gemma is absent");
    }
    const char *swa3 = "11101110", *swa4e = "1101101110";
    const int src4e[10] = {0, 1, 2, 3, 4, 5, 4, 4, 4, 5};
    for (int il = 0; il < 8; il++) ASSERT_EQ(m3->hp.layer[il].swa, swa3[il] == '1');
    for (int il = 0; il < 10; il++) {
        ASSERT_EQ(m4e->hp.layer[il].swa, swa4e[il] == '1');
        ASSERT_EQ(m4e->hp.layer[il].kv_source, src4e[il]);
        ASSERT_EQ(m4e->hp.layer[il].head_dim_k, swa4e[il] == '1' ? 32u : 64u);
        ASSERT_EQ(m4e->hp.layer[il].n_ff, il < 6 ? 128u : 256u);
    }
    ASSERT_NEAR(m3->hp.attn_scale, 0.125f, 1e-7);
    ASSERT_EQ(m3->hp.final_softcap, 0.0f);
    ASSERT_EQ(m4e->hp.final_softcap, 30.0f);
    ASSERT_EQ(m4e->hp.n_embd_per_layer, 32u);
    /* the two caches: global layers 2, 5 (one head of 64), SWA layers 0, 1, 3, 4 (2 of 32),
     * rotating differently once quantized (64 -> 64 for K and V on both) */
    struct engine_context *ctx = ctx_new(m4e, 64, 64, false, KERN_TYPE_Q8_0);
    ASSERT_TRUE(ctx != NULL);
    struct engine_kv_info info;
    engine_context_kv_info(ctx, &info);
    ASSERT_EQ(info.n_cache, 2);
    ASSERT_EQ(info.cache[0].n_layer_kv, 2);
    ASSERT_EQ(info.cache[1].n_layer_kv, 4);
    ASSERT_EQ(info.cache[0].head_dim_k, 64);
    ASSERT_EQ(info.cache[1].head_dim_k, 32);
    ASSERT_EQ(info.cache[0].n_rot_k, 64); /* head 64: rotated */
    ASSERT_EQ(info.cache[1].n_rot_k, 0);  /* head 32: not a multiple of 64, not rotated */
    engine_context_free(ctx);
    engine_model_free(m3);
    engine_model_free(m4e);
}

/* ---- state blobs of two caches -------------------------------------------------------- */

static void *export_blob(struct engine_context *ctx, uint32_t p0, uint32_t p1, size_t *n) {
    struct err_detail d = {0};
    if (engine_kv_export(ctx, 0, p0, p1, NULL, 0, n, &d) < 0) {
        fprintf(stderr, "export [%u, %u): %s\n", p0, p1, d.msg);
        return NULL;
    }
    void *b = malloc(*n);
    if (b && engine_kv_export(ctx, 0, p0, p1, b, *n, n, &d) < 0) free(b), b = NULL;
    return b;
}

/* A prompt of 300 tokens computed in chunks of 16 (each exported as it is computed, as
 * the daemon does), a fresh context importing the chain (or RAM holding a prefix and
 * importing only the last chunk), then 24 greedy steps: the same ids and the same logits
 * bits as the context that computed everything. */
static void check_chain(const char *file, enum kern_type t) {
    struct engine_model *m = model_open(file);
    if (!m) SKIP("../shared/models/gemma/%s.gguf is absent", file);
    struct reference ref = {0};
    if (!reference_load(file, "P3", &ref)) {
        free(ref.logits);
        engine_model_free(m);
        SKIP("the %s-P3 reference is absent", file);
    }
    enum { C = 16 };
    const uint32_t n = (uint32_t)ref.n_prompt, n_chunks = (n - 1) / C; /* chunks of the prompt */
    void *blobs[MAX_PROMPT / C] = {0};
    size_t sizes[MAX_PROMPT / C] = {0};
    struct engine_context *a = ctx_new(m, 8, C, false, t);
    ASSERT_TRUE(a != NULL);
    for (uint32_t c = 0; c < n_chunks; c++) {
        ASSERT_OK(decode_range(a, ref.prompt, c * C, (c + 1) * C, 8));
        ASSERT_TRUE((blobs[c] = export_blob(a, c * C, (c + 1) * C, &sizes[c])) != NULL);
    }
    /* a chunk far behind has left the ring: its export is refused */
    size_t dummy;
    struct err_detail d = {0};
    ASSERT_ERR(engine_kv_export(a, 0, 0, C, NULL, 0, &dummy, &d), ERR_INVALID);
    printf("  old chunk: %s\n", d.msg);
    ASSERT_OK(decode_range(a, ref.prompt, n_chunks * C, n, 8));
    int32_t gen_a[N_STEPS], gen_b[N_STEPS];
    float *last_a = malloc(ref.n_vocab * sizeof *last_a);
    ASSERT_TRUE(greedy_check(a, &ref, n, gen_a) >= 0);
    memcpy(last_a, engine_context_logits(a, 0), ref.n_vocab * sizeof *last_a);

    for (int variant = 0; variant < 2; variant++) {
        struct engine_context *b = ctx_new(m, 8, C, false, t);
        ASSERT_TRUE(b != NULL);
        uint32_t first = 0;
        if (variant == 1) { /* RAM computed the prefix; only the last chunk comes from a blob */
            first = n_chunks - 1;
            ASSERT_OK(decode_range(b, ref.prompt, 0, first * C, 8));
        }
        for (uint32_t c = first; c < n_chunks; c++) {
            uint32_t p1 = 0;
            ASSERT_OK(engine_kv_import(b, 0, blobs[c], sizes[c], ref.prompt, n, &p1, NULL));
            ASSERT_EQ(p1, (c + 1) * C);
        }
        ASSERT_OK(decode_range(b, ref.prompt, n_chunks * C, n, 8));
        ASSERT_TRUE(greedy_check(b, &ref, n, gen_b) >= 0);
        for (int k = 0; k < N_STEPS; k++) ASSERT_EQ(gen_b[k], gen_a[k]);
        ASSERT_TRUE(!memcmp(engine_context_logits(b, 0), last_a, ref.n_vocab * sizeof *last_a));
        printf("  %s %s: %s, then %u tokens computed: same ids and logits\n", file,
               kern_type_name(t), variant ? "prefix in RAM + the last chunk imported"
                                          : "the chain of chunks imported", n - n_chunks * C);
        engine_context_free(b);
    }

    /* a ring that no longer holds the window before p cannot be cut back to p: refused,
     * the sequence unchanged, and it still continues where it was */
    struct engine_context *c = ctx_new(m, 8, C, false, t);
    ASSERT_OK(decode_range(c, ref.prompt, 0, n_chunks * C, 8));
    ASSERT_ERR(engine_kv_seq_rm(c, 0, C), -ENODATA);
    ASSERT_EQ(engine_kv_seq_len(c, 0), n_chunks * C);
    ASSERT_OK(engine_kv_seq_rm(c, 0, n_chunks * C - 8)); /* within the ring: fine */
    ASSERT_OK(decode_range(c, ref.prompt, n_chunks * C - 8, n, 8));
    ASSERT_TRUE(greedy_check(c, &ref, n, gen_b) >= 0);
    for (int k = 0; k < N_STEPS; k++) ASSERT_EQ(gen_b[k], gen_a[k]);
    engine_context_free(c);
    uint32_t p1;

    /* a version-1 blob is refused by its version, before anything else */
    uint8_t *old = malloc(sizes[0]);
    memcpy(old, blobs[0], sizes[0]);
    old[4] = 1;
    struct engine_context *e = ctx_new(m, 8, C, false, t);
    memset(&d, 0, sizeof d);
    ASSERT_ERR(engine_kv_import(e, 0, old, sizes[0], NULL, 0, &p1, &d), ERR_STATE_VERSION);
    ASSERT_STREQ(d.msg, "incompatible state version (blob 1, runtime 3)");
    engine_context_free(e);
    free(old);

    for (uint32_t i = 0; i < n_chunks; i++) free(blobs[i]);
    free(last_a);
    free(ref.logits);
    engine_context_free(a);
    engine_model_free(m);
}

TEST(state_chain_gemma3) { check_chain("gemma3-tiny", KERN_TYPE_F32); }
TEST(state_chain_gemma4_q8) { check_chain("gemma4-tiny", KERN_TYPE_Q8_0); }
TEST(state_chain_gemma4e) { check_chain("gemma4e-tiny", KERN_TYPE_F16); }

/* ---- warm-run --logits ------------------------------------------------------------------ */

TEST(warm_run_logits) {
    const char *bin = getenv("WARM_BIN");
    const char *shared = test_shared_path("gemma/gemma4e-tiny.gguf");
    char model[600];
    snprintf(model, sizeof model, "%s", shared ? shared : "");
    struct reference ref = {0};
    if (!bin || !shared || !reference_load("gemma4e-tiny", "P2", &ref)) {
        free(ref.logits);
        SKIP("WARM_BIN or the gemma4e-tiny reference is absent");
    }
    static char cmd[8192], ids[4096];
    size_t at = 0;
    for (size_t i = 0; i < ref.n_prompt; i++) at += (size_t)snprintf(ids + at, sizeof ids - at, "%s%d", i ? " " : "", ref.prompt[i]);
    char out[600];
    snprintf(out, sizeof out, "%s/g4e.logits", test_tmpdir());
    snprintf(cmd, sizeof cmd, "'%s/warm-run' -m '%s' --prompt-ids '%s' -n %zu --cache-type f32 "
             "-t 1 --ids --logits '%s'", bin, model, ids, ref.n_prompt + N_STEPS - 1, out);
    FILE *p = popen(cmd, "r");
    ASSERT_TRUE(p != NULL);
    static char line[1 << 14];
    int32_t gen[N_STEPS] = {0};
    size_t n_gen = 0;
    while (fgets(line, sizeof line, p))
        if (!strncmp(line, "generated_ids: ", 15)) n_gen = ids_parse(line + 15, gen, N_STEPS);
    ASSERT_EQ(pclose(p), 0);
    ASSERT_EQ(n_gen, N_STEPS);
    for (int k = 0; k < N_STEPS; k++) ASSERT_EQ(gen[k], ref.gen[k]);
    uint32_t nv, nr, np, fp;
    float *x = logits_read(out, &nv, &nr, &np, &fp);
    ASSERT_TRUE(x != NULL);
    ASSERT_EQ(nv, ref.n_vocab);
    ASSERT_EQ(nr, N_STEPS);
    ASSERT_EQ(np, ref.n_prompt);
    ASSERT_EQ(fp, ref.n_prompt - 1);
    double max_d = 0;
    for (size_t i = 0; i < (size_t)nv * nr; i++) {
        double dd = x[i] > ref.logits[i] ? x[i] - ref.logits[i] : ref.logits[i] - x[i];
        max_d = dd > max_d ? dd : max_d;
    }
    printf("  warm-run --logits on gemma4e-tiny P2: max |dlogit| %.4f\n", max_d);
    ASSERT_TRUE(max_d <= 0.05);
    free(x);
    free(ref.logits);
}

/* ---- refusals --------------------------------------------------------------------------- */

/* gemma4e-tiny rewritten with one key replaced (or added) by a u32 or bool-array value,
 * then loaded: the loader's verdict, the message in d. */
static int load_variant(const char *key, uint32_t u32, const bool *flags, uint32_t n_flags,
                        struct err_detail *d) {
    const char *path = test_shared_path("gemma/gemma4e-tiny.gguf");
    struct gguf_file *src = NULL;
    struct gguf_writer *w = NULL;
    int r = path ? gguf_open(path, &src, d) : 1;
    if (r) return r;
    if ((r = gguf_writer_new(&w)) < 0) goto out;
    for (uint64_t i = 0; r >= 0 && i < gguf_n_kv(src); i++) {
        const struct gguf_kv *kv = gguf_kv_at(src, i);
        if (!gguf_str_eq(kv->key, key)) r = gguf_writer_add_kv(w, kv);
    }
    if (r >= 0 && flags) r = gguf_writer_add_arr(w, key, GGUF_TYPE_BOOL, flags, n_flags);
    if (r >= 0 && !flags) r = gguf_writer_add_u32(w, key, u32);
    for (uint64_t i = 0; r >= 0 && i < gguf_n_tensors(src); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(src, i);
        char name[GGUF_MAX_NAME + 1];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        r = gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data);
    }
    char out[600];
    snprintf(out, sizeof out, "%s/variant.gguf", test_tmpdir());
    if (r >= 0) r = gguf_writer_save(w, out);
    if (r >= 0) {
        struct engine_model *m = NULL;
        memset(d, 0, sizeof *d);
        r = engine_model_load(out, NULL, &m, d);
        engine_model_free(m);
    }
out:
    gguf_writer_free(w);
    gguf_close(src);
    return r;
}

TEST(refusals) {
    if (!test_shared_path("gemma/gemma4e-tiny.gguf")) SKIP("gemma4e-tiny.gguf is absent");
    struct err_detail d = {0};
    /* the unchanged copy loads */
    ASSERT_OK_D(load_variant("gemma4.attention.shared_kv_layers", 4, NULL, 0, &d), &d);
    /* experts without the rest of a mixture-of-experts file (26B-A4B: test-gemma4moe.c) */
    ASSERT_ERR(load_variant("gemma4.expert_count", 128, NULL, 0, &d), ERR_MODEL_HPARAM);
    printf("  MoE: %s\n", d.msg);
    ASSERT_TRUE(strstr(d.msg, "gemma4.expert_used_count") != NULL);
    /* 9 shared layers: layer 2 is global and shares KV, but the one owner (0) is SWA */
    ASSERT_ERR(load_variant("gemma4.attention.shared_kv_layers", 9, NULL, 0, &d),
               ERR_MODEL_HPARAM);
    printf("  no owner: %s\n", d.msg);
    ASSERT_TRUE(strstr(d.msg, "layer 2 (global) reads shared KV") != NULL);
    /* a pattern array of the wrong length */
    const bool flags[9] = {1, 1, 0, 1, 1, 0, 1, 1, 1};
    ASSERT_ERR(load_variant("gemma4.attention.sliding_window_pattern", 0, flags, 9, &d),
               ERR_MODEL_HPARAM);
    printf("  pattern: %s\n", d.msg);
}

/* ---- warm-mkmodel --arch gemma3|gemma4 against the references ----------------------- */

/* Makes a model with warm-mkmodel (WARM_BIN); NULL when the tool is absent. */
static struct engine_model *mkmodel_open(const char *name, const char *args) {
    const char *vocab = test_shared_path("stories260K.gguf");
    const char *path = vocab ? test_mkmodel(name, "%s --vocab-from '%s'", args, vocab) : NULL;
    if (!path) return NULL;
    struct engine_model *m = NULL;
    struct err_detail d = {0};
    int r = engine_model_load(path, NULL, &m, &d);
    if (r < 0) fprintf(stderr, "load %s: %s\n", path, err_msg(&d, r));
    return m;
}

/* The hparams the loader derives (layer kinds, head sizes, KV heads, KV sources, RoPE,
 * scales) are the same for a warm-mkmodel file as for the reference of that shape; and the
 * file runs: greedy decoding past the window gives tokens in range, not one repeated. */
static void check_like_reference(const char *ref_file, const char *args, bool same_ff) {
    struct engine_model *ref = model_open(ref_file);
    if (!ref) {
        printf("  %s absent: skipped\n", ref_file);
        return;
    }
    struct engine_model *m = mkmodel_open(ref_file, args);
    ASSERT_TRUE(m != NULL);
    const struct engine_hparams *a = &m->hp, *b = &ref->hp;
    ASSERT_EQ(m->arch, ref->arch);
    ASSERT_EQ(a->n_layer, b->n_layer);
    ASSERT_EQ(a->n_embd, b->n_embd);
    ASSERT_EQ(a->swa_window, b->swa_window);
    ASSERT_EQ(a->n_layer_kv_shared, b->n_layer_kv_shared);
    ASSERT_EQ(a->n_embd_per_layer, b->n_embd_per_layer);
    ASSERT_EQ(a->rope_freq_base, b->rope_freq_base);
    ASSERT_EQ(a->rope_freq_base_swa, b->rope_freq_base_swa);
    ASSERT_EQ(a->attn_scale, b->attn_scale);
    ASSERT_EQ(a->final_softcap, b->final_softcap);
    ASSERT_EQ(a->embd_scale, b->embd_scale);
    ASSERT_EQ(a->v_norm, b->v_norm);
    ASSERT_EQ(a->tied_embeddings, b->tied_embeddings);
    ASSERT_EQ(m->rope_freqs.data != NULL, ref->rope_freqs.data != NULL);
    for (uint32_t il = 0; il < a->n_layer; il++) {
        const struct engine_layer_hparams *x = &a->layer[il], *y = &b->layer[il];
        ASSERT_EQ(x->swa, y->swa);
        ASSERT_EQ(x->n_head_kv, y->n_head_kv);
        ASSERT_EQ(x->head_dim_k, y->head_dim_k);
        ASSERT_EQ(x->head_dim_v, y->head_dim_v);
        ASSERT_EQ(x->n_rot, y->n_rot);
        ASSERT_EQ(x->kv_source, y->kv_source);
        if (same_ff) ASSERT_EQ(x->n_ff, y->n_ff);
        ASSERT_EQ(m->layers[il].wk.data != NULL, ref->layers[il].wk.data != NULL);
        ASSERT_EQ(m->layers[il].pl_gate.data != NULL, ref->layers[il].pl_gate.data != NULL);
        ASSERT_EQ(m->layers[il].out_scale.data != NULL, ref->layers[il].out_scale.data != NULL);
    }
    /* it runs past the window, through the SWA ring */
    struct engine_context *ctx = ctx_new(m, 8, 8, false, KERN_TYPE_F32);
    ASSERT_TRUE(ctx != NULL);
    int32_t tok[80] = {1, 403, 407, 300, 301, 302};
    uint32_t n = 6, distinct = 0;
    ASSERT_OK(decode_range(ctx, tok, 0, n, 8));
    for (; n < 80; n++) {
        const float *lg = engine_context_logits(ctx, 0);
        ASSERT_TRUE(lg != NULL);
        tok[n] = argmax(lg, a->n_vocab);
        ASSERT_TRUE(tok[n] >= 0 && (uint32_t)tok[n] < a->n_vocab);
        distinct += tok[n] != tok[n - 1];
        if (n + 1 < 80) ASSERT_OK(decode_range(ctx, tok, n, n + 1, 1));
    }
    printf("  warm-mkmodel %-13s: hparams as the reference's, 74 greedy steps, %u changes of "
           "token\n", ref_file, distinct);
    ASSERT_TRUE(distinct > 10);
    engine_context_free(ctx);
    engine_model_free(m);
    engine_model_free(ref);
}

TEST(mkmodel_like_references) {
    if (!getenv("WARM_BIN")) SKIP("warm-mkmodel is not available (WARM_BIN)");
    check_like_reference("gemma3-tiny", "--arch gemma3 --n-embd 128 --n-layer 8 --n-head 4 "
                         "--n-head-kv 2 --head-dim 64 --n-ff 256 --window 32 --swa-pattern 4",
                         true);
    check_like_reference("gemma4-tiny", "--arch gemma4 --n-embd 128 --n-layer 8 --n-head 4 "
                         "--n-head-kv 2 --head-dim 64 --n-ff 256 --window 32 "
                         "--swa-pattern 10110110 --shared-kv-layers 3", true);
    /* per-layer embeddings, head sizes and KV heads per kind (not: K = V, wide MLP) */
    check_like_reference("gemma4e-tiny", "--arch gemma4 --n-embd 128 --n-layer 10 --n-head 4 "
                         "--n-head-kv 1 --n-head-kv-swa 2 --head-dim 64 --head-dim-swa 32 "
                         "--n-ff 128 --window 32 --swa-pattern 1101101110 "
                         "--shared-kv-layers 4 --ple 32", false);
}

/* ---- the gemma4 tokenizer and chat template ------------------------------------------ */

/* A small vocabulary in Gemma 4's form: tokenizer.ggml.model "gemma4", <0xHH> byte tokens,
 * U+2581 for spaces, merges by rank, add_bos_token false (which llama.cpp overrides). */
static struct engine_vocab *gemma4_vocab(void) {
    static const char *const normal[] = {"\n", "\n\n", "\xe2\x96\x81", "h", "e", "l", "o",
                                         "w", "r", "d", "he", "ll", "hell", "hello",
                                         "\xe2\x96\x81w", "or", "\xe2\x96\x81wor"};
    static const char *const merges[] = {"h e", "l l", "he ll", "hell o", "\xe2\x96\x81 w",
                                         "o r", "\xe2\x96\x81w or", "\n \n"};
    static const char *const head[] = {"<pad>", "<eos>", "<bos>", "<unk>", "<|turn>", "<turn|>"};
    static const int32_t head_type[] = {3, 3, 3, 2, 3, 3};
    enum { N_HEAD = 6, N = N_HEAD + 256 + ARRAY_SIZE(normal) };
    static char bytes[256][8];
    struct gguf_str toks[N], m[ARRAY_SIZE(merges)];
    int32_t types[N];
    float scores[N];
    for (int i = 0; i < N; i++) {
        const char *t;
        if (i < N_HEAD) t = head[i], types[i] = head_type[i];
        else if (i < N_HEAD + 256) {
            snprintf(bytes[i - N_HEAD], sizeof bytes[0], "<0x%02X>", i - N_HEAD);
            t = bytes[i - N_HEAD], types[i] = 6;
        } else t = normal[i - N_HEAD - 256], types[i] = 1;
        toks[i] = (struct gguf_str){strlen(t), t};
        scores[i] = 0;
    }
    for (size_t i = 0; i < ARRAY_SIZE(merges); i++) m[i] = (struct gguf_str){strlen(merges[i]), merges[i]};
    struct gguf_writer *w = NULL;
    void *buf = NULL;
    size_t size = 0;
    struct gguf_file *f = NULL;
    struct engine_vocab *v = NULL;
    struct err_detail d = {0};
    if (gguf_writer_new(&w) < 0) return NULL;
    int r = gguf_writer_add_str(w, "tokenizer.ggml.model", "gemma4");
    if (r >= 0) r = gguf_writer_add_str(w, "tokenizer.ggml.pre", "gemma4");
    if (r >= 0) r = gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", toks, N);
    if (r >= 0) r = gguf_writer_add_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, N);
    if (r >= 0) r = gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, N);
    if (r >= 0) r = gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", m, ARRAY_SIZE(merges));
    if (r >= 0) r = gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 2);
    if (r >= 0) r = gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 1);
    if (r >= 0) r = gguf_writer_add_u32(w, "tokenizer.ggml.unknown_token_id", 3);
    if (r >= 0) r = gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", false);
    if (r >= 0) r = gguf_writer_encode(w, &buf, &size);
    if (r >= 0) r = gguf_open_mem(buf, size, &f, &d);
    if (r >= 0) r = engine_vocab_load(f, &v, &d);
    if (r < 0) fprintf(stderr, "gemma4 vocabulary: %s\n", err_msg(&d, r));
    gguf_close(f);
    free(buf);
    gguf_writer_free(w);
    return v;
}

#define B(x) (6 + (x))   /* the <0xHH> token of byte x */
#define N(i) (6 + 256 + (i)) /* normal[i] */

TEST(gemma4_tokenizer) {
    struct engine_vocab *v = gemma4_vocab();
    ASSERT_TRUE(v != NULL);
    ASSERT_EQ(engine_vocab_kind(v), ENGINE_VOCAB_GEMMA4);
    ASSERT_TRUE(engine_vocab_add_bos(v)); /* the file says false */
    /* "hello world": one run, spaces as U+2581, merges by rank (no "l d" merge);
     * "\n\n\n": its own run, the leftmost pair first; "hi é": 'i' and 'é' are no tokens,
     * their bytes' tokens instead */
    static const char text[] = "hello world\n\n\nhi \xc3\xa9";
    const int32_t want[] = {2, N(13), N(16), N(5), N(9), N(1), N(0), N(3), B('i'), N(2),
                            B(0xC3), B(0xA9)};
    int32_t ids[64];
    size_t n = 0;
    ASSERT_OK(engine_vocab_tokenize(v, text, strlen(text), ENGINE_TOKENIZE_ADD_SPECIAL, ids, 64, &n));
    for (size_t i = 0; i < n; i++) printf("%s%d", i ? " " : "  ids: ", ids[i]);
    printf("\n");
    ASSERT_EQ(n, ARRAY_SIZE(want));
    ASSERT_TRUE(memcmp(ids, want, sizeof want) == 0);
    /* back to the text */
    char out[64];
    size_t len = 0;
    ASSERT_OK(engine_vocab_detokenize(v, ids + 1, n - 1, 0, out, sizeof out, &len));
    ASSERT_EQ(len, strlen(text));
    ASSERT_TRUE(memcmp(out, text, len) == 0);
    /* the turn markers are control tokens; <turn|> and <eos> end generation */
    static const char turn[] = "<|turn>user\nhello<turn|>";
    const int32_t want_turn[] = {4, B('u'), B('s'), N(4), N(8), N(0), N(13), 5};
    ASSERT_OK(engine_vocab_tokenize(v, turn, strlen(turn), ENGINE_TOKENIZE_PARSE_SPECIAL, ids, 64, &n));
    ASSERT_EQ(n, ARRAY_SIZE(want_turn));
    ASSERT_TRUE(memcmp(ids, want_turn, sizeof want_turn) == 0);
    ASSERT_TRUE(engine_vocab_is_eog(v, 5));
    ASSERT_TRUE(engine_vocab_is_eog(v, 1));
    ASSERT_TRUE(!engine_vocab_is_eog(v, 4));
    /* the gemma4 chat template, by ids */
    const struct engine_chat_msg msgs[] = {{.role = ENGINE_CHAT_SYSTEM, .content = "be brief", .len = 8},
                                           {.role = ENGINE_CHAT_USER, .content = " hello ", .len = 7}};
    int32_t *chat = NULL;
    struct err_detail d = {0};
    ASSERT_OK_D(engine_chat_tokenize(ENGINE_CHAT_GEMMA4, v, msgs, 2, ENGINE_CHAT_ADD_GENERATION_PROMPT,
                                     &chat, &n, &d), &d);
    /* <bos> <|turn>system\nbe▁brief<turn|>\n <|turn>user\nhello<turn|>\n <|turn>model\n */
    const int32_t want_chat[] = {2, 4, B('s'), B('y'), B('s'), B('t'), N(4), B('m'), N(0),
                                 B('b'), N(4), N(2), B('b'), N(8), B('i'), N(4), B('f'), 5,
                                 N(0), 4, B('u'), B('s'), N(4), N(8), N(0), N(13), 5, N(0),
                                 4, B('m'), N(6), N(9), N(4), N(5), N(0)};
    ASSERT_EQ(n, ARRAY_SIZE(want_chat));
    ASSERT_TRUE(memcmp(chat, want_chat, sizeof want_chat) == 0);
    free(chat);
    engine_vocab_free(v);
}

TEST_MAIN(T(gemma3_f32), T(gemma3_f16), T(gemma4_f32), T(gemma4_f16), T(gemma4e_f32),
          T(layer_layout), T(state_chain_gemma3), T(state_chain_gemma4_q8),
          T(state_chain_gemma4e), T(warm_run_logits), T(refusals), T(mkmodel_like_references),
          T(gemma4_tokenizer))
