/* Gated DeltaNet kernels (kernels/deltanet.h): the reference recurrence against a
 * double-precision one written here from the notes (hybrid.md §A.6), the delta rule's
 * defining property, then every dispatch level's recurrent and chunked forms against the
 * reference for token counts around the chunk size (1, 3, 63, 64, 65, 200), head sizes
 * 128 (Qwen3.5), 64 and odd ones, both head maps, a state carried across calls of varying
 * lengths, head ranges, the conv, the gates and the gated norm.
 *
 * Named tolerances (normwise relative errors: per token and head for outputs, see
 * problem_errors, per head for the state; measured worst cases on AVX-512 and AVX2 in
 * brackets):
 *   TOL_SPEC   2e-6  reference (f32 state, double dots) vs the double recurrence here [4e-7]
 *   TOL_REC    2e-6  a level's recurrence vs the reference: f32 summation order [6e-7]
 *   TOL_CHUNK  1e-5  a level's chunked form vs the reference: another algorithm in f32,
 *                    the triangular solve and the products of decays, 200 tokens, keys near
 *                    one direction [2.6e-6]
 *   TOL_ELEM   2e-6  conv and gated norm, per value, relative to |want| plus (conv) the
 *                    sum of the |terms| it adds (the vector e^x within a few ulp of expf,
 *                    the summation order; SiLU's slope is at most 1.1) */
#include "test.h"

#include "kernels/deltanet.h"
#include "kernels/kernels.h"
#include "kernels/ref/deltanet.h"

#include <errno.h>

#define TOL_SPEC 2e-6
#define TOL_REC 2e-6
#define TOL_CHUNK 1e-5
#define TOL_ELEM 2e-6

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)(rng_state >> 40) * 0x1p-24f * 2.0f - 1.0f;
}

/* ‖got − want‖ / ‖want‖ over n values (floored so an all-zero want does not divide by 0) */
static double rel_err(const float *got, const float *want, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = (double)got[i] - want[i];
        num += d * d;
        den += (double)want[i] * want[i];
    }
    return sqrt(num) / (den > 1e-24 ? sqrt(den) : 1e-12);
}

/* ---- a problem: one layer's inputs for n_tok tokens and an initial state ---------------- */

struct shape_case {
    int64_t hk, hv, dk, dv;
    enum kern_dn_head_map map;
    bool hard; /* keys near one direction, β near 1, almost no decay: the chunk's
                * triangular system at its worst conditioned */
};

struct problem {
    struct kern_dn_shape p;
    int64_t n_tok, row;     /* row: floats per token of qkv, [q | k | v] as the conv gives */
    float *qkv, *g, *beta;  /* (n_tok, row), (n_tok, H_v), (n_tok, H_v) */
    float *s0;              /* (H_v, d_v, d_k) */
    int64_t state_n, out_n; /* floats of the state and of the output */
};

static void problem_free(struct problem *pr) {
    free(pr->qkv);
    free(pr->g);
    free(pr->beta);
    free(pr->s0);
}

/* Random inputs: unnormalised q, k (normalised by the kernels, l2_eps 1e-6); gates from
 * kern_dn_gates with Qwen-like ranges, one head in four with almost no decay (g ≈ −0.01)
 * so the state carries a long memory; a random initial state. */
static int problem_make(struct problem *pr, const struct shape_case *c, int64_t n_tok) {
    *pr = (struct problem){
        .p = {.n_head_k = c->hk,
              .n_head_v = c->hv,
              .head_dim_k = c->dk,
              .head_dim_v = c->dv,
              .head_map = c->map,
              .scale = 1.0f / sqrtf((float)c->dk),
              .l2_eps = 1e-6f},
        .n_tok = n_tok,
        .row = 2 * c->hk * c->dk + c->hv * c->dv,
    };
    pr->state_n = c->hv * c->dv * c->dk;
    pr->out_n = n_tok * c->hv * c->dv;
    pr->qkv = malloc_array((size_t)(n_tok * pr->row), sizeof(float));
    pr->g = malloc_array((size_t)(n_tok * c->hv), sizeof(float));
    pr->beta = malloc_array((size_t)(n_tok * c->hv), sizeof(float));
    pr->s0 = malloc_array((size_t)pr->state_n, sizeof(float));
    if (!pr->qkv || !pr->g || !pr->beta || !pr->s0) return -ENOMEM;
    for (int64_t i = 0; i < n_tok * pr->row; i++) pr->qkv[i] = frand() * 2.0f;
    float dt[64], a_log[64];
    for (int64_t h = 0; h < c->hv; h++) {
        dt[h] = frand();
        a_log[h] = h % 4 == 3 ? -0.01f : -expf(frand() * 1.2f);
    }
    for (int64_t i = 0; i < n_tok * c->hv; i++) {
        pr->g[i] = frand() * 3.0f; /* a, then g */
        pr->beta[i] = frand() * 4.0f;
    }
    kern_dn_gates(pr->g, pr->beta, pr->g, pr->beta, dt, a_log, n_tok, c->hv);
    for (int64_t i = 0; i < pr->state_n; i++) pr->s0[i] = frand() * 0.3f;
    if (c->hard) {
        const int64_t kd = c->hk * c->dk;
        for (int64_t t = 0; t < n_tok; t++)
            for (int64_t i = 0; i < kd; i++)
                pr->qkv[t * pr->row + kd + i] = pr->qkv[i] + 0.05f * frand(); /* ≈ q of token 0 */
        for (int64_t i = 0; i < n_tok * c->hv; i++) {
            pr->g[i] = -0.001f * (frand() + 1.0f);
            pr->beta[i] = 0.9f + 0.1f * frand();
        }
    }
    return 0;
}

/* The call's view of tokens [t0, t0 + n): q, k, v inside the qkv rows. */
static struct kern_dn_seq problem_seq(const struct problem *pr, float *o, int64_t t0, int64_t n) {
    const int64_t kd = pr->p.n_head_k * pr->p.head_dim_k, hv = pr->p.n_head_v;
    const float *base = pr->qkv + t0 * pr->row;
    return (struct kern_dn_seq){
        .n_tok = n,
        .q = base,
        .q_stride = pr->row,
        .k = base + kd,
        .k_stride = pr->row,
        .v = base + 2 * kd,
        .v_stride = pr->row,
        .g = pr->g + t0 * hv,
        .beta = pr->beta + t0 * hv,
        .o = o + t0 * hv * pr->p.head_dim_v,
        .o_stride = hv * pr->p.head_dim_v,
    };
}

enum form { FORM_REF, FORM_RECURRENT, FORM_CHUNKED, FORM_DELTA, FORM_COUNT };
static const char *const form_names[FORM_COUNT] = {"ref", "recurrent", "chunked", "delta"};

/* Runs form f at the current level from the initial state over heads [h0, h1), in calls of
 * the lengths in splits (0-terminated; NULL: one call), into o and state (which the
 * caller fills beforehand, so heads outside the range keep what they had). */
static int problem_run(const struct problem *pr, enum form f, float *o, float *state,
                       const int64_t *splits, int64_t h0, int64_t h1) {
    const int64_t dkv = pr->p.head_dim_v * pr->p.head_dim_k;
    memcpy(state + h0 * dkv, pr->s0 + h0 * dkv, (size_t)((h1 - h0) * dkv) * sizeof(float));
    const size_t bytes = kern_dn_scratch_bytes(&pr->p);
    char *buf = malloc(bytes + 4);
    if (!buf) return -ENOMEM;
    void *scratch = buf + 4; /* any alignment */
    int64_t t0 = 0;
    for (int i = 0; t0 < pr->n_tok; i++) {
        int64_t n = splits && splits[i] ? splits[i] : pr->n_tok - t0;
        if (n > pr->n_tok - t0) n = pr->n_tok - t0;
        const struct kern_dn_seq s = problem_seq(pr, o, t0, n);
        switch (f) {
        case FORM_REF:
            kern_ref_dn_recurrent(state, &s, &pr->p, h0, h1);
            break;
        case FORM_RECURRENT:
            kern_dn_recurrent(state, &s, &pr->p, h0, h1);
            break;
        case FORM_CHUNKED:
            kern_dn_chunked(state, &s, &pr->p, h0, h1, scratch);
            break;
        default:
            kern_dn_delta(state, &s, &pr->p, h0, h1, scratch);
            break;
        }
        t0 += n;
    }
    free(buf);
    return 0;
}

/* Worst error of outputs and state. Outputs: per token and head, ‖Δo‖ over the larger of
 * ‖o‖ and the head's rms ‖o‖ over the call's tokens (a token whose output nearly cancels
 * is held to the head's output scale, which is what the next projection sees). State:
 * per head. */
static void problem_errors(const struct problem *pr, const float *o, const float *st,
                           const float *o_want, const float *st_want, double *ret_o,
                           double *ret_s) {
    const int64_t dv = pr->p.head_dim_v, dkv = dv * pr->p.head_dim_k, hv = pr->p.n_head_v;
    double eo = 0, es = 0;
    for (int64_t h = 0; h < hv; h++) {
        double ms = 0;
        for (int64_t t = 0; t < pr->n_tok; t++)
            for (int64_t j = 0; j < dv; j++) {
                const double w = o_want[(t * hv + h) * dv + j];
                ms += w * w;
            }
        const double rms = sqrt(ms / (double)pr->n_tok);
        for (int64_t t = 0; t < pr->n_tok; t++) {
            const float *a = o + (t * hv + h) * dv, *b = o_want + (t * hv + h) * dv;
            double num = 0, den = 0;
            for (int64_t j = 0; j < dv; j++) {
                num += ((double)a[j] - b[j]) * ((double)a[j] - b[j]);
                den += (double)b[j] * b[j];
            }
            const double e = sqrt(num) / fmax(fmax(sqrt(den), rms), 1e-12);
            eo = e > eo ? e : eo;
        }
        const double e = rel_err(st + h * dkv, st_want + h * dkv, dkv);
        es = e > es ? e : es;
    }
    *ret_o = eo;
    *ret_s = es;
}

static const struct shape_case shapes[] = {
    {.hk = 2, .hv = 4, .dk = 128, .dv = 128, .map = KERN_DN_HEAD_MAP_TILED}, /* Qwen3.5 heads */
    {.hk = 2, .hv = 4, .dk = 64, .dv = 64, .map = KERN_DN_HEAD_MAP_GROUPED},
    {.hk = 1, .hv = 2, .dk = 37, .dv = 19, .map = KERN_DN_HEAD_MAP_TILED}, /* odd sizes */
    {.hk = 3, .hv = 3, .dk = 24, .dv = 72, .map = KERN_DN_HEAD_MAP_GROUPED},
    {.hk = 1, .hv = 2, .dk = 128, .dv = 128, .hard = true},
};
static const int64_t tok_counts[] = {1, 3, 63, 64, 65, 200};

/* ---- the reference against the notes, in double ---------------------------------------- */

/* The recurrence of §A.6 with S a d_k × d_v matrix in double, written independently of
 * kernels/ref: S ← e^g·S; u = Sᵀk; δ = β(v − u); S ← S + kδᵀ; o = Sᵀ(q/sqrt(d_k)), q and
 * k divided by max(‖·‖, eps). Returns the state in the stored layout (S[i][j] at
 * h·d_v·d_k + j·d_k + i). */
static void spec_run(const struct problem *pr, float *o, float *state_out) {
    const struct kern_dn_shape *p = &pr->p;
    const int64_t dk = p->head_dim_k, dv = p->head_dim_v, hv = p->n_head_v, hk = p->n_head_k;
    double *S = malloc_array((size_t)(dk * dv), sizeof(double));
    double kn[KERN_DN_MAX_HEAD_DIM], qn[KERN_DN_MAX_HEAD_DIM], u[KERN_DN_MAX_HEAD_DIM];
    if (!S) return;
    for (int64_t h = 0; h < hv; h++) {
        const int64_t kh = p->head_map == KERN_DN_HEAD_MAP_TILED ? h % hk : h / (hv / hk);
        for (int64_t i = 0; i < dk; i++)
            for (int64_t j = 0; j < dv; j++) S[i * dv + j] = pr->s0[h * dk * dv + j * dk + i];
        for (int64_t t = 0; t < pr->n_tok; t++) {
            const float *row = pr->qkv + t * pr->row;
            const float *q = row + kh * dk, *k = row + hk * dk + kh * dk,
                        *v = row + 2 * hk * dk + h * dv;
            double nq = 0, nk = 0;
            for (int64_t i = 0; i < dk; i++) nq += (double)q[i] * q[i], nk += (double)k[i] * k[i];
            nq = fmax(sqrt(nq), p->l2_eps), nk = fmax(sqrt(nk), p->l2_eps);
            for (int64_t i = 0; i < dk; i++) {
                qn[i] = q[i] / nq / sqrt((double)dk);
                kn[i] = k[i] / nk;
            }
            const double decay = exp(pr->g[t * hv + h]), beta = pr->beta[t * hv + h];
            for (int64_t i = 0; i < dk * dv; i++) S[i] *= decay;
            for (int64_t j = 0; j < dv; j++) {
                u[j] = 0;
                for (int64_t i = 0; i < dk; i++) u[j] += S[i * dv + j] * kn[i];
            }
            for (int64_t i = 0; i < dk; i++)
                for (int64_t j = 0; j < dv; j++) S[i * dv + j] += kn[i] * beta * (v[j] - u[j]);
            for (int64_t j = 0; j < dv; j++) {
                double acc = 0;
                for (int64_t i = 0; i < dk; i++) acc += S[i * dv + j] * qn[i];
                o[(t * hv + h) * dv + j] = (float)acc;
            }
        }
        for (int64_t i = 0; i < dk; i++)
            for (int64_t j = 0; j < dv; j++)
                state_out[h * dk * dv + j * dk + i] = (float)S[i * dv + j];
    }
    free(S);
}

TEST(ref_vs_notes) {
    for (size_t si = 0; si < ARRAY_SIZE(shapes); si++) {
        struct problem pr;
        ASSERT_OK(problem_make(&pr, &shapes[si], 65));
        float *o = calloc_array((size_t)pr.out_n, sizeof(float));
        float *ow = calloc_array((size_t)pr.out_n, sizeof(float));
        float *st = calloc_array((size_t)pr.state_n, sizeof(float));
        float *sw = calloc_array((size_t)pr.state_n, sizeof(float));
        ASSERT_TRUE(o && ow && st && sw);
        spec_run(&pr, ow, sw);
        ASSERT_OK(problem_run(&pr, FORM_REF, o, st, NULL, 0, pr.p.n_head_v));
        double eo, es;
        problem_errors(&pr, o, st, ow, sw, &eo, &es);
        printf("  ref vs double, d_k %lld d_v %lld: output %.2e, state %.2e\n",
               (long long)pr.p.head_dim_k, (long long)pr.p.head_dim_v, eo, es);
        if (eo > TOL_SPEC || es > TOL_SPEC)
            TEST_FAIL_("shape %zu: output error %.3g, state error %.3g > %g", si, eo, es, TOL_SPEC);
        free(o), free(ow), free(st), free(sw);
        problem_free(&pr);
    }
}

/* ---- levels ------------------------------------------------------------------------------ */

/* Switches to each level this CPU has in turn and calls fn(level); restores the level. */
static int for_each_level(void (*fn)(const char *level)) {
    const char *saved = kern_cpu()->level;
    int n = 0;
    for (int i = 0; kern_level_name(i); i++) {
        if (kern_set_level(kern_level_name(i)) < 0) continue;
        n++;
        fn(kern_level_name(i));
        if (test_failed_) break;
    }
    kern_set_level(saved);
    return n;
}

/* The delta rule stores v under key k: from a zero state with β = 1 and no decay, a query
 * equal to the key reads back scale·v, and a second value under the same key replaces the
 * first. With g = ln(1/2) the old memory is halved before the write. */
static void semantics_at(const char *level) {
    enum { D = 40, HV = 2 };
    float qkv[2][2 * D + HV * D], g[2 * HV], beta[2 * HV], o[2 * HV * D];
    float state[HV * D * D] = {0};
    static char scratch[1 << 17];
    const struct kern_dn_shape p = {.n_head_k = 1,
                                    .n_head_v = HV,
                                    .head_dim_k = D,
                                    .head_dim_v = D,
                                    .scale = 0.5f,
                                    .l2_eps = 1e-6f};
    ASSERT_TRUE(kern_dn_scratch_bytes(&p) <= sizeof(scratch));
    for (int f = FORM_RECURRENT; f <= FORM_CHUNKED; f++) {
        memset(state, 0, sizeof(state));
        for (int t = 0; t < 2; t++) {
            for (int i = 0; i < D; i++) qkv[t][i] = qkv[t][D + i] = (float)(i % 7) - 2.5f;
            for (int i = 0; i < HV * D; i++) qkv[t][2 * D + i] = frand();
            for (int h = 0; h < HV; h++) {
                g[t * HV + h] = h == 0 ? 0.0f : logf(0.5f);
                beta[t * HV + h] = 1.0f;
            }
        }
        const struct kern_dn_seq s = {.n_tok = 2,
                                      .q = qkv[0],
                                      .q_stride = 2 * D + HV * D,
                                      .k = qkv[0] + D,
                                      .k_stride = 2 * D + HV * D,
                                      .v = qkv[0] + 2 * D,
                                      .v_stride = 2 * D + HV * D,
                                      .g = g,
                                      .beta = beta,
                                      .o = o,
                                      .o_stride = HV * D};
        if (f == FORM_RECURRENT)
            kern_dn_recurrent(state, &s, &p, 0, HV);
        else
            kern_dn_chunked(state, &s, &p, 0, HV, scratch);
        for (int t = 0; t < 2; t++)
            for (int h = 0; h < HV; h++)
                for (int j = 0; j < D; j++) {
                    /* head 0: β = 1 overwrites; head 1: the old value is halved, then the
                     * write δ = v − S_decayedᵀk replaces it all the same */
                    const float want = 0.5f * qkv[t][2 * D + h * D + j];
                    const float got = o[(t * HV + h) * D + j];
                    if (!(fabsf(got - want) <= 2e-6f))
                        TEST_FAIL_("level %s %s: token %d head %d o[%d] = %.9g, want %.9g", level,
                                   form_names[f], t, h, j, (double)got, (double)want);
                }
    }
}

TEST(delta_rule_semantics) { ASSERT_TRUE(for_each_level(semantics_at) >= 1); }

/* Worst errors per level, printed once per level at the end of levels_vs_ref. */
static double worst[FORM_COUNT][2];

static void levels_vs_ref_at(const char *level) {
    memset(worst, 0, sizeof(worst));
    for (size_t si = 0; si < ARRAY_SIZE(shapes); si++)
        for (size_t ti = 0; ti < ARRAY_SIZE(tok_counts); ti++) {
            struct problem pr;
            ASSERT_OK(problem_make(&pr, &shapes[si], tok_counts[ti]));
            const int64_t hv = pr.p.n_head_v;
            float *ow = calloc_array((size_t)pr.out_n, sizeof(float));
            float *sw = calloc_array((size_t)pr.state_n, sizeof(float));
            float *o = calloc_array((size_t)pr.out_n, sizeof(float));
            float *st = calloc_array((size_t)pr.state_n, sizeof(float));
            ASSERT_TRUE(ow && sw && o && st);
            ASSERT_OK(problem_run(&pr, FORM_REF, ow, sw, NULL, 0, hv));
            for (int f = FORM_RECURRENT; f < FORM_COUNT; f++) {
                ASSERT_OK(problem_run(&pr, (enum form)f, o, st, NULL, 0, hv));
                double eo, es;
                problem_errors(&pr, o, st, ow, sw, &eo, &es);
                worst[f][0] = fmax(worst[f][0], eo);
                worst[f][1] = fmax(worst[f][1], es);
                const double tol =
                    f == FORM_RECURRENT || (f == FORM_DELTA && pr.n_tok < KERN_DN_CHUNKED_MIN_TOK)
                        ? TOL_REC
                        : TOL_CHUNK;
                if (!(eo <= tol && es <= tol))
                    TEST_FAIL_("level %s (%s), %s, d_k %lld d_v %lld H %lld/%lld, %lld tokens: "
                               "output error %.3g, state error %.3g > %g",
                               level, kern_dn_level(), form_names[f], (long long)pr.p.head_dim_k,
                               (long long)pr.p.head_dim_v, (long long)pr.p.n_head_k, (long long)hv,
                               (long long)pr.n_tok, eo, es, tol);
            }
            free(ow), free(sw), free(o), free(st);
            problem_free(&pr);
        }
    printf("  level %-10s (bodies %-6s) worst vs ref: recurrent %.2e / %.2e, chunked %.2e / "
           "%.2e (output / state)\n",
           level, kern_dn_level(), worst[FORM_RECURRENT][0], worst[FORM_RECURRENT][1],
           worst[FORM_CHUNKED][0], worst[FORM_CHUNKED][1]);
}

TEST(levels_vs_ref) { ASSERT_TRUE(for_each_level(levels_vs_ref_at) >= 1); }

/* A 200-token sequence in calls of varying lengths (some below the chunk, some across it)
 * ends in the state and outputs of one reference call. */
static void split_calls_at(const char *level) {
    static const int64_t splits[][8] = {{1, 63, 2, 64, 65, 5, 0}, {3, 1, 1, 130, 0}, {64, 0}};
    for (size_t si = 0; si < 2; si++) {
        struct problem pr;
        ASSERT_OK(problem_make(&pr, &shapes[si], 200));
        const int64_t hv = pr.p.n_head_v;
        float *ow = calloc_array((size_t)pr.out_n, sizeof(float));
        float *sw = calloc_array((size_t)pr.state_n, sizeof(float));
        float *o = calloc_array((size_t)pr.out_n, sizeof(float));
        float *st = calloc_array((size_t)pr.state_n, sizeof(float));
        ASSERT_TRUE(ow && sw && o && st);
        ASSERT_OK(problem_run(&pr, FORM_REF, ow, sw, NULL, 0, hv));
        for (size_t k = 0; k < ARRAY_SIZE(splits); k++)
            for (int f = FORM_RECURRENT; f < FORM_COUNT; f++) {
                memset(o, 0, (size_t)pr.out_n * sizeof(float));
                ASSERT_OK(problem_run(&pr, (enum form)f, o, st, splits[k], 0, hv));
                double eo, es;
                problem_errors(&pr, o, st, ow, sw, &eo, &es);
                const double tol = f == FORM_RECURRENT ? TOL_REC : TOL_CHUNK;
                if (!(eo <= tol && es <= tol))
                    TEST_FAIL_("level %s, %s, split %zu, d_k %lld: output error %.3g, state "
                               "error %.3g > %g",
                               level, form_names[f], k, (long long)pr.p.head_dim_k, eo, es, tol);
            }
        free(ow), free(sw), free(o), free(st);
        problem_free(&pr);
    }
}

TEST(state_across_calls) { ASSERT_TRUE(for_each_level(split_calls_at) >= 1); }

/* Heads [0, 1) then [1, H_v) give the bits of one call over all heads, and a call leaves
 * the heads outside its range alone. */
static void head_ranges_at(const char *level) {
    struct problem pr;
    ASSERT_OK(problem_make(&pr, &shapes[0], 70));
    const int64_t hv = pr.p.n_head_v, dv = pr.p.head_dim_v;
    float *o1 = calloc_array((size_t)pr.out_n, sizeof(float));
    float *s1 = calloc_array((size_t)pr.state_n, sizeof(float));
    float *o2 = calloc_array((size_t)pr.out_n, sizeof(float));
    float *s2 = calloc_array((size_t)pr.state_n, sizeof(float));
    ASSERT_TRUE(o1 && s1 && o2 && s2);
    for (int f = FORM_RECURRENT; f <= FORM_CHUNKED; f++) {
        ASSERT_OK(problem_run(&pr, (enum form)f, o1, s1, NULL, 0, hv));
        for (int64_t i = 0; i < pr.out_n; i++) o2[i] = -7.0f;
        for (int64_t i = 0; i < pr.state_n; i++) s2[i] = -7.0f;
        ASSERT_OK(problem_run(&pr, (enum form)f, o2, s2, NULL, 1, hv - 1));
        for (int64_t t = 0; t < pr.n_tok; t++) /* heads 0 and hv − 1 untouched */
            ASSERT_TRUE(o2[t * hv * dv] == -7.0f && o2[(t * hv + hv - 1) * dv + dv - 1] == -7.0f);
        ASSERT_TRUE(s2[0] == -7.0f && s2[pr.state_n - 1] == -7.0f);
        ASSERT_OK(problem_run(&pr, (enum form)f, o2, s2, NULL, 0, 1));
        ASSERT_OK(problem_run(&pr, (enum form)f, o2, s2, NULL, hv - 1, hv));
        if (memcmp(o1, o2, (size_t)pr.out_n * sizeof(float)) != 0 ||
            memcmp(s1, s2, (size_t)pr.state_n * sizeof(float)) != 0)
            TEST_FAIL_("level %s, %s: head ranges differ from one call", level, form_names[f]);
    }
    free(o1), free(s1), free(o2), free(s2);
    problem_free(&pr);
}

TEST(head_ranges) { ASSERT_TRUE(for_each_level(head_ranges_at) >= 1); }

/* The head map: H_k = 2, H_v = 6 equals a problem whose keys and queries are repeated per
 * value head (H_k = H_v) in the order the map names: tiled h mod H_k, grouped h / 3. */
static void head_map_at(const char *level) {
    for (int map = 0; map < KERN_DN_HEAD_MAP_COUNT; map++) {
        const struct shape_case c = {
            .hk = 2, .hv = 6, .dk = 32, .dv = 16, .map = (enum kern_dn_head_map)map};
        struct problem pr, px;
        ASSERT_OK(problem_make(&pr, &c, 20));
        const struct shape_case cx = {.hk = 6, .hv = 6, .dk = 32, .dv = 16};
        ASSERT_OK(problem_make(&px, &cx, 20));
        memcpy(px.g, pr.g, 20 * 6 * sizeof(float));
        memcpy(px.beta, pr.beta, 20 * 6 * sizeof(float));
        memcpy(px.s0, pr.s0, (size_t)pr.state_n * sizeof(float));
        for (int64_t t = 0; t < 20; t++)
            for (int64_t h = 0; h < 6; h++) {
                const int64_t kh = map == KERN_DN_HEAD_MAP_TILED ? h % 2 : h / 3;
                const float *src = pr.qkv + t * pr.row;
                float *dst = px.qkv + t * px.row;
                memcpy(dst + h * 32, src + kh * 32, 32 * sizeof(float));                   /* q */
                memcpy(dst + 6 * 32 + h * 32, src + 2 * 32 + kh * 32, 32 * sizeof(float)); /* k */
                memcpy(dst + 12 * 32 + h * 16, src + 4 * 32 + h * 16, 16 * sizeof(float)); /* v */
            }
        float o1[20 * 6 * 16], o2[20 * 6 * 16], s1[6 * 32 * 16], s2[6 * 32 * 16];
        for (int f = FORM_RECURRENT; f <= FORM_CHUNKED; f++) {
            ASSERT_OK(problem_run(&pr, (enum form)f, o1, s1, NULL, 0, 6));
            ASSERT_OK(problem_run(&px, (enum form)f, o2, s2, NULL, 0, 6));
            if (memcmp(o1, o2, sizeof(o1)) != 0 || memcmp(s1, s2, sizeof(s1)) != 0)
                TEST_FAIL_("level %s, %s, map %d: not the expanded heads' result", level,
                           form_names[f], map);
        }
        problem_free(&pr);
        problem_free(&px);
    }
}

TEST(head_map) { ASSERT_TRUE(for_each_level(head_map_at) >= 1); }

/* kern_dn_l2norm then l2_eps = 0 equals normalising on the fly. */
TEST(l2norm_separate) {
    struct problem pr;
    ASSERT_OK(problem_make(&pr, &shapes[0], 10));
    float *o1 = calloc_array((size_t)pr.out_n, sizeof(float));
    float *o2 = calloc_array((size_t)pr.out_n, sizeof(float));
    float *s1 = calloc_array((size_t)pr.state_n, sizeof(float));
    float *s2 = calloc_array((size_t)pr.state_n, sizeof(float));
    ASSERT_TRUE(o1 && o2 && s1 && s2);
    ASSERT_OK(problem_run(&pr, FORM_RECURRENT, o1, s1, NULL, 0, pr.p.n_head_v));
    /* q and k heads are adjacent in the row: 2·H_k heads of d_k */
    kern_dn_l2norm(pr.qkv, pr.row, pr.n_tok, pr.p.head_dim_k, 0, 2 * pr.p.n_head_k, pr.p.l2_eps);
    for (int64_t i = 0; i < pr.p.head_dim_k; i++) { /* a normalised head has norm 1 */
        double ss = 0;
        for (int64_t j = 0; j < pr.p.head_dim_k; j++) ss += (double)pr.qkv[j] * pr.qkv[j];
        ASSERT_NEAR(ss, 1.0, 1e-5);
    }
    pr.p.l2_eps = 0;
    ASSERT_OK(problem_run(&pr, FORM_RECURRENT, o2, s2, NULL, 0, pr.p.n_head_v));
    ASSERT_TRUE(rel_err(o2, o1, pr.out_n) < 1e-6 && rel_err(s2, s1, pr.state_n) < 1e-6);
    free(o1), free(o2), free(s1), free(s2);
    problem_free(&pr);
}

/* ---- conv, gates, gated norm ------------------------------------------------------------ */

static double silu_d(double x) { return x / (1.0 + exp(-x)); }

static void conv_at(const char *level) {
    enum { CH = 53, T = 70 };
    static const int64_t ks[] = {4, 2, 1, 5};
    static const int64_t counts[] = {1, 2, 3, 5, 64};
    static float x[T * CH], y[T * CH], w[CH * 8], st0[CH * 8], st[CH * 8], st1[CH * 8], y1[T * CH];
    for (size_t ki = 0; ki < ARRAY_SIZE(ks); ki++) {
        const int64_t K = ks[ki], ns = K - 1;
        /* the GGUF weights (CH, K) and a state in llama.cpp's layout (CH, K − 1), each
         * transposed to the kernels' */
        float wg[CH * 8], stg[CH * 8];
        for (int64_t i = 0; i < CH * K; i++) wg[i] = frand();
        for (int64_t i = 0; i < CH * ns; i++) stg[i] = frand() * 3.0f;
        kern_dn_transpose(w, wg, CH, K);
        kern_dn_transpose(st0, stg, CH, ns);
        ASSERT_TRUE(K < 2 || (w[CH + 5] == wg[5 * K + 1] && st0[5] == stg[5 * ns]));
        for (size_t ci = 0; ci < ARRAY_SIZE(counts); ci++) {
            const int64_t n = counts[ci];
            for (int64_t i = 0; i < n * CH; i++) x[i] = frand() * 3.0f;
            memcpy(st, st0, sizeof(st));
            /* channels [3, CH) in place (y = x), then [0, 3) */
            memcpy(y, x, sizeof(float) * (size_t)(n * CH));
            kern_dn_conv(y, st, y, w, n, CH, K, 3, CH);
            kern_dn_conv(y, st, y, w, n, CH, K, 0, 3);
            for (int64_t c = 0; c < CH; c++) {
                /* xe = [state | x] of channel c, oldest first */
                double xe[8 + T];
                for (int64_t j = 0; j < ns; j++) xe[j] = stg[c * ns + j];
                for (int64_t t = 0; t < n; t++) xe[ns + t] = x[t * CH + c];
                for (int64_t t = 0; t < n; t++) {
                    double acc = 0, mag = 0; /* mag: Σ|terms|, the scale of the sum's rounding */
                    for (int64_t j = 0; j < K; j++) {
                        acc += (double)wg[c * K + j] * xe[t + j];
                        mag += fabs((double)wg[c * K + j] * xe[t + j]);
                    }
                    const double want = silu_d(acc), got = y[t * CH + c];
                    if (!(fabs(got - want) <= TOL_ELEM * (fabs(want) + mag)))
                        TEST_FAIL_("level %s, K %lld, %lld tokens: y[%lld][%lld] = %.9g, want "
                                   "%.9g",
                                   level, (long long)K, (long long)n, (long long)t, (long long)c,
                                   got, want);
                }
                for (int64_t j = 0; j < ns; j++)
                    if (st[j * CH + c] != (float)xe[n + j])
                        TEST_FAIL_("level %s, K %lld, %lld tokens: state[%lld][%lld] = %g, want "
                                   "%g",
                                   level, (long long)K, (long long)n, (long long)c, (long long)j,
                                   (double)st[j * CH + c], xe[n + j]);
            }
            /* one token at a time: the same bits */
            memcpy(st1, st0, sizeof(st1));
            for (int64_t t = 0; t < n; t++)
                kern_dn_conv(y1 + t * CH, st1, x + t * CH, w, 1, CH, K, 0, CH);
            ASSERT_TRUE(memcmp(y1, y, sizeof(float) * (size_t)(n * CH)) == 0);
            ASSERT_TRUE(memcmp(st1, st, sizeof(float) * (size_t)(CH * ns)) == 0);
        }
    }
}

TEST(conv) { ASSERT_TRUE(for_each_level(conv_at) >= 1); }

static void gated_norm_at(const char *level) {
    static const int64_t dims[] = {128, 64, 37, 8, 1};
    enum { T = 3, H = 5 };
    static float x[T * H * 128], z[T * H * 128], w[128], y[T * H * 128];
    for (size_t di = 0; di < ARRAY_SIZE(dims); di++) {
        const int64_t d = dims[di];
        for (int64_t i = 0; i < T * H * d; i++) x[i] = frand() * 2.0f, z[i] = frand() * 6.0f;
        z[0] = -100.0f; /* SiLU far down its tail */
        for (int64_t i = 0; i < d; i++) w[i] = frand() + 1.0f;
        for (int64_t i = 0; i < T * H * d; i++) y[i] = -7.0f;
        kern_dn_gated_norm(y, x, z, w, T, H, d, 1, H, 1e-6f);
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < H; h++) {
                const float *xr = x + (t * H + h) * d;
                double ss = 0;
                for (int64_t i = 0; i < d; i++) ss += (double)xr[i] * xr[i];
                const double sc = 1.0 / sqrt(ss / (double)d + 1e-6);
                for (int64_t i = 0; i < d; i++) {
                    const double got = y[(t * H + h) * d + i];
                    const double want =
                        h == 0 ? -7.0 : xr[i] * sc * w[i] * silu_d(z[(t * H + h) * d + i]);
                    if (!(fabs(got - want) <= TOL_ELEM * fmax(fabs(want), 1e-3)))
                        TEST_FAIL_("level %s, d %lld: y[%lld][%lld][%lld] = %.9g, want %.9g", level,
                                   (long long)d, (long long)t, (long long)h, (long long)i, got,
                                   want);
                }
            }
    }
}

TEST(gated_norm) { ASSERT_TRUE(for_each_level(gated_norm_at) >= 1); }

TEST(gates) {
    const float a[4] = {0.0f, 30.0f, -2.0f, 1.0f}, b[4] = {0.0f, 2.0f, -3.0f, 40.0f};
    const float dt[2] = {0.0f, 0.5f}, ssm_a[2] = {-2.0f, -0.25f};
    float g[4], beta[4];
    kern_dn_gates(g, beta, a, b, dt, ssm_a, 2, 2);
    ASSERT_NEAR(g[0], -2.0 * log(2.0), 1e-6); /* softplus(0) = ln 2 */
    ASSERT_NEAR(g[1], -0.25 * 30.5, 1e-5);    /* softplus(x) = x far up */
    ASSERT_NEAR(g[2], -2.0 * log1p(exp(-2.0)), 1e-6);
    ASSERT_NEAR(g[3], -0.25 * log1p(exp(1.5)), 1e-6);
    ASSERT_NEAR(beta[0], 0.5, 1e-7);
    ASSERT_NEAR(beta[2], 1.0 / (1.0 + exp(3.0)), 1e-7);
    ASSERT_NEAR(beta[3], 1.0, 1e-7);
}

TEST(shape_check) {
    struct kern_dn_shape p = {.n_head_k = 16,
                              .n_head_v = 32,
                              .head_dim_k = 128,
                              .head_dim_v = 128,
                              .scale = 0.0884f,
                              .l2_eps = 1e-6f};
    ASSERT_OK(kern_dn_shape_check(&p));
    ASSERT_TRUE(kern_dn_scratch_bytes(&p) > 0);
    p.n_head_v = 24;
    ASSERT_ERR(kern_dn_shape_check(&p), ERR_INVALID); /* not a multiple of H_k */
    p.n_head_v = 32, p.head_dim_k = KERN_DN_MAX_HEAD_DIM + 1;
    ASSERT_ERR(kern_dn_shape_check(&p), ERR_INVALID);
    ASSERT_EQ(kern_dn_scratch_bytes(&p), 0);
    p.head_dim_k = 128, p.head_map = KERN_DN_HEAD_MAP_COUNT;
    ASSERT_ERR(kern_dn_shape_check(&p), ERR_INVALID);
    p.head_map = KERN_DN_HEAD_MAP_GROUPED, p.l2_eps = -1.0f;
    ASSERT_ERR(kern_dn_shape_check(&p), ERR_INVALID);
    p.l2_eps = 0, p.scale = NAN;
    ASSERT_ERR(kern_dn_shape_check(&p), ERR_INVALID);
}

TEST_MAIN(T(ref_vs_notes), T(delta_rule_semantics), T(levels_vs_ref), T(state_across_calls),
          T(head_ranges), T(head_map), T(l2norm_separate), T(conv), T(gated_norm), T(gates),
          T(shape_check))
