/* Embedding models against llama.cpp's vectors (../shared/models/embed/README.md): for
 * bert-tiny, nomic-bert-tiny, qwen3-embed-tiny and gemma-embed-tiny and each input I1..I4,
 * the ids of the .txt file embedded in one decode (I4: its three sequences together) give
 * the .pooled vectors within 3e-3 × the file's largest |value| and the .normed ones within
 * max |Δ| 1e-3 and cosine 0.99999 (the README's thresholds); I2's per-token states equal
 * its .tokens rows; all the inputs in one batch, their tokens interleaved, give the vectors
 * each gives alone, on one device and on two CPU partitions; the tokenizer makes I1's ids
 * from its text (the specials included).
 * Then the refusals: a chat model asked for embeddings, an embedding model asked for a
 * text context, an embeddings batch that does not start a sequence at position 0 or does
 * not fit one step; and the pooling and width an embedding model reports. */
#include "test.h"

#include "engine/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SEQ 3
#define MAX_TOK 512
#define N_INPUTS 4
#define N_EMBD 64

/* The README's suggested thresholds: normalized vectors, raw vectors relative to the
 * largest |value| of the file, and the batch-equals-alone check (ours computes every row
 * alike whatever the batch, so the same numbers up to the matmul's blocking). */
#define TOL_NORMED 1e-3
#define TOL_COSINE 0.99999
#define TOL_RAW_REL 3e-3
#define TOL_BATCH 1e-5

static const char *const models[] = {"bert-tiny", "nomic-bert-tiny", "qwen3-embed-tiny",
                                     "gemma-embed-tiny"};

struct input {
    int pooling;
    int n_seq;
    int n_tok[MAX_SEQ];
    int32_t ids[MAX_SEQ][MAX_TOK];
    float pooled[MAX_SEQ][N_EMBD], normed[MAX_SEQ][N_EMBD];
};

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Reads an EMBD file (the README's format) of n_rows rows of N_EMBD into rows; false when
 * it is absent or not that. */
static bool embd_read(const char *rel, uint32_t kind, float *rows, uint32_t n_rows) {
    const char *path = test_shared_path(rel);
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f) return false;
    uint8_t h[24];
    bool ok = fread(h, 1, 24, f) == 24 && !memcmp(h, "EMBD\0\0\0\1", 8) && rd32(h + 8) == N_EMBD &&
              rd32(h + 12) == n_rows && rd32(h + 16) == kind &&
              fread(rows, sizeof(float) * N_EMBD, n_rows, f) == n_rows; /* little-endian */
    fclose(f);
    return ok;
}

static int ids_parse(const char *s, int32_t *ids, int cap) {
    int n = 0;
    char *end;
    for (;;) {
        long v = strtol(s, &end, 10);
        if (end == s || n == cap) break;
        ids[n++] = (int32_t)v;
        s = end;
    }
    return n;
}

/* <model>-I<i>.txt, .pooled and .normed; false when a file is absent. */
static bool input_load(const char *model, int i, struct input *in) {
    char rel[128];
    memset(in, 0, sizeof *in);
    snprintf(rel, sizeof rel, "embed/%s-I%d.txt", model, i);
    const char *path = test_shared_path(rel);
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f) return false;
    static char line[1 << 16];
    int s;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "pooling: ", 9)) in->pooling = atoi(line + 9);
        if (!strncmp(line, "n_seq: ", 7)) in->n_seq = atoi(line + 7);
        if (sscanf(line, "ids%d: ", &s) == 1 && s >= 0 && s < MAX_SEQ)
            in->n_tok[s] = ids_parse(strchr(line, ':') + 1, in->ids[s], MAX_TOK);
    }
    fclose(f);
    if (in->n_seq < 1 || in->n_seq > MAX_SEQ) return false;
    snprintf(rel, sizeof rel, "embed/%s-I%d.pooled", model, i);
    if (!embd_read(rel, 1, &in->pooled[0][0], (uint32_t)in->n_seq)) return false;
    snprintf(rel, sizeof rel, "embed/%s-I%d.normed", model, i);
    return embd_read(rel, 2, &in->normed[0][0], (uint32_t)in->n_seq);
}

static struct engine_model *model_load(const char *name) {
    char rel[128];
    snprintf(rel, sizeof rel, "embed/%s.gguf", name);
    const char *path = test_shared_path(rel);
    struct engine_model *m = NULL;
    struct err_detail d = {0};
    if (!path) return NULL;
    int r = engine_model_load(path, NULL, &m, &d);
    if (r < 0) {
        fprintf(stderr, "%s: %s\n", path, err_msg(&d, r));
        test_failed_ = 1; /* there but refused: a failure, not a skip */
    }
    return m;
}

/* An embeddings context with f32 K/V (the references' cache) for n_seq sequences, on
 * n_devices CPU partitions (1: no split). */
static int embed_ctx_new_on(const struct engine_model *m, uint32_t n_seq, uint32_t n_devices,
                            struct engine_context **ret, struct err_detail *d) {
    struct engine_context_params p;
    engine_context_params_default(&p);
    p.n_devices = n_devices;
    p.split = n_devices > 1 ? ENGINE_SPLIT_TENSOR : ENGINE_SPLIT_NONE;
    p.embeddings = true;
    p.type_k = p.type_v = KERN_TYPE_F32;
    p.n_seq = n_seq;
    p.n_ctx = 512;
    p.n_batch = 1024;
    p.n_threads = 2;
    return engine_context_new(m, &p, ret, d);
}

static int embed_ctx_new(const struct engine_model *m, uint32_t n_seq, struct engine_context **ret,
                         struct err_detail *d) {
    return embed_ctx_new_on(m, n_seq, 1, ret, d);
}

static double max_abs(const float *x, int n) {
    double v = 0;
    for (int i = 0; i < n; i++) v = fmax(v, fabs(x[i]));
    return v;
}

static double max_diff(const float *a, const float *b, int n) {
    double v = 0;
    for (int i = 0; i < n; i++) v = fmax(v, fabs((double)a[i] - b[i]));
    return v;
}

static double cosine(const float *a, const float *b, int n) {
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < n; i++)
        ab += (double)a[i] * b[i], aa += (double)a[i] * a[i], bb += (double)b[i] * b[i];
    return ab / sqrt(aa * bb);
}

/* One batch of sequences seq0.. of the inputs' ids, tokens interleaved round-robin
 * (positions still rise per sequence in batch order) when interleave. */
struct batch_buf {
    int32_t tok[4 * MAX_TOK * MAX_SEQ], pos[4 * MAX_TOK * MAX_SEQ], seq[4 * MAX_TOK * MAX_SEQ];
    int32_t n;
};

static void batch_add_inputs(struct batch_buf *bb, const struct input *ins, int n_in,
                             bool interleave) {
    const int32_t *ids[N_INPUTS * MAX_SEQ];
    int n_tok[N_INPUTS * MAX_SEQ], n_seq = 0, most = 0;
    for (int i = 0; i < n_in; i++)
        for (int s = 0; s < ins[i].n_seq; s++) {
            ids[n_seq] = ins[i].ids[s];
            n_tok[n_seq] = ins[i].n_tok[s];
            most = n_tok[n_seq] > most ? n_tok[n_seq] : most;
            n_seq++;
        }
    bb->n = 0;
    for (int outer = 0; outer < (interleave ? most : n_seq); outer++)
        for (int inner = 0; inner < (interleave ? n_seq : most); inner++) {
            int s = interleave ? inner : outer, p = interleave ? outer : inner;
            if (p >= n_tok[s]) continue;
            bb->tok[bb->n] = ids[s][p], bb->pos[bb->n] = p, bb->seq[bb->n] = s;
            bb->n++;
        }
}

static int decode(struct engine_context *ctx, const struct batch_buf *bb, struct err_detail *d) {
    struct engine_batch b = {.n_tok = bb->n, .token = bb->tok, .pos = bb->pos, .seq = bb->seq};
    return engine_context_decode(ctx, &b, d);
}

/* Every input of one model against its files, then all of them in one batch. */
static void check_model(const char *name) {
    struct input ins[N_INPUTS];
    for (int i = 0; i < N_INPUTS; i++)
        if (!input_load(name, i + 1, &ins[i]))
            SKIP("../shared/models/embed/%s-I%d.* absent", name, i + 1);
    struct engine_model *m = model_load(name);
    if (!m) SKIP("../shared/models/embed/%s.gguf absent or not loadable", name);
    struct engine_context *ctx = NULL;
    struct err_detail d = {0};
    static struct batch_buf bb;
    static float alone[N_INPUTS][MAX_SEQ][N_EMBD];
    float v[N_EMBD], tok_rows[MAX_TOK][N_EMBD];
    double worst_normed = 0, worst_raw = 0, worst_cos = 1, worst_tok = 0, worst_batch = 0;
    double worst_split = 0;

    ASSERT_TRUE(engine_model_is_embedding(m));
    ASSERT_EQ(engine_model_n_embd_out(m), N_EMBD);
    ASSERT_EQ(engine_model_pooling(m), ins[0].pooling);
    int r = embed_ctx_new(m, N_INPUTS * MAX_SEQ, &ctx, &d);
    if (r < 0) {
        engine_model_free(m);
        TEST_FAIL_("%s: engine_context_new: %s", name, err_msg(&d, r));
    }
    for (int i = 0; i < N_INPUTS; i++) {
        const struct input *in = &ins[i];
        batch_add_inputs(&bb, in, 1, false);
        if ((r = decode(ctx, &bb, &d)) < 0) break;
        double amax = 0;
        for (int s = 0; s < in->n_seq; s++) amax = fmax(amax, max_abs(in->pooled[s], N_EMBD));
        for (int s = 0; s < in->n_seq && r >= 0; s++) {
            if ((r = engine_context_embeddings(ctx, s, alone[i][s], false, &d)) < 0) break;
            if ((r = engine_context_embeddings(ctx, s, v, true, &d)) < 0) break;
            worst_raw = fmax(worst_raw, max_diff(alone[i][s], in->pooled[s], N_EMBD) / amax);
            worst_normed = fmax(worst_normed, max_diff(v, in->normed[s], N_EMBD));
            worst_cos = fmin(worst_cos, cosine(v, in->normed[s], N_EMBD));
        }
        /* I2: every token's state (after the projections) against .tokens */
        if (i == 1 && r >= 0) {
            char rel[128];
            snprintf(rel, sizeof rel, "embed/%s-I2.tokens", name);
            static float ref[MAX_TOK][N_EMBD];
            if (!embd_read(rel, 0, &ref[0][0], (uint32_t)in->n_tok[0])) {
                r = ERR_INVALID;
                d = (struct err_detail){0};
                break;
            }
            double tmax = 0;
            for (int t = 0; t < in->n_tok[0] && r >= 0; t++) {
                r = engine_context_embeddings_token(ctx, t, tok_rows[t], &d);
                tmax = fmax(tmax, max_abs(ref[t], N_EMBD));
            }
            for (int t = 0; t < in->n_tok[0] && r >= 0; t++)
                worst_tok = fmax(worst_tok, max_diff(tok_rows[t], ref[t], N_EMBD) / tmax);
        }
    }
    if (r < 0) {
        engine_context_free(ctx);
        engine_model_free(m);
        TEST_FAIL_("%s: %s", name, err_msg(&d, r));
    }
    /* all the inputs at once, as separate sequences, tokens interleaved */
    batch_add_inputs(&bb, ins, N_INPUTS, true);
    r = decode(ctx, &bb, &d);
    for (int i = 0, q = 0; i < N_INPUTS && r >= 0; i++)
        for (int s = 0; s < ins[i].n_seq && r >= 0; s++, q++) {
            r = engine_context_embeddings(ctx, q, v, false, &d);
            worst_batch =
                fmax(worst_batch, max_diff(v, alone[i][s], N_EMBD) / max_abs(alone[i][s], N_EMBD));
        }
    engine_context_free(ctx);
    ctx = NULL;
    /* the same on two CPU partitions (heads and FFN units split, partial sums added) */
    if (r >= 0) r = embed_ctx_new_on(m, N_INPUTS * MAX_SEQ, 2, &ctx, &d);
    if (r >= 0) r = decode(ctx, &bb, &d);
    for (int i = 0, q = 0; i < N_INPUTS && r >= 0; i++)
        for (int s = 0; s < ins[i].n_seq && r >= 0; s++, q++) {
            r = engine_context_embeddings(ctx, q, v, false, &d);
            worst_split =
                fmax(worst_split, max_diff(v, alone[i][s], N_EMBD) / max_abs(alone[i][s], N_EMBD));
        }
    engine_context_free(ctx);
    engine_model_free(m);
    if (r < 0) TEST_FAIL_("%s: batch of all inputs: %s", name, err_msg(&d, r));
    printf("  %-17s normed max|d| %.2e  min cos %.9f  raw rel %.2e  tokens rel %.2e  batch rel "
           "%.2e  split rel %.2e\n",
           name, worst_normed, worst_cos, worst_raw, worst_tok, worst_batch, worst_split);
    ASSERT_TRUE(worst_normed <= TOL_NORMED);
    ASSERT_TRUE(worst_cos >= TOL_COSINE);
    ASSERT_TRUE(worst_raw <= TOL_RAW_REL);
    ASSERT_TRUE(worst_tok <= TOL_RAW_REL);
    ASSERT_TRUE(worst_batch <= TOL_BATCH);
    ASSERT_TRUE(worst_split <= TOL_BATCH);
}

TEST(bert_tiny) { check_model("bert-tiny"); }
TEST(nomic_bert_tiny) { check_model("nomic-bert-tiny"); }
TEST(qwen3_embed_tiny) { check_model("qwen3-embed-tiny"); }
TEST(gemma_embed_tiny) { check_model("gemma-embed-tiny"); }

/* The tokenizer of each model gives I1's ids from its text, specials included (WordPiece's
 * [CLS] … [SEP], qwen3's appended <|endoftext|>, SentencePiece's <s> … </s>). */
TEST(tokenize_i1) {
    static const char text[] = "The quick brown fox jumps over the lazy dog.";
    for (size_t k = 0; k < ARRAY_SIZE(models); k++) {
        struct input in;
        if (!input_load(models[k], 1, &in)) SKIP("../shared/models/embed absent");
        struct engine_model *m = model_load(models[k]);
        if (!m) SKIP("../shared/models/embed/%s.gguf absent", models[k]);
        struct engine_vocab *voc = NULL;
        struct err_detail d = {0};
        int32_t ids[MAX_TOK];
        size_t n = 0;
        int r = engine_vocab_load(engine_model_gguf(m), &voc, &d);
        if (r >= 0)
            r = engine_vocab_tokenize(voc, text, strlen(text),
                                      ENGINE_TOKENIZE_ADD_SPECIAL | ENGINE_TOKENIZE_PARSE_SPECIAL,
                                      ids, MAX_TOK, &n);
        engine_vocab_free(voc);
        engine_model_free(m);
        if (r < 0) TEST_FAIL_("%s: %s", models[k], err_msg(&d, r));
        ASSERT_EQ(n, in.n_tok[0]);
        for (size_t i = 0; i < n; i++) ASSERT_EQ(ids[i], in.ids[0][i]);
    }
}

/* A chat model is not an embedding model, and an embedding model has no text context. */
TEST(refusals) {
    const char *path = test_shared_path("stories260K.gguf");
    if (!path) SKIP("../shared/models/stories260K.gguf absent");
    struct engine_model *chat = NULL, *emb = NULL;
    struct engine_context *ctx = NULL;
    struct err_detail d = {0};
    ASSERT_OK(engine_model_load(path, NULL, &chat, NULL));
    ASSERT_TRUE(!engine_model_is_embedding(chat));
    ASSERT_EQ(engine_model_pooling(chat), ENGINE_POOLING_NONE);
    int r = embed_ctx_new(chat, 1, &ctx, &d);
    engine_model_free(chat);
    ASSERT_ERR(r, ERR_UNSUPPORTED);
    ASSERT_TRUE(strstr(err_msg(&d, r), "not an embedding model") != NULL);

    emb = model_load("bert-tiny");
    if (!emb) SKIP("../shared/models/embed/bert-tiny.gguf absent");
    struct engine_context_params p;
    engine_context_params_default(&p);
    d = (struct err_detail){0};
    r = engine_context_new(emb, &p, &ctx, &d);
    if (r >= 0) engine_context_free(ctx);
    ASSERT_ERR(r, ERR_UNSUPPORTED);
    ASSERT_TRUE(strstr(err_msg(&d, r), "is an embedding model") != NULL);
    /* positions past the position table */
    p.embeddings = true;
    p.n_ctx = 1024;
    r = engine_context_new(emb, &p, &ctx, &d);
    if (r >= 0) engine_context_free(ctx);
    ASSERT_ERR(r, ERR_INVALID);

    /* an embeddings context: whole inputs in one step; no logits, no pooled vector for a
     * sequence the last decode did not hold */
    ASSERT_OK_D(embed_ctx_new(emb, 2, &ctx, &d), &d);
    static struct batch_buf bb;
    bb.n = 3;
    for (int i = 0; i < 3; i++) bb.tok[i] = 101 + i, bb.pos[i] = i, bb.seq[i] = 0;
    ASSERT_OK_D(decode(ctx, &bb, &d), &d);
    float v[N_EMBD];
    ASSERT_TRUE(engine_context_logits(ctx, 0) == NULL);
    ASSERT_OK_D(engine_context_embeddings(ctx, 0, v, true, &d), &d);
    ASSERT_ERR(engine_context_embeddings(ctx, 1, v, true, &d), ERR_INVALID);
    ASSERT_ERR(engine_context_embeddings_token(ctx, 3, v, &d), ERR_INVALID);
    for (int i = 0; i < 3; i++) bb.pos[i] = 3 + i; /* continuing sequence 0 */
    r = decode(ctx, &bb, &d);
    ASSERT_ERR(r, ERR_INVALID);
    ASSERT_TRUE(strstr(err_msg(&d, r), "whole inputs") != NULL);
    bb.n = 1025;
    for (int i = 0; i < bb.n; i++) bb.tok[i] = 1996, bb.pos[i] = i % 512, bb.seq[i] = i / 512;
    ASSERT_ERR(decode(ctx, &bb, &d), ERR_INVALID);
    engine_context_free(ctx);
    engine_model_free(emb);
}

/* What engine_model_check() tells before a load. */
TEST(facts) {
    for (size_t k = 0; k < ARRAY_SIZE(models); k++) {
        char rel[128];
        snprintf(rel, sizeof rel, "embed/%s.gguf", models[k]);
        const char *path = test_shared_path(rel);
        if (!path) SKIP("../shared/models/embed absent");
        struct gguf_file *f = NULL;
        struct engine_model_facts facts;
        ASSERT_OK(gguf_open(path, &f, NULL));
        int r = engine_model_check(f, &facts, NULL);
        gguf_close(f);
        ASSERT_OK(r);
        ASSERT_TRUE(facts.embedding);
        ASSERT_EQ(facts.n_embd_out, N_EMBD);
        static const enum engine_pooling want[] = {ENGINE_POOLING_CLS, ENGINE_POOLING_MEAN,
                                                   ENGINE_POOLING_LAST, ENGINE_POOLING_MEAN};
        ASSERT_EQ(facts.pooling, want[k]);
    }
}

TEST_MAIN(T(bert_tiny), T(nomic_bert_tiny), T(qwen3_embed_tiny), T(gemma_embed_tiny),
          T(tokenize_i1), T(refusals), T(facts))
