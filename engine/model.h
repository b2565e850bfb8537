/* model — a transformer's hyperparameters and weights, read from a GGUF file.
 *
 * engine_model_load() opens the file (mmap, read-only, or a private copy), looks the
 * architecture up in the arch rows (engine/arch.c: names, tensor specs), reads the hparams
 * with the defaults llama.cpp applies, and validates every tensor the specs name
 * (presence, type, shape) and that the file holds no tensor the specs do not use. Bad files get a specific ERR_MODEL_* code and a detail message
 * naming the key or the tensor; nothing aborts.
 *
 * Weights are views into the mapping (or the copy), except 1-D tensors (norm weights,
 * biases, RoPE frequency factors), which are converted to f32 into one arena owned by
 * the model.
 * A loaded model is immutable: any number of contexts and threads may read it until
 * engine_model_free().
 *
 * Identity: the fingerprint is XXH3-128 over the file bytes (DESIGN.md 3.1). */
#pragma once

#include "base/base.h"
#include "engine/gguf.h"
#include "kernels/deltanet.h"
#include "kernels/types.h"

#define ENGINE_MAX_LAYERS 512 /* as llama.cpp's LLAMA_MAX_LAYERS */
#define ENGINE_MAX_EXPERTS 512 /* as llama.cpp's LLAMA_MAX_EXPERTS */

enum engine_arch {
    ENGINE_ARCH_LLAMA,
    ENGINE_ARCH_QWEN2,
    ENGINE_ARCH_QWEN3,
    ENGINE_ARCH_GEMMA3,
    ENGINE_ARCH_GEMMA4,
    ENGINE_ARCH_BERT,
    ENGINE_ARCH_NOMIC_BERT,
    ENGINE_ARCH_GEMMA_EMBEDDING,
    ENGINE_ARCH_QWEN35, /* Qwen3.5/3.6 dense: Gated DeltaNet + gated attention (notes/hybrid.md) */
    ENGINE_ARCH_QWEN3MOE,  /* Qwen3-30B-A3B: qwen3's attention, MoE FFN (notes/hybrid.md §C.2) */
    ENGINE_ARCH_QWEN35MOE, /* Qwen3.5/3.6 MoE: qwen35's trunk, MoE FFN + shared expert (§A.7) */
    ENGINE_ARCH_QWEN3NEXT, /* Qwen3-Next: qwen35moe's recipe, grouped V heads, fused ssm_ba */
    ENGINE_ARCH_GPT_OSS,   /* gpt-oss: sinks, alternating SWA, biased MoE (notes/hybrid.md §C.3) */
    ENGINE_ARCH_COUNT
};

/* How RoPE pairs the values of a head. */
enum engine_rope_kind {
    ENGINE_ROPE_NORM, /* adjacent pairs (x[2i], x[2i+1]): llama */
    ENGINE_ROPE_NEOX, /* halves (x[i], x[i + n_rot/2]): qwen2, qwen3, gemma3, gemma4 */
    ENGINE_ROPE_KIND_COUNT
};

enum engine_rope_scaling {
    ENGINE_ROPE_SCALING_NONE,
    ENGINE_ROPE_SCALING_LINEAR, /* positions divided by the factor */
    ENGINE_ROPE_SCALING_YARN,
    ENGINE_ROPE_SCALING_LLAMA3, /* per-frequency divisors from the rope_freqs.weight tensor */
    ENGINE_ROPE_SCALING_COUNT
};

/* The feed-forward activation of gate · x (the up branch is not activated), or of
 * up · x + b in a non-gated FFN (bert). */
enum engine_ffn_act {
    ENGINE_FFN_SILU, /* SwiGLU: llama, qwen, nomic-bert */
    ENGINE_FFN_GELU, /* GeGLU with the tanh GELU: gemma; bert's FFN */
    /* gpt-oss's experts (ggml's SWIGLU_OAI): g = min(gate, 7), u = clamp(up, -7, 7),
     * g · sigmoid(1.702 g) · (u + 1) */
    ENGINE_FFN_SWIGLU_OAI,
};

/* The norm of the arch's residual stream (its blocks' inputs or outputs, the embeddings,
 * the final norm); per-head Q/K norms are RMSNorm whatever this says. */
enum engine_norm_kind {
    ENGINE_NORM_RMS,   /* x / sqrt(mean(x²) + eps) · w */
    ENGINE_NORM_LAYER, /* (x - mean) / sqrt(var + eps) · w + b: the BERT family */
};

/* How an embedding model pools the final hidden states of a sequence into one vector
 * (<arch>.pooling_type; the values are llama.cpp's). */
enum engine_pooling {
    ENGINE_POOLING_NONE, /* no pooled vector: one per token */
    ENGINE_POOLING_MEAN, /* the mean over the sequence's tokens */
    ENGINE_POOLING_CLS,  /* the token at the sequence's lowest position ([CLS]) */
    ENGINE_POOLING_LAST, /* the token at its highest position (the appended EOS) */
    ENGINE_POOLING_COUNT
};

/* The kinds of layer the engine runs: a token mixer (what reads the other positions) and a
 * feed-forward block, each computed once per layer at load; engine/forward.c runs a layer
 * through its kinds' rows, so a new kind is a row and its function, not a branch. */
enum engine_mixer_kind {
    ENGINE_MIXER_ATTENTION,        /* attention over all earlier positions, its own KV */
    ENGINE_MIXER_ATTENTION_SWA,    /* over the last swa_window positions, its own KV */
    ENGINE_MIXER_ATTENTION_SHARED, /* over the KV of layer kv_source (gemma4 shared KV) */
    /* bidirectional (embedding models): over every position of the token's sequence in
     * the batch, earlier and later; the SWA one within swa_window / 2 on both sides */
    ENGINE_MIXER_ATTENTION_BIDIR,
    ENGINE_MIXER_ATTENTION_BIDIR_SWA,
    /* a recurrent layer (notes/hybrid.md §A.6): causal conv, the gated delta rule over a
     * per-sequence state (engine/kv-cache.h kv_rstate), gated RMSNorm; owns no KV */
    ENGINE_MIXER_GATED_DELTANET,
    ENGINE_MIXER_KIND_COUNT
};

enum engine_ffn_kind {
    ENGINE_FFN_DENSE_GATED, /* W_down · (act(W_gate · x) ⊙ (W_up · x)) */
    ENGINE_FFN_DENSE,       /* W_down · act(W_up · x + b_up): bert (b_down after the sum) */
    /* mixture of experts (notes/hybrid.md §A.7, §C): a router picks n_expert_used of
     * n_expert gated FFNs per token (engine_moe_gating), their outputs weighted and summed;
     * plus a shared expert where the layer has one */
    ENGINE_FFN_MOE,
    /* gemma4 26B-A4B (notes/hybrid.md §C.4): the dense gated FFN beside routed experts,
     * each with its own norms, summed and normed as one FFN output */
    ENGINE_FFN_MOE_DENSE,
    ENGINE_FFN_KIND_COUNT
};

/* How a MoE router's logits become each token's experts and their weights
 * (llama.cpp's expert gating functions, notes/hybrid.md §A.7, §C.3). */
enum engine_moe_gating {
    /* softmax over all experts, the top n_used probabilities (qwen3moe, qwen35moe, gemma4;
     * renormalised to sum 1 where moe_norm_w) */
    ENGINE_MOE_SOFTMAX,
    /* the top n_used logits, softmax over those only (gpt-oss) */
    ENGINE_MOE_SOFTMAX_TOPK,
    ENGINE_MOE_GATING_COUNT
};

/* What a layer is, where it differs from other layers (notes/gemma.md): gemma layers are
 * sliding-window (SWA) or global, and gemma4 gives each kind its own head size, KV head
 * count and RoPE; the FFN width may vary per layer. Filled for every arch. */
struct engine_layer_hparams {
    bool swa;            /* queries see only the last swa_window positions */
    uint32_t n_head_kv;
    uint32_t head_dim_k, head_dim_v;
    uint32_t n_ff;
    uint32_t n_rot;      /* RoPE dims of this layer's kind */
    /* kv_source(il): the layer whose KV this one reads (il itself when it owns KV); for a
     * shared-KV layer the last owning layer of the same kind, checked at load */
    int32_t kv_source;
    enum engine_mixer_kind mixer;
    enum engine_ffn_kind ffn;
};

struct engine_hparams {
    uint32_t n_ctx_train; /* <arch>.context_length (not trusted for limits) */
    uint32_t n_embd;
    uint32_t n_layer;
    uint32_t n_head;
    uint32_t n_head_kv;  /* default n_head */
    uint32_t head_dim_k; /* <arch>.attention.key_length, default n_embd / n_head */
    uint32_t head_dim_v; /* <arch>.attention.value_length, default n_embd / n_head */
    uint32_t n_ff;
    uint32_t n_vocab; /* rows of token_embd.weight */
    uint32_t n_rot;   /* <arch>.rope.dimension_count, default head_dim_k; even, <= head_dim_k */
    /* the norm's epsilon: <arch>.attention.layer_norm_rms_epsilon, or
     * layer_norm_epsilon where the arch's norm is LayerNorm */
    float rms_eps;
    enum engine_norm_kind norm;

    enum engine_rope_kind rope_kind;
    enum engine_rope_scaling rope_scaling;
    float rope_freq_base;     /* default 10000 */
    float rope_freq_scale;    /* 1 / scaling factor; 1 without scaling */
    uint32_t rope_n_ctx_orig; /* yarn: original training context, default n_ctx_train */
    float yarn_ext_factor;    /* 1 with yarn, else 0 */
    float yarn_attn_factor;   /* default 1 */
    float yarn_beta_fast;     /* default 32 */
    float yarn_beta_slow;     /* default 1 */

    bool tied_embeddings; /* no output.weight: the classifier is token_embd.weight */
    /* <arch>.attention.shared_kv_layers (default 0, < n_layer): the last this many layers
     * own no KV and read the KV of the last layer that does (engine/kv-cache.h) */
    uint32_t n_layer_kv_shared;

    /* gemma (notes/gemma.md §A, §B.3); the other archs keep the neutral values */
    uint32_t swa_window;       /* <arch>.attention.sliding_window, 0 = no SWA layer */
    float rope_freq_base_swa;  /* RoPE base of SWA layers (their scale is 1) */
    bool swa_rope_global;      /* gpt-oss: SWA layers scale their RoPE as the global ones */
    float attn_scale;          /* q·k multiplier; 0 = 1/sqrt(the layer's head_dim_k) */
    float final_softcap;       /* logits = c·tanh(logits/c) when c > 0 */
    bool embd_scale;           /* token embeddings × sqrt(n_embd) */
    bool v_norm;               /* V heads RMS-normed without a weight (gemma4) */
    enum engine_ffn_act ffn_act;
    uint32_t n_embd_per_layer; /* gemma4 per-layer embeddings (PLE) width, 0 = none */

    /* embedding models (bert, nomic-bert, gemma-embedding, any file with a pooling type) */
    bool embedding;            /* computes embeddings, not text (engine_model_is_embedding) */
    bool causal;               /* attention sees earlier positions only (false: bidirectional) */
    enum engine_pooling pooling; /* <arch>.pooling_type, default the arch's */
    uint32_t n_token_types;    /* rows of token_types.weight (tokenizer.ggml.token_type_count) */
    uint32_t n_embd_dense;     /* <arch>.dense_2_feat_out: dense_2's output width */
    uint32_t n_embd_out;       /* the width of an embedding: after the dense projections */
    /* qwen35: attn_q holds each head's query then its output gate (hd_k + hd_v rows a
     * head); the attention output is multiplied by sigmoid(gate) */
    bool attn_gate;
    /* MTP (NextN) layers at the end of the file's blocks: not run, their tensors skipped
     * (<arch>.nextn_predict_layers; n_layer = block_count minus these) */
    uint32_t n_layer_mtp;
    /* Gated DeltaNet layers (notes/hybrid.md §A.2), 0 without: <arch>.ssm.conv_kernel K,
     * group_count H_k, time_step_rank H_v, state_size d_k, inner_size / H_v = d_v;
     * value head h reads key head ssm_head_map says (§A.4: h mod H_k in the converter's
     * tiled order of qwen35, h / (H_v / H_k) in qwen3next's grouped one) */
    uint32_t n_layer_rec;
    uint32_t ssm_n_kernel, ssm_n_head_k, ssm_n_head_v, ssm_head_dim_k, ssm_head_dim_v;
    enum kern_dn_head_map ssm_head_map;
    /* mixture of experts (ENGINE_FFN_MOE layers; 0 experts: none): <arch>.expert_count,
     * expert_used_count, expert_feed_forward_length (default n_ff / n_expert_used, as
     * llama.cpp), expert_shared_feed_forward_length (default n_ff; the shared expert's
     * hidden units where the layer has one); the gating, whether the selected weights are
     * renormalised to sum 1 and their scale (0: none) */
    uint32_t n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
    enum engine_moe_gating moe_gating;
    bool moe_norm_w;
    float moe_w_scale;
    /* the largest per-layer values, for sizing scratch: */
    uint32_t max_n_ff, max_head_dim_k, max_head_dim_v, max_n_embd_k, max_n_embd_v, max_n_rot;
    struct engine_layer_hparams layer[ENGINE_MAX_LAYERS];
};

/* A weight: n_out rows of n_in values of `type` (kern_matmul's layout; GGUF ne[0] = n_in,
 * ne[1] = n_out). A 1-D tensor has n_out = 1 and is always f32 here. data == NULL: absent
 * (an optional tensor the file does not have).
 * A stack of experts' matrices (GGUF ne[2] = n_expert > 0): expert e's n_out rows start
 * at data + e · expert_bytes, a slice of the stack read in place (engine_weight_expert). */
struct engine_weight {
    const void *data;
    enum kern_type type;
    enum kern_layout layout; /* the file's rows, or a device's repacked copy (device.c) */
    int64_t n_in, n_out;
    size_t row_bytes;
    int64_t n_expert;    /* 0: one matrix */
    size_t expert_bytes; /* from one expert's rows to the next's */
};

/* Expert e's matrix of a stack w: a view, valid as long as w's data. */
static inline struct engine_weight engine_weight_expert(const struct engine_weight *w, int64_t e) {
    struct engine_weight v = *w;
    v.data = (const char *)w->data + (size_t)e * w->expert_bytes;
    v.n_expert = 0;
    v.expert_bytes = 0;
    return v;
}

struct engine_layer {
    struct engine_weight attn_norm;        /* (n_embd) */
    struct engine_weight wq, wk, wv, wo;   /* (n_head*hd_k, n_embd) (n_head_kv*hd_k, n_embd)
                                            * (n_head_kv*hd_v, n_embd) (n_embd, n_head*hd_v) */
    struct engine_weight bq, bk, bv, bo;   /* biases of the same rows, optional */
    struct engine_weight q_norm, k_norm;   /* (hd_k): qwen3's / gemma's per-head RMSNorm */
    struct engine_weight post_attn_norm;   /* (n_embd) gemma: norm of the attention output */
    struct engine_weight ffn_norm;         /* (n_embd) */
    struct engine_weight w_gate, w_up;     /* (n_ff, n_embd) */
    struct engine_weight w_down;           /* (n_embd, n_ff) */
    struct engine_weight post_ffn_norm;    /* (n_embd) gemma: norm of the FFN output */
    struct engine_weight pl_gate;          /* (n_embd_per_layer, n_embd) gemma4 PLE gate */
    struct engine_weight pl_proj;          /* (n_embd, n_embd_per_layer) */
    struct engine_weight pl_post_norm;     /* (n_embd) */
    struct engine_weight out_scale;        /* (1) gemma4: the layer's output × this */
    /* bert: the LayerNorms of the residual stream after each block (post-norm), with
     * biases, and the FFN's biases */
    struct engine_weight attn_out_norm, attn_out_norm_b; /* (n_embd) attn_output_norm */
    struct engine_weight layer_out_norm, layer_out_norm_b; /* (n_embd) layer_output_norm */
    struct engine_weight b_up;             /* (n_ff) ffn_up.bias */
    struct engine_weight b_down;           /* (n_embd) ffn_down.bias */
    /* a Gated DeltaNet layer (notes/hybrid.md §A.3); conv_dim = 2·H_k·d_k + H_v·d_v */
    struct engine_weight ssm_qkv;          /* (conv_dim, n_embd) attn_qkv: q | k | v rows */
    struct engine_weight ssm_z;            /* (H_v·d_v, n_embd) attn_gate: the norm's gate */
    struct engine_weight ssm_alpha, ssm_beta; /* (H_v, n_embd) */
    /* (K, conv_dim) f32, stored tap-major at load (the file's (conv_dim, K) transposed,
     * kernels/deltanet.h kern_dn_conv) */
    struct engine_weight ssm_conv;
    struct engine_weight ssm_dt, ssm_a;    /* (H_v) dt bias; ssm_a = −exp(A_log) */
    struct engine_weight ssm_norm;         /* (d_v) shared by the heads */
    struct engine_weight ssm_out;          /* (n_embd, H_v·d_v) */
    /* qwen3next: β and α in one matrix, per key head its H_v / H_k β rows then as many α
     * rows (used instead of ssm_alpha and ssm_beta where present); a legacy file's
     * ssm_in, per key head [q, k, its value heads' v, their z] rows, which the loader
     * re-lays into ssm_qkv and ssm_z (engine_model.relayout) */
    struct engine_weight ssm_ba;           /* (2·H_v, n_embd) */
    struct engine_weight ssm_in;           /* (2·H_k·d_k + 2·H_v·d_v, n_embd) */
    /* a mixture-of-experts FFN (notes/hybrid.md §A.3, §C.1): the router, the experts'
     * stacks (n_expert matrices each), the shared expert and its gate (qwen35moe) */
    struct engine_weight moe_router;       /* (n_expert, n_embd) ffn_gate_inp */
    struct engine_weight exp_gate, exp_up; /* n_expert × (n_ff_exp, n_embd) */
    struct engine_weight exp_down;         /* n_expert × (n_embd, n_ff_exp) */
    struct engine_weight sh_gate_inp;      /* (n_embd) the shared expert's gate logit */
    struct engine_weight sh_gate, sh_up;   /* (n_ff_shexp, n_embd) */
    struct engine_weight sh_down;          /* (n_embd, n_ff_shexp) */
    /* gpt-oss (notes/hybrid.md §C.3): one sink logit per query head, in the softmax's
     * denominator only; the router's bias; each expert's gate, up and down biases,
     * (n_ff_exp, n_expert) / (n_embd, n_expert): expert x's at x · n_ff_exp / x · n_embd */
    struct engine_weight attn_sinks;       /* (n_head) */
    struct engine_weight moe_router_b;     /* (n_expert) ffn_gate_inp.bias */
    struct engine_weight exp_gate_b, exp_up_b, exp_down_b;
    /* gemma4 MoE (notes/hybrid.md §C.4): the router's input scale, the experts' input norm,
     * the dense and the experts' output norms, each expert's output scale (n_expert) */
    struct engine_weight moe_router_scale, pre_ffn_norm_2, post_ffn_norm_1, post_ffn_norm_2;
    struct engine_weight exp_down_scale;
};

struct engine_model {
    enum engine_arch arch;
    const char *arch_name; /* static */
    struct engine_hparams hp;
    struct hash128 fingerprint;

    struct engine_weight tok_embd;    /* (n_vocab, n_embd), any type with to_f32 */
    struct engine_weight output_norm; /* (n_embd) */
    struct engine_weight output;      /* (n_vocab, n_embd): output.weight or tok_embd */
    struct engine_weight rope_freqs;  /* (n_rot/2) divisors of each frequency, optional
                                       * (gemma4: of the global layers only) */
    struct engine_weight pl_tok_embd;   /* (n_vocab, n_layer × n_embd_per_layer) gemma4 PLE */
    struct engine_weight pl_model_proj; /* (n_layer × n_embd_per_layer, n_embd) */
    struct engine_weight pl_proj_norm;  /* (n_embd_per_layer) */
    /* embedding models: bert's added rows (token type 0, each position's), the LayerNorm of
     * the embeddings, gemma-embedding's projections of the pooled vector */
    struct engine_weight type_embd;     /* (n_token_types, n_embd) token_types */
    struct engine_weight pos_embd;      /* (n_ctx_train, n_embd) position_embd */
    struct engine_weight embd_norm, embd_norm_b; /* (n_embd) token_embd_norm */
    struct engine_weight dense_2;       /* (n_embd_dense, n_embd) */
    struct engine_weight dense_3;       /* (n_embd_out, n_embd_dense) */
    struct engine_layer *layers;      /* n_layer */

    struct gguf_file *file; /* owned; the weights point into its mapping */
    /* The weights are the model's own writable copy (private_copy): the first context of
     * one CPU device repacks them there, in place (engine/device.c), rather than beside
     * them, and sets repacked; later contexts must then be of one CPU device too. */
    bool own_copy, repacked;
    float *vec_arena;       /* owned: the f32 copies of 1-D tensors */
    void *relayout;         /* owned: the rows of ssm_in re-laid (qwen3next legacy files) */
    uint64_t weight_bytes;  /* bytes of all weights, for bandwidth estimates */
    /* bytes one token's decode reads: weight_bytes less the experts it does not use
     * (n_expert_used of n_expert); = weight_bytes without experts */
    uint64_t active_bytes;
};

struct engine_model_params {
    /* When non-NULL, the caller already knows the fingerprint of this file (remembered
     * per device, inode, size and mtime) and the load skips hashing the file. */
    const struct hash128 *fingerprint;
    /* Read the file into private memory (gguf_open_copy) instead of mapping it: the model
     * is then a snapshot that replacing, rewriting or truncating the file cannot change or
     * crash, and the fingerprint is that of the bytes the weights are. The daemon's choice;
     * tools map. */
    bool private_copy;
};

/* Opens, validates and loads the model at path. *ret is written on success only. */
int engine_model_load(const char *path, const struct engine_model_params *params,
                      struct engine_model **ret, struct err_detail *d);
/* Same over an open file; takes ownership of f (closed on failure too). */
int engine_model_load_gguf(struct gguf_file *f, const struct engine_model_params *params,
                           struct engine_model **ret, struct err_detail *d);
void engine_model_free(struct engine_model *m);

/* What engine_model_check() learns of a file. */
struct engine_model_facts {
    enum engine_arch arch;
    const char *arch_name; /* static */
    uint32_t n_ctx_train, n_layer, n_embd, n_head, n_head_kv, head_dim_k, head_dim_v, n_vocab;
    bool embedding;              /* an embedding model (engine_model_is_embedding) */
    enum engine_pooling pooling; /* its pooling */
    uint32_t n_embd_out;         /* the width of its embeddings */
};
/* Validates f as engine_model_load_gguf() does (architecture, hparams, each tensor's
 * presence, type and shape) without reading tensor data or keeping anything, so it also
 * takes a gguf_open_meta() file: for a caller that must know a file will load before it
 * makes room for it. f stays the caller's. *ret (may be NULL) on success only. */
int engine_model_check(const struct gguf_file *f, struct engine_model_facts *ret,
                       struct err_detail *d);

/* Embedding models (bert, nomic-bert, gemma-embedding, and any file whose
 * <arch>.pooling_type is set, e.g. Qwen3-Embedding) compute embeddings, not text: a
 * context for them is an embeddings context (engine_context_params.embeddings), and
 * only theirs is. */
static inline bool engine_model_is_embedding(const struct engine_model *m) {
    return m->hp.embedding;
}
/* How the model pools a sequence (ENGINE_POOLING_NONE: not at all). */
static inline enum engine_pooling engine_model_pooling(const struct engine_model *m) {
    return m->hp.pooling;
}
/* Floats of one embedding: n_embd, or the output width of the dense projections. */
static inline uint32_t engine_model_n_embd_out(const struct engine_model *m) {
    return m->hp.n_embd_out;
}
/* "none", "mean", "cls", "last" ("?" out of range). */
const char *engine_pooling_name(enum engine_pooling p);

/* The architecture id of a name ("llama"), < 0 (ERR_MODEL_ARCH) when unknown. */
int engine_arch_from_name(const char *name);
const char *engine_arch_name(enum engine_arch arch);

/* The file the model was loaded from (for the vocabulary and metadata); lives as long as
 * the model. */
static inline const struct gguf_file *engine_model_gguf(const struct engine_model *m) {
    return m->file;
}
