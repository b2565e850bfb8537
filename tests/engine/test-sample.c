/* Samplers: greedy, seed determinism, the masses top-k / top-p / min-p keep, temperature,
 * the empirical distribution of draws, and the penalties with their window. */
#include "test.h"

#include "engine/engine.h"

#include <errno.h>

static struct engine_sampler *sampler(struct engine_sampler_params p, int32_t n_vocab) {
    struct engine_sampler *s = NULL;
    return engine_sampler_new(&p, n_vocab, &s) < 0 ? NULL : s;
}

static struct engine_sampler_params params(float temp) {
    struct engine_sampler_params p;
    engine_sampler_params_default(&p);
    p.temperature = temp;
    return p;
}

/* logits whose softmax is 1/2, 1/4, 1/8, ... (the last two equal, so they sum to 1) */
static void halves(float *l, int n) {
    for (int i = 0; i < n; i++) l[i] = -(float)(i < n - 1 ? i + 1 : n - 1) * logf(2.0f);
}

TEST(greedy) {
    float l[6] = {0.5f, 3.0f, -1.0f, 3.0f, 2.9f, 0};
    struct engine_sampler *s = sampler(params(0), 6);
    ASSERT_TRUE(s);
    ASSERT_EQ(engine_sampler_sample(s, l, NULL), 1); /* tie between 1 and 3: the lower id */
    const int32_t *ids;
    const float *p;
    ASSERT_EQ(engine_sampler_last_probs(s, &ids, &p), 0);
    engine_sampler_free(s);
    /* top_k 1 is greedy at any temperature */
    struct engine_sampler_params pk = params(5);
    pk.top_k = 1;
    s = sampler(pk, 6);
    for (int i = 0; i < 20; i++) ASSERT_EQ(engine_sampler_sample(s, l, NULL), 1);
    engine_sampler_free(s);
}

TEST(seed_determinism) {
    enum { V = 50, N = 200 };
    float l[V];
    for (int i = 0; i < V; i++) l[i] = sinf((float)i * 1.3f) * 2;
    struct engine_sampler_params p = params(1.0f);
    p.top_p = 0.95f, p.min_p = 0.01f, p.top_k = 40, p.seed = 1234;
    int32_t a[N], b[N], c[N];
    struct engine_sampler *s1 = sampler(p, V), *s2 = sampler(p, V);
    p.seed = 1235;
    struct engine_sampler *s3 = sampler(p, V);
    ASSERT_TRUE(s1 && s2 && s3);
    for (int i = 0; i < N; i++) {
        a[i] = engine_sampler_sample(s1, l, NULL);
        b[i] = engine_sampler_sample(s2, l, NULL);
        c[i] = engine_sampler_sample(s3, l, NULL);
    }
    ASSERT_TRUE(!memcmp(a, b, sizeof a));
    ASSERT_TRUE(memcmp(a, c, sizeof a) != 0);
    /* reset re-seeds: the same sequence again */
    engine_sampler_reset(s1);
    for (int i = 0; i < N; i++) ASSERT_EQ(engine_sampler_sample(s1, l, NULL), a[i]);
    engine_sampler_free(s1);
    engine_sampler_free(s2);
    engine_sampler_free(s3);
}

TEST(top_k) {
    enum { V = 1000 };
    static float l[V];
    for (int i = 0; i < V; i++) l[i] = (float)((i * 7919) % V) / 100.0f; /* a permutation */
    struct engine_sampler_params p = params(0.7f);
    p.top_k = 5;
    struct engine_sampler *s = sampler(p, V);
    ASSERT_TRUE(s);
    int32_t tok = engine_sampler_sample(s, l, NULL);
    const int32_t *ids;
    const float *pr;
    int32_t n = engine_sampler_last_probs(s, &ids, &pr);
    ASSERT_EQ(n, 5);
    double sum = 0, z = 0;
    for (int i = 0; i < 5; i++) z += exp(l[ids[i]] / 0.7);
    for (int i = 0; i < n; i++) {
        ASSERT_TRUE(l[ids[i]] >= 9.95f - 1e-6f); /* the 5 largest: 9.95 .. 9.99 */
        ASSERT_NEAR(pr[i], exp(l[ids[i]] / 0.7) / z, 1e-5);
        sum += pr[i];
    }
    ASSERT_NEAR(sum, 1, 1e-5);
    ASSERT_TRUE(l[tok] >= 9.95f - 1e-6f);
    engine_sampler_free(s);
}

TEST(top_p) {
    enum { V = 300 };
    static float l[V];
    halves(l, V);
    struct { float top_p; int keep; } cases[] = {{0.5f, 1}, {0.7f, 2}, {0.75f, 2}, {0.76f, 3},
                                                 {0.9f, 4}, {0.999f, 10}};
    for (size_t c = 0; c < ARRAY_SIZE(cases); c++) {
        struct engine_sampler_params p = params(1.0f);
        p.top_p = cases[c].top_p;
        struct engine_sampler *s = sampler(p, V);
        ASSERT_TRUE(s);
        engine_sampler_sample(s, l, NULL);
        const int32_t *ids;
        const float *pr;
        int32_t n = engine_sampler_last_probs(s, &ids, &pr);
        ASSERT_EQ(n, cases[c].keep);
        /* the survivors are renormalized: p_i = 2^-(i+1) / (1 - 2^-n) */
        double mass = 1 - pow(0.5, n);
        for (int i = 0; i < n; i++) {
            ASSERT_EQ(ids[i], i);
            ASSERT_NEAR(pr[i], pow(0.5, i + 1) / mass, 1e-5);
        }
        engine_sampler_free(s);
    }
}

TEST(min_p) {
    enum { V = 64 };
    float l[V];
    halves(l, V);
    struct { float min_p; int keep; } cases[] = {{0.2f, 3}, {0.26f, 2}, {0.9f, 1}, {0.01f, 7}};
    for (size_t c = 0; c < ARRAY_SIZE(cases); c++) {
        struct engine_sampler_params p = params(1.0f);
        p.min_p = cases[c].min_p;
        struct engine_sampler *s = sampler(p, V);
        engine_sampler_sample(s, l, NULL);
        const int32_t *ids;
        const float *pr;
        int32_t n = engine_sampler_last_probs(s, &ids, &pr);
        ASSERT_EQ(n, cases[c].keep);
        for (int i = 0; i < n; i++) ASSERT_TRUE(pr[i] >= cases[c].min_p * pr[0] - 1e-6f);
        engine_sampler_free(s);
    }
}

/* 40000 draws at temperature 2 follow softmax(l / 2) within 0.01 per token. */
TEST(distribution) {
    float l[4] = {1.0f, 2.0f, 0.0f, 3.0f};
    struct engine_sampler_params p = params(2.0f);
    p.seed = 99;
    struct engine_sampler *s = sampler(p, 4);
    int count[4] = {0};
    for (int i = 0; i < 40000; i++) count[engine_sampler_sample(s, l, NULL)]++;
    double z = 0;
    for (int i = 0; i < 4; i++) z += exp(l[i] / 2.0);
    for (int i = 0; i < 4; i++) ASSERT_NEAR(count[i] / 40000.0, exp(l[i] / 2.0) / z, 0.01);
    engine_sampler_free(s);
}

TEST(penalties) {
    float l[4] = {2.0f, 1.0f, -1.0f, 0.0f};
    struct engine_sampler_params p = params(1.0f);
    p.repeat_penalty = 2.0f, p.frequency_penalty = 0.5f, p.presence_penalty = 0.25f;
    p.penalty_last_n = 8;
    struct engine_sampler *s = sampler(p, 4);
    engine_sampler_accept(s, 0);
    engine_sampler_accept(s, 2);
    engine_sampler_accept(s, 0);
    engine_sampler_sample(s, l, NULL);
    const int32_t *ids;
    const float *pr;
    ASSERT_EQ(engine_sampler_last_probs(s, &ids, &pr), 4);
    /* token 0: 2/2 - 2·0.5 - 0.25 = -0.25; token 2: -1·2 - 0.5 - 0.25 = -2.75 */
    double want[4] = {-0.25, 1.0, -2.75, 0.0}, z = 0;
    for (int i = 0; i < 4; i++) z += exp(want[i]);
    for (int i = 0; i < 4; i++) ASSERT_NEAR(pr[i], exp(want[ids[i]]) / z, 1e-5);
    ASSERT_TRUE(l[0] == 2.0f); /* the caller's logits are not modified */
    engine_sampler_free(s);

    /* greedy with a repetition penalty avoids the repeated token; the window forgets */
    p = params(0);
    p.repeat_penalty = 1.5f, p.penalty_last_n = 2;
    s = sampler(p, 4);
    float g[4] = {1.0f, 0.9f, 0.0f, 0.0f};
    ASSERT_EQ(engine_sampler_sample(s, g, NULL), 0);
    engine_sampler_accept(s, 0);
    ASSERT_EQ(engine_sampler_sample(s, g, NULL), 1); /* 1/1.5 < 0.9 */
    engine_sampler_accept(s, 2);
    engine_sampler_accept(s, 3); /* token 0 left the window of 2 */
    ASSERT_EQ(engine_sampler_sample(s, g, NULL), 0);
    engine_sampler_free(s);
}

/* Every sampler setting the chain has, alone and together; non-finite logits must give
 * -EDOM naming the token under each (never a draw past the candidates: ASan catches
 * that), while -inf as "ruled out" keeps working. */
static const struct setting {
    const char *name;
    float temperature, top_p, min_p, repeat_penalty, frequency_penalty, presence_penalty;
    int32_t top_k;
} settings[] = {
    {"greedy", 0, 1, 0, 1, 0, 0, 0},
    {"greedy+penalties", 0, 1, 0, 1.3f, 0.2f, 0.1f, 0},
    {"temperature", 0.8f, 1, 0, 1, 0, 0, 0},
    {"daemon defaults", 0.8f, 0.95f, 0.05f, 1, 0, 0, 40},
    {"top_k", 1.0f, 1, 0, 1, 0, 0, 5},
    {"top_k 1", 1.0f, 1, 0, 1, 0, 0, 1},
    {"top_p", 1.0f, 0.9f, 0, 1, 0, 0, 0},
    {"min_p", 1.0f, 1, 0.05f, 1, 0, 0, 0},
    {"min_p > 1", 1.0f, 1, 4.0f, 1, 0, 0, 0},
    {"penalties", 0.7f, 1, 0, 1.5f, 0.5f, 0.25f, 0},
    {"everything", 0.9f, 0.8f, 0.1f, 1.2f, 0.3f, 0.3f, 8},
    {"infinite temperature", INFINITY, 1, 0, 1, 0, 0, 0},
    {"tiny temperature", 1e-30f, 0.5f, 0, 1, 0, 0, 0},
};

static struct engine_sampler *sampler_for(const struct setting *st, int32_t n_vocab) {
    struct engine_sampler_params p = params(st->temperature);
    p.top_k = st->top_k, p.top_p = st->top_p, p.min_p = st->min_p;
    p.repeat_penalty = st->repeat_penalty, p.frequency_penalty = st->frequency_penalty;
    p.presence_penalty = st->presence_penalty, p.penalty_last_n = 16, p.seed = 5;
    struct engine_sampler *s = sampler(p, n_vocab);
    /* a history, so the penalties apply to the tokens the cases below poison */
    for (int32_t t = 0; s && t < 20; t++) engine_sampler_accept(s, t % 18);
    return s;
}

/* -EDOM with a message holding want, and an empty distribution; 0 when so */
static int expect_edom(const struct setting *st, const float *l, int32_t n_vocab,
                       const char *want) {
    struct engine_sampler *s = sampler_for(st, n_vocab);
    if (!s) return 1;
    int bad = 0;
    for (int k = 0; k < 3 && !bad; k++) { /* the same answer each time: nothing half-done */
        struct err_detail d = {0};
        const int32_t *ids;
        const float *pr;
        int r = engine_sampler_sample(s, l, &d);
        bad = r != -EDOM || !strstr(d.msg, want) || engine_sampler_last_probs(s, &ids, &pr);
        if (bad)
            fprintf(stderr, "  setting '%s': got %d (%s), want -EDOM with '%s'\n", st->name,
                    r, d.msg, want);
    }
    if (!bad) bad = engine_sampler_sample(s, l, NULL) != -EDOM; /* a NULL detail is fine */
    engine_sampler_free(s);
    return bad;
}

TEST(nonfinite_logits) {
    enum { V = 64 };
    float l[V];
    for (size_t k = 0; k < ARRAY_SIZE(settings); k++) {
        const struct setting *st = &settings[k];
        for (int i = 0; i < V; i++) l[i] = sinf((float)i);
        l[17] = NAN;
        ASSERT_EQ(expect_edom(st, l, V, "logits contain NaN at token 17: the model produced "
                                         "non-finite values"), 0);
        l[17] = 0, l[40] = INFINITY;
        ASSERT_EQ(expect_edom(st, l, V, "logits contain +inf at token 40"), 0);
        l[40] = -INFINITY, l[3] = -NAN;
        ASSERT_EQ(expect_edom(st, l, V, "NaN at token 3"), 0);
        for (int i = 0; i < V; i++) l[i] = NAN; /* what a model with NaN weights gives */
        ASSERT_EQ(expect_edom(st, l, V, "NaN at token 0"), 0);
        for (int i = 0; i < V; i++) l[i] = -INFINITY;
        ASSERT_EQ(expect_edom(st, l, V, "every logit is -inf"), 0);
    }
}

/* -inf rules a token out; huge finite logits overflow the differences; both still draw a
 * token with a finite logit, the distribution in range and summing to 1. */
TEST(ruled_out_and_extreme_logits) {
    enum { V = 64 };
    float l[V];
    for (size_t k = 0; k < ARRAY_SIZE(settings); k++) {
        const struct setting *st = &settings[k];
        for (int pattern = 0; pattern < 3; pattern++) {
            for (int i = 0; i < V; i++)
                l[i] = pattern == 0   ? (i == 9 ? 1.0f : -INFINITY)
                       : pattern == 1 ? (i % 3 ? -INFINITY : cosf((float)i))
                                      : (i % 2 ? 3e38f : -3e38f);
            struct engine_sampler *s = sampler_for(st, V);
            ASSERT_TRUE(s);
            for (int draw = 0; draw < 50; draw++) {
                struct err_detail d = {0};
                int r = engine_sampler_sample(s, l, &d);
                if (r < 0) fprintf(stderr, "  setting '%s' pattern %d: %s\n", st->name, pattern, d.msg);
                ASSERT_TRUE(r >= 0 && r < V);
                ASSERT_TRUE(isfinite(l[r]));
                if (pattern == 0) ASSERT_EQ(r, 9);
                const int32_t *ids;
                const float *pr;
                int32_t n = engine_sampler_last_probs(s, &ids, &pr);
                double sum = 0;
                for (int32_t i = 0; i < n; i++) {
                    ASSERT_TRUE(ids[i] >= 0 && ids[i] < V);
                    ASSERT_TRUE(pr[i] >= 0 && pr[i] <= 1);
                    sum += pr[i];
                }
                if (n) ASSERT_NEAR(sum, 1, 1e-5);
            }
            engine_sampler_free(s);
        }
    }
}

/* Finite parameters whose products overflow: the penalties, not the model, made the
 * value, and the message says so. */
TEST(penalties_overflow) {
    float l[4] = {-INFINITY, 1.0f, 2.0f, 0.5f};
    struct engine_sampler_params p = params(1.0f);
    p.frequency_penalty = -3e38f, p.penalty_last_n = 8; /* 2 · -3e38 = -inf */
    struct engine_sampler *s = sampler(p, 4);
    ASSERT_TRUE(s);
    for (int32_t t = 0; t < 8; t++) engine_sampler_accept(s, t % 4);
    struct err_detail d = {0};
    ASSERT_ERR(engine_sampler_sample(s, l, &d), -EDOM);
    ASSERT_TRUE(strstr(d.msg, "the penalties turned the logit -inf of token 0 into NaN"));
    engine_sampler_free(s);
    /* every token in the window pushed to -inf */
    p.frequency_penalty = 3e38f;
    s = sampler(p, 4);
    ASSERT_TRUE(s);
    for (int32_t t = 0; t < 8; t++) engine_sampler_accept(s, t % 4);
    l[0] = 0;
    ASSERT_ERR(engine_sampler_sample(s, l, &d), -EDOM);
    ASSERT_TRUE(strstr(d.msg, "every logit is -inf after the penalties"));
    engine_sampler_free(s);
}

TEST(bad_params) {
    struct engine_sampler *s = NULL;
    struct engine_sampler_params p = params(1);
    ASSERT_ERR(engine_sampler_new(&p, 0, &s), ERR_INVALID);
    p.repeat_penalty = 0;
    ASSERT_ERR(engine_sampler_new(&p, 10, &s), ERR_INVALID);
    p = params(NAN);
    ASSERT_ERR(engine_sampler_new(&p, 10, &s), ERR_INVALID);
    p = params(1);
    p.penalty_last_n = -1;
    ASSERT_ERR(engine_sampler_new(&p, 10, &s), ERR_INVALID);
    ASSERT_TRUE(s == NULL);
}

TEST_MAIN(T(greedy), T(seed_determinism), T(top_k), T(top_p), T(min_p), T(distribution),
          T(penalties), T(nonfinite_logits), T(ruled_out_and_extreme_logits),
          T(penalties_overflow), T(bad_params))
