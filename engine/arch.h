/* arch — what the engine knows of each architecture, as data: the arch rows (name, RoPE
 * kind) and the tensor specs, one row per weight of the model (global) or of a layer.
 *
 * A spec says where the weight lives (its struct engine_weight in struct engine_model or
 * struct engine_layer), how the loader checks it (kind, shape in symbolic dimensions,
 * whether each arch requires it), and how a tensor split cuts it across devices (split):
 * engine/model.c binds a file to these rows, engine/device.c slices every weight from its
 * split column, so a new weight is one row here, not a line in every file that handles
 * weights. */
#pragma once

#include "engine/model.h"

#include <stdbool.h>
#include <stddef.h>

/* Where an arch's sliding-window layers are (notes/gemma.md §A.4, §B.3). */
enum swa_layout {
    SWA_NONE,      /* no SWA layer */
    SWA_PERIOD,    /* sliding_window_pattern P (default 6): layer il is SWA iff il mod P < P - 1 */
    SWA_PER_LAYER, /* sliding_window_pattern: one flag per layer; sliding_window required */
};

/* How the q·k scale is set when the file does not say. */
enum attn_scale_rule {
    ATTN_SCALE_HEAD,   /* 1/sqrt(head_dim_k), applied in the attention (attn_scale 0) */
    ATTN_SCALE_GEMMA3, /* 1/sqrt(head_dim_k), 1/sqrt(n_embd / n_head) for the 62-layer 27B */
    ATTN_SCALE_ONE,    /* 1: the Q/K norms set it (gemma4) */
};

/* Symbolic tensor dimensions, resolved from the hparams (per layer where layers differ). */
enum spec_dim {
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
    DIM_PLE,      /* n_embd_per_layer */
    DIM_PLE_ALL,  /* n_layer * n_embd_per_layer */
    DIM_CTX,      /* n_ctx_train: the rows of a position table */
    DIM_TYPES,    /* n_token_types */
    DIM_DENSE,    /* n_embd_dense */
    DIM_EMBD_OUT, /* n_embd_out */
    DIM_QG,       /* attn_q's rows: n_head * (head_dim_k + head_dim_v) with the output
                   * gate (attn_gate), else DIM_Q */
    DIM_SSM_KERNEL, /* K: the conv's taps */
    DIM_SSM_CONV,   /* 2·H_k·d_k + H_v·d_v: the conv's channels (q | k | v) */
    DIM_SSM_INNER,  /* H_v·d_v */
    DIM_SSM_HEADS,  /* H_v */
    DIM_SSM_HEAD_V, /* d_v */
    DIM_EXPERTS,    /* n_expert: the matrices of an experts' stack (ne[2]) */
    DIM_FF_EXP,     /* n_ff_exp: an expert's hidden units */
    DIM_FF_SHEXP,   /* n_ff_shexp: the shared expert's */
    DIM_SSM_QKVZ,   /* 2·H_k·d_k + 2·H_v·d_v: qwen3next's ssm_in (q, k, v and z) */
    DIM_SSM_BA,     /* 2·H_v: qwen3next's ssm_ba (β and α) */
    DIM_HEADS,      /* n_head: gpt-oss's attention sinks */
    DIM_COUNT
};

enum spec_use {
    USE_NO,
    USE_REQ,
    USE_OPT,
    USE_OWN, /* required in a layer that owns KV; may be present (unused) in a shared one */
    USE_PLE, /* required with per-layer embeddings (n_embd_per_layer > 0), else absent */
};

enum spec_kind {
    KIND_VEC,    /* 1-D, converted to f32 at load */
    KIND_MATMUL, /* a matrix kern_matmul multiplies by (its type needs vec_dot) */
    KIND_ROWS,   /* a matrix read row by row (the embedding: its type needs to_f32) */
    KIND_CONV,   /* a small matrix converted to f32 at load and stored transposed
                  * (ssm_conv1d: (n_out, n_in) in the file, (n_in, n_out) in memory) */
};

/* Which layers of a hybrid model a spec belongs to (a model without recurrent layers: all). */
enum spec_layers {
    SPEC_ANY_LAYER,  /* every layer */
    SPEC_ATTN_LAYER, /* layers whose mixer is an attention (absent in recurrent layers) */
    SPEC_REC_LAYER,  /* recurrent (Gated DeltaNet) layers only */
    SPEC_DENSE_FFN,  /* layers whose FFN is dense (absent in a mixture-of-experts layer) */
    SPEC_MOE_FFN,    /* mixture-of-experts layers only */
};

/* How a tensor split over devices cuts a weight (engine/device.h). The attention is cut
 * by KV heads (a device's `n_kv` of them and their GQA groups of query heads), the FFN by
 * hidden units, the classifier by vocabulary rows: *_ROWS specs are views of the device's
 * rows (a 1-D spec: its values), *_COLS specs copies of its input columns, whose products
 * the devices sum. */
enum spec_split {
    SPLIT_HOST,       /* read by the host's layer loop only (norms around the blocks) */
    SPLIT_ALL,        /* whole on every device (per-head norms) */
    SPLIT_Q_ROWS,     /* the query heads: group × head_dim_k rows a KV head */
    SPLIT_K_ROWS,     /* the KV heads: head_dim_k rows each */
    SPLIT_V_ROWS,     /* the KV heads: head_dim_v rows each */
    SPLIT_O_COLS,     /* the query heads' columns: group × head_dim_v a KV head */
    SPLIT_FF_ROWS,    /* the hidden units: a row each */
    SPLIT_FF_COLS,    /* the hidden units: a column each */
    SPLIT_VOCAB_ROWS, /* the classifier's rows */
    /* experts: every expert cut alike by its hidden units (each device the same rows of
     * every expert: a token's experts cost each device its share, whichever they are) */
    SPLIT_EXP_ROWS,   /* an expert's hidden units: a row each, in every expert */
    SPLIT_EXP_COLS,   /* likewise a column each */
    SPLIT_SH_ROWS,    /* the shared expert's hidden units: a row each */
    SPLIT_SH_COLS,    /* likewise a column each */
    /* Gated DeltaNet layers, cut by key heads, each with the value heads that read it
     * (engine/device.h): */
    SPLIT_DN_CHAN,    /* the conv channels (q, k of its key heads, v of its value heads):
                       * rows of attn_qkv, columns of the conv (stored tap-major) */
    SPLIT_DN_V_ROWS,  /* its value heads: n_out / H_v rows (or values) each */
    SPLIT_DN_K_ROWS,  /* its key heads: n_out / H_k rows each (ssm_ba, grouped per key head) */
    SPLIT_DN_O_COLS,  /* its value heads' columns of ssm_out: d_v each */
};

/* What a weight is for beyond the plain recipe. A spec names its feature; each arch row says
 * how it uses each feature (enum spec_use; zero: the arch has no such tensor), so a new arch
 * is a row, not a column in every spec. */
enum spec_feature {
    FEAT_BASE,        /* the recipe every arch has */
    FEAT_PRE_NORMS,   /* norms of the blocks' inputs and the final norm (pre-norm archs) */
    /* attn_qkv: Q, K and V rows in one matrix (nomic-bert); an arch that uses it binds
     * the specs of attn_q, attn_k and attn_v (their part) to its rows, with this use */
    FEAT_QKV_FUSED,
    FEAT_GATE,        /* ffn_gate: absent in a non-gated FFN (bert) */
    FEAT_OUTPUT,      /* output.weight: absent = tied to token_embd */
    FEAT_K,           /* attn_k: gemma4's shared-KV layers may lack it */
    FEAT_V,           /* attn_v: gemma4 takes V from K where it is absent */
    FEAT_QKV_BIAS,    /* biases of Q, K and V */
    FEAT_O_BIAS,      /* bias of the attention output */
    FEAT_Q_NORM,      /* per-head RMSNorm of the queries */
    FEAT_K_NORM,      /* per-head RMSNorm of the keys */
    FEAT_POST_NORMS,  /* norms of the attention and FFN outputs */
    FEAT_ROPE_FREQS,  /* rope_freqs.weight */
    FEAT_PLE,         /* gemma4's per-layer inputs */
    FEAT_LAYER_SCALE, /* a layer's output scale */
    FEAT_RESID_NORMS, /* bert's LayerNorms of the residual stream after each block */
    FEAT_FFN_BIAS,    /* biases of the FFN's up and down projections */
    FEAT_EMBD_NORM,   /* the LayerNorm of the embeddings */
    FEAT_TOKEN_TYPES, /* token_types: row 0 added to every embedding */
    FEAT_POS_EMBD,    /* position_embd: learned absolute positions */
    FEAT_DENSE,       /* dense_2, dense_3: projections of the pooled embedding */
    FEAT_DELTANET,    /* the Gated DeltaNet layers' tensors (notes/hybrid.md §A.3) */
    FEAT_DN_QKVZ,     /* their attn_qkv and attn_gate (qwen3next: or a legacy ssm_in) */
    FEAT_DN_AB,       /* their ssm_alpha and ssm_beta (qwen35) */
    FEAT_DN_BA,       /* qwen3next's fused ssm_ba instead */
    FEAT_DN_IN,       /* qwen3next's legacy fused ssm_in (q, k, v, z grouped per key head) */
    FEAT_MOE,         /* a mixture-of-experts FFN: the router and the experts' stacks */
    FEAT_SHEXP,       /* the shared expert and its sigmoid gate (qwen35moe) */
    FEAT_SINKS,       /* attn_sinks: a logit per query head in the softmax's denominator */
    FEAT_MOE_BIAS,    /* biases of the router and of every expert's gate, up and down */
    FEAT_MOE_NORMS,   /* gemma4's router input scale and its FFN's extra norms */
    FEAT_EXP_SCALE,   /* a per-expert output scale (ffn_down_exps.scale) */
    FEAT_COUNT
};

/* An architecture's row: what it is beyond its tensors. Every field's zero is the plain
 * llama recipe. */
struct arch_desc {
    const char *name;
    enum engine_rope_kind rope_kind;
    enum swa_layout swa;
    uint32_t swa_period; /* SWA_PERIOD without the key: this period (0: 6, gemma's) */
    /* SWA layers use the global layers' RoPE (scaling, YaRN; their base unless
     * rope.freq_base_swa says otherwise), not gemma's plain RoPE of base 10000 */
    bool swa_rope_global;
    bool swa_own_dims; /* SWA layers have their own key/value length and RoPE dims */
    enum attn_scale_rule attn_scale;
    bool gemma_io;         /* embeddings × sqrt(n_embd), GeGLU, final_logit_softcapping read */
    float softcap_default; /* final_logit_softcapping when the key is absent */
    bool v_norm;           /* V heads RMS-normed without a weight */
    bool per_layer_inputs; /* embedding_length_per_layer_input required */
    /* rope_freqs.weight: the global layers' proportional RoPE, required when the model
     * has a global layer (else: llama3's frequency divisors, optional) */
    bool rope_freqs_global;
    const char *moe_refusal; /* why its expert_count > 0 files are refused, NULL: generic */
    /* mixture of experts (notes/hybrid.md §A.7, §C): `on`: every layer's FFN is one
     * (expert_count > 0 required); the router's gating; the selected weights renormalised
     * to sum 1 (norm_w); expert_weights_scale read (scale_key: llama.cpp's qwen archs do
     * not read it). Not on: a file with experts is refused (moe_refusal's reason). */
    struct {
        bool on;
        /* gemma4: expert_count > 0 optional; its files' FFNs are then the dense one beside
         * the experts (ENGINE_FFN_MOE_DENSE) */
        bool beside_dense;
        enum engine_moe_gating gating;
        bool norm_w, scale_key;
    } moe;
    /* embedding models: the arch computes embeddings only (no classifier); its pooling
     * when the file has no pooling_type; attention bidirectional (attention.causal read
     * where causal_key, else forced) */
    bool embedding;
    bool no_rope; /* learned absolute positions instead of RoPE (n_rot 0) */
    enum engine_pooling pooling_default;
    bool bidirectional, causal_key;
    enum engine_norm_kind norm;
    enum engine_ffn_act ffn_act; /* the FFN's activation (gemma_io: GELU) */
    bool ffn_plain;              /* non-gated FFN (ENGINE_FFN_DENSE) */
    /* hybrids (notes/hybrid.md §A): the attention's query rows carry an output gate; some
     * layers are Gated DeltaNet (attention.recurrent_layers, else full_attention_interval);
     * MTP layers are counted in block_count (nextn_predict_layers) and skipped; vision
     * tensors (v.*, mm.*) are skipped */
    bool attn_gate, recurrent, mtp, skip_vision;
    enum kern_dn_head_map dn_head_map; /* its V-head order (notes/hybrid.md §A.4) */
    /* tensors the arch names its own way: the spec's name, the file's (e.g. qwen35's
     * pre-FFN norm is post_attention_norm.weight) */
    struct {
        const char *spec, *file;
    } rename[2];
    uint8_t use[FEAT_COUNT]; /* enum spec_use of each feature's tensors */
};

extern const struct arch_desc engine_arch_rows[ENGINE_ARCH_COUNT];

/* A spec that may be a part of a fused tensor: where the arch uses FEAT_QKV_FUSED, its
 * rows of attn_qkv.weight, whose ne[1] is DIM_Q + DIM_K + DIM_V (Q, K, V in this order),
 * instead of a tensor of its own name. */
enum spec_part {
    PART_WHOLE,
    PART_QKV_Q, /* rows [0, DIM_Q) */
    PART_QKV_K, /* rows [DIM_Q, DIM_Q + DIM_K) */
    PART_QKV_V, /* rows [DIM_Q + DIM_K, DIM_Q + DIM_K + DIM_V) */
    /* an experts' gate or up stack, which a file may fuse into one ffn_gate_up_exps
     * (ne[1] = 2 · DIM_FF_EXP: each expert's gate rows, then its up rows; llama.cpp's
     * create_tensor_gate_up_exps): the spec's stack is then a view of its half of every
     * expert, expert_bytes the fused expert's */
    PART_GATE_UP_GATE,
    PART_GATE_UP_UP,
};
#define SPEC_QKV_FUSED_NAME "attn_qkv.weight"
#define SPEC_GATE_UP_FUSED_NAME "ffn_gate_up_exps.weight"

struct tensor_spec {
    const char *name; /* global name, or the suffix after "blk.N." */
    size_t offset;    /* of its struct engine_weight in struct engine_model / engine_layer */
    enum spec_kind kind;
    enum spec_dim ne0, ne1; /* ne[0] = n_in (row length), ne[1] = n_out (of its part) */
    enum spec_feature feature;
    enum spec_split split;
    enum spec_part part; /* its part of attn_qkv where the arch fuses them */
    enum spec_layers layers; /* which layers of a hybrid have it */
    enum spec_dim ne2;       /* ne[2]: DIM_EXPERTS for an experts' stack, else DIM_ONE (0) */
};

extern const struct tensor_spec engine_global_specs[];
extern const size_t engine_n_global_specs;
extern const struct tensor_spec engine_layer_specs[];
extern const size_t engine_n_layer_specs;

/* The weight a spec names in a struct engine_model (global spec) or engine_layer. */
static inline struct engine_weight *spec_field(void *owner, const struct tensor_spec *s) {
    return (struct engine_weight *)((char *)owner + s->offset);
}
static inline const struct engine_weight *spec_field_const(const void *owner,
                                                           const struct tensor_spec *s) {
    return (const struct engine_weight *)((const char *)owner + s->offset);
}
