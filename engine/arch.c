/* arch — the arch rows and the tensor specs (see arch.h). */
#include "engine/arch.h"

#include <stddef.h>
#include <string.h>

/* ---- the arch rows ------------------------------------------------------------------- */

const struct arch_desc engine_arch_rows[ENGINE_ARCH_COUNT] = {
    [ENGINE_ARCH_LLAMA] = {.name = "llama",
                           .rope_kind = ENGINE_ROPE_NORM,
                           .use = {[FEAT_BASE] = USE_REQ, [FEAT_OUTPUT] = USE_OPT,
                                   [FEAT_PRE_NORMS] = USE_REQ,
                                   [FEAT_GATE] = USE_REQ,
                                   [FEAT_K] = USE_REQ, [FEAT_V] = USE_REQ,
                                   [FEAT_QKV_BIAS] = USE_OPT, [FEAT_O_BIAS] = USE_OPT,
                                   [FEAT_ROPE_FREQS] = USE_OPT}},
    [ENGINE_ARCH_QWEN2] = {.name = "qwen2",
                           .rope_kind = ENGINE_ROPE_NEOX,
                           .use = {[FEAT_BASE] = USE_REQ, [FEAT_OUTPUT] = USE_OPT,
                                   [FEAT_PRE_NORMS] = USE_REQ,
                                   [FEAT_GATE] = USE_REQ,
                                   [FEAT_K] = USE_REQ, [FEAT_V] = USE_REQ,
                                   [FEAT_QKV_BIAS] = USE_REQ}},
    [ENGINE_ARCH_QWEN3] = {.name = "qwen3",
                           .rope_kind = ENGINE_ROPE_NEOX,
                           .use = {[FEAT_BASE] = USE_REQ, [FEAT_OUTPUT] = USE_OPT,
                                   [FEAT_PRE_NORMS] = USE_REQ,
                                   [FEAT_GATE] = USE_REQ,
                                   [FEAT_K] = USE_REQ, [FEAT_V] = USE_REQ,
                                   [FEAT_Q_NORM] = USE_REQ, [FEAT_K_NORM] = USE_REQ}},
    [ENGINE_ARCH_GEMMA3] = {.name = "gemma3",
                            .rope_kind = ENGINE_ROPE_NEOX,
                            .swa = SWA_PERIOD,
                            .attn_scale = ATTN_SCALE_GEMMA3,
                            .gemma_io = true,
                            .use = {[FEAT_BASE] = USE_REQ, [FEAT_OUTPUT] = USE_OPT,
                                    [FEAT_PRE_NORMS] = USE_REQ,
                                    [FEAT_GATE] = USE_REQ,
                                    [FEAT_K] = USE_REQ, [FEAT_V] = USE_REQ,
                                    [FEAT_Q_NORM] = USE_REQ, [FEAT_K_NORM] = USE_REQ,
                                    [FEAT_POST_NORMS] = USE_REQ}},
    /* gemma3 has no soft-cap unless the key sets one; gemma4 keeps 30 when it is absent.
     * gemma4's shared-KV layers may lack attn_k and its norm, and a layer without attn_v
     * takes V from the raw K projection (K = V). */
    [ENGINE_ARCH_GEMMA4] = {.name = "gemma4",
                            .rope_kind = ENGINE_ROPE_NEOX,
                            .swa = SWA_PER_LAYER,
                            .swa_own_dims = true,
                            .attn_scale = ATTN_SCALE_ONE,
                            .gemma_io = true,
                            .softcap_default = 30.0f,
                            .v_norm = true,
                            .per_layer_inputs = true,
                            .rope_freqs_global = true,
                            /* 26B-A4B: the router and experts beside the dense MLP
                             * (notes/hybrid.md §C.4) */
                            .moe = {.beside_dense = true, .gating = ENGINE_MOE_SOFTMAX,
                                    .norm_w = true},
                            .use = {[FEAT_BASE] = USE_REQ, [FEAT_OUTPUT] = USE_OPT,
                                    [FEAT_PRE_NORMS] = USE_REQ,
                                    [FEAT_GATE] = USE_REQ,
                                    [FEAT_K] = USE_OWN, [FEAT_V] = USE_OPT,
                                    [FEAT_Q_NORM] = USE_REQ, [FEAT_K_NORM] = USE_OWN,
                                    [FEAT_POST_NORMS] = USE_REQ, [FEAT_ROPE_FREQS] = USE_OPT,
                                    [FEAT_PLE] = USE_PLE, [FEAT_LAYER_SCALE] = USE_OPT,
                                    [FEAT_MOE] = USE_REQ, [FEAT_MOE_NORMS] = USE_REQ,
                                    [FEAT_EXP_SCALE] = USE_OPT}},
    /* The embedding models (../shared/models/embed/README.md). bert: learned positions,
     * token type 0, LayerNorms after each block (post-norm) with biases everywhere, a GELU
     * FFN that is not gated, CLS pooling. */
    [ENGINE_ARCH_BERT] = {.name = "bert",
                          .embedding = true,
                          .no_rope = true,
                          .pooling_default = ENGINE_POOLING_CLS,
                          .bidirectional = true,
                          .causal_key = true,
                          .norm = ENGINE_NORM_LAYER,
                          .ffn_act = ENGINE_FFN_GELU,
                          .ffn_plain = true,
                          .use = {[FEAT_BASE] = USE_REQ, [FEAT_K] = USE_REQ,
                                  [FEAT_V] = USE_REQ, [FEAT_QKV_BIAS] = USE_REQ,
                                  [FEAT_O_BIAS] = USE_REQ, [FEAT_RESID_NORMS] = USE_REQ,
                                  [FEAT_FFN_BIAS] = USE_REQ, [FEAT_EMBD_NORM] = USE_REQ,
                                  [FEAT_TOKEN_TYPES] = USE_OPT, [FEAT_POS_EMBD] = USE_REQ}},
    /* nomic-bert: bert's post-norm recipe with RoPE instead of positions, a fused QKV
     * without biases and SwiGLU; mean pooling */
    [ENGINE_ARCH_NOMIC_BERT] = {.name = "nomic-bert",
                                .rope_kind = ENGINE_ROPE_NEOX,
                                .embedding = true,
                                .pooling_default = ENGINE_POOLING_MEAN,
                                .bidirectional = true,
                                .causal_key = true,
                                .norm = ENGINE_NORM_LAYER,
                                .use = {[FEAT_BASE] = USE_REQ, [FEAT_QKV_FUSED] = USE_REQ,
                                        [FEAT_GATE] = USE_REQ, [FEAT_RESID_NORMS] = USE_REQ,
                                        [FEAT_EMBD_NORM] = USE_REQ,
                                        [FEAT_TOKEN_TYPES] = USE_OPT}},
    /* EmbeddingGemma: gemma3's layers with bidirectional attention (a symmetric window on
     * its SWA layers), mean pooling, then the dense projections */
    [ENGINE_ARCH_GEMMA_EMBEDDING] = {.name = "gemma-embedding",
                                     .rope_kind = ENGINE_ROPE_NEOX,
                                     .swa = SWA_PERIOD,
                                     .gemma_io = true,
                                     .embedding = true,
                                     .pooling_default = ENGINE_POOLING_MEAN,
                                     .bidirectional = true,
                                     .use = {[FEAT_BASE] = USE_REQ, [FEAT_PRE_NORMS] = USE_REQ,
                                             [FEAT_GATE] = USE_REQ,
                                             [FEAT_K] = USE_REQ, [FEAT_V] = USE_REQ,
                                             [FEAT_Q_NORM] = USE_REQ, [FEAT_K_NORM] = USE_REQ,
                                             [FEAT_POST_NORMS] = USE_REQ,
                                             [FEAT_DENSE] = USE_OPT}},
    /* Qwen3.5/3.6 dense (notes/hybrid.md §A): Gated DeltaNet layers and gated full
     * attention with Q/K norms and partial NEOX RoPE (IMROPE reduces to it for text);
     * norm weights are stored with the converter's +1 (§A.4), so plain x̂·w */
    [ENGINE_ARCH_QWEN35] = {.name = "qwen35",
                            .rope_kind = ENGINE_ROPE_NEOX,
                            .attn_gate = true,
                            .recurrent = true,
                            .mtp = true,
                            .skip_vision = true,
                            .rename = {{"ffn_norm.weight", "post_attention_norm.weight"}},
                            .use = {[FEAT_BASE] = USE_REQ, [FEAT_OUTPUT] = USE_OPT,
                                    [FEAT_PRE_NORMS] = USE_REQ,
                                    [FEAT_GATE] = USE_REQ,
                                    [FEAT_K] = USE_REQ, [FEAT_V] = USE_REQ,
                                    [FEAT_Q_NORM] = USE_REQ, [FEAT_K_NORM] = USE_REQ,
                                    [FEAT_DELTANET] = USE_REQ, [FEAT_DN_QKVZ] = USE_REQ,
                                    [FEAT_DN_AB] = USE_REQ}},
    /* Qwen3 MoE (Qwen3-30B-A3B, notes/hybrid.md §C.2): qwen3's attention, every FFN a
     * mixture of experts: softmax over all experts, top-k, renormalised (llama.cpp
     * hard-codes both and reads neither expert_gating_func nor expert_weights_norm) */
    [ENGINE_ARCH_QWEN3MOE] = {.name = "qwen3moe",
                              .rope_kind = ENGINE_ROPE_NEOX,
                              .moe = {.on = true, .gating = ENGINE_MOE_SOFTMAX, .norm_w = true},
                              .use = {[FEAT_BASE] = USE_REQ, [FEAT_OUTPUT] = USE_OPT,
                                      [FEAT_PRE_NORMS] = USE_REQ,
                                      [FEAT_K] = USE_REQ, [FEAT_V] = USE_REQ,
                                      [FEAT_Q_NORM] = USE_REQ, [FEAT_K_NORM] = USE_REQ,
                                      [FEAT_MOE] = USE_REQ}},
    /* Qwen3.5/3.6 MoE (35B-A3B, notes/hybrid.md §A.7): qwen35's trunk, every FFN qwen3moe's
     * routing plus a shared expert × sigmoid(ffn_gate_inp_shexp · x) */
    [ENGINE_ARCH_QWEN35MOE] = {.name = "qwen35moe",
                               .rope_kind = ENGINE_ROPE_NEOX,
                               .attn_gate = true,
                               .recurrent = true,
                               .mtp = true,
                               .skip_vision = true,
                               .moe = {.on = true, .gating = ENGINE_MOE_SOFTMAX, .norm_w = true},
                               .rename = {{"ffn_norm.weight", "post_attention_norm.weight"}},
                               .use = {[FEAT_BASE] = USE_REQ, [FEAT_OUTPUT] = USE_OPT,
                                       [FEAT_PRE_NORMS] = USE_REQ,
                                       [FEAT_K] = USE_REQ, [FEAT_V] = USE_REQ,
                                       [FEAT_Q_NORM] = USE_REQ, [FEAT_K_NORM] = USE_REQ,
                                       [FEAT_DELTANET] = USE_REQ, [FEAT_DN_QKVZ] = USE_REQ,
                                       [FEAT_DN_AB] = USE_REQ,
                                       [FEAT_MOE] = USE_REQ, [FEAT_SHEXP] = USE_REQ}},
    /* Qwen3-Next (80B-A3B, notes/hybrid.md §A.3-A.7): qwen35moe's recipe with plain NEOX
     * RoPE, the V heads in HF's grouped order (value head h reads key head h / (H_v / H_k):
     * not re-ordered by the converter), β and α fused in ssm_ba, and in legacy files q, k,
     * v and z fused in ssm_in (re-laid at load, engine/model.c) */
    [ENGINE_ARCH_QWEN3NEXT] = {.name = "qwen3next",
                               .rope_kind = ENGINE_ROPE_NEOX,
                               .attn_gate = true,
                               .recurrent = true,
                               .mtp = true,
                               .dn_head_map = KERN_DN_HEAD_MAP_GROUPED,
                               .moe = {.on = true, .gating = ENGINE_MOE_SOFTMAX, .norm_w = true},
                               .rename = {{"ffn_norm.weight", "post_attention_norm.weight"}},
                               .use = {[FEAT_BASE] = USE_REQ, [FEAT_OUTPUT] = USE_OPT,
                                       [FEAT_PRE_NORMS] = USE_REQ,
                                       [FEAT_K] = USE_REQ, [FEAT_V] = USE_REQ,
                                       [FEAT_Q_NORM] = USE_REQ, [FEAT_K_NORM] = USE_REQ,
                                       [FEAT_DELTANET] = USE_REQ, [FEAT_DN_QKVZ] = USE_OPT,
                                       [FEAT_DN_BA] = USE_REQ, [FEAT_DN_IN] = USE_OPT,
                                       [FEAT_MOE] = USE_REQ, [FEAT_SHEXP] = USE_REQ}},
    /* gpt-oss (notes/hybrid.md §C.3): attention sinks, SWA on even layers (period 2, no
     * key), the global RoPE (YaRN) on every layer, q/k/v and output biases, every FFN a
     * mixture of experts routed by the top k logits (+ bias) then a softmax over those
     * (not renormalised), SWIGLU_OAI experts with biases; post_attention_norm is the
     * pre-FFN norm */
    [ENGINE_ARCH_GPT_OSS] = {.name = "gpt-oss",
                             .rope_kind = ENGINE_ROPE_NEOX,
                             .swa = SWA_PERIOD,
                             .swa_period = 2,
                             .swa_rope_global = true,
                             .moe = {.on = true, .gating = ENGINE_MOE_SOFTMAX_TOPK},
                             .ffn_act = ENGINE_FFN_SWIGLU_OAI,
                             .rename = {{"ffn_norm.weight", "post_attention_norm.weight"}},
                             .use = {[FEAT_BASE] = USE_REQ, [FEAT_OUTPUT] = USE_REQ,
                                     [FEAT_PRE_NORMS] = USE_REQ,
                                     [FEAT_K] = USE_REQ, [FEAT_V] = USE_REQ,
                                     [FEAT_QKV_BIAS] = USE_OPT, [FEAT_O_BIAS] = USE_REQ,
                                     [FEAT_MOE] = USE_REQ, [FEAT_SINKS] = USE_REQ,
                                     [FEAT_MOE_BIAS] = USE_REQ}},
};

int engine_arch_from_name(const char *name) {
    for (int a = 0; a < ENGINE_ARCH_COUNT; a++)
        if (strcmp(engine_arch_rows[a].name, name) == 0) return a;
    return ERR_MODEL_ARCH;
}

const char *engine_arch_name(enum engine_arch arch) {
    return (unsigned)arch < ENGINE_ARCH_COUNT ? engine_arch_rows[arch].name : "?";
}

const char *engine_pooling_name(enum engine_pooling p) {
    static const char *const names[ENGINE_POOLING_COUNT] = {
        [ENGINE_POOLING_NONE] = "none",
        [ENGINE_POOLING_MEAN] = "mean",
        [ENGINE_POOLING_CLS] = "cls",
        [ENGINE_POOLING_LAST] = "last",
    };
    return (unsigned)p < ENGINE_POOLING_COUNT ? names[p] : "?";
}

/* ---- the tensor specs ---------------------------------------------------------------- */

/* Columns: name, the weight's field, kind, ne[0], ne[1], feature, split, part, layers (of a
 * hybrid, or by FFN kind), ne[2] (DIM_EXPERTS: an experts' stack). A table: kept
 * as rows, not as clang-format would lay it out. */
/* clang-format off */
#define G(f) offsetof(struct engine_model, f)
#define L(f) offsetof(struct engine_layer, f)

const struct tensor_spec engine_global_specs[] = {
    {"token_embd.weight", G(tok_embd), KIND_ROWS, DIM_EMBD, DIM_VOCAB, FEAT_BASE, SPLIT_HOST,
     PART_WHOLE, SPEC_ANY_LAYER, DIM_ONE},
    {"output_norm.weight", G(output_norm), KIND_VEC, DIM_EMBD, DIM_ONE, FEAT_PRE_NORMS, SPLIT_HOST,
     PART_WHOLE, SPEC_ANY_LAYER, DIM_ONE},
    {"output.weight", G(output), KIND_MATMUL, DIM_EMBD, DIM_VOCAB, FEAT_OUTPUT, SPLIT_VOCAB_ROWS,
     PART_WHOLE, SPEC_ANY_LAYER, DIM_ONE},
    {"rope_freqs.weight", G(rope_freqs), KIND_VEC, DIM_ROT_HALF, DIM_ONE, FEAT_ROPE_FREQS,
     SPLIT_HOST, PART_WHOLE, SPEC_ANY_LAYER, DIM_ONE},
    {"per_layer_token_embd.weight", G(pl_tok_embd), KIND_ROWS, DIM_PLE_ALL, DIM_VOCAB, FEAT_PLE,
     SPLIT_HOST, PART_WHOLE, SPEC_ANY_LAYER, DIM_ONE},
    {"per_layer_model_proj.weight", G(pl_model_proj), KIND_MATMUL, DIM_EMBD, DIM_PLE_ALL, FEAT_PLE,
     SPLIT_HOST, PART_WHOLE, SPEC_ANY_LAYER, DIM_ONE},
    {"per_layer_proj_norm.weight", G(pl_proj_norm), KIND_VEC, DIM_PLE, DIM_ONE, FEAT_PLE,
     SPLIT_HOST, PART_WHOLE, SPEC_ANY_LAYER, DIM_ONE},
    {"token_types.weight", G(type_embd), KIND_ROWS, DIM_EMBD, DIM_TYPES, FEAT_TOKEN_TYPES,
     SPLIT_HOST, PART_WHOLE, SPEC_ANY_LAYER, DIM_ONE},
    {"position_embd.weight", G(pos_embd), KIND_ROWS, DIM_EMBD, DIM_CTX, FEAT_POS_EMBD, SPLIT_HOST,
     PART_WHOLE, SPEC_ANY_LAYER, DIM_ONE},
    {"token_embd_norm.weight", G(embd_norm), KIND_VEC, DIM_EMBD, DIM_ONE, FEAT_EMBD_NORM,
     SPLIT_HOST, PART_WHOLE, SPEC_ANY_LAYER, DIM_ONE},
    {"token_embd_norm.bias", G(embd_norm_b), KIND_VEC, DIM_EMBD, DIM_ONE, FEAT_EMBD_NORM,
     SPLIT_HOST, PART_WHOLE, SPEC_ANY_LAYER, DIM_ONE},
    {"dense_2.weight", G(dense_2), KIND_MATMUL, DIM_EMBD, DIM_DENSE, FEAT_DENSE, SPLIT_HOST,
     PART_WHOLE, SPEC_ANY_LAYER, DIM_ONE},
    {"dense_3.weight", G(dense_3), KIND_MATMUL, DIM_DENSE, DIM_EMBD_OUT, FEAT_DENSE, SPLIT_HOST,
     PART_WHOLE, SPEC_ANY_LAYER, DIM_ONE},
};

const struct tensor_spec engine_layer_specs[] = {
    {"attn_norm.weight", L(attn_norm), KIND_VEC, DIM_EMBD, DIM_ONE, FEAT_PRE_NORMS, SPLIT_HOST,
     PART_WHOLE, SPEC_ANY_LAYER, DIM_ONE},
    {"attn_q.weight", L(wq), KIND_MATMUL, DIM_EMBD, DIM_QG, FEAT_BASE, SPLIT_Q_ROWS, PART_QKV_Q,
     SPEC_ATTN_LAYER, DIM_ONE},
    {"attn_k.weight", L(wk), KIND_MATMUL, DIM_EMBD, DIM_K, FEAT_K, SPLIT_K_ROWS, PART_QKV_K,
     SPEC_ATTN_LAYER, DIM_ONE},
    {"attn_v.weight", L(wv), KIND_MATMUL, DIM_EMBD, DIM_V, FEAT_V, SPLIT_V_ROWS, PART_QKV_V,
     SPEC_ATTN_LAYER, DIM_ONE},
    {"attn_output.weight", L(wo), KIND_MATMUL, DIM_O, DIM_EMBD, FEAT_BASE, SPLIT_O_COLS,
     PART_WHOLE, SPEC_ATTN_LAYER, DIM_ONE},
    {"attn_q.bias", L(bq), KIND_VEC, DIM_Q, DIM_ONE, FEAT_QKV_BIAS, SPLIT_Q_ROWS, PART_WHOLE,
     SPEC_ATTN_LAYER, DIM_ONE},
    {"attn_k.bias", L(bk), KIND_VEC, DIM_K, DIM_ONE, FEAT_QKV_BIAS, SPLIT_K_ROWS, PART_WHOLE,
     SPEC_ATTN_LAYER, DIM_ONE},
    {"attn_v.bias", L(bv), KIND_VEC, DIM_V, DIM_ONE, FEAT_QKV_BIAS, SPLIT_V_ROWS, PART_WHOLE,
     SPEC_ATTN_LAYER, DIM_ONE},
    {"attn_output.bias", L(bo), KIND_VEC, DIM_EMBD, DIM_ONE, FEAT_O_BIAS, SPLIT_HOST, PART_WHOLE,
     SPEC_ATTN_LAYER, DIM_ONE},
    {"attn_q_norm.weight", L(q_norm), KIND_VEC, DIM_HEAD_K, DIM_ONE, FEAT_Q_NORM, SPLIT_ALL,
     PART_WHOLE, SPEC_ATTN_LAYER, DIM_ONE},
    {"attn_k_norm.weight", L(k_norm), KIND_VEC, DIM_HEAD_K, DIM_ONE, FEAT_K_NORM, SPLIT_ALL,
     PART_WHOLE, SPEC_ATTN_LAYER, DIM_ONE},
    {"post_attention_norm.weight", L(post_attn_norm), KIND_VEC, DIM_EMBD, DIM_ONE, FEAT_POST_NORMS,
     SPLIT_HOST, PART_WHOLE, SPEC_ANY_LAYER, DIM_ONE},
    {"attn_output_norm.weight", L(attn_out_norm), KIND_VEC, DIM_EMBD, DIM_ONE, FEAT_RESID_NORMS,
     SPLIT_HOST, PART_WHOLE, SPEC_ANY_LAYER, DIM_ONE},
    {"attn_output_norm.bias", L(attn_out_norm_b), KIND_VEC, DIM_EMBD, DIM_ONE, FEAT_RESID_NORMS,
     SPLIT_HOST, PART_WHOLE, SPEC_ANY_LAYER, DIM_ONE},
    {"ffn_norm.weight", L(ffn_norm), KIND_VEC, DIM_EMBD, DIM_ONE, FEAT_PRE_NORMS, SPLIT_HOST,
     PART_WHOLE, SPEC_ANY_LAYER, DIM_ONE},
    {"ffn_gate.weight", L(w_gate), KIND_MATMUL, DIM_EMBD, DIM_FF, FEAT_GATE, SPLIT_FF_ROWS,
     PART_WHOLE, SPEC_DENSE_FFN, DIM_ONE},
    {"ffn_up.weight", L(w_up), KIND_MATMUL, DIM_EMBD, DIM_FF, FEAT_BASE, SPLIT_FF_ROWS,
     PART_WHOLE, SPEC_DENSE_FFN, DIM_ONE},
    {"ffn_down.weight", L(w_down), KIND_MATMUL, DIM_FF, DIM_EMBD, FEAT_BASE, SPLIT_FF_COLS,
     PART_WHOLE, SPEC_DENSE_FFN, DIM_ONE},
    {"ffn_up.bias", L(b_up), KIND_VEC, DIM_FF, DIM_ONE, FEAT_FFN_BIAS, SPLIT_FF_ROWS,
     PART_WHOLE, SPEC_DENSE_FFN, DIM_ONE},
    {"ffn_down.bias", L(b_down), KIND_VEC, DIM_EMBD, DIM_ONE, FEAT_FFN_BIAS, SPLIT_HOST,
     PART_WHOLE, SPEC_DENSE_FFN, DIM_ONE},
    {"layer_output_norm.weight", L(layer_out_norm), KIND_VEC, DIM_EMBD, DIM_ONE, FEAT_RESID_NORMS,
     SPLIT_HOST, PART_WHOLE, SPEC_ANY_LAYER, DIM_ONE},
    {"layer_output_norm.bias", L(layer_out_norm_b), KIND_VEC, DIM_EMBD, DIM_ONE, FEAT_RESID_NORMS,
     SPLIT_HOST, PART_WHOLE, SPEC_ANY_LAYER, DIM_ONE},
    {"post_ffw_norm.weight", L(post_ffn_norm), KIND_VEC, DIM_EMBD, DIM_ONE, FEAT_POST_NORMS,
     SPLIT_HOST, PART_WHOLE, SPEC_ANY_LAYER, DIM_ONE},
    {"inp_gate.weight", L(pl_gate), KIND_MATMUL, DIM_EMBD, DIM_PLE, FEAT_PLE, SPLIT_HOST,
     PART_WHOLE, SPEC_ANY_LAYER, DIM_ONE},
    {"proj.weight", L(pl_proj), KIND_MATMUL, DIM_PLE, DIM_EMBD, FEAT_PLE, SPLIT_HOST,
     PART_WHOLE, SPEC_ANY_LAYER, DIM_ONE},
    {"post_norm.weight", L(pl_post_norm), KIND_VEC, DIM_EMBD, DIM_ONE, FEAT_PLE, SPLIT_HOST,
     PART_WHOLE, SPEC_ANY_LAYER, DIM_ONE},
    {"layer_output_scale.weight", L(out_scale), KIND_VEC, DIM_ONE, DIM_ONE, FEAT_LAYER_SCALE,
     SPLIT_HOST, PART_WHOLE, SPEC_ANY_LAYER, DIM_ONE},
    /* Gated DeltaNet layers: cut by key heads with the value heads that read them
     * (engine/device.h); the per-head norm whole */
    {"attn_qkv.weight", L(ssm_qkv), KIND_MATMUL, DIM_EMBD, DIM_SSM_CONV, FEAT_DN_QKVZ,
     SPLIT_DN_CHAN, PART_WHOLE, SPEC_REC_LAYER, DIM_ONE},
    {"attn_gate.weight", L(ssm_z), KIND_MATMUL, DIM_EMBD, DIM_SSM_INNER, FEAT_DN_QKVZ,
     SPLIT_DN_V_ROWS, PART_WHOLE, SPEC_REC_LAYER, DIM_ONE},
    {"ssm_alpha.weight", L(ssm_alpha), KIND_MATMUL, DIM_EMBD, DIM_SSM_HEADS, FEAT_DN_AB,
     SPLIT_DN_V_ROWS, PART_WHOLE, SPEC_REC_LAYER, DIM_ONE},
    {"ssm_beta.weight", L(ssm_beta), KIND_MATMUL, DIM_EMBD, DIM_SSM_HEADS, FEAT_DN_AB,
     SPLIT_DN_V_ROWS, PART_WHOLE, SPEC_REC_LAYER, DIM_ONE},
    /* qwen3next: ssm_ba cut by key heads (its groups of β and α); ssm_in read at load only */
    {"ssm_ba.weight", L(ssm_ba), KIND_MATMUL, DIM_EMBD, DIM_SSM_BA, FEAT_DN_BA, SPLIT_DN_K_ROWS,
     PART_WHOLE, SPEC_REC_LAYER, DIM_ONE},
    {"ssm_in.weight", L(ssm_in), KIND_MATMUL, DIM_EMBD, DIM_SSM_QKVZ, FEAT_DN_IN, SPLIT_HOST,
     PART_WHOLE, SPEC_REC_LAYER, DIM_ONE},
    {"ssm_conv1d.weight", L(ssm_conv), KIND_CONV, DIM_SSM_KERNEL, DIM_SSM_CONV, FEAT_DELTANET,
     SPLIT_DN_CHAN, PART_WHOLE, SPEC_REC_LAYER, DIM_ONE},
    {"ssm_dt.bias", L(ssm_dt), KIND_VEC, DIM_SSM_HEADS, DIM_ONE, FEAT_DELTANET, SPLIT_DN_V_ROWS,
     PART_WHOLE, SPEC_REC_LAYER, DIM_ONE},
    {"ssm_a", L(ssm_a), KIND_VEC, DIM_SSM_HEADS, DIM_ONE, FEAT_DELTANET, SPLIT_DN_V_ROWS,
     PART_WHOLE, SPEC_REC_LAYER, DIM_ONE},
    {"ssm_norm.weight", L(ssm_norm), KIND_VEC, DIM_SSM_HEAD_V, DIM_ONE, FEAT_DELTANET, SPLIT_ALL,
     PART_WHOLE, SPEC_REC_LAYER, DIM_ONE},
    {"ssm_out.weight", L(ssm_out), KIND_MATMUL, DIM_SSM_INNER, DIM_EMBD, FEAT_DELTANET,
     SPLIT_DN_O_COLS, PART_WHOLE, SPEC_REC_LAYER, DIM_ONE},
    /* mixture of experts: the router whole on every device (each routes the same), the
     * experts' stacks (ne[2] = n_expert) cut by each expert's hidden units */
    {"ffn_gate_inp.weight", L(moe_router), KIND_MATMUL, DIM_EMBD, DIM_EXPERTS, FEAT_MOE, SPLIT_ALL,
     PART_WHOLE, SPEC_MOE_FFN, DIM_ONE},
    {"ffn_gate_exps.weight", L(exp_gate), KIND_MATMUL, DIM_EMBD, DIM_FF_EXP, FEAT_MOE,
     SPLIT_EXP_ROWS, PART_GATE_UP_GATE, SPEC_MOE_FFN, DIM_EXPERTS},
    {"ffn_up_exps.weight", L(exp_up), KIND_MATMUL, DIM_EMBD, DIM_FF_EXP, FEAT_MOE, SPLIT_EXP_ROWS,
     PART_GATE_UP_UP, SPEC_MOE_FFN, DIM_EXPERTS},
    {"ffn_down_exps.weight", L(exp_down), KIND_MATMUL, DIM_FF_EXP, DIM_EMBD, FEAT_MOE,
     SPLIT_EXP_COLS, PART_WHOLE, SPEC_MOE_FFN, DIM_EXPERTS},
    {"ffn_gate_inp_shexp.weight", L(sh_gate_inp), KIND_VEC, DIM_EMBD, DIM_ONE, FEAT_SHEXP,
     SPLIT_ALL, PART_WHOLE, SPEC_MOE_FFN, DIM_ONE},
    {"ffn_gate_shexp.weight", L(sh_gate), KIND_MATMUL, DIM_EMBD, DIM_FF_SHEXP, FEAT_SHEXP,
     SPLIT_SH_ROWS, PART_WHOLE, SPEC_MOE_FFN, DIM_ONE},
    {"ffn_up_shexp.weight", L(sh_up), KIND_MATMUL, DIM_EMBD, DIM_FF_SHEXP, FEAT_SHEXP,
     SPLIT_SH_ROWS, PART_WHOLE, SPEC_MOE_FFN, DIM_ONE},
    {"ffn_down_shexp.weight", L(sh_down), KIND_MATMUL, DIM_FF_SHEXP, DIM_EMBD, FEAT_SHEXP,
     SPLIT_SH_COLS, PART_WHOLE, SPEC_MOE_FFN, DIM_ONE},
    /* gpt-oss: the sinks and biases whole on every device (a device reads its heads' sinks
     * and its units' biases by their offsets) */
    {"attn_sinks.weight", L(attn_sinks), KIND_VEC, DIM_HEADS, DIM_ONE, FEAT_SINKS, SPLIT_ALL,
     PART_WHOLE, SPEC_ATTN_LAYER, DIM_ONE},
    {"ffn_gate_inp.bias", L(moe_router_b), KIND_VEC, DIM_EXPERTS, DIM_ONE, FEAT_MOE_BIAS,
     SPLIT_ALL, PART_WHOLE, SPEC_MOE_FFN, DIM_ONE},
    {"ffn_gate_exps.bias", L(exp_gate_b), KIND_VEC, DIM_FF_EXP, DIM_EXPERTS, FEAT_MOE_BIAS,
     SPLIT_ALL, PART_WHOLE, SPEC_MOE_FFN, DIM_ONE},
    {"ffn_up_exps.bias", L(exp_up_b), KIND_VEC, DIM_FF_EXP, DIM_EXPERTS, FEAT_MOE_BIAS,
     SPLIT_ALL, PART_WHOLE, SPEC_MOE_FFN, DIM_ONE},
    {"ffn_down_exps.bias", L(exp_down_b), KIND_VEC, DIM_EMBD, DIM_EXPERTS, FEAT_MOE_BIAS,
     SPLIT_ALL, PART_WHOLE, SPEC_MOE_FFN, DIM_ONE},
    /* gemma4 MoE: what the experts' share reads on every device (the router's scale, their
     * input norm, each expert's scale); the output norms on the host after the sums */
    {"ffn_gate_inp.scale", L(moe_router_scale), KIND_VEC, DIM_EMBD, DIM_ONE, FEAT_MOE_NORMS,
     SPLIT_ALL, PART_WHOLE, SPEC_MOE_FFN, DIM_ONE},
    {"pre_ffw_norm_2.weight", L(pre_ffn_norm_2), KIND_VEC, DIM_EMBD, DIM_ONE, FEAT_MOE_NORMS,
     SPLIT_ALL, PART_WHOLE, SPEC_MOE_FFN, DIM_ONE},
    {"post_ffw_norm_1.weight", L(post_ffn_norm_1), KIND_VEC, DIM_EMBD, DIM_ONE, FEAT_MOE_NORMS,
     SPLIT_HOST, PART_WHOLE, SPEC_MOE_FFN, DIM_ONE},
    {"post_ffw_norm_2.weight", L(post_ffn_norm_2), KIND_VEC, DIM_EMBD, DIM_ONE, FEAT_MOE_NORMS,
     SPLIT_HOST, PART_WHOLE, SPEC_MOE_FFN, DIM_ONE},
    {"ffn_down_exps.scale", L(exp_down_scale), KIND_VEC, DIM_EXPERTS, DIM_ONE, FEAT_EXP_SCALE,
     SPLIT_ALL, PART_WHOLE, SPEC_MOE_FFN, DIM_ONE},
};

#undef G
#undef L

/* clang-format on */

const size_t engine_n_global_specs = ARRAY_SIZE(engine_global_specs);
const size_t engine_n_layer_specs = ARRAY_SIZE(engine_layer_specs);
