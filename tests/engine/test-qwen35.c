/* Qwen3.5 (arch qwen35: Gated DeltaNet + gated attention) against llama.cpp's references
 * (../shared/models/hybrid/README.md): for qwen35-tiny (f32) and qwen35-tiny-f16, on P1..P3,
 * greedy ids equal and every step's logits within the README's suggested thresholds (max
 * |Δ| 0.01 for the f32 file, 0.5 for f16), P3's logits at every prompt position too; P3
 * prefilled in steps of 8 (the per-token recurrence), 64 (the chunked form) and whole gives
 * the same; two sequences decoded in one interleaved batch equal each alone. Then the
 * recurrent state's rules: a sequence truncated to 0 starts fresh, truncation elsewhere
 * inside it and a batch that rewrites its tail are refused, a copy carries the state, a
 * context shift is refused with a message, a tensor split accepted (test-hybrid-split
 * checks its outputs). And resuming in the middle
 * of P3 (DESIGN.md 3.6, blob format 3): a snapshot at 256 in RAM, a blob of [0, 256) with
 * its snapshot into a fresh context, and a chain of a rows-only blob and one with the
 * snapshot, each continuing 256..799 with the reference's prompt logits; a rows-only blob
 * where a snapshot is needed, a version-2 blob and corrupt blobs are refused and change
 * nothing. (qwen35moe-tiny needs MoE: not here.) */
#include "test.h"

#include "engine/engine.h"
#include "engine/forward.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_STEPS 24
#define MAX_PROMPT 1024
#define TOL_F32 0.01
#define TOL_F16 0.5
/* the same prompt in other steps (another delta-rule form, f32 summation order) */
#define TOL_BATCHING 2e-3

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

/* The README's LGTS v1 logits file: (n_rows, n_vocab) floats. */
static float *logits_read(const char *rel, uint32_t *n_vocab, uint32_t *n_rows, uint32_t *n_prompt,
                          uint32_t *first_pos) {
    const char *path = test_shared_path(rel);
    FILE *f = path ? fopen(path, "rb") : NULL;
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
    snprintf(rel, sizeof rel, "hybrid/%s-%s.logits", name, prompt);
    uint32_t rows = 0, np = 0, fp = 0;
    r->logits = logits_read(rel, &r->n_vocab, &rows, &np, &fp);
    return r->logits && n_gen == N_STEPS && rows == N_STEPS && np == r->n_prompt &&
           fp == r->n_prompt - 1;
}

static struct engine_model *model_open(const char *file) {
    char rel[128];
    snprintf(rel, sizeof rel, "hybrid/%s.gguf", file);
    const char *path = test_shared_path(rel);
    struct engine_model *m = NULL;
    struct err_detail d = {0};
    if (!path) return NULL;
    int r = engine_model_load(path, NULL, &m, &d);
    if (r < 0) fprintf(stderr, "load %s: %s\n", path, err_msg(&d, r));
    return m;
}

static struct engine_context *ctx_new(const struct engine_model *m, uint32_t n_seq,
                                      uint32_t n_batch, int n_threads) {
    struct engine_context_params p;
    engine_context_params_default(&p);
    p.n_ctx = 1024;
    p.n_seq = n_seq;
    p.n_batch = n_batch;
    p.n_outputs = MAX_PROMPT;
    p.n_threads = n_threads;
    p.type_k = p.type_v = KERN_TYPE_F32;
    struct engine_context *ctx = NULL;
    struct err_detail d = {0};
    int r = engine_context_new(m, &p, &ctx, &d);
    if (r < 0) fprintf(stderr, "context: %s\n", err_msg(&d, r));
    return ctx;
}

static double max_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = MAX(m, fabs((double)a[i] - b[i]));
    return m;
}

/* Decodes prompt[from, to) of seq in batches of step; every position's logits into all
 * (rows from `from` on) when all != NULL, else the last one's. */
static int decode_range(struct engine_context *ctx, int32_t seq, const int32_t *tok,
                        uint32_t from, uint32_t to, uint32_t step, float *all, uint32_t n_vocab) {
    static int32_t pos[MAX_PROMPT + N_STEPS], seqs[MAX_PROMPT + N_STEPS];
    static bool want[MAX_PROMPT + N_STEPS];
    for (uint32_t i = from; i < to; i++) pos[i] = (int32_t)i, seqs[i] = seq, want[i] = all != NULL;
    for (uint32_t p = from; p < to; p += step) {
        uint32_t n = MIN(step, to - p);
        want[p + n - 1] = true;
        struct engine_batch b = {.n_tok = (int32_t)n, .token = tok + p, .pos = pos + p,
                                 .seq = seqs + p, .want_logits = want + p};
        struct err_detail d = {0};
        int r = engine_context_decode(ctx, &b, &d);
        if (r < 0) {
            fprintf(stderr, "decode [%u, %u): %s\n", p, p + n, err_msg(&d, r));
            return r;
        }
        for (uint32_t i = 0; all && i < n; i++)
            memcpy(all + (size_t)(p - from + i) * n_vocab, engine_context_logits(ctx, (int32_t)i),
                   n_vocab * sizeof *all);
    }
    return 0;
}

/* N_STEPS greedy steps of seq from the last decode's row `row`; each step's logits into
 * got (N_STEPS, n_vocab), its ids into gen. */
static int greedy(struct engine_context *ctx, int32_t seq, uint32_t next, int32_t row,
                  uint32_t n_vocab, float *got, int32_t *gen) {
    for (int k = 0; k < N_STEPS; k++) {
        const float *l = engine_context_logits(ctx, row);
        if (!l) return ERR_INVALID;
        memcpy(got + (size_t)k * n_vocab, l, n_vocab * sizeof *got);
        gen[k] = test_top_index(l, (int32_t)n_vocab);
        int32_t p = (int32_t)next + k;
        struct engine_batch one = {.n_tok = 1, .token = &gen[k], .pos = &p, .seq = &seq};
        int r;
        if (k + 1 < N_STEPS && (r = engine_context_decode(ctx, &one, NULL)) < 0) return r;
        row = 0;
    }
    return 0;
}

/* One file against P1..P3: the prompt whole (every position's logits on P3, against the
 * prompt-logits file where there is one), then N_STEPS greedy steps; P3 again in steps of
 * 8 and 64, which must match the whole prefill. */
static void check_model(const char *file, double tol) {
    struct engine_model *m = model_open(file);
    if (!m) SKIP("../shared/models/hybrid/%s.gguf is absent", file);
    ASSERT_STREQ(m->arch_name, "qwen35");
    ASSERT_EQ(m->hp.n_layer, 8);
    ASSERT_EQ(m->hp.n_layer_rec, 6);
    for (uint32_t il = 0; il < m->hp.n_layer; il++)
        ASSERT_EQ(m->hp.layer[il].mixer, il % 4 == 3 ? ENGINE_MIXER_ATTENTION
                                                     : ENGINE_MIXER_GATED_DELTANET);
    const uint32_t V = m->hp.n_vocab;
    float *got = malloc((size_t)N_STEPS * V * sizeof *got);
    float *all = malloc((size_t)MAX_PROMPT * V * sizeof *all);
    float *all2 = malloc((size_t)MAX_PROMPT * V * sizeof *all2);
    ASSERT_TRUE(got && all && all2);
    const char *prompts[] = {"P1", "P2", "P3"};
    for (size_t pi = 0; pi < ARRAY_SIZE(prompts); pi++) {
        struct reference ref = {0};
        if (!reference_load(file, prompts[pi], &ref)) {
            free(ref.logits);
            SKIP("the %s-%s reference is absent", file, prompts[pi]);
        }
        ASSERT_EQ(ref.n_vocab, V);
        const uint32_t np = (uint32_t)ref.n_prompt;
        struct engine_context *ctx = ctx_new(m, 1, 1024, 4);
        ASSERT_TRUE(ctx != NULL);
        ASSERT_OK(decode_range(ctx, 0, ref.prompt, 0, np, np, all, V));
        int32_t gen[N_STEPS];
        ASSERT_OK(greedy(ctx, 0, np, (int32_t)np - 1, V, got, gen));
        double d_steps = max_diff(got, ref.logits, (size_t)N_STEPS * V);
        printf("  %s %s (%u ids): greedy steps max |dlogit| %.3g, nmse %.3g\n", file,
               prompts[pi], np, d_steps, test_nmse(got, ref.logits, (size_t)N_STEPS * V));
        ASSERT_TRUE(memcmp(gen, ref.gen, sizeof gen) == 0);
        ASSERT_TRUE(d_steps <= tol);
        /* every prompt position (P3 of the f32 file has them) */
        char rel[128];
        snprintf(rel, sizeof rel, "hybrid/%s-%s.prompt-logits", file, prompts[pi]);
        uint32_t pv = 0, rows = 0, pn = 0, fp = 1;
        float *pl = logits_read(rel, &pv, &rows, &pn, &fp);
        if (pl) {
            ASSERT_TRUE(pv == V && rows == np && fp == 0);
            double d_prompt = max_diff(all, pl, (size_t)np * V);
            printf("  %s %s: all %u prompt positions max |dlogit| %.3g, nmse %.3g\n", file,
                   prompts[pi], np, d_prompt, test_nmse(all, pl, (size_t)np * V));
            ASSERT_TRUE(d_prompt <= tol);
            free(pl);
        }
        engine_context_free(ctx);
        /* the long prompt in other steps: the per-token recurrence (8 < the chunked form's
         * threshold), chunks of 64, and an n_batch of 64 cutting one decode into steps */
        static const struct {
            uint32_t n_batch, step;
        } modes[] = {{1024, 8}, {1024, 64}, {64, 1024}};
        for (size_t mi = 0; pi == 2 && mi < ARRAY_SIZE(modes); mi++) {
            ctx = ctx_new(m, 1, modes[mi].n_batch, 3);
            ASSERT_TRUE(ctx != NULL);
            ASSERT_OK(decode_range(ctx, 0, ref.prompt, 0, np, modes[mi].step, all2, V));
            double d_all = max_diff(all2, all, (size_t)np * V);
            int32_t gen2[N_STEPS];
            /* the last decode's rows: every token of the last step (all wanted) */
            const uint32_t step = MIN(modes[mi].step, np),
                           n_last = np - (np - 1) / step * step;
            ASSERT_OK(greedy(ctx, 0, np, (int32_t)n_last - 1, V, got, gen2));
            double d_ref = max_diff(got, ref.logits, (size_t)N_STEPS * V);
            printf("  %s %s in steps of %u (n_batch %u): vs whole max |dlogit| %.3g, vs "
                   "reference %.3g\n", file, prompts[pi], modes[mi].step, modes[mi].n_batch,
                   d_all, d_ref);
            ASSERT_TRUE(d_all <= TOL_BATCHING);
            ASSERT_TRUE(memcmp(gen2, ref.gen, sizeof gen2) == 0);
            ASSERT_TRUE(d_ref <= tol);
            engine_context_free(ctx);
        }
        free(ref.logits);
    }
    free(got);
    free(all);
    free(all2);
    engine_model_free(m);
}

TEST(qwen35_f32) {
    check_model("qwen35-tiny", TOL_F32);
}

TEST(qwen35_f16) {
    check_model("qwen35-tiny-f16", TOL_F16);
}

/* P1 (seq 0) and P2 (seq 1) in one batch, their tokens interleaved, then both greedy in
 * batches of two: equal to each alone (and to the references). */
TEST(two_sequences) {
    struct engine_model *m = model_open("qwen35-tiny");
    if (!m) SKIP("../shared/models/hybrid/qwen35-tiny.gguf is absent");
    struct reference r[2] = {0};
    if (!reference_load("qwen35-tiny", "P1", &r[0]) ||
        !reference_load("qwen35-tiny", "P2", &r[1])) {
        free(r[0].logits), free(r[1].logits);
        engine_model_free(m);
        SKIP("the qwen35-tiny references are absent");
    }
    const uint32_t V = m->hp.n_vocab;
    struct engine_context *ctx = ctx_new(m, 2, 1024, 4);
    ASSERT_TRUE(ctx != NULL);
    static int32_t tok[2 * MAX_PROMPT], pos[2 * MAX_PROMPT], seq[2 * MAX_PROMPT];
    static bool want[2 * MAX_PROMPT];
    int32_t n = 0, last[2] = {0};
    for (size_t i = 0; i < MAX(r[0].n_prompt, r[1].n_prompt); i++)
        for (int s = 0; s < 2; s++) {
            if (i >= r[s].n_prompt) continue;
            tok[n] = r[s].prompt[i], pos[n] = (int32_t)i, seq[n] = s;
            want[n] = i + 1 == r[s].n_prompt;
            if (want[n]) last[s] = n;
            n++;
        }
    struct engine_batch b = {.n_tok = n, .token = tok, .pos = pos, .seq = seq, .want_logits = want};
    struct err_detail d = {0};
    ASSERT_OK_D(engine_context_decode(ctx, &b, &d), &d);
    ASSERT_EQ(engine_context_n_outputs(ctx), 2);
    double worst = 0;
    int32_t gen[2][N_STEPS];
    float *both = malloc((size_t)2 * N_STEPS * V * sizeof *both);
    float *alone = malloc((size_t)N_STEPS * V * sizeof *alone);
    ASSERT_TRUE(both && alone);
    int row[2] = {last[0] < last[1] ? 0 : 1, last[0] < last[1] ? 1 : 0};
    for (int k = 0; k < N_STEPS; k++) {
        int32_t t2[2], p2[2], s2[2] = {0, 1};
        for (int s = 0; s < 2; s++) {
            const float *l = engine_context_logits(ctx, row[s]);
            worst = MAX(worst, max_diff(l, r[s].logits + (size_t)k * V, V));
            memcpy(both + ((size_t)s * N_STEPS + k) * V, l, V * sizeof *both);
            gen[s][k] = t2[s] = test_top_index(l, (int32_t)V);
            p2[s] = (int32_t)r[s].n_prompt + k;
            row[s] = s;
        }
        struct engine_batch two = {.n_tok = 2, .token = t2, .pos = p2, .seq = s2,
                                   .want_logits = (const bool[]){true, true}};
        if (k + 1 < N_STEPS) ASSERT_OK(engine_context_decode(ctx, &two, NULL));
    }
    printf("  P1 and P2 in one batch: max |dlogit| %.3g\n", worst);
    ASSERT_TRUE(memcmp(gen[0], r[0].gen, sizeof gen[0]) == 0);
    ASSERT_TRUE(memcmp(gen[1], r[1].gen, sizeof gen[1]) == 0);
    ASSERT_TRUE(worst <= TOL_F32);
    engine_context_free(ctx);
    /* each alone, in its own context */
    for (int s = 0; s < 2; s++) {
        const uint32_t np = (uint32_t)r[s].n_prompt;
        int32_t g1[N_STEPS];
        ctx = ctx_new(m, 1, 1024, 4);
        ASSERT_TRUE(ctx != NULL);
        ASSERT_OK(decode_range(ctx, 0, r[s].prompt, 0, np, np, NULL, V));
        ASSERT_OK(greedy(ctx, 0, np, 0, V, alone, g1));
        double dd = max_diff(both + (size_t)s * N_STEPS * V, alone, (size_t)N_STEPS * V);
        printf("  sequence %d: in the batch of two vs alone max |dlogit| %.3g\n", s, dd);
        ASSERT_TRUE(memcmp(g1, gen[s], sizeof g1) == 0);
        ASSERT_TRUE(dd <= TOL_BATCHING);
        engine_context_free(ctx);
    }
    free(both), free(alone);
    free(r[0].logits), free(r[1].logits);
    engine_model_free(m);
}

/* The recurrent state's rules (engine/kv-cache.h): truncation to 0 restarts, elsewhere
 * inside the sequence is refused and changes nothing, a batch rewriting the tail likewise,
 * a copy carries the state, blobs, a context shift is refused, a split accepted. */
TEST(state_rules) {
    struct engine_model *m = model_open("qwen35-tiny");
    if (!m) SKIP("../shared/models/hybrid/qwen35-tiny.gguf is absent");
    struct reference r = {0};
    if (!reference_load("qwen35-tiny", "P1", &r)) {
        free(r.logits);
        engine_model_free(m);
        SKIP("the qwen35-tiny P1 reference is absent");
    }
    const uint32_t V = m->hp.n_vocab, np = (uint32_t)r.n_prompt;
    float *got = malloc((size_t)N_STEPS * V * sizeof *got);
    struct engine_context *ctx = ctx_new(m, 2, 64, 1);
    ASSERT_TRUE(got && ctx);
    /* P1 with a wrong start, then back to 0 and P1: the reference */
    int32_t junk[4] = {5, 6, 7, 8};
    ASSERT_OK(decode_range(ctx, 0, junk, 0, 4, 4, NULL, V));
    ASSERT_OK(engine_kv_seq_rm(ctx, 0, 0));
    ASSERT_EQ(engine_kv_seq_len(ctx, 0), 0);
    ASSERT_OK(decode_range(ctx, 0, r.prompt, 0, np, np, NULL, V));
    /* refused inside the sequence, accepted at its length */
    ASSERT_EQ(engine_kv_seq_rm(ctx, 0, np - 2), -ENODATA);
    ASSERT_EQ(engine_kv_seq_len(ctx, 0), np);
    ASSERT_OK(engine_kv_seq_rm(ctx, 0, np));
    int32_t p = (int32_t)np - 1, t = r.prompt[np - 1];
    struct engine_batch tail = {.n_tok = 1, .token = &t, .pos = &p};
    struct err_detail d = {0};
    ASSERT_ERR(engine_context_decode(ctx, &tail, &d), ERR_INVALID);
    printf("  rewrite refused: %s\n", d.msg);
    ASSERT_TRUE(strstr(d.msg, "recurrent state") != NULL);
    /* seq 1 = a copy of seq 0 (its state); the copy goes on as seq 0 would */
    ASSERT_EQ(engine_kv_seq_cp(ctx, 0, 1, np - 1), -ENODATA);
    ASSERT_OK(engine_kv_seq_cp(ctx, 0, 1, np));
    ASSERT_OK(engine_kv_seq_rm(ctx, 0, 0));
    /* (the logits of the last decode were seq 0's prompt end; recompute them on seq 1 by
     * stepping both from the reference's first generated token) */
    int32_t gen[N_STEPS];
    int32_t p1 = (int32_t)np, s1 = 1, t1 = r.gen[0];
    struct engine_batch one = {.n_tok = 1, .token = &t1, .pos = &p1, .seq = &s1};
    ASSERT_OK(engine_context_decode(ctx, &one, NULL));
    ASSERT_OK(greedy(ctx, 1, np + 1, 0, V, got, gen));
    ASSERT_TRUE(memcmp(gen, r.gen + 1, (N_STEPS - 1) * sizeof *gen) == 0);
    ASSERT_TRUE(max_diff(got, r.logits + V, (size_t)(N_STEPS - 1) * V) <= TOL_F32);
    /* context shift */
    ASSERT_ERR(engine_kv_seq_shift(ctx, 1, 0, 4, &d), ERR_UNSUPPORTED);
    engine_context_free(ctx);
    /* two CPU partitions */
    struct engine_context_params prm;
    engine_context_params_default(&prm);
    prm.n_ctx = 256;
    prm.n_devices = 2;
    prm.split = ENGINE_SPLIT_TENSOR;
    ctx = NULL;
    ASSERT_OK_D(engine_context_new(m, &prm, &ctx, &d), &d);
    engine_context_free(ctx);
    free(got);
    free(r.logits);
    engine_model_free(m);
}

/* Snapshots in RAM (engine_kv_snapshot): two per sequence by default, the lowest position
 * replaced; truncation goes to one, a copy takes the one at its end, and both continue as
 * the uninterrupted sequence does (P2 in the reference). */
TEST(snapshots) {
    struct engine_model *m = model_open("qwen35-tiny");
    if (!m) SKIP("../shared/models/hybrid/qwen35-tiny.gguf is absent");
    struct reference r = {0};
    if (!reference_load("qwen35-tiny", "P2", &r)) {
        free(r.logits);
        engine_model_free(m);
        SKIP("the qwen35-tiny P2 reference is absent");
    }
    const uint32_t V = m->hp.n_vocab, np = (uint32_t)r.n_prompt;
    struct engine_context *ctx = ctx_new(m, 2, 64, 1);
    float *got = malloc((size_t)N_STEPS * V * sizeof *got);
    ASSERT_TRUE(ctx && got);
    struct err_detail d = {0};
    for (uint32_t at = 10; at <= 30; at += 10) {
        ASSERT_OK(decode_range(ctx, 0, r.prompt, engine_kv_seq_len(ctx, 0), at, 10, NULL, V));
        ASSERT_OK_D(engine_kv_snapshot(ctx, 0, &d), &d);
    }
    ASSERT_OK(decode_range(ctx, 0, r.prompt, 30, 40, 10, NULL, V));
    ASSERT_EQ(engine_kv_seq_resume_pos(ctx, 0, 15), 0);  /* 10 was replaced by 30 */
    ASSERT_EQ(engine_kv_seq_resume_pos(ctx, 0, 29), 20);
    ASSERT_EQ(engine_kv_seq_resume_pos(ctx, 0, 39), 30);
    ASSERT_EQ(engine_kv_seq_resume_pos(ctx, 0, 99), 40);  /* the live state */
    ASSERT_EQ(engine_kv_seq_rm(ctx, 0, 10), -ENODATA);
    ASSERT_EQ(engine_kv_seq_cp(ctx, 0, 1, 25), -ENODATA);
    ASSERT_OK(engine_kv_seq_cp(ctx, 0, 1, 20));           /* seq 1: [0, 20) from the snapshot */
    ASSERT_OK(engine_kv_seq_rm(ctx, 0, 30));              /* seq 0: back to 30 */
    ASSERT_EQ(engine_kv_seq_resume_pos(ctx, 0, 99), 30);
    ASSERT_EQ(engine_kv_seq_resume_pos(ctx, 1, 99), 20);
    for (int32_t seq = 0; seq < 2; seq++) {
        int32_t gen[N_STEPS];
        ASSERT_OK(decode_range(ctx, seq, r.prompt, engine_kv_seq_len(ctx, seq), np, 64, NULL, V));
        ASSERT_OK(greedy(ctx, seq, np, 0, V, got, gen));
        double dd = max_diff(got, r.logits, (size_t)N_STEPS * V);
        printf("  sequence %d resumed at %s: P2's greedy steps max |dlogit| %.3g\n", seq,
               seq ? "the snapshot at 20 (a copy)" : "the snapshot at 30", dd);
        ASSERT_TRUE(memcmp(gen, r.gen, sizeof gen) == 0);
        ASSERT_TRUE(dd <= TOL_F32);
    }
    engine_context_free(ctx);
    /* none kept: a context without snapshots continues only at its end or at 0 */
    struct engine_context_params p;
    engine_context_params_default(&p);
    p.n_ctx = 64;
    p.n_rs_snapshots = 0;
    ASSERT_OK(engine_context_new(m, &p, &ctx, &d));
    ASSERT_OK(decode_range(ctx, 0, r.prompt, 0, 10, 10, NULL, V));
    ASSERT_OK(engine_kv_snapshot(ctx, 0, &d));
    ASSERT_OK(decode_range(ctx, 0, r.prompt, 10, 20, 10, NULL, V));
    ASSERT_EQ(engine_kv_seq_resume_pos(ctx, 0, 15), 0);
    engine_context_free(ctx);
    free(got), free(r.logits);
    engine_model_free(m);
}

/* ---- resuming in the middle (blob format 3) -------------------------------------------- */

#define RESUME_AT 256

/* A fingerprint of seq 0's state: length, resume point, the live recurrent state. */
static uint64_t seq_hash(const struct engine_context *ctx) {
    const struct kv_cache *kv = &ctx->kv;
    uint64_t h = engine_kv_seq_len(ctx, 0) * 1000003ull + engine_kv_seq_resume_pos(ctx, 0, ~0u);
    for (uint32_t i = 0; i < kv->rs.n_layer_rs; i++)
        h ^= hash64(kv->rs.conv[i], kv->rs.conv_floats * sizeof(float)) +
             hash64(kv->rs.ssm[i], kv->rs.ssm_floats * sizeof(float)) * (i + 1);
    return h;
}

/* Positions [RESUME_AT, np) of P3 on ctx (whose seq 0 holds [0, RESUME_AT)) against the
 * reference's logits of every prompt position. */
static double continue_p3(struct engine_context *ctx, const struct reference *r, const float *pl,
                          float *all, uint32_t V) {
    const uint32_t np = (uint32_t)r->n_prompt;
    if (decode_range(ctx, 0, r->prompt, RESUME_AT, np, 64, all, V) < 0) return 1e9;
    return max_diff(all, pl + (size_t)RESUME_AT * V, (size_t)(np - RESUME_AT) * V);
}

static uint8_t *export_new(const struct engine_context *ctx, uint32_t p0, uint32_t p1,
                           enum engine_kv_snap snap, size_t *ret_size) {
    size_t n = 0;
    struct err_detail d = {0};
    int r = engine_kv_export_snap(ctx, 0, p0, p1, snap, NULL, 0, &n, &d);
    uint8_t *b = r < 0 ? NULL : malloc(n);
    if (b && (r = engine_kv_export_snap(ctx, 0, p0, p1, snap, b, n, ret_size, &d)) < 0)
        free(b), b = NULL;
    if (!b) fprintf(stderr, "export [%u, %u): %s\n", p0, p1, err_msg(&d, r));
    return b;
}

TEST(resume_mid_prompt) {
    struct engine_model *m = model_open("qwen35-tiny");
    if (!m) SKIP("../shared/models/hybrid/qwen35-tiny.gguf is absent");
    struct reference r = {0};
    uint32_t pv = 0, rows = 0, pn = 0, fp = 1;
    float *pl = logits_read("hybrid/qwen35-tiny-P3.prompt-logits", &pv, &rows, &pn, &fp);
    if (!pl || !reference_load("qwen35-tiny", "P3", &r)) {
        free(pl), free(r.logits);
        engine_model_free(m);
        SKIP("the qwen35-tiny P3 references are absent");
    }
    const uint32_t V = m->hp.n_vocab, np = (uint32_t)r.n_prompt;
    ASSERT_TRUE(pv == V && rows == np);
    float *all = malloc((size_t)np * V * sizeof *all);
    ASSERT_TRUE(all);
    struct err_detail d = {0};

    /* in RAM: prefill [0, 256), keep a snapshot, go on to the end; back to 256 (the
     * snapshot), and 256..799 again */
    struct engine_context *a = ctx_new(m, 1, 1024, 2);
    ASSERT_TRUE(a != NULL);
    ASSERT_OK(decode_range(a, 0, r.prompt, 0, RESUME_AT, RESUME_AT, NULL, V));
    ASSERT_OK_D(engine_kv_snapshot(a, 0, &d), &d);
    double d_live = continue_p3(a, &r, pl, all, V);
    ASSERT_EQ(engine_kv_seq_resume_pos(a, 0, np - 3), RESUME_AT);
    ASSERT_EQ(engine_kv_seq_rm(a, 0, RESUME_AT + 1), -ENODATA);
    ASSERT_OK(engine_kv_seq_rm(a, 0, RESUME_AT));
    double d_ram = continue_p3(a, &r, pl, all, V);
    printf("  P3 256..799 after prefilling 0..255: max |dlogit| %.3g; again from the RAM "
           "snapshot at 256: %.3g\n", d_live, d_ram);
    ASSERT_TRUE(d_live <= TOL_F32);
    ASSERT_TRUE(d_ram <= TOL_F32);

    /* bytes: [0, 256) with the snapshot at 256 (held), into a fresh context */
    ASSERT_OK(engine_kv_seq_rm(a, 0, RESUME_AT));
    size_t n_full = 0, n_rows = 0, n_a = 0, n_b = 0;
    uint8_t *full = export_new(a, 0, RESUME_AT, ENGINE_KV_SNAP_NEED, &n_full);
    uint8_t *rows_only = export_new(a, 0, RESUME_AT, ENGINE_KV_SNAP_NONE, &n_rows);
    uint8_t *first = export_new(a, 0, 128, ENGINE_KV_SNAP_AUTO, &n_a); /* no state at 128 */
    uint8_t *second = export_new(a, 128, RESUME_AT, ENGINE_KV_SNAP_NEED, &n_b);
    ASSERT_TRUE(full && rows_only && first && second);
    struct engine_kv_info ki;
    engine_context_kv_info(a, &ki);
    struct engine_kv_blob_info bi;
    ASSERT_OK(engine_kv_blob_info(full, n_full, &bi, NULL));
    ASSERT_TRUE(bi.p0 == 0 && bi.p1 == RESUME_AT && bi.n_layer_rs == 6 && bi.snapshot);
    ASSERT_EQ(bi.snapshot_bytes, ki.rs_state_bytes);
    ASSERT_EQ(n_full, n_rows + ki.rs_state_bytes);
    ASSERT_OK(engine_kv_blob_info(first, n_a, &bi, NULL));
    ASSERT_TRUE(!bi.snapshot && bi.snapshot_bytes == 0);
    printf("  blob of [0, %d): %zu bytes, of which the recurrent snapshot %zu (%u layers)\n",
           RESUME_AT, n_full, ki.rs_state_bytes, ki.n_layer_rs);
    ASSERT_EQ(engine_kv_export_snap(a, 0, 0, 100, ENGINE_KV_SNAP_NEED, NULL, 0, &n_a, &d),
              -ENODATA);
    printf("  no state at 100: %s\n", d.msg);
    engine_context_free(a);

    struct engine_context *b = ctx_new(m, 1, 1024, 2);
    ASSERT_TRUE(b != NULL);
    uint32_t p1 = 0;
    ASSERT_OK_D(engine_kv_import(b, 0, full, n_full, r.prompt, np, &p1, &d), &d);
    ASSERT_EQ(p1, RESUME_AT);
    double d_blob = continue_p3(b, &r, pl, all, V);
    /* the chain: [0, 128) rows only, then [128, 256) with the snapshot */
    ASSERT_OK(engine_kv_seq_rm(b, 0, 0));
    ASSERT_ERR(engine_kv_import(b, 0, first, n_a, r.prompt, np, NULL, &d), ERR_STATE_LAYOUT);
    printf("  rows only where a snapshot is needed: %s\n", d.msg);
    ASSERT_TRUE(strstr(d.msg, "no recurrent snapshot at position 128") != NULL);
    ASSERT_EQ(engine_kv_seq_len(b, 0), 0);
    ASSERT_OK_D(engine_kv_import_snap(b, 0, first, n_a, r.prompt, np, ENGINE_KV_SNAP_AUTO, NULL,
                                      &d), &d);
    ASSERT_EQ(engine_kv_seq_len(b, 0), 128);
    ASSERT_EQ(engine_kv_seq_resume_pos(b, 0, 128), 0); /* rows ahead of the state */
    int32_t p128 = 128;
    struct engine_batch at128 = {.n_tok = 1, .token = &r.prompt[128], .pos = &p128};
    ASSERT_ERR(engine_context_decode(b, &at128, &d), ERR_INVALID);
    ASSERT_OK_D(engine_kv_import_snap(b, 0, second, n_b, r.prompt, np, ENGINE_KV_SNAP_AUTO,
                                      &p1, &d), &d);
    ASSERT_EQ(engine_kv_seq_resume_pos(b, 0, RESUME_AT), RESUME_AT);
    double d_chain = continue_p3(b, &r, pl, all, V);
    printf("  P3 256..799 after importing [0, 256): max |dlogit| %.3g; after the chain [0, 128) "
           "rows only + [128, 256) with the snapshot: %.3g\n", d_blob, d_chain);
    ASSERT_TRUE(d_blob <= TOL_F32);
    ASSERT_TRUE(d_chain <= TOL_F32);

    /* refusals leave the sequence as it was: rows only where needed, version 2, corrupt
     * bytes (truncations, bit flips in the header and the recurrent record, anywhere) */
    ASSERT_OK(engine_kv_seq_rm(b, 0, 0));
    ASSERT_OK(decode_range(b, 0, r.prompt, 0, 5, 5, NULL, V));
    const uint64_t before = seq_hash(b);
    ASSERT_ERR(engine_kv_import(b, 0, rows_only, n_rows, NULL, 0, NULL, &d), ERR_STATE_LAYOUT);
    uint8_t *copy = malloc(n_full);
    ASSERT_TRUE(copy);
    memcpy(copy, full, n_full);
    copy[4] = 2;
    ASSERT_ERR(engine_kv_import(b, 0, copy, n_full, NULL, 0, NULL, &d), ERR_STATE_VERSION);
    ASSERT_STREQ(d.msg, "incompatible state version (blob 2, runtime 3)");
    ASSERT_TRUE(seq_hash(b) == before);
    const size_t header = rd32(full + 8) + 8 + 4 * RESUME_AT + 24;
    uint64_t x = 7;
    int n_bad = 0;
    for (int i = 0; i < 400; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        memcpy(copy, full, n_full);
        size_t len = n_full;
        if (i < 100) {
            len = (size_t)(x >> 20) % n_full; /* truncated */
        } else {
            size_t at = (size_t)(x >> 20) % (i % 2 ? n_full : header);
            copy[at] ^= (uint8_t)(1u << ((x >> 8) & 7));
        }
        int e = engine_kv_import(b, 0, copy, len, r.prompt, np, NULL, &d);
        if (e >= 0 || (e != ERR_STATE_BAD && e != ERR_STATE_VERSION && e != ERR_STATE_MODEL &&
                       e != ERR_STATE_LAYOUT && e != ERR_STATE_TOKENS && e != ERR_STATE_CHECKSUM &&
                       e != ERR_STATE_KEY_TYPE && e != ERR_STATE_VALUE_TYPE &&
                       e != ERR_STATE_KEY_ROT && e != ERR_STATE_VALUE_ROT))
            TEST_FAIL_("corrupt blob %d (length %zu of %zu): %s", i, len, n_full, err_name(e));
        ASSERT_TRUE(seq_hash(b) == before);
        n_bad++;
    }
    printf("  %d truncated or flipped blobs refused, the sequence unchanged\n", n_bad);
    /* the recurrent record's fields: the V-head order, a layer of the list */
    const size_t rs_at = rd32(full + 8) - (48 + 4 * 6);
    memcpy(copy, full, n_full);
    copy[rs_at + 32] = 1; /* grouped: a qwen3next blob */
    ASSERT_ERR(engine_kv_import(b, 0, copy, n_full, NULL, 0, NULL, &d), ERR_STATE_LAYOUT);
    printf("  %s\n", d.msg);
    ASSERT_STREQ(d.msg, "incompatible cache layout: recurrent V-head order (blob 1, runtime 0)");
    memcpy(copy, full, n_full);
    copy[rs_at + 48] = 3; /* layer 3 is an attention layer */
    ASSERT_ERR(engine_kv_import(b, 0, copy, n_full, NULL, 0, NULL, &d), ERR_STATE_BAD);
    printf("  %s\n", d.msg);
    ASSERT_TRUE(seq_hash(b) == before);
    engine_context_free(b);
    free(copy), free(full), free(rows_only), free(first), free(second);
    free(all), free(pl), free(r.logits);
    engine_model_free(m);
}

TEST_MAIN(T(qwen35_f32), T(qwen35_f16), T(two_sequences), T(state_rules), T(snapshots),
          T(resume_mid_prompt))
