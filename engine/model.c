/* Model loading: the arch table, hparams with llama.cpp's defaults, tensor validation. */
#include "engine/model.h"

#include "engine/arch.h"
#include "kernels/deltanet.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

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

/* Reads <arch>.<suffix>: a scalar (the same for every layer) or an array of one integer
 * (or bool) per layer, each in [lo, hi], into vals[n_layer]; absent: def when !required. */
static int hp_layers_u32(const struct gguf_file *f, const char *arch, const char *suffix,
                         uint32_t n_layer, bool required, uint32_t def, uint64_t lo, uint64_t hi,
                         uint32_t *vals, struct err_detail *d) {
    char key[128];
    if (kv_key(key, sizeof key, arch, suffix) < 0)
        return err_set(d, ERR_MODEL_ARCH, "architecture name '%s' too long", arch);
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv || kv->type != GGUF_TYPE_ARRAY) {
        uint32_t v;
        int r = hp_u32(f, arch, suffix, required, def, lo, hi, &v, d);
        if (r < 0) return r;
        for (uint32_t il = 0; il < n_layer; il++) vals[il] = v;
        return 0;
    }
    /* integer and bool element types; the signed ones are read sign-extended */
    static const struct {
        enum gguf_type t;
        bool is_signed;
    } elems[] = {{GGUF_TYPE_UINT8, false},  {GGUF_TYPE_INT8, true},  {GGUF_TYPE_UINT16, false},
                 {GGUF_TYPE_INT16, true},   {GGUF_TYPE_UINT32, false}, {GGUF_TYPE_INT32, true},
                 {GGUF_TYPE_UINT64, false}, {GGUF_TYPE_INT64, true},  {GGUF_TYPE_BOOL, false}};
    int e = -1;
    for (size_t i = 0; i < ARRAY_SIZE(elems); i++)
        if (elems[i].t == kv->arr_type) e = (int)i;
    if (e < 0 || kv->n != n_layer)
        return err_set(d, ERR_MODEL_HPARAM, "key '%s' at offset %llu: an array of %llu %s, "
                       "expected one integer per layer (%u)", key, (unsigned long long)kv->offset,
                       (unsigned long long)kv->n, gguf_type_name(kv->arr_type), n_layer);
    size_t w = gguf_type_size(kv->arr_type);
    for (uint32_t il = 0; il < n_layer; il++) {
        uint64_t u = 0;
        memcpy(&u, (const char *)kv->data + (size_t)il * w, w); /* little-endian host */
        if (elems[e].is_signed && w < 8 && (u >> (8 * w - 1)) & 1) u |= ~0ull << (8 * w);
        if ((int64_t)u < 0 || u < lo || u > hi)
            return err_set(d, ERR_MODEL_HPARAM, "key '%s' at offset %llu: element %u (%lld) is "
                           "out of range [%llu, %llu]", key, (unsigned long long)kv->offset, il,
                           (long long)u, (unsigned long long)lo, (unsigned long long)hi);
        vals[il] = (uint32_t)u;
    }
    return 0;
}

/* Gemma's sliding-window layout (notes/gemma.md §A.4, §B.3): gemma3 reads a scalar period
 * P (default 6; layer il is SWA iff il mod P < P - 1; an array is ignored, as llama.cpp's
 * scalar reader does), gemma4 one flag per layer (a scalar is copied to every layer). No
 * window (absent or 0): no SWA layer. */
static int hp_swa(const struct gguf_file *f, enum engine_arch arch, struct engine_hparams *hp,
                  struct err_detail *d) {
    const struct arch_desc *ad = &engine_arch_rows[arch];
    const char *a = ad->name;
    uint32_t flags[ENGINE_MAX_LAYERS] = {0};
    int r = hp_u32(f, a, "attention.sliding_window", ad->swa == SWA_PER_LAYER, 0, 0,
                   INT32_MAX, &hp->swa_window, d);
    if (r < 0) return r;
    if (ad->swa == SWA_PERIOD) {
        char key[128];
        kv_key(key, sizeof key, a, "attention.sliding_window_pattern");
        const struct gguf_kv *kv = gguf_find_kv(f, key);
        uint32_t period = ad->swa_period ? ad->swa_period : 6;
        if (kv && kv->type != GGUF_TYPE_ARRAY &&
            (r = hp_u32(f, a, "attention.sliding_window_pattern", false, period, 0, UINT32_MAX,
                        &period, d)) < 0)
            return r;
        for (uint32_t il = 0; il < hp->n_layer; il++)
            flags[il] = period == 0 || il % period < period - 1;
    } else if (ad->swa == SWA_PER_LAYER) {
        if ((r = hp_layers_u32(f, a, "attention.sliding_window_pattern", hp->n_layer, false, 0,
                               0, UINT32_MAX, flags, d)) < 0)
            return r;
    }
    for (uint32_t il = 0; il < hp->n_layer; il++)
        hp->layer[il].swa = hp->swa_window > 0 && flags[il] != 0;
    return 0;
}

/* kv_source(il) (notes/gemma.md §B.1, the Hugging Face rule): a layer that owns no KV reads
 * the KV of the last owning layer of its own kind (SWA or global); a file where no such
 * layer exists, or where it has other KV heads or head sizes, is refused. */
static int hp_kv_sources(struct engine_hparams *hp, const char *a, struct err_detail *d) {
    uint32_t n_own = hp->n_layer - hp->n_layer_kv_shared;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        struct engine_layer_hparams *l = &hp->layer[il];
        l->kv_source = (int32_t)il;
        if (il < n_own) continue;
        l->kv_source = -1;
        for (uint32_t j = 0; j < n_own; j++)
            if (hp->layer[j].swa == l->swa) l->kv_source = (int32_t)j;
        if (l->kv_source < 0)
            return err_set(d, ERR_MODEL_HPARAM, "%s.attention.shared_kv_layers %u: layer %u (%s) "
                           "reads shared KV, but none of the layers 0..%u that own KV is %s",
                           a, hp->n_layer_kv_shared, il, l->swa ? "sliding-window" : "global",
                           n_own - 1, l->swa ? "sliding-window" : "global");
        const struct engine_layer_hparams *s = &hp->layer[l->kv_source];
        if (s->n_head_kv != l->n_head_kv || s->head_dim_k != l->head_dim_k ||
            s->head_dim_v != l->head_dim_v || s->n_rot != l->n_rot)
            return err_set(d, ERR_MODEL_HPARAM, "layer %u reads the KV of layer %d, which has "
                           "%u KV heads of %u/%u values (layer %u: %u of %u/%u)", il,
                           l->kv_source, s->n_head_kv, s->head_dim_k, s->head_dim_v, il,
                           l->n_head_kv, l->head_dim_k, l->head_dim_v);
    }
    return 0;
}

/* Reads <arch>.<suffix> as a bool (an integer 0 or 1 is taken too); absent: def. */
static int hp_bool(const struct gguf_file *f, const char *arch, const char *suffix, bool def,
                   bool *out, struct err_detail *d) {
    char key[128];
    if (kv_key(key, sizeof key, arch, suffix) < 0)
        return err_set(d, ERR_MODEL_ARCH, "architecture name '%s' too long", arch);
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    if (kv && kv->type != GGUF_TYPE_BOOL) {
        uint32_t v;
        int r = hp_u32(f, arch, suffix, false, def, 0, 1, &v, d);
        if (r >= 0) *out = v != 0;
        return r;
    }
    *out = def;
    struct err_detail sub = {0};
    int r = kv ? gguf_get_bool(f, key, out, &sub) : 0;
    if (r < 0)
        return err_set(d, ERR_MODEL_HPARAM, "key '%s' at offset %llu: %s", key,
                       (unsigned long long)kv->offset, err_msg(&sub, r));
    return 0;
}

/* A size that a key gives, or where the file lacks it the rows (ne[1]) of a tensor, or 0. */
static int hp_size(const struct gguf_file *f, const char *key, const char *tensor, uint32_t *out,
                   struct err_detail *d) {
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    const struct gguf_tensor *t = gguf_find_tensor(f, tensor);
    uint64_t v = t ? (uint64_t)t->ne[1] : 0;
    struct err_detail sub = {0};
    int r = kv ? gguf_get_u64(f, key, &v, &sub) : 0;
    if (r < 0)
        return err_set(d, ERR_MODEL_HPARAM, "key '%s' at offset %llu: %s", key,
                       (unsigned long long)kv->offset, err_msg(&sub, r));
    if (v > (1u << 24))
        return err_set(d, ERR_MODEL_HPARAM, "key '%s': %llu is out of range [0, %u]", key,
                       (unsigned long long)v, 1u << 24);
    *out = (uint32_t)v;
    return 0;
}

/* What makes a model an embedding model (../shared/models/embed/README.md): its arch, or
 * a pooling type in the file (<arch>.pooling_type, default the arch's: llama.cpp's rank
 * pooling of rerankers is refused); bidirectional attention (the arch's, or
 * <arch>.attention.causal = false where the arch reads it); the sizes of the token-type
 * table and of the dense projections. */
static int hp_embedding(const struct gguf_file *f, enum engine_arch arch,
                        struct engine_hparams *hp, struct err_detail *d) {
    const struct arch_desc *ad = &engine_arch_rows[arch];
    const char *a = ad->name;
    char key[128];
    uint32_t pooling;
    int r = hp_u32(f, a, "pooling_type", false, ad->pooling_default, 0, UINT32_MAX, &pooling, d);
    if (r < 0) return r;
    if (pooling >= ENGINE_POOLING_COUNT)
        return err_set(d, ERR_MODEL_HPARAM, "%s.pooling_type %u: %s", a, pooling,
                       pooling == 4 ? "rank pooling (a reranker) is not supported"
                                    : "not a pooling type (0 none, 1 mean, 2 cls, 3 last)");
    hp->pooling = (enum engine_pooling)pooling;
    hp->embedding = ad->embedding || hp->pooling != ENGINE_POOLING_NONE;
    hp->causal = !ad->bidirectional;
    if (ad->causal_key && (r = hp_bool(f, a, "attention.causal", hp->causal, &hp->causal, d)) < 0)
        return r;
    hp->n_embd_out = hp->n_embd;
    if (!ad->embedding) return 0; /* (the tables below are those archs') */
    kv_key(key, sizeof key, a, "dense_2_feat_out");
    if ((r = hp_size(f, "tokenizer.ggml.token_type_count", "token_types.weight",
                     &hp->n_token_types, d)) < 0 ||
        (r = hp_size(f, key, "dense_2.weight", &hp->n_embd_dense, d)) < 0)
        return r;
    kv_key(key, sizeof key, a, "dense_3_feat_out");
    if (gguf_find_kv(f, key) || gguf_find_tensor(f, "dense_3.weight"))
        return hp_size(f, key, "dense_3.weight", &hp->n_embd_out, d);
    return 0;
}

/* A hybrid's recurrent layers (notes/hybrid.md §A.1): <arch>.attention.recurrent_layers
 * (one flag per block), else <arch>.full_attention_interval I (default 4: layer il is
 * recurrent iff (il + 1) mod I != 0); MTP blocks never are. With any recurrent layer, the
 * Gated DeltaNet shape from the ssm.* keys (§A.2), checked as the kernels take it. */
static int hp_recurrent(const struct gguf_file *f, const char *a, uint32_t n_all,
                        struct engine_hparams *hp, bool *rec, struct err_detail *d) {
    char key[128];
    uint32_t flags[ENGINE_MAX_LAYERS];
    int r;
    kv_key(key, sizeof key, a, "attention.recurrent_layers");
    if (gguf_find_kv(f, key)) {
        if ((r = hp_layers_u32(f, a, "attention.recurrent_layers", n_all, true, 0, 0, 1, flags,
                               d)) < 0)
            return r;
    } else {
        uint32_t interval;
        if ((r = hp_u32(f, a, "full_attention_interval", false, 4, 1, UINT32_MAX, &interval,
                        d)) < 0)
            return r;
        for (uint32_t il = 0; il < n_all; il++) flags[il] = (il + 1) % interval != 0;
    }
    hp->n_layer_rec = 0;
    for (uint32_t il = 0; il < hp->n_layer; il++) hp->n_layer_rec += rec[il] = flags[il] != 0;
    if (hp->n_layer_rec == 0) return 0;
    uint32_t inner;
    if ((r = hp_u32(f, a, "ssm.conv_kernel", true, 0, 1, KERN_DN_MAX_KERNEL, &hp->ssm_n_kernel,
                    d)) < 0 ||
        (r = hp_u32(f, a, "ssm.state_size", true, 0, 1, KERN_DN_MAX_HEAD_DIM,
                    &hp->ssm_head_dim_k, d)) < 0 ||
        (r = hp_u32(f, a, "ssm.group_count", true, 0, 1, 1u << 16, &hp->ssm_n_head_k, d)) < 0 ||
        (r = hp_u32(f, a, "ssm.time_step_rank", true, 0, 1, 1u << 16, &hp->ssm_n_head_v, d)) < 0 ||
        (r = hp_u32(f, a, "ssm.inner_size", true, 0, 1, 1u << 24, &inner, d)) < 0)
        return r;
    hp->ssm_head_dim_v = inner / hp->ssm_n_head_v;
    const struct kern_dn_shape sh = {.n_head_k = hp->ssm_n_head_k, .n_head_v = hp->ssm_n_head_v,
                                     .head_dim_k = hp->ssm_head_dim_k,
                                     .head_dim_v = hp->ssm_head_dim_v,
                                     .head_map = KERN_DN_HEAD_MAP_TILED, .scale = 1, .l2_eps = 0};
    if (inner % hp->ssm_n_head_v != 0 || kern_dn_shape_check(&sh) < 0)
        return err_set(d, ERR_MODEL_HPARAM, "%s.ssm: %u key heads of %u, %u value heads in %u "
                       "values: not a Gated DeltaNet shape the engine runs (value heads a "
                       "multiple of key heads, head sizes 1..%d)", a, hp->ssm_n_head_k,
                       hp->ssm_head_dim_k, hp->ssm_n_head_v, inner, KERN_DN_MAX_HEAD_DIM);
    return 0;
}

/* A mixture-of-experts arch's keys (notes/hybrid.md §A.2, §C.2), with llama.cpp's
 * defaults: experts required (its loaders throw without them), the expert FFN width
 * n_ff / n_expert_used and the shared one n_ff when the file does not say. */
static int hp_moe(const struct gguf_file *f, const struct arch_desc *ad, struct engine_hparams *hp,
                  struct err_detail *d) {
    const char *a = ad->name;
    int r;
    if (hp->n_expert == 0)
        return err_set(d, ERR_MODEL_HPARAM, "%s.expert_count is missing or 0: a %s model's FFNs "
                       "are mixtures of experts", a, a);
    if (hp->n_expert > ENGINE_MAX_EXPERTS)
        return err_set(d, ERR_MODEL_HPARAM, "%s.expert_count %u: at most %d experts", a,
                       hp->n_expert, ENGINE_MAX_EXPERTS);
    if ((r = hp_u32(f, a, "expert_used_count", true, 0, 1, hp->n_expert, &hp->n_expert_used,
                    d)) < 0 ||
        (r = hp_u32(f, a, "expert_feed_forward_length", false, hp->n_ff / hp->n_expert_used, 1,
                    1u << 24, &hp->n_ff_exp, d)) < 0 ||
        (r = hp_u32(f, a, "expert_shared_feed_forward_length", false, hp->n_ff, 1, 1u << 24,
                    &hp->n_ff_shexp, d)) < 0)
        return r;
    if (hp->n_ff_exp == 0)
        return err_set(d, ERR_MODEL_HPARAM, "%s.expert_feed_forward_length is missing and "
                       "feed_forward_length %u / expert_used_count %u is 0", a, hp->n_ff,
                       hp->n_expert_used);
    hp->moe_gating = ad->moe.gating;
    hp->moe_norm_w = ad->moe.norm_w;
    if (ad->moe.scale_key && (r = hp_f32(f, a, "expert_weights_scale", false, 0, 0, 1e6f,
                                         &hp->moe_w_scale, d)) < 0)
        return r;
    hp->max_n_ff = MAX(hp->max_n_ff, MAX(hp->n_ff_exp, hp->n_ff_shexp));
    return 0;
}

static int hparams_load(const struct gguf_file *f, enum engine_arch arch, struct engine_hparams *hp,
                        struct err_detail *d) {
    const struct arch_desc *ad = &engine_arch_rows[arch];
    const char *a = ad->name;
    int r;
    memset(hp, 0, sizeof *hp);
    hp->rope_kind = engine_arch_rows[arch].rope_kind;
    /* The mixture-of-experts variants of the other archs have their own tensors. */
    if ((r = hp_u32(f, a, "expert_count", false, 0, 0, UINT32_MAX, &hp->n_expert, d)) < 0)
        return r;
    if (hp->n_expert > 0 && !ad->moe.on && !ad->moe.beside_dense)
        return err_set(d, ERR_MODEL_ARCH, "%s.expert_count = %u: %s", a, hp->n_expert,
                       ad->moe_refusal ? ad->moe_refusal
                                       : "mixture-of-experts models of this architecture are "
                                         "not supported (its router and expert tensors are "
                                         "not in the engine's recipe)");

    if ((r = hp_u32(f, a, "context_length", true, 0, 1, UINT32_MAX, &hp->n_ctx_train, d)) < 0 ||
        (r = hp_u32(f, a, "embedding_length", true, 0, 1, 1u << 20, &hp->n_embd, d)) < 0 ||
        (r = hp_u32(f, a, "block_count", true, 0, 1, ENGINE_MAX_LAYERS, &hp->n_layer, d)) < 0 ||
        (r = hp_u32(f, a, "attention.head_count", true, 0, 1, 1u << 16, &hp->n_head, d)) < 0)
        return r;
    /* per-layer arrays have one value per block, MTP blocks included: L of them */
    const uint32_t L = hp->n_layer;
    if (ad->mtp && (r = hp_u32(f, a, "nextn_predict_layers", false, 0, 0, L - 1,
                               &hp->n_layer_mtp, d)) < 0)
        return r;
    hp->n_layer -= hp->n_layer_mtp;
    uint32_t vals[ENGINE_MAX_LAYERS];
    if ((r = hp_layers_u32(f, a, "feed_forward_length", L, true, 0, 1, 1u << 24, vals, d)) < 0)
        return r;
    for (uint32_t il = 0; il < L; il++) hp->layer[il].n_ff = vals[il];
    if ((r = hp_layers_u32(f, a, "attention.head_count_kv", L, false, hp->n_head, 1, hp->n_head,
                           vals, d)) < 0)
        return r;
    for (uint32_t il = 0; il < L; il++) {
        hp->layer[il].n_head_kv = vals[il];
        if (hp->n_head % vals[il] != 0)
            return err_set(d, ERR_MODEL_HPARAM, "%s.attention.head_count %u is not a multiple of "
                           "%s.attention.head_count_kv %u (layer %u)", a, hp->n_head, a, vals[il],
                           il);
    }
    hp->n_head_kv = hp->layer[0].n_head_kv;
    hp->n_ff = hp->layer[0].n_ff;
    if ((r = hp_swa(f, arch, hp, d)) < 0) return r;

    /* head sizes default to n_embd / n_head (llama.cpp), which must then divide evenly;
     * gemma4 gives SWA layers their own (key_length_swa, required) */
    uint32_t hd_default = hp->n_embd / hp->n_head;
    if ((r = hp_u32(f, a, "attention.key_length", false, hd_default, 1, 1u << 16,
                    &hp->head_dim_k, d)) < 0 ||
        (r = hp_u32(f, a, "attention.value_length", false, hd_default, 1, 1u << 16,
                    &hp->head_dim_v, d)) < 0)
        return r;
    if (hp->head_dim_k == 0 || hp->head_dim_v == 0)
        return err_set(d, ERR_MODEL_HPARAM, "%s.embedding_length %u < %s.attention.head_count %u "
                       "and no attention.key_length", a, hp->n_embd, a, hp->n_head);
    uint32_t hd_k_swa = hp->head_dim_k, hd_v_swa = hp->head_dim_v;
    if (ad->swa_own_dims) {
        if ((r = hp_u32(f, a, "attention.key_length_swa", true, 0, 1, 1u << 16, &hd_k_swa, d)) < 0 ||
            (r = hp_u32(f, a, "attention.value_length_swa", true, 0, 1, 1u << 16, &hd_v_swa, d)) < 0)
            return r;
        if (hp->head_dim_k != hp->head_dim_v || hd_k_swa != hd_v_swa)
            return err_set(d, ERR_MODEL_HPARAM, "%s needs key_length = value_length (%u, %u) "
                           "and key_length_swa = value_length_swa (%u, %u)", a, hp->head_dim_k,
                           hp->head_dim_v, hd_k_swa, hd_v_swa);
    }
    if ((r = hp_u32(f, a, "rope.dimension_count", false, hp->head_dim_k, 2, hp->head_dim_k,
                    &hp->n_rot, d)) < 0)
        return r;
    if (ad->no_rope) hp->n_rot = 0; /* learned positions: RoPE of 0 dims, the identity */
    uint32_t n_rot_swa = hp->n_rot;
    if (ad->swa_own_dims && (r = hp_u32(f, a, "rope.dimension_count_swa", false, hd_k_swa, 2, hd_k_swa,
                              &n_rot_swa, d)) < 0)
        return r;
    if (hp->n_rot % 2 != 0 || n_rot_swa % 2 != 0)
        return err_set(d, ERR_MODEL_HPARAM, "%s.rope.dimension_count %u (SWA %u) is odd", a,
                       hp->n_rot, n_rot_swa);
    for (uint32_t il = 0; il < L; il++) {
        struct engine_layer_hparams *l = &hp->layer[il];
        l->head_dim_k = l->swa ? hd_k_swa : hp->head_dim_k;
        l->head_dim_v = l->swa ? hd_v_swa : hp->head_dim_v;
        l->n_rot = l->swa ? n_rot_swa : hp->n_rot;
        hp->max_n_ff = MAX(hp->max_n_ff, l->n_ff);
        hp->max_head_dim_k = MAX(hp->max_head_dim_k, l->head_dim_k);
        hp->max_head_dim_v = MAX(hp->max_head_dim_v, l->head_dim_v);
        hp->max_n_embd_k = MAX(hp->max_n_embd_k, l->n_head_kv * l->head_dim_k);
        hp->max_n_embd_v = MAX(hp->max_n_embd_v, l->n_head_kv * l->head_dim_v);
        hp->max_n_rot = MAX(hp->max_n_rot, l->n_rot);
    }
    if ((r = hp_u32(f, a, "attention.shared_kv_layers", false, 0, 0, hp->n_layer - 1,
                    &hp->n_layer_kv_shared, d)) < 0)
        return r;
    if ((r = hp_kv_sources(hp, a, d)) < 0) return r;
    if ((r = hp_embedding(f, arch, hp, d)) < 0) return r;
    if (!hp->causal && hp->n_layer_kv_shared > 0)
        return err_set(d, ERR_MODEL_HPARAM, "%s.attention.shared_kv_layers %u in a model with "
                       "bidirectional attention", a, hp->n_layer_kv_shared);
    bool rec[ENGINE_MAX_LAYERS] = {0};
    if (ad->recurrent && (r = hp_recurrent(f, a, L, hp, rec, d)) < 0) return r;
    hp->attn_gate = ad->attn_gate;
    hp->ssm_head_map = ad->dn_head_map;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        struct engine_layer_hparams *l = &hp->layer[il];
        l->mixer = rec[il]                      ? ENGINE_MIXER_GATED_DELTANET
                   : l->kv_source != (int32_t)il ? ENGINE_MIXER_ATTENTION_SHARED
                   : !hp->causal && l->swa     ? ENGINE_MIXER_ATTENTION_BIDIR_SWA
                   : !hp->causal               ? ENGINE_MIXER_ATTENTION_BIDIR
                   : l->swa                    ? ENGINE_MIXER_ATTENTION_SWA
                                               : ENGINE_MIXER_ATTENTION;
        l->ffn = ad->moe.on                              ? ENGINE_FFN_MOE
                 : ad->moe.beside_dense && hp->n_expert > 0 ? ENGINE_FFN_MOE_DENSE
                 : ad->ffn_plain                          ? ENGINE_FFN_DENSE
                                                          : ENGINE_FFN_DENSE_GATED;
    }
    if ((ad->moe.on || (ad->moe.beside_dense && hp->n_expert > 0)) &&
        (r = hp_moe(f, ad, hp, d)) < 0)
        return r;
    hp->norm = ad->norm;
    hp->ffn_act = ad->ffn_act;
    const char *eps_key = hp->norm == ENGINE_NORM_LAYER ? "attention.layer_norm_epsilon"
                                                        : "attention.layer_norm_rms_epsilon";
    if ((r = hp_f32(f, a, eps_key, true, 0, 1e-30f, 1.0f, &hp->rms_eps, d)) < 0 ||
        (r = hp_f32(f, a, "rope.freq_base", false, 10000.0f, 1e-3f, 1e12f, &hp->rope_freq_base,
                    d)) < 0 ||
        (r = hp_f32(f, a, "rope.freq_base_swa", false,
                    ad->swa_rope_global ? hp->rope_freq_base : 10000.0f, 1e-3f, 1e12f,
                    &hp->rope_freq_base_swa, d)) < 0)
        return r;
    hp->swa_rope_global = ad->swa_rope_global;

    /* gemma3: 1/sqrt(head_dim), but 1/sqrt(n_embd/n_head) for the 62-layer 27B, which
     * llama.cpp tells by its layer count (query_pre_attn_scalar is not in the file) */
    if (ad->attn_scale == ATTN_SCALE_ONE) hp->attn_scale = 1.0f;
    if (ad->attn_scale == ATTN_SCALE_GEMMA3)
        hp->attn_scale = hp->n_layer == 62 ? 1.0f / sqrtf((float)hp->n_embd / (float)hp->n_head)
                                           : 1.0f / sqrtf((float)hp->head_dim_k);
    if (ad->gemma_io) {
        if ((r = hp_f32(f, a, "final_logit_softcapping", false, ad->softcap_default, 0, 1e6f,
                        &hp->final_softcap, d)) < 0)
            return r;
        hp->embd_scale = true;
        hp->ffn_act = ENGINE_FFN_GELU; /* GeGLU */
    }
    hp->v_norm = ad->v_norm;
    if (ad->per_layer_inputs && (r = hp_u32(f, a, "embedding_length_per_layer_input", true, 0, 0, 1u << 16,
                              &hp->n_embd_per_layer, d)) < 0)
        return r;
    return hp_rope_scaling(f, a, hp, d);
}

/* ---- tensors ------------------------------------------------------------------------- */

static bool spec_gate_up(const struct tensor_spec *s) {
    return s->part == PART_GATE_UP_GATE || s->part == PART_GATE_UP_UP;
}

/* Does m's arch take spec s from its part of the fused QKV tensor? */
static bool spec_fused(const struct engine_model *m, const struct tensor_spec *s) {
    return s->part != PART_WHOLE && !spec_gate_up(s) &&
           engine_arch_rows[m->arch].use[FEAT_QKV_FUSED] != USE_NO;
}

/* How m's arch uses the tensor of spec s (its row's entry for the spec's feature, or for
 * the fused QKV). */
static enum spec_use spec_use_of(const struct engine_model *m, const struct tensor_spec *s) {
    return (enum spec_use)engine_arch_rows[m->arch].use[spec_fused(m, s) ? FEAT_QKV_FUSED
                                                                         : s->feature];
}

/* The file's name of spec s's tensor in m (the suffix after "blk.N." for a layer's). */
static const char *spec_name(const struct engine_model *m, const struct tensor_spec *s) {
    if (spec_fused(m, s)) return SPEC_QKV_FUSED_NAME;
    const struct arch_desc *ad = &engine_arch_rows[m->arch];
    for (size_t i = 0; i < ARRAY_SIZE(ad->rename) && ad->rename[i].spec; i++)
        if (!strcmp(ad->rename[i].spec, s->name)) return ad->rename[i].file;
    return s->name;
}

/* The value of dim in layer il (il < 0: a global tensor, sized by the global layers). */
static int64_t dim_value(const struct engine_hparams *hp, int il, enum spec_dim dim) {
    struct engine_layer_hparams g = {.n_head_kv = hp->n_head_kv, .head_dim_k = hp->head_dim_k,
                                     .head_dim_v = hp->head_dim_v, .n_ff = hp->n_ff};
    const struct engine_layer_hparams *l = il < 0 ? &g : &hp->layer[il];
    switch (dim) { /* a mapping of symbols, not a type ladder */
    case DIM_ONE: return 1;
    case DIM_EMBD: return hp->n_embd;
    case DIM_Q: return (int64_t)hp->n_head * l->head_dim_k;
    case DIM_K: return (int64_t)l->n_head_kv * l->head_dim_k;
    case DIM_V: return (int64_t)l->n_head_kv * l->head_dim_v;
    case DIM_O: return (int64_t)hp->n_head * l->head_dim_v;
    case DIM_FF: return l->n_ff;
    case DIM_HEAD_K: return l->head_dim_k;
    case DIM_VOCAB: return hp->n_vocab;
    case DIM_ROT_HALF: return hp->n_rot / 2;
    case DIM_PLE: return hp->n_embd_per_layer;
    case DIM_PLE_ALL: return (int64_t)hp->n_layer * hp->n_embd_per_layer;
    case DIM_CTX: return hp->n_ctx_train;
    case DIM_TYPES: return hp->n_token_types;
    case DIM_DENSE: return hp->n_embd_dense;
    case DIM_EMBD_OUT: return hp->n_embd_out;
    case DIM_QG: return (int64_t)hp->n_head * (l->head_dim_k + (hp->attn_gate ? l->head_dim_v : 0));
    case DIM_SSM_KERNEL: return hp->ssm_n_kernel;
    case DIM_SSM_CONV:
        return 2 * (int64_t)hp->ssm_n_head_k * hp->ssm_head_dim_k +
               (int64_t)hp->ssm_n_head_v * hp->ssm_head_dim_v;
    case DIM_SSM_INNER: return (int64_t)hp->ssm_n_head_v * hp->ssm_head_dim_v;
    case DIM_SSM_HEADS: return hp->ssm_n_head_v;
    case DIM_SSM_HEAD_V: return hp->ssm_head_dim_v;
    case DIM_EXPERTS: return hp->n_expert;
    case DIM_FF_EXP: return hp->n_ff_exp;
    case DIM_FF_SHEXP: return hp->n_ff_shexp;
    case DIM_SSM_QKVZ:
        return 2 * (int64_t)hp->ssm_n_head_k * hp->ssm_head_dim_k +
               2 * (int64_t)hp->ssm_n_head_v * hp->ssm_head_dim_v;
    case DIM_SSM_BA: return 2 * (int64_t)hp->ssm_n_head_v;
    case DIM_HEADS: return hp->n_head;
    case DIM_COUNT: break;
    }
    return -1;
}

/* How a spec's use applies to layer il (il < 0: global) of the model: a hybrid's attention
 * tensors are absent from its recurrent layers, its recurrent tensors from the others. */
static enum spec_use use_resolve(const struct engine_hparams *hp, int il,
                                 const struct tensor_spec *s, enum spec_use use) {
    const bool rec = il >= 0 && hp->layer[il].mixer == ENGINE_MIXER_GATED_DELTANET;
    /* (gemma4's MoE layers keep their dense FFN beside the experts) */
    const enum engine_ffn_kind fk = il >= 0 ? hp->layer[il].ffn : ENGINE_FFN_DENSE_GATED;
    const bool moe = fk == ENGINE_FFN_MOE || fk == ENGINE_FFN_MOE_DENSE;
    if (il >= 0 &&
        ((s->layers == SPEC_ATTN_LAYER && rec) || (s->layers == SPEC_REC_LAYER && !rec) ||
         (s->layers == SPEC_DENSE_FFN && fk == ENGINE_FFN_MOE) ||
         (s->layers == SPEC_MOE_FFN && !moe)))
        return USE_NO;
    if (use == USE_OWN)
        return il >= 0 && hp->layer[il].kv_source != il ? USE_OPT : USE_REQ;
    if (use == USE_PLE) return hp->n_embd_per_layer > 0 ? USE_REQ : USE_NO;
    return use;
}

static bool kind_accepts(enum spec_kind kind, int type) {
    const struct kern_type_traits *tt = kern_type_traits(type);
    if (!tt || !tt->to_f32) return false;
    if (kind == KIND_MATMUL) return tt->vec_dot != NULL;
    if (kind == KIND_VEC || kind == KIND_CONV) return !tt->is_quantized;
    return true;
}

/* Copies a type's name in upper case, as model cards and file names spell it ("Q4_K"). */
static void type_upper(char *dst, size_t n, int type) {
    size_t i = 0;
    for (const char *p = kern_type_name(type); *p && i + 1 < n; p++)
        dst[i++] = (char)(*p >= 'a' && *p <= 'z' ? *p - 'a' + 'A' : *p);
    dst[i] = 0;
}

/* ERR_MODEL_TENSOR_TYPE naming the tensor, its type and the types this kind of tensor may
 * have (from the kernels' table, so the list never goes stale). */
static int type_refuse(enum spec_kind kind, const char *name, int type, struct err_detail *d) {
    char list[256] = "", one[16];
    size_t n = 0;
    for (int t = 0; t < KERN_TYPE_COUNT && n < sizeof list; t++) {
        if (!kind_accepts(kind, t)) continue;
        type_upper(one, sizeof one, t);
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", n ? ", " : "", one);
    }
    type_upper(one, sizeof one, type);
    return err_set(d, ERR_MODEL_TENSOR_TYPE, "tensor '%s' is %s, which warmd does not support "
                   "%s; supported: %s", name, one, kind == KIND_VEC ? "for this tensor" : "yet",
                   list);
}

/* Looks up one tensor, checks type and shape, fills w (data still in the file's type): the
 * whole tensor, or the spec's rows of the fused QKV (fused). */
static int tensor_bind(const struct gguf_file *f, const struct engine_hparams *hp,
                       const struct tensor_spec *s, int il, const char *name, enum spec_use use,
                       bool fused, struct engine_weight *w, struct err_detail *d) {
    memset(w, 0, sizeof *w);
    use = use_resolve(hp, il, s, use);
    if (use == USE_NO) return 0;
    const struct gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t) {
        if (use == USE_OPT) return 0;
        return err_set(d, ERR_MODEL_TENSOR_MISSING, "tensor '%s' is missing", name);
    }
    if (!kind_accepts(s->kind, t->type)) return type_refuse(s->kind, name, t->type, d);
    int64_t ne0 = dim_value(hp, il, s->ne0), ne1 = dim_value(hp, il, s->ne1);
    int64_t ne2 = dim_value(hp, il, s->ne2); /* an experts' stack: n_expert matrices */
    /* a part of the fused QKV: the file's rows are Q, K, V; this spec's start at row0; a
     * half of each expert of a fused gate_up stack: its gate rows, then its up rows */
    int64_t q = dim_value(hp, il, DIM_Q), k = dim_value(hp, il, DIM_K);
    int64_t row0 = !fused || s->part == PART_QKV_Q ? 0 : s->part == PART_QKV_K ? q : q + k;
    int64_t ne1_file = fused ? q + k + dim_value(hp, il, DIM_V) : ne1;
    if (fused && spec_gate_up(s)) {
        row0 = s->part == PART_GATE_UP_UP ? ne1 : 0;
        ne1_file = 2 * ne1;
    }
    bool ok = t->ne[0] == ne0 && t->ne[1] == ne1_file && t->ne[2] == ne2 && t->ne[3] == 1;
    if (!ok && ne2 > 1)
        return err_set(d, ERR_MODEL_TENSOR_SHAPE,
                       "tensor '%s': shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld] "
                       "(%lld experts)", name, (long long)t->ne[0], (long long)t->ne[1],
                       (long long)t->ne[2], (long long)t->ne[3], (long long)ne0,
                       (long long)ne1_file, (long long)ne2, (long long)ne2);
    if (!ok)
        return err_set(d, ERR_MODEL_TENSOR_SHAPE,
                       "tensor '%s': shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]", name,
                       (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                       (long long)t->ne[3], (long long)ne0, (long long)ne1_file);
    w->type = t->type;
    w->n_in = ne0;
    w->n_out = ne1;
    w->row_bytes = kern_row_size(t->type, ne0);
    if (w->row_bytes == 0)
        return err_set(d, ERR_MODEL_TENSOR_SHAPE, "tensor '%s': %lld values per row is not a "
                       "multiple of the %s block", name, (long long)ne0, kern_type_name(t->type));
    if (s->ne2 != DIM_ONE) {
        w->n_expert = ne2;
        w->expert_bytes = (size_t)ne1_file * w->row_bytes;
    }
    /* (no data in a file opened for its metadata) */
    w->data = t->data ? (const char *)t->data + (size_t)row0 * w->row_bytes : NULL;
    return 0;
}

static struct engine_weight *spec_weight(struct engine_model *m, const struct tensor_spec *s,
                                         int il) {
    char *base = il < 0 ? (char *)m : (char *)&m->layers[il];
    return (struct engine_weight *)(base + s->offset);
}

/* Is name a tensor the recipe of m's arch uses? */
static bool tensor_expected(const struct engine_model *m, const char *name) {
    for (size_t i = 0; i < engine_n_global_specs; i++)
        if (use_resolve(&m->hp, -1, &engine_global_specs[i],
                        spec_use_of(m, &engine_global_specs[i])) != USE_NO &&
            strcmp(name, spec_name(m, &engine_global_specs[i])) == 0)
            return true;
    unsigned il;
    int n = 0;
    /* a hybrid's vision tensors, the MTP blocks after the trunk: not run, skipped */
    if (engine_arch_rows[m->arch].skip_vision &&
        (!strncmp(name, "v.", 2) || !strncmp(name, "mm.", 3)))
        return true;
    if (sscanf(name, "blk.%u.%n", &il, &n) != 1 || n == 0) return false;
    if (il >= m->hp.n_layer) return il < m->hp.n_layer + m->hp.n_layer_mtp;
    char canon[GGUF_MAX_NAME + 8];
    snprintf(canon, sizeof canon, "blk.%u.", il);
    if (strncmp(name, canon, strlen(canon)) != 0) return false; /* "blk.01." is not "blk.1." */
    for (size_t i = 0; i < engine_n_layer_specs; i++) {
        const struct tensor_spec *s = &engine_layer_specs[i];
        if (use_resolve(&m->hp, (int)il, s, spec_use_of(m, s)) == USE_NO) continue;
        if (spec_gate_up(s)) { /* the fused stack, or else the two (not both) */
            char fused[GGUF_MAX_NAME + 16];
            snprintf(fused, sizeof fused, "blk.%u.%s", il, SPEC_GATE_UP_FUSED_NAME);
            if (gguf_find_tensor(m->file, fused)) {
                if (strcmp(name, fused) == 0) return true;
                continue;
            }
        }
        if (strcmp(name + n, spec_name(m, s)) == 0) return true;
    }
    return false;
}

static void name_copy(char *dst, size_t n, struct gguf_str s) {
    size_t len = MIN((size_t)s.len, n - 1);
    memcpy(dst, s.ptr, len);
    dst[len] = 0;
}

/* qwen3next's legacy ssm_in (notes/hybrid.md §A.3): per key head g, d_k rows of q, d_k of
 * k, then r·d_v of v and r·d_v of z for its r = H_v / H_k value heads (grouped order).
 * Row `row` of the re-laid ssm_qkv (q | k | v, kind 0) or ssm_z (kind 1): its row there. */
static int64_t ssm_in_row(const struct engine_hparams *hp, int kind, int64_t row) {
    const int64_t dk = hp->ssm_head_dim_k, key = hp->ssm_n_head_k * dk;
    const int64_t rdv = (int64_t)hp->ssm_n_head_v / hp->ssm_n_head_k * hp->ssm_head_dim_v;
    const int64_t group = 2 * dk + 2 * rdv; /* one key head's rows */
    if (kind == 1) return row / rdv * group + 2 * dk + rdv + row % rdv;
    if (row < 2 * key) return row % key / dk * group + (row < key ? 0 : dk) + row % dk;
    row -= 2 * key;
    return row / rdv * group + 2 * dk + row % rdv;
}

/* Every recurrent layer has attn_qkv and attn_gate, or (qwen3next) a legacy ssm_in whose
 * rows the loader re-lays into them. */
static int dn_inputs_check(const struct engine_model *m, struct err_detail *d) {
    for (uint32_t il = 0; il < m->hp.n_layer; il++) {
        const struct engine_layer *l = &m->layers[il];
        if (m->hp.layer[il].mixer != ENGINE_MIXER_GATED_DELTANET) continue;
        const bool qkv = l->ssm_qkv.n_out > 0, z = l->ssm_z.n_out > 0;
        if (qkv != z)
            return err_set(d, ERR_MODEL_TENSOR_MISSING, "tensor 'blk.%u.%s' is missing (a "
                           "recurrent layer has both attn_qkv and attn_gate)", il,
                           qkv ? "attn_gate.weight" : "attn_qkv.weight");
        if (!qkv && l->ssm_in.n_out == 0)
            return err_set(d, ERR_MODEL_TENSOR_MISSING, "recurrent layer %u has neither "
                           "attn_qkv.weight and attn_gate.weight nor a fused ssm_in.weight", il);
    }
    return 0;
}

/* Re-lays every recurrent layer's ssm_in (where it has no attn_qkv) into ssm_qkv and
 * ssm_z rows of one owned arena, and forgets ssm_in. */
static int dn_relayout(struct engine_model *m) {
    const struct engine_hparams *hp = &m->hp;
    size_t bytes = 0;
    for (int pass = 0; pass < 2; pass++) {
        size_t at = 0;
        for (uint32_t il = 0; il < hp->n_layer; il++) {
            struct engine_layer *l = &m->layers[il];
            const struct engine_weight *in = &l->ssm_in;
            if (!in->data || l->ssm_qkv.data) continue;
            struct engine_weight *outs[] = {&l->ssm_qkv, &l->ssm_z};
            const int64_t rows[] = {dim_value(hp, (int)il, DIM_SSM_CONV),
                                    dim_value(hp, (int)il, DIM_SSM_INNER)};
            for (int k = 0; k < 2; k++) {
                char *dst = (char *)m->relayout + at;
                if (pass == 1) {
                    for (int64_t r = 0; r < rows[k]; r++) {
                        const size_t from = (size_t)ssm_in_row(hp, k, r) * in->row_bytes;
                        memcpy(dst + (size_t)r * in->row_bytes, (const char *)in->data + from,
                               in->row_bytes);
                    }
                    *outs[k] = *in;
                    outs[k]->data = dst;
                    outs[k]->n_out = rows[k];
                }
                at += (size_t)rows[k] * in->row_bytes;
            }
            if (pass == 1) memset(&l->ssm_in, 0, sizeof l->ssm_in);
        }
        bytes = at;
        if (pass == 0 && bytes == 0) return 0;
        if (pass == 0 && !(m->relayout = malloc(bytes))) return -ENOMEM;
    }
    return 0;
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

    for (size_t i = 0; i < engine_n_global_specs; i++) {
        const struct tensor_spec *s = &engine_global_specs[i];
        if ((r = tensor_bind(f, &m->hp, s, -1, spec_name(m, s), spec_use_of(m, s),
                             spec_fused(m, s), spec_weight(m, s, -1), d)) < 0)
            return r;
    }
    for (uint32_t il = 0; il < m->hp.n_layer; il++)
        for (size_t i = 0; i < engine_n_layer_specs; i++) {
            const struct tensor_spec *s = &engine_layer_specs[i];
            /* an experts' gate and up stacks: the halves of a fused one where the file has it */
            snprintf(name, sizeof name, "blk.%u.%s", il, SPEC_GATE_UP_FUSED_NAME);
            const bool gate_up = spec_gate_up(s) && gguf_find_tensor(f, name);
            if (!gate_up) snprintf(name, sizeof name, "blk.%u.%s", il, spec_name(m, s));
            if ((r = tensor_bind(f, &m->hp, s, (int)il, name, spec_use_of(m, s),
                                 spec_fused(m, s) || gate_up, spec_weight(m, s, (int)il), d)) < 0)
                return r;
        }
    for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(f, i);
        name_copy(name, sizeof name, t->name);
        if (!tensor_expected(m, name))
            return err_set(d, ERR_MODEL_TENSOR_UNUSED, "unexpected tensor '%s' (not part of the "
                           "%s layer recipe with %u layers)", name, m->arch_name, m->hp.n_layer);
    }
    if ((r = dn_inputs_check(m, d)) < 0) return r;
    /* the width of an embedding: after the projections the file has */
    if (!gguf_find_tensor(f, "dense_3.weight"))
        m->hp.n_embd_out =
            gguf_find_tensor(f, "dense_2.weight") ? m->hp.n_embd_dense : m->hp.n_embd;
    /* an embedding arch has no classifier (its contexts compute embeddings only) */
    m->hp.tied_embeddings = m->output.data == NULL && !engine_arch_rows[m->arch].embedding;
    if (m->hp.tied_embeddings) {
        if (!kind_accepts(KIND_MATMUL, m->tok_embd.type))
            return err_set(d, ERR_MODEL_TENSOR_TYPE, "tensor 'token_embd.weight': type %s cannot "
                           "serve as the tied classifier", kern_type_name(m->tok_embd.type));
        m->output = m->tok_embd;
    }
    /* gemma4: the frequency divisors of the global layers' proportional RoPE */
    const bool freqs_global = engine_arch_rows[m->arch].rope_freqs_global;
    bool has_global = false;
    for (uint32_t il = 0; il < m->hp.n_layer; il++) has_global |= !m->hp.layer[il].swa;
    /* (by name: a file opened for its metadata only has no tensor data) */
    if (freqs_global && has_global && !gguf_find_tensor(f, "rope_freqs.weight"))
        return err_set(d, ERR_MODEL_TENSOR_MISSING, "tensor 'rope_freqs.weight' is missing (%s "
                       "global layers need it)", m->arch_name);
    if (m->rope_freqs.data && !freqs_global) {
        if (m->hp.rope_scaling != ENGINE_ROPE_SCALING_NONE)
            return err_set(d, ERR_MODEL_HPARAM, "rope_freqs.weight together with RoPE scaling "
                           "'%s'", rope_scaling_names[m->hp.rope_scaling]);
        m->hp.rope_scaling = ENGINE_ROPE_SCALING_LLAMA3;
    }
    return 0;
}

/* Converts every 1-D tensor to f32 in one arena, and the conv weights (KIND_CONV), which
 * are stored transposed: (n_out, n_in) in the file, (n_in, n_out) here. */
static int vectors_convert(struct engine_model *m) {
    size_t n_floats = 0;
    for (int pass = 0; pass < 2; pass++) {
        size_t at = 0;
        for (int il = -1; il < (int)m->hp.n_layer; il++) {
            const struct tensor_spec *specs = il < 0 ? engine_global_specs : engine_layer_specs;
            size_t n_specs = il < 0 ? engine_n_global_specs : engine_n_layer_specs;
            for (size_t i = 0; i < n_specs; i++) {
                struct engine_weight *w = spec_weight(m, &specs[i], il);
                const bool conv = specs[i].kind == KIND_CONV;
                if ((specs[i].kind != KIND_VEC && !conv) || !w->data) continue;
                const size_t nv = (size_t)w->n_in * (size_t)w->n_out; /* n_out 1: a vector */
                if (pass == 1) {
                    float *dst = m->vec_arena + at;
                    if (conv) {
                        float *tmp = malloc_array(nv, sizeof *tmp);
                        if (!tmp) return -ENOMEM;
                        kern_type_traits(w->type)->to_f32(tmp, w->data, (int64_t)nv);
                        kern_dn_transpose(dst, tmp, w->n_out, w->n_in);
                        free(tmp);
                    } else {
                        /* (gpt-oss's expert biases: n_out rows) */
                        kern_type_traits(w->type)->to_f32(dst, w->data, (int64_t)nv);
                    }
                    w->data = dst;
                    w->type = KERN_TYPE_F32;
                    w->row_bytes = (size_t)w->n_in * sizeof(float);
                }
                at += nv;
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

/* The matrices' bytes (the classifier's and every layer's); *ret_active: those one token
 * reads, n_expert_used of each experts' stack. */
static uint64_t weight_bytes_per_token(const struct engine_model *m, uint64_t *ret_active) {
    uint64_t n = (uint64_t)m->output.row_bytes * (uint64_t)m->output.n_out, idle = 0;
    for (uint32_t il = 0; il < m->hp.n_layer; il++) {
        const struct engine_layer *l = &m->layers[il];
        const struct engine_weight *ws[] = {
            &l->wq,        &l->wk,       &l->wv,        &l->wo,         &l->w_gate,
            &l->w_up,      &l->w_down,   &l->ssm_qkv,   &l->ssm_z,      &l->ssm_out,
            &l->ssm_alpha, &l->ssm_beta, &l->ssm_ba,    &l->moe_router, &l->exp_gate,
            &l->exp_up,
            &l->exp_down,  &l->sh_gate,  &l->sh_up,     &l->sh_down};
        for (size_t i = 0; i < ARRAY_SIZE(ws); i++) {
            const uint64_t one = (uint64_t)ws[i]->row_bytes * (uint64_t)ws[i]->n_out;
            n += one * (uint64_t)MAX(ws[i]->n_expert, 1);
            if (ws[i]->n_expert > 0)
                idle += one * (uint64_t)(ws[i]->n_expert - m->hp.n_expert_used);
        }
    }
    *ret_active = n - idle;
    return n;
}

void engine_model_free(struct engine_model *m) {
    if (!m) return;
    free(m->layers);
    free(m->vec_arena);
    free(m->relayout);
    gguf_close(m->file);
    free(m);
}

/* The architecture, hparams and tensors of m->file into m: everything the loader checks,
 * without reading tensor data. */
static int model_bind(struct engine_model *m, struct err_detail *d) {
    const struct gguf_file *f = m->file;
    int r;
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
        if (gguf_str_eq(arch, engine_arch_rows[a].name)) r = a;
    if (r < 0) {
        err_set(d, r, "key 'general.architecture' at offset %llu: unknown architecture '%.*s'",
                (unsigned long long)kv->offset, (int)MIN(arch.len, 64), arch.ptr);
        goto fail;
    }
    m->arch = (enum engine_arch)r;
    m->arch_name = engine_arch_rows[m->arch].name;

    if ((r = hparams_load(f, m->arch, &m->hp, d)) < 0) goto fail;
    m->layers = calloc_array(m->hp.n_layer, sizeof *m->layers);
    if (!m->layers) {
        r = -ENOMEM;
        goto fail;
    }
    r = tensors_bind(m, d);
fail:
    return r;
}

int engine_model_check(const struct gguf_file *f, struct engine_model_facts *ret,
                       struct err_detail *d) {
    struct engine_model *m = calloc(1, sizeof *m);
    if (!m) return -ENOMEM;
    m->file = (struct gguf_file *)f; /* read only; not closed below */
    int r = model_bind(m, d);
    if (r >= 0 && ret)
        *ret = (struct engine_model_facts){
            .arch = m->arch, .arch_name = m->arch_name, .n_ctx_train = m->hp.n_ctx_train,
            .n_layer = m->hp.n_layer, .n_embd = m->hp.n_embd, .n_head = m->hp.n_head,
            .n_head_kv = m->hp.n_head_kv, .head_dim_k = m->hp.head_dim_k,
            .head_dim_v = m->hp.head_dim_v, .n_vocab = m->hp.n_vocab,
            .embedding = m->hp.embedding, .pooling = m->hp.pooling,
            .n_embd_out = m->hp.n_embd_out,
        };
    m->file = NULL;
    engine_model_free(m);
    return r;
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
    if (gguf_n_tensors(f) && !gguf_tensor_at(f, 0)->data) { /* gguf_open_meta's: no data */
        r = err_set(d, ERR_INVALID, "the file was opened without its tensor data");
        goto fail;
    }
    if ((r = model_bind(m, d)) < 0) goto fail;
    if ((r = vectors_convert(m)) < 0 || (r = dn_relayout(m)) < 0) goto fail;
    m->weight_bytes = weight_bytes_per_token(m, &m->active_bytes);
    if (params && params->fingerprint)
        m->fingerprint = *params->fingerprint;
    else if (!gguf_copy_hash(f, &m->fingerprint)) /* a copy was hashed as it was read */
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
    const bool copy = params && params->private_copy;
    int r = copy ? gguf_open_copy(path, &f, d) : gguf_open(path, &f, d);
    if (r < 0) return r;
    if ((r = engine_model_load_gguf(f, params, ret, d)) < 0) return r;
    (*ret)->own_copy = copy;
    return r;
}
