/* Model loading: the arch table, hparams with llama.cpp's defaults, tensor validation. */
#include "engine/model.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* ---- the arch table ------------------------------------------------------------------ */

/* Flags of an architecture's layer recipe (read by forward.c through the weights: a
 * present bias is added, present q/k norms are applied). */
struct arch_desc {
    const char *name;
    enum engine_rope_kind rope_kind;
};

static const struct arch_desc arch_table[ENGINE_ARCH_COUNT] = {
    [ENGINE_ARCH_LLAMA] = {.name = "llama", .rope_kind = ENGINE_ROPE_NORM},
    [ENGINE_ARCH_QWEN2] = {.name = "qwen2", .rope_kind = ENGINE_ROPE_NEOX},
    [ENGINE_ARCH_QWEN3] = {.name = "qwen3", .rope_kind = ENGINE_ROPE_NEOX},
};

int engine_arch_from_name(const char *name) {
    for (int a = 0; a < ENGINE_ARCH_COUNT; a++)
        if (strcmp(arch_table[a].name, name) == 0) return a;
    return ERR_MODEL_ARCH;
}

const char *engine_arch_name(enum engine_arch arch) {
    return (unsigned)arch < ENGINE_ARCH_COUNT ? arch_table[arch].name : "?";
}

/* Symbolic tensor dimensions, resolved from the hparams. */
enum dim {
    DIM_ONE,
    DIM_EMBD,     /* n_embd */
    DIM_Q,        /* n_head * head_dim_k */
    DIM_K,        /* n_head_kv * head_dim_k */
    DIM_V,        /* n_head_kv * head_dim_v */
    DIM_O,        /* n_head * head_dim_v */
    DIM_FF,       /* n_ff */
    DIM_HEAD_K,   /* head_dim_k */
    DIM_VOCAB,    /* n_vocab */
    DIM_ROT_HALF, /* n_rot / 2 */
    DIM_COUNT
};

enum use { USE_NO, USE_REQ, USE_OPT };

enum kind {
    KIND_VEC,    /* 1-D, converted to f32 at load */
    KIND_MATMUL, /* a matrix kern_matmul multiplies by (its type needs vec_dot) */
    KIND_ROWS,   /* a matrix read row by row (the embedding: its type needs to_f32) */
};

struct tensor_spec {
    const char *name;  /* global name, or the suffix after "blk.N." */
    size_t offset;     /* of its struct engine_weight in struct engine_model / engine_layer */
    enum kind kind;
    enum dim ne0, ne1; /* ne[0] = n_in (row length), ne[1] = n_out */
    uint8_t use[ENGINE_ARCH_COUNT];
};

#define G(f) offsetof(struct engine_model, f)
#define L(f) offsetof(struct engine_layer, f)
/*                                    llama    qwen2    qwen3 */
#define ALL_REQ {USE_REQ, USE_REQ, USE_REQ}
#define ALL_OPT {USE_OPT, USE_OPT, USE_OPT}

static const struct tensor_spec global_specs[] = {
    {"token_embd.weight", G(tok_embd), KIND_ROWS, DIM_EMBD, DIM_VOCAB, ALL_REQ},
    {"output_norm.weight", G(output_norm), KIND_VEC, DIM_EMBD, DIM_ONE, ALL_REQ},
    {"output.weight", G(output), KIND_MATMUL, DIM_EMBD, DIM_VOCAB, ALL_OPT},
    {"rope_freqs.weight", G(rope_freqs), KIND_VEC, DIM_ROT_HALF, DIM_ONE,
     {USE_OPT, USE_NO, USE_NO}},
};

static const struct tensor_spec layer_specs[] = {
    {"attn_norm.weight", L(attn_norm), KIND_VEC, DIM_EMBD, DIM_ONE, ALL_REQ},
    {"attn_q.weight", L(wq), KIND_MATMUL, DIM_EMBD, DIM_Q, ALL_REQ},
    {"attn_k.weight", L(wk), KIND_MATMUL, DIM_EMBD, DIM_K, ALL_REQ},
    {"attn_v.weight", L(wv), KIND_MATMUL, DIM_EMBD, DIM_V, ALL_REQ},
    {"attn_output.weight", L(wo), KIND_MATMUL, DIM_O, DIM_EMBD, ALL_REQ},
    {"attn_q.bias", L(bq), KIND_VEC, DIM_Q, DIM_ONE, {USE_OPT, USE_REQ, USE_NO}},
    {"attn_k.bias", L(bk), KIND_VEC, DIM_K, DIM_ONE, {USE_OPT, USE_REQ, USE_NO}},
    {"attn_v.bias", L(bv), KIND_VEC, DIM_V, DIM_ONE, {USE_OPT, USE_REQ, USE_NO}},
    {"attn_output.bias", L(bo), KIND_VEC, DIM_EMBD, DIM_ONE, {USE_OPT, USE_NO, USE_NO}},
    {"attn_q_norm.weight", L(q_norm), KIND_VEC, DIM_HEAD_K, DIM_ONE, {USE_NO, USE_NO, USE_REQ}},
    {"attn_k_norm.weight", L(k_norm), KIND_VEC, DIM_HEAD_K, DIM_ONE, {USE_NO, USE_NO, USE_REQ}},
    {"ffn_norm.weight", L(ffn_norm), KIND_VEC, DIM_EMBD, DIM_ONE, ALL_REQ},
    {"ffn_gate.weight", L(w_gate), KIND_MATMUL, DIM_EMBD, DIM_FF, ALL_REQ},
    {"ffn_up.weight", L(w_up), KIND_MATMUL, DIM_EMBD, DIM_FF, ALL_REQ},
    {"ffn_down.weight", L(w_down), KIND_MATMUL, DIM_FF, DIM_EMBD, ALL_REQ},
};

#undef G
#undef L
#undef ALL_REQ
#undef ALL_OPT

/* ---- hparams ------------------------------------------------------------------------- */

static int kv_key(char *buf, size_t n, const char *arch, const char *suffix) {
    int len = snprintf(buf, n, "%s.%s", arch, suffix);
    return len > 0 && (size_t)len < n ? 0 : ERR_OVERFLOW;
}

/* Reads <arch>.<suffix> as an integer in [lo, hi]; absent: def when !required. */
static int hp_u32(const struct gguf_file *f, const char *arch, const char *suffix, bool required,
                  uint32_t def, uint64_t lo, uint64_t hi, uint32_t *out, struct err_detail *d) {
    char key[128];
    if (kv_key(key, sizeof key, arch, suffix) < 0)
        return err_set(d, ERR_MODEL_ARCH, "architecture name '%s' too long", arch);
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) {
        if (required) return err_set(d, ERR_MODEL_HPARAM, "missing key '%s'", key);
        *out = def;
        return 0;
    }
    uint64_t v;
    struct err_detail sub = {0};
    int r = gguf_get_u64(f, key, &v, &sub);
    if (r < 0)
        return err_set(d, ERR_MODEL_HPARAM, "key '%s' at offset %llu: %s", key,
                       (unsigned long long)kv->offset, err_msg(&sub, r));
    if (v < lo || v > hi)
        return err_set(d, ERR_MODEL_HPARAM,
                       "key '%s' at offset %llu: %llu is out of range [%llu, %llu]", key,
                       (unsigned long long)kv->offset, (unsigned long long)v,
                       (unsigned long long)lo, (unsigned long long)hi);
    *out = (uint32_t)v;
    return 0;
}

/* Reads <arch>.<suffix> as a float in [lo, hi] (finite); absent: def when !required. */
static int hp_f32(const struct gguf_file *f, const char *arch, const char *suffix, bool required,
                  float def, float lo, float hi, float *out, struct err_detail *d) {
    char key[128];
    if (kv_key(key, sizeof key, arch, suffix) < 0)
        return err_set(d, ERR_MODEL_ARCH, "architecture name '%s' too long", arch);
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) {
        if (required) return err_set(d, ERR_MODEL_HPARAM, "missing key '%s'", key);
        *out = def;
        return 0;
    }
    float v;
    struct err_detail sub = {0};
    int r = gguf_get_f32(f, key, &v, &sub);
    if (r < 0)
        return err_set(d, ERR_MODEL_HPARAM, "key '%s' at offset %llu: %s", key,
                       (unsigned long long)kv->offset, err_msg(&sub, r));
    if (!isfinite(v) || v < lo || v > hi)
        return err_set(d, ERR_MODEL_HPARAM, "key '%s' at offset %llu: %g is out of range [%g, %g]",
                       key, (unsigned long long)kv->offset, (double)v, (double)lo, (double)hi);
    *out = v;
    return 0;
}

/* RoPE scaling type names, as llama.cpp writes them. */
static const char *const rope_scaling_names[ENGINE_ROPE_SCALING_COUNT] = {
    [ENGINE_ROPE_SCALING_NONE] = "none",
    [ENGINE_ROPE_SCALING_LINEAR] = "linear",
    [ENGINE_ROPE_SCALING_YARN] = "yarn",
    [ENGINE_ROPE_SCALING_LLAMA3] = "llama3",
};

static int hp_rope_scaling(const struct gguf_file *f, const char *arch, struct engine_hparams *hp,
                           struct err_detail *d) {
    char key[128];
    if (kv_key(key, sizeof key, arch, "rope.scaling.type") < 0) return ERR_MODEL_ARCH;
    /* llama.cpp's default when the key is absent is "linear"; with no factor that is the
     * identity, which we call none. */
    enum engine_rope_scaling type = ENGINE_ROPE_SCALING_LINEAR;
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    if (kv) {
        struct gguf_str s;
        struct err_detail sub = {0};
        int r = gguf_get_str(f, key, &s, &sub);
        if (r < 0)
            return err_set(d, ERR_MODEL_HPARAM, "key '%s' at offset %llu: %s", key,
                           (unsigned long long)kv->offset, err_msg(&sub, r));
        int found = -1;
        for (int t = 0; t < ENGINE_ROPE_SCALING_COUNT; t++)
            if (gguf_str_eq(s, rope_scaling_names[t])) found = t;
        if (found < 0)
            return err_set(d, ERR_MODEL_HPARAM,
                           "key '%s' at offset %llu: unsupported RoPE scaling '%.*s'", key,
                           (unsigned long long)kv->offset, (int)MIN(s.len, 64), s.ptr);
        type = (enum engine_rope_scaling)found;
    }
    /* factor: rope.scale_linear (older files) or rope.scaling.factor; 0 = none */
    float factor = 0;
    int r = hp_f32(f, arch, "rope.scale_linear", false, 0, 0, 1e6f, &factor, d);
    if (r < 0) return r;
    if (factor == 0) {
        r = hp_f32(f, arch, "rope.scaling.factor", false, 0, 0, 1e6f, &factor, d);
        if (r < 0) return r;
    }
    hp->rope_freq_scale = factor == 0 ? 1.0f : 1.0f / factor;
    if (type == ENGINE_ROPE_SCALING_LINEAR && hp->rope_freq_scale == 1.0f)
        type = ENGINE_ROPE_SCALING_NONE;
    if (type == ENGINE_ROPE_SCALING_NONE) hp->rope_freq_scale = 1.0f;
    hp->rope_scaling = type;

    r = hp_u32(f, arch, "rope.scaling.original_context_length", false, hp->n_ctx_train, 1,
               UINT32_MAX, &hp->rope_n_ctx_orig, d);
    if (r < 0) return r;
    bool yarn = type == ENGINE_ROPE_SCALING_YARN;
    if ((r = hp_f32(f, arch, "rope.scaling.yarn_ext_factor", false, yarn ? 1.0f : 0.0f, 0, 100,
                    &hp->yarn_ext_factor, d)) < 0 ||
        (r = hp_f32(f, arch, "rope.scaling.yarn_attn_factor", false, 1.0f, 0, 100,
                    &hp->yarn_attn_factor, d)) < 0 ||
        (r = hp_f32(f, arch, "rope.scaling.attn_factor", false, hp->yarn_attn_factor, 0, 100,
                    &hp->yarn_attn_factor, d)) < 0 ||
        (r = hp_f32(f, arch, "rope.scaling.yarn_beta_fast", false, 32.0f, 0, 1e4f,
                    &hp->yarn_beta_fast, d)) < 0 ||
        (r = hp_f32(f, arch, "rope.scaling.yarn_beta_slow", false, 1.0f, 0, 1e4f,
                    &hp->yarn_beta_slow, d)) < 0)
        return r;
    if (!yarn) hp->yarn_ext_factor = 0;
    return 0;
}

static int hparams_load(const struct gguf_file *f, enum engine_arch arch, struct engine_hparams *hp,
                        struct err_detail *d) {
    const char *a = arch_table[arch].name;
    int r;
    memset(hp, 0, sizeof *hp);
    hp->rope_kind = arch_table[arch].rope_kind;
    /* The mixture-of-experts variants of these archs have their own tensors. */
    uint32_t n_expert = 0;
    if ((r = hp_u32(f, a, "expert_count", false, 0, 0, UINT32_MAX, &n_expert, d)) < 0) return r;
    if (n_expert > 0)
        return err_set(d, ERR_MODEL_ARCH, "%s.expert_count = %u: mixture-of-experts models are "
                       "not supported", a, n_expert);

    if ((r = hp_u32(f, a, "context_length", true, 0, 1, UINT32_MAX, &hp->n_ctx_train, d)) < 0 ||
        (r = hp_u32(f, a, "embedding_length", true, 0, 1, 1u << 20, &hp->n_embd, d)) < 0 ||
        (r = hp_u32(f, a, "block_count", true, 0, 1, ENGINE_MAX_LAYERS, &hp->n_layer, d)) < 0 ||
        (r = hp_u32(f, a, "feed_forward_length", true, 0, 1, 1u << 24, &hp->n_ff, d)) < 0 ||
        (r = hp_u32(f, a, "attention.head_count", true, 0, 1, 1u << 16, &hp->n_head, d)) < 0 ||
        (r = hp_u32(f, a, "attention.head_count_kv", false, hp->n_head, 1, hp->n_head,
                    &hp->n_head_kv, d)) < 0)
        return r;
    if (hp->n_head % hp->n_head_kv != 0)
        return err_set(d, ERR_MODEL_HPARAM, "%s.attention.head_count %u is not a multiple of "
                       "%s.attention.head_count_kv %u", a, hp->n_head, a, hp->n_head_kv);
    /* head sizes default to n_embd / n_head (llama.cpp), which must then divide evenly */
    uint32_t hd_default = hp->n_embd / hp->n_head;
    if ((r = hp_u32(f, a, "attention.key_length", false, hd_default, 1, 1u << 16,
                    &hp->head_dim_k, d)) < 0 ||
        (r = hp_u32(f, a, "attention.value_length", false, hd_default, 1, 1u << 16,
                    &hp->head_dim_v, d)) < 0)
        return r;
    if (hp->head_dim_k == 0 || hp->head_dim_v == 0)
        return err_set(d, ERR_MODEL_HPARAM, "%s.embedding_length %u < %s.attention.head_count %u "
                       "and no attention.key_length", a, hp->n_embd, a, hp->n_head);
    if ((r = hp_u32(f, a, "rope.dimension_count", false, hp->head_dim_k, 2, hp->head_dim_k,
                    &hp->n_rot, d)) < 0)
        return r;
    if (hp->n_rot % 2 != 0)
        return err_set(d, ERR_MODEL_HPARAM, "%s.rope.dimension_count %u is odd", a, hp->n_rot);
    if ((r = hp_u32(f, a, "attention.shared_kv_layers", false, 0, 0, hp->n_layer - 1,
                    &hp->n_layer_kv_shared, d)) < 0)
        return r;
    if ((r = hp_f32(f, a, "attention.layer_norm_rms_epsilon", true, 0, 1e-30f, 1.0f, &hp->rms_eps,
                    d)) < 0 ||
        (r = hp_f32(f, a, "rope.freq_base", false, 10000.0f, 1e-3f, 1e12f, &hp->rope_freq_base,
                    d)) < 0)
        return r;
    return hp_rope_scaling(f, a, hp, d);
}

/* ---- tensors ------------------------------------------------------------------------- */

static int64_t dim_value(const struct engine_hparams *hp, enum dim dim) {
    switch (dim) { /* a mapping of symbols, not a type ladder */
    case DIM_ONE: return 1;
    case DIM_EMBD: return hp->n_embd;
    case DIM_Q: return (int64_t)hp->n_head * hp->head_dim_k;
    case DIM_K: return (int64_t)hp->n_head_kv * hp->head_dim_k;
    case DIM_V: return (int64_t)hp->n_head_kv * hp->head_dim_v;
    case DIM_O: return (int64_t)hp->n_head * hp->head_dim_v;
    case DIM_FF: return hp->n_ff;
    case DIM_HEAD_K: return hp->head_dim_k;
    case DIM_VOCAB: return hp->n_vocab;
    case DIM_ROT_HALF: return hp->n_rot / 2;
    case DIM_COUNT: break;
    }
    return -1;
}

static bool kind_accepts(enum kind kind, int type) {
    const struct kern_type_traits *tt = kern_type_traits(type);
    if (!tt || !tt->to_f32) return false;
    if (kind == KIND_MATMUL) return tt->vec_dot != NULL;
    if (kind == KIND_VEC) return !tt->is_quantized;
    return true;
}

/* Looks up one tensor, checks type and shape, fills w (data still in the file's type). */
static int tensor_bind(const struct gguf_file *f, const struct engine_hparams *hp,
                       const struct tensor_spec *s, const char *name, enum use use,
                       struct engine_weight *w, struct err_detail *d) {
    memset(w, 0, sizeof *w);
    if (use == USE_NO) return 0;
    const struct gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t) {
        if (use == USE_OPT) return 0;
        return err_set(d, ERR_MODEL_TENSOR_MISSING, "tensor '%s' is missing", name);
    }
    if (!kind_accepts(s->kind, t->type))
        return err_set(d, ERR_MODEL_TENSOR_TYPE, "tensor '%s': type %s is not supported here",
                       name, kern_type_name(t->type));
    int64_t ne0 = dim_value(hp, s->ne0), ne1 = dim_value(hp, s->ne1);
    bool ok = t->ne[0] == ne0 && t->ne[1] == ne1 && t->ne[2] == 1 && t->ne[3] == 1;
    if (!ok)
        return err_set(d, ERR_MODEL_TENSOR_SHAPE,
                       "tensor '%s': shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]", name,
                       (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                       (long long)t->ne[3], (long long)ne0, (long long)ne1);
    w->data = t->data;
    w->type = t->type;
    w->n_in = ne0;
    w->n_out = ne1;
    w->row_bytes = kern_row_size(t->type, ne0);
    if (w->row_bytes == 0)
        return err_set(d, ERR_MODEL_TENSOR_SHAPE, "tensor '%s': %lld values per row is not a "
                       "multiple of the %s block", name, (long long)ne0, kern_type_name(t->type));
    return 0;
}

static struct engine_weight *spec_weight(struct engine_model *m, const struct tensor_spec *s,
                                         int il) {
    char *base = il < 0 ? (char *)m : (char *)&m->layers[il];
    return (struct engine_weight *)(base + s->offset);
}

/* Is name a tensor the recipe of m's arch uses? */
static bool tensor_expected(const struct engine_model *m, const char *name) {
    for (size_t i = 0; i < ARRAY_SIZE(global_specs); i++)
        if (global_specs[i].use[m->arch] != USE_NO && strcmp(name, global_specs[i].name) == 0)
            return true;
    unsigned il;
    int n = 0;
    if (sscanf(name, "blk.%u.%n", &il, &n) != 1 || n == 0 || il >= m->hp.n_layer) return false;
    char canon[GGUF_MAX_NAME + 8];
    snprintf(canon, sizeof canon, "blk.%u.", il);
    if (strncmp(name, canon, strlen(canon)) != 0) return false; /* "blk.01." is not "blk.1." */
    for (size_t i = 0; i < ARRAY_SIZE(layer_specs); i++)
        if (layer_specs[i].use[m->arch] != USE_NO && strcmp(name + n, layer_specs[i].name) == 0)
            return true;
    return false;
}

static void name_copy(char *dst, size_t n, struct gguf_str s) {
    size_t len = MIN((size_t)s.len, n - 1);
    memcpy(dst, s.ptr, len);
    dst[len] = 0;
}

static int tensors_bind(struct engine_model *m, struct err_detail *d) {
    const struct gguf_file *f = m->file;
    char name[GGUF_MAX_NAME + 32];
    int r;
    /* n_vocab comes from the embedding's rows */
    const struct gguf_tensor *emb = gguf_find_tensor(f, "token_embd.weight");
    if (!emb) return err_set(d, ERR_MODEL_TENSOR_MISSING, "tensor 'token_embd.weight' is missing");
    if (emb->ne[1] < 1 || emb->ne[1] > INT32_MAX)
        return err_set(d, ERR_MODEL_TENSOR_SHAPE, "tensor 'token_embd.weight': %lld rows",
                       (long long)emb->ne[1]);
    m->hp.n_vocab = (uint32_t)emb->ne[1];

    for (size_t i = 0; i < ARRAY_SIZE(global_specs); i++) {
        const struct tensor_spec *s = &global_specs[i];
        if ((r = tensor_bind(f, &m->hp, s, s->name, s->use[m->arch], spec_weight(m, s, -1), d)) < 0)
            return r;
    }
    for (uint32_t il = 0; il < m->hp.n_layer; il++)
        for (size_t i = 0; i < ARRAY_SIZE(layer_specs); i++) {
            const struct tensor_spec *s = &layer_specs[i];
            snprintf(name, sizeof name, "blk.%u.%s", il, s->name);
            if ((r = tensor_bind(f, &m->hp, s, name, s->use[m->arch], spec_weight(m, s, (int)il),
                                 d)) < 0)
                return r;
        }
    for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(f, i);
        name_copy(name, sizeof name, t->name);
        if (!tensor_expected(m, name))
            return err_set(d, ERR_MODEL_TENSOR_UNUSED, "unexpected tensor '%s' (not part of the "
                           "%s layer recipe with %u layers)", name, m->arch_name, m->hp.n_layer);
    }
    m->hp.tied_embeddings = m->output.data == NULL;
    if (m->hp.tied_embeddings) {
        if (!kind_accepts(KIND_MATMUL, m->tok_embd.type))
            return err_set(d, ERR_MODEL_TENSOR_TYPE, "tensor 'token_embd.weight': type %s cannot "
                           "serve as the tied classifier", kern_type_name(m->tok_embd.type));
        m->output = m->tok_embd;
    }
    if (m->rope_freqs.data) {
        if (m->hp.rope_scaling != ENGINE_ROPE_SCALING_NONE)
            return err_set(d, ERR_MODEL_HPARAM, "rope_freqs.weight together with RoPE scaling "
                           "'%s'", rope_scaling_names[m->hp.rope_scaling]);
        m->hp.rope_scaling = ENGINE_ROPE_SCALING_LLAMA3;
    }
    return 0;
}

/* Converts every 1-D tensor to f32 in one arena. */
static int vectors_convert(struct engine_model *m) {
    size_t n_floats = 0;
    for (int pass = 0; pass < 2; pass++) {
        size_t at = 0;
        for (int il = -1; il < (int)m->hp.n_layer; il++) {
            const struct tensor_spec *specs = il < 0 ? global_specs : layer_specs;
            size_t n_specs = il < 0 ? ARRAY_SIZE(global_specs) : ARRAY_SIZE(layer_specs);
            for (size_t i = 0; i < n_specs; i++) {
                struct engine_weight *w = spec_weight(m, &specs[i], il);
                if (specs[i].kind != KIND_VEC || !w->data) continue;
                if (pass == 1) {
                    float *dst = m->vec_arena + at;
                    kern_type_traits(w->type)->to_f32(dst, w->data, w->n_in);
                    w->data = dst;
                    w->type = KERN_TYPE_F32;
                    w->row_bytes = (size_t)w->n_in * sizeof(float);
                }
                at += (size_t)w->n_in;
            }
        }
        n_floats = at;
        if (pass == 0) {
            m->vec_arena = malloc_array(n_floats ? n_floats : 1, sizeof(float));
            if (!m->vec_arena) return -ENOMEM;
        }
    }
    return 0;
}

static uint64_t weight_bytes_per_token(const struct engine_model *m) {
    uint64_t n = (uint64_t)m->output.row_bytes * (uint64_t)m->output.n_out;
    for (uint32_t il = 0; il < m->hp.n_layer; il++) {
        const struct engine_layer *l = &m->layers[il];
        const struct engine_weight *ws[] = {&l->wq, &l->wk, &l->wv, &l->wo,
                                            &l->w_gate, &l->w_up, &l->w_down};
        for (size_t i = 0; i < ARRAY_SIZE(ws); i++)
            n += (uint64_t)ws[i]->row_bytes * (uint64_t)ws[i]->n_out;
    }
    return n;
}

void engine_model_free(struct engine_model *m) {
    if (!m) return;
    free(m->layers);
    free(m->vec_arena);
    gguf_close(m->file);
    free(m);
}

int engine_model_load_gguf(struct gguf_file *f, const struct engine_model_params *params,
                           struct engine_model **ret, struct err_detail *d) {
    int r;
    struct engine_model *m = calloc(1, sizeof *m);
    if (!m) {
        gguf_close(f);
        return -ENOMEM;
    }
    m->file = f;

    struct gguf_str arch;
    const struct gguf_kv *kv = gguf_find_kv(f, "general.architecture");
    if (!kv) {
        r = err_set(d, ERR_MODEL_ARCH, "missing key 'general.architecture'");
        goto fail;
    }
    if (gguf_get_str(f, "general.architecture", &arch, NULL) < 0) {
        r = err_set(d, ERR_MODEL_ARCH, "key 'general.architecture' at offset %llu is not a string",
                    (unsigned long long)kv->offset);
        goto fail;
    }
    r = ERR_MODEL_ARCH;
    for (int a = 0; a < ENGINE_ARCH_COUNT; a++)
        if (gguf_str_eq(arch, arch_table[a].name)) r = a;
    if (r < 0) {
        err_set(d, r, "key 'general.architecture' at offset %llu: unknown architecture '%.*s'",
                (unsigned long long)kv->offset, (int)MIN(arch.len, 64), arch.ptr);
        goto fail;
    }
    m->arch = (enum engine_arch)r;
    m->arch_name = arch_table[m->arch].name;

    if ((r = hparams_load(f, m->arch, &m->hp, d)) < 0) goto fail;
    m->layers = calloc_array(m->hp.n_layer, sizeof *m->layers);
    if (!m->layers) {
        r = -ENOMEM;
        goto fail;
    }
    if ((r = tensors_bind(m, d)) < 0) goto fail;
    if ((r = vectors_convert(m)) < 0) goto fail;
    m->weight_bytes = weight_bytes_per_token(m);
    if (params && params->fingerprint)
        m->fingerprint = *params->fingerprint;
    else
        m->fingerprint = hash128(gguf_base(f), (size_t)gguf_size(f));
    *ret = m;
    return 0;
fail:
    engine_model_free(m);
    return r;
}

int engine_model_load(const char *path, const struct engine_model_params *params,
                      struct engine_model **ret, struct err_detail *d) {
    struct gguf_file *f = NULL;
    int r = params && params->private_copy ? gguf_open_copy(path, &f, d) : gguf_open(path, &f, d);
    if (r < 0) return r;
    return engine_model_load_gguf(f, params, ret, d);
}
