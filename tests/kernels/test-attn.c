/* Attention over a KV cache: the SIMD path (kernels/cpu/x86-attn.c, taken at every level
 * but "ref") against the generic path (level "ref"), for every K and V cache type it
 * takes, head sizes 32..128, GQA groups, several tokens per call (more queries than one
 * scratch chunk holds), sliding windows and rows with padding.
 *
 * Named tolerance, per query (t, g) and output column d:
 *   TOL = (e^(2Δ) - 1)·max_j |V_jd| + 1e-5·max_j |V_jd| + 1e-6
 * with Δ = max over the token's keys j of scale · Σ_b (amax_b / 254) · Σ_{i in b} |K_ji|
 * (0 for a float K), the largest change of a score from quantizing the query to q8_0
 * (round(x/d) is off by * at most d/2 = amax_b/254 per value, block b of 32). Scores off by at most
 * Δ change each softmax weight by a factor within e^(±2Δ), so the weighted sum of V rows moves by
 * at most (e^(2Δ) - 1)·max|V|; the rest is f32 summation order. That bound is loose (a worst case),
 * so the SIMD path is also held to an exact spec: TOL_Q = 1e-4·max_j |V_jd| + 1e-6 against
 * softmax(scale · q'·K_j)·V in double, q' the query quantized by the stated rule (per block d =
 * amax/127, codes rint(x·(1/d))): only f32 accumulation order and the exp polynomial (~1 ulp)
 * remain, each far below 1e-4 of the weights. Cases with sinks (gpt-oss: a logit per query head
 * in the denominator only) add e^(sink - max) to the spec's softmax sum. */
#include "test.h"

#include "kernels/kernels.h"

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static float rng_uniform(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)(rng_state >> 40) * 0x1p-24f * 2.0f - 1.0f;
}

enum { MAX_KV = 300, MAX_TOK = 40, MAX_G = 4, MAX_HD = 128, PAD = 16 };

struct attn_case {
    int64_t hk, hv, n_tok, n_group;
    bool window;
    bool sinks;
};

/* Runs one case for K type kt and V type vt; returns the worst error / TOL or / TOL_Q
 * (<= 1 passes), or a negative value when the SIMD level is missing. */
static double check_case(const struct attn_case *c, enum kern_type kt, enum kern_type vt) {
    const int64_t hk = c->hk, hv = c->hv, nq = c->n_tok * c->n_group;
    const size_t ks = kern_row_size(kt, hk) + PAD, vs = kern_row_size(vt, hv) + PAD;
    static float kf[MAX_KV * MAX_HD], vf[MAX_KV * MAX_HD], kr[MAX_KV * MAX_HD], vr[MAX_KV * MAX_HD];
    static uint8_t kq[MAX_KV * (MAX_HD * 4 + PAD)], vq[MAX_KV * (MAX_HD * 4 + PAD)];
    static float q[MAX_TOK * MAX_G * MAX_HD], want[MAX_TOK * MAX_G * MAX_HD],
        got[MAX_TOK * MAX_G * MAX_HD];
    static float scratch[1 << 18];
    int32_t n_kv[MAX_TOK], kv_lo[MAX_TOK];
    float sk[MAX_G]; /* the sinks: about the scores' size, so that they matter */
    for (int64_t g = 0; g < MAX_G; g++) sk[g] = 1.5f + 1.5f * rng_uniform();
    const float *sinks = c->sinks ? sk : NULL;
    const float scale = 1.0f / sqrtf((float)hk);
    const bool kfloat = !kern_type_traits(kt)->is_quantized; /* f32 dots, no query rounding */
    /* keys with a few large values (outliers in some dims, as real K caches have) */
    for (int64_t j = 0; j < MAX_KV; j++)
        for (int64_t i = 0; i < hk; i++)
            kf[j * hk + i] = rng_uniform() * (i % 13 == 0 ? 6.0f : 1.5f);
    for (int64_t i = 0; i < MAX_KV * hv; i++) vf[i] = rng_uniform();
    for (int64_t i = 0; i < nq * hk; i++) q[i] = rng_uniform() * 2.0f;
    for (int64_t j = 0; j < MAX_KV; j++) {
        kern_quantize_row(kt, kq + (size_t)j * ks, kf + j * hk, hk);
        kern_quantize_row(vt, vq + (size_t)j * vs, vf + j * hv, hv);
        kern_type_traits(kt)->to_f32(kr + j * hk, kq + (size_t)j * ks, hk);
        kern_type_traits(vt)->to_f32(vr + j * hv, vq + (size_t)j * vs, hv);
    }
    for (int64_t t = 0; t < c->n_tok; t++) {
        /* lengths not multiples of 8 or of the 64-key tile; the last token sees them all */
        n_kv[t] = t == c->n_tok - 1 ? MAX_KV : (int32_t)(1 + (t * 37 + 11) % MAX_KV);
        kv_lo[t] = c->window ? (int32_t)((n_kv[t] * 3) / 5) : 0;
    }
    if (kern_attn_scratch_floats(nq, hk, hv) > (int64_t)ARRAY_SIZE(scratch)) return INFINITY;
    const int32_t *lo = c->window ? kv_lo : NULL;
    if (kern_set_level("ref") < 0) return INFINITY;
    kern_attn_head_window(want, c->n_group * hv, q, c->n_group * hk, c->n_tok, c->n_group, lo, n_kv,
                          kq, kt, ks, vq, vt, vs, hk, hv, scale, sinks, scratch);
    /* the best level this CPU has */
    const char *best = NULL;
    for (int i = 1; kern_level_name(i); i++)
        if (kern_set_level(kern_level_name(i)) == 0) best = kern_level_name(i);
    if (!best || kern_set_level(best) < 0) return -1;
    for (int64_t i = 0; i < nq * hv; i++) got[i] = NAN;
    kern_attn_head_window(got, c->n_group * hv, q, c->n_group * hk, c->n_tok, c->n_group, lo, n_kv,
                          kq, kt, ks, vq, vt, vs, hk, hv, scale, sinks, scratch);
    double worst = 0;
    for (int64_t t = 0; t < c->n_tok; t++)
        for (int64_t g = 0; g < c->n_group; g++) {
            const float *qi = q + (t * c->n_group + g) * hk;
            /* the exact spec: the query as the SIMD path quantizes it */
            double qq[MAX_HD], sc[MAX_KV], smax = -INFINITY, ssum = 0;
            for (int64_t b = 0; b < hk / 32; b++) {
                float amax = 0;
                for (int64_t i = 32 * b; i < 32 * b + 32; i++) amax = fmaxf(amax, fabsf(qi[i]));
                float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
                for (int64_t i = 32 * b; i < 32 * b + 32; i++)
                    qq[i] = kfloat ? qi[i] : (double)d * rintf(qi[i] * id);
            }
            for (int64_t j = kv_lo[t]; j < n_kv[t]; j++) {
                double dot = 0;
                for (int64_t i = 0; i < hk; i++) dot += qq[i] * kr[j * hk + i];
                sc[j] = scale * dot;
                smax = fmax(smax, sc[j]);
            }
            for (int64_t j = kv_lo[t]; j < n_kv[t]; j++) ssum += sc[j] = exp(sc[j] - smax);
            if (sinks) ssum += exp((double)sinks[g] - smax);
            for (int64_t d = 0; d < hv; d++) {
                double w = 0, vmax = 0;
                for (int64_t j = kv_lo[t]; j < n_kv[t]; j++) {
                    w += sc[j] / ssum * vr[j * hv + d];
                    vmax = fmax(vmax, fabs(vr[j * hv + d]));
                }
                double r = fabs(got[(t * c->n_group + g) * hv + d] - w) / (1e-4 * vmax + 1e-6);
                if (!(r <= worst)) worst = r;
            }
            /* against the generic path: the loose bound */
            double delta = 0;
            for (int64_t j = kv_lo[t]; j < n_kv[t]; j++) {
                double dj = 0;
                for (int64_t b = 0; b < hk / 32; b++) {
                    double amax = 0, ksum = 0;
                    for (int64_t i = 32 * b; i < 32 * b + 32; i++) {
                        amax = fmax(amax, fabs(qi[i]));
                        ksum += fabs(kr[j * hk + i]);
                    }
                    dj += kfloat ? 0 : amax / 254 * ksum;
                }
                delta = fmax(delta, scale * dj);
            }
            for (int64_t d = 0; d < hv; d++) {
                double vmax = 0;
                for (int64_t j = kv_lo[t]; j < n_kv[t]; j++)
                    vmax = fmax(vmax, fabs(vr[j * hv + d]));
                double tol = (exp(2 * delta) - 1) * vmax + 1e-5 * vmax + 1e-6;
                const int64_t o = (t * c->n_group + g) * hv + d;
                double r = fabs((double)got[o] - want[o]) / tol;
                if (!(r <= worst)) worst = r; /* NaN fails */
            }
        }
    return worst;
}

TEST(cache_types_vs_generic) {
    static const enum kern_type ktypes[] = {KERN_TYPE_Q8_0, KERN_TYPE_Q4_0, KERN_TYPE_Q4_1,
                                            KERN_TYPE_Q5_0, KERN_TYPE_Q5_1, KERN_TYPE_IQ4_NL,
                                            KERN_TYPE_F16,  KERN_TYPE_F32,  KERN_TYPE_BF16};
    static const enum kern_type vtypes[] = {KERN_TYPE_Q8_0, KERN_TYPE_Q4_0, KERN_TYPE_Q4_1,
                                            KERN_TYPE_Q5_0, KERN_TYPE_Q5_1, KERN_TYPE_IQ4_NL,
                                            KERN_TYPE_F16,  KERN_TYPE_F32,  KERN_TYPE_BF16};
    static const struct attn_case cases[] = {
        {64, 64, 1, 4, false, false}, {128, 128, 1, 2, false, false}, {32, 64, 3, 1, false, false},
        {64, 64, 5, 4, true, false},  {128, 64, 2, 4, true, false},   {64, 128, 40, 4, false, false},
        /* gpt-oss: sinks, alone and with a window */
        {64, 64, 1, 4, false, true},  {64, 64, 5, 4, true, true},     {64, 128, 40, 4, false, true},
    };
    for (size_t c = 0; c < ARRAY_SIZE(cases); c++)
        for (size_t a = 0; a < ARRAY_SIZE(ktypes); a++)
            for (size_t b = 0; b < ARRAY_SIZE(vtypes); b++) {
                double w = check_case(&cases[c], ktypes[a], vtypes[b]);
                if (w < 0) SKIP("no SIMD level on this CPU");
                if (!(w <= 1.0))
                    TEST_FAIL_(
                        "K %s V %s hd %lld/%lld, %lld tokens x %lld heads%s%s: error %.3f x tol",
                        kern_type_name(ktypes[a]), kern_type_name(vtypes[b]),
                        (long long)cases[c].hk, (long long)cases[c].hv, (long long)cases[c].n_tok,
                        (long long)cases[c].n_group, cases[c].window ? ", window" : "",
                        cases[c].sinks ? ", sinks" : "", w);
            }
    ASSERT_OK(kern_set_level("ref"));
}

/* kern_silu_mul at every SIMD level (kernels/cpu/x86-attn.c) against y = g·u/(1 + e^-g)
 * in double: within 2e-6 relative (a few ulp of the exp polynomial, the division and two
 * products) + 1e-35 absolute (below -87 the result is taken as -0), every length's tail,
 * y aliasing g as the engine calls it; infinities and NaN as the generic path gives them. */
TEST(silu_mul_vs_spec) {
    enum { N = 1031 };
    static float g[N], u[N], y[N];
    static const float edge[] = {0.0f, -0.0f, 1e-8f, -1e-8f, 1.0f, -1.0f, 20.0f, -20.0f, 86.9f,
                                 -86.9f, -87.5f, 88.0f, -88.0f, -100.0f, 1e30f, -1e30f};
    for (int i = 0; i < N; i++) {
        g[i] = i < (int)ARRAY_SIZE(edge) ? edge[i] : rng_uniform() * 30.0f;
        u[i] = rng_uniform() * 2.0f;
    }
    const char *saved = kern_cpu()->level;
    int levels = 0;
    for (int li = 0; kern_level_name(li); li++) {
        const char *level = kern_level_name(li);
        if (strcmp(level, "ref") == 0 || kern_set_level(level) < 0) continue;
        levels++;
        static const int lens[] = {0, 1, 7, 8, 9, 16, 100, N};
        for (size_t k = 0; k < ARRAY_SIZE(lens); k++) {
            memcpy(y, g, sizeof(y));
            kern_silu_mul(y, y, u, lens[k]);
            for (int i = 0; i < N; i++) {
                const double want = i < lens[k] ? (double)g[i] * u[i] / (1.0 + exp(-(double)g[i])) : g[i];
                if (!(fabs(y[i] - want) <= 2e-6 * fabs(want) + 1e-35))
                    TEST_FAIL_("level %s n %d: silu(%g)·%g = %.9g, want %.9g", level, lens[k],
                               (double)g[i], (double)u[i], (double)y[i], want);
            }
        }
        const float odd[] = {INFINITY, -INFINITY, NAN, 1.0f, 2.0f, -3.0f, 4.0f, 5.0f};
        const float ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
        float a[8], b[8];
        kern_silu_mul(a, odd, ones, 8);
        ASSERT_OK(kern_set_level("ref"));
        kern_silu_mul(b, odd, ones, 8);
        for (int i = 0; i < 3; i++)
            if (!(a[i] == b[i] || (isnan(a[i]) && isnan(b[i]))))
                TEST_FAIL_("level %s: silu(%g) = %g, the generic path %g", level, (double)odd[i],
                           (double)a[i], (double)b[i]);
    }
    kern_set_level(saved);
    if (strcmp(saved, "ref") != 0) ASSERT_TRUE(levels >= 1);
}

/* kern_swiglu_oai at every level (and the generic path) against gpt-oss's clamped SwiGLU in
 * double, x = min(g, 7), v = clamp(u, -7, 7), y = x·(v + 1)/(1 + e^(-1.702·x)): the clamps
 * bite on both sides (g and u reach ±30), every length's tail, y aliasing g. */
TEST(swiglu_oai_vs_spec) {
    enum { N = 1031 };
    static float g[N], u[N], y[N];
    static const float edge[] = {0.0f, -0.0f, 7.0f, -7.0f, 7.5f, -7.5f, 50.0f, -60.0f, -100.0f};
    for (int i = 0; i < N; i++) {
        g[i] = i < (int)ARRAY_SIZE(edge) ? edge[i] : rng_uniform() * 60.0f - 30.0f;
        u[i] = i < (int)ARRAY_SIZE(edge) ? -edge[i] : rng_uniform() * 60.0f - 30.0f;
    }
    const char *saved = kern_cpu()->level;
    for (int li = 0; kern_level_name(li); li++) {
        const char *level = kern_level_name(li);
        if (kern_set_level(level) < 0) continue;
        static const int lens[] = {0, 1, 7, 8, 9, 16, 100, N};
        for (size_t k = 0; k < ARRAY_SIZE(lens); k++) {
            memcpy(y, g, sizeof(y));
            kern_swiglu_oai(y, y, u, lens[k], 1.702f, 7.0f);
            for (int i = 0; i < N; i++) {
                const double x = fmin(g[i], 7.0), v = fmax(fmin(u[i], 7.0), -7.0);
                /* alpha as the float the engine passes: e^(αx) magnifies its rounding x-fold */
                const double want = i < lens[k] ? x * (v + 1.0) / (1.0 + exp(-(double)1.702f * x)) : g[i];
                if (!(fabs(y[i] - want) <= 2e-6 * fabs(want) + 1e-30))
                    TEST_FAIL_("level %s n %d: swiglu_oai(%g, %g) = %.9g, want %.9g", level,
                               lens[k], (double)g[i], (double)u[i], (double)y[i], want);
            }
        }
    }
    kern_set_level(saved);
}

TEST_MAIN(T(cache_types_vs_generic), T(silu_mul_vs_spec), T(swiglu_oai_vs_spec))
