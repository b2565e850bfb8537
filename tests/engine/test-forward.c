/* The forward pass: stories260K against its reference generations and against an
 * independent oracle (llama2.c's forward() over stories260K.bin, written here in plain
 * loops in double precision), batches of several sequences, the f16 cache, threads,
 * RoPE variants, batch validation, the warm-run binary, and dummy models of every arch
 * and weight type made by warm-mkmodel. */
#include "test.h"

#include "engine/engine.h"
#include "engine/vocab.h"

#include <errno.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- reference files ------------------------------------------------------------------ */

struct expected {
    char prompt[256];
    long steps;
    int32_t prompt_ids[64];
    size_t n_prompt;
    int32_t gen_ids[1024];
    size_t n_gen;
    char text[8192];
};

static size_t ids_read(const char *s, int32_t *ids, size_t cap) {
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

/* Parses expected/stories260K-S*.txt (see ../shared/models/README.md). */
static bool expected_load(const char *name, struct expected *e) {
    char rel[128];
    snprintf(rel, sizeof rel, "expected/%s", name);
    const char *path = test_shared_path(rel);
    if (!path) return false;
    FILE *fp = fopen(path, "r");
    if (!fp) return false;
    memset(e, 0, sizeof *e);
    static char line[16384];
    bool in_text = false;
    while (fgets(line, sizeof line, fp)) {
        if (in_text) {
            size_t have = strlen(e->text), add = MIN(strlen(line), sizeof e->text - have - 1);
            memcpy(e->text + have, line, add);
            e->text[have + add] = 0;
        } else if (!strncmp(line, "prompt: ", 8)) {
            size_t len = MIN(strcspn(line + 8, "\n"), sizeof e->prompt - 1);
            memcpy(e->prompt, line + 8, len);
            e->prompt[len] = 0;
        } else if (!strncmp(line, "steps: ", 7)) {
            e->steps = atol(line + 7);
        } else if (!strncmp(line, "prompt_ids: ", 12)) {
            e->n_prompt = ids_read(line + 12, e->prompt_ids, ARRAY_SIZE(e->prompt_ids));
        } else if (!strncmp(line, "generated_ids: ", 15)) {
            e->n_gen = ids_read(line + 15, e->gen_ids, ARRAY_SIZE(e->gen_ids));
        } else if (!strcmp(line, "text:\n")) {
            in_text = true;
        }
    }
    fclose(fp);
    /* the file ends the text with one newline */
    size_t n = strlen(e->text);
    while (n > 0 && e->text[n - 1] == '\n') e->text[--n] = 0;
    return e->n_prompt > 0 && e->steps > 0;
}

/* ---- the engine under test, greedy generation as run.c does it ------------------------- */

static struct engine_model *model_open(const char *path) {
    struct engine_model *m = NULL;
    struct err_detail d = {0};
    int r = engine_model_load(path, NULL, &m, &d);
    if (r < 0) fprintf(stderr, "load %s: %s\n", path, err_msg(&d, r));
    return m;
}

static struct engine_context *context_open(const struct engine_model *m, uint32_t n_ctx,
                                           uint32_t n_seq, uint32_t n_outputs, int threads,
                                           enum kern_type kv_type) {
    struct engine_context_params p;
    engine_context_params_default(&p);
    p.n_ctx = n_ctx;
    p.n_seq = n_seq;
    p.n_outputs = n_outputs;
    p.n_threads = threads;
    p.type_k = p.type_v = kv_type;
    struct engine_context *ctx = NULL;
    struct err_detail d = {0};
    int r = engine_context_new(m, &p, &ctx, &d);
    if (r < 0) fprintf(stderr, "context: %s\n", err_msg(&d, r));
    return ctx;
}

/* Greedy generation: the prompt in one batch, then one token per step, until steps
 * positions are done or stop_id (>= 0) is sampled. Returns the number generated. */
static size_t generate_greedy(struct engine_context *ctx, const int32_t *prompt, size_t n_prompt,
                              long steps, int32_t stop_id, int32_t *out, size_t cap) {
    int32_t n_vocab = (int32_t)engine_context_model(ctx)->hp.n_vocab;
    int32_t pos[256];
    for (size_t i = 0; i < n_prompt; i++) pos[i] = (int32_t)i;
    struct engine_batch b = {.n_tok = (int32_t)n_prompt, .token = prompt, .pos = pos};
    if (engine_context_decode(ctx, &b, NULL) < 0) return 0;
    size_t n = 0;
    while (n < cap) {
        int32_t tok = test_top_index(engine_context_logits(ctx, 0), n_vocab);
        if (tok == stop_id) break;
        out[n++] = tok;
        int32_t p = (int32_t)(n_prompt - 1 + n);
        if (p >= steps) break;
        struct engine_batch one = {.n_tok = 1, .token = &tok, .pos = &p};
        if (engine_context_decode(ctx, &one, NULL) < 0) return 0;
    }
    return n;
}

static void check_reference(const char *name, enum kern_type kv_type, int threads) {
    struct expected e;
    if (!expected_load(name, &e)) SKIP("../shared/models/expected/%s is absent", name);
    const char *path = test_shared_path("stories260K.gguf");
    if (!path) SKIP("../shared/models/stories260K.gguf is absent");
    struct engine_model *m = model_open(path);
    ASSERT_TRUE(m);
    struct engine_context *ctx = context_open(m, (uint32_t)e.steps, 1, 0, threads, kv_type);
    ASSERT_TRUE(ctx);
    static int32_t gen[1024];
    size_t n = generate_greedy(ctx, e.prompt_ids, e.n_prompt, e.steps, 1, gen, ARRAY_SIZE(gen));
    engine_context_free(ctx);
    engine_model_free(m);
    ASSERT_EQ(n, e.n_gen);
    for (size_t i = 0; i < n; i++)
        if (gen[i] != e.gen_ids[i]) TEST_FAIL_("token %zu: %d, expected %d", i, gen[i], e.gen_ids[i]);
}

TEST(stories_s0_f32) { check_reference("stories260K-S0.txt", KERN_TYPE_F32, 1); }
TEST(stories_s1_f32) { check_reference("stories260K-S1.txt", KERN_TYPE_F32, 2); }
TEST(stories_s0_f16_cache) { check_reference("stories260K-S0.txt", KERN_TYPE_F16, 2); }
TEST(stories_s1_f16_cache) { check_reference("stories260K-S1.txt", KERN_TYPE_F16, 1); }

/* ---- the oracle: llama2.c's forward() over stories260K.bin ----------------------------- */

struct oracle {
    int dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len;
    float *data;
    const float *emb, *rms_att, *wq, *wk, *wv, *wo, *rms_ffn, *w1, *w2, *w3, *rms_final;
    double *kcache, *vcache; /* (layer, seq_len, kv_dim) */
};

static bool oracle_load(struct oracle *o, const char *path) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return false;
    int32_t h[7];
    bool ok = fread(h, sizeof h, 1, fp) == 1;
    fseek(fp, 0, SEEK_END);
    long size = ftell(fp);
    fseek(fp, sizeof h, SEEK_SET);
    o->data = malloc((size_t)size);
    ok = ok && o->data && fread(o->data, 1, (size_t)size - sizeof h, fp) == (size_t)size - sizeof h;
    fclose(fp);
    if (!ok) return false;
    o->dim = h[0], o->hidden = h[1], o->n_layers = h[2], o->n_heads = h[3];
    o->n_kv_heads = h[4], o->vocab = abs(h[5]), o->seq_len = h[6];
    int hs = o->dim / o->n_heads, kv_dim = o->n_kv_heads * hs, L = o->n_layers;
    const float *p = o->data;
    o->emb = p, p += (size_t)o->vocab * o->dim;
    o->rms_att = p, p += (size_t)L * o->dim;
    o->wq = p, p += (size_t)L * o->dim * o->dim;
    o->wk = p, p += (size_t)L * kv_dim * o->dim;
    o->wv = p, p += (size_t)L * kv_dim * o->dim;
    o->wo = p, p += (size_t)L * o->dim * o->dim;
    o->rms_ffn = p, p += (size_t)L * o->dim;
    o->w1 = p, p += (size_t)L * o->hidden * o->dim;
    o->w2 = p, p += (size_t)L * o->dim * o->hidden;
    o->w3 = p, p += (size_t)L * o->hidden * o->dim;
    o->rms_final = p;
    o->kcache = calloc((size_t)L * o->seq_len * kv_dim, sizeof(double));
    o->vcache = calloc((size_t)L * o->seq_len * kv_dim, sizeof(double));
    return o->kcache && o->vcache;
}

static void oracle_free(struct oracle *o) {
    free(o->data);
    free(o->kcache);
    free(o->vcache);
}

static void o_rmsnorm(double *y, const double *x, const float *w, int n) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    ss = 1.0 / sqrt(ss / n + 1e-5);
    for (int i = 0; i < n; i++) y[i] = w[i] * (ss * x[i]);
}

/* y (d) = W (d, n) · x (n) */
static void o_matmul(double *y, const double *x, const float *w, int n, int d) {
    for (int i = 0; i < d; i++) {
        double s = 0;
        for (int j = 0; j < n; j++) s += (double)w[(size_t)i * n + j] * x[j];
        y[i] = s;
    }
}

/* logits (vocab) of token at pos, as llama2.c's forward() computes them */
static void oracle_forward(struct oracle *o, int token, int pos, double *logits) {
    int dim = o->dim, hs = dim / o->n_heads, kv_dim = o->n_kv_heads * hs;
    int kv_mul = o->n_heads / o->n_kv_heads, hid = o->hidden;
    double x[256], xb[256], xb2[256], q[256], hb[1024], hb2[1024], att[1024];
    for (int i = 0; i < dim; i++) x[i] = o->emb[(size_t)token * dim + i];
    for (int l = 0; l < o->n_layers; l++) {
        o_rmsnorm(xb, x, o->rms_att + l * dim, dim);
        double *k = o->kcache + ((size_t)l * o->seq_len + pos) * kv_dim;
        double *v = o->vcache + ((size_t)l * o->seq_len + pos) * kv_dim;
        o_matmul(q, xb, o->wq + (size_t)l * dim * dim, dim, dim);
        o_matmul(k, xb, o->wk + (size_t)l * kv_dim * dim, dim, kv_dim);
        o_matmul(v, xb, o->wv + (size_t)l * kv_dim * dim, dim, kv_dim);
        /* RoPE: adjacent pairs, frequency 10000^(-(i mod hs)/hs) */
        for (int i = 0; i < dim; i += 2) {
            double freq = 1.0 / pow(10000.0, (double)(i % hs) / hs), val = pos * freq;
            double c = cos(val), s = sin(val);
            for (int which = 0; which < (i < kv_dim ? 2 : 1); which++) {
                double *vec = which == 0 ? q : k;
                double v0 = vec[i], v1 = vec[i + 1];
                vec[i] = v0 * c - v1 * s;
                vec[i + 1] = v0 * s + v1 * c;
            }
        }
        for (int h = 0; h < o->n_heads; h++) {
            double max = -1e300, sum = 0;
            for (int t = 0; t <= pos; t++) {
                const double *kt = o->kcache + ((size_t)l * o->seq_len + t) * kv_dim + (h / kv_mul) * hs;
                double s = 0;
                for (int i = 0; i < hs; i++) s += q[h * hs + i] * kt[i];
                att[t] = s / sqrt((double)hs);
                max = att[t] > max ? att[t] : max;
            }
            for (int t = 0; t <= pos; t++) sum += att[t] = exp(att[t] - max);
            for (int i = 0; i < hs; i++) xb[h * hs + i] = 0;
            for (int t = 0; t <= pos; t++) {
                const double *vt = o->vcache + ((size_t)l * o->seq_len + t) * kv_dim + (h / kv_mul) * hs;
                for (int i = 0; i < hs; i++) xb[h * hs + i] += att[t] / sum * vt[i];
            }
        }
        o_matmul(xb2, xb, o->wo + (size_t)l * dim * dim, dim, dim);
        for (int i = 0; i < dim; i++) x[i] += xb2[i];
        o_rmsnorm(xb, x, o->rms_ffn + l * dim, dim);
        o_matmul(hb, xb, o->w1 + (size_t)l * dim * hid, dim, hid);
        o_matmul(hb2, xb, o->w3 + (size_t)l * dim * hid, dim, hid);
        for (int i = 0; i < hid; i++) hb[i] = hb[i] / (1.0 + exp(-hb[i])) * hb2[i];
        o_matmul(xb, hb, o->w2 + (size_t)l * hid * dim, hid, dim);
        for (int i = 0; i < dim; i++) x[i] += xb[i];
    }
    o_rmsnorm(xb, x, o->rms_final, dim);
    o_matmul(logits, xb, o->emb, dim, o->vocab); /* shared classifier */
}

/* Logits of every position of the S1 prompt and its first 59 generated tokens, prefilled
 * as one batch, against the oracle: within 1e-4 with an f32 cache. */
TEST(oracle_logits) {
    struct expected e;
    if (!expected_load("stories260K-S1.txt", &e)) SKIP("expected/stories260K-S1.txt is absent");
    /* test_shared_path() returns one buffer: use each path before asking for the next */
    const char *bin = test_shared_path("stories260K.bin");
    if (!bin) SKIP("stories260K.bin is absent");
    struct oracle o = {0};
    ASSERT_TRUE(oracle_load(&o, bin));
    const char *gguf = test_shared_path("stories260K.gguf");
    if (!gguf) {
        oracle_free(&o);
        SKIP("stories260K.gguf is absent");
    }
    struct engine_model *m = model_open(gguf);
    ASSERT_TRUE(m);
    ASSERT_EQ(m->hp.n_vocab, o.vocab);
    enum { N = 64 };
    int32_t tok[N], pos[N];
    bool want[N];
    for (int i = 0; i < N; i++) {
        tok[i] = i < (int)e.n_prompt ? e.prompt_ids[i] : e.gen_ids[i - e.n_prompt];
        pos[i] = i;
        want[i] = true;
    }
    for (int split = 0; split < 2; split++) {
        /* split 0: one batch of 64; split 1: batches of 7 tokens (n_batch steps) */
        struct engine_context_params p;
        engine_context_params_default(&p);
        p.n_ctx = 128, p.n_outputs = N, p.n_batch = split ? 7 : 512, p.n_threads = 2;
        p.type_k = p.type_v = KERN_TYPE_F32;
        struct engine_context *ctx = NULL;
        ASSERT_OK(engine_context_new(m, &p, &ctx, NULL));
        struct engine_batch b = {.n_tok = N, .token = tok, .pos = pos, .want_logits = want};
        ASSERT_OK(engine_context_decode(ctx, &b, NULL));
        ASSERT_EQ(engine_context_n_outputs(ctx), N);
        double max_err = 0;
        static double ref[512];
        for (int i = 0; i < N; i++) {
            oracle_forward(&o, tok[i], i, ref);
            const float *l = engine_context_logits(ctx, i);
            for (int j = 0; j < o.vocab; j++) max_err = fmax(max_err, fabs(l[j] - ref[j]));
        }
        engine_context_free(ctx);
        printf("  max |logit - oracle| over %d positions: %.3g (n_batch %u)\n", N, max_err, p.n_batch);
        ASSERT_TRUE(max_err < 1e-4);
    }
    engine_model_free(m);
    oracle_free(&o);
}

/* ---- batches of several sequences ------------------------------------------------------ */

/* A prompt prefilled alone in its own context (n_ctx cells, cache type kv, 1 thread), then
 * `steps` greedy tokens: out (steps × n_vocab) the logits before each, gen the tokens. */
static bool solo_greedy(const struct engine_model *m, uint32_t n_ctx, enum kern_type kv,
                        const int32_t *prompt, int n_prompt, int steps, float *out,
                        int32_t *gen) {
    const int32_t n_vocab = (int32_t)m->hp.n_vocab;
    struct engine_context *ctx = context_open(m, n_ctx, 1, 1, 1, kv);
    if (!ctx) return false;
    int32_t pos[8];
    for (int i = 0; i < n_prompt; i++) pos[i] = i;
    struct engine_batch b = {.n_tok = n_prompt, .token = prompt, .pos = pos};
    bool ok = n_prompt <= 8 && engine_context_decode(ctx, &b, NULL) >= 0;
    for (int k = 0; ok && k < steps; k++) {
        float *o = out + (size_t)k * n_vocab;
        memcpy(o, engine_context_logits(ctx, 0), sizeof(float) * (size_t)n_vocab);
        int32_t t = gen[k] = test_top_index(o, n_vocab), p = n_prompt + k;
        struct engine_batch one = {.n_tok = 1, .token = &t, .pos = &p};
        ok = engine_context_decode(ctx, &one, NULL) >= 0;
    }
    engine_context_free(ctx);
    return ok;
}

/* n_seq prompts (row stride `stride`) as one batch, interleaved token by token: token i of
 * each prompt that has one, in turn; a prompt's last token wants its logits. Returns the
 * batch's token count. */
static int interleave_prompts(const int32_t *prompts, int stride, const int *n_prompt, int n_seq,
                              int32_t *tok, int32_t *pos, int32_t *seq, bool *want) {
    int n = 0, longest = 0;
    for (int s = 0; s < n_seq; s++) longest = MAX(longest, n_prompt[s]);
    for (int i = 0; i < longest; i++)
        for (int s = 0; s < n_seq; s++)
            if (i < n_prompt[s]) {
                tok[n] = prompts[s * stride + i], pos[n] = i, seq[n] = s;
                want[n++] = i == n_prompt[s] - 1;
            }
    return n;
}

/* Three prompts prefilled in one interleaved batch and then decoded together give the
 * logits each gives alone, bit for bit (on 2 threads against 1): every kernel computes a
 * token's values in one order whatever else is in the batch (kernels/cpu/x86-float.h,
 * the masked last values of the SIMD activations), so greedy streams batched together
 * give the tokens they give alone even at a near-tie. */
TEST(batch_equals_solo) {
    const char *gguf = test_shared_path("stories260K.gguf");
    if (!gguf) SKIP("stories260K.gguf is absent");
    struct engine_model *m = model_open(gguf);
    ASSERT_TRUE(m);
    const int32_t prompts[3][6] = {{1, 403, 407, 261, 378, 0}, {1, 300, 301, 0, 0, 0},
                                   {1, 432, 383, 286, 261, 376}};
    const int n_prompt[3] = {5, 3, 6};
    enum { STEPS = 12 };
    int32_t n_vocab = (int32_t)m->hp.n_vocab;
    static float solo[3][STEPS][512];
    int32_t solo_tok[3][STEPS];
    ASSERT_EQ(n_vocab, 512);
    for (int s = 0; s < 3; s++)
        ASSERT_TRUE(solo_greedy(m, 64, KERN_TYPE_F32, prompts[s], n_prompt[s], STEPS,
                                &solo[s][0][0], solo_tok[s]));
    /* together: the prompts interleaved token by token, then one token per sequence */
    struct engine_context *ctx = context_open(m, 64, 3, 3, 2, KERN_TYPE_F32);
    ASSERT_TRUE(ctx);
    int32_t tok[32], pos[32], seq[32];
    bool want[32];
    int n = interleave_prompts(&prompts[0][0], 6, n_prompt, 3, tok, pos, seq, want);
    struct engine_batch b = {.n_tok = n, .token = tok, .pos = pos, .seq = seq, .want_logits = want};
    ASSERT_OK(engine_context_decode(ctx, &b, NULL));
    /* outputs come in batch order: the sequence whose last prompt token comes first */
    int order[3] = {1, 0, 2}; /* last tokens at i = 2 (s1), 4 (s0), 5 (s2) */
    double max_err = 0;
    for (int k = 0; k < STEPS; k++) {
        for (int r = 0; r < 3; r++) {
            int s = order[r];
            const float *l = engine_context_logits(ctx, r);
            ASSERT_TRUE(l);
            for (int j = 0; j < n_vocab; j++) max_err = fmax(max_err, fabs(l[j] - solo[s][k][j]));
            ASSERT_EQ(test_top_index(l, n_vocab), solo_tok[s][k]);
        }
        for (int r = 0; r < 3; r++) {
            int s = order[r];
            tok[r] = solo_tok[s][k], pos[r] = n_prompt[s] + k, seq[r] = s, want[r] = true;
        }
        struct engine_batch step = {.n_tok = 3, .token = tok, .pos = pos, .seq = seq, .want_logits = want};
        ASSERT_OK(engine_context_decode(ctx, &step, NULL));
    }
    printf("  max |batched - solo| = %.3g\n", max_err);
    ASSERT_TRUE(max_err == 0);
    for (int s = 0; s < 3; s++) ASSERT_EQ(engine_kv_seq_len(ctx, s), n_prompt[s] + STEPS);
    engine_context_free(ctx);
    engine_model_free(m);
}

/* seq_cp shares a prefix; seq_rm truncates; rewriting a position recomputes the tail. */
TEST(sequence_ops) {
    const char *gguf = test_shared_path("stories260K.gguf");
    if (!gguf) SKIP("stories260K.gguf is absent");
    struct engine_model *m = model_open(gguf);
    ASSERT_TRUE(m);
    struct engine_context *ctx = context_open(m, 32, 2, 0, 1, KERN_TYPE_F32);
    ASSERT_TRUE(ctx);
    int32_t n_vocab = (int32_t)m->hp.n_vocab;
    int32_t tok[5] = {1, 403, 407, 261, 378}, pos[5] = {0, 1, 2, 3, 4};
    struct engine_batch b = {.n_tok = 5, .token = tok, .pos = pos};
    ASSERT_OK(engine_context_decode(ctx, &b, NULL));
    static float ref[512];
    memcpy(ref, engine_context_logits(ctx, 0), sizeof(float) * (size_t)n_vocab);
    /* copy the first 4 positions to sequence 1 and feed the 5th there */
    ASSERT_OK(engine_kv_seq_cp(ctx, 0, 1, 4));
    ASSERT_EQ(engine_kv_seq_len(ctx, 1), 4);
    int32_t seq1 = 1;
    struct engine_batch b1 = {.n_tok = 1, .token = &tok[4], .pos = &pos[4], .seq = &seq1};
    ASSERT_OK(engine_context_decode(ctx, &b1, NULL));
    const float *l = engine_context_logits(ctx, 0);
    for (int j = 0; j < n_vocab; j++) ASSERT_NEAR(l[j], ref[j], 1e-5);
    /* rewrite position 4 of sequence 0 with the same token: same logits */
    ASSERT_OK(engine_kv_seq_rm(ctx, 0, 4));
    ASSERT_EQ(engine_kv_seq_len(ctx, 0), 4);
    struct engine_batch b0 = {.n_tok = 1, .token = &tok[4], .pos = &pos[4]};
    ASSERT_OK(engine_context_decode(ctx, &b0, NULL));
    l = engine_context_logits(ctx, 0);
    for (int j = 0; j < n_vocab; j++) ASSERT_NEAR(l[j], ref[j], 1e-5);
    engine_context_free(ctx);
    engine_model_free(m);
}

/* Bad batches are rejected whole, with the specific code, and change nothing. */
TEST(batch_errors) {
    const char *gguf = test_shared_path("stories260K.gguf");
    if (!gguf) SKIP("stories260K.gguf is absent");
    struct engine_model *m = model_open(gguf);
    ASSERT_TRUE(m);
    struct engine_context *ctx = context_open(m, 8, 2, 0, 1, KERN_TYPE_F16);
    ASSERT_TRUE(ctx);
    struct err_detail d = {0};
    int32_t tok[3] = {1, 403, 407}, pos[3] = {0, 1, 2}, seq[3] = {0, 0, 0};
    struct engine_batch b = {.n_tok = 3, .token = tok, .pos = pos, .seq = seq};
    ASSERT_OK(engine_context_decode(ctx, &b, &d));
    ASSERT_EQ(engine_kv_seq_len(ctx, 0), 3);

    int32_t bad_tok = 512, p3 = 3, p5 = 5, p8 = 8, s2 = 2, s1 = 1, pm = -1;
    struct engine_batch t1 = {.n_tok = 1, .token = &bad_tok, .pos = &p3};
    ASSERT_ERR(engine_context_decode(ctx, &t1, &d), ERR_TOKEN);
    struct engine_batch t2 = {.n_tok = 1, .token = tok, .pos = &p5}; /* gap after 3 cells */
    ASSERT_ERR(engine_context_decode(ctx, &t2, &d), ERR_INVALID);
    ASSERT_TRUE(strstr(d.msg, "gap") != NULL);
    struct engine_batch t3 = {.n_tok = 1, .token = tok, .pos = &p3, .seq = &s2};
    ASSERT_ERR(engine_context_decode(ctx, &t3, &d), ERR_INVALID);
    struct engine_batch t4 = {.n_tok = 1, .token = tok, .pos = &p8};
    ASSERT_ERR(engine_context_decode(ctx, &t4, &d), ERR_CTX_FULL);
    struct engine_batch t5 = {.n_tok = 1, .token = tok, .pos = &pm, .seq = &s1};
    ASSERT_ERR(engine_context_decode(ctx, &t5, &d), ERR_INVALID);
    /* positions of one sequence must be consecutive within a batch */
    int32_t tk2[2] = {5, 6}, ps2[2] = {3, 5};
    struct engine_batch t6 = {.n_tok = 2, .token = tk2, .pos = ps2};
    ASSERT_ERR(engine_context_decode(ctx, &t6, &d), ERR_INVALID);
    /* more rows of logits than the context holds (n_outputs = n_seq = 2) */
    bool all[3] = {true, true, true};
    int32_t ps3[3] = {3, 4, 5};
    struct engine_batch t7 = {.n_tok = 3, .token = tok, .pos = ps3, .want_logits = all};
    ASSERT_ERR(engine_context_decode(ctx, &t7, &d), ERR_INVALID);
    ASSERT_EQ(engine_kv_seq_len(ctx, 0), 3);
    ASSERT_EQ(engine_kv_seq_len(ctx, 1), 0);
    engine_context_free(ctx);
    engine_model_free(m);
}

/* Context creation: defaults resolved, the cache sized as documented, bad types refused. */
TEST(context_params) {
    const char *gguf = test_shared_path("stories260K.gguf");
    if (!gguf) SKIP("stories260K.gguf is absent");
    struct engine_model *m = model_open(gguf);
    ASSERT_TRUE(m);
    struct engine_context *ctx = NULL;
    struct err_detail d = {0};
    ASSERT_OK(engine_context_new(m, NULL, &ctx, &d));
    const struct engine_context_params *p = engine_context_params(ctx);
    ASSERT_EQ(p->n_ctx, 2048); /* min(n_ctx_train, 4096) */
    ASSERT_EQ(p->n_seq, 1);
    ASSERT_EQ(p->n_outputs, 1);
    ASSERT_EQ(p->type_k, KERN_TYPE_F16);
    /* 5 layers × 2048 cells × (K + V rows of 4 heads × 8 values, f16) */
    ASSERT_EQ(engine_context_kv_bytes(ctx), 5 * 2048 * 2 * 32 * 2);
    ASSERT_TRUE(engine_context_model(ctx) == m);
    ASSERT_TRUE(engine_context_logits(ctx, 0) == NULL); /* nothing decoded yet */
    engine_context_free(ctx);
    struct engine_context_params bad;
    engine_context_params_default(&bad);
    bad.type_k = KERN_TYPE_I32; /* not a cache type */
    ctx = NULL;
    ASSERT_ERR(engine_context_new(m, &bad, &ctx, &d), ERR_UNSUPPORTED);
    ASSERT_TRUE(strstr(d.msg, "i32") != NULL);
    bad.type_k = KERN_TYPE_Q8_0; /* blocks of 32 do not fit a head of 8 */
    ASSERT_ERR(engine_context_new(m, &bad, &ctx, &d), ERR_UNSUPPORTED);
    ASSERT_TRUE(strstr(d.msg, "q8_0") != NULL);
    ASSERT_TRUE(ctx == NULL);
    engine_context_params_default(&bad);
    bad.n_seq = 1u << 20;
    ASSERT_ERR(engine_context_new(m, &bad, &ctx, &d), ERR_INVALID);
    engine_model_free(m);
}

/* 1, 2 and 3 threads give the same logits (the work split does not change the sums). */
TEST(threads_agree) {
    const char *gguf = test_shared_path("stories260K.gguf");
    if (!gguf) SKIP("stories260K.gguf is absent");
    struct engine_model *m = model_open(gguf);
    ASSERT_TRUE(m);
    static float ref[20][512];
    int32_t n_vocab = (int32_t)m->hp.n_vocab;
    for (int threads = 1; threads <= 3; threads++) {
        struct engine_context *ctx = context_open(m, 32, 1, 20, threads, KERN_TYPE_F32);
        ASSERT_TRUE(ctx);
        int32_t tok[20], pos[20];
        bool want[20];
        for (int i = 0; i < 20; i++) tok[i] = i == 0 ? 1 : 260 + 7 * i, pos[i] = i, want[i] = true;
        struct engine_batch b = {.n_tok = 20, .token = tok, .pos = pos, .want_logits = want};
        ASSERT_OK(engine_context_decode(ctx, &b, NULL));
        for (int i = 0; i < 20; i++) {
            const float *l = engine_context_logits(ctx, i);
            if (threads == 1)
                memcpy(ref[i], l, sizeof(float) * (size_t)n_vocab);
            else
                for (int j = 0; j < n_vocab; j++) ASSERT_NEAR(l[j], ref[i][j], 1e-5);
        }
        engine_context_free(ctx);
    }
    engine_model_free(m);
}

/* ---- RoPE ------------------------------------------------------------------------------ */

static struct kern_rope_params rope_plain(int64_t n_dims, bool neox) {
    return (struct kern_rope_params){.n_dims = n_dims, .neox = neox, .freq_base = 10000,
                                     .freq_scale = 1, .attn_factor = 1, .beta_fast = 32,
                                     .beta_slow = 1, .n_ctx_orig = 4096};
}

TEST(rope_variants) {
    enum { HD = 16 };
    float cs[HD], cs2[HD], x[2 * HD], y[2 * HD];
    for (int i = 0; i < 2 * HD; i++) x[i] = sinf(0.37f * (float)i + 1.0f);

    /* adjacent pairs: pair i = (x[2i], x[2i+1]) rotated by pos · 10000^(-2i/HD) */
    struct kern_rope_params p = rope_plain(HD, false);
    kern_rope_cache(cs, 7, &p);
    memcpy(y, x, sizeof x);
    kern_rope_apply(y, cs, 2, HD, &p);
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < HD / 2; i++) {
            double th = 7 * pow(10000.0, -2.0 * i / HD);
            double a = x[h * HD + 2 * i], b = x[h * HD + 2 * i + 1];
            ASSERT_NEAR(y[h * HD + 2 * i], a * cos(th) - b * sin(th), 1e-5);
            ASSERT_NEAR(y[h * HD + 2 * i + 1], a * sin(th) + b * cos(th), 1e-5);
        }
    /* NeoX: pair i = (x[i], x[i + HD/2]) */
    p = rope_plain(HD, true);
    memcpy(y, x, sizeof x);
    kern_rope_apply(y, cs, 2, HD, &p);
    for (int i = 0; i < HD / 2; i++) {
        double th = 7 * pow(10000.0, -2.0 * i / HD);
        ASSERT_NEAR(y[i], x[i] * cos(th) - x[i + HD / 2] * sin(th), 1e-5);
        ASSERT_NEAR(y[i + HD / 2], x[i] * sin(th) + x[i + HD / 2] * cos(th), 1e-5);
    }
    /* partial rotation: values past n_dims pass through */
    p = rope_plain(8, false);
    kern_rope_cache(cs, 7, &p);
    memcpy(y, x, sizeof x);
    kern_rope_apply(y, cs, 1, HD, &p);
    for (int i = 8; i < HD; i++) ASSERT_NEAR(y[i], x[i], 0);
    /* linear scaling by 4: position 28 looks like position 7 */
    p = rope_plain(HD, false);
    kern_rope_cache(cs, 7, &p);
    p.freq_scale = 0.25f;
    kern_rope_cache(cs2, 28, &p);
    for (int i = 0; i < HD; i++) ASSERT_NEAR(cs2[i], cs[i], 1e-5);
    /* llama3 frequency factors divide each frequency */
    float ff[HD / 2];
    for (int i = 0; i < HD / 2; i++) ff[i] = 1.0f + (float)i;
    p = rope_plain(HD, false);
    p.freq_factors = ff;
    kern_rope_cache(cs, 5, &p);
    for (int i = 0; i < HD / 2; i++) {
        double th = 5 * pow(10000.0, -2.0 * i / HD) / ff[i];
        ASSERT_NEAR(cs[2 * i], cos(th), 1e-5);
        ASSERT_NEAR(cs[2 * i + 1], sin(th), 1e-5);
    }
    /* YaRN: the fastest pairs extrapolate (unscaled angle), the slowest interpolate
     * (angle · freq_scale); the magnitude grows by 1 + 0.1·ln(1/freq_scale) */
    p = rope_plain(HD, true);
    p.freq_scale = 0.25f, p.ext_factor = 1, p.n_ctx_orig = 64;
    kern_rope_cache(cs, 9, &p);
    double mscale = 1 + 0.1 * log(4.0);
    ASSERT_NEAR(cs[0], cos(9.0) * mscale, 1e-5);
    ASSERT_NEAR(cs[1], sin(9.0) * mscale, 1e-5);
    double th_last = 9 * pow(10000.0, -2.0 * (HD / 2 - 1) / HD) * 0.25;
    ASSERT_NEAR(cs[HD - 2], cos(th_last) * mscale, 1e-5);
    ASSERT_NEAR(cs[HD - 1], sin(th_last) * mscale, 1e-5);
}

/* kern_attn_head against a plain two-pass softmax in double: f32, f16 and bf16 caches,
 * 3 tokens seeing 1, 150 and 64 keys (several tiles), a group of 3 query heads, head
 * sizes 16 (K) and 8 (V), rows padded (strides larger than a head). */
TEST(attention_head) {
    enum { NKV = 150, HK = 16, HV = 8, G = 3, T = 3, KS = 40, VS = 24 }; /* strides in values */
    static float kf[NKV * KS], vf[NKV * VS], q[T * G * HK], out[T * G * HV];
    static kern_f16 kh[NKV * KS], vh[NKV * VS];
    static kern_bf16 kb[NKV * KS], vb[NKV * VS];
    for (int i = 0; i < NKV * KS; i++) {
        kf[i] = sinf(0.7f * (float)i) * 1.5f;
        kh[i] = kern_fp32_to_fp16(kf[i]), kb[i] = kern_fp32_to_bf16(kf[i]);
    }
    for (int i = 0; i < NKV * VS; i++) {
        vf[i] = cosf(0.3f * (float)i + 0.2f);
        vh[i] = kern_fp32_to_fp16(vf[i]), vb[i] = kern_fp32_to_bf16(vf[i]);
    }
    for (int i = 0; i < T * G * HK; i++) q[i] = sinf(1.1f * (float)i) * 0.8f;
    const int32_t n_kv[T] = {1, NKV, 64};
    static float scratch[1 << 16];
    ASSERT_TRUE(kern_attn_scratch_floats(T * G, HK, HV) <= (int64_t)ARRAY_SIZE(scratch));
    struct {
        enum kern_type t;
        const void *k, *v;
        size_t esize;
        double tol;
    } cases[] = {{KERN_TYPE_F32, kf, vf, 4, 1e-5}, {KERN_TYPE_F16, kh, vh, 2, 1e-5},
                 {KERN_TYPE_BF16, kb, vb, 2, 1e-5}};
    for (size_t c = 0; c < ARRAY_SIZE(cases); c++) {
        kern_attn_head(out, G * HV, q, G * HK, T, G, n_kv, cases[c].k, cases[c].t,
                       KS * cases[c].esize, cases[c].v, cases[c].t, VS * cases[c].esize, HK, HV,
                       0.25f, scratch);
        float kr[NKV * KS], vr[NKV * VS]; /* the cache as stored, read back */
        kern_type_traits(cases[c].t)->to_f32(kr, cases[c].k, NKV * KS);
        kern_type_traits(cases[c].t)->to_f32(vr, cases[c].v, NKV * VS);
        for (int t = 0; t < T; t++)
            for (int g = 0; g < G; g++) {
                double sc[NKV], max = -1e300, sum = 0;
                for (int j = 0; j < n_kv[t]; j++) {
                    double dot = 0;
                    for (int d = 0; d < HK; d++) dot += (double)q[(t * G + g) * HK + d] * kr[j * KS + d];
                    sc[j] = 0.25 * dot;
                    max = fmax(max, sc[j]);
                }
                for (int j = 0; j < n_kv[t]; j++) sum += sc[j] = exp(sc[j] - max);
                for (int d = 0; d < HV; d++) {
                    double want = 0;
                    for (int j = 0; j < n_kv[t]; j++) want += sc[j] / sum * vr[j * VS + d];
                    ASSERT_NEAR(out[(t * G + g) * HV + d], want, cases[c].tol);
                }
            }
    }
    /* one key: the output is that value row exactly, for every f16 bit pattern but NaN */
    static kern_f16 row[256];
    float one = 1, o[256];
    int32_t n1 = 1;
    for (int base = 0; base < 65536; base += 256) {
        for (int i = 0; i < 256; i++) row[i] = (kern_f16)(base + i);
        kern_attn_head(o, 256, &one, 1, 1, 1, &n1, &one, KERN_TYPE_F32, 4, row, KERN_TYPE_F16,
                       sizeof row, 1, 256, 1.0f, scratch);
        for (int i = 0; i < 256; i++) {
            float want = kern_fp16_to_fp32(row[i]);
            /* == also equates the -0 of a row with the +0 the sum starts at; an infinite or
             * NaN value makes the output non-finite */
            bool ok = isfinite(want) ? o[i] == want : !isfinite(o[i]);
            if (!ok) TEST_FAIL_("f16 0x%04x: %.9g, expected %.9g", base + i, o[i], want);
        }
    }
}

/* ---- the warm-run binary --------------------------------------------------------------- */

/* Runs a command, returns its stdout (malloc'd) or NULL. */
static char *run_capture(const char *cmd, int *ret_status) {
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    size_t k;
    while (buf && (k = fread(buf + n, 1, cap - n - 1, p)) > 0) {
        n += k;
        if (n + 1 == cap) buf = realloc(buf, cap *= 2);
    }
    int st = pclose(p);
    *ret_status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (buf) buf[n] = 0;
    return buf;
}

static void check_warm_run(const char *name) {
    struct expected e;
    if (!expected_load(name, &e)) SKIP("expected/%s is absent", name);
    const char *gguf = test_shared_path("stories260K.gguf");
    const char *bin = getenv("WARM_BIN");
    if (!gguf) SKIP("stories260K.gguf is absent");
    if (!bin) SKIP("WARM_BIN is not set");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s/warm-run' -m '%s' -p '%s' -n %ld -t 2 --ids --stop-on-bos "
             "--temp 0 2>/dev/null", bin, gguf, e.prompt, e.steps);
    int status;
    char *out = run_capture(cmd, &status);
    ASSERT_TRUE(out);
    if (status != 0) {
        free(out);
        TEST_FAIL_("warm-run exited with %d", status);
    }
    char *pi = strstr(out, "\nprompt_ids: "), *gi = strstr(out, "\ngenerated_ids: ");
    if (!pi || !gi) {
        free(out);
        TEST_FAIL_("no ids lines in the output");
    }
    *pi = 0; /* out is now the text */
    int32_t ids[1024];
    size_t n = ids_read(pi + 13, ids, ARRAY_SIZE(ids));
    bool prompt_ok = n == e.n_prompt && !memcmp(ids, e.prompt_ids, n * sizeof *ids);
    n = ids_read(gi + 16, ids, ARRAY_SIZE(ids));
    bool gen_ok = n == e.n_gen && !memcmp(ids, e.gen_ids, n * sizeof *ids);
    bool text_ok = strcmp(out, e.text) == 0;
    if (!text_ok) fprintf(stderr, "text:\n%s\nexpected:\n%s\n", out, e.text);
    free(out);
    ASSERT_TRUE(prompt_ok);
    ASSERT_TRUE(gen_ok);
    ASSERT_TRUE(text_ok);
}

TEST(warm_run_s0) { check_warm_run("stories260K-S0.txt"); }
TEST(warm_run_s1) { check_warm_run("stories260K-S1.txt"); }

/* The library with the real tokenizer: the prompt text becomes the reference prompt ids
 * and the generated ids detokenize to the reference text. */
TEST(library_text_s1) {
    struct expected e;
    if (!expected_load("stories260K-S1.txt", &e)) SKIP("expected/stories260K-S1.txt is absent");
    const char *gguf = test_shared_path("stories260K.gguf");
    if (!gguf) SKIP("stories260K.gguf is absent");
    struct engine_model *m = model_open(gguf);
    ASSERT_TRUE(m);
    struct engine_vocab *v = NULL;
    ASSERT_OK(engine_vocab_load(engine_model_gguf(m), &v, NULL));
    int32_t ids[1100];
    size_t n = 0;
    ASSERT_OK(engine_vocab_tokenize(v, e.prompt, strlen(e.prompt), ENGINE_TOKENIZE_ADD_SPECIAL,
                                    ids, ARRAY_SIZE(ids), &n));
    ASSERT_EQ(n, e.n_prompt);
    ASSERT_TRUE(!memcmp(ids, e.prompt_ids, n * sizeof *ids));
    struct engine_context *ctx = context_open(m, (uint32_t)e.steps, 1, 0, 2, KERN_TYPE_F16);
    ASSERT_TRUE(ctx);
    size_t n_gen = generate_greedy(ctx, ids, n, e.steps, engine_vocab_bos(v), ids + n,
                                   ARRAY_SIZE(ids) - n);
    ASSERT_EQ(n_gen, e.n_gen);
    static char text[8192];
    size_t len = 0;
    ASSERT_OK(engine_vocab_detokenize(v, ids, n + n_gen, ENGINE_DETOK_TEXT_START, text,
                                      sizeof text - 1, &len));
    text[len] = 0;
    ASSERT_STREQ(text, e.text);
    engine_context_free(ctx);
    engine_vocab_free(v);
    engine_model_free(m);
}

/* ---- dummy models from warm-mkmodel ----------------------------------------------------- */

struct arch_case {
    const char *arch;
    const char *shape; /* warm-mkmodel options */
};

static const struct arch_case arch_cases[] = {
    /* head_dim 64 != n_embd / n_head = 48; GQA 6:2 */
    {"llama", "--n-embd 384 --n-layer 2 --n-head 6 --n-head-kv 2 --head-dim 64 --n-ff 512 "
              "--n-vocab 320"},
    {"qwen2", "--n-embd 256 --n-layer 2 --n-head 4 --n-head-kv 2 --head-dim 64 --n-ff 384 "
              "--n-vocab 320 --tied"},
    {"qwen3", "--n-embd 256 --n-layer 2 --n-head 8 --n-head-kv 4 --head-dim 32 --n-ff 384 "
              "--n-vocab 320"},
};

/* Per weight type: the largest relative RMS error of the logits against the f32 model
 * (||l - l_f32|| / ||l_f32|| over 6 positions) that the type is allowed. The weights are
 * random, so this is the weights' own rounding error (and for the q-types the q8
 * rounding of the activations) carried through two layers. Measured on these shapes:
 * f16 6-7e-4, bf16 5e-3, q8_0 1.6-1.9e-2, q5_x 8-10e-2, q4_x 1.8-2.2e-1; each bound is
 * about 1.6x the largest. */
struct type_case {
    const char *name;
    double tol;
};
static const struct type_case type_cases[] = {
    {"f32", 0}, {"f16", 1.2e-3}, {"bf16", 9e-3}, {"q8_0", 3e-2},
    {"q5_1", 1.6e-1}, {"q5_0", 1.6e-1}, {"q4_1", 3.5e-1}, {"q4_0", 3.5e-1},
};

enum { DUMMY_PROMPT = 6, DUMMY_GEN = 10 };

/* Greedy tokens and the logits of every prompt position and generated step. */
static bool dummy_run(const char *path, int32_t *gen, float *logits, int32_t *ret_vocab) {
    struct engine_model *m = model_open(path);
    if (!m) return false;
    int32_t n_vocab = (int32_t)m->hp.n_vocab;
    *ret_vocab = n_vocab;
    struct engine_context *ctx = context_open(m, 32, 1, DUMMY_PROMPT, 2, KERN_TYPE_F32);
    if (!ctx) {
        engine_model_free(m);
        return false;
    }
    int32_t tok[DUMMY_PROMPT], pos[DUMMY_PROMPT];
    bool want[DUMMY_PROMPT];
    for (int i = 0; i < DUMMY_PROMPT; i++) tok[i] = (i * 37 + 1) % n_vocab, pos[i] = i, want[i] = true;
    struct engine_batch b = {.n_tok = DUMMY_PROMPT, .token = tok, .pos = pos, .want_logits = want};
    bool ok = engine_context_decode(ctx, &b, NULL) >= 0;
    for (int i = 0; ok && i < DUMMY_PROMPT; i++)
        memcpy(logits + (size_t)i * n_vocab, engine_context_logits(ctx, i), sizeof(float) * (size_t)n_vocab);
    const float *last = engine_context_logits(ctx, DUMMY_PROMPT - 1);
    for (int k = 0; ok && k < DUMMY_GEN; k++) {
        int32_t t = gen[k] = test_top_index(last, n_vocab), p = DUMMY_PROMPT + k;
        struct engine_batch one = {.n_tok = 1, .token = &t, .pos = &p};
        ok = engine_context_decode(ctx, &one, NULL) >= 0;
        last = engine_context_logits(ctx, 0);
    }
    engine_context_free(ctx);
    engine_model_free(m);
    return ok;
}

TEST(dummy_models) {
    if (!test_tool_path("warm-mkmodel")) SKIP("WARM_BIN/warm-mkmodel is not built");
    enum { MAXV = 320 };
    static float ref[DUMMY_PROMPT * MAXV], got[DUMMY_PROMPT * MAXV];
    for (size_t a = 0; a < ARRAY_SIZE(arch_cases); a++) {
        int32_t ref_gen[DUMMY_GEN], gen[DUMMY_GEN], gen2[DUMMY_GEN], n_vocab = 0;
        for (size_t t = 0; t < ARRAY_SIZE(type_cases); t++) {
            char name[64];
            snprintf(name, sizeof name, "%s-%s", arch_cases[a].arch, type_cases[t].name);
            const char *path = test_mkmodel(name, "--arch %s %s --type %s --seed 7",
                                            arch_cases[a].arch, arch_cases[a].shape,
                                            type_cases[t].name);
            if (!path)
                TEST_FAIL_("warm-mkmodel failed for %s %s", arch_cases[a].arch, type_cases[t].name);
            float *l = t == 0 ? ref : got;
            if (!dummy_run(path, t == 0 ? ref_gen : gen, l, &n_vocab))
                TEST_FAIL_("running %s failed", path);
            /* deterministic: a second run gives the same tokens and bit-identical logits */
            static float again[DUMMY_PROMPT * MAXV];
            ASSERT_TRUE(dummy_run(path, gen2, again, &n_vocab));
            ASSERT_TRUE(!memcmp(t == 0 ? ref_gen : gen, gen2, sizeof gen2));
            ASSERT_TRUE(!memcmp(l, again, sizeof(float) * DUMMY_PROMPT * (size_t)n_vocab));
            if (t == 0) continue;
            double num = 0, den = 0;
            for (size_t i = 0; i < (size_t)DUMMY_PROMPT * n_vocab; i++) {
                num += (got[i] - ref[i]) * (double)(got[i] - ref[i]);
                den += (double)ref[i] * ref[i];
            }
            double rel = sqrt(num / den);
            printf("  %-6s %-5s relative logit error vs f32: %.2e (tolerance %.1e)\n",
                   arch_cases[a].arch, type_cases[t].name, rel, type_cases[t].tol);
            if (!(rel <= type_cases[t].tol))
                TEST_FAIL_("%s %s: relative error %.3g above %.3g", arch_cases[a].arch,
                           type_cases[t].name, rel, type_cases[t].tol);
        }
    }
}

/* Every weight type the engine reads, as the rows8 kernels the engine gives its matrices
 * and the SIMD attention (head_dim 64) over an f32 and a q8_0 cache: two prompts
 * prefilled in one interleaved batch and decoded together on 2 threads give the logits
 * each gives alone on 1, bit for bit. Random weights leave many near-ties, so a kernel
 * whose sums for a token depended on the batch's other tokens would show here. */
enum { PAIR_STEPS = 6, PAIR_VOCAB = 320 };

TEST(batch_equals_solo_types) {
    if (!test_tool_path("warm-mkmodel")) SKIP("WARM_BIN/warm-mkmodel is not built");
    static const char *const types[] = {"f16",  "bf16", "q8_0", "q4_0", "q4_1",   "q5_0",
                                        "q5_1", "iq4_nl", "q2_K", "q3_K", "q4_K", "q5_K",
                                        "q6_K", "iq4_xs"};
    static const enum kern_type kvs[] = {KERN_TYPE_F32, KERN_TYPE_Q8_0};
    static const int32_t prompts[2][5] = {{1, 17, 203, 45, 99}, {1, 250, 3}};
    static const int n_prompt[2] = {5, 3};
    static float solo[2][PAIR_STEPS][PAIR_VOCAB];
    int checked = 0;
    for (size_t ti = 0; ti < ARRAY_SIZE(types); ti++) {
        char name[64];
        snprintf(name, sizeof name, "pair-%s", types[ti]);
        const char *path = test_mkmodel(name,
                                        "--arch llama --n-embd 256 --n-layer 2 --n-head 4 "
                                        "--n-head-kv 2 --head-dim 64 --n-ff 512 --n-vocab %d "
                                        "--type %s --seed 11",
                                        PAIR_VOCAB, types[ti]);
        if (!path) TEST_FAIL_("warm-mkmodel failed for %s", types[ti]);
        struct engine_model *m = model_open(path);
        ASSERT_TRUE(m);
        ASSERT_EQ((int)m->hp.n_vocab, PAIR_VOCAB);
        for (size_t ki = 0; ki < ARRAY_SIZE(kvs); ki++) {
            int32_t gen[2][PAIR_STEPS];
            for (int s = 0; s < 2; s++)
                ASSERT_TRUE(solo_greedy(m, 32, kvs[ki], prompts[s], n_prompt[s], PAIR_STEPS,
                                        &solo[s][0][0], gen[s]));
            struct engine_context *ctx = context_open(m, 32, 2, 2, 2, kvs[ki]);
            ASSERT_TRUE(ctx);
            int32_t tok[8], pos[8], seq[8];
            bool want[8];
            int n = interleave_prompts(&prompts[0][0], 5, n_prompt, 2, tok, pos, seq, want);
            struct engine_batch b = {.n_tok = n, .token = tok, .pos = pos, .seq = seq,
                                     .want_logits = want};
            ASSERT_OK(engine_context_decode(ctx, &b, NULL));
            const int order[2] = {1, 0}; /* sequence 1's last prompt token comes first */
            for (int k = 0; k < PAIR_STEPS; k++) {
                for (int r = 0; r < 2; r++) {
                    const float *l = engine_context_logits(ctx, r);
                    ASSERT_TRUE(l);
                    if (memcmp(l, solo[order[r]][k], sizeof solo[0][0]))
                        TEST_FAIL_("%s, %s cache: sequence %d step %d batched differs from alone",
                                   types[ti], kern_type_name(kvs[ki]), order[r], k);
                    tok[r] = gen[order[r]][k], pos[r] = n_prompt[order[r]] + k;
                    seq[r] = order[r], want[r] = true;
                }
                struct engine_batch step = {.n_tok = 2, .token = tok, .pos = pos, .seq = seq,
                                            .want_logits = want};
                ASSERT_OK(engine_context_decode(ctx, &step, NULL));
                checked++;
            }
            engine_context_free(ctx);
        }
        engine_model_free(m);
    }
    ASSERT_EQ(checked, (int)(ARRAY_SIZE(types) * ARRAY_SIZE(kvs)) * PAIR_STEPS);
}

TEST_MAIN(T(stories_s0_f32), T(stories_s1_f32), T(stories_s0_f16_cache), T(stories_s1_f16_cache),
          T(oracle_logits), T(batch_equals_solo), T(batch_equals_solo_types), T(sequence_ops), T(batch_errors), T(context_params),
          T(threads_agree), T(rope_variants), T(attention_head), T(library_text_s1), T(warm_run_s0), T(warm_run_s1),
          T(dummy_models))
