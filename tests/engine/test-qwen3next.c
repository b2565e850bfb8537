/* Qwen3-Next (arch qwen3next, notes/hybrid.md §A.3, §A.4): no llama.cpp reference file
 * exists, so every qwen3next file here is a re-layout of a qwen35moe file (the reference
 * qwen35moe-tiny, whose greedy ids are llama.cpp's, and a warm-mkmodel one with H_v = 2·H_k)
 * written as Qwen3-Next's converter lays out the same HF weights: the value heads back in
 * HF's grouped order (qwen35's converter re-orders them to the tiled order; value head
 * g·r + j of the grouped order is head j·H_k + g of the tiled one, r = H_v / H_k) in the
 * rows of attn_qkv's v, attn_gate, the conv's v channels, dt, a and ssm_out's columns; β
 * and α fused per key head into ssm_ba; and, for the legacy form, q, k, v and z fused per
 * key head into ssm_in. The engine reads the result with qwen3next's rules (grouped map,
 * ssm_ba split by unzip, ssm_in re-laid at load) and must give the qwen35moe file's ids
 * and logits: this checks those rules against the qwen35 ones that match llama.cpp. It is
 * not a tautology: the same bytes without the head permutation give other logits (with
 * r = 2), and a layer with neither attn_qkv nor ssm_in is refused. The re-laid files also
 * split over 2 and 3 CPU partitions (grouped runs) within the split tolerance, and a
 * warm-mkmodel --arch qwen3next file loads with its real key and tensor names and runs. */
#include "test.h"

#include "engine/engine.h"
#include "engine/forward.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_STEPS 16
#define N_PROMPT 60

enum form {
    FORM_QKV,      /* attn_qkv + attn_gate + ssm_ba (the current converter) */
    FORM_SSM_IN,   /* ssm_in + ssm_ba (legacy files) */
    FORM_NO_PERM,  /* FORM_QKV with the tiled head order left as it is: not Qwen3-Next's */
    FORM_NO_INPUT, /* neither attn_qkv nor ssm_in: refused */
};

struct relayout {
    const struct engine_hparams *hp;
    int64_t r, dk, dv, key;
    bool perm;
};

/* The tiled head of grouped head h (the identity without perm). */
static int64_t tiled_of(const struct relayout *x, int64_t h) {
    return x->perm ? h % x->r * x->hp->ssm_n_head_k + h / x->r : h;
}

/* Row bytes of a tensor, rows of ne[0] values. */
static size_t row_bytes_of(const struct gguf_tensor *t) {
    return kern_row_size(t->type, t->ne[0]);
}

/* dst rows [0, n_head · per) = src's rows of head tiled_of(h), `per` rows a head, from
 * row `first` of src. */
static char *heads_rows(char *dst, const struct relayout *x, const struct gguf_tensor *src,
                        int64_t first, int64_t per) {
    const size_t rb = row_bytes_of(src);
    const int64_t n_head = x->hp->ssm_n_head_v;
    for (int64_t h = 0; h < n_head; h++) {
        memcpy(dst, (const char *)src->data + (size_t)(first + tiled_of(x, h) * per) * rb,
               (size_t)per * rb);
        dst += (size_t)per * rb;
    }
    return dst;
}

static const struct gguf_tensor *layer_tensor(const struct gguf_file *f, unsigned il,
                                              const char *suffix) {
    char name[GGUF_MAX_NAME + 1];
    snprintf(name, sizeof name, "blk.%u.%s", il, suffix);
    return gguf_find_tensor(f, name);
}

/* One tensor of layer il in qwen3next's layout into buf (malloc'd by the caller, the
 * source's bytes); false when the tensor is not written in that form. */
static bool relayout_tensor(const struct relayout *x, const struct gguf_file *f, unsigned il,
                            const char *suffix, const struct gguf_tensor *t, enum form form,
                            char *buf, char *out_name, int64_t *ne) {
    const size_t rb = row_bytes_of(t);
    memcpy(ne, t->ne, sizeof t->ne);
    sprintf(out_name, "blk.%u.%s", il, suffix);
    if (!strcmp(suffix, "attn_qkv.weight")) {
        if (form == FORM_NO_INPUT) return false;
        if (form == FORM_SSM_IN) { /* per key head g: q_g, k_g, its value heads' v, then z */
            const struct gguf_tensor *z = layer_tensor(f, il, "attn_gate.weight");
            char *at = buf;
            for (int64_t g = 0; g < x->hp->ssm_n_head_k; g++) {
                const int64_t rows[2] = {g * x->dk, x->key + g * x->dk};
                for (int k = 0; k < 2; k++) {
                    memcpy(at, (const char *)t->data + (size_t)rows[k] * rb, (size_t)x->dk * rb);
                    at += (size_t)x->dk * rb;
                }
                for (int k = 0; k < 2; k++)
                    for (int64_t j = 0; j < x->r; j++) {
                        const int64_t ht = tiled_of(x, g * x->r + j);
                        const struct gguf_tensor *s = k == 0 ? t : z;
                        const int64_t first = k == 0 ? 2 * x->key : 0;
                        memcpy(at, (const char *)s->data + (size_t)(first + ht * x->dv) * rb,
                               (size_t)x->dv * rb);
                        at += (size_t)x->dv * rb;
                    }
            }
            sprintf(out_name, "blk.%u.ssm_in.weight", il);
            ne[1] = 2 * x->key + 2 * x->hp->ssm_n_head_v * x->dv;
            return true;
        }
        memcpy(buf, t->data, (size_t)(2 * x->key) * rb); /* q, k as they are */
        heads_rows(buf + (size_t)(2 * x->key) * rb, x, t, 2 * x->key, x->dv);
        return true;
    }
    if (!strcmp(suffix, "attn_gate.weight")) {
        if (form == FORM_SSM_IN || form == FORM_NO_INPUT) return false;
        heads_rows(buf, x, t, 0, x->dv);
        return true;
    }
    if (!strcmp(suffix, "ssm_alpha.weight")) return false; /* (with ssm_beta into ssm_ba) */
    if (!strcmp(suffix, "ssm_beta.weight")) {
        /* per key head g: β of its value heads g·r + j, then their α */
        const struct gguf_tensor *a = layer_tensor(f, il, "ssm_alpha.weight");
        char *at = buf;
        for (int64_t g = 0; g < x->hp->ssm_n_head_k; g++)
            for (int k = 0; k < 2; k++)
                for (int64_t j = 0; j < x->r; j++) {
                    const struct gguf_tensor *s = k == 0 ? t : a;
                    memcpy(at, (const char *)s->data + (size_t)tiled_of(x, g * x->r + j) * rb, rb);
                    at += rb;
                }
        sprintf(out_name, "blk.%u.ssm_ba.weight", il);
        ne[1] = 2 * x->hp->ssm_n_head_v;
        return true;
    }
    if (!strcmp(suffix, "ssm_conv1d.weight")) { /* {K, conv_dim}: a row per channel */
        memcpy(buf, t->data, (size_t)(2 * x->key) * rb);
        heads_rows(buf + (size_t)(2 * x->key) * rb, x, t, 2 * x->key, x->dv);
        return true;
    }
    if (!strcmp(suffix, "ssm_dt.bias") || !strcmp(suffix, "ssm_a")) { /* {H_v} f32 */
        for (int64_t h = 0; h < x->hp->ssm_n_head_v; h++)
            memcpy(buf + h * 4, (const char *)t->data + tiled_of(x, h) * 4, 4);
        return true;
    }
    if (!strcmp(suffix, "ssm_out.weight")) { /* {H_v·d_v, n_embd}: d_v columns a head */
        const size_t hb = kern_row_size(t->type, x->dv);
        for (int64_t row = 0; row < t->ne[1]; row++)
            for (int64_t h = 0; h < x->hp->ssm_n_head_v; h++)
                memcpy(buf + (size_t)row * rb + (size_t)h * hb,
                       (const char *)t->data + (size_t)row * rb + (size_t)tiled_of(x, h) * hb, hb);
        return true;
    }
    memcpy(buf, t->data, t->n_bytes);
    return true;
}

/* The qwen35moe model m (its file) as a qwen3next file at path in `form`. */
static int write_next(const struct engine_model *m, const char *path, enum form form) {
    const struct gguf_file *f = m->file;
    struct relayout x = {.hp = &m->hp, .r = m->hp.ssm_n_head_v / m->hp.ssm_n_head_k,
                         .dk = m->hp.ssm_head_dim_k, .dv = m->hp.ssm_head_dim_v,
                         .perm = form != FORM_NO_PERM};
    x.key = m->hp.ssm_n_head_k * x.dk;
    struct gguf_writer *w = NULL;
    int r = gguf_writer_new(&w);
    /* the keys, qwen35moe.* renamed qwen3next.*; no IMROPE sections (plain NEOX) */
    for (uint64_t i = 0; r >= 0 && i < gguf_n_kv(f); i++) {
        const struct gguf_kv *kv = gguf_kv_at(f, i);
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)kv->key.len, kv->key.ptr);
        if (!strcmp(key, "general.architecture")) {
            r = gguf_writer_add_str(w, key, "qwen3next");
        } else if (!strncmp(key, "qwen35moe.", 10)) {
            if (strstr(key, "rope.dimension_sections")) continue;
            char renamed[256];
            snprintf(renamed, sizeof renamed, "qwen3next.%s", key + 10);
            struct gguf_kv k = *kv;
            k.key = (struct gguf_str){.len = strlen(renamed), .ptr = renamed};
            r = gguf_writer_add_kv(w, &k);
        } else {
            r = gguf_writer_add_kv(w, kv);
        }
    }
    for (uint64_t i = 0; r >= 0 && i < gguf_n_tensors(f); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(f, i);
        char name[GGUF_MAX_NAME + 1], out[GGUF_MAX_NAME + 32];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        unsigned il;
        int n = 0;
        int64_t ne[GGUF_MAX_DIMS];
        char *buf = malloc(2 * t->n_bytes + 64); /* (ssm_in: q, k, v and z rows) */
        if (!buf) {
            r = -ENOMEM;
            break;
        }
        bool write = true;
        if (sscanf(name, "blk.%u.%n", &il, &n) == 1 && n > 0) {
            write = relayout_tensor(&x, f, il, name + n, t, form, buf, out, ne);
        } else {
            memcpy(buf, t->data, t->n_bytes);
            memcpy(ne, t->ne, sizeof ne);
            snprintf(out, sizeof out, "%s", name);
        }
        if (write) r = gguf_writer_add_tensor(w, out, t->type, t->n_dims, ne, buf);
        free(buf);
    }
    if (r >= 0) r = gguf_writer_save(w, path);
    gguf_writer_free(w);
    return r;
}

static struct engine_model *model_load(const char *path, struct err_detail *d) {
    struct engine_model *m = NULL;
    if (!path) return NULL;
    return engine_model_load(path, NULL, &m, d) < 0 ? NULL : m;
}

/* A prompt of N_PROMPT ids then N_STEPS greedy steps on n_dev partitions: each step's
 * logits (the prompt end's first) into out, the ids into gen. */
static int run(const struct engine_model *m, uint32_t n_dev, float *out, int32_t *gen) {
    struct engine_context_params p;
    engine_context_params_default(&p);
    p.n_ctx = 256;
    p.n_batch = 32;
    p.n_threads = 2;
    p.type_k = p.type_v = KERN_TYPE_F32;
    p.n_devices = n_dev;
    p.split = n_dev > 1 ? ENGINE_SPLIT_TENSOR : ENGINE_SPLIT_NONE;
    struct engine_context *ctx = NULL;
    struct err_detail d = {0};
    int r = engine_context_new(m, &p, &ctx, &d);
    int32_t tok[N_PROMPT], pos[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) tok[i] = (i * 37 + 5) % (int32_t)m->hp.n_vocab, pos[i] = i;
    for (int p0 = 0; r >= 0 && p0 < N_PROMPT; p0 += 32) { /* a step of 32, one of 28 */
        struct engine_batch b = {.n_tok = MIN(32, N_PROMPT - p0), .token = tok + p0,
                                 .pos = pos + p0};
        r = engine_context_decode(ctx, &b, &d);
    }
    const uint32_t V = m->hp.n_vocab;
    for (int k = 0; r >= 0 && k < N_STEPS; k++) {
        const float *last = engine_context_logits(ctx, 0);
        memcpy(out + (size_t)k * V, last, V * sizeof *out);
        int32_t t = gen[k] = test_top_index(last, (int32_t)V), ps = N_PROMPT + k;
        struct engine_batch one = {.n_tok = 1, .token = &t, .pos = &ps};
        r = engine_context_decode(ctx, &one, &d);
    }
    if (r < 0) fprintf(stderr, "run on %u devices: %s\n", n_dev, err_msg(&d, r));
    engine_context_free(ctx);
    return r;
}

/* src (a qwen35moe file) re-laid in each form: equal to src where it is qwen3next's
 * layout, different without the permutation (r > 1), refused without an input. */
static void cross_check(const char *label, const char *src_path) {
    struct err_detail d = {0};
    struct engine_model *src = model_load(src_path, &d);
    ASSERT_TRUE(src != NULL);
    ASSERT_EQ(src->hp.ssm_head_map, KERN_DN_HEAD_MAP_TILED);
    const size_t V = src->hp.n_vocab, n = N_STEPS * V;
    float *ref = malloc(n * sizeof *ref), *got = malloc(n * sizeof *got);
    int32_t ref_gen[N_STEPS], gen[N_STEPS];
    ASSERT_TRUE(ref && got);
    ASSERT_OK(run(src, 1, ref, ref_gen));
    const int64_t r = src->hp.ssm_n_head_v / src->hp.ssm_n_head_k;
    static const char *const names[] = {"attn_qkv", "ssm_in", "unpermuted", "no input"};
    for (enum form form = FORM_QKV; form <= FORM_NO_INPUT; form++) {
        char path[512];
        snprintf(path, sizeof path, "%s/next-%s-%d.gguf", test_tmpdir(), label, (int)form);
        ASSERT_OK(write_next(src, path, form));
        struct engine_model *m = model_load(path, &d);
        if (form == FORM_NO_INPUT) {
            ASSERT_TRUE(m == NULL);
            printf("  %s, %s: %s\n", label, names[form], d.msg);
            ASSERT_TRUE(strstr(d.msg, "neither attn_qkv.weight and attn_gate.weight nor") != NULL);
            continue;
        }
        if (!m) TEST_FAIL_("%s (%s): %s", label, names[form], d.msg);
        ASSERT_TRUE(m != NULL);
        ASSERT_EQ(m->arch, ENGINE_ARCH_QWEN3NEXT);
        ASSERT_EQ(m->hp.ssm_head_map, KERN_DN_HEAD_MAP_GROUPED);
        ASSERT_OK(run(m, 1, got, gen));
        const double e = test_nmse(got, ref, n);
        const bool same = memcmp(gen, ref_gen, sizeof gen) == 0;
        printf("  %s (H_k %u, H_v %u), %s: NMSE vs qwen35moe %.2g, ids %s\n", label,
               m->hp.ssm_n_head_k, m->hp.ssm_n_head_v, names[form], e, same ? "equal" : "differ");
        if (form == FORM_NO_PERM) {
            if (r > 1) ASSERT_TRUE(e > 1e-3); /* the order is seen */
        } else {
            ASSERT_TRUE(e <= 1e-10);
            ASSERT_TRUE(same);
            /* grouped runs over partitions: one device's logits within the split tolerance */
            for (uint32_t n_dev = 2; n_dev <= 3; n_dev++) {
                ASSERT_OK(run(m, n_dev, got, gen));
                const double es = test_nmse(got, ref, n);
                printf("    on %u partitions: NMSE %.2g\n", n_dev, es);
                ASSERT_TRUE(es <= 1e-4);
                ASSERT_TRUE(memcmp(gen, ref_gen, sizeof gen) == 0);
            }
        }
        engine_model_free(m);
    }
    free(ref);
    free(got);
    engine_model_free(src);
}

/* The reference qwen35moe-tiny (H_k = H_v: the fused layouts, not the order). */
TEST(from_qwen35moe_tiny) {
    const char *path = test_shared_path("hybrid/qwen35moe-tiny.gguf");
    if (!path) SKIP("../shared/models/hybrid/qwen35moe-tiny.gguf is absent");
    cross_check("qwen35moe-tiny", path);
}

/* A warm-mkmodel qwen35moe with H_v = 2·H_k: the head order matters. */
TEST(from_mkmodel_hv2hk) {
    const char *path = test_mkmodel("q35moe-hv2hk", "--arch qwen35moe --n-embd 128 --n-layer 4 "
                                    "--n-head 4 --n-head-kv 2 --head-dim 32 --n-vocab 300 "
                                    "--ssm-groups 2 --ssm-heads 4 --ssm-head-dim 32 --experts 4 "
                                    "--experts-used 2 --n-ff-exp 64 --n-ff-shexp 64 --n-rot 16 "
                                    "--type f32 --seed 9");
    if (!path) SKIP("warm-mkmodel is not available (WARM_BIN)");
    cross_check("mk-hv2hk", path);
}

/* warm-mkmodel --arch qwen3next: the real keys and tensor names, loaded and run. */
TEST(mkmodel_qwen3next) {
    const char *path = test_mkmodel("mk-next", "--arch qwen3next --n-embd 128 --n-layer 4 "
                                    "--n-head 4 --n-head-kv 2 --head-dim 32 --n-vocab 300 "
                                    "--ssm-groups 2 --ssm-heads 4 --ssm-head-dim 32 --experts 4 "
                                    "--experts-used 2 --n-ff-exp 64 --n-ff-shexp 64 --n-rot 16 "
                                    "--type q8_0 --seed 4");
    if (!path) SKIP("warm-mkmodel is not available (WARM_BIN)");
    struct gguf_file *f = NULL;
    struct err_detail d = {0};
    ASSERT_OK_D(gguf_open(path, &f, &d), &d);
    ASSERT_TRUE(gguf_find_tensor(f, "blk.0.ssm_ba.weight") != NULL);
    ASSERT_TRUE(gguf_find_tensor(f, "blk.0.ssm_beta.weight") == NULL);
    ASSERT_TRUE(gguf_find_kv(f, "qwen3next.ssm.group_count") != NULL);
    ASSERT_TRUE(gguf_find_kv(f, "qwen3next.rope.dimension_sections") == NULL);
    gguf_close(f);
    struct engine_model *m = model_load(path, &d);
    if (!m) TEST_FAIL_("%s", d.msg);
    ASSERT_TRUE(m != NULL);
    ASSERT_EQ(m->hp.n_layer_rec, 3);
    ASSERT_EQ(m->hp.n_expert, 4);
    const size_t V = m->hp.n_vocab;
    float *one = malloc(N_STEPS * V * sizeof *one), *two = malloc(N_STEPS * V * sizeof *two);
    int32_t g1[N_STEPS], g2[N_STEPS];
    ASSERT_TRUE(one && two);
    ASSERT_OK(run(m, 1, one, g1));
    ASSERT_OK(run(m, 2, two, g2));
    printf("  mk-next: ids %d %d %d %d ..., 2 partitions NMSE %.2g\n", g1[0], g1[1], g1[2], g1[3],
           test_nmse(two, one, N_STEPS * V));
    ASSERT_TRUE(test_nmse(two, one, N_STEPS * V) <= 1e-4);
    ASSERT_TRUE(memcmp(g1, g2, sizeof g1) == 0);
    free(one);
    free(two);
    engine_model_free(m);
}

TEST_MAIN(T(from_qwen35moe_tiny), T(from_mkmodel_hv2hk), T(mkmodel_qwen3next))
