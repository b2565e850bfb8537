// labels: cuda
/* Every CUDA op against the CPU reference kernels, with a named tolerance per op and type.
 * Without a usable device (no GPU, no driver) the probe must say 0 without crashing, a
 * context must fail with -ENODEV, and every test skips (exit 77). */
#include "engine/moe.h"
#include "kernels/cuda/cuda.h"
#include "kernels/kernels.h"
#include "test.h"

#include <errno.h>

/* ---- fixtures ---------------------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rng_u32(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 32);
}
static float rng_uniform(void) { return (float)(rng_u32() >> 8) * 0x1p-24f * 2.0f - 1.0f; }

static struct kern_cuda_ctx *ctx;
/* device buffers of the running test, freed by dev_done() */
static struct kern_cuda_buf *bufs[64];
static int n_bufs;

static void dev_done(void);
static void dev_free_all(void) {
    dev_done();
    kern_cuda_ctx_free(ctx);
    ctx = NULL;
}

/* The context, or NULL when this machine has no usable CUDA device. */
static struct kern_cuda_ctx *dev_ctx(void) {
    if (!ctx && kern_cuda_device_count() > 0) {
        if (kern_cuda_ctx_new(0, &ctx) < 0) ctx = NULL;
        else atexit(dev_free_all);
    }
    return ctx;
}
#define NEED_DEVICE()                                                                   \
    do {                                                                                \
        if (!dev_ctx()) SKIP("no CUDA device (no GPU or no driver): the CUDA tier is untested here"); \
    } while (0)

/* A device copy of n bytes of h (h NULL: zeroed); lives until dev_done(). */
static void *dev_dup(const void *h, size_t n) {
    struct kern_cuda_buf *b;
    if (n_bufs == (int)ARRAY_SIZE(bufs) || kern_cuda_buf_new(ctx, n, &b) < 0) return NULL;
    if (h && kern_cuda_buf_upload(b, 0, h, n) < 0) {
        kern_cuda_buf_free(b);
        return NULL;
    }
    bufs[n_bufs++] = b;
    return kern_cuda_buf_ptr(b);
}
/* Downloads n bytes at device address p (inside one of the test's buffers). */
static int dev_get(void *h, const void *p, size_t n) {
    for (int i = 0; i < n_bufs; i++) {
        const char *base = kern_cuda_buf_ptr(bufs[i]);
        if ((const char *)p >= base && (const char *)p < base + kern_cuda_buf_bytes(bufs[i]))
            return kern_cuda_buf_download(bufs[i], (size_t)((const char *)p - base), h, n);
    }
    return -EINVAL;
}
static void dev_done(void) {
    while (n_bufs > 0) kern_cuda_buf_free(bufs[--n_bufs]);
}

static void fill(float *x, int64_t n, float scale) {
    for (int64_t i = 0; i < n; i++) x[i] = rng_uniform() * scale;
}

/* A row of n values of type t: quantized from random floats, or, for the k-quants (no
 * quantizer), random bytes with sane fp16 super-block scales (every scale bit pattern). */
static void random_row(uint8_t *row, int t, int64_t n) {
    const struct kern_type_traits *tr = kern_type_traits(t);
    if (tr->from_f32) {
        float *x = malloc((size_t)n * sizeof *x);
        fill(x, n, 1.0f);
        tr->from_f32(row, x, n);
        free(x);
        return;
    }
    for (size_t i = 0; i < kern_row_size(t, n); i++) row[i] = (uint8_t)rng_u32();
    for (int64_t b = 0; b < n / QK_K; b++) {
        uint8_t *blk = row + (size_t)b * tr->type_size;
        kern_f16 d = kern_fp32_to_fp16(0.001f + 0.01f * (float)(rng_u32() % 100) / 100.0f);
        kern_f16 dmin = kern_fp32_to_fp16(0.002f * (float)(rng_u32() % 100) / 100.0f);
        /* byte offsets of d (and dmin) in each layout; iq4_xs has no dmin */
        int d_at = t == KERN_TYPE_Q6_K ? 208 : t == KERN_TYPE_Q3_K ? 108 : t == KERN_TYPE_Q2_K ? 80 : 0;
        memcpy(blk + d_at, &d, 2);
        if (t != KERN_TYPE_Q6_K && t != KERN_TYPE_Q3_K && t != KERN_TYPE_IQ4_XS)
            memcpy(blk + d_at + 2, &dmin, 2);
    }
}

static const int weight_types[] = {
    KERN_TYPE_F32,  KERN_TYPE_F16,  KERN_TYPE_BF16, KERN_TYPE_Q8_0,   KERN_TYPE_Q4_0,
    KERN_TYPE_Q4_1, KERN_TYPE_Q5_0, KERN_TYPE_Q5_1, KERN_TYPE_IQ4_NL, KERN_TYPE_Q4_K,
    KERN_TYPE_Q5_K, KERN_TYPE_Q6_K, KERN_TYPE_Q2_K, KERN_TYPE_Q3_K, KERN_TYPE_IQ4_XS,
    KERN_TYPE_MXFP4,
};
static const int kv_types[] = {
    KERN_TYPE_F32,  KERN_TYPE_F16,  KERN_TYPE_BF16, KERN_TYPE_Q8_0,   KERN_TYPE_Q4_0,
    KERN_TYPE_Q4_1, KERN_TYPE_Q5_0, KERN_TYPE_Q5_1, KERN_TYPE_IQ4_NL,
};

/* ---- tolerances (named, per op) ------------------------------------------------------
 * Matrix products are compared with the exact (double) dot product of the reference
 * decoding of W (the traits' to_f32, the executable spec of every type) and x (for
 * quantized W: x rounded to q8_0 blocks, as kern_matmul() does), as an error relative to
 * Σ|w·x| (the scale of the rounding a dot product can accumulate):
 *   matvec: f32 activations, f32 sums in another order        -> 1e-5
 *   GEMM:   W and x rounded to f16 (2^-11 each), f32 sums       -> 2e-3 */
#define TOL_MATVEC 1e-5
#define TOL_GEMM 2e-3
#define TOL_DECODE 1e-6   /* get_rows, relative to the row's largest value: nvcc contracts
                           * d·q + m (and d·sc·q - dmin·m) into FMAs, the C reference does not */
#define TOL_ROW 2e-6      /* rmsnorm, silu, gelu, add: relative, ulp-level libm differences */
#define TOL_ROPE 4e-6     /* absolute on |x| <= 1: cosf/sinf differ by an ulp or two */
#define TOL_ATTN 2e-5     /* absolute on |v| <= 1: exp and summation order */

/* ---- tests ------------------------------------------------------------------------- */

TEST(probe) {
    int n = kern_cuda_device_count();
    ASSERT_TRUE(n >= 0);
    if (n == 0) {
        struct kern_cuda_ctx *c = NULL;
        ASSERT_EQ(kern_cuda_ctx_new(0, &c), -ENODEV);
        ASSERT_TRUE(c == NULL);
        SKIP("no CUDA device: the probe says 0 and contexts fail with -ENODEV, as they must");
    }
    struct kern_cuda_device_info info;
    ASSERT_OK(kern_cuda_device_get_info(0, &info));
    printf("  device 0: %s, sm_%d%d, %d SMs, %.1f GiB (%.1f GiB free)\n", info.name, info.cc_major,
           info.cc_minor, info.n_sm, (double)info.total_bytes / (1 << 30),
           (double)info.free_bytes / (1 << 30));
    ASSERT_TRUE(info.total_bytes > 0);
    NEED_DEVICE();
    size_t before = kern_cuda_ctx_reserved_bytes(ctx);
    struct kern_cuda_buf *b;
    ASSERT_OK(kern_cuda_buf_new(ctx, 12345, &b));
    ASSERT_EQ(kern_cuda_ctx_reserved_bytes(ctx), before + 12345);
    uint8_t h[100], back[100];
    for (int i = 0; i < 100; i++) h[i] = (uint8_t)i;
    ASSERT_OK(kern_cuda_buf_upload(b, 1000, h, sizeof h));
    ASSERT_OK(kern_cuda_buf_download(b, 1000, back, sizeof back));
    ASSERT_TRUE(memcmp(h, back, sizeof h) == 0);
    ASSERT_EQ(kern_cuda_buf_upload(b, 12300, h, sizeof h), -EINVAL);
    kern_cuda_buf_free(b);
    ASSERT_EQ(kern_cuda_ctx_reserved_bytes(ctx), before);
}

/* y = x·Wᵀ for every weight type, on both paths (matvec: n_tok <= 8, GEMM above), with
 * n_out not a multiple of the tile sizes. */
TEST(matmul) {
    NEED_DEVICE();
    const int64_t n_in = 512, n_out = 67;
    const int64_t toks[] = {1, 3, 8, 9, 70};
    float *x = malloc(sizeof(float) * 70 * n_in), *wf = malloc(sizeof(float) * n_out * n_in);
    float *y = malloc(sizeof(float) * 70 * n_out);
    uint8_t *w = malloc(kern_row_size(KERN_TYPE_F32, n_in) * n_out);
    /* xq: x as the q8 blocks that quantized weight types see (kern_matmul's rounding) */
    float *xq = malloc(sizeof(float) * 70 * n_in);
    uint8_t *q8 = malloc(kern_row_size(KERN_TYPE_Q8_0, 70 * n_in));
    fill(x, 70 * n_in, 1.0f);
    kern_type_traits(KERN_TYPE_Q8_0)->from_f32(q8, x, 70 * n_in);
    kern_type_traits(KERN_TYPE_Q8_0)->to_f32(xq, q8, 70 * n_in);
    for (size_t ti = 0; ti < ARRAY_SIZE(weight_types); ti++) {
        const int t = weight_types[ti];
        const size_t rs = kern_row_size(t, n_in);
        const float *xr = kern_type_traits(t)->is_quantized ? xq : x;
        for (int64_t o = 0; o < n_out; o++) {
            random_row(w + o * rs, t, n_in);
            kern_type_traits(t)->to_f32(wf + o * n_in, w + o * rs, n_in);
        }
        void *dw = dev_dup(w, rs * n_out), *dx = dev_dup(x, sizeof(float) * 70 * n_in);
        float *dy = dev_dup(NULL, sizeof(float) * 70 * n_out);
        void *scratch = dev_dup(NULL, kern_cuda_matmul_scratch_bytes(n_in, n_out, 70) + 1);
        ASSERT_TRUE(dw && dx && dy && scratch);
        for (size_t k = 0; k < ARRAY_SIZE(toks); k++) {
            const int64_t n_tok = toks[k];
            const double tol = n_tok <= KERN_CUDA_MATVEC_MAX_TOK ? TOL_MATVEC : TOL_GEMM;
            ASSERT_OK(kern_cuda_matmul(ctx, dy, dw, t, dx, n_in, n_out, n_tok, scratch));
            ASSERT_OK(dev_get(y, dy, sizeof(float) * n_tok * n_out));
            double worst = 0;
            for (int64_t tk = 0; tk < n_tok; tk++)
                for (int64_t o = 0; o < n_out; o++) {
                    double ref = 0, mag = 1e-30;
                    for (int64_t i = 0; i < n_in; i++) {
                        ref += (double)wf[o * n_in + i] * xr[tk * n_in + i];
                        mag += fabs((double)wf[o * n_in + i] * xr[tk * n_in + i]);
                    }
                    double e = fabs(y[tk * n_out + o] - ref) / mag;
                    worst = e > worst ? e : worst;
                }
            if (!(worst <= tol))
                TEST_FAIL_("%s n_tok=%lld: relative error %.3g > %.3g", kern_type_name(t), (long long)n_tok,
                           worst, tol);
        }
        dev_done();
    }
    free(x), free(xq), free(q8), free(wf), free(y), free(w);
}

TEST(get_rows) {
    NEED_DEVICE();
    const int64_t n = 512, n_rows = 10, n_tok = 4;
    const int32_t tokens[4] = {7, 0, 9, 7};
    uint8_t *emb = malloc(kern_row_size(KERN_TYPE_F32, n) * n_rows);
    float *ref = malloc(sizeof(float) * n), *got = malloc(sizeof(float) * n * n_tok);
    for (size_t ti = 0; ti < ARRAY_SIZE(weight_types); ti++) {
        const int t = weight_types[ti];
        const size_t rs = kern_row_size(t, n);
        for (int64_t r = 0; r < n_rows; r++) random_row(emb + r * rs, t, n);
        void *de = dev_dup(emb, rs * n_rows), *dt = dev_dup(tokens, sizeof tokens);
        float *dx = dev_dup(NULL, sizeof(float) * n * n_tok);
        ASSERT_TRUE(de && dt && dx);
        ASSERT_OK(kern_cuda_get_rows(ctx, dx, de, t, rs, dt, n_tok, n));
        ASSERT_OK(dev_get(got, dx, sizeof(float) * n * n_tok));
        for (int64_t k = 0; k < n_tok; k++) {
            kern_type_traits(t)->to_f32(ref, emb + tokens[k] * rs, n);
            float row_max = 0;
            for (int64_t i = 0; i < n; i++) row_max = fmaxf(row_max, fabsf(ref[i]));
            for (int64_t i = 0; i < n; i++)
                if (!(fabsf(got[k * n + i] - ref[i]) <= TOL_DECODE * (fabsf(ref[i]) + row_max)))
                    TEST_FAIL_("%s token %lld value %lld: %.9g, expected %.9g", kern_type_name(t),
                               (long long)k, (long long)i, got[k * n + i], ref[i]);
        }
        dev_done();
    }
    free(emb), free(ref), free(got);
}

TEST(row_ops) {
    NEED_DEVICE();
    const int64_t n = 2048, n_rows = 3;
    float x[3 * 2048], w[2048], u[3 * 2048], ref[3 * 2048], got[3 * 2048];
    fill(x, n * n_rows, 3.0f), fill(w, n, 1.0f), fill(u, n * n_rows, 2.0f);
    float *dx = dev_dup(x, sizeof x), *dw = dev_dup(w, sizeof w), *du = dev_dup(u, sizeof u);
    float *dy = dev_dup(NULL, sizeof x);
    ASSERT_TRUE(dx && dw && du && dy);

    ASSERT_OK(kern_cuda_rmsnorm(ctx, dy, dx, dw, n, n_rows, 1e-5f));
    ASSERT_OK(dev_get(got, dy, sizeof got));
    for (int64_t r = 0; r < n_rows; r++) kern_rmsnorm(ref + r * n, x + r * n, w, n, 1e-5f);
    for (int64_t i = 0; i < n * n_rows; i++) ASSERT_NEAR(got[i], ref[i], TOL_ROW * fabsf(ref[i]) + 1e-7);

    ASSERT_OK(kern_cuda_silu_mul(ctx, dy, dx, du, n * n_rows));
    ASSERT_OK(dev_get(got, dy, sizeof got));
    kern_silu_mul(ref, x, u, n * n_rows);
    for (int64_t i = 0; i < n * n_rows; i++) ASSERT_NEAR(got[i], ref[i], TOL_ROW * fabsf(ref[i]) + 1e-7);

    ASSERT_OK(kern_cuda_gelu_mul(ctx, dy, dx, du, n * n_rows));
    ASSERT_OK(dev_get(got, dy, sizeof got));
    for (int64_t i = 0; i < n * n_rows; i++) {
        double g = x[i], e = 0.5 * g * (1 + tanh(0.7978845608028654 * (g + 0.044715 * g * g * g))) * u[i];
        ASSERT_NEAR(got[i], e, 1e-5 * fabs(e) + 1e-6);
    }

    /* y += bias (one row broadcast), then y += x row by row */
    ASSERT_OK(kern_cuda_copy(ctx, dy, dx, sizeof x));
    ASSERT_OK(kern_cuda_add(ctx, dy, dw, n, n_rows, 1));
    ASSERT_OK(kern_cuda_add(ctx, dy, du, n, n_rows, n_rows));
    ASSERT_OK(dev_get(got, dy, sizeof got));
    for (int64_t i = 0; i < n * n_rows; i++) ASSERT_NEAR(got[i], (x[i] + w[i % n]) + u[i], 1e-6);
    dev_done();
}

TEST(rope) {
    NEED_DEVICE();
    enum { N_TOK = 5, N_HEAD = 3, HD = 128 };
    const int32_t pos[N_TOK] = {0, 1, 17, 4095, 30000};
    float ff[HD / 2];
    for (int i = 0; i < HD / 2; i++) ff[i] = 1.0f + (float)i / 16.0f;
    float *dff = dev_dup(ff, sizeof ff);
    int32_t *dpos = dev_dup(pos, sizeof pos);
    ASSERT_TRUE(dff && dpos);
    struct kern_rope_params variants[] = {
        {.n_dims = HD, .neox = false, .freq_base = 10000, .freq_scale = 1, .attn_factor = 1},
        {.n_dims = HD, .neox = true, .freq_base = 1000000, .freq_scale = 1, .attn_factor = 1},
        {.n_dims = 64, .neox = true, .freq_base = 10000, .freq_scale = 0.25f, .ext_factor = 1,
         .attn_factor = 1, .beta_fast = 32, .beta_slow = 1, .n_ctx_orig = 4096},
        {.n_dims = HD, .neox = false, .freq_base = 500000, .freq_scale = 1, .attn_factor = 1,
         .freq_factors = ff},
    };
    for (size_t v = 0; v < ARRAY_SIZE(variants); v++) {
        float x[N_TOK * N_HEAD * HD], ref[N_TOK * N_HEAD * HD], got[N_TOK * N_HEAD * HD], cs[HD];
        fill(x, N_TOK * N_HEAD * HD, 1.0f);
        memcpy(ref, x, sizeof x);
        struct kern_rope_params p = variants[v];
        for (int t = 0; t < N_TOK; t++) {
            kern_rope_cache(cs, pos[t], &p);
            kern_rope_apply(ref + t * N_HEAD * HD, cs, N_HEAD, HD, &p);
        }
        if (p.freq_factors) p.freq_factors = dff; /* the device's copy */
        float *dx = dev_dup(x, sizeof x);
        ASSERT_TRUE(dx);
        ASSERT_OK(kern_cuda_rope(ctx, dx, dpos, N_TOK, N_HEAD, HD, &p));
        ASSERT_OK(dev_get(got, dx, sizeof got));
        for (int i = 0; i < N_TOK * N_HEAD * HD; i++)
            if (!(fabsf(got[i] - ref[i]) <= TOL_ROPE))
                TEST_FAIL_("variant %zu value %d: %.9g, expected %.9g", v, i, got[i], ref[i]);
    }
    dev_done();
}

TEST(hadamard) {
    NEED_DEVICE();
    const int64_t n = 1024;
    float x[1024], ref[1024], got[1024];
    for (int64_t n_rot = 2; n_rot <= 1024; n_rot *= 2) {
        fill(x, n, 2.0f);
        memcpy(ref, x, sizeof x);
        kern_ref_hadamard(ref, n, n_rot);
        float *dx = dev_dup(x, sizeof x);
        ASSERT_TRUE(dx);
        ASSERT_OK(kern_cuda_hadamard(ctx, dx, n, n_rot));
        ASSERT_OK(dev_get(got, dx, sizeof got));
        if (memcmp(got, ref, sizeof ref) != 0) TEST_FAIL_("n_rot %lld: not bit-identical to the reference", (long long)n_rot);
        dev_done();
    }
    float *dx = dev_dup(x, sizeof x);
    ASSERT_EQ(kern_cuda_hadamard(ctx, dx, n, 48), -EINVAL);
    dev_done();
}

TEST(argmax) {
    NEED_DEVICE();
    enum { N = 32000, ROWS = 3 };
    static float x[ROWS * N];
    fill(x, ROWS * N, 10.0f);
    x[0 * N + 31999] = 20.0f;
    x[1 * N + 5] = 20.0f, x[1 * N + 20000] = 20.0f; /* a tie: the first wins */
    x[2 * N + 0] = 30.0f;
    float *dx = dev_dup(x, sizeof x);
    int32_t *di = dev_dup(NULL, sizeof(int32_t) * ROWS), got[ROWS];
    ASSERT_TRUE(dx && di);
    ASSERT_OK(kern_cuda_argmax(ctx, di, dx, N, ROWS));
    ASSERT_OK(dev_get(got, di, sizeof got));
    ASSERT_EQ(got[0], 31999);
    ASSERT_EQ(got[1], 5);
    ASSERT_EQ(got[2], 0);
    dev_done();
}

/* The KV write: rotate (0, 64 or 128) then convert, into scattered cells; the bytes must
 * equal the reference quantizer's on the host-rotated row. */
TEST(kv_store) {
    NEED_DEVICE();
    enum { N_TOK = 3, N = 8 * 128, N_CELLS = 7 };
    const int32_t cell[N_TOK] = {5, 0, 3};
    float x[N_TOK * N], rot[N];
    fill(x, N_TOK * N, 4.0f);
    x[17] = 0.0f; /* a block with an exact zero and one that is all zero */
    for (int i = 64; i < 96; i++) x[N + i] = 0.0f;
    const int64_t rots[] = {0, 64, 128};
    for (size_t ti = 0; ti < ARRAY_SIZE(kv_types); ti++)
        for (size_t ri = 0; ri < ARRAY_SIZE(rots); ri++) {
            const int t = kv_types[ti];
            const size_t rs = kern_row_size(t, N);
            uint8_t *ref = calloc(N_CELLS, rs), *got = malloc(N_CELLS * rs);
            for (int k = 0; k < N_TOK; k++) {
                memcpy(rot, x + k * N, sizeof rot);
                if (rots[ri]) kern_ref_hadamard(rot, N, rots[ri]);
                kern_type_traits(t)->from_f32(ref + cell[k] * rs, rot, N);
            }
            void *dc = dev_dup(NULL, N_CELLS * rs);
            int32_t *dcell = dev_dup(cell, sizeof cell);
            float *dx = dev_dup(x, sizeof x);
            ASSERT_TRUE(dc && dcell && dx);
            ASSERT_OK(kern_cuda_kv_store(ctx, dc, rs, dcell, dx, N_TOK, t, N, rots[ri]));
            ASSERT_OK(dev_get(got, dc, N_CELLS * rs));
            int bad = -1;
            for (size_t i = 0; i < N_CELLS * rs && bad < 0; i++)
                if (got[i] != ref[i]) bad = (int)i;
            free(ref), free(got);
            dev_done();
            if (bad >= 0)
                TEST_FAIL_("%s n_rot=%lld: byte %d (cell %d) differs from the reference", kern_type_name(t),
                           (long long)rots[ri], bad, bad / (int)rs);
        }
    ASSERT_EQ(kern_cuda_kv_store(ctx, NULL, 0, NULL, NULL, 1, KERN_TYPE_Q4_K, 256, 0), -EOPNOTSUPP);
}

/* Attention for all 81 (K, V) cache type pairs, GQA, tokens with different context
 * lengths, a cache that starts at row 2: against kern_attn_head() on the same bytes. */
TEST(attention) {
    NEED_DEVICE();
    enum { N_HEAD = 4, N_HEAD_KV = 2, HD = 128, N_TOK = 3, ROW0 = 2, N_CELLS = ROW0 + 300 };
    const int32_t n_kv[N_TOK] = {1, 77, 300}, row0[N_TOK] = {ROW0, ROW0, ROW0};
    const int64_t kv_dim = N_HEAD_KV * HD, group = N_HEAD / N_HEAD_KV;
    const float scale = 1.0f / sqrtf((float)HD);
    float *q = malloc(sizeof(float) * N_TOK * N_HEAD * HD), *kf = malloc(sizeof(float) * N_CELLS * kv_dim);
    float *vf = malloc(sizeof(float) * N_CELLS * kv_dim);
    float *ref = malloc(sizeof(float) * N_TOK * N_HEAD * HD), *got = malloc(sizeof(float) * N_TOK * N_HEAD * HD);
    float *scratch = malloc(sizeof(float) * kern_attn_scratch_floats(N_TOK * group, HD, HD));
    uint8_t *kc = malloc(kern_row_size(KERN_TYPE_F32, kv_dim) * N_CELLS);
    uint8_t *vc = malloc(kern_row_size(KERN_TYPE_F32, kv_dim) * N_CELLS);
    fill(q, N_TOK * N_HEAD * HD, 2.0f), fill(kf, N_CELLS * kv_dim, 2.0f), fill(vf, N_CELLS * kv_dim, 1.0f);
    for (size_t a = 0; a < ARRAY_SIZE(kv_types); a++)
        for (size_t b = 0; b < ARRAY_SIZE(kv_types); b++) {
            const int kt = kv_types[a], vt = kv_types[b];
            const size_t krs = kern_row_size(kt, kv_dim), vrs = kern_row_size(vt, kv_dim);
            for (int c = 0; c < N_CELLS; c++) {
                kern_type_traits(kt)->from_f32(kc + c * krs, kf + c * kv_dim, kv_dim);
                kern_type_traits(vt)->from_f32(vc + c * vrs, vf + c * kv_dim, kv_dim);
            }
            for (int64_t h = 0; h < N_HEAD_KV; h++)
                kern_attn_head(ref + h * group * HD, N_HEAD * HD, q + h * group * HD, N_HEAD * HD, N_TOK, group,
                               n_kv, kc + ROW0 * krs + kern_row_size(kt, h * HD), kt, krs,
                               vc + ROW0 * vrs + kern_row_size(vt, h * HD), vt, vrs, HD, HD, scale, scratch);
            struct kern_cuda_attn_args args = {
                .out = dev_dup(NULL, sizeof(float) * N_TOK * N_HEAD * HD),
                .q = dev_dup(q, sizeof(float) * N_TOK * N_HEAD * HD),
                .k = dev_dup(kc, krs * N_CELLS), .v = dev_dup(vc, vrs * N_CELLS), .kt = kt, .vt = vt,
                .k_stride = krs, .v_stride = vrs, .kv_row0 = dev_dup(row0, sizeof row0),
                .n_kv = dev_dup(n_kv, sizeof n_kv), .n_tok = N_TOK, .n_head = N_HEAD,
                .n_head_kv = N_HEAD_KV, .hd_k = HD, .hd_v = HD, .scale = scale};
            ASSERT_TRUE(args.out && args.q && args.k && args.v && args.kv_row0 && args.n_kv);
            ASSERT_OK(kern_cuda_attn(ctx, &args));
            ASSERT_OK(dev_get(got, args.out, sizeof(float) * N_TOK * N_HEAD * HD));
            dev_done();
            for (int i = 0; i < N_TOK * N_HEAD * HD; i++)
                if (!(fabsf(got[i] - ref[i]) <= TOL_ATTN))
                    TEST_FAIL_("K %s V %s: value %d (token %d head %d): %.9g, expected %.9g", kern_type_name(kt),
                               kern_type_name(vt), i, i / (N_HEAD * HD), i / HD % N_HEAD, got[i], ref[i]);
        }
    free(q), free(kf), free(vf), free(ref), free(got), free(scratch), free(kc), free(vc);
}

/* A captured graph replays its ops, reading device memory as it is at each launch. */
TEST(graph) {
    NEED_DEVICE();
    float x[256], got[256];
    fill(x, 256, 1.0f);
    float *dy = dev_dup(NULL, sizeof x), *dx = dev_dup(x, sizeof x);
    ASSERT_TRUE(dy && dx);
    struct kern_cuda_graph *g = NULL;
    ASSERT_OK(kern_cuda_graph_begin(ctx));
    int r = kern_cuda_add(ctx, dy, dx, 256, 1, 1);
    ASSERT_OK(kern_cuda_graph_end(ctx, &g));
    ASSERT_OK(r);
    ASSERT_OK(kern_cuda_ctx_sync(ctx));
    ASSERT_OK(dev_get(got, dy, sizeof got));
    for (int i = 0; i < 256; i++) ASSERT_TRUE(got[i] == 0.0f); /* captured, not run */
    ASSERT_OK(kern_cuda_graph_launch(ctx, g));
    ASSERT_OK(kern_cuda_graph_launch(ctx, g));
    ASSERT_OK(dev_get(got, dy, sizeof got));
    for (int i = 0; i < 256; i++) ASSERT_TRUE(got[i] == x[i] + x[i]);
    kern_cuda_graph_free(g);
    dev_done();
}

/* ---- Gated DeltaNet and gated attention ------------------------------------------------
 * Against the CPU kernels (kernels/deltanet.h) of each sequence's runs, in batch order,
 * with the states carried over several calls (a prefill with interleaved sequences, then
 * decode steps, then a prefill again). */
#define TOL_DN 1e-4 /* relative to max(1, the largest |value|): f32 sums on the device, double
                     * in the reference, over up to ~100 tokens of recurrence */

/* Three calls' sequence ids: a prefill whose runs interleave, one decode token each, a
 * longer run of one sequence then two others. */
static const int32_t dn_seq0[] = {0, 0, 0, 0, 0, 0, 2, 2, 2, 0, 0, 1, 1, 1, 1, 1, 1, 1, 2};
static const int32_t dn_seq1[] = {1, 0, 2};
static int32_t dn_seq2[70];
enum { DN_NSEQ = 3 };

static void dn_calls(const int32_t **seq, int64_t *n) {
    for (int i = 0; i < 70; i++) dn_seq2[i] = i < 64 ? 2 : i < 67 ? 0 : 1;
    seq[0] = dn_seq0, n[0] = ARRAY_SIZE(dn_seq0);
    seq[1] = dn_seq1, n[1] = ARRAY_SIZE(dn_seq1);
    seq[2] = dn_seq2, n[2] = ARRAY_SIZE(dn_seq2);
}

/* max |a − b| / max(1, max |b|) over n values */
static double rel_err(const float *a, const float *b, int64_t n) {
    double e = 0, m = 1;
    for (int64_t i = 0; i < n; i++) {
        e = fmax(e, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return e / m;
}

TEST(dn_gates) {
    NEED_DEVICE();
    enum { N_TOK = 37, N_HEAD = 12, N = N_TOK * N_HEAD };
    float a[N], b[N], dt[N_HEAD], sa[N_HEAD], g[N], beta[N], got_g[N], got_b[N];
    fill(a, N, 8.0f), fill(b, N, 6.0f), fill(dt, N_HEAD, 1.0f);
    for (int h = 0; h < N_HEAD; h++) sa[h] = -expf(rng_uniform());
    a[5] = 25.0f, a[17] = 19.5f; /* softplus's linear branch and its edge */
    float *da = dev_dup(a, sizeof a), *db = dev_dup(b, sizeof b), *ddt = dev_dup(dt, sizeof dt),
          *dsa = dev_dup(sa, sizeof sa);
    ASSERT_TRUE(da && db && ddt && dsa);
    kern_dn_gates(g, beta, a, b, dt, sa, N_TOK, N_HEAD);
    ASSERT_OK(kern_cuda_dn_gates(ctx, da, db, da, db, ddt, dsa, N_TOK, N_HEAD)); /* in place */
    ASSERT_OK(dev_get(got_g, da, sizeof got_g));
    ASSERT_OK(dev_get(got_b, db, sizeof got_b));
    for (int i = 0; i < N; i++) {
        ASSERT_NEAR(got_g[i], g[i], TOL_ROW * fabsf(g[i]) + 1e-7);
        ASSERT_NEAR(got_b[i], beta[i], TOL_ROW * fabsf(beta[i]) + 1e-7);
    }
    ASSERT_EQ(kern_cuda_dn_gates(ctx, da, db, da, db, ddt, dsa, 0, N_HEAD), -EINVAL);
    dev_done();
}

TEST(dn_conv) {
    NEED_DEVICE();
    static const int64_t shapes[][2] = {{96, 4}, {200, 2}, {33, 8}, {64, 1}}; /* (channels, K) */
    const int32_t *seq[3];
    int64_t n_tok[3];
    dn_calls(seq, n_tok);
    for (size_t si = 0; si < ARRAY_SIZE(shapes); si++) {
        const int64_t C = shapes[si][0], K = shapes[si][1], sf = (K - 1) * C;
        float *w = malloc((size_t)(K * C) * sizeof *w), *st = calloc((size_t)(DN_NSEQ * sf + 1), sizeof *st);
        float *x = malloc(70 * (size_t)C * sizeof *x), *got = malloc(70 * (size_t)C * sizeof *got);
        float *got_st = malloc((size_t)(DN_NSEQ * sf + 1) * sizeof *got_st);
        ASSERT_TRUE(w && st && x && got && got_st);
        fill(w, K * C, 1.0f);
        float *dw = dev_dup(w, (size_t)(K * C) * sizeof *w);
        float *dst = dev_dup(NULL, (size_t)(DN_NSEQ * sf + 1) * sizeof *st);
        float *dx = dev_dup(NULL, 70 * (size_t)C * sizeof *x);
        int32_t *dseq = dev_dup(NULL, 70 * sizeof(int32_t));
        ASSERT_TRUE(dw && dst && dx && dseq);
        for (int c = 0; c < 3; c++) {
            const int64_t n = n_tok[c];
            fill(x, n * C, 2.0f);
            ASSERT_OK(kern_cuda_buf_upload(bufs[n_bufs - 2], 0, x, (size_t)(n * C) * sizeof *x));
            ASSERT_OK(kern_cuda_buf_upload(bufs[n_bufs - 1], 0, seq[c], (size_t)n * sizeof(int32_t)));
            ASSERT_OK(kern_cuda_dn_conv(ctx, dx, dst, sf, dseq, dx, dw, n, C, K)); /* in place */
            for (int64_t t = 0, t1; t < n; t = t1) { /* the reference, run by run */
                for (t1 = t + 1; t1 < n && seq[c][t1] == seq[c][t]; t1++) {}
                kern_dn_conv(x + t * C, st + seq[c][t] * sf, x + t * C, w, t1 - t, C, K, 0, C);
            }
            ASSERT_OK(dev_get(got, dx, (size_t)(n * C) * sizeof *got));
            double e = rel_err(got, x, n * C);
            if (e > TOL_DN)
                TEST_FAIL_("channels %lld K %lld call %d: output error %.3g", (long long)C, (long long)K, c, e);
        }
        ASSERT_OK(dev_get(got_st, dst, (size_t)(DN_NSEQ * sf + 1) * sizeof *got_st));
        double e = rel_err(got_st, st, DN_NSEQ * sf);
        if (e > TOL_DN) TEST_FAIL_("channels %lld K %lld: state error %.3g", (long long)C, (long long)K, e);
        ASSERT_EQ(kern_cuda_dn_conv(ctx, dx, dst, sf, dseq, dx, dw, 1, C, KERN_DN_MAX_KERNEL + 1), -EINVAL);
        free(w), free(st), free(x), free(got), free(got_st);
        dev_done();
    }
}

TEST(dn_delta) {
    NEED_DEVICE();
    /* H_k, H_v, d_k, d_v, map, l2 norm on the fly: the real heads (128), the largest (256),
     * sizes that are not multiples of 32, qwen3next's grouped map, inputs normed before */
    static const struct {
        int64_t hk, hv, dk, dv;
        enum kern_dn_head_map map;
        bool l2;
    } shapes[] = {
        {2, 4, 128, 128, KERN_DN_HEAD_MAP_TILED, true},  {1, 2, 256, 256, KERN_DN_HEAD_MAP_TILED, true},
        {3, 3, 40, 72, KERN_DN_HEAD_MAP_GROUPED, true},  {2, 6, 64, 16, KERN_DN_HEAD_MAP_GROUPED, true},
        {2, 4, 96, 64, KERN_DN_HEAD_MAP_TILED, false},
    };
    const int32_t *seq[3];
    int64_t n_tok[3];
    dn_calls(seq, n_tok);
    for (size_t si = 0; si < ARRAY_SIZE(shapes); si++) {
        const struct kern_dn_shape p = {.n_head_k = shapes[si].hk, .n_head_v = shapes[si].hv,
                                        .head_dim_k = shapes[si].dk, .head_dim_v = shapes[si].dv,
                                        .head_map = shapes[si].map,
                                        .scale = 1.0f / sqrtf((float)shapes[si].dk),
                                        .l2_eps = shapes[si].l2 ? 1e-6f : 0.0f};
        ASSERT_OK(kern_dn_shape_check(&p));
        const int64_t kd = p.n_head_k * p.head_dim_k, inner = p.n_head_v * p.head_dim_v;
        const int64_t C = 2 * kd + inner, sf = inner * p.head_dim_k, hv = p.n_head_v;
        float *qkv = malloc(70 * (size_t)C * sizeof *qkv), *g = malloc(70 * (size_t)hv * sizeof *g);
        float *beta = malloc(70 * (size_t)hv * sizeof *beta), *o = malloc(70 * (size_t)inner * sizeof *o);
        float *got = malloc(70 * (size_t)inner * sizeof *got);
        float *st = calloc((size_t)(DN_NSEQ * sf), sizeof *st), *got_st = malloc((size_t)(DN_NSEQ * sf) * sizeof *st);
        ASSERT_TRUE(qkv && g && beta && o && got && st && got_st);
        float *dqkv = dev_dup(NULL, 70 * (size_t)C * sizeof *qkv), *dg = dev_dup(NULL, 70 * (size_t)hv * sizeof *g);
        float *dbeta = dev_dup(NULL, 70 * (size_t)hv * sizeof *beta), *dout = dev_dup(NULL, 70 * (size_t)inner * sizeof *o);
        float *dst = dev_dup(NULL, (size_t)(DN_NSEQ * sf) * sizeof *st);
        int32_t *dseq = dev_dup(NULL, 70 * sizeof(int32_t));
        ASSERT_TRUE(dqkv && dg && dbeta && dout && dst && dseq);
        for (int c = 0; c < 3; c++) {
            const int64_t n = n_tok[c];
            fill(qkv, n * C, 1.0f);
            if (!shapes[si].l2) { /* the kernels take them normalised */
                kern_dn_l2norm(qkv, C, n, p.head_dim_k, 0, p.n_head_k, 1e-6f);
                kern_dn_l2norm(qkv + kd, C, n, p.head_dim_k, 0, p.n_head_k, 1e-6f);
            }
            for (int64_t i = 0; i < n * hv; i++) {
                g[i] = -0.3f * fabsf(rng_uniform()); /* decays in (0.74, 1] */
                beta[i] = 0.5f + 0.5f * rng_uniform();
            }
            ASSERT_OK(kern_cuda_buf_upload(bufs[n_bufs - 6], 0, qkv, (size_t)(n * C) * sizeof *qkv));
            ASSERT_OK(kern_cuda_buf_upload(bufs[n_bufs - 5], 0, g, (size_t)(n * hv) * sizeof *g));
            ASSERT_OK(kern_cuda_buf_upload(bufs[n_bufs - 4], 0, beta, (size_t)(n * hv) * sizeof *beta));
            ASSERT_OK(kern_cuda_buf_upload(bufs[n_bufs - 1], 0, seq[c], (size_t)n * sizeof(int32_t)));
            const struct kern_cuda_dn_args a = {
                .state = dst, .state_stride = sf, .seq = dseq,
                .q = dqkv, .k = dqkv + kd, .v = dqkv + 2 * kd, .g = dg, .beta = dbeta, .o = dout,
                .q_stride = C, .k_stride = C, .v_stride = C, .o_stride = inner, .n_tok = n};
            ASSERT_OK(kern_cuda_dn_delta(ctx, &a, &p));
            for (int64_t t = 0, t1; t < n; t = t1) {
                for (t1 = t + 1; t1 < n && seq[c][t1] == seq[c][t]; t1++) {}
                const struct kern_dn_seq sq = {
                    .n_tok = t1 - t, .q = qkv + t * C, .q_stride = C, .k = qkv + t * C + kd,
                    .k_stride = C, .v = qkv + t * C + 2 * kd, .v_stride = C, .g = g + t * hv,
                    .beta = beta + t * hv, .o = o + t * inner, .o_stride = inner};
                kern_dn_recurrent(st + seq[c][t] * sf, &sq, &p, 0, hv);
            }
            ASSERT_OK(dev_get(got, dout, (size_t)(n * inner) * sizeof *got));
            double e = rel_err(got, o, n * inner);
            printf("  H %lld/%lld d %lld/%lld call %d (%lld tokens): output error %.3g\n",
                   (long long)p.n_head_k, (long long)hv, (long long)p.head_dim_k,
                   (long long)p.head_dim_v, c, (long long)n, e);
            if (e > TOL_DN) TEST_FAIL_("shape %zu call %d: output error %.3g > %.3g", si, c, e, TOL_DN);
        }
        ASSERT_OK(dev_get(got_st, dst, (size_t)(DN_NSEQ * sf) * sizeof *got_st));
        double e = rel_err(got_st, st, DN_NSEQ * sf);
        if (e > TOL_DN) TEST_FAIL_("shape %zu: state error %.3g > %.3g", si, e, TOL_DN);
        free(qkv), free(g), free(beta), free(o), free(got), free(st), free(got_st);
        dev_done();
    }
    /* heads past what a lane holds are refused, not run wrong */
    const struct kern_dn_shape big = {.n_head_k = 1, .n_head_v = 1, .head_dim_k = 512, .head_dim_v = 64,
                                      .scale = 1.0f};
    float *d = dev_dup(NULL, 4096);
    ASSERT_TRUE(d);
    const struct kern_cuda_dn_args a = {.state = d, .state_stride = 512 * 64, .seq = (int32_t *)d,
                                        .q = d, .k = d, .v = d, .g = d, .beta = d, .o = d, .n_tok = 1};
    ASSERT_EQ(kern_cuda_dn_delta(ctx, &a, &big), -EOPNOTSUPP);
    dev_done();
}

TEST(dn_gated_norm) {
    NEED_DEVICE();
    static const int64_t shapes[][2] = {{7, 128}, {5, 48}, {3, 256}}; /* (rows, width) */
    for (size_t si = 0; si < ARRAY_SIZE(shapes); si++) {
        const int64_t rows = shapes[si][0], w = shapes[si][1], n = rows * w;
        float *x = malloc((size_t)n * sizeof *x), *z = malloc((size_t)n * sizeof *z);
        float *nw = malloc((size_t)w * sizeof *nw), *ref = malloc((size_t)n * sizeof *ref);
        float *got = malloc((size_t)n * sizeof *got);
        ASSERT_TRUE(x && z && nw && ref && got);
        fill(x, n, 3.0f), fill(z, n, 4.0f), fill(nw, w, 1.0f);
        float *dx = dev_dup(x, (size_t)n * sizeof *x), *dz = dev_dup(z, (size_t)n * sizeof *z);
        float *dw = dev_dup(nw, (size_t)w * sizeof *nw);
        ASSERT_TRUE(dx && dz && dw);
        kern_dn_gated_norm(ref, x, z, nw, rows, 1, w, 0, 1, 1e-6f);
        ASSERT_OK(kern_cuda_dn_gated_norm(ctx, dx, dx, dz, dw, rows, w, 1e-6f)); /* in place */
        ASSERT_OK(dev_get(got, dx, (size_t)n * sizeof *got));
        for (int64_t i = 0; i < n; i++) ASSERT_NEAR(got[i], ref[i], 1e-5 * fabsf(ref[i]) + 1e-6);
        free(x), free(z), free(nw), free(ref), free(got);
        dev_done();
    }
}

TEST(gated_attention_ops) {
    NEED_DEVICE();
    enum { ROWS = 9, W0 = 64, W1 = 48 };
    float x[ROWS * (W0 + W1)], y0[ROWS * W0], y1[ROWS * W1], g[ROWS * W1], ref[ROWS * W1];
    fill(x, ARRAY_SIZE(x), 2.0f), fill(g, ARRAY_SIZE(g), 6.0f);
    float *dx = dev_dup(x, sizeof x), *d0 = dev_dup(NULL, sizeof y0), *d1 = dev_dup(NULL, sizeof y1),
          *dg = dev_dup(g, sizeof g);
    ASSERT_TRUE(dx && d0 && d1 && dg);
    ASSERT_OK(kern_cuda_unzip(ctx, d0, d1, dx, ROWS, W0, W1));
    ASSERT_OK(dev_get(y0, d0, sizeof y0));
    ASSERT_OK(dev_get(y1, d1, sizeof y1));
    for (int r = 0; r < ROWS; r++) {
        ASSERT_TRUE(memcmp(y0 + r * W0, x + r * (W0 + W1), W0 * sizeof(float)) == 0);
        ASSERT_TRUE(memcmp(y1 + r * W1, x + r * (W0 + W1) + W0, W1 * sizeof(float)) == 0);
    }
    ASSERT_OK(kern_cuda_sigmoid_mul(ctx, d1, dg, ROWS * W1));
    ASSERT_OK(dev_get(ref, d1, sizeof ref));
    for (int i = 0; i < ROWS * W1; i++) {
        const float e = y1[i] / (1.0f + expf(-g[i]));
        ASSERT_NEAR(ref[i], e, TOL_ROW * fabsf(e) + 1e-7);
    }
    dev_done();
}

/* gpt-oss's sinks: a logit per query head in the softmax's denominator, as the CPU's
 * kern_attn_head_window() adds it */
TEST(attention_sinks) {
    NEED_DEVICE();
    enum { N_HEAD = 4, N_HEAD_KV = 2, HD = 64, N_TOK = 3, N_CELLS = 90 };
    const int32_t n_kv[N_TOK] = {1, 40, 90}, row0[N_TOK] = {0, 0, 0};
    const int64_t kv_dim = N_HEAD_KV * HD, group = N_HEAD / N_HEAD_KV;
    const float scale = 1.0f / sqrtf((float)HD), sinks[N_HEAD] = {-1.0f, 0.5f, 3.0f, -8.0f};
    static float q[N_TOK * N_HEAD * HD], kf[N_CELLS * N_HEAD_KV * HD], vf[N_CELLS * N_HEAD_KV * HD];
    static float ref[N_TOK * N_HEAD * HD], got[N_TOK * N_HEAD * HD];
    fill(q, ARRAY_SIZE(q), 2.0f), fill(kf, ARRAY_SIZE(kf), 2.0f), fill(vf, ARRAY_SIZE(vf), 1.0f);
    float *scratch = malloc(sizeof(float) * kern_attn_scratch_floats(N_TOK * group, HD, HD));
    ASSERT_TRUE(scratch);
    const size_t rs = (size_t)kv_dim * sizeof(float);
    for (int64_t h = 0; h < N_HEAD_KV; h++)
        kern_attn_head_window(ref + h * group * HD, N_HEAD * HD, q + h * group * HD, N_HEAD * HD, N_TOK, group,
                              NULL, n_kv, (const char *)kf + h * HD * sizeof(float), KERN_TYPE_F32, rs,
                              (const char *)vf + h * HD * sizeof(float), KERN_TYPE_F32, rs, HD, HD, scale,
                              sinks + h * group, scratch);
    struct kern_cuda_attn_args args = {
        .out = dev_dup(NULL, sizeof got), .q = dev_dup(q, sizeof q), .k = dev_dup(kf, sizeof kf),
        .v = dev_dup(vf, sizeof vf), .kt = KERN_TYPE_F32, .vt = KERN_TYPE_F32, .k_stride = rs, .v_stride = rs,
        .kv_row0 = dev_dup(row0, sizeof row0), .n_kv = dev_dup(n_kv, sizeof n_kv), .n_tok = N_TOK,
        .n_head = N_HEAD, .n_head_kv = N_HEAD_KV, .hd_k = HD, .hd_v = HD, .scale = scale,
        .sinks = dev_dup(sinks, sizeof sinks)};
    ASSERT_TRUE(args.out && args.q && args.k && args.v && args.kv_row0 && args.n_kv && args.sinks);
    ASSERT_OK(kern_cuda_attn(ctx, &args));
    ASSERT_OK(dev_get(got, args.out, sizeof got));
    dev_done();
    for (size_t i = 0; i < ARRAY_SIZE(got); i++)
        if (!(fabsf(got[i] - ref[i]) <= TOL_ATTN))
            TEST_FAIL_("value %zu (token %zu head %zu): %.9g, expected %.9g", i, i / (N_HEAD * HD),
                       i / HD % N_HEAD, got[i], ref[i]);
    free(scratch);
}

/* The router against engine/moe.h's moe_route_token() (the CPU's): the same experts in the
 * same order, ties to the lower index, and their weights, for both gatings, with and
 * without renormalisation and scale, k of n experts. */
TEST(moe_route) {
    NEED_DEVICE();
    static const struct { int32_t n_expert, n_used; enum engine_moe_gating gating; bool norm; float scale; } cases[] = {
        {8, 2, ENGINE_MOE_SOFTMAX, true, 0},      {128, 8, ENGINE_MOE_SOFTMAX, true, 0},
        {60, 4, ENGINE_MOE_SOFTMAX, false, 2.5f}, {32, 4, ENGINE_MOE_SOFTMAX_TOPK, false, 0},
        {512, 10, ENGINE_MOE_SOFTMAX, true, 1},   {5, 5, ENGINE_MOE_SOFTMAX_TOPK, true, 0},
    };
    enum { N_TOK = 37 };
    static float logits[N_TOK * 512], wt[N_TOK * 32], ref_w[32];
    static int32_t sel[N_TOK * 32], ref_id[32];
    for (size_t c = 0; c < ARRAY_SIZE(cases); c++) {
        const int32_t n = cases[c].n_expert, k = cases[c].n_used;
        fill(logits, N_TOK * n, 4.0f);
        for (int t = 0; t < N_TOK; t += 3) logits[t * n + n - 1] = logits[t * n]; /* ties */
        const struct moe_route_params p = {.gating = cases[c].gating, .norm_w = cases[c].norm,
                                           .w_scale = cases[c].scale, .n_expert = n, .n_used = k};
        const struct kern_cuda_moe_route_params dp = {
            .gating = p.gating == ENGINE_MOE_SOFTMAX_TOPK ? KERN_CUDA_MOE_TOPK_SOFTMAX : KERN_CUDA_MOE_SOFTMAX,
            .norm_w = p.norm_w, .w_scale = p.w_scale, .n_expert = n, .n_used = k};
        float *dl = dev_dup(logits, sizeof(float) * N_TOK * n), *dw = dev_dup(NULL, sizeof(float) * N_TOK * k);
        int32_t *ds = dev_dup(NULL, sizeof(int32_t) * N_TOK * k);
        ASSERT_TRUE(dl && dw && ds);
        ASSERT_OK(kern_cuda_moe_route(ctx, ds, dw, dl, N_TOK, &dp));
        ASSERT_OK(dev_get(sel, ds, sizeof(int32_t) * N_TOK * k));
        ASSERT_OK(dev_get(wt, dw, sizeof(float) * N_TOK * k));
        dev_done();
        for (int t = 0; t < N_TOK; t++) {
            moe_route_token(ref_id, ref_w, logits + t * n, &p);
            for (int j = 0; j < k; j++) {
                if (sel[t * k + j] != ref_id[j])
                    TEST_FAIL_("case %zu token %d slot %d: expert %d, expected %d", c, t, j, sel[t * k + j],
                               ref_id[j]);
                ASSERT_NEAR(wt[t * k + j], ref_w[j], 1e-5 * fabsf(ref_w[j]) + 1e-7);
            }
        }
    }
}

/* y (n, dim) = a gated FFN of expert stack rows, as the CPU computes one expert: W decoded
 * by the traits, activations rounded to q8 where the type is quantized */
static void moe_ref_rows(float *y, const uint8_t *w, int t, int64_t n_in, int64_t n_out, const float *x) {
    float *xr = malloc(sizeof(float) * n_in), *wr = malloc(sizeof(float) * n_in);
    uint8_t *q8 = malloc(kern_row_size(KERN_TYPE_Q8_0, n_in));
    if (kern_type_traits(t)->is_quantized) {
        kern_type_traits(KERN_TYPE_Q8_0)->from_f32(q8, x, n_in);
        kern_type_traits(KERN_TYPE_Q8_0)->to_f32(xr, q8, n_in);
    } else {
        memcpy(xr, x, sizeof(float) * n_in);
    }
    for (int64_t o = 0; o < n_out; o++) {
        kern_type_traits(t)->to_f32(wr, w + o * kern_row_size(t, n_in), n_in);
        double s = 0;
        for (int64_t i = 0; i < n_in; i++) s += (double)wr[i] * xr[i];
        y[o] = (float)s;
    }
    free(xr), free(wr), free(q8);
}

static float moe_ref_act(enum kern_cuda_act act, float g, float u) {
    if (act == KERN_CUDA_ACT_GELU)
        return 0.5f * g * (1.0f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g))) * u;
    if (act == KERN_CUDA_ACT_SWIGLU_OAI) {
        const float x = fminf(g, 7.0f), v = fmaxf(fminf(u, 7.0f), -7.0f);
        return x / (1.0f + expf(-1.702f * x)) * (v + 1.0f);
    }
    return g / (1.0f + expf(-g)) * u;
}

/* The experts against a plain host computation of each token's selected experts: types
 * (float, q8_0, k-quant, mxfp4), biases, per-expert scales, every activation; decode (1
 * token), a few, and prefill steps whose groups pass the 8 tokens that share a decoded
 * unit; in == out (the recipe's in-place call). */
TEST(moe_experts) {
    NEED_DEVICE();
    static const struct { int gt, dt; enum kern_cuda_act act; bool bias, scale; int64_t n_expert, n_used; } cases[] = {
        {KERN_TYPE_F32, KERN_TYPE_F16, KERN_CUDA_ACT_SILU, false, false, 8, 2},
        {KERN_TYPE_Q8_0, KERN_TYPE_Q8_0, KERN_CUDA_ACT_SILU, false, false, 16, 4},
        {KERN_TYPE_Q4_K, KERN_TYPE_Q6_K, KERN_CUDA_ACT_GELU, false, true, 8, 3},
        {KERN_TYPE_MXFP4, KERN_TYPE_MXFP4, KERN_CUDA_ACT_SWIGLU_OAI, true, false, 32, 4},
    };
    static const int64_t toks[] = {1, 3, 40};
    enum { DIM = 256, FF = 256, MAX_TOK = 40 };
    for (size_t c = 0; c < ARRAY_SIZE(cases); c++) {
        const int gt = cases[c].gt, dt = cases[c].dt;
        const int64_t E = cases[c].n_expert, k = cases[c].n_used;
        const size_t grs = kern_row_size(gt, DIM), drs = kern_row_size(dt, FF);
        uint8_t *wg = malloc(grs * FF * E), *wu = malloc(grs * FF * E), *wd = malloc(drs * DIM * E);
        float *bg = malloc(sizeof(float) * FF * E), *bu = malloc(sizeof(float) * FF * E);
        float *bd = malloc(sizeof(float) * DIM * E), *sc = malloc(sizeof(float) * E);
        float *x = malloc(sizeof(float) * MAX_TOK * DIM), *logits = malloc(sizeof(float) * MAX_TOK * E);
        float *ref = malloc(sizeof(float) * MAX_TOK * DIM), *got = malloc(sizeof(float) * MAX_TOK * DIM);
        float *g = malloc(sizeof(float) * FF), *u = malloc(sizeof(float) * FF), *yd = malloc(sizeof(float) * DIM);
        ASSERT_TRUE(wg && wu && wd && bg && bu && bd && sc && x && logits && ref && got && g && u && yd);
        for (int64_t r = 0; r < FF * E; r++) random_row(wg + r * grs, gt, DIM), random_row(wu + r * grs, gt, DIM);
        for (int64_t r = 0; r < DIM * E; r++) random_row(wd + r * drs, dt, FF);
        fill(bg, FF * E, 0.5f), fill(bu, FF * E, 0.5f), fill(bd, DIM * E, 0.5f), fill(sc, E, 2.0f);
        for (size_t ti = 0; ti < ARRAY_SIZE(toks); ti++) {
            const int64_t n = toks[ti];
            fill(x, n * DIM, 1.0f), fill(logits, n * E, 3.0f);
            const struct kern_cuda_moe_route_params rp = {.gating = KERN_CUDA_MOE_SOFTMAX, .norm_w = true,
                                                          .n_expert = E, .n_used = k};
            int32_t *ds = dev_dup(NULL, sizeof(int32_t) * n * k);
            float *dw = dev_dup(NULL, sizeof(float) * n * k), *dx = dev_dup(x, sizeof(float) * n * DIM);
            float *dlg = dev_dup(logits, sizeof(float) * n * E);
            const struct kern_cuda_moe_args a = {
                .out = dx, .in = dx, .sel = ds, .wt = dw,
                .gate = dev_dup(wg, grs * FF * E), .up = dev_dup(wu, grs * FF * E), .down = dev_dup(wd, drs * DIM * E),
                .gate_t = gt, .up_t = gt, .down_t = dt,
                .gate_stride = grs * FF, .up_stride = grs * FF, .down_stride = drs * DIM,
                .gate_b = cases[c].bias ? dev_dup(bg, sizeof(float) * FF * E) : NULL,
                .up_b = cases[c].bias ? dev_dup(bu, sizeof(float) * FF * E) : NULL,
                .down_b = cases[c].bias ? dev_dup(bd, sizeof(float) * DIM * E) : NULL,
                .scale = cases[c].scale ? dev_dup(sc, sizeof(float) * E) : NULL,
                .b_stride = FF, .b0 = 0, .act = cases[c].act,
                .n_tok = n, .n_used = k, .n_expert = E, .n_embd = DIM, .n_ff = FF};
            void *scratch = dev_dup(NULL, kern_cuda_moe_scratch_bytes(n, k, E, DIM, FF));
            ASSERT_TRUE(ds && dw && dx && dlg && a.gate && a.up && a.down && scratch);
            ASSERT_OK(kern_cuda_moe_route(ctx, ds, dw, dlg, n, &rp));
            ASSERT_OK(kern_cuda_moe_experts(ctx, &a, scratch));
            ASSERT_OK(dev_get(got, dx, sizeof(float) * n * DIM));
            int32_t sel[MAX_TOK * 8];
            float wt[MAX_TOK * 8];
            ASSERT_OK(dev_get(sel, ds, sizeof(int32_t) * n * k));
            ASSERT_OK(dev_get(wt, dw, sizeof(float) * n * k));
            dev_done();
            double worst = 0, mag = 1e-30;
            for (int64_t t = 0; t < n; t++) {
                memset(ref + t * DIM, 0, sizeof(float) * DIM);
                for (int64_t j = 0; j < k; j++) {
                    const int64_t e = sel[t * k + j];
                    ASSERT_TRUE(e >= 0 && e < E);
                    moe_ref_rows(g, wg + e * grs * FF, gt, DIM, FF, x + t * DIM);
                    moe_ref_rows(u, wu + e * grs * FF, gt, DIM, FF, x + t * DIM);
                    for (int64_t i = 0; i < FF; i++) {
                        if (cases[c].bias) g[i] += bg[e * FF + i], u[i] += bu[e * FF + i];
                        g[i] = moe_ref_act(cases[c].act, g[i], u[i]);
                    }
                    moe_ref_rows(yd, wd + e * drs * DIM, dt, FF, DIM, g);
                    const float w = wt[t * k + j] * (cases[c].scale ? sc[e] : 1.0f);
                    for (int64_t r = 0; r < DIM; r++)
                        ref[t * DIM + r] += w * (yd[r] + (cases[c].bias ? bd[e * DIM + r] : 0.0f));
                }
                for (int64_t r = 0; r < DIM; r++) mag = fmax(mag, fabs(ref[t * DIM + r]));
            }
            for (int64_t i = 0; i < n * DIM; i++) worst = fmax(worst, fabs(got[i] - ref[i]));
            /* (a hidden value that lands on the other side of a q8 rounding step moves one
             * term by d/2: well below any wrong expert, row or weight) */
            if (!(worst <= 5e-3 * mag))
                TEST_FAIL_("case %zu (%s/%s) n_tok=%lld: error %.3g of %.3g", c, kern_type_name(gt),
                           kern_type_name(dt), (long long)n, worst, mag);
        }
        free(wg), free(wu), free(wd), free(bg), free(bu), free(bd), free(sc), free(x), free(logits);
        free(ref), free(got), free(g), free(u), free(yd);
    }
}

/* The shared expert's gate and gpt-oss's activation */
TEST(moe_row_ops) {
    NEED_DEVICE();
    enum { ROWS = 5, W = 96 };
    float y[ROWS * W], x[ROWS * W], g[ROWS], got[ROWS * W], u[ROWS * W];
    fill(y, ARRAY_SIZE(y), 1.0f), fill(x, ARRAY_SIZE(x), 2.0f), fill(g, ARRAY_SIZE(g), 4.0f);
    fill(u, ARRAY_SIZE(u), 9.0f);
    float *dy = dev_dup(y, sizeof y), *dx = dev_dup(x, sizeof x), *dg = dev_dup(g, sizeof g);
    float *du = dev_dup(u, sizeof u);
    ASSERT_TRUE(dy && dx && dg && du);
    ASSERT_OK(kern_cuda_add_gated(ctx, dy, dx, dg, W, ROWS));
    ASSERT_OK(dev_get(got, dy, sizeof got));
    for (int i = 0; i < ROWS * W; i++) {
        const float e = y[i] + x[i] / (1.0f + expf(-g[i / W]));
        ASSERT_NEAR(got[i], e, TOL_ROW * fabsf(e) + 1e-6);
    }
    /* g = 9·uniform crosses the clamp at 7 on both sides */
    ASSERT_OK(kern_cuda_glu(ctx, dy, du, dx, ROWS * W, KERN_CUDA_ACT_SWIGLU_OAI));
    ASSERT_OK(dev_get(got, dy, sizeof got));
    for (int i = 0; i < ROWS * W; i++) {
        const float e = moe_ref_act(KERN_CUDA_ACT_SWIGLU_OAI, u[i], x[i]);
        ASSERT_NEAR(got[i], e, TOL_ROW * fabsf(e) + 1e-6);
    }
    dev_done();
}

/* Device copy bandwidth is measurable (a number, not asserted beyond being positive). */
TEST(copy_bandwidth) {
    NEED_DEVICE();
    double bw = 0;
    ASSERT_OK(kern_cuda_copy_bandwidth(ctx, 64u << 20, 10, &bw));
    printf("  device copy bandwidth: %.0f GB/s\n", bw / 1e9);
    ASSERT_TRUE(bw > 0);
}

TEST_MAIN(T(probe), T(matmul), T(get_rows), T(row_ops), T(rope), T(hadamard), T(argmax), T(kv_store),
          T(attention), T(graph), T(dn_gates), T(dn_conv), T(dn_delta), T(dn_gated_norm),
          T(gated_attention_ops), T(attention_sinks), T(moe_route), T(moe_experts), T(moe_row_ops),
          T(copy_bandwidth))
