/* Type traits, half-precision conversions and the reference quantizers.
 *
 * Round-trip error bounds, per block (amax = max|x|, lo/hi = min/max of the block,
 * u = 2^-11 the fp16 relative rounding of the stored scale, eps = 1e-6·amax for f32
 * arithmetic). Each bound = rounding error of the rule + the scale's fp16 rounding times
 * the largest code; where d falls below fp16's normal range (< 2^-14) the stored scale is
 * off by up to half a subnormal step (2^-25) instead of d·u, and the bound uses that.
 *
 *   type    bound on |x - x'|                          why
 *   f16     |x|·2^-11 (normal range)                   round to nearest, 11-bit mantissa
 *   bf16    |x|·2^-8                                   round to nearest, 8-bit mantissa
 *   q8_0    amax/127·(1/2 + 127u) + eps                round(x/d), d = amax/127
 *   q8_1    same as q8_0                               same rule (+ s = d·Σq checked)
 *   q4_0    amax/8·(1 + 8u) + eps                      d = amax/8; values of the sign
 *                                                      opposite to max clamp at q=15: one
 *                                                      whole step, others half a step
 *   q4_1    (hi-lo)/15·(1/2 + 15u) + |lo|·u + eps      q = ⌊(x-lo)/d + ½⌋, m = lo in fp16
 *   q5_0    amax/16·(1 + 16u) + eps                    as q4_0 with 32 levels
 *   q5_1    (hi-lo)/31·(1/2 + 31u) + |lo|·u + eps      as q4_1 with 32 levels
 *   iq4_nl  amax·IQ4NL_MAX_REL + eps                   non-uniform grid; the fitted scale
 *                                                      puts amax near an end code and the
 *                                                      widest gap is 24/127 of the range
 *   q4_K    ½·(R_j + 2.05·R_max/63)/15 + eps           per sub-block j of 32: R_j = max(hi,0)
 *   q5_K    ½·(R_j + 2.05·R_max/63)/31 + eps           - min(lo,0), R_max over the super-
 *                                                      block; 6-bit m_j and sc_j rounded up
 *                                                      each widen the grid by <= R_max/63
 *   q6_K    amax_g/32 + A_max/254 + eps                per group g of 16 (A_max over the
 *                                                      super-block): one whole step where
 *                                                      the sign opposite to max clamps at 63,
 *                                                      plus 32 × the 8-bit scale's rounding
 *                                                      (½·d, d = A_max/(32·127))
 *   q2_K    ½·(R_g + 2.1·R_max/15)/3 + eps             as q4_K on groups of 16 with 4-bit
 *                                                      sc_g, m_g (each widens the grid by
 *                                                      <= R_max/15) and 4 levels
 *   q3_K    amax_g/4 + A_max/40 + eps                  as q6_K with codes -4..3: one whole
 *                                                      step, plus 4 × the 6-bit scale's
 *                                                      rounding (½·d, d = A_max/(4·31))
 *   iq4_xs  IQ4NL_MAX_REL·amax_j + A_max/48            iq4_nl per sub-block j of 32, plus
 *           + 4064·err16(A_max/4064) + eps             127 × the 6-bit sub-block scale's
 *                                                      rounding (½·d, d = A_max/(127·32))
 *                                                      and 127·32 × d's fp16 rounding
 *   mxfp4   amax/4 + eps                               d = 2^(⌊log2 amax⌋-3) exactly (a power
 *                                                      of two, no rounding); the grid's widest
 *                                                      gap (8d..12d) gives 2d = 2^(⌊log2 amax⌋-2)
 *                                                      <= amax/4, and values past 12d =
 *                                                      1.5·2^⌊log2 amax⌋ clip by < amax/4
 */
#include "test.h"

#include "kernels/kernels.h"

#include <limits.h>

/* Widest gap of the iq4_nl grid is 24 (89..113) of the 113..127 half-range: half a gap
 * is < 0.107 of amax; the x²-weighted least-squares scale favours the big values and may
 * leave small ones a little farther (worst seen on random blocks: 0.125). */
#define IQ4NL_MAX_REL 0.14

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rng_u32(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}
static float rng_uniform(void) { return (float)(rng_u32() >> 8) * 0x1p-24f * 2.0f - 1.0f; }

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

TEST(static_sizes) {
    static const struct {
        int type;
        int64_t blck;
        size_t size;
        bool quant;
    } rows[] = {
        {KERN_TYPE_F32, 1, 4, false},      {KERN_TYPE_F16, 1, 2, false},
        {KERN_TYPE_BF16, 1, 2, false},     {KERN_TYPE_Q8_0, 32, 34, true},
        {KERN_TYPE_Q8_1, 32, 36, true},    {KERN_TYPE_Q4_0, 32, 18, true},
        {KERN_TYPE_Q4_1, 32, 20, true},    {KERN_TYPE_Q5_0, 32, 22, true},
        {KERN_TYPE_Q5_1, 32, 24, true},    {KERN_TYPE_IQ4_NL, 32, 18, true},
        {KERN_TYPE_Q4_K, 256, 144, true},  {KERN_TYPE_Q5_K, 256, 176, true},
        {KERN_TYPE_Q6_K, 256, 210, true},  {KERN_TYPE_Q8_K, 256, 292, true},
        {KERN_TYPE_I8, 1, 1, false},       {KERN_TYPE_I16, 1, 2, false},
        {KERN_TYPE_I32, 1, 4, false},      {KERN_TYPE_I64, 1, 8, false},
        {KERN_TYPE_F64, 1, 8, false},
        {KERN_TYPE_Q2_K, 256, 84, true},   {KERN_TYPE_Q3_K, 256, 110, true},
        {KERN_TYPE_IQ4_XS, 256, 136, true}, {KERN_TYPE_MXFP4, 32, 17, true},
        /* size only: ggml's block sizes, so GGUF files holding them can be listed */
        {KERN_TYPE_IQ2_XXS, 256, 66, true}, {KERN_TYPE_IQ2_XS, 256, 74, true},
        {KERN_TYPE_IQ3_XXS, 256, 98, true}, {KERN_TYPE_IQ1_S, 256, 50, true},
        {KERN_TYPE_IQ3_S, 256, 110, true},  {KERN_TYPE_IQ2_S, 256, 82, true},
        {KERN_TYPE_IQ1_M, 256, 56, true},
    };
    for (size_t i = 0; i < ARRAY_SIZE(rows); i++) {
        const struct kern_type_traits *tr = kern_type_traits(rows[i].type);
        ASSERT_TRUE(tr != NULL);
        ASSERT_EQ(tr->blck_size, rows[i].blck);
        ASSERT_EQ(tr->type_size, rows[i].size);
        ASSERT_EQ(tr->is_quantized, rows[i].quant);
    }
}

TEST(traits_hostile_ids) {
    static const int bad[] = {-1, -2, INT_MIN, 4, 5, 31, 34, 38, KERN_TYPE_COUNT,
                              KERN_TYPE_COUNT + 1, 1000, INT_MAX};
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        ASSERT_TRUE(kern_type_traits(bad[i]) == NULL);
        ASSERT_STREQ(kern_type_name(bad[i]), "?");
        ASSERT_EQ(kern_row_size((enum kern_type)bad[i], 32), 0);
    }
    int known = 0;
    for (int t = -5; t < KERN_TYPE_COUNT + 5; t++) known += kern_type_traits(t) != NULL;
    /* every id below KERN_TYPE_COUNT is known but the two ggml removed (4, 5) and 31..38
     * (removed repacked types, tq1_0 and tq2_0); mxfp4 (39) is the last */
    ASSERT_EQ(KERN_TYPE_COUNT, KERN_TYPE_MXFP4 + 1);
    ASSERT_EQ(known, KERN_TYPE_COUNT - 2 - 8);
}

TEST(type_names) {
    ASSERT_EQ(kern_type_from_name("f16"), KERN_TYPE_F16);
    ASSERT_EQ(kern_type_from_name("Q8_0"), KERN_TYPE_Q8_0);
    ASSERT_EQ(kern_type_from_name("q4_k"), KERN_TYPE_Q4_K);
    ASSERT_EQ(kern_type_from_name("IQ4_NL"), KERN_TYPE_IQ4_NL);
    ASSERT_EQ(kern_type_from_name("BF16"), KERN_TYPE_BF16);
    ASSERT_EQ(kern_type_from_name("MXFP4"), KERN_TYPE_MXFP4);
    ASSERT_STREQ(kern_type_name(KERN_TYPE_MXFP4), "mxfp4");
    ASSERT_STREQ(kern_type_name(KERN_TYPE_Q6_K), "q6_K");
    ASSERT_STREQ(kern_type_name(KERN_TYPE_IQ4_NL), "iq4_nl");
    ASSERT_TRUE(kern_type_from_name("") < 0);
    ASSERT_TRUE(kern_type_from_name("q9_0") < 0);
    ASSERT_TRUE(kern_type_from_name("q8_0 ") < 0);
    ASSERT_TRUE(kern_type_from_name("?") < 0);
    ASSERT_TRUE(kern_type_from_name(NULL) < 0);
    for (int t = 0; t < KERN_TYPE_COUNT; t++)
        if (kern_type_traits(t)) ASSERT_EQ(kern_type_from_name(kern_type_name(t)), t);
}

TEST(row_size) {
    ASSERT_EQ(kern_row_size(KERN_TYPE_F32, 172), 688);
    ASSERT_EQ(kern_row_size(KERN_TYPE_F16, 0), 0);
    ASSERT_EQ(kern_row_size(KERN_TYPE_Q8_0, 64), 68);
    ASSERT_EQ(kern_row_size(KERN_TYPE_Q4_0, 4096), 128 * 18);
    ASSERT_EQ(kern_row_size(KERN_TYPE_Q6_K, 512), 420);
    ASSERT_EQ(kern_row_size(KERN_TYPE_MXFP4, 2880), 90 * 17); /* a gpt-oss-20b row */
    ASSERT_EQ(kern_row_size(KERN_TYPE_MXFP4, 48), 0);
    ASSERT_EQ(kern_row_size(KERN_TYPE_Q8_0, 33), 0);
    ASSERT_EQ(kern_row_size(KERN_TYPE_Q4_K, 32), 0);
    ASSERT_EQ(kern_row_size(KERN_TYPE_F32, -4), 0);
    ASSERT_EQ(kern_row_size(KERN_TYPE_F64, INT64_MAX), 0);   /* overflows size_t */
    ASSERT_EQ(kern_row_size(KERN_TYPE_I64, INT64_MAX / 4 + 1), 0); /* 2^64 bytes */
}

/* Every half round-trips; every midpoint between neighbouring halves rounds to the even
 * one and its float neighbours to the nearer half (covers subnormals and overflow). */
TEST(fp16_exhaustive) {
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = kern_fp16_to_fp32((kern_f16)h);
        bool nan = ((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff);
        if (nan) {
            ASSERT_TRUE(isnan(f));
            kern_f16 back = kern_fp32_to_fp16(f);
            ASSERT_TRUE(((back >> 10) & 0x1f) == 0x1f && (back & 0x3ff) && (back & 0x200));
            continue;
        }
        if (kern_fp32_to_fp16(f) != h) TEST_FAIL_("half 0x%04x -> %g -> 0x%04x", h, f, kern_fp32_to_fp16(f));
        uint32_t mag = h & 0x7fff;
        if (mag >= 0x7c00) continue;
        uint32_t sign = h & 0x8000;
        float lo = kern_fp16_to_fp32((kern_f16)h);
        float hi = mag == 0x7bff ? (sign ? -65536.0f : 65536.0f) /* next would-be half */
                                 : kern_fp16_to_fp32((kern_f16)(h + 1));
        float mid = (lo + hi) * 0.5f;
        uint32_t next = mag == 0x7bff ? (sign | 0x7c00) : h + 1;
        uint32_t even = (h & 1) ? next : h;
        if (kern_fp32_to_fp16(mid) != even) TEST_FAIL_("midpoint after half 0x%04x", h);
        if (kern_fp32_to_fp16(nextafterf(mid, 0.0f)) != h) TEST_FAIL_("below mid 0x%04x", h);
        if (kern_fp32_to_fp16(nextafterf(mid, sign ? -INFINITY : INFINITY)) != next)
            TEST_FAIL_("above mid 0x%04x", h);
    }
    ASSERT_EQ(kern_fp32_to_fp16(INFINITY), 0x7c00);
    ASSERT_EQ(kern_fp32_to_fp16(-INFINITY), 0xfc00);
    ASSERT_EQ(kern_fp32_to_fp16(1e10f), 0x7c00);
    ASSERT_EQ(kern_fp32_to_fp16(-0.0f), 0x8000);
    ASSERT_EQ(kern_fp32_to_fp16(1e-10f), 0x0000);
    ASSERT_EQ(kern_fp32_to_fp16(0x1p-25f), 0x0000);           /* tie to even: 0 */
    ASSERT_EQ(kern_fp32_to_fp16(nextafterf(0x1p-25f, 1.0f)), 0x0001);
    ASSERT_EQ(kern_fp32_to_fp16(bits_f32(1)), 0x0000);        /* f32 subnormal */
    ASSERT_EQ(kern_fp32_to_fp16(1.0f), 0x3c00);
    ASSERT_EQ(kern_fp32_to_fp16(65504.0f), 0x7bff);
}

#ifdef __FLT16_MAX__
/* A dense sweep over float bit patterns against the compiler's own _Float16 conversion. */
TEST(fp16_vs_compiler) {
    for (uint64_t u = 0; u < 0x100000000ull; u += 257) {
        float f = bits_f32((uint32_t)u);
        if (isnan(f)) continue;
        _Float16 c = (_Float16)f;
        uint16_t want;
        memcpy(&want, &c, sizeof(want));
        if (kern_fp32_to_fp16(f) != want)
            TEST_FAIL_("%a: 0x%04x, compiler 0x%04x", f, kern_fp32_to_fp16(f), want);
    }
}
#endif

TEST(bf16_exhaustive) {
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = kern_bf16_to_fp32((kern_bf16)h);
        if (isnan(f)) {
            kern_bf16 back = kern_fp32_to_bf16(f);
            ASSERT_TRUE(isnan(kern_bf16_to_fp32(back)));
            ASSERT_TRUE(back & 0x40);
            continue;
        }
        ASSERT_EQ(kern_fp32_to_bf16(f), h);
        if ((h & 0x7f80) == 0x7f80) continue; /* inf */
        uint32_t base = h << 16;
        float mid = bits_f32(base | 0x8000);
        uint32_t even = (h & 1) ? h + 1 : h;
        ASSERT_EQ(kern_fp32_to_bf16(mid), even);
        ASSERT_EQ(kern_fp32_to_bf16(bits_f32(base | 0x7fff)), h);
        ASSERT_EQ(kern_fp32_to_bf16(bits_f32(base | 0x8001)), h + 1);
    }
    ASSERT_EQ(kern_fp32_to_bf16(bits_f32(0x7f800001)) & 0x7fc0, 0x7fc0); /* sNaN quieted */
    ASSERT_EQ(kern_fp32_to_bf16(bits_f32(0x7f7fffff)), 0x7f80);          /* max rounds to inf */
}

/* ---- quantization round trips --------------------------------------------------------- */

enum bound_kind { BOUND_REL, BOUND_SYM, BOUND_ASYM, BOUND_AMAX, BOUND_K45, BOUND_K6, BOUND_K2,
                  BOUND_K3, BOUND_XS };
struct qcase {
    int type;
    enum bound_kind kind;
    double steps;    /* BOUND_SYM: amax/steps is d; BOUND_ASYM: (hi-lo)/steps is d */
    double rounding; /* fraction of d the rule may be off (½, or 1 where a clamp applies) */
};
static const struct qcase qcases[] = {
    {KERN_TYPE_F16, BOUND_REL, 0, 0x1p-11},
    {KERN_TYPE_BF16, BOUND_REL, 0, 0x1p-8},
    {KERN_TYPE_Q8_0, BOUND_SYM, 127, 0.5},
    {KERN_TYPE_Q8_1, BOUND_SYM, 127, 0.5},
    {KERN_TYPE_Q4_0, BOUND_SYM, 8, 1.0},
    {KERN_TYPE_Q5_0, BOUND_SYM, 16, 1.0},
    {KERN_TYPE_Q4_1, BOUND_ASYM, 15, 0.5},
    {KERN_TYPE_Q5_1, BOUND_ASYM, 31, 0.5},
    {KERN_TYPE_IQ4_NL, BOUND_AMAX, 0, IQ4NL_MAX_REL},
    {KERN_TYPE_Q4_K, BOUND_K45, 15, 0.5},
    {KERN_TYPE_Q5_K, BOUND_K45, 31, 0.5},
    {KERN_TYPE_Q6_K, BOUND_K6, 32, 1.0},
    {KERN_TYPE_Q2_K, BOUND_K2, 3, 0.5},
    {KERN_TYPE_Q3_K, BOUND_K3, 4, 1.0},
    {KERN_TYPE_IQ4_XS, BOUND_XS, 0, IQ4NL_MAX_REL},
    {KERN_TYPE_MXFP4, BOUND_AMAX, 0, 0.25},
};

/* Groups of one scale per k-quant bound kind, and whether the range is hi - lo (offset
 * types) or amax. */
static int k_group(enum bound_kind k) { return k == BOUND_K45 || k == BOUND_XS ? 32 : 16; }
static bool k_offset(enum bound_kind k) { return k == BOUND_K45 || k == BOUND_K2; }

/* Largest error of storing v >= 0 as fp16: relative 2^-11, or half a subnormal step. */
static double fp16_err(double v) { return fmax(v * 0x1p-11, 0x1p-25); }

/* Bounds of the k-quants, per super-block of 256 (see the table at the top). */
static void k_bounds(const struct qcase *c, const float *x, double *bound) {
    int g = k_group(c->kind);
    double rmax = 0, r[16];
    for (int j = 0; j < 256 / g; j++) {
        double lo = 0, hi = 0, amax = 0;
        for (int l = 0; l < g; l++) {
            lo = fmin(lo, x[j * g + l]);
            hi = fmax(hi, x[j * g + l]);
            amax = fmax(amax, fabs(x[j * g + l]));
        }
        r[j] = k_offset(c->kind) ? hi - lo : amax;
        rmax = fmax(rmax, r[j]);
    }
    for (int j = 0; j < 256 / g; j++) {
        double b = c->kind == BOUND_K45 ? 0.5 * (r[j] + 2.05 * rmax / 63) / c->steps
                 : c->kind == BOUND_K2  ? 0.5 * (r[j] + 2.1 * rmax / 15) / c->steps
                 : c->kind == BOUND_K3  ? r[j] / 4 + rmax / 40
                 : c->kind == BOUND_XS  ? c->rounding * r[j] + rmax / 48 + 4064 * fp16_err(rmax / 4064)
                                        : r[j] / 32 + rmax / 254;
        for (int l = 0; l < g; l++) bound[j * g + l] = b + 1e-6 * rmax + 1e-30;
    }
}


/* Checks x' against x block by block with the case's bound; returns the worst ratio
 * error / bound seen (<= 1 passes). */
static double check_roundtrip(const struct qcase *c, const float *x, int64_t n) {
    const struct kern_type_traits *tr = kern_type_traits(c->type);
    size_t bytes = kern_row_size(c->type, n);
    uint8_t *q = malloc(bytes);
    float *y = malloc((size_t)n * sizeof(float));
    tr->from_f32(q, x, n);
    tr->to_f32(y, q, n);
    int64_t bs = c->kind == BOUND_REL ? 1 : 32;
    double worst = 0.0;
    bool kq = c->kind >= BOUND_K45;
    if (kq) {
        for (int64_t b = 0; b < n; b += 256) {
            double bound[256];
            k_bounds(c, x + b, bound);
            for (int j = 0; j < 256; j++) {
                double r = fabs((double)x[b + j] - (double)y[b + j]) / bound[j];
                if (!(r <= worst)) worst = r;
            }
        }
    }
    for (int64_t b = 0; !kq && b < n; b += bs) {
        double amax = 0, lo = x[b], hi = x[b];
        for (int64_t j = b; j < b + bs; j++) {
            amax = fmax(amax, fabs(x[j]));
            lo = fmin(lo, x[j]);
            hi = fmax(hi, x[j]);
        }
        double bound = 0;
        switch (c->kind) {
        case BOUND_REL: bound = amax * c->rounding + 0x1p-24; break; /* + half subnormal */
        case BOUND_SYM: {
            double d = amax / c->steps;
            bound = d * c->rounding + c->steps * fp16_err(d);
            break;
        }
        case BOUND_ASYM: {
            double d = (hi - lo) / c->steps;
            bound = d * c->rounding + c->steps * fp16_err(d) + fp16_err(fabs(lo));
            break;
        }
        case BOUND_AMAX: bound = amax * c->rounding; break;
        default: break;
        }
        bound += 1e-6 * amax + 1e-30;
        for (int64_t j = b; j < b + bs; j++) {
            double r = fabs((double)x[j] - (double)y[j]) / bound;
            if (!(r <= worst)) worst = r; /* NaN propagates as a failure */
        }
    }
    free(q);
    free(y);
    return worst;
}

static void fill_random(float *x, int64_t n, float scale) {
    for (int64_t i = 0; i < n; i++) x[i] = rng_uniform() * scale;
}

TEST(roundtrip_random) {
    enum { N = 32 * 512 };
    static float x[N];
    static const float scales[] = {1.0f, 1e-3f, 100.0f};
    for (size_t c = 0; c < ARRAY_SIZE(qcases); c++) {
        for (size_t s = 0; s < ARRAY_SIZE(scales); s++) {
            fill_random(x, N, scales[s]);
            /* a Gaussian-ish mix too: sum of uniforms */
            if (s == 2)
                for (int i = 0; i < N; i++) x[i] = (rng_uniform() + rng_uniform() + rng_uniform()) * 3.0f;
            double w = check_roundtrip(&qcases[c], x, N);
            if (!(w <= 1.0))
                TEST_FAIL_("%s scale %g: error %.3f x bound", kern_type_name(qcases[c].type), scales[s], w);
        }
    }
}

TEST(roundtrip_edges) {
    enum { N = 32 * 8 };
    float x[N];
    for (size_t c = 0; c < ARRAY_SIZE(qcases); c++) {
        const char *name = kern_type_name(qcases[c].type);
        /* all zeros: exact zeros back, no NaN from a zero scale */
        memset(x, 0, sizeof(x));
        double w = check_roundtrip(&qcases[c], x, N);
        if (!(w <= 1.0)) TEST_FAIL_("%s zeros: %.3f", name, w);
        /* constant blocks, positive and negative, one block each of several values */
        for (int b = 0; b < N / 32; b++)
            for (int j = 0; j < 32; j++) x[b * 32 + j] = (b & 1 ? -1.0f : 1.0f) * (float)(b + 1) * 0.37f;
        w = check_roundtrip(&qcases[c], x, N);
        if (!(w <= 1.0)) TEST_FAIL_("%s constant: %.3f", name, w);
        /* one outlier per block among small values, at varying positions and signs */
        fill_random(x, N, 0.01f);
        for (int b = 0; b < N / 32; b++) x[b * 32 + (b * 7) % 32] = (b & 1 ? -1.0f : 1.0f) * 50.0f;
        w = check_roundtrip(&qcases[c], x, N);
        if (!(w <= 1.0)) TEST_FAIL_("%s outliers: %.3f", name, w);
        /* tiny values (scale in the fp16 subnormal range) and huge ones (near fp16 max) */
        fill_random(x, N, 1e-6f);
        w = check_roundtrip(&qcases[c], x, N);
        if (qcases[c].kind == BOUND_REL && !(w <= 1.0)) TEST_FAIL_("%s tiny: %.3f", name, w);
        fill_random(x, N, 3000.0f);
        w = check_roundtrip(&qcases[c], x, N);
        if (!(w <= 1.0)) TEST_FAIL_("%s large: %.3f", name, w);
    }
}

/* q8_1 stores s = d·Σq; q4_1/q5_1 dot products rely on it. */
TEST(q8_1_sum) {
    float x[64];
    struct block_q8_1 b[2];
    fill_random(x, 64, 2.0f);
    kern_type_traits(KERN_TYPE_Q8_1)->from_f32(b, x, 64);
    for (int i = 0; i < 2; i++) {
        int sum = 0;
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) {
            sum += b[i].qs[j];
            amax = fmaxf(amax, fabsf(x[32 * i + j]));
        }
        /* s uses d = amax/127 before its fp16 rounding */
        ASSERT_EQ(b[i].s, kern_fp32_to_fp16((float)sum * (amax / 127.0f)));
    }
}

/* Hand-computed blocks pin the byte layout (nibble order, 5th-bit order, scale sign). */
TEST(block_layouts) {
    float x[32];
    /* q4_0: max-magnitude value -8 gives d = 1, q = x + 8 */
    for (int j = 0; j < 16; j++) x[j] = (float)(j - 8);
    for (int j = 16; j < 32; j++) x[j] = (float)(7 - (j - 16));
    struct block_q4_0 b4;
    kern_type_traits(KERN_TYPE_Q4_0)->from_f32(&b4, x, 32);
    ASSERT_EQ(b4.d, kern_fp32_to_fp16(1.0f));
    for (int j = 0; j < 16; j++) ASSERT_EQ(b4.qs[j], j | (15 - j) << 4);

    /* q5_0: -16 gives d = 1, q = x + 16 = j, 5th bit set for j >= 16 */
    for (int j = 0; j < 32; j++) x[j] = (float)(j - 16);
    struct block_q5_0 b5;
    kern_type_traits(KERN_TYPE_Q5_0)->from_f32(&b5, x, 32);
    ASSERT_EQ(b5.d, kern_fp32_to_fp16(1.0f));
    ASSERT_EQ(b5.qh[0], 0x00);
    ASSERT_EQ(b5.qh[1], 0x00);
    ASSERT_EQ(b5.qh[2], 0xff);
    ASSERT_EQ(b5.qh[3], 0xff);
    for (int j = 0; j < 16; j++) ASSERT_EQ(b5.qs[j], j | j << 4);

    /* q8_0: x = j - 16, amax 16 → d = 16/127, q = round(x·127/16) */
    struct block_q8_0 b8;
    kern_type_traits(KERN_TYPE_Q8_0)->from_f32(&b8, x, 32);
    ASSERT_EQ(b8.d, kern_fp32_to_fp16(16.0f / 127.0f));
    ASSERT_EQ(b8.qs[0], -127);
    ASSERT_EQ(b8.qs[16], 0);
    ASSERT_EQ(b8.qs[31], 119); /* 15·127/16 = 119.06 */

    /* iq4_nl: values equal to the codes themselves come back as those codes */
    for (int j = 0; j < 32; j++) x[j] = (float)kern_iq4nl_values[j % 16];
    struct block_iq4_nl bn;
    float y[32];
    kern_type_traits(KERN_TYPE_IQ4_NL)->from_f32(&bn, x, 32);
    kern_type_traits(KERN_TYPE_IQ4_NL)->to_f32(y, &bn, 32);
    for (int j = 0; j < 16; j++) ASSERT_EQ(bn.qs[j], (j | j << 4));
    for (int j = 0; j < 32; j++) ASSERT_NEAR(y[j], x[j], fabs(x[j]) * 0x1p-10);
}

/* q4_K: scales of sub-blocks 0..7 = 1..8 and mins 0 (6-bit packing: 4..7 split across
 * bytes 8..11 and the top bits of bytes 0..7), d = 1: x = scale · nibble. */
TEST(q4_K_decode) {
    struct block_q4_K b;
    memset(&b, 0, sizeof(b));
    b.d = kern_fp32_to_fp16(1.0f);
    b.dmin = kern_fp32_to_fp16(0.5f);
    for (int j = 0; j < 4; j++) {
        b.scales[j] = (uint8_t)(j + 1);
        b.scales[j + 4] = (uint8_t)(2 << 0); /* min of sub-block j = 2 */
        b.scales[j + 8] = (uint8_t)((j + 5) | 3 << 4); /* scale j+4 = j+5, min j+4 = 3 */
    }
    b.scales[0] |= 1 << 6; /* high bits: scale 4 += 16 */
    b.scales[4] |= 1 << 6; /* high bits: min 4 += 16 */
    memset(b.qs, 0x21, sizeof(b.qs)); /* low nibble 1, high nibble 2 */
    float y[256];
    kern_type_traits(KERN_TYPE_Q4_K)->to_f32(y, &b, 256);
    for (int s = 0; s < 8; s++) {
        double sc = s < 4 ? s + 1 : s + 1 + (s == 4 ? 16 : 0);
        double mn = s < 4 ? 2 : 3 + (s == 4 ? 16 : 0);
        double q = s % 2 == 0 ? 1 : 2;
        for (int l = 0; l < 32; l++) ASSERT_NEAR(y[s * 32 + l], sc * q - 0.5 * mn, 1e-6);
    }
}

/* q2_K, q3_K, iq4_xs: hand-set bytes decoded in ggml's own walk order (two halves of
 * 128, four 2-bit planes each, 16 values per scale; q3_K's scales unpacked as 32-bit
 * words), pinning the layouts independently of the reference decoders' indexing. */
TEST(low_bit_decode) {
    float y[256];
    struct block_q2_K b2;
    for (int g = 0; g < 16; g++) b2.scales[g] = (uint8_t)((g % 15 + 1) | (g % 3) << 4);
    for (int i = 0; i < 64; i++) b2.qs[i] = (uint8_t)(i * 37 + 11);
    b2.d = kern_fp32_to_fp16(1.0f);
    b2.dmin = kern_fp32_to_fp16(0.5f);
    kern_type_traits(KERN_TYPE_Q2_K)->to_f32(y, &b2, 256);
    int v = 0, g = 0;
    for (int h = 0; h < 2; h++)
        for (int shift = 0; shift < 8; shift += 2)
            for (int half = 0; half < 2; half++, g++)
                for (int l = 0; l < 16; l++, v++) {
                    int q = (b2.qs[32 * h + 16 * half + l] >> shift) & 3;
                    ASSERT_NEAR(y[v], (b2.scales[g] & 15) * q - 0.5 * (b2.scales[g] >> 4), 1e-6);
                }

    struct block_q3_K b3;
    for (int i = 0; i < 32; i++) b3.hmask[i] = (uint8_t)(i * 53 + 7);
    for (int i = 0; i < 64; i++) b3.qs[i] = (uint8_t)(i * 29 + 3);
    for (int i = 0; i < 12; i++) b3.scales[i] = (uint8_t)(i * 71 + 5);
    b3.d = kern_fp32_to_fp16(0.25f);
    uint32_t aux[4], tmp;
    memcpy(aux, b3.scales, 12);
    tmp = aux[2];
    aux[2] = ((aux[0] >> 4) & 0x0f0f0f0f) | ((tmp >> 4) & 0x03030303) << 4;
    aux[3] = ((aux[1] >> 4) & 0x0f0f0f0f) | ((tmp >> 6) & 0x03030303) << 4;
    aux[0] = (aux[0] & 0x0f0f0f0f) | ((tmp >> 0) & 0x03030303) << 4;
    aux[1] = (aux[1] & 0x0f0f0f0f) | ((tmp >> 2) & 0x03030303) << 4;
    uint8_t sc[16];
    memcpy(sc, aux, 16);
    kern_type_traits(KERN_TYPE_Q3_K)->to_f32(y, &b3, 256);
    v = 0, g = 0;
    int bit = 0;
    for (int h = 0; h < 2; h++)
        for (int shift = 0; shift < 8; shift += 2, bit++)
            for (int half = 0; half < 2; half++, g++)
                for (int l = 0; l < 16; l++, v++) {
                    int q = (b3.qs[32 * h + 16 * half + l] >> shift) & 3;
                    q -= (b3.hmask[16 * half + l] >> bit) & 1 ? 0 : 4;
                    ASSERT_NEAR(y[v], 0.25 * (sc[g] - 32) * q, 1e-6);
                }

    struct block_iq4_xs bx;
    bx.d = kern_fp32_to_fp16(0.5f);
    bx.scales_h = 0xa5c3;
    for (int i = 0; i < 4; i++) bx.scales_l[i] = (uint8_t)(0x12 + 0x22 * i);
    for (int i = 0; i < 128; i++) bx.qs[i] = (uint8_t)(i * 7 + 1);
    kern_type_traits(KERN_TYPE_IQ4_XS)->to_f32(y, &bx, 256);
    for (int j = 0; j < 8; j++) {
        int ls = ((bx.scales_l[j / 2] >> (j % 2 ? 4 : 0)) & 15) | ((bx.scales_h >> (2 * j)) & 3) << 4;
        for (int l = 0; l < 16; l++) {
            ASSERT_NEAR(y[32 * j + l], 0.5 * (ls - 32) * kern_iq4nl_values[bx.qs[16 * j + l] & 15], 1e-6);
            ASSERT_NEAR(y[32 * j + l + 16], 0.5 * (ls - 32) * kern_iq4nl_values[bx.qs[16 * j + l] >> 4], 1e-6);
        }
    }
}

/* mxfp4 (ggml-common.h block_mxfp4, ggml-quants.c): the E8M0 scale halved for every
 * byte, the E2M1 table doubled, the nibble order, ggml's exponent rule and nearest-code
 * choice, pinned by hand. */
TEST(mxfp4_layout) {
    for (int e = 0; e < 256; e++) /* 2^(e-128), subnormals (e = 0, 1) included */
        if (kern_e8m0_half((uint8_t)e) != ldexpf(1.0f, e - 128)) TEST_FAIL_("e8m0 %d", e);
    ASSERT_TRUE(kern_e8m0_half(0) == bits_f32(0x00200000));
    ASSERT_TRUE(kern_e8m0_half(255) == 0x1p127f);
    static const float e2m1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6}; /* OCP MX E2M1 magnitudes */
    for (int q = 0; q < 16; q++)
        ASSERT_EQ(kern_mxfp4_values[q], (q & 8 ? -2 : 2) * e2m1[q & 7]);

    /* amax 6 → e = ⌊log2 6⌋ - 2 + 127 = 127, d = 2^-1: the E2M1 values come back as
     * their own codes (value j low nibble of byte j, value j + 16 high; -0 as +0) */
    float x[64], y[64];
    for (int j = 0; j < 32; j++) x[j] = 0.5f * (float)kern_mxfp4_values[(j * 5) % 16];
    struct block_mxfp4 b[2];
    kern_type_traits(KERN_TYPE_MXFP4)->from_f32(b, x, 32);
    ASSERT_EQ(b[0].e, 127);
    for (int j = 0; j < 16; j++) {
        int lo = (j * 5) % 16, hi = ((j + 16) * 5) % 16;
        ASSERT_EQ(b[0].qs[j], (lo == 8 ? 0 : lo) | (hi == 8 ? 0 : hi) << 4);
    }
    kern_type_traits(KERN_TYPE_MXFP4)->to_f32(y, b, 32);
    for (int j = 0; j < 32; j++) ASSERT_TRUE(y[j] == x[j]);

    /* amax 1 → e = 125, d = 2^-3: 12d = 1.5 ≥ 1 → 1 is code 6 (8d), 0.3 the nearest of
     * 2d = 0.25 and 3d = 0.375: 0.25 (code 2), -0.1875 the tie of 1d and 2d: the first, -1d
     * (code 9); zeros and a block of zeros: e = 0, codes 0 */
    memset(x, 0, sizeof x);
    x[0] = 1.0f, x[1] = 0.3f, x[17] = -0.1875f;
    kern_type_traits(KERN_TYPE_MXFP4)->from_f32(b, x, 64);
    ASSERT_EQ(b[0].e, 125);
    ASSERT_EQ(b[0].qs[0], 6);
    ASSERT_EQ(b[0].qs[1], 2 | 9 << 4);
    ASSERT_EQ(b[1].e, 0);
    for (int j = 0; j < 16; j++) ASSERT_EQ(b[1].qs[j], 0);
    /* a value just below a power of two keeps the lower exponent; far past the byte's
     * range the exponent stays in it */
    x[0] = nextafterf(4.0f, 0.0f);
    kern_type_traits(KERN_TYPE_MXFP4)->from_f32(b, x, 32);
    ASSERT_EQ(b[0].e, 126);
    for (int j = 0; j < 32; j++) x[j] = j ? 0.0f : 1e-40f;
    kern_type_traits(KERN_TYPE_MXFP4)->from_f32(b, x, 32);
    ASSERT_EQ(b[0].e, 0);
    x[0] = INFINITY;
    kern_type_traits(KERN_TYPE_MXFP4)->from_f32(b, x, 32);
    ASSERT_EQ(b[0].e, 255);
}

TEST_MAIN(T(static_sizes), T(traits_hostile_ids), T(type_names), T(row_size),
          T(fp16_exhaustive),
#ifdef __FLT16_MAX__
          T(fp16_vs_compiler),
#endif
          T(bf16_exhaustive), T(roundtrip_random), T(roundtrip_edges), T(q8_1_sum),
          T(block_layouts), T(q4_K_decode), T(low_bit_decode), T(mxfp4_layout))
