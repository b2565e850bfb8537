/* kern_matmul on every SIMD level this CPU has, checked against the reference spec
 * kern_ref_dot_f32, and the spec itself checked against exact arithmetic.
 *
 * Named tolerances (S = Σ_i |w'_i·x_i| with w' the dequantized weights):
 *
 *   TOL_BF16_ACT = 2^-9·S + TOL_SUM  bf16 on a path that rounds the activations to bf16
 *                        (the avx512bf16 level's prefill: tol_of says where)
 *   TOL_SUM   = 2e-5·S   kern_matmul vs kern_ref_dot_f32, every other type and path. Both use the
 * same integer block dots (or the same f32 products); only the order and width of the float
 * accumulation differ (f32 SIMD lanes vs the spec's sequential f32 / double sums): ~n_blocks·2^-24.
 *   activation quantization (spec vs exact double Σ w'·x), per block b of 32:
 *     q8_0 / q8_1 activations: Σ_j |w'_j| · amax_b/127 · (1/2 + 127·2^-11)
 *                        (round(x/d) error plus the fp16 rounding of d) + TOL_SUM
 *     f32 activations (f32/f16/bf16 weights): 1e-6·S (double accumulation)
 *
 * Thread counts 1..4 must give bit-identical outputs: the work split never changes which
 * tile computes an output. */
#include "test.h"

#include "kernels/kernels.h"

#include <unistd.h>

#define TOL_SUM 2e-5
/* bf16 weights on a level whose bf16 dot rounds the activations to bf16 (avx512bf16's
 * VDPBF16PS prefill): 2^-9·S from that rounding, plus TOL_SUM */
#define TOL_BF16_ACT (0x1p-9 + TOL_SUM)

static uint64_t rng_state = 0x243f6a8885a308d3ull;
static uint32_t rng_u32(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}
static float rng_uniform(void) { return (float)(rng_u32() >> 8) * 0x1p-24f * 2.0f - 1.0f; }
static int rng_int(int lo, int hi) { return lo + (int)(rng_u32() % (uint32_t)(hi - lo + 1)); }

static const int mm_types[] = {
    KERN_TYPE_F32,  KERN_TYPE_F16,  KERN_TYPE_BF16, KERN_TYPE_Q8_0,   KERN_TYPE_Q4_0,
    KERN_TYPE_Q4_1, KERN_TYPE_Q5_0, KERN_TYPE_Q5_1, KERN_TYPE_IQ4_NL, KERN_TYPE_Q4_K,
    KERN_TYPE_Q5_K, KERN_TYPE_Q6_K, KERN_TYPE_Q2_K, KERN_TYPE_Q3_K, KERN_TYPE_IQ4_XS,
    KERN_TYPE_MXFP4,
};

/* Random bytes are valid k-quant blocks once the fp16 super-block scales are set to sane
 * values (byte offsets of d / dmin in each layout). */
static void kquant_random_row(uint8_t *row, int wt, int64_t n_in) {
    const struct kern_type_traits *tr = kern_type_traits(wt);
    for (size_t i = 0; i < kern_row_size(wt, n_in); i++) row[i] = (uint8_t)rng_u32();
    for (int64_t b = 0; b < n_in / QK_K; b++) {
        uint8_t *blk = row + (size_t)b * tr->type_size;
        kern_f16 d = kern_fp32_to_fp16(0.001f + 0.01f * (float)(rng_u32() % 100) / 100.0f);
        kern_f16 dmin = kern_fp32_to_fp16(0.002f * (float)(rng_u32() % 100) / 100.0f);
        if (wt == KERN_TYPE_Q6_K || wt == KERN_TYPE_Q3_K) {
            memcpy(blk + (wt == KERN_TYPE_Q6_K ? 208 : 108), &d, 2);
        } else if (wt == KERN_TYPE_Q2_K) {
            memcpy(blk + 80, &d, 2);
            memcpy(blk + 82, &dmin, 2);
        } else if (wt == KERN_TYPE_IQ4_XS) {
            memcpy(blk, &d, 2);
        } else {
            memcpy(blk, &d, 2);
            memcpy(blk + 2, &dmin, 2);
        }
    }
}

/* Random mxfp4 bytes: every code in every nibble position, exponents around 2^0 (118..133)
 * and now and then the subnormal scales (e = 0, 1) and the largest ones that keep the
 * dot products finite (e up to 150: |x| <= 20, 12·2^22·20·n). */
static void mxfp4_random_row(uint8_t *row, int64_t n_in) {
    for (int64_t b = 0; b < n_in / QK_MXFP4; b++) {
        struct block_mxfp4 *blk = (struct block_mxfp4 *)(row + (size_t)b * sizeof *blk);
        const uint32_t r = rng_u32();
        blk->e = (uint8_t)(r % 23 == 0 ? r / 23 % 2 : r % 29 == 0 ? 150 : 118 + r / 29 % 16);
        for (int j = 0; j < QK_MXFP4 / 2; j++) blk->qs[j] = (uint8_t)rng_u32();
    }
}

struct mm_case {
    int wt;
    int64_t n_in, n_out, n_tok;
    uint8_t *w;      /* n_out rows of wt */
    float *wd;       /* dequantized w, (n_out, n_in) */
    float *x;        /* (n_tok, n_in) */
    void *scratch;
};

static void mm_case_free(struct mm_case *c) {
    free(c->w);
    free(c->wd);
    free(c->x);
    free(c->scratch);
}

/* Random weights with a per-row scale (rows of very different magnitude, as in real
 * models) and activations with a few outliers. */
static void mm_case_init(struct mm_case *c, int wt, int64_t n_in, int64_t n_out, int64_t n_tok) {
    const struct kern_type_traits *tr = kern_type_traits(wt);
    *c = (struct mm_case){.wt = wt, .n_in = n_in, .n_out = n_out, .n_tok = n_tok};
    size_t rs = kern_row_size(wt, n_in);
    float *wf = malloc((size_t)(n_in * n_out) * sizeof(float));
    c->w = malloc(rs * (size_t)n_out);
    c->wd = malloc((size_t)(n_in * n_out) * sizeof(float));
    c->x = malloc((size_t)(n_in * n_tok) * sizeof(float));
    size_t sb = kern_matmul_scratch_bytes(wt, n_in, n_tok);
    c->scratch = sb ? malloc(sb) : NULL;
    for (int64_t o = 0; o < n_out; o++) {
        float s = 0.01f + (float)(rng_u32() % 100) * 0.02f;
        for (int64_t i = 0; i < n_in; i++) wf[o * n_in + i] = rng_uniform() * s;
    }
    for (int64_t i = 0; i < n_in * n_tok; i++)
        c->x[i] = rng_u32() % 97 == 0 ? rng_uniform() * 20.0f : rng_uniform();
    for (int64_t o = 0; o < n_out; o++) {
        /* k-quant and mxfp4 rows: half quantized, half random bytes (every scale bit
         * pattern; mxfp4: see mxfp4_random_row) */
        if (tr->blck_size == QK_K && (o & 1)) kquant_random_row(c->w + o * rs, wt, n_in);
        else if (wt == KERN_TYPE_MXFP4 && (o & 1)) mxfp4_random_row(c->w + o * rs, n_in);
        else tr->from_f32(c->w + o * rs, wf + o * n_in, n_in);
        tr->to_f32(c->wd + o * n_in, c->w + o * rs, n_in);
    }
    free(wf);
}

static double abs_dot(const float *a, const float *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += fabs((double)a[i] * (double)b[i]);
    return s;
}

/* The tolerance (× S) of wt's path at the current level */
static double tol_of(int wt, enum kern_layout layout, int64_t n_tok) {
    const char *level;
    kern_matmul_path((enum kern_type)wt, layout, n_tok, &level);
    return wt == KERN_TYPE_BF16 && strcmp(level, "avx512bf16") == 0 ? TOL_BF16_ACT : TOL_SUM;
}

/* Runs kern_matmul with n_threads and checks every output against the spec. Returns the
 * output (caller frees) or NULL after a failure was reported. */
static float *mm_check_layout(struct mm_case *c, struct kern_pool *pool, const char *level,
                              const void *w, enum kern_layout layout) {
    size_t rs = kern_row_size(c->wt, c->n_in);
    size_t ny = (size_t)(c->n_out * c->n_tok);
    float *y = malloc((ny + 4) * sizeof(float));
    for (int i = 0; i < 4; i++) y[ny + i] = 12345.0f; /* sentinels past the end */
    kern_matmul_layout(pool, y, w, c->wt, layout, c->x, c->n_in, c->n_out, c->n_tok, c->scratch);
    for (int i = 0; i < 4; i++)
        if (y[ny + i] != 12345.0f) {
            fprintf(stderr, "%s %s: wrote past the output\n", level, kern_type_name(c->wt));
            free(y);
            return NULL;
        }
    for (int64_t t = 0; t < c->n_tok; t++)
        for (int64_t o = 0; o < c->n_out; o++) {
            float want = kern_ref_dot_f32(c->w + o * rs, c->wt, c->x + t * c->n_in, c->n_in);
            double tol = tol_of(c->wt, layout, c->n_tok) *
                             abs_dot(c->wd + o * c->n_in, c->x + t * c->n_in, c->n_in) +
                         1e-30;
            double got = y[t * c->n_out + o];
            if (!(fabs(got - want) <= tol)) {
                fprintf(stderr,
                        "%s %s n_in=%lld n_out=%lld n_tok=%lld threads=%d: y[%lld][%lld] = %.9g, "
                        "spec %.9g, tol %.3g\n",
                        level, kern_type_name(c->wt), (long long)c->n_in, (long long)c->n_out,
                        (long long)c->n_tok, kern_pool_n_threads(pool), (long long)t,
                        (long long)o, got, want, tol);
                free(y);
                return NULL;
            }
        }
    return y;
}

static float *mm_check(struct mm_case *c, struct kern_pool *pool, const char *level) {
    return mm_check_layout(c, pool, level, c->w, KERN_LAYOUT_ROWS);
}

TEST(matmul_all_levels_vs_spec) {
    struct kern_pool *pools[4] = {0};
    for (int n = 0; n < 4; n++) ASSERT_OK(kern_pool_new(n + 1, &pools[n]));
    const char *saved = kern_cpu()->level;
    int n_levels = 0;
    for (int li = 0; kern_level_name(li); li++) {
        const char *level = kern_level_name(li);
        if (kern_set_level(level) < 0) {
            printf("  level %s: not supported by this CPU, skipped\n", level);
            continue;
        }
        n_levels++;
        for (size_t ti = 0; ti < ARRAY_SIZE(mm_types); ti++) {
            int wt = mm_types[ti];
            int64_t blck = kern_type_traits(wt)->blck_size;
            static const int64_t q_in[] = {32, 64, 96, 160, 288, 544, 1056, 2080};
            static const int64_t f_in[] = {1, 7, 16, 64, 172, 300, 1033, 2048};
            static const int64_t k_in[] = {256, 512, 768, 1024, 2304, 2560, 256, 512};
            for (int k = 0; k < 10; k++) {
                int64_t n_in = blck == 1 ? f_in[k % 8] : blck == 32 ? q_in[k % 8] : k_in[k % 8];
                int64_t n_out = k == 8 ? 100 : rng_int(1, 37);  /* 100: several row units */
                int64_t n_tok = k == 9 ? 70 : rng_int(1, 17);   /* 70: two token units */
                struct mm_case c;
                mm_case_init(&c, wt, n_in, n_out, n_tok);
                float *y1 = mm_check(&c, pools[0], level);
                if (!y1) {
                    mm_case_free(&c);
                    TEST_FAIL_("level %s type %s", level, kern_type_name(wt));
                }
                struct kern_pool *p = pools[1 + k % 3];
                float *yn = mm_check(&c, p, level);
                bool same = yn && memcmp(y1, yn, (size_t)(n_out * n_tok) * sizeof(float)) == 0;
                free(y1);
                free(yn);
                mm_case_free(&c);
                if (!same)
                    TEST_FAIL_("level %s type %s: %d threads differ from 1 thread", level,
                               kern_type_name(wt), kern_pool_n_threads(p));
            }
        }
    }
    kern_set_level(saved);
    for (int n = 0; n < 4; n++) kern_pool_free(pools[n]);
    ASSERT_TRUE(n_levels >= 1);
    printf("  %d levels checked, running level %s\n", n_levels, kern_cpu()->level);
}

/* Every tile path on every level, by shape rather than by chance: 1-3 tokens over 4-row
 * tiles (decode: the super-block kernels of the k-quants), 3-5 and 64 tokens (prefill:
 * the packed tiles, the 3-token float tiles and their remainders), a row
 * count that leaves a ragged tile, and n_in long enough for several packs and chunks
 * (2304 = 72 blocks of 32, 9 super-blocks; float: 1031 = chunks of 512 and a tail). */
TEST(matmul_tile_paths_vs_spec) {
    struct kern_pool *pool = NULL;
    ASSERT_OK(kern_pool_new(2, &pool));
    const char *saved = kern_cpu()->level;
    static const int64_t toks[] = {1, 2, 3, 4, 5, 64};
    for (int li = 0; kern_level_name(li); li++) {
        const char *level = kern_level_name(li);
        if (kern_set_level(level) < 0) continue;
        for (size_t ti = 0; ti < ARRAY_SIZE(mm_types); ti++) {
            int wt = mm_types[ti];
            int64_t n_in = kern_type_traits(wt)->blck_size == 1 ? 1031 : 2304;
            for (size_t k = 0; k < ARRAY_SIZE(toks); k++) {
                struct mm_case c;
                mm_case_init(&c, wt, n_in, 10, toks[k]);
                float *y = mm_check(&c, pool, level);
                bool ok = y != NULL;
                free(y);
                mm_case_free(&c);
                if (!ok) TEST_FAIL_("level %s type %s n_tok %lld", level, kern_type_name(wt), (long long)toks[k]);
            }
        }
    }
    kern_set_level(saved);
    kern_pool_free(pool);
}

/* The spec against exact arithmetic: only the activation quantization may differ. */
TEST(spec_vs_exact) {
    for (size_t ti = 0; ti < ARRAY_SIZE(mm_types); ti++) {
        int wt = mm_types[ti];
        const struct kern_type_traits *tr = kern_type_traits(wt);
        struct mm_case c;
        mm_case_init(&c, wt, 1024, 8, 3);
        size_t rs = kern_row_size(wt, c.n_in);
        for (int64_t t = 0; t < c.n_tok; t++)
            for (int64_t o = 0; o < c.n_out; o++) {
                const float *wd = c.wd + o * c.n_in, *x = c.x + t * c.n_in;
                double exact = 0, bound = 0;
                for (int64_t i = 0; i < c.n_in; i++) exact += (double)wd[i] * x[i];
                double s = abs_dot(wd, x, c.n_in);
                if (tr->vec_dot_type == KERN_TYPE_F32) {
                    bound = 1e-6 * s;
                } else {
                    for (int64_t b = 0; b < c.n_in; b += 32) {
                        double amax = 0, sw = 0;
                        for (int j = 0; j < 32; j++) {
                            amax = fmax(amax, fabs(x[b + j]));
                            sw += fabs(wd[b + j]);
                        }
                        bound += sw * amax / 127 * (0.5 + 127 * 0x1p-11);
                    }
                    bound += TOL_SUM * s;
                }
                float got = kern_ref_dot_f32(c.w + o * rs, wt, x, c.n_in);
                if (!(fabs(got - exact) <= bound))
                    TEST_FAIL_("%s: spec %.9g exact %.9g bound %.3g", kern_type_name(wt), got, exact, bound);
            }
        mm_case_free(&c);
    }
}

/* SIMD activation quantizers must write the reference's bytes, ties included
 * (round half away from zero, as roundf). */
TEST(quantize_row_bit_exact) {
    enum { N = 32 * 64 };
    static float x[N];
    static uint8_t want[N * 2], got[N * 2];
    const char *saved = kern_cpu()->level;
    static const int qtypes[] = {KERN_TYPE_Q8_0, KERN_TYPE_Q8_1, KERN_TYPE_Q4_0,
                                 KERN_TYPE_Q4_1, KERN_TYPE_Q5_0, KERN_TYPE_Q5_1,
                                 KERN_TYPE_IQ4_NL, KERN_TYPE_MXFP4, KERN_TYPE_F16,
                                 KERN_TYPE_BF16};
    for (int li = 0; kern_level_name(li); li++) {
        if (kern_set_level(kern_level_name(li)) < 0) continue;
        for (int pattern = 0; pattern < 5; pattern++) {
            for (int i = 0; i < N; i++) {
                switch (pattern) {
                case 0: x[i] = rng_uniform(); break;
                case 1: /* amax 127 → d = 1: every k + 0.5 is an exact tie */
                    x[i] = i % 32 == 0 ? 127.0f : (float)((int)(rng_u32() % 254) - 127) + 0.5f;
                    break;
                case 2: x[i] = 0.0f; break;
                case 3: x[i] = rng_uniform() * 1e-6f; break;
                case 4: x[i] = rng_uniform() * 6e4f; break;
                }
            }
            for (size_t qi = 0; qi < ARRAY_SIZE(qtypes); qi++) {
                int t = qtypes[qi];
                size_t rs = kern_row_size(t, N);
                kern_type_traits(t)->from_f32(want, x, N);
                memset(got, 0xaa, rs);
                kern_quantize_row(t, got, x, N);
                if (memcmp(want, got, rs) != 0)
                    TEST_FAIL_("level %s %s pattern %d: bytes differ from the reference",
                               kern_level_name(li), kern_type_name(t), pattern);
            }
        }
    }
    kern_set_level(saved);
}

TEST(matmul_edges) {
    float y[4] = {1, 2, 3, 4};
    float x[64] = {0};
    struct block_q8_0 w[2] = {0};
    kern_matmul(NULL, y, w, KERN_TYPE_Q8_0, x, 64, 0, 1, NULL);
    kern_matmul(NULL, y, w, KERN_TYPE_Q8_0, x, 64, 1, 0, NULL);
    ASSERT_EQ(y[0], 1);
    ASSERT_EQ(y[3], 4);
    ASSERT_EQ(kern_matmul_scratch_bytes(KERN_TYPE_F32, 64, 1), 0);
    ASSERT_EQ(kern_matmul_scratch_bytes(KERN_TYPE_F16, 64, 1), 0);
    /* f32/f16/bf16 prefill: room for the activations packed in panels of 12 tokens, in
     * blocks of 60 tokens (5 panels) */
    ASSERT_TRUE(kern_matmul_scratch_bytes(KERN_TYPE_F32, 64, 5) >= 12 * 64 * sizeof(float));
    ASSERT_TRUE(kern_matmul_scratch_bytes(KERN_TYPE_F16, 64, 5) >= 12 * 64 * sizeof(float));
    ASSERT_TRUE(kern_matmul_scratch_bytes(KERN_TYPE_BF16, 64, 60) >= 60 * 64 * sizeof(float));
    ASSERT_TRUE(kern_matmul_scratch_bytes(KERN_TYPE_BF16, 64, 70) >= 2 * 60 * 64 * sizeof(float));
    ASSERT_TRUE(kern_matmul_scratch_bytes(KERN_TYPE_F16, 64, 121) >= 3 * 60 * 64 * sizeof(float));
    ASSERT_TRUE(kern_matmul_scratch_bytes(KERN_TYPE_Q8_0, 64, 5) >= 5 * 68);
    ASSERT_TRUE(kern_matmul_scratch_bytes(KERN_TYPE_Q4_1, 64, 5) >= 5 * 72);
    ASSERT_EQ(kern_matmul_scratch_bytes(KERN_TYPE_Q8_K, 256, 1), 0); /* no dot product */
    ASSERT_TRUE(isnan(kern_ref_dot_f32(w, KERN_TYPE_Q8_K, x, 256)));
    ASSERT_TRUE(isnan(kern_ref_dot_f32(w, KERN_TYPE_Q4_K, x, 255)));
    ASSERT_TRUE(isnan(kern_ref_dot_f32(w, KERN_TYPE_I8, x, 4)));
    ASSERT_TRUE(isnan(kern_ref_dot_f32(w, KERN_TYPE_Q8_0, x, 33)));
    ASSERT_TRUE(isnan(kern_ref_dot_f32(w, (enum kern_type)77, x, 32)));
    /* all-zero weights and activations: exact zeros, no NaN from zero scales */
    uint8_t scratch[80];
    kern_matmul(NULL, y, w, KERN_TYPE_Q8_0, x, 64, 1, 1, scratch);
    ASSERT_EQ(y[0], 0);
}

TEST(level_names) {
    ASSERT_STREQ(kern_level_name(0), "ref");
    ASSERT_TRUE(kern_level_name(-1) == NULL);
    ASSERT_TRUE(kern_level_name(100) == NULL);
    ASSERT_ERR(kern_set_level("no-such-level"), ERR_UNSUPPORTED);
    ASSERT_ERR(kern_set_level(NULL), ERR_UNSUPPORTED);
    const struct kern_cpu_info *cpu = kern_cpu();
    printf("  cpu: avx2=%d fma=%d f16c=%d avx512f=%d bw=%d vl=%d vnni=%d avx_vnni=%d bf16=%d "
           "level=%s\n",
           cpu->avx2, cpu->fma, cpu->f16c, cpu->avx512f, cpu->avx512bw, cpu->avx512vl,
           cpu->avx512vnni, cpu->avx_vnni, cpu->avx512bf16, cpu->level);
}

/* WARM_KERNELS caps the level a new process chooses (kern_init reads it once): this test
 * binary run again with each level's name, its level_names line read back. A level this
 * CPU runs is taken as named; one it lacks (avxvnni on Zen 4) still caps, at the highest
 * level below it that the CPU runs; an unknown name leaves the top level. */
TEST(level_cap_env) {
    const char *saved = kern_cpu()->level;
    char self[4096];
    const ssize_t n_self = readlink("/proc/self/exe", self, sizeof self - 1);
    ASSERT_TRUE(n_self > 0);
    self[n_self] = 0;
    /* the highest level before li this CPU runs: after the last, the top one */
    const char *below = "ref";
    int n_checked = 0;
    for (int li = 0;; li++) {
        const char *name = kern_level_name(li) ? kern_level_name(li) : "no-such-level";
        const bool usable = kern_level_name(li) && kern_set_level(name) == 0;
        kern_set_level(saved); /* at once: a failure below returns */
        const char *want = usable ? name : below;
        char cmd[4352], line[512], got[32] = "";
        snprintf(cmd, sizeof cmd, "WARM_KERNELS=%s '%s' level_names 2>/dev/null", name, self);
        FILE *f = popen(cmd, "r");
        ASSERT_TRUE(f != NULL);
        while (fgets(line, sizeof line, f)) {
            const char *l = strstr(line, " level=");
            if (l) sscanf(l + 7, "%31s", got);
        }
        ASSERT_EQ(pclose(f), 0);
        if (strcmp(got, want) != 0)
            TEST_FAIL_("WARM_KERNELS=%s: level %s, want %s", name, got, want);
        n_checked++;
        if (usable) below = name;
        if (!kern_level_name(li)) break;
    }
    ASSERT_TRUE(n_checked >= 3);
}

/* Weights repacked into rows8 (kernels/types.h): the conversion is a permutation of the
 * bytes (back again byte for byte), and on every level, with or without its rows8 kernels,
 * kern_matmul_layout gives the spec of the rows for decode, 2-7 tokens (the tile's 4-token
 * steps and each remainder), 60 (f16/bf16: one whole token block of 5 panels), 61 (f16/bf16:
 * a lone last token), 64 and 70 (two token units; f16/bf16: a second block of 4 and 10 tokens), over 1 to 5 groups of 8 rows and
 * 3 to 72 blocks (k-quants and iq4_xs: 1 to 9 super-blocks, half of the rows random bytes: every scale
 * bit pattern; iq4_nl, q5_0, q5_1 at avx2: 1 to 3 packs of 32 blocks, the last one partial), on 1 and
 * 2 threads (bit-identical). */
TEST(matmul_rows8_vs_spec) {
    struct kern_pool *pool = NULL;
    ASSERT_OK(kern_pool_new(2, &pool));
    const char *saved = kern_cpu()->level;
    static const int64_t toks[] = {1, 2, 3, 4, 5, 6, 7, 60, 61, 64, 70};
    static const int64_t shapes[][2] = {{96, 8}, {2304, 24}, {1024, 40}, {288, 16}};
    static const int types[] = {KERN_TYPE_F16,  KERN_TYPE_BF16,   KERN_TYPE_Q4_0, KERN_TYPE_Q8_0,
                                KERN_TYPE_Q4_K, KERN_TYPE_Q5_K,   KERN_TYPE_Q6_K, KERN_TYPE_Q3_K,
                                KERN_TYPE_Q2_K, KERN_TYPE_IQ4_XS, KERN_TYPE_MXFP4, KERN_TYPE_IQ4_NL,
                                KERN_TYPE_Q4_1, KERN_TYPE_Q5_0,   KERN_TYPE_Q5_1};
    int with_kernels = 0;
    for (int li = 0; kern_level_name(li); li++) {
        const char *level = kern_level_name(li);
        if (kern_set_level(level) < 0) continue;
        with_kernels += kern_rows8_supported(KERN_TYPE_Q4_0, 256, 16);
        for (size_t ti = 0; ti < ARRAY_SIZE(types); ti++)
        for (size_t si = 0; si < ARRAY_SIZE(shapes); si++)
            for (size_t k = 0; k < ARRAY_SIZE(toks); k++) {
                const int wt = types[ti];
                struct mm_case c;
                /* k-quants: 1, 9 and 4 super-blocks */
                mm_case_init(&c, wt, kern_type_traits(wt)->blck_size == QK_K ? shapes[si][0] / 96 * 256 : shapes[si][0],
                             shapes[si][1], toks[k]);
                size_t bytes = kern_row_size(wt, c.n_in) * (size_t)c.n_out;
                uint8_t *g = malloc(bytes), *back = malloc(bytes);
                ASSERT_OK(kern_rows8_pack(wt, g, c.w, c.n_in, c.n_out));
                ASSERT_OK(kern_rows8_unpack(wt, back, g, c.n_in, c.n_out));
                const int64_t c_n_in = c.n_in;
                bool ok = memcmp(back, c.w, bytes) == 0 && memcmp(g, c.w, bytes) != 0;
                float *y = ok ? mm_check_layout(&c, NULL, level, g, KERN_LAYOUT_ROWS8) : NULL;
                float *y2 = y ? mm_check_layout(&c, pool, level, g, KERN_LAYOUT_ROWS8) : NULL;
                ok = y2 && memcmp(y, y2, sizeof(float) * (size_t)(c.n_out * c.n_tok)) == 0;
                free(y);
                free(y2);
                free(g);
                free(back);
                mm_case_free(&c);
                if (!ok)
                    TEST_FAIL_("level %s %s n_in %lld n_out %lld n_tok %lld", level, kern_type_name(wt),
                               (long long)c_n_in, (long long)shapes[si][1], (long long)toks[k]);
            }
    }
    kern_set_level(saved);
    kern_pool_free(pool);
    /* the reference level reads the file's rows (its rows8 path exists only for the
     * engine's contexts made at a SIMD level); this machine's levels have the kernels */
    ASSERT_OK(kern_set_level("ref"));
    ASSERT_TRUE(!kern_rows8_supported(KERN_TYPE_Q4_0, 256, 16));
    ASSERT_TRUE(!kern_rows8_supported(KERN_TYPE_Q4_K, 256, 16));
    kern_set_level(saved);
    if (strcmp(saved, "ref") != 0) ASSERT_TRUE(with_kernels >= 1);
    /* shapes and types it cannot take */
    uint8_t a[210 * 8], b[210 * 8];
    ASSERT_ERR(kern_rows8_pack(KERN_TYPE_Q4_0, b, a, 32, 12), ERR_UNSUPPORTED);
    ASSERT_ERR(kern_rows8_pack(KERN_TYPE_Q4_0, b, a, 33, 8), ERR_UNSUPPORTED);
    ASSERT_ERR(kern_rows8_pack(KERN_TYPE_Q4_K, b, a, 128, 8), ERR_UNSUPPORTED);
    ASSERT_ERR(kern_rows8_pack(KERN_TYPE_Q8_1, b, a, 256, 8), ERR_UNSUPPORTED);
    ASSERT_ERR(kern_rows8_unpack(KERN_TYPE_Q8_K, b, a, 256, 8), ERR_UNSUPPORTED);
    ASSERT_TRUE(!kern_rows8_supported(KERN_TYPE_Q4_0, 256, 12));
    ASSERT_TRUE(!kern_rows8_supported(KERN_TYPE_Q8_1, 256, 16));
    ASSERT_TRUE(!kern_rows8_supported(KERN_TYPE_IQ4_NL, 256, 12));
    ASSERT_TRUE(!kern_rows8_supported((enum kern_type)77, 256, 16));
}

/* f32/f16/bf16 rows8 at every level over an odd n (a last value without its pair in the
 * avx512bf16 level's bf16 pairs) within one chunk of values and past one (259), and token
 * counts that end on a short panel (2, 13), a block and a remainder it takes in (61, 124:
 * blocks of 60 take up to 4 more; 61 once ended on a lone token read as a panel), a
 * second block of 10 or 6 (70), and a lone last token (65, 129: the avx512bf16 level's
 * blocks of 64 end on one, whose f32 row the tiles read); 8 rows (tile8 alone) and 24
 * (tile16 and tile8), and decode (1) of 8, 24 and 88 rows (dec4's four groups with 1-3
 * left to tile16/tile8, whose units differ on 1 and 2 threads), on 1 and 2 threads
 * (identical: a group's outputs the same bits whichever kernel computes it). */
TEST(matmul_rows8_float_odd) {
    struct kern_pool *pool = NULL;
    ASSERT_OK(kern_pool_new(2, &pool));
    const char *saved = kern_cpu()->level;
    static const int64_t n_ins[] = {97, 259}, n_outs[] = {8, 24, 88},
                         toks[] = {1, 2, 13, 61, 65, 70, 124, 129};
    static const int types[] = {KERN_TYPE_F32, KERN_TYPE_F16, KERN_TYPE_BF16};
    int checked = 0;
    for (int li = 0; kern_level_name(li); li++) {
        const char *level = kern_level_name(li);
        if (kern_set_level(level) < 0) continue;
        for (size_t ti = 0; ti < ARRAY_SIZE(types); ti++)
        for (size_t ii = 0; ii < ARRAY_SIZE(n_ins); ii++)
        for (size_t oi = 0; oi < ARRAY_SIZE(n_outs); oi++)
            for (size_t k = 0; k < ARRAY_SIZE(toks); k++) {
                struct mm_case c;
                mm_case_init(&c, types[ti], n_ins[ii], n_outs[oi], toks[k]);
                size_t bytes = kern_row_size(c.wt, c.n_in) * (size_t)c.n_out;
                uint8_t *g = malloc(bytes);
                ASSERT_TRUE(g != NULL);
                ASSERT_OK(kern_rows8_pack(c.wt, g, c.w, c.n_in, c.n_out));
                float *y = mm_check_layout(&c, NULL, level, g, KERN_LAYOUT_ROWS8);
                float *y2 = y ? mm_check_layout(&c, pool, level, g, KERN_LAYOUT_ROWS8) : NULL;
                bool ok = y2 && memcmp(y, y2, sizeof(float) * (size_t)(c.n_out * c.n_tok)) == 0;
                free(y);
                free(y2);
                free(g);
                mm_case_free(&c);
                if (!ok)
                    TEST_FAIL_("level %s %s n_in %lld n_out %lld n_tok %lld", level,
                               kern_type_name(types[ti]), (long long)n_ins[ii],
                               (long long)n_outs[oi], (long long)toks[k]);
                checked++;
            }
    }
    kern_set_level(saved);
    kern_pool_free(pool);
    ASSERT_TRUE(checked >= 144); /* one level's */
}

/* A token's outputs are the same bits computed alone (decode) or in a batch of any size,
 * at every level, in both layouts: the engine's continuous batching then gives a stream
 * the tokens it gets alone (tests/e2e/test_generate.py, 16 streams). n_in spans several
 * of the kernels' chunks (the float bodies' 256 and 512 values, the 256-bit packs' 32
 * blocks: 2080 values are 65) and ends in a part chunk;
 * 88 rows are dec4's four groups with one left over (rows8), 90 a part tile (rows).
 * Not yet so, and listed here until they are: the quantized types' bodies over the file's
 * rows (prefill's packs add per pack and take Σ m·s apart; decode does neither): the
 * engine gives them only shapes rows8 cannot take and a mapped model's experts. */
static bool batch_variant_known(const char *level, int wt, bool rows8) {
    if (rows8 || strcmp(level, "ref") == 0) return false;
    return wt != KERN_TYPE_F32 && wt != KERN_TYPE_F16 && wt != KERN_TYPE_BF16;
}

TEST(matmul_batch_invariant) {
    struct kern_pool *pool = NULL;
    ASSERT_OK(kern_pool_new(2, &pool));
    const char *saved = kern_cpu()->level;
    static const int64_t batches[] = {2, 5, 13, 70};
    int checked = 0, failed = 0, known = 0;
    for (int li = 0; kern_level_name(li); li++) {
        const char *level = kern_level_name(li);
        if (kern_set_level(level) < 0) continue;
        for (int wt = 0; wt < KERN_TYPE_COUNT; wt++) {
            const struct kern_type_traits *tr = kern_type_traits(wt);
            if (!tr || !tr->vec_dot || !tr->from_f32) continue;
            const int64_t n_in = tr->blck_size == 1 ? 865 : tr->blck_size == QK_K ? 1024 : 2080;
            for (int layout = KERN_LAYOUT_ROWS; layout <= KERN_LAYOUT_ROWS8; layout++) {
                const bool rows8 = layout == KERN_LAYOUT_ROWS8;
                const int64_t n_out = rows8 ? 88 : 90;
                if (rows8 && !kern_rows8_supported((enum kern_type)wt, n_in, n_out)) continue;
                struct mm_case c;
                mm_case_init(&c, wt, n_in, n_out, batches[ARRAY_SIZE(batches) - 1]);
                const size_t rs = kern_row_size(c.wt, n_in);
                uint8_t *w = c.w, *g = NULL;
                if (rows8) {
                    g = malloc(rs * (size_t)n_out);
                    ASSERT_TRUE(g != NULL);
                    ASSERT_OK(kern_rows8_pack(c.wt, g, c.w, n_in, n_out));
                    w = g;
                }
                float *y = malloc(sizeof(float) * (size_t)(n_out * c.n_tok));
                float *y1 = malloc(sizeof(float) * (size_t)n_out);
                ASSERT_TRUE(y && y1);
                int64_t bad_t = -1, bad_b = 0;
                for (size_t b = 0; b < ARRAY_SIZE(batches) && bad_t < 0; b++) {
                    kern_matmul_layout(pool, y, w, c.wt, (enum kern_layout)layout, c.x, n_in,
                                       n_out, batches[b], c.scratch);
                    for (int64_t t = 0; t < batches[b] && bad_t < 0; t++) {
                        kern_matmul_layout(pool, y1, w, c.wt, (enum kern_layout)layout,
                                           c.x + t * n_in, n_in, n_out, 1, c.scratch);
                        if (memcmp(y1, y + t * n_out, sizeof(float) * (size_t)n_out))
                            bad_t = t, bad_b = batches[b];
                    }
                }
                const bool ok = bad_t < 0 || batch_variant_known(level, wt, rows8);
                known += bad_t >= 0 && ok;
                if (!ok)
                    fprintf(stderr, "level %s %s %s: token %lld of %lld alone differs\n", level,
                            kern_type_name(c.wt), rows8 ? "rows8" : "rows", (long long)bad_t,
                            (long long)bad_b);
                failed += !ok;
                checked++;
                free(y);
                free(y1);
                free(g);
                mm_case_free(&c);
            }
        }
    }
    kern_set_level(saved);
    kern_pool_free(pool);
    printf("batch invariance: %d paths the same bits alone and in batches, %d known not\n",
           checked - known, known);
    ASSERT_EQ(failed, 0);
    ASSERT_TRUE(checked >= 30); /* the ref level's types, rows */
}

/* The dispatch, pinned: at each level this CPU has, the level and path every type's decode
 * (1 token) and prefill (64 tokens) take in the layout the engine gives it (rows8 where the
 * level has its kernels, as engine/device.c repacks), and its decode of the file's rows,
 * from this table, so that a level cannot fall back to a lower one's kernels unnoticed
 * (kern_impl_fill of avx512 leaving an entry to avx2) and falls back where it is meant to
 * (the 512-bit levels' decode of q2_K, q3_K and iq4_xs rows is the 256-bit one's); each
 * pinned path is then run against the spec with its type's tolerance. A "-" level is the
 * level under test itself, "~" the 256-bit level below it (avxvnni where the CPU has
 * AVX-VNNI, else avx2). */
struct dispatch_row {
    int wt;
    double tol; /* × S, as TOL_SUM; tol_of's where a path rounds the activations */
    /* by level (ref, avx2, avxvnni, avx512, avx512bf16): decode and prefill "level/path" */
    const char *decode[5], *prefill[5];
    /* decode of the file's rows (a mapped model's experts, shapes rows8 cannot take) */
    const char *rows_decode[5];
};
static const struct dispatch_row dispatch_rows[] = {
    {KERN_TYPE_F32,
     TOL_SUM,
     {"ref/reference", "-/rows8x4", "-/rows8x4", "-/rows8x4", "avx512/rows8x4"},
     {"ref/reference", "-/rows16", "-/rows16", "-/rows16", "avx512/rows16"},
     {"ref/reference", "-/rows", "-/rows", "-/rows", "avx512/rows"}},
    {KERN_TYPE_F16,
     TOL_SUM,
     {"ref/reference", "-/rows8x4", "-/rows8x4", "-/rows8x4", "avx512/rows8x4"},
     {"ref/reference", "-/rows16", "-/rows16", "-/rows16", "avx512/rows16"},
     {"ref/reference", "-/rows", "-/rows", "-/rows", "avx512/rows"}},
    {KERN_TYPE_BF16,
     TOL_SUM,
     {"ref/reference", "-/rows8x4", "-/rows8x4", "-/rows8x4", "-/rows8x4"},
     {"ref/reference", "-/rows16", "-/rows16", "-/rows16", "-/rows16"},
     {"ref/reference", "-/rows", "-/rows", "-/rows", "avx512/rows"}},
    {KERN_TYPE_Q8_0,
     TOL_SUM,
     {"ref/reference", "-/rows8", "-/rows8", "-/rows8", "avx512/rows8"},
     {"ref/reference", "-/rows8", "-/rows8", "-/rows8", "avx512/rows8"},
     {"ref/reference", "-/rows", "-/rows", "-/rows", "avx512/rows"}},
    {KERN_TYPE_Q4_0,
     TOL_SUM,
     {"ref/reference", "-/rows8", "-/rows8", "-/rows8", "avx512/rows8"},
     {"ref/reference", "-/rows8", "-/rows8", "-/rows16", "avx512/rows16"},
     {"ref/reference", "-/rows", "-/rows", "-/rows", "avx512/rows"}},
    {KERN_TYPE_Q4_1,
     TOL_SUM,
     {"ref/reference", "-/rows8", "-/rows8", "-/rows8", "avx512/rows8"},
     {"ref/reference", "-/rows8", "-/rows8", "-/rows16", "avx512/rows16"},
     {"ref/reference", "-/rows", "-/rows", "-/rows", "avx512/rows"}},
    {KERN_TYPE_Q5_0,
     TOL_SUM,
     {"ref/reference", "-/rows8", "-/rows8", "-/rows8", "avx512/rows8"},
     {"ref/reference", "-/rows8", "-/rows8", "-/rows16", "avx512/rows16"},
     {"ref/reference", "-/rows", "-/rows", "-/rows", "avx512/rows"}},
    {KERN_TYPE_Q5_1,
     TOL_SUM,
     {"ref/reference", "-/rows8", "-/rows8", "-/rows8", "avx512/rows8"},
     {"ref/reference", "-/rows8", "-/rows8", "-/rows16", "avx512/rows16"},
     {"ref/reference", "-/rows", "-/rows", "-/rows", "avx512/rows"}},
    {KERN_TYPE_IQ4_NL,
     TOL_SUM,
     {"ref/reference", "-/rows8", "-/rows8", "-/rows8", "avx512/rows8"},
     {"ref/reference", "-/rows8", "-/rows8", "-/rows16", "avx512/rows16"},
     {"ref/reference", "-/rows", "-/rows", "-/rows", "avx512/rows"}},
    {KERN_TYPE_Q4_K,
     TOL_SUM,
     {"ref/reference", "-/rows8", "-/rows8", "-/rows8", "avx512/rows8"},
     {"ref/reference", "-/rows8", "-/rows8", "-/rows16", "avx512/rows16"},
     {"ref/reference", "-/rows", "-/rows", "-/rows", "avx512/rows"}},
    {KERN_TYPE_Q5_K,
     TOL_SUM,
     {"ref/reference", "-/rows8", "-/rows8", "-/rows8", "avx512/rows8"},
     {"ref/reference", "-/rows8", "-/rows8", "-/rows16", "avx512/rows16"},
     {"ref/reference", "-/rows", "-/rows", "-/rows", "avx512/rows"}},
    {KERN_TYPE_Q6_K,
     TOL_SUM,
     {"ref/reference", "-/rows8", "-/rows8", "-/rows8", "avx512/rows8"},
     {"ref/reference", "-/rows8", "-/rows8", "-/rows16", "avx512/rows16"},
     {"ref/reference", "-/rows", "-/rows", "-/rows", "avx512/rows"}},
    {KERN_TYPE_Q2_K,
     TOL_SUM,
     {"ref/reference", "-/rows8", "-/rows8", "-/rows8", "avx512/rows8"},
     {"ref/reference", "-/rows8", "-/rows8", "-/rows16", "avx512/rows16"},
     {"ref/reference", "-/rows", "-/rows", "~/rows", "~/rows"}},
    {KERN_TYPE_Q3_K,
     TOL_SUM,
     {"ref/reference", "-/rows8", "-/rows8", "-/rows8", "avx512/rows8"},
     {"ref/reference", "-/rows8", "-/rows8", "-/rows16", "avx512/rows16"},
     {"ref/reference", "-/rows", "-/rows", "~/rows", "~/rows"}},
    {KERN_TYPE_IQ4_XS,
     TOL_SUM,
     {"ref/reference", "-/rows8", "-/rows8", "-/rows8", "avx512/rows8"},
     {"ref/reference", "-/rows8", "-/rows8", "-/rows8", "avx512/rows8"},
     {"ref/reference", "-/rows", "-/rows", "~/rows", "~/rows"}},
    {KERN_TYPE_MXFP4,
     TOL_SUM,
     {"ref/reference", "-/rows8", "-/rows8", "-/rows8", "avx512/rows8"},
     {"ref/reference", "-/rows8", "-/rows8", "-/rows16", "avx512/rows16"},
     {"ref/reference", "-/rows", "-/rows", "-/rows", "avx512/rows"}},
};

TEST(matmul_dispatch_pinned) {
    const char *saved = kern_cpu()->level;
    int checked = 0;
    const char *w256 = kern_cpu()->avx_vnni ? "avxvnni" : "avx2";
    for (int li = 0; li < (int)ARRAY_SIZE(dispatch_rows[0].decode) && kern_level_name(li); li++) {
        const char *level = kern_level_name(li);
        if (kern_set_level(level) < 0) continue;
        for (size_t i = 0; i < ARRAY_SIZE(dispatch_rows); i++) {
            const struct dispatch_row *d = &dispatch_rows[i];
            /* 64 rows: one thread's two units of 4 groups (rows8x4 runs) */
            const int64_t n_in = kern_type_traits(d->wt)->blck_size == 1 ? 1040 : 2304, n_out = 64;
            const enum kern_layout lay8 =
                kern_rows8_supported(d->wt, n_in, n_out) ? KERN_LAYOUT_ROWS8 : KERN_LAYOUT_ROWS;
            for (int p = 0; p < 3; p++) {
                const int64_t n_tok = p == 1 ? 64 : 1;
                const enum kern_layout lay = p == 2 ? KERN_LAYOUT_ROWS : lay8;
                const char *want = p == 0 ? d->decode[li] : p == 1 ? d->prefill[li] : d->rows_decode[li];
                const char *got_level;
                const char *got = kern_matmul_path(d->wt, lay, n_tok, &got_level);
                char want_s[64], got_s[64];
                snprintf(want_s, sizeof want_s, "%s", want);
                if (want[0] == '-' || want[0] == '~')
                    snprintf(want_s, sizeof want_s, "%s%s", want[0] == '-' ? level : w256,
                             want + 1);
                snprintf(got_s, sizeof got_s, "%s/%s", got_level, got);
                if (strcmp(want_s, got_s) != 0)
                    TEST_FAIL_("level %s %s n_tok %lld: path %s, pinned %s", level,
                               kern_type_name(d->wt), (long long)n_tok, got_s, want_s);
                /* the pinned path against the spec, at the type's tolerance */
                struct mm_case c;
                mm_case_init(&c, d->wt, n_in, n_out, n_tok);
                size_t bytes = kern_row_size(d->wt, n_in) * (size_t)n_out;
                uint8_t *g = malloc(bytes);
                ASSERT_TRUE(g != NULL);
                if (lay == KERN_LAYOUT_ROWS8)
                    ASSERT_OK(kern_rows8_pack(d->wt, g, c.w, n_in, n_out));
                else
                    memcpy(g, c.w, bytes);
                float *y = malloc((size_t)(n_out * n_tok) * sizeof(float));
                ASSERT_TRUE(y != NULL);
                kern_matmul_layout(NULL, y, g, d->wt, lay, c.x, n_in, n_out, n_tok, c.scratch);
                bool ok = true;
                for (int64_t t = 0; t < n_tok && ok; t++)
                    for (int64_t o = 0; o < n_out && ok; o++) {
                        const size_t rs = kern_row_size(d->wt, n_in);
                        float want_y = kern_ref_dot_f32(c.w + o * rs, d->wt, c.x + t * n_in, n_in);
                        double tol = MAX(d->tol, tol_of(d->wt, lay, n_tok)) *
                                         abs_dot(c.wd + o * n_in, c.x + t * n_in, n_in) +
                                     1e-30;
                        ok = fabs((double)y[t * n_out + o] - want_y) <= tol;
                        if (!ok)
                            fprintf(
                                stderr,
                                "%s %s %s n_tok %lld: y[%lld][%lld] = %.9g, spec %.9g, tol %.3g\n",
                                level, kern_type_name(d->wt), got_s, (long long)n_tok, (long long)t,
                                (long long)o, y[t * n_out + o], want_y, tol);
                    }
                free(y);
                free(g);
                mm_case_free(&c);
                if (!ok)
                    TEST_FAIL_("level %s %s %s: differs from the spec", level,
                               kern_type_name(d->wt), got_s);
                checked++;
            }
        }
    }
    kern_set_level(saved);
    ASSERT_TRUE(checked >= (int)ARRAY_SIZE(dispatch_rows) * 3);
    printf("  %d type × level × mode paths pinned and checked\n", checked);
}

/* mxfp4's E8M0 scales at their ends, each alone in every block of a matrix (mixed with
 * ordinary blocks, an error there would hide below the others' tolerance): e = 0 and 1 are
 * the subnormals 2^-128 and 2^-127 (the SIMD levels build them apart from the normal
 * ones), 2 the smallest normal, 127 2^-1, 255 2^127 (activations of 1e-5 then keep the
 * sums finite: d_x ~ 2^-24). Rows and rows8, decode and prefill, every level, against the
 * spec; the absolute floor is a few subnormal steps (fused vs separate roundings). */
TEST(matmul_mxfp4_scales) {
    enum { N_IN = 2304, N_OUT = 16 };
    static const int exps[] = {0, 1, 2, 127, 255};
    static const int64_t toks[] = {1, 5, 64};
    const size_t rs = kern_row_size(KERN_TYPE_MXFP4, N_IN);
    uint8_t *w = malloc(rs * N_OUT), *g = malloc(rs * N_OUT);
    float *x = malloc(sizeof(float) * N_IN * 64), *y = malloc(sizeof(float) * N_OUT * 64);
    float *wd = malloc(sizeof(float) * N_IN * N_OUT);
    void *scratch = malloc(kern_matmul_scratch_bytes(KERN_TYPE_MXFP4, N_IN, 64));
    ASSERT_TRUE(w && g && x && y && wd && scratch);
    const char *saved = kern_cpu()->level;
    int checked = 0;
    for (size_t ei = 0; ei < ARRAY_SIZE(exps); ei++) {
        mxfp4_random_row(w, (int64_t)N_IN * N_OUT);
        for (int64_t b = 0; b < (int64_t)N_IN * N_OUT / QK_MXFP4; b++)
            ((struct block_mxfp4 *)w)[b].e = (uint8_t)exps[ei];
        kern_type_traits(KERN_TYPE_MXFP4)->to_f32(wd, w, (int64_t)N_IN * N_OUT);
        for (int64_t i = 0; i < (int64_t)N_IN * 64; i++) x[i] = rng_uniform() * (exps[ei] == 255 ? 1e-5f : 1.0f);
        ASSERT_OK(kern_rows8_pack(KERN_TYPE_MXFP4, g, w, N_IN, N_OUT));
        for (int li = 0; kern_level_name(li); li++) {
            const char *level = kern_level_name(li);
            if (kern_set_level(level) < 0) continue;
            for (int lay = 0; lay < 2; lay++)
                for (size_t k = 0; k < ARRAY_SIZE(toks); k++) {
                    const int64_t nt = toks[k];
                    kern_matmul_layout(NULL, y, lay ? g : w, KERN_TYPE_MXFP4,
                                       lay ? KERN_LAYOUT_ROWS8 : KERN_LAYOUT_ROWS, x, N_IN, N_OUT,
                                       nt, scratch);
                    for (int64_t t = 0; t < nt; t++)
                        for (int64_t o = 0; o < N_OUT; o++) {
                            const float *xt = x + t * N_IN;
                            float want = kern_ref_dot_f32(w + o * rs, KERN_TYPE_MXFP4, xt, N_IN);
                            double tol = TOL_SUM * abs_dot(wd + o * N_IN, xt, N_IN) + 0x1p-140;
                            if (!(isfinite(want) && fabs((double)y[t * N_OUT + o] - want) <= tol))
                                TEST_FAIL_("level %s e %d %s n_tok %lld: y[%lld][%lld] = %a, spec %a",
                                           level, exps[ei], lay ? "rows8" : "rows", (long long)nt,
                                           (long long)t, (long long)o, y[t * N_OUT + o], want);
                        }
                    checked++;
                }
        }
    }
    kern_set_level(saved);
    free(w), free(g), free(x), free(y), free(wd), free(scratch);
    ASSERT_TRUE(checked >= 30);
}

/* kern_matmul_many equals one kern_matmul_layout per matrix, bit for bit, at every level,
 * on 1 and 2 threads, for 1, 3 and 64 tokens: matrices whose activations are converted
 * alike (or not at all) in one pool run (the rows8 and the file's rows mixed, an empty one
 * among them), one converted otherwise in a run of its own; the conversion a run of its own
 * where it is big enough to wake the workers (64 tokens of 256 values or more). */
TEST(matmul_many_as_each) {
    struct kern_pool *pool = NULL;
    ASSERT_OK(kern_pool_new(2, &pool));
    const char *saved = kern_cpu()->level;
    static const struct {
        int wt[3];
        int64_t n_out[3];
        bool rows8[3];
        int64_t n_in;
        int runs[3]; /* pool runs for toks[i] tokens (-1: the level's) */
    } sets[] = {
        {{KERN_TYPE_Q4_K, KERN_TYPE_Q5_K, KERN_TYPE_Q4_K}, {64, 16, 24}, {true, true, false}, 512, {1, 1, 2}},
        {{KERN_TYPE_Q8_0, KERN_TYPE_Q8_0, KERN_TYPE_Q8_0}, {48, 0, 16}, {true, true, true}, 256, {1, 1, 2}},
        {{KERN_TYPE_F16, KERN_TYPE_F16, KERN_TYPE_F32}, {32, 16, 8}, {true, false, false}, 96, {1, 1, 1}},
        /* q6_K and q4_0 read q8_0 rows, q4_K q8_1 ones (Q4_K_M's v beside its q and k) */
        {{KERN_TYPE_Q6_K, KERN_TYPE_Q4_K, KERN_TYPE_Q4_0}, {40, 16, 8}, {false, true, true}, 512, {2, 2, 4}},
        /* f16 and bf16 prefill share packed panels where the level packs both alike */
        {{KERN_TYPE_F16, KERN_TYPE_BF16, KERN_TYPE_F16}, {32, 16, 16}, {true, true, true}, 256, {1, -1, -1}},
    };
    static const int64_t toks[] = {1, 3, 64};
    int checked = 0;
    for (int li = 0; kern_level_name(li); li++) {
        const char *level = kern_level_name(li);
        if (kern_set_level(level) < 0) continue;
        for (size_t si = 0; si < ARRAY_SIZE(sets); si++)
            for (size_t ti = 0; ti < ARRAY_SIZE(toks); ti++)
                for (int th = 0; th < 2; th++) {
                    const int64_t n_tok = toks[ti];
                    struct kern_pool *p = th ? pool : NULL;
                    struct mm_case c[3];
                    struct kern_mm_out outs[3];
                    uint8_t *g[3];
                    float *y_each[3], *y_many[3];
                    size_t sb = 0;
                    for (int i = 0; i < 3; i++) {
                        const int wt = sets[si].wt[i];
                        const int64_t n_out = sets[si].n_out[i];
                        mm_case_init(&c[i], wt, sets[si].n_in, n_out, n_tok);
                        if (i > 0) memcpy(c[i].x, c[0].x, sizeof(float) * (size_t)(sets[si].n_in * n_tok));
                        size_t bytes = kern_row_size(wt, sets[si].n_in) * (size_t)n_out;
                        g[i] = malloc(bytes + 1);
                        bool r8 = sets[si].rows8[i] && n_out > 0 && kern_rows8_supported(wt, sets[si].n_in, n_out);
                        if (r8) ASSERT_OK(kern_rows8_pack(wt, g[i], c[i].w, sets[si].n_in, n_out));
                        else memcpy(g[i], c[i].w, bytes);
                        outs[i] = (struct kern_mm_out){.w = g[i], .wt = wt, .n_out = n_out,
                                                       .layout = r8 ? KERN_LAYOUT_ROWS8 : KERN_LAYOUT_ROWS};
                        y_each[i] = calloc((size_t)(n_out * n_tok) + 1, sizeof(float));
                        y_many[i] = calloc((size_t)(n_out * n_tok) + 1, sizeof(float));
                        outs[i].y = y_many[i];
                        size_t b = kern_matmul_scratch_bytes(wt, sets[si].n_in, n_tok);
                        if (b > sb) sb = b;
                    }
                    void *scratch = malloc(sb + 1);
                    for (int i = 0; i < 3; i++)
                        kern_matmul_layout(p, y_each[i], g[i], outs[i].wt, outs[i].layout, c[0].x,
                                           sets[si].n_in, outs[i].n_out, n_tok, scratch);
                    const uint64_t runs0 = kern_pool_runs(p);
                    kern_matmul_many(p, outs, 3, c[0].x, sets[si].n_in, n_tok, scratch);
                    const uint64_t runs = kern_pool_runs(p) - runs0;
                    for (int i = 0; i < 3; i++) {
                        if (memcmp(y_each[i], y_many[i], sizeof(float) * (size_t)(outs[i].n_out * n_tok)) != 0)
                            TEST_FAIL_("level %s set %zu matrix %d (%s) n_tok %lld threads %d: differs",
                                       level, si, i, kern_type_name(outs[i].wt), (long long)n_tok, th + 1);
                        free(g[i]), free(y_each[i]), free(y_many[i]);
                        mm_case_free(&c[i]);
                    }
                    free(scratch);
                    /* one run fused (the 64 tokens' conversion one before it); the matrix
                     * converted otherwise as many apart; one matrix apart at most */
                    const int want = sets[si].runs[ti];
                    if (p && (want >= 0 ? runs != (uint64_t)want : runs < 1 || runs > 4))
                        TEST_FAIL_("level %s set %zu: %llu pool runs for %lld tokens, not %d", level,
                                   si, (unsigned long long)runs, (long long)n_tok, want);
                    checked++;
                }
    }
    kern_set_level(saved);
    kern_pool_free(pool);
    ASSERT_TRUE(checked >= 30);
}

TEST_MAIN(T(level_names), T(matmul_batch_invariant), T(level_cap_env), T(matmul_edges), T(spec_vs_exact),
          T(quantize_row_bit_exact), T(matmul_all_levels_vs_spec), T(matmul_tile_paths_vs_spec),
          T(matmul_rows8_vs_spec), T(matmul_rows8_float_odd), T(matmul_dispatch_pinned),
          T(matmul_mxfp4_scales), T(matmul_many_as_each))
