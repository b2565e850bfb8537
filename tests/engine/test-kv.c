/* KV cache: the Hadamard transform (FWHT = dense product, H·H = I), the rotation size
 * rules of DESIGN.md 3.4, attention over every cache type, rotation invariance in f32,
 * the quality gain of rotation on outlier channels, shared-KV layers and context shift. */
#include "kv-test.h"

#include <math.h>

/* ---- deterministic random numbers --------------------------------------------------- */

static uint64_t rng_s = 0x1234567;
static float rnd(void) { /* uniform [-1, 1) */
    rng_s = rng_s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)(rng_s >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

/* ---- the transform ------------------------------------------------------------------ */

static double hadamard_entry(int64_t i, int64_t j, int64_t n) {
    return (__builtin_popcountll((unsigned long long)(i & j)) & 1 ? -1.0 : 1.0) / sqrt((double)n);
}

TEST(fwht_equals_dense) {
    static float x[3 * 512], fast[3 * 512], ref[3 * 512];
    for (int64_t n = 64; n <= 512; n *= 2) {
        for (int64_t i = 0; i < 3 * n; i++) x[i] = rnd();
        memcpy(fast, x, sizeof x);
        memcpy(ref, x, sizeof x);
        kern_hadamard(fast, 3 * n, n);
        kern_ref_hadamard(ref, 3 * n, n);
        double max_err = 0;
        for (int64_t b = 0; b < 3; b++)
            for (int64_t i = 0; i < n; i++) {
                double dense = 0;
                for (int64_t j = 0; j < n; j++) dense += hadamard_entry(i, j, n) * x[b * n + j];
                max_err = fmax(max_err, fabs(dense - ref[b * n + i]));
                /* the SIMD clone does the same butterflies: the same bits */
                ASSERT_TRUE(memcmp(&fast[b * n + i], &ref[b * n + i], sizeof(float)) == 0);
            }
        printf("  n_rot %3lld: max |FWHT - dense| = %.2e\n", (long long)n, max_err);
        ASSERT_TRUE(max_err <= 1e-5);
    }
}

TEST(hh_is_identity) {
    for (int64_t n = 64; n <= 256; n *= 2) {
        /* dense: (H·H)[i][j] = δ_ij */
        double max_err = 0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0;
                for (int64_t k = 0; k < n; k++) s += hadamard_entry(i, k, n) * hadamard_entry(k, j, n);
                max_err = fmax(max_err, fabs(s - (i == j)));
            }
        ASSERT_TRUE(max_err < 1e-12);
        /* the transform twice gives the input back */
        float x[256], y[256];
        for (int64_t i = 0; i < n; i++) x[i] = y[i] = rnd();
        kern_hadamard(y, n, n);
        kern_hadamard(y, n, n);
        for (int64_t i = 0; i < n; i++) ASSERT_NEAR(y[i], x[i], 1e-6);
    }
}

/* ---- rotation sizes ----------------------------------------------------------------- */

TEST(rotation_size_rules) {
    static const struct {
        int64_t head;
        int k, v;
    } rows[] = {{64, 64, 64},  {128, 128, 64}, {192, 64, 64},  {256, 256, 64},
                {320, 64, 64}, {384, 128, 64}, {512, 512, 64}, {576, 64, 64},
                {32, 0, 0},    {96, 0, 0},     {8, 0, 0}};
    for (size_t i = 0; i < ARRAY_SIZE(rows); i++) {
        ASSERT_EQ(kv_rot_size_k(KERN_TYPE_Q8_0, rows[i].head, true), rows[i].k);
        ASSERT_EQ(kv_rot_size_v(KERN_TYPE_Q4_0, rows[i].head, true), rows[i].v);
        /* off when disabled, and never for float types */
        ASSERT_EQ(kv_rot_size_k(KERN_TYPE_Q8_0, rows[i].head, false), 0);
        ASSERT_EQ(kv_rot_size_v(KERN_TYPE_Q8_0, rows[i].head, false), 0);
        ASSERT_EQ(kv_rot_size_k(KERN_TYPE_F16, rows[i].head, true), 0);
        ASSERT_EQ(kv_rot_size_k(KERN_TYPE_BF16, rows[i].head, true), 0);
        ASSERT_EQ(kv_rot_size_v(KERN_TYPE_F32, rows[i].head, true), 0);
    }
    const enum kern_type quant[] = {KERN_TYPE_Q8_0, KERN_TYPE_Q4_0, KERN_TYPE_Q4_1,
                                    KERN_TYPE_Q5_0, KERN_TYPE_Q5_1, KERN_TYPE_IQ4_NL};
    for (size_t i = 0; i < ARRAY_SIZE(quant); i++) ASSERT_EQ(kv_rot_size_k(quant[i], 128, true), 128);
}

TEST(rotation_env_helper) {
    const char *old = getenv("WARM_ATTN_ROT_DISABLE");
    char *saved = old ? strdup(old) : NULL;
    unsetenv("WARM_ATTN_ROT_DISABLE");
    ASSERT_TRUE(engine_kv_rotation_env_default());
    setenv("WARM_ATTN_ROT_DISABLE", "1", 1);
    ASSERT_TRUE(!engine_kv_rotation_env_default());
    setenv("WARM_ATTN_ROT_DISABLE", "0", 1);
    ASSERT_TRUE(engine_kv_rotation_env_default());
    if (saved) setenv("WARM_ATTN_ROT_DISABLE", saved, 1);
    else unsetenv("WARM_ATTN_ROT_DISABLE");
    free(saved);
}

/* Every head size rule through real contexts of warm-mkmodel models. */
TEST(rotation_recorded_per_head_size) {
    static const struct {
        const char *name, *shape;
        int k, v;
    } rows[] = {
        {"h64", "--arch llama --n-embd 128 --n-layer 1 --n-head 2 --head-dim 64 --n-ff 128 --n-vocab 300", 64, 64},
        {"h128", "--arch qwen3 --n-embd 128 --n-layer 1 --n-head 2 --head-dim 128 --n-ff 128 --n-vocab 300", 128, 64},
        {"h192", "--arch llama --n-embd 128 --n-layer 1 --n-head 2 --head-dim 192 --n-ff 128 --n-vocab 300", 64, 64},
        {"h256", "--arch llama --n-embd 128 --n-layer 1 --n-head 1 --head-dim 256 --n-ff 128 --n-vocab 300", 256, 64},
        {"h96", "--arch llama --n-embd 192 --n-layer 1 --n-head 2 --head-dim 96 --n-ff 128 --n-vocab 300", 0, 0},
    };
    for (size_t i = 0; i < ARRAY_SIZE(rows); i++) {
        const char *path = test_mkmodel(rows[i].name, "%s", rows[i].shape);
        if (!path) SKIP("warm-mkmodel is not available (WARM_BIN)");
        struct engine_model *m = kvt_model_open(path);
        ASSERT_TRUE(m);
        struct engine_kv_info info;
        struct engine_context *c = kvt_ctx(m, KERN_TYPE_Q8_0, KERN_TYPE_Q4_0, true, 16, NULL);
        ASSERT_TRUE(c);
        engine_context_kv_info(c, &info);
        printf("  head %4u: n_rot_k %d, n_rot_v %d\n", m->hp.head_dim_k, info.n_rot_k, info.n_rot_v);
        ASSERT_EQ(info.n_rot_k, rows[i].k);
        ASSERT_EQ(info.n_rot_v, rows[i].v);
        engine_context_free(c);
        /* rotation off, and K quantized with V float: each decided on its own */
        c = kvt_ctx(m, KERN_TYPE_Q8_0, KERN_TYPE_Q4_0, false, 16, NULL);
        engine_context_kv_info(c, &info);
        ASSERT_EQ(info.n_rot_k, 0);
        ASSERT_EQ(info.n_rot_v, 0);
        engine_context_free(c);
        c = kvt_ctx(m, KERN_TYPE_F16, KERN_TYPE_Q5_1, true, 16, NULL);
        engine_context_kv_info(c, &info);
        ASSERT_EQ(info.n_rot_k, 0);
        ASSERT_EQ(info.n_rot_v, rows[i].v);
        engine_context_free(c);
        /* a generation runs on every size */
        c = kvt_ctx(m, KERN_TYPE_Q8_0, KERN_TYPE_Q4_0, true, 16, NULL);
        int32_t prompt[4] = {1, 260, 261, 262}, gen[4];
        ASSERT_OK(kvt_decode(c, prompt, 0, 4));
        ASSERT_OK(kvt_greedy(c, 4, 4, gen));
        engine_context_free(c);
        engine_model_free(m);
    }
}

TEST(quantized_cache_needs_block_heads) {
    const char *gguf = test_shared_path("stories260K.gguf");
    if (!gguf) SKIP("stories260K.gguf is absent");
    struct engine_model *m = kvt_model_open(gguf);
    ASSERT_TRUE(m);
    struct engine_context_params p;
    engine_context_params_default(&p);
    p.n_ctx = 16;
    p.type_k = KERN_TYPE_Q8_0;
    struct engine_context *c = NULL;
    struct err_detail d = {0};
    ASSERT_ERR(engine_context_new(m, &p, &c, &d), ERR_UNSUPPORTED);
    printf("  stories260K with a q8_0 cache: %s\n", d.msg);
    ASSERT_TRUE(strstr(d.msg, "multiple of 32") != NULL);
    p.type_k = KERN_TYPE_Q4_K; /* not a cache type */
    ASSERT_ERR(engine_context_new(m, &p, &c, &d), ERR_UNSUPPORTED);
    engine_model_free(m);
}

/* ---- attention over the stored types ------------------------------------------------ */

enum { NKV = 70, NT = 3, NG = 2 };

/* out (NT, NG, hv) = softmax(scale q·K) V with K, V given in f32 (double sums) */
static void attn_naive(float *out, const float *q, const float *k, const float *v, int64_t hk,
                       int64_t hv, const int32_t *n_kv) {
    for (int t = 0; t < NT; t++)
        for (int g = 0; g < NG; g++) {
            const float *qi = q + (t * NG + g) * hk;
            double s[NKV], max = -INFINITY, sum = 0;
            for (int j = 0; j < n_kv[t]; j++) {
                s[j] = 0;
                for (int64_t i = 0; i < hk; i++) s[j] += (double)qi[i] * k[j * hk + i];
                s[j] /= sqrt((double)hk);
                max = fmax(max, s[j]);
            }
            for (int j = 0; j < n_kv[t]; j++) sum += s[j] = exp(s[j] - max);
            for (int64_t i = 0; i < hv; i++) {
                double o = 0;
                for (int j = 0; j < n_kv[t]; j++) o += s[j] * v[j * hv + i];
                out[(t * NG + g) * hv + i] = (float)(o / sum);
            }
        }
}

/* kern_attn_head over K, V stored as tk / tv (quantized from kf, vf). */
static void attn_stored(float *out, const float *q, const float *kf, const float *vf,
                        enum kern_type tk, enum kern_type tv, int64_t hk, int64_t hv,
                        const int32_t *n_kv) {
    static uint8_t kb[NKV * 256 * 4], vb[NKV * 256 * 4];
    static float scratch[1 << 17];
    size_t ks = kern_row_size(tk, hk), vs = kern_row_size(tv, hv);
    for (int j = 0; j < NKV; j++) {
        kv_row_store(kb + j * ks, kf + j * hk, tk, hk);
        kv_row_store(vb + j * vs, vf + j * hv, tv, hv);
    }
    kern_attn_head(out, NG * hv, q, NG * hk, NT, NG, n_kv, kb, tk, ks, vb, tv, vs, hk, hv,
                   1.0f / sqrtf((float)hk), scratch);
}

/* The f32 values a row of type t stores for x (quantize, dequantize). */
static void round_trip(float *y, const float *x, enum kern_type t, int64_t n) {
    static uint8_t buf[256 * 4];
    kv_row_store(buf, x, t, n);
    kern_type_traits(t)->to_f32(y, buf, n);
}

/* kern_attn_head with a block-type K vs the naive f32 reference (see its use) */
#define ATTN_TOL_Q8_QUERY 2e-3

static const enum kern_type cache_types[] = {
    KERN_TYPE_F32,  KERN_TYPE_F16,  KERN_TYPE_BF16, KERN_TYPE_Q8_0,   KERN_TYPE_Q4_0,
    KERN_TYPE_Q4_1, KERN_TYPE_Q5_0, KERN_TYPE_Q5_1, KERN_TYPE_IQ4_NL,
};

TEST(attention_every_cache_type) {
    enum { HK = 128, HV = 64 };
    static float q[NT * NG * HK], kf[NKV * HK], vf[NKV * HV], kr[NKV * HK], vr[NKV * HV];
    static float out[NT * NG * HV], ref[NT * NG * HV];
    const int32_t n_kv[NT] = {NKV, 1, 37};
    for (size_t i = 0; i < ARRAY_SIZE(q); i++) q[i] = rnd();
    for (size_t i = 0; i < ARRAY_SIZE(kf); i++) kf[i] = rnd();
    for (size_t i = 0; i < ARRAY_SIZE(vf); i++) vf[i] = rnd();
    for (size_t a = 0; a < ARRAY_SIZE(cache_types); a++) {
        enum kern_type tk = cache_types[a], tv = cache_types[(a + 4) % ARRAY_SIZE(cache_types)];
        /* the reference sees exactly the values the cache stores */
        for (int j = 0; j < NKV; j++) {
            round_trip(kr + j * HK, kf + j * HK, tk, HK);
            round_trip(vr + j * HV, vf + j * HV, tv, HV);
        }
        attn_naive(ref, q, kr, vr, HK, HV, n_kv);
        attn_stored(out, q, kf, vf, tk, tv, HK, HV, n_kv);
        double max_err = 0;
        for (size_t i = 0; i < ARRAY_SIZE(out); i++) max_err = fmax(max_err, fabs(out[i] - ref[i]));
        printf("  K %-6s V %-6s: max |kernel - naive| = %.2e\n", kern_type_name(tk),
               kern_type_name(tv), max_err);
        /* a block-type K meets the query quantized to q8_0 on SIMD levels
         * (kernels/cpu/x86-attn.h): each score moves by <= scale·Σ_b amax_b/254·Σ|K| (~0.02
         * here), the output by about that fraction of |V| <= 1 (seen: 3.7e-4) */
        ASSERT_TRUE(max_err <= (kern_type_traits(tk)->is_quantized ? ATTN_TOL_Q8_QUERY : 1e-5));
    }
}

/* Attention with Q, K rotated by the K rotation and V by the V rotation, the output
 * un-rotated, equals attention without rotation (f32 cache). */
TEST(attention_rotation_invariant_f32) {
    static const int64_t heads[] = {64, 128, 192, 256};
    for (size_t h = 0; h < ARRAY_SIZE(heads); h++) {
        const int64_t hd = heads[h];
        const int nk = kv_rot_size_k(KERN_TYPE_Q8_0, hd, true), nv = kv_rot_size_v(KERN_TYPE_Q8_0, hd, true);
        static float q[NT * NG * 256], k[NKV * 256], v[NKV * 256], out[NT * NG * 256], rot[NT * NG * 256];
        const int32_t n_kv[NT] = {NKV, 5, 64};
        for (int64_t i = 0; i < NT * NG * hd; i++) q[i] = rnd();
        for (int64_t i = 0; i < NKV * hd; i++) k[i] = rnd(), v[i] = rnd();
        attn_stored(out, q, k, v, KERN_TYPE_F32, KERN_TYPE_F32, hd, hd, n_kv);
        kern_hadamard(q, NT * NG * hd, nk);
        kern_hadamard(k, NKV * hd, nk);
        kern_hadamard(v, NKV * hd, nv);
        attn_stored(rot, q, k, v, KERN_TYPE_F32, KERN_TYPE_F32, hd, hd, n_kv);
        kern_hadamard(rot, NT * NG * hd, nv);
        double max_err = 0;
        for (int64_t i = 0; i < NT * NG * hd; i++) max_err = fmax(max_err, fabs(out[i] - rot[i]));
        printf("  head %3lld (n_rot_k %d, n_rot_v %d): max |rotated - plain| = %.2e\n",
               (long long)hd, nk, nv, max_err);
        ASSERT_TRUE(max_err <= 1e-5);
    }
}

/* Keys and values with a few outlier channels (as real K has): quantized attention
 * loses less with rotation. Error = RMS(out - out_f32) / RMS(out_f32). */
TEST(rotation_quality_outliers) {
    enum { HD = 128 };
    static float q[NT * NG * HD], k[NKV * HD], v[NKV * HD], ref[NT * NG * HD], out[NT * NG * HD];
    static float qr[NT * NG * HD], kr[NKV * HD], vr[NKV * HD];
    const int32_t n_kv[NT] = {NKV, 20, 50};
    for (int64_t i = 0; i < NT * NG * HD; i++) q[i] = rnd();
    for (int j = 0; j < NKV; j++)
        for (int i = 0; i < HD; i++) {
            /* channels 5, 40 and 99 carry 30x the others' magnitude */
            float big = i == 5 || i == 40 || i == 99 ? 30.0f : 1.0f;
            k[j * HD + i] = big * rnd() * 0.5f;
            v[j * HD + i] = (i == 17 || i == 80 ? 30.0f : 1.0f) * rnd();
        }
    attn_stored(ref, q, k, v, KERN_TYPE_F32, KERN_TYPE_F32, HD, HD, n_kv);
    double rms_ref = 0;
    for (int64_t i = 0; i < NT * NG * HD; i++) rms_ref += (double)ref[i] * ref[i];
    const enum kern_type types[] = {KERN_TYPE_Q8_0, KERN_TYPE_Q4_0};
    for (size_t t = 0; t < ARRAY_SIZE(types); t++) {
        double err[2];
        for (int rotated = 0; rotated < 2; rotated++) {
            memcpy(qr, q, sizeof q);
            memcpy(kr, k, sizeof k);
            memcpy(vr, v, sizeof v);
            if (rotated) {
                kern_hadamard(qr, NT * NG * HD, kv_rot_size_k(types[t], HD, true));
                kern_hadamard(kr, NKV * HD, kv_rot_size_k(types[t], HD, true));
                kern_hadamard(vr, NKV * HD, kv_rot_size_v(types[t], HD, true));
            }
            attn_stored(out, qr, kr, vr, types[t], types[t], HD, HD, n_kv);
            if (rotated) kern_hadamard(out, NT * NG * HD, kv_rot_size_v(types[t], HD, true));
            double e = 0;
            for (int64_t i = 0; i < NT * NG * HD; i++) e += ((double)out[i] - ref[i]) * (out[i] - ref[i]);
            err[rotated] = sqrt(e / rms_ref);
        }
        printf("  %s K and V, outlier channels: relative error %.3e without rotation, %.3e "
               "with (%.1fx less)\n", kern_type_name(types[t]), err[0], err[1], err[0] / err[1]);
        ASSERT_TRUE(err[1] < err[0]);
    }
}

/* ---- shared-KV layers --------------------------------------------------------------- */

TEST(shared_kv_layers) {
    const char *path = test_mkmodel("shared", "--arch qwen3 --n-embd 128 --n-layer 3 --n-head 2 "
                                    "--head-dim 64 --n-ff 128 --n-vocab 300 --shared-kv-layers 2");
    if (!path) SKIP("warm-mkmodel is not available (WARM_BIN)");
    struct engine_model *m = kvt_model_open(path);
    ASSERT_TRUE(m);
    ASSERT_EQ(m->hp.n_layer_kv_shared, 2);
    struct engine_context *c = kvt_ctx(m, KERN_TYPE_Q8_0, KERN_TYPE_F16, true, 32, NULL);
    ASSERT_TRUE(c);
    const struct kv_cache *kv = &c->kv;
    ASSERT_EQ(kv->n_layer_kv, 1);
    for (int il = 0; il < 3; il++) {
        ASSERT_EQ(kv_source(kv, il), 0);
        ASSERT_EQ(kv_owns(kv, il), il == 0);
        /* rotation of a shared layer = its source's */
        ASSERT_EQ(kv_rot_k(kv, il), 64);
        ASSERT_EQ(kv_rot_v(kv, il), 0);
        ASSERT_TRUE(kv_k_row(kv, il, 0, 3) == kv_k_row(kv, 0, 0, 3));
    }
    /* memory: one layer of KV, not three */
    struct engine_context *c2 = kvt_ctx(m, KERN_TYPE_Q8_0, KERN_TYPE_F16, true, 32, NULL);
    ASSERT_EQ(engine_context_kv_bytes(c2), 32 * (kv->store[0].k_row_bytes + kv->store[0].v_row_bytes));
    /* decoding reads the source's rows: same result twice, and batch = one by one */
    int32_t prompt[6] = {1, 270, 271, 272, 273, 274}, g1[8], g2[8];
    ASSERT_OK(kvt_decode(c, prompt, 0, 6));
    ASSERT_OK(kvt_greedy(c, 6, 8, g1));
    for (int i = 0; i < 6; i++) ASSERT_OK(kvt_decode(c2, prompt, i, i + 1));
    ASSERT_OK(kvt_greedy(c2, 6, 8, g2));
    ASSERT_TRUE(memcmp(g1, g2, sizeof g1) == 0);
    engine_context_free(c);
    engine_context_free(c2);
    engine_model_free(m);
}

/* Copies the GGUF at src to dst, leaving out the key `drop` (NULL: none) and negating the
 * f32 values of the tensors whose names contain `negate` (NULL: none). */
static int gguf_copy(const char *src, const char *dst, const char *drop, const char *negate) {
    struct gguf_file *f = NULL;
    struct gguf_writer *w = NULL;
    int r = gguf_open(src, &f, NULL);
    if (r < 0) return r;
    if ((r = gguf_writer_new(&w)) < 0) goto out;
    for (uint64_t i = 0; r >= 0 && i < gguf_n_kv(f); i++) {
        const struct gguf_kv *kv = gguf_kv_at(f, i);
        if (drop && kv->key.len == strlen(drop) && memcmp(kv->key.ptr, drop, kv->key.len) == 0) continue;
        r = gguf_writer_add_kv(w, kv);
    }
    for (uint64_t i = 0; r >= 0 && i < gguf_n_tensors(f); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(f, i);
        char name[GGUF_MAX_NAME + 1];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        float *data = malloc(t->n_bytes);
        if (!data || t->type != KERN_TYPE_F32) {
            free(data);
            r = ERR_INVALID;
            break;
        }
        memcpy(data, t->data, t->n_bytes);
        if (negate && strstr(name, negate))
            for (uint64_t k = 0; k < t->n_bytes / 4; k++) data[k] = -data[k];
        r = gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, data);
        free(data);
    }
    if (r >= 0) r = gguf_writer_save(w, dst);
out:
    gguf_writer_free(w);
    gguf_close(f);
    return r;
}

/* Logits of 6 prompt positions then 4 greedy steps. */
static bool logits_run(const char *path, float *out, int32_t n_vocab) {
    struct engine_model *m = kvt_model_open(path);
    struct engine_context *c = m ? kvt_ctx(m, KERN_TYPE_F32, KERN_TYPE_F32, true, 32, NULL) : NULL;
    bool ok = c != NULL;
    int32_t tok[10] = {1, 270, 281, 262, 295, 266};
    for (int i = 0; ok && i < 10; i++) {
        ok = kvt_decode(c, tok, i, i + 1) >= 0;
        const float *l = ok ? engine_context_logits(c, 0) : NULL;
        if (l) memcpy(out + i * n_vocab, l, (size_t)n_vocab * sizeof *out);
        if (l && i >= 5 && i < 9) tok[i + 1] = kvt_argmax(l, n_vocab);
    }
    engine_context_free(c);
    engine_model_free(m);
    return ok;
}

/* A shared-KV layer reads its source's KV: its own attn_k / attn_v weights play no part
 * (negating them changes no bit), while the same file without the key (every layer owns
 * KV, so layer 2 uses them) computes something else. */
TEST(shared_kv_layer_ignores_own_kv_weights) {
    const char *path = test_mkmodel("shared3", "--arch llama --n-embd 128 --n-layer 3 --n-head 2 "
                                    "--head-dim 64 --n-ff 128 --n-vocab 300 --shared-kv-layers 1");
    if (!path) SKIP("warm-mkmodel is not available (WARM_BIN)");
    char neg[600], plain[600], plain_neg[600];
    snprintf(neg, sizeof neg, "%s/shared3-neg.gguf", test_tmpdir());
    snprintf(plain, sizeof plain, "%s/shared3-plain.gguf", test_tmpdir());
    snprintf(plain_neg, sizeof plain_neg, "%s/shared3-plain-neg.gguf", test_tmpdir());
    ASSERT_OK(gguf_copy(path, neg, NULL, "blk.2.attn_k"));
    ASSERT_OK(gguf_copy(neg, neg, NULL, "blk.2.attn_v"));
    ASSERT_OK(gguf_copy(path, plain, "llama.attention.shared_kv_layers", NULL));
    ASSERT_OK(gguf_copy(plain, plain_neg, NULL, "blk.2.attn_v"));
    enum { NV = 300 };
    static float a[10 * NV], b[10 * NV], c[10 * NV], e[10 * NV];
    ASSERT_TRUE(logits_run(path, a, NV));
    ASSERT_TRUE(logits_run(neg, b, NV));
    ASSERT_TRUE(logits_run(plain, c, NV));
    ASSERT_TRUE(logits_run(plain_neg, e, NV));
    ASSERT_TRUE(memcmp(a, b, sizeof a) == 0);
    ASSERT_TRUE(memcmp(a, c, sizeof a) != 0);
    ASSERT_TRUE(memcmp(c, e, sizeof c) != 0); /* the negation itself does matter */
}

/* ---- context shift ------------------------------------------------------------------ */

/* NMSE of layer 0's K after a shift against K computed at the new positions directly:
 * layer 0's K depends only on the token and its position, so the two must agree up to
 * the cache type's rounding (twice: the shift re-quantizes). V rows move bit for bit. */
static double shift_error(const struct engine_model *m, enum kern_type tk, enum kern_type tv,
                          bool rotation, int *ret_n_rot) {
    enum { LEN = 40, P0 = 4, DISCARD = 13 };
    int32_t tok[LEN], kept[LEN];
    for (int i = 0; i < LEN; i++) tok[i] = 260 + (i * 7) % 37;
    int n_kept = 0;
    for (int i = 0; i < LEN; i++)
        if (i < P0 || i >= P0 + DISCARD) kept[n_kept++] = tok[i];
    struct engine_context *a = kvt_ctx(m, tk, tv, rotation, 64, NULL);
    struct engine_context *b = kvt_ctx(m, tk, tv, rotation, 64, NULL);
    if (!a || !b || kvt_decode(a, tok, 0, LEN) < 0 || kvt_decode(b, kept, 0, n_kept) < 0) return INFINITY;
    struct err_detail d = {0};
    if (engine_kv_seq_shift(a, 0, P0, DISCARD, &d) < 0) return INFINITY;
    const struct kv_cache *ka = &a->kv, *kb = &b->kv;
    *ret_n_rot = ka->store[0].n_rot_k;
    if (ka->seq_len[0] != (uint32_t)n_kept) return INFINITY;
    static float ra[1024], rb[1024];
    double num = 0, den = 0;
    for (int p = 0; p < n_kept; p++) {
        if (*kv_tok(ka, 0, p) != kept[p]) return INFINITY;
        kern_type_traits(tk)->to_f32(ra, kv_k_row(ka, 0, 0, p), ka->store[0].n_embd_k);
        kern_type_traits(tk)->to_f32(rb, kv_k_row(kb, 0, 0, p), kb->store[0].n_embd_k);
        for (int64_t i = 0; i < ka->store[0].n_embd_k; i++) {
            num += ((double)ra[i] - rb[i]) * (ra[i] - rb[i]);
            den += (double)rb[i] * rb[i];
        }
        if (memcmp(kv_v_row(ka, 0, 0, p), kv_v_row(kb, 0, 0, p), ka->store[0].v_row_bytes) != 0) return INFINITY;
    }
    /* and the shifted sequence keeps decoding */
    int32_t g[4];
    if (kvt_greedy(a, n_kept, 4, g) < 0) return INFINITY;
    engine_context_free(a);
    engine_context_free(b);
    return num / den;
}

TEST(context_shift) {
    const char *path = test_mkmodel("shift", "--arch llama --n-embd 128 --n-layer 2 --n-head 2 "
                                    "--head-dim 64 --n-ff 128 --n-vocab 300");
    if (!path) SKIP("warm-mkmodel is not available (WARM_BIN)");
    struct engine_model *m = kvt_model_open(path);
    ASSERT_TRUE(m);
    /* tolerances: a few times the type's own round-trip NMSE (f32 ~1e-14, f16 ~1e-7,
     * q8_0 ~5e-5, q4_0 ~1e-2 on these rows) */
    static const struct {
        enum kern_type tk;
        bool rot;
        double tol;
    } rows[] = {
        {KERN_TYPE_F32, true, 1e-10},  {KERN_TYPE_F16, true, 1e-6},   {KERN_TYPE_BF16, true, 1e-4},
        {KERN_TYPE_Q8_0, true, 5e-4},  {KERN_TYPE_Q8_0, false, 5e-4}, {KERN_TYPE_Q4_0, true, 5e-2},
        {KERN_TYPE_Q4_0, false, 5e-2}, {KERN_TYPE_Q4_1, true, 5e-2},  {KERN_TYPE_Q5_0, true, 2e-2},
        {KERN_TYPE_Q5_1, true, 2e-2},  {KERN_TYPE_IQ4_NL, true, 5e-2},
    };
    for (size_t i = 0; i < ARRAY_SIZE(rows); i++) {
        int n_rot = -1;
        double e = shift_error(m, rows[i].tk, KERN_TYPE_Q8_0, rows[i].rot, &n_rot);
        printf("  K %-6s rotation %-3s (n_rot_k %3d): shifted vs recomputed K NMSE %.2e (tol %.0e)\n",
               kern_type_name(rows[i].tk), rows[i].rot ? "on" : "off", n_rot, e, rows[i].tol);
        ASSERT_TRUE(e <= rows[i].tol);
    }
    /* bad ranges */
    struct engine_context *c = kvt_ctx(m, KERN_TYPE_F16, KERN_TYPE_F16, true, 16, NULL);
    int32_t tok[4] = {1, 270, 271, 272};
    ASSERT_OK(kvt_decode(c, tok, 0, 4));
    ASSERT_ERR(engine_kv_seq_shift(c, 0, 2, 3, NULL), ERR_INVALID);
    ASSERT_ERR(engine_kv_seq_shift(c, 1, 0, 1, NULL), ERR_INVALID);
    ASSERT_OK(engine_kv_seq_shift(c, 0, 0, 0, NULL));
    ASSERT_EQ(engine_kv_seq_len(c, 0), 4);
    engine_context_free(c);
    engine_model_free(m);
}

TEST_MAIN(T(fwht_equals_dense), T(hh_is_identity), T(rotation_size_rules), T(rotation_env_helper),
          T(rotation_recorded_per_head_size), T(quantized_cache_needs_block_heads),
          T(attention_every_cache_type), T(attention_rotation_invariant_f32),
          T(rotation_quality_outliers), T(shared_kv_layers),
          T(shared_kv_layer_ignores_own_kv_weights), T(context_shift))
