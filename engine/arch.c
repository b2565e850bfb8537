/* arch — the arch rows and the tensor specs (see arch.h). */
#include "engine/arch.h"

#include <stddef.h>
#include <string.h>

/* ---- the arch rows ------------------------------------------------------------------- */

const struct arch_desc engine_arch_rows[ENGINE_ARCH_COUNT] = {
    [ENGINE_ARCH_LLAMA] = {.name = "llama",
                           .rope_kind = ENGINE_ROPE_NORM,
                           .use = {[FEAT_BASE] = USE_REQ, [FEAT_OUTPUT] = USE_OPT,
                                   [FEAT_K] = USE_REQ, [FEAT_V] = USE_REQ,
                                   [FEAT_QKV_BIAS] = USE_OPT, [FEAT_O_BIAS] = USE_OPT,
                                   [FEAT_ROPE_FREQS] = USE_OPT}},
    [ENGINE_ARCH_QWEN2] = {.name = "qwen2",
                           .rope_kind = ENGINE_ROPE_NEOX,
                           .use = {[FEAT_BASE] = USE_REQ, [FEAT_OUTPUT] = USE_OPT,
                                   [FEAT_K] = USE_REQ, [FEAT_V] = USE_REQ,
                                   [FEAT_QKV_BIAS] = USE_REQ}},
    [ENGINE_ARCH_QWEN3] = {.name = "qwen3",
                           .rope_kind = ENGINE_ROPE_NEOX,
                           .use = {[FEAT_BASE] = USE_REQ, [FEAT_OUTPUT] = USE_OPT,
                                   [FEAT_K] = USE_REQ, [FEAT_V] = USE_REQ,
                                   [FEAT_Q_NORM] = USE_REQ, [FEAT_K_NORM] = USE_REQ}},
    [ENGINE_ARCH_GEMMA3] = {.name = "gemma3",
                            .rope_kind = ENGINE_ROPE_NEOX,
                            .swa = SWA_PERIOD,
                            .attn_scale = ATTN_SCALE_GEMMA3,
                            .gemma_io = true,
                            .use = {[FEAT_BASE] = USE_REQ, [FEAT_OUTPUT] = USE_OPT,
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
                            .moe_refusal = "Gemma 4 mixture-of-experts models (26B-A4B: routed "
                                           "experts beside the dense MLP) are not supported, only "
                                           "the dense ones (E2B, E4B, 31B)",
                            .use = {[FEAT_BASE] = USE_REQ, [FEAT_OUTPUT] = USE_OPT,
                                    [FEAT_K] = USE_OWN, [FEAT_V] = USE_OPT,
                                    [FEAT_Q_NORM] = USE_REQ, [FEAT_K_NORM] = USE_OWN,
                                    [FEAT_POST_NORMS] = USE_REQ, [FEAT_ROPE_FREQS] = USE_OPT,
                                    [FEAT_PLE] = USE_PLE, [FEAT_LAYER_SCALE] = USE_OPT}},
};

int engine_arch_from_name(const char *name) {
    for (int a = 0; a < ENGINE_ARCH_COUNT; a++)
        if (strcmp(engine_arch_rows[a].name, name) == 0) return a;
    return ERR_MODEL_ARCH;
}

const char *engine_arch_name(enum engine_arch arch) {
    return (unsigned)arch < ENGINE_ARCH_COUNT ? engine_arch_rows[arch].name : "?";
}

/* ---- the tensor specs ---------------------------------------------------------------- */

/* Columns: name, the weight's field, kind, ne[0], ne[1], feature, split. A table: kept
 * as rows, not as clang-format would lay it out. */
/* clang-format off */
#define G(f) offsetof(struct engine_model, f)
#define L(f) offsetof(struct engine_layer, f)

const struct tensor_spec engine_global_specs[] = {
    {"token_embd.weight", G(tok_embd), KIND_ROWS, DIM_EMBD, DIM_VOCAB, FEAT_BASE, SPLIT_HOST},
    {"output_norm.weight", G(output_norm), KIND_VEC, DIM_EMBD, DIM_ONE, FEAT_BASE, SPLIT_HOST},
    {"output.weight", G(output), KIND_MATMUL, DIM_EMBD, DIM_VOCAB, FEAT_OUTPUT, SPLIT_VOCAB_ROWS},
    {"rope_freqs.weight", G(rope_freqs), KIND_VEC, DIM_ROT_HALF, DIM_ONE,
     FEAT_ROPE_FREQS, SPLIT_HOST},
    {"per_layer_token_embd.weight", G(pl_tok_embd), KIND_ROWS, DIM_PLE_ALL, DIM_VOCAB,
     FEAT_PLE, SPLIT_HOST},
    {"per_layer_model_proj.weight", G(pl_model_proj), KIND_MATMUL, DIM_EMBD, DIM_PLE_ALL,
     FEAT_PLE, SPLIT_HOST},
    {"per_layer_proj_norm.weight", G(pl_proj_norm), KIND_VEC, DIM_PLE, DIM_ONE,
     FEAT_PLE, SPLIT_HOST},
};

const struct tensor_spec engine_layer_specs[] = {
    {"attn_norm.weight", L(attn_norm), KIND_VEC, DIM_EMBD, DIM_ONE, FEAT_BASE, SPLIT_HOST},
    {"attn_q.weight", L(wq), KIND_MATMUL, DIM_EMBD, DIM_Q, FEAT_BASE, SPLIT_Q_ROWS},
    {"attn_k.weight", L(wk), KIND_MATMUL, DIM_EMBD, DIM_K, FEAT_K, SPLIT_K_ROWS},
    {"attn_v.weight", L(wv), KIND_MATMUL, DIM_EMBD, DIM_V, FEAT_V, SPLIT_V_ROWS},
    {"attn_output.weight", L(wo), KIND_MATMUL, DIM_O, DIM_EMBD, FEAT_BASE, SPLIT_O_COLS},
    {"attn_q.bias", L(bq), KIND_VEC, DIM_Q, DIM_ONE, FEAT_QKV_BIAS, SPLIT_Q_ROWS},
    {"attn_k.bias", L(bk), KIND_VEC, DIM_K, DIM_ONE, FEAT_QKV_BIAS, SPLIT_K_ROWS},
    {"attn_v.bias", L(bv), KIND_VEC, DIM_V, DIM_ONE, FEAT_QKV_BIAS, SPLIT_V_ROWS},
    {"attn_output.bias", L(bo), KIND_VEC, DIM_EMBD, DIM_ONE, FEAT_O_BIAS, SPLIT_HOST},
    {"attn_q_norm.weight", L(q_norm), KIND_VEC, DIM_HEAD_K, DIM_ONE, FEAT_Q_NORM, SPLIT_ALL},
    {"attn_k_norm.weight", L(k_norm), KIND_VEC, DIM_HEAD_K, DIM_ONE, FEAT_K_NORM, SPLIT_ALL},
    {"post_attention_norm.weight", L(post_attn_norm), KIND_VEC, DIM_EMBD, DIM_ONE,
     FEAT_POST_NORMS, SPLIT_HOST},
    {"ffn_norm.weight", L(ffn_norm), KIND_VEC, DIM_EMBD, DIM_ONE, FEAT_BASE, SPLIT_HOST},
    {"ffn_gate.weight", L(w_gate), KIND_MATMUL, DIM_EMBD, DIM_FF, FEAT_BASE, SPLIT_FF_ROWS},
    {"ffn_up.weight", L(w_up), KIND_MATMUL, DIM_EMBD, DIM_FF, FEAT_BASE, SPLIT_FF_ROWS},
    {"ffn_down.weight", L(w_down), KIND_MATMUL, DIM_FF, DIM_EMBD, FEAT_BASE, SPLIT_FF_COLS},
    {"post_ffw_norm.weight", L(post_ffn_norm), KIND_VEC, DIM_EMBD, DIM_ONE,
     FEAT_POST_NORMS, SPLIT_HOST},
    {"inp_gate.weight", L(pl_gate), KIND_MATMUL, DIM_EMBD, DIM_PLE, FEAT_PLE, SPLIT_HOST},
    {"proj.weight", L(pl_proj), KIND_MATMUL, DIM_PLE, DIM_EMBD, FEAT_PLE, SPLIT_HOST},
    {"post_norm.weight", L(pl_post_norm), KIND_VEC, DIM_EMBD, DIM_ONE, FEAT_PLE, SPLIT_HOST},
    {"layer_output_scale.weight", L(out_scale), KIND_VEC, DIM_ONE, DIM_ONE,
     FEAT_LAYER_SCALE, SPLIT_HOST},
};

#undef G
#undef L

/* clang-format on */

const size_t engine_n_global_specs = ARRAY_SIZE(engine_global_specs);
const size_t engine_n_layer_specs = ARRAY_SIZE(engine_layer_specs);
