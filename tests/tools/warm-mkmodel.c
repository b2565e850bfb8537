/* warm-mkmodel: writes a GGUF model with deterministic random weights that llama.cpp and
 * warmd can load: hparam keys and tensor names exactly as llama.cpp's converter writes
 * them, for the llama, qwen2, qwen3, gemma3, gemma4, nomic-bert, qwen3moe, qwen35 and
 * qwen35moe architectures, any shape, any weight type the kernels can quantize to.
 *
 *   warm-mkmodel --arch llama|qwen2|qwen3|gemma3|gemma4|nomic-bert|qwen3moe|qwen35|qwen35moe|
 *                       qwen3next|gpt-oss
 *                [--n-embd N] [--n-layer N] [--n-head N]
 *                [--n-head-kv N] [--head-dim N] [--n-ff N] [--n-vocab N] [--ctx N]
 *                [--type f32|f16|bf16|q8_0|q4_0|q4_1|q5_0|q5_1|iq4_nl|q2_K|q3_K|q4_K|q5_K|
 *                        q6_K|iq4_xs] [--tied]
 *                [--vocab-from FILE] [--seed N] [--rope-base X] [--eps X]
 *                [--shared-kv-layers N] [--name S]
 *                [--chat-template chatml|qwen3|qwen35|gemma|gemma4|harmony]
 *                [--window N] [--swa-pattern P|FLAGS] [--head-dim-swa N] [--n-head-kv-swa N]
 *                [--ple N] [--eot-scale X]
 *                [--experts N] [--experts-used K] [--n-ff-exp N] [--n-ff-shexp N]
 *                [--ssm-groups N] [--ssm-heads N] [--ssm-head-dim N] [--ssm-conv N]
 *                [--full-attn-interval N] [--n-rot N] -o FILE
 *
 * Mixture of experts (notes/hybrid.md §A.3, §C): qwen3moe (Qwen3-30B-A3B's layout) and
 * qwen35moe write a router ffn_gate_inp (F32, as llama.cpp's quantizer keeps it; logits of
 * std about 3) and the stacks ffn_{gate,up,down}_exps of --experts matrices; qwen35moe also
 * the shared expert ffn_{gate,up,down}_shexp and its gate ffn_gate_inp_shexp (1-D F32). Keys:
 * expert_count, expert_used_count, expert_feed_forward_length (and
 * expert_shared_feed_forward_length).
 *
 * gpt-oss (notes/hybrid.md §C.3): qwen3moe's router and stacks, but the stacks MXFP4
 * (general.file_type 38, MOSTLY_MXFP4_MOE; the other matrices --type), biases on q, k, v,
 * the attention output, the router and every expert's gate, up and down (F32; the experts'
 * {n_ff_exp or n_embd, n_expert}), attn_sinks {n_head} (F32, about 1), post_attention_norm
 * as the pre-FFN norm, no Q/K norms; keys attention.sliding_window (--window; period 2
 * without a pattern key: even layers SWA) and the expert keys. --n-embd and --n-ff-exp
 * must be multiples of 32 (the MXFP4 block).
 *
 * qwen35 and qwen35moe (notes/hybrid.md §A): every --full-attn-interval-th layer is gated
 * attention (attn_q holds each head's query and output gate), the others Gated DeltaNet
 * (attn_qkv, attn_gate, ssm_beta, ssm_alpha, ssm_conv1d (F32), ssm_dt.bias, ssm_a = -A
 * with A in [0.05, 1], ssm_norm, ssm_out); the pre-FFN norm is post_attention_norm; RoPE
 * on --n-rot dims with rope.dimension_sections; keys ssm.conv_kernel, state_size,
 * group_count, time_step_rank, inner_size and full_attention_interval.
 *
 * Gemma (notes/gemma.md §A, §B.3): post-attention and post-FFN norms, per-head Q/K norms,
 * a tied output, attention.sliding_window = --window (0: none). The SWA layout: gemma3
 * writes --swa-pattern P as the scalar period (absent, as the converter leaves it: 6);
 * gemma4 writes one bool per layer, from a period (default 6: every 6th layer global) or a
 * string of 0/1 per layer (1 = SWA). gemma4 also writes key_length_swa (--head-dim-swa),
 * head_count_kv as one value per layer when --n-head-kv-swa differs, rope_freqs (all 1),
 * layer_output_scale, freq_base_swa 10000, final_logit_softcapping 30,
 * embedding_length_per_layer_input (--ple; > 0 adds the per-layer-embedding tensors), and
 * leaves out attn_k/attn_v/attn_k_norm in the --shared-kv-layers last layers.
 *
 * Weights: uniform with standard deviation 1/sqrt(n_in) for every matrix (so each
 * layer's output has about the scale of its normalized input), 0.5 for the token
 * embedding, 1 +- 0.1 for norm weights, std 0.02 for biases. Norm weights and biases stay
 * F32, as llama.cpp keeps them; token_embd and output use --type. Each tensor draws from
 * its own stream seeded by (seed, tensor name), so adding a tensor or a layer leaves the
 * others' values unchanged.
 *
 * Vocabulary: --vocab-from copies every tokenizer.* key of a GGUF file (n_vocab becomes
 * its token count); otherwise a SentencePiece-style one is made up (tokenizer.ggml.model
 * "llama"): <unk>, <s>, </s>, the 256 byte tokens <0x00>..<0xFF> (type BYTE), then
 * printable pieces with descending scores, up to --n-vocab. --chat-template puts its
 * markers last: the extra ones (Qwen3's <think>, </think>: USER_DEFINED), then the turn's
 * open and close (CONTROL); harmony (gpt-oss): <|channel|>, <|message|>, <|end|>,
 * <|call|>, <|constrain|>, <|start|>, <|return|>, all CONTROL, and no template.
 *
 * nomic-bert (an embedding model, as nomic-embed-text): token_embd, token_types (2 rows,
 * F32) and token_embd_norm (weight and bias); per layer a fused attn_qkv (n_embd x 3 n_embd,
 * no biases), attn_output, the post-LayerNorm attn_output_norm, ffn_up / ffn_gate / ffn_down
 * (SwiGLU) and layer_output_norm (norms with biases); no output_norm nor output. Its keys:
 * pooling_type 1 (mean), attention.layer_norm_epsilon, attention.causal false,
 * rope.freq_base (1000). Its made-up vocabulary is WordPiece-like (tokenizer.ggml.model
 * "bert"): [PAD], [unused0]..[unused98], [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103, the
 * 94 printable ASCII characters, then "##" + letters and lowercase words, up to --n-vocab.
 *
 * To add an architecture: one row in arch_rows[]; to add a per-layer tensor: one row in
 * layer_rows[] (with the flag that selects it); to add an hparam: one line in
 * add_hparams(). */
#include "engine/engine.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- architectures ------------------------------------------------------------------- */

struct arch_row {
    const char *name;
    float rope_base, eps;
    bool qkv_bias;       /* attn_q/k/v.bias (qwen2) */
    bool qk_norm;        /* attn_q_norm/attn_k_norm.weight over head_dim (qwen3) */
    bool free_head_dim;  /* head_dim may differ from n_embd / n_head (llama.cpp's qwen2
                          * sizes wq as n_embd x n_embd, so it may not) */
    int gemma;           /* 3 or 4: Gemma's norms, SWA keys and tied output; 0 otherwise */
    /* Qwen3.5 (notes/hybrid.md §A): Gated DeltaNet layers beside gated attention (attn_q
     * holds each head's query and output gate), post_attention_norm as the pre-FFN norm,
     * partial RoPE with dimension_sections */
    bool hybrid;
    enum { FFN_DENSE, FFN_MOE, FFN_MOE_SHARED } ffn; /* experts (+ a sigmoid-gated shared one) */
};

static const struct arch_row arch_rows[] = {
    {"llama", 10000.0f, 1e-5f, false, false, true, 0, false, FFN_DENSE},
    {"qwen2", 1000000.0f, 1e-6f, true, false, false, 0, false, FFN_DENSE},
    {"qwen3", 1000000.0f, 1e-6f, false, true, true, 0, false, FFN_DENSE},
    {"gemma3", 1000000.0f, 1e-6f, false, true, true, 3, false, FFN_DENSE},
    {"gemma4", 1000000.0f, 1e-6f, false, true, true, 4, false, FFN_DENSE},
    {"nomic-bert", 1000.0f, 1e-12f, false, false, false, 0, false, FFN_DENSE}, /* is_bert() */
    {"qwen3moe", 1000000.0f, 1e-6f, false, true, true, 0, false, FFN_MOE},
    {"qwen35", 10000000.0f, 1e-6f, false, true, true, 0, true, FFN_DENSE},
    {"qwen35moe", 10000000.0f, 1e-6f, false, true, true, 0, true, FFN_MOE_SHARED},
    /* qwen3next: qwen35moe's tensors but ssm_ba for β and α (is_next()), HF's grouped
     * V-head order (random weights: nothing to re-order), no rope.dimension_sections */
    {"qwen3next", 10000000.0f, 1e-6f, false, true, true, 0, true, FFN_MOE_SHARED},
    /* gpt-oss: its sinks, biases and MXFP4 experts by is_gptoss() */
    {"gpt-oss", 150000.0f, 1e-5f, true, false, true, 0, false, FFN_MOE},
};

/* nomic-bert: its own tensors, keys and vocabulary (add_bert_*). */
static bool is_bert(const struct arch_row *a) { return strcmp(a->name, "nomic-bert") == 0; }
/* qwen3next: ssm_ba instead of ssm_beta and ssm_alpha (notes/hybrid.md §A.3). */
static bool is_next(const struct arch_row *a) { return strcmp(a->name, "qwen3next") == 0; }
/* gpt-oss: sinks, output/router/expert biases, MXFP4 experts (notes/hybrid.md §C.3). */
static bool is_gptoss(const struct arch_row *a) { return strcmp(a->name, "gpt-oss") == 0; }

/* general.file_type: llama.cpp's llama_ftype for a model whose matrices are all `type`. */
static const struct {
    enum kern_type type;
    uint32_t ftype;
} ftype_rows[] = {
    {KERN_TYPE_F32, 0},  {KERN_TYPE_F16, 1},  {KERN_TYPE_Q4_0, 2},   {KERN_TYPE_Q4_1, 3},
    {KERN_TYPE_Q8_0, 7}, {KERN_TYPE_Q5_0, 8}, {KERN_TYPE_Q5_1, 9},   {KERN_TYPE_IQ4_NL, 25},
    {KERN_TYPE_BF16, 32},
    /* k-quants and iq4_xs: the "_S" ftype, whose matrices are all of the one type */
    {KERN_TYPE_Q2_K, 10}, {KERN_TYPE_Q3_K, 11}, {KERN_TYPE_Q4_K, 14}, {KERN_TYPE_Q5_K, 16},
    {KERN_TYPE_Q6_K, 18}, {KERN_TYPE_IQ4_XS, 30},
};

struct opts {
    const struct arch_row *arch;
    int64_t n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, ctx;
    int64_t shared_kv_layers;
    int64_t window, swa_period, head_dim_swa, n_head_kv_swa, ple; /* gemma */
    int64_t n_expert, n_expert_used, n_ff_exp, n_ff_shexp;       /* MoE */
    /* qwen35: Gated DeltaNet shape (key heads H_k, value heads H_v, head size, conv taps),
     * every full_attn_interval-th layer attention, RoPE on n_rot dims of a head */
    int64_t ssm_groups, ssm_heads, ssm_head_dim, ssm_conv, full_attn_interval, n_rot;
    const char *swa_flags; /* --swa-pattern as 0/1 per layer (gemma4) */
    float eot_scale;       /* --eot-scale: see add_tensor */
    bool swa[4096];        /* per layer, from the pattern */
    enum kern_type type;
    uint32_t ftype;
    bool tied;
    uint64_t seed;
    float rope_base, eps;
    const char *vocab_from, *out, *name;
    const struct chat_row *chat; /* --chat-template: the made-up vocabulary's last two
                                    tokens are its turn markers (CONTROL) and
                                    tokenizer.chat_template is set (harmony: none) */
};

static const struct chat_row {
    const char *name, *open, *close, *tmpl;
    const char *extra[6]; /* more markers, before the turn markers (USER_DEFINED, as Qwen3's
                             <think> and </think>; CONTROL with extra_control), NULL-ended */
    bool extra_control;
} chat_rows[] = {
    {"chatml", "<|im_start|>", "<|im_end|>",
     "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
     "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
     "{{ '<|im_start|>assistant\\n' }}{% endif %}", {NULL, NULL}, false},
    /* chatml with Qwen3's thinking: the marker <think> (engine/chat.h's qwen3 family) */
    {"qwen3", "<|im_start|>", "<|im_end|>",
     "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
     "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
     "{{ '<|im_start|>assistant\\n' }}{% if enable_thinking is defined and enable_thinking is "
     "false %}{{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}{% endif %}",
     {"<think>", "</think>"}, false},
    /* Qwen3.5's: its tool format's marker <function= (engine/chat.h's qwen35 family) */
    {"qwen35", "<|im_start|>", "<|im_end|>",
     "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
     "message['content'] | trim + '<|im_end|>' + '\\n'}}{% endfor %}{% if tools %}"
     "{{ '<function=example_function_name>' }}{% endif %}{% if add_generation_prompt %}"
     "{{ '<|im_start|>assistant\\n<think>\\n' }}{% endif %}",
     {"<think>", "</think>"}, false},
    /* the parts of Gemma 3's and Gemma 4's templates that name their turn markers */
    {"gemma", "<start_of_turn>", "<end_of_turn>",
     "{{ bos_token }}{% for message in messages %}{% set role = 'model' if message['role'] == "
     "'assistant' else message['role'] %}{{ '<start_of_turn>' + role + '\\n' + "
     "message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt "
     "%}{{ '<start_of_turn>model\\n' }}{% endif %}", {NULL, NULL}, false},
    {"gemma4", "<|turn>", "<turn|>",
     "{{- bos_token -}}{%- for message in messages -%}{%- set role = 'model' if message['role'] "
     "== 'assistant' else message['role'] -%}{{- '<|turn>' + role + '\\n' -}}{{- "
     "message['content'] | trim -}}{{- '<turn|>\\n' -}}{%- endfor -%}{%- if "
     "add_generation_prompt -%}{{- '<|turn>model\\n' -}}{%- endif -%}", {NULL, NULL}, false},
    /* gpt-oss's harmony control tokens (gpt-oss only: no template is written, the engine
     * speaks harmony by the architecture); <|return|> last, as the end of turn */
    {"harmony", "<|start|>", "<|return|>", NULL,
     {"<|channel|>", "<|message|>", "<|end|>", "<|call|>", "<|constrain|>", NULL}, true},
};

/* ---- deterministic random numbers ---------------------------------------------------- */

struct rng {
    uint64_t s;
};

static uint64_t rng_next(struct rng *r) { /* splitmix64 */
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static float rng_sym(struct rng *r) { return (float)(rng_next(r) >> 40) * (2.0f / 16777216.0f) - 1.0f; }

static struct rng rng_for(uint64_t seed, const char *name) {
    return (struct rng){hash64(name, strlen(name)) ^ (seed * 0xd1b54a32d192ed03ull)};
}

/* ---- tensors ------------------------------------------------------------------------- */

/* INIT_POST_NORM, INIT_QK_NORM and INIT_OUT_NORM are plain norms except in Gemma files,
 * where (as in ../shared/models/gemma/README.md) the post norms are about 4, the output
 * norm about 10, gemma4's Q/K norms d^-1/4 (its q.k is unscaled) and the embedding has
 * std 0.05: so that the tied embedding does not dominate the residual stream and greedy
 * output is not one token repeated. */
enum init { INIT_MATRIX, INIT_EMBED, INIT_NORM, INIT_BIAS, INIT_POST_NORM, INIT_QK_NORM,
            INIT_OUT_NORM,
            INIT_ROUTER, /* a MoE router: F32 (llama.cpp's quantizer keeps it so), logits of
                          * std about 3 so that routing is decisive */
            INIT_VEC,    /* a 1-D F32 vector dotted with the input: std 1/sqrt(n) */
            INIT_CONV,   /* ssm_conv1d: F32, std 1/sqrt(taps) */
            INIT_SSM_A,  /* ssm_a = -A, A uniform in [0.05, 1]: decaying heads */
};

/* Fills n values for a tensor whose rows have n_in inputs. */
static void init_values(const struct opts *o, float *x, int64_t n, int64_t n_in, enum init init,
                        struct rng *r) {
    int g = o->arch->gemma;
    /* uniform(-a, a) has std a / sqrt(3) */
    float a = init == INIT_MATRIX || init == INIT_VEC || init == INIT_CONV
                  ? sqrtf(3.0f / (float)n_in)
              : init == INIT_ROUTER ? 3.0f * sqrtf(3.0f / (float)n_in)
              : init == INIT_EMBED  ? (g ? 0.05f : 0.5f) * sqrtf(3.0f)
              : init == INIT_BIAS   ? 0.02f * sqrtf(3.0f)
              : init == INIT_SSM_A  ? 0.475f
                                    : 0.1f;
    float base = init == INIT_MATRIX || init == INIT_EMBED || init == INIT_BIAS ||
                         init == INIT_ROUTER || init == INIT_VEC || init == INIT_CONV
                     ? 0.0f
                 : init == INIT_SSM_A ? -0.525f
                                      : 1.0f;
    if (g && init == INIT_POST_NORM) base = 4.0f;
    if (g && init == INIT_OUT_NORM) base = 10.0f;
    if (g == 4 && init == INIT_QK_NORM) base = powf((float)n_in, -0.25f);
    if (base != 0.0f && init != INIT_SSM_A) a *= base;
    for (int64_t i = 0; i < n; i++) x[i] = base + a * rng_sym(r);
}

/* Generates, converts and adds one tensor of ne2 matrices (an experts' stack: ne2 > 1).
 * Matrices use o->type; norms, biases, routers and the conv F32. */
static int add_tensor3(struct gguf_writer *w, const struct opts *o, const char *name,
                       enum init init, int64_t ne0, int64_t ne1, int64_t ne2) {
    uint32_t n_dims = ne2 > 1                                                       ? 3
                      : ne1 > 1 || init == INIT_MATRIX || init == INIT_EMBED ? 2
                                                                                    : 1;
    enum kern_type type = init == INIT_MATRIX || init == INIT_EMBED ? o->type : KERN_TYPE_F32;
    if (is_gptoss(o->arch) && init == INIT_MATRIX && ne2 > 1) type = KERN_TYPE_MXFP4;
    const struct kern_type_traits *tr = kern_type_traits(type);
    int64_t n = ne0 * ne1 * ne2;
    if (ne0 % tr->blck_size != 0) {
        fprintf(stderr, "warm-mkmodel: %s: ne[0] = %" PRId64 " is not a multiple of %s's block "
                "size %" PRId64 "\n", name, ne0, tr->name, tr->blck_size);
        return ERR_INVALID;
    }
    float *x = malloc_array((size_t)n, sizeof *x);
    void *q = malloc_array((size_t)(n / tr->blck_size), tr->type_size);
    if (!x || !q) {
        free(x);
        free(q);
        return -ENOMEM;
    }
    struct rng r = rng_for(o->seed, name);
    init_values(o, x, n, ne0, init, &r);
    /* --eot-scale X: the chat template's end-of-turn token (the made-up vocabulary's last)
     * gets an embedding row X times larger; with the tied output its logit is X times
     * larger too, so greedy replies end within a few tokens (tests of the stop token) */
    if (o->eot_scale > 0 && o->chat && strcmp(name, "token_embd.weight") == 0)
        for (int64_t i = (o->n_vocab - 1) * ne0; i < n; i++) x[i] *= o->eot_scale;
    tr->from_f32(q, x, n);
    int rc = gguf_writer_add_tensor(w, name, type, n_dims, (int64_t[]){ne0, ne1, ne2}, q);
    if (rc < 0) fprintf(stderr, "warm-mkmodel: %s: %s\n", name, err_str(rc));
    free(x);
    free(q);
    return rc;
}

static int add_tensor(struct gguf_writer *w, const struct opts *o, const char *name,
                      enum init init, int64_t ne0, int64_t ne1) {
    return add_tensor3(w, o, name, init, ne0, ne1, 1);
}

/* Per-layer tensors in the order they are written; `when` selects by architecture (and,
 * in a hybrid, by the layer's kind: the attention's tensors only in attention layers). */
enum when {
    ALWAYS,
    ATTN,       /* an attention layer's (every layer but a hybrid's recurrent ones) */
    QKV_BIAS, QK_NORM,
    OWN,        /* not in gemma4's shared-KV layers */
    QK_NORM_OWN,
    GEMMA,      /* post-attention / post-FFN norms */
    PRE_FFN,    /* post_attention_norm: Gemma's post-attention norm, or qwen35's pre-FFN one */
    NOT_HYBRID, /* ffn_norm (qwen35 names its pre-FFN norm post_attention_norm) */
    GEMMA4,     /* layer_output_scale */
    PLE,        /* gemma4 per-layer embeddings (--ple > 0) */
    DENSE,      /* a dense FFN */
    MOE,        /* a mixture-of-experts FFN: router and experts */
    SHEXP,      /* its shared expert */
    REC,        /* a hybrid's Gated DeltaNet layer */
    REC_AB,     /* its ssm_beta and ssm_alpha (qwen35, qwen35moe) */
    REC_BA,     /* its fused ssm_ba (qwen3next): per key head its β rows, then its α rows */
    GPTOSS,     /* gpt-oss's sinks and output, router and expert biases */
};
enum dim { D_EMBD, D_Q, D_QG, D_KV, D_FF, D_HEAD, D_ONE, D_PLE, D_EXP, D_FF_EXP, D_FF_SH,
           D_CONV, D_INNER, D_SSM_HEADS, D_SSM_HEAD, D_SSM_K, D_SSM_BA, D_N_HEAD };

static const struct layer_row {
    const char *suffix;
    enum when when;
    enum init init;
    enum dim ne0, ne1, ne2; /* ne2: D_EXP for an experts' stack, else D_ONE */
} layer_rows[] = {
    {"attn_norm.weight", ALWAYS, INIT_NORM, D_EMBD, D_ONE, D_ONE},
    {"attn_q.weight", ATTN, INIT_MATRIX, D_EMBD, D_QG, D_ONE},
    {"attn_q.bias", QKV_BIAS, INIT_BIAS, D_Q, D_ONE, D_ONE},
    {"attn_k.weight", OWN, INIT_MATRIX, D_EMBD, D_KV, D_ONE},
    {"attn_k.bias", QKV_BIAS, INIT_BIAS, D_KV, D_ONE, D_ONE},
    {"attn_v.weight", OWN, INIT_MATRIX, D_EMBD, D_KV, D_ONE},
    {"attn_v.bias", QKV_BIAS, INIT_BIAS, D_KV, D_ONE, D_ONE},
    {"attn_q_norm.weight", QK_NORM, INIT_QK_NORM, D_HEAD, D_ONE, D_ONE},
    {"attn_k_norm.weight", QK_NORM_OWN, INIT_QK_NORM, D_HEAD, D_ONE, D_ONE},
    {"attn_output.weight", ATTN, INIT_MATRIX, D_Q, D_EMBD, D_ONE},
    {"attn_output.bias", GPTOSS, INIT_BIAS, D_EMBD, D_ONE, D_ONE},
    {"attn_sinks.weight", GPTOSS, INIT_NORM, D_N_HEAD, D_ONE, D_ONE}, /* about 1 */
    /* qwen35's Gated DeltaNet layer (notes/hybrid.md §A.3), llama.cpp's names */
    {"attn_qkv.weight", REC, INIT_MATRIX, D_EMBD, D_CONV, D_ONE},
    {"attn_gate.weight", REC, INIT_MATRIX, D_EMBD, D_INNER, D_ONE},
    {"ssm_beta.weight", REC_AB, INIT_MATRIX, D_EMBD, D_SSM_HEADS, D_ONE},
    {"ssm_alpha.weight", REC_AB, INIT_MATRIX, D_EMBD, D_SSM_HEADS, D_ONE},
    {"ssm_ba.weight", REC_BA, INIT_MATRIX, D_EMBD, D_SSM_BA, D_ONE},
    {"ssm_conv1d.weight", REC, INIT_CONV, D_SSM_K, D_CONV, D_ONE},
    {"ssm_dt.bias", REC, INIT_BIAS, D_SSM_HEADS, D_ONE, D_ONE},
    {"ssm_a", REC, INIT_SSM_A, D_SSM_HEADS, D_ONE, D_ONE},
    {"ssm_norm.weight", REC, INIT_NORM, D_SSM_HEAD, D_ONE, D_ONE},
    {"ssm_out.weight", REC, INIT_MATRIX, D_INNER, D_EMBD, D_ONE},
    {"post_attention_norm.weight", PRE_FFN, INIT_POST_NORM, D_EMBD, D_ONE, D_ONE},
    {"ffn_norm.weight", NOT_HYBRID, INIT_NORM, D_EMBD, D_ONE, D_ONE},
    {"ffn_gate.weight", DENSE, INIT_MATRIX, D_EMBD, D_FF, D_ONE},
    {"ffn_up.weight", DENSE, INIT_MATRIX, D_EMBD, D_FF, D_ONE},
    {"ffn_down.weight", DENSE, INIT_MATRIX, D_FF, D_EMBD, D_ONE},
    /* a mixture of experts (notes/hybrid.md §A.3, §C.1): stacks of n_expert matrices */
    {"ffn_gate_inp.weight", MOE, INIT_ROUTER, D_EMBD, D_EXP, D_ONE},
    {"ffn_gate_exps.weight", MOE, INIT_MATRIX, D_EMBD, D_FF_EXP, D_EXP},
    {"ffn_up_exps.weight", MOE, INIT_MATRIX, D_EMBD, D_FF_EXP, D_EXP},
    {"ffn_down_exps.weight", MOE, INIT_MATRIX, D_FF_EXP, D_EMBD, D_EXP},
    {"ffn_gate_inp.bias", GPTOSS, INIT_BIAS, D_EXP, D_ONE, D_ONE},
    {"ffn_gate_exps.bias", GPTOSS, INIT_BIAS, D_FF_EXP, D_EXP, D_ONE},
    {"ffn_up_exps.bias", GPTOSS, INIT_BIAS, D_FF_EXP, D_EXP, D_ONE},
    {"ffn_down_exps.bias", GPTOSS, INIT_BIAS, D_EMBD, D_EXP, D_ONE},
    {"ffn_gate_inp_shexp.weight", SHEXP, INIT_VEC, D_EMBD, D_ONE, D_ONE},
    {"ffn_gate_shexp.weight", SHEXP, INIT_MATRIX, D_EMBD, D_FF_SH, D_ONE},
    {"ffn_up_shexp.weight", SHEXP, INIT_MATRIX, D_EMBD, D_FF_SH, D_ONE},
    {"ffn_down_shexp.weight", SHEXP, INIT_MATRIX, D_FF_SH, D_EMBD, D_ONE},
    {"post_ffw_norm.weight", GEMMA, INIT_POST_NORM, D_EMBD, D_ONE, D_ONE},
    {"inp_gate.weight", PLE, INIT_MATRIX, D_EMBD, D_PLE, D_ONE},
    {"proj.weight", PLE, INIT_MATRIX, D_PLE, D_EMBD, D_ONE},
    {"post_norm.weight", PLE, INIT_POST_NORM, D_EMBD, D_ONE, D_ONE},
    {"layer_output_scale.weight", GEMMA4, INIT_NORM, D_ONE, D_ONE, D_ONE},
};

/* A hybrid's layer l is recurrent unless it is every full_attn_interval-th (llama.cpp's
 * rule for full_attention_interval: (l + 1) mod I != 0). */
static bool layer_rec(const struct opts *o, int64_t l) {
    return o->arch->hybrid && (l + 1) % o->full_attn_interval != 0;
}

/* Head size and KV heads of layer l: gemma4's SWA layers have their own. */
static int64_t layer_head_dim(const struct opts *o, int64_t l) {
    return o->arch->gemma == 4 && o->swa[l] ? o->head_dim_swa : o->head_dim;
}
static int64_t layer_n_head_kv(const struct opts *o, int64_t l) {
    return o->arch->gemma == 4 && o->swa[l] ? o->n_head_kv_swa : o->n_head_kv;
}

static int64_t dim_value(const struct opts *o, int64_t l, enum dim d) {
    const int64_t hd = layer_head_dim(o, l);
    const int64_t inner = o->ssm_heads * o->ssm_head_dim;
    const int64_t v[] = {
        [D_EMBD] = o->n_embd,           [D_Q] = o->n_head * hd,
        [D_QG] = o->n_head * hd * (o->arch->hybrid ? 2 : 1), /* with qwen35's output gate */
        [D_KV] = layer_n_head_kv(o, l) * hd, [D_FF] = o->n_ff,
        [D_HEAD] = hd,                  [D_ONE] = 1,
        [D_PLE] = o->ple,               [D_EXP] = o->n_expert,
        [D_FF_EXP] = o->n_ff_exp,       [D_FF_SH] = o->n_ff_shexp,
        [D_CONV] = 2 * o->ssm_groups * o->ssm_head_dim + inner, [D_INNER] = inner,
        [D_SSM_HEADS] = o->ssm_heads,   [D_SSM_HEAD] = o->ssm_head_dim,
        [D_SSM_K] = o->ssm_conv,        [D_SSM_BA] = 2 * o->ssm_heads,
        [D_N_HEAD] = o->n_head,
    };
    return v[d];
}

static bool row_applies(const struct opts *o, const struct layer_row *lr, int64_t l) {
    bool own = o->arch->gemma != 4 || l < o->n_layer - o->shared_kv_layers;
    bool attn = !layer_rec(o, l);
    switch (lr->when) { /* a mapping of selectors, not a type ladder */
    case ALWAYS: return true;
    case ATTN: return attn;
    case QKV_BIAS: return o->arch->qkv_bias && attn;
    case QK_NORM: return o->arch->qk_norm && attn;
    case OWN: return own && attn;
    case QK_NORM_OWN: return o->arch->qk_norm && own && attn;
    case GEMMA: return o->arch->gemma != 0;
    case PRE_FFN: return o->arch->gemma != 0 || o->arch->hybrid || is_gptoss(o->arch);
    case NOT_HYBRID: return !o->arch->hybrid && !is_gptoss(o->arch);
    case GEMMA4: return o->arch->gemma == 4;
    case PLE: return o->arch->gemma == 4 && o->ple > 0;
    case DENSE: return o->arch->ffn == FFN_DENSE;
    case MOE: return o->arch->ffn != FFN_DENSE;
    case SHEXP: return o->arch->ffn == FFN_MOE_SHARED;
    case REC: return !attn;
    case REC_AB: return !attn && !is_next(o->arch);
    case REC_BA: return !attn && is_next(o->arch);
    case GPTOSS: return is_gptoss(o->arch);
    }
    return false;
}

/* gemma4's rope_freqs.weight: the frequency divisors of the global layers' RoPE pairs,
 * all 1 (plain RoPE; llama.cpp requires the tensor as soon as a layer is global). */
static int add_rope_freqs(struct gguf_writer *w, const struct opts *o) {
    int64_t n = o->head_dim / 2;
    float *x = malloc_array((size_t)n, sizeof *x);
    if (!x) return -ENOMEM;
    for (int64_t i = 0; i < n; i++) x[i] = 1.0f;
    int r = gguf_writer_add_tensor(w, "rope_freqs.weight", KERN_TYPE_F32, 1, (int64_t[]){n, 1}, x);
    free(x);
    return r;
}

/* nomic-bert's tensors, in the converter's order (see the file comment). */
static int add_bert_tensors(struct gguf_writer *w, const struct opts *o) {
    const int64_t e = o->n_embd, ff = o->n_ff;
    int r = add_tensor(w, o, "token_embd.weight", INIT_EMBED, e, o->n_vocab);
    if (r >= 0) r = add_tensor(w, o, "token_types.weight", INIT_BIAS, e, 2); /* F32, small */
    if (r >= 0) r = add_tensor(w, o, "token_embd_norm.weight", INIT_NORM, e, 1);
    if (r >= 0) r = add_tensor(w, o, "token_embd_norm.bias", INIT_BIAS, e, 1);
    static const struct {
        const char *suffix;
        enum init init;
        int ne0, ne1; /* 0: n_embd, 1: n_ff, 2: 3 n_embd, 3: one */
    } rows[] = {
        {"attn_qkv.weight", INIT_MATRIX, 0, 2},      {"attn_output.weight", INIT_MATRIX, 0, 0},
        {"attn_output_norm.weight", INIT_NORM, 0, 3}, {"attn_output_norm.bias", INIT_BIAS, 0, 3},
        {"ffn_up.weight", INIT_MATRIX, 0, 1},        {"ffn_gate.weight", INIT_MATRIX, 0, 1},
        {"ffn_down.weight", INIT_MATRIX, 1, 0},      {"layer_output_norm.weight", INIT_NORM, 0, 3},
        {"layer_output_norm.bias", INIT_BIAS, 0, 3},
    };
    const int64_t dims[4] = {e, ff, 3 * e, 1};
    for (int64_t l = 0; r >= 0 && l < o->n_layer; l++)
        for (size_t k = 0; r >= 0 && k < ARRAY_SIZE(rows); k++) {
            char name[GGUF_MAX_NAME + 1];
            snprintf(name, sizeof name, "blk.%" PRId64 ".%s", l, rows[k].suffix);
            r = add_tensor(w, o, name, rows[k].init, dims[rows[k].ne0], dims[rows[k].ne1]);
        }
    return r;
}

static int add_tensors(struct gguf_writer *w, const struct opts *o) {
    if (is_bert(o->arch)) return add_bert_tensors(w, o);
    int r = add_tensor(w, o, "token_embd.weight", INIT_EMBED, o->n_embd, o->n_vocab);
    bool any_global = false;
    for (int64_t l = 0; l < o->n_layer; l++) any_global |= !o->swa[l];
    if (r >= 0 && o->arch->gemma == 4 && any_global) r = add_rope_freqs(w, o);
    if (r >= 0 && o->arch->gemma == 4 && o->ple > 0) {
        r = add_tensor(w, o, "per_layer_token_embd.weight", INIT_EMBED, o->n_layer * o->ple,
                       o->n_vocab);
        if (r >= 0)
            r = add_tensor(w, o, "per_layer_model_proj.weight", INIT_MATRIX, o->n_embd,
                           o->n_layer * o->ple);
        if (r >= 0) r = add_tensor(w, o, "per_layer_proj_norm.weight", INIT_NORM, o->ple, 1);
    }
    for (int64_t l = 0; r >= 0 && l < o->n_layer; l++) {
        for (size_t k = 0; r >= 0 && k < ARRAY_SIZE(layer_rows); k++) {
            const struct layer_row *lr = &layer_rows[k];
            if (!row_applies(o, lr, l)) continue;
            char name[GGUF_MAX_NAME + 1];
            snprintf(name, sizeof name, "blk.%" PRId64 ".%s", l, lr->suffix);
            r = add_tensor3(w, o, name, lr->init, dim_value(o, l, lr->ne0),
                            dim_value(o, l, lr->ne1), dim_value(o, l, lr->ne2));
        }
    }
    if (r >= 0) r = add_tensor(w, o, "output_norm.weight", INIT_OUT_NORM, o->n_embd, 1);
    if (r >= 0 && !o->tied) r = add_tensor(w, o, "output.weight", INIT_MATRIX, o->n_embd, o->n_vocab);
    return r;
}

/* ---- metadata ------------------------------------------------------------------------ */

static int add_arch_u32(struct gguf_writer *w, const struct opts *o, const char *key, int64_t v) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", o->arch->name, key);
    return gguf_writer_add_u32(w, k, (uint32_t)v);
}

static int add_arch_f32(struct gguf_writer *w, const struct opts *o, const char *key, float v) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", o->arch->name, key);
    return gguf_writer_add_f32(w, k, v);
}

static int add_arch_arr(struct gguf_writer *w, const struct opts *o, const char *key,
                        enum gguf_type type, const void *v) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", o->arch->name, key);
    return gguf_writer_add_arr(w, k, type, v, (uint64_t)o->n_layer);
}

/* The keys of notes/gemma.md §A.1 and §B.3 beyond the common ones. */
static int add_gemma_hparams(struct gguf_writer *w, const struct opts *o) {
    int r = 0;
    if (o->window > 0 || o->arch->gemma == 4) /* gemma4 requires the key */
        r = add_arch_u32(w, o, "attention.sliding_window", o->window);
    if (r >= 0 && o->arch->gemma == 3 && o->swa_period >= 0)
        r = add_arch_u32(w, o, "attention.sliding_window_pattern", o->swa_period);
    if (o->arch->gemma != 4) return r;
    bool flags[4096];
    int32_t kv[4096];
    for (int64_t l = 0; l < o->n_layer; l++) flags[l] = o->swa[l], kv[l] = (int32_t)layer_n_head_kv(o, l);
    if (r >= 0) r = add_arch_arr(w, o, "attention.sliding_window_pattern", GGUF_TYPE_BOOL, flags);
    if (r >= 0 && o->n_head_kv_swa != o->n_head_kv) /* an i32 array, as the converter writes it */
        r = add_arch_arr(w, o, "attention.head_count_kv", GGUF_TYPE_INT32, kv);
    if (r >= 0) r = add_arch_u32(w, o, "attention.key_length_swa", o->head_dim_swa);
    if (r >= 0) r = add_arch_u32(w, o, "attention.value_length_swa", o->head_dim_swa);
    if (r >= 0) r = add_arch_u32(w, o, "rope.dimension_count_swa", o->head_dim_swa);
    if (r >= 0) r = add_arch_f32(w, o, "rope.freq_base_swa", 10000.0f);
    if (r >= 0) r = add_arch_f32(w, o, "final_logit_softcapping", 30.0f);
    if (r >= 0) r = add_arch_u32(w, o, "embedding_length_per_layer_input", o->ple);
    return r;
}

/* A mixture of experts' keys (notes/hybrid.md §A.2, §C.2), as the converter writes them. */
static int add_moe_hparams(struct gguf_writer *w, const struct opts *o) {
    int r = add_arch_u32(w, o, "expert_count", o->n_expert);
    if (r >= 0) r = add_arch_u32(w, o, "expert_used_count", o->n_expert_used);
    if (r >= 0) r = add_arch_u32(w, o, "expert_feed_forward_length", o->n_ff_exp);
    if (r >= 0 && o->arch->ffn == FFN_MOE_SHARED)
        r = add_arch_u32(w, o, "expert_shared_feed_forward_length", o->n_ff_shexp);
    return r;
}

/* qwen35's keys (notes/hybrid.md §A.2): the Gated DeltaNet shape, the attention layers'
 * interval and the IMROPE sections (which reduce to NEOX for text). */
static int add_hybrid_hparams(struct gguf_writer *w, const struct opts *o) {
    int r = add_arch_u32(w, o, "ssm.conv_kernel", o->ssm_conv);
    if (r >= 0) r = add_arch_u32(w, o, "ssm.state_size", o->ssm_head_dim);
    if (r >= 0) r = add_arch_u32(w, o, "ssm.group_count", o->ssm_groups);
    if (r >= 0) r = add_arch_u32(w, o, "ssm.time_step_rank", o->ssm_heads);
    if (r >= 0) r = add_arch_u32(w, o, "ssm.inner_size", o->ssm_heads * o->ssm_head_dim);
    if (r >= 0) r = add_arch_u32(w, o, "full_attention_interval", o->full_attn_interval);
    if (r >= 0 && !is_next(o->arch)) { /* (qwen3next: plain NEOX, no sections) */
        /* the converter's default sections [11, 11, 10, 0] scaled to n_rot / 2 pairs */
        const int32_t h = (int32_t)(o->n_rot / 2), a = (h * 11 + 16) / 32, b = a;
        const int32_t sections[4] = {a, b, h - a - b, 0};
        char k[128];
        snprintf(k, sizeof k, "%s.rope.dimension_sections", o->arch->name);
        r = gguf_writer_add_arr(w, k, GGUF_TYPE_INT32, sections, 4);
    }
    return r;
}

/* nomic-bert's keys (see the file comment), as the converter writes them. */
static int add_bert_hparams(struct gguf_writer *w, const struct opts *o) {
    int r = add_arch_u32(w, o, "context_length", o->ctx);
    if (r >= 0) r = add_arch_u32(w, o, "embedding_length", o->n_embd);
    if (r >= 0) r = add_arch_u32(w, o, "feed_forward_length", o->n_ff);
    if (r >= 0) r = add_arch_u32(w, o, "block_count", o->n_layer);
    if (r >= 0) r = add_arch_u32(w, o, "attention.head_count", o->n_head);
    if (r >= 0) r = add_arch_u32(w, o, "pooling_type", 1); /* mean */
    if (r >= 0) r = add_arch_f32(w, o, "attention.layer_norm_epsilon", o->eps);
    if (r >= 0) {
        char k[128];
        snprintf(k, sizeof k, "%s.attention.causal", o->arch->name);
        r = gguf_writer_add_bool(w, k, false);
    }
    if (r >= 0) r = add_arch_f32(w, o, "rope.freq_base", o->rope_base);
    return r;
}

static int add_hparams(struct gguf_writer *w, const struct opts *o) {
    char name[128];
    snprintf(name, sizeof name, "warm-mkmodel %s", o->arch->name);
    int r = 0;
    if (r >= 0) r = gguf_writer_add_str(w, "general.architecture", o->arch->name);
    if (r >= 0) r = gguf_writer_add_str(w, "general.name", o->name ? o->name : name);
    /* gpt-oss: MOSTLY_MXFP4_MOE (its experts MXFP4, the rest --type) */
    if (r >= 0)
        r = gguf_writer_add_u32(w, "general.file_type", is_gptoss(o->arch) ? 38 : o->ftype);
    if (r >= 0 && kern_type_traits(o->type)->is_quantized)
        r = gguf_writer_add_u32(w, "general.quantization_version", 2);
    if (is_bert(o->arch)) return r >= 0 ? add_bert_hparams(w, o) : r;
    if (r >= 0) r = add_arch_u32(w, o, "context_length", o->ctx);
    if (r >= 0) r = add_arch_u32(w, o, "embedding_length", o->n_embd);
    if (r >= 0) r = add_arch_u32(w, o, "block_count", o->n_layer);
    if (r >= 0) r = add_arch_u32(w, o, "feed_forward_length", o->n_ff);
    if (r >= 0) r = add_arch_u32(w, o, "attention.head_count", o->n_head);
    if (r >= 0 && o->n_head_kv_swa == o->n_head_kv) /* else per layer: add_gemma_hparams */
        r = add_arch_u32(w, o, "attention.head_count_kv", o->n_head_kv);
    if (r >= 0) r = add_arch_u32(w, o, "attention.key_length", o->head_dim);
    if (r >= 0) r = add_arch_u32(w, o, "attention.value_length", o->head_dim);
    if (r >= 0) r = add_arch_u32(w, o, "rope.dimension_count", o->n_rot);
    if (r >= 0) r = add_arch_f32(w, o, "rope.freq_base", o->rope_base);
    if (r >= 0) r = add_arch_f32(w, o, "attention.layer_norm_rms_epsilon", o->eps);
    if (r >= 0) r = add_arch_u32(w, o, "vocab_size", o->n_vocab);
    if (r >= 0 && o->shared_kv_layers > 0)
        r = add_arch_u32(w, o, "attention.shared_kv_layers", o->shared_kv_layers);
    if (r >= 0 && o->arch->gemma) r = add_gemma_hparams(w, o);
    if (r >= 0 && o->arch->ffn != FFN_DENSE) r = add_moe_hparams(w, o);
    if (r >= 0 && is_gptoss(o->arch)) /* required; period 2 without a pattern key */
        r = add_arch_u32(w, o, "attention.sliding_window", o->window);
    if (r >= 0 && o->arch->hybrid) r = add_hybrid_hparams(w, o);
    return r;
}

/* SentencePiece-style made-up vocabulary: see the file comment. */
static int add_synthetic_vocab(struct gguf_writer *w, const struct opts *o) {
    size_t n = (size_t)o->n_vocab;
    struct gguf_str *toks = calloc_array(n, sizeof *toks);
    float *scores = calloc_array(n, sizeof *scores);
    int32_t *types = calloc_array(n, sizeof *types);
    char *pool = malloc_array(n, 16); /* every piece is at most 15 bytes */
    int r = -ENOMEM;
    if (!toks || !scores || !types || !pool) goto out;
    static const char *const specials[3] = {"<unk>", "<s>", "</s>"};
    static const int32_t special_types[3] = {2 /* UNKNOWN */, 3 /* CONTROL */, 3};
    size_t n_extra = 0;
    while (o->chat && n_extra < ARRAY_SIZE(o->chat->extra) && o->chat->extra[n_extra]) n_extra++;
    for (size_t i = 0; i < n; i++) {
        char *p = pool + 16 * i;
        if (i < 3) {
            snprintf(p, 16, "%s", specials[i]);
            types[i] = special_types[i];
        } else if (o->chat && i + 2 >= n) {
            snprintf(p, 16, "%s", i + 2 == n ? o->chat->open : o->chat->close);
            types[i] = 3; /* CONTROL */
        } else if (o->chat && i + 2 + n_extra >= n) {
            snprintf(p, 16, "%s", o->chat->extra[i + 2 + n_extra - n]);
            types[i] = o->chat->extra_control ? 3 /* CONTROL */ : 4 /* USER_DEFINED */;
        } else if (i < 259) {
            snprintf(p, 16, "<0x%02X>", (unsigned)(i - 3));
            types[i] = 6; /* BYTE */
        } else {
            /* pieces: "▁", the 94 printable ASCII characters, then "▁" + k lowercase
             * letters for k = 1, 2, ..., and k lowercase letters for k >= 2 (single
             * letters are among the printable characters): each index maps to one
             * distinct string */
            size_t j = i - 259;
            types[i] = 1; /* NORMAL */
            scores[i] = -(float)j;
            if (j == 0) {
                snprintf(p, 16, "\xe2\x96\x81");
                goto next;
            }
            j -= 1;
            if (j < 94) {
                snprintf(p, 16, "%c", (char)('!' + j));
                goto next;
            }
            j -= 94;
            size_t count = 26;
            for (int k = 1; k <= 10; k++, count *= 26) {
                size_t variants = k == 1 ? 1 : 2; /* with and without the space */
                if (j < variants * count) {
                    bool space = j < count;
                    size_t v = space ? j : j - count;
                    char *q = p;
                    if (space) q += snprintf(q, 16, "\xe2\x96\x81");
                    for (int c = k - 1; c >= 0; c--) {
                        q[c] = (char)('a' + v % 26);
                        v /= 26;
                    }
                    q[k] = 0;
                    break;
                }
                j -= variants * count;
            }
        }
    next:
        toks[i] = (struct gguf_str){strlen(p), p};
    }
    if ((r = gguf_writer_add_str(w, "tokenizer.ggml.model", "llama")) < 0) goto out;
    if ((r = gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", toks, n)) < 0) goto out;
    if ((r = gguf_writer_add_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, n)) < 0)
        goto out;
    if ((r = gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, n)) < 0)
        goto out;
    if ((r = gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 1)) < 0) goto out;
    if ((r = gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 2)) < 0) goto out;
    if ((r = gguf_writer_add_u32(w, "tokenizer.ggml.unknown_token_id", 0)) < 0) goto out;
    if ((r = gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", true)) < 0) goto out;
    r = gguf_writer_add_bool(w, "tokenizer.ggml.add_eos_token", false);
    if (r >= 0 && o->chat && o->chat->tmpl)
        r = gguf_writer_add_str(w, "tokenizer.chat_template", o->chat->tmpl);
out:
    free(toks);
    free(scores);
    free(types);
    free(pool);
    return r;
}

/* nomic-bert's WordPiece-like made-up vocabulary: see the file comment. */
static int add_bert_vocab(struct gguf_writer *w, const struct opts *o) {
    size_t n = (size_t)o->n_vocab;
    struct gguf_str *toks = calloc_array(n, sizeof *toks);
    int32_t *types = calloc_array(n, sizeof *types);
    char *pool = malloc_array(n, 16); /* every piece is at most 15 bytes */
    int r = -ENOMEM;
    if (!toks || !types || !pool) goto out;
    static const char *const specials[4] = {"[UNK]", "[CLS]", "[SEP]", "[MASK]"};
    for (size_t i = 0; i < n; i++) {
        char *p = pool + 16 * i;
        types[i] = 1; /* NORMAL */
        if (i == 0) {
            snprintf(p, 16, "[PAD]");
            types[i] = 3; /* CONTROL */
        } else if (i < 100) {
            snprintf(p, 16, "[unused%zu]", i - 1);
        } else if (i < 104) {
            snprintf(p, 16, "%s", specials[i - 100]);
            types[i] = 3;
        } else if (i < 104 + 94) {
            snprintf(p, 16, "%c", (char)('!' + (i - 104)));
        } else {
            /* "##" + k lowercase letters (k = 1, 2, ...), then k lowercase letters (k >= 2;
             * single letters are among the printable characters), k growing: each index
             * one distinct string */
            size_t j = i - (104 + 94), count = 26;
            for (int k = 1; k <= 6; k++, count *= 26) {
                size_t variants = k == 1 ? 1 : 2;
                if (j < variants * count) {
                    bool cont = j < count;
                    size_t v = cont ? j : j - count;
                    char *q = p;
                    if (cont) q += snprintf(q, 16, "##");
                    for (int c = k - 1; c >= 0; c--) {
                        q[c] = (char)('a' + v % 26);
                        v /= 26;
                    }
                    q[k] = 0;
                    break;
                }
                j -= variants * count;
            }
        }
        toks[i] = (struct gguf_str){strlen(p), p};
    }
    if ((r = gguf_writer_add_str(w, "tokenizer.ggml.model", "bert")) < 0) goto out;
    if ((r = gguf_writer_add_str(w, "tokenizer.ggml.pre", "bert-bge")) < 0) goto out;
    if ((r = gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", toks, n)) < 0) goto out;
    if ((r = gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, n)) < 0)
        goto out;
    if ((r = gguf_writer_add_u32(w, "tokenizer.ggml.token_type_count", 2)) < 0) goto out;
    if ((r = gguf_writer_add_u32(w, "tokenizer.ggml.unknown_token_id", 100)) < 0) goto out;
    if ((r = gguf_writer_add_u32(w, "tokenizer.ggml.seperator_token_id", 102)) < 0) goto out;
    if ((r = gguf_writer_add_u32(w, "tokenizer.ggml.padding_token_id", 0)) < 0) goto out;
    if ((r = gguf_writer_add_u32(w, "tokenizer.ggml.cls_token_id", 101)) < 0) goto out;
    r = gguf_writer_add_u32(w, "tokenizer.ggml.mask_token_id", 103);
out:
    free(toks);
    free(types);
    free(pool);
    return r;
}

/* n_vocab of a vocabulary file: its token count. */
static int vocab_count(const struct opts *o, const struct gguf_file *src, int64_t *ret) {
    const struct gguf_kv *tokens;
    struct err_detail d = {0};
    int r = gguf_get_arr(src, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &tokens, &d);
    if (r < 0) {
        fprintf(stderr, "warm-mkmodel: %s: %s\n", o->vocab_from, err_msg(&d, r));
        return r;
    }
    if (tokens->n < 1 || tokens->n > INT32_MAX) {
        fprintf(stderr, "warm-mkmodel: %s: %" PRIu64 " tokens\n", o->vocab_from, tokens->n);
        return ERR_INVALID;
    }
    *ret = (int64_t)tokens->n;
    return 0;
}

/* Copies every tokenizer.* pair of src. */
static int add_vocab_from(struct gguf_writer *w, const struct gguf_file *src) {
    for (uint64_t i = 0; i < gguf_n_kv(src); i++) {
        const struct gguf_kv *kv = gguf_kv_at(src, i);
        if (kv->key.len < 10 || memcmp(kv->key.ptr, "tokenizer.", 10) != 0) continue;
        int r = gguf_writer_add_kv(w, kv);
        if (r < 0) return r;
    }
    return 0;
}

/* ---- command line -------------------------------------------------------------------- */

static void usage(FILE *out) {
    fprintf(out,
            "usage: warm-mkmodel --arch llama|qwen2|qwen3|gemma3|gemma4|nomic-bert|qwen3moe|\n"
            "                           qwen35|qwen35moe|qwen3next|gpt-oss -o FILE\n"
            "       [options]\n"
            "  --n-embd N (128)  --n-layer N (2)  --n-head N (4)  --n-head-kv N (= n-head)\n"
            "  --head-dim N (n-embd / n-head)  --n-ff N (256)  --n-vocab N (512)  --ctx N (2048)\n"
            "  --type f32|f16|bf16|q8_0|q4_0|q4_1|q5_0|q5_1|iq4_nl|q2_K|q3_K|q4_K|q5_K|q6_K|iq4_xs\n"
            "         (f32; 256-value types need every matrix's n_in a multiple of 256)\n"
            "  --tied  --seed N (1)\n"
            "  --vocab-from FILE  --rope-base X  --eps X  --shared-kv-layers N  --name S\n"
            "  --chat-template chatml|qwen3|qwen35|gemma|gemma4|harmony (made-up vocabulary\n"
            "         only; harmony: gpt-oss's control tokens, no template)\n"
            "  --eot-scale X\n"
            "         (its end-of-turn token's embedding row x X: greedy replies end early)\n"
            "  gemma: --window N (512; 0 = no SWA)  --swa-pattern P|FLAGS (6; FLAGS: one 0/1 per\n"
            "         layer, 1 = SWA)\n"
            "         gemma4: --head-dim-swa N (= head-dim)  --n-head-kv-swa N (= n-head-kv)\n"
            "         --ple N (0)\n"
            "  qwen3moe, qwen35moe, gpt-oss: --experts N (8)  --experts-used K (2)\n"
            "         --n-ff-exp N (n-ff)\n"
            "         gpt-oss: --window N (512; even layers SWA)\n"
            "         qwen35moe: --n-ff-shexp N (n-ff)\n"
            "  qwen35, qwen35moe, qwen3next (MoE as qwen35moe): --ssm-groups H_k (2)\n"
            "         --ssm-heads H_v (2 H_k)\n"
            "         --ssm-head-dim N (32)  --ssm-conv K (4)  --full-attn-interval I (4)\n"
            "         --n-rot N (head-dim / 4)\n");
}

static bool parse_int(const char *s, int64_t min, int64_t max, int64_t *ret) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max) return false;
    *ret = v;
    return true;
}

static int parse_args(int argc, char **argv, struct opts *o) {
    enum { O_EMBD = 256, O_LAYER, O_HEAD, O_HEAD_KV, O_HEAD_DIM, O_FF, O_VOCAB, O_CTX, O_TYPE,
           O_TIED, O_SEED, O_VOCAB_FROM, O_ROPE, O_EPS, O_SHARED, O_NAME, O_ARCH, O_CHAT,
           O_WINDOW, O_SWA_PATTERN, O_HEAD_DIM_SWA, O_HEAD_KV_SWA, O_PLE, O_EOT_SCALE,
           O_EXPERTS, O_EXPERTS_USED, O_FF_EXP, O_FF_SH, O_SSM_GROUPS, O_SSM_HEADS,
           O_SSM_HEAD_DIM, O_SSM_CONV, O_ATTN_INTERVAL, O_N_ROT };
    static const struct option long_opts[] = {
        {"arch", 1, 0, O_ARCH},       {"n-embd", 1, 0, O_EMBD},     {"n-layer", 1, 0, O_LAYER},
        {"n-head", 1, 0, O_HEAD},     {"n-head-kv", 1, 0, O_HEAD_KV},
        {"head-dim", 1, 0, O_HEAD_DIM}, {"n-ff", 1, 0, O_FF},       {"n-vocab", 1, 0, O_VOCAB},
        {"ctx", 1, 0, O_CTX},         {"type", 1, 0, O_TYPE},       {"tied", 0, 0, O_TIED},
        {"seed", 1, 0, O_SEED},       {"vocab-from", 1, 0, O_VOCAB_FROM},
        {"rope-base", 1, 0, O_ROPE},  {"eps", 1, 0, O_EPS},
        {"shared-kv-layers", 1, 0, O_SHARED}, {"name", 1, 0, O_NAME},
        {"chat-template", 1, 0, O_CHAT},
        {"window", 1, 0, O_WINDOW},   {"swa-pattern", 1, 0, O_SWA_PATTERN},
        {"head-dim-swa", 1, 0, O_HEAD_DIM_SWA}, {"n-head-kv-swa", 1, 0, O_HEAD_KV_SWA},
        {"ple", 1, 0, O_PLE},         {"eot-scale", 1, 0, O_EOT_SCALE},
        {"experts", 1, 0, O_EXPERTS}, {"experts-used", 1, 0, O_EXPERTS_USED},
        {"n-ff-exp", 1, 0, O_FF_EXP}, {"n-ff-shexp", 1, 0, O_FF_SH},
        {"ssm-groups", 1, 0, O_SSM_GROUPS}, {"ssm-heads", 1, 0, O_SSM_HEADS},
        {"ssm-head-dim", 1, 0, O_SSM_HEAD_DIM}, {"ssm-conv", 1, 0, O_SSM_CONV},
        {"full-attn-interval", 1, 0, O_ATTN_INTERVAL}, {"n-rot", 1, 0, O_N_ROT},
        {"help", 0, 0, 'h'},          {0, 0, 0, 0},
    };
    *o = (struct opts){.n_embd = 128, .n_layer = 2, .n_head = 4, .n_ff = 256, .n_vocab = 512,
                       .ctx = 2048, .type = KERN_TYPE_F32, .seed = 1, .rope_base = NAN, .eps = NAN,
                       .window = 512, .swa_period = -1};
    const int64_t big = 1 << 20;
    int c;
    while ((c = getopt_long(argc, argv, "o:h", long_opts, NULL)) != -1) {
        int64_t v = 0;
        bool ok = true;
        switch (c) {
        case 'o': o->out = optarg; break;
        case 'h': usage(stdout); exit(0);
        case O_ARCH:
            for (size_t k = 0; k < ARRAY_SIZE(arch_rows); k++)
                if (strcmp(optarg, arch_rows[k].name) == 0) o->arch = &arch_rows[k];
            ok = o->arch != NULL;
            break;
        case O_EMBD: ok = parse_int(optarg, 1, big, &o->n_embd); break;
        case O_LAYER: ok = parse_int(optarg, 1, 4096, &o->n_layer); break;
        case O_HEAD: ok = parse_int(optarg, 1, 4096, &o->n_head); break;
        case O_HEAD_KV: ok = parse_int(optarg, 1, 4096, &o->n_head_kv); break;
        case O_HEAD_DIM: ok = parse_int(optarg, 1, 4096, &o->head_dim); break;
        case O_FF: ok = parse_int(optarg, 1, big, &o->n_ff); break;
        case O_VOCAB: ok = parse_int(optarg, 260, 1 << 22, &o->n_vocab); break;
        case O_CTX: ok = parse_int(optarg, 1, INT32_MAX, &o->ctx); break;
        case O_SHARED: ok = parse_int(optarg, 0, 4096, &o->shared_kv_layers); break;
        case O_SEED: ok = parse_int(optarg, 0, INT64_MAX, &v), o->seed = (uint64_t)v; break;
        case O_TYPE: {
            int t = kern_type_from_name(optarg);
            ok = false;
            for (size_t k = 0; k < ARRAY_SIZE(ftype_rows); k++)
                if (t >= 0 && (enum kern_type)t == ftype_rows[k].type) {
                    o->type = ftype_rows[k].type;
                    o->ftype = ftype_rows[k].ftype;
                    ok = true;
                }
            break;
        }
        case O_TIED: o->tied = true; break;
        case O_VOCAB_FROM: o->vocab_from = optarg; break;
        case O_ROPE: o->rope_base = strtof(optarg, NULL), ok = o->rope_base > 0; break;
        case O_EPS: o->eps = strtof(optarg, NULL), ok = o->eps > 0; break;
        case O_NAME: o->name = optarg; break;
        case O_CHAT:
            for (size_t k = 0; k < ARRAY_SIZE(chat_rows); k++)
                if (strcmp(optarg, chat_rows[k].name) == 0) o->chat = &chat_rows[k];
            ok = o->chat != NULL;
            break;
        case O_WINDOW: ok = parse_int(optarg, 0, INT32_MAX, &o->window); break;
        case O_SWA_PATTERN: /* a period or flags: resolved below, once n_layer is known */
            o->swa_flags = optarg;
            ok = strspn(optarg, "0123456789") == strlen(optarg) && *optarg;
            break;
        case O_HEAD_DIM_SWA: ok = parse_int(optarg, 1, 4096, &o->head_dim_swa); break;
        case O_HEAD_KV_SWA: ok = parse_int(optarg, 1, 4096, &o->n_head_kv_swa); break;
        case O_PLE: ok = parse_int(optarg, 0, 1 << 16, &o->ple); break;
        case O_EOT_SCALE: o->eot_scale = strtof(optarg, NULL), ok = o->eot_scale > 0; break;
        case O_EXPERTS: ok = parse_int(optarg, 1, 512, &o->n_expert); break;
        case O_EXPERTS_USED: ok = parse_int(optarg, 1, 512, &o->n_expert_used); break;
        case O_FF_EXP: ok = parse_int(optarg, 1, big, &o->n_ff_exp); break;
        case O_FF_SH: ok = parse_int(optarg, 1, big, &o->n_ff_shexp); break;
        case O_SSM_GROUPS: ok = parse_int(optarg, 1, 4096, &o->ssm_groups); break;
        case O_SSM_HEADS: ok = parse_int(optarg, 1, 4096, &o->ssm_heads); break;
        case O_SSM_HEAD_DIM: ok = parse_int(optarg, 1, 4096, &o->ssm_head_dim); break;
        case O_SSM_CONV: ok = parse_int(optarg, 1, 64, &o->ssm_conv); break;
        case O_ATTN_INTERVAL: ok = parse_int(optarg, 1, 4096, &o->full_attn_interval); break;
        case O_N_ROT: ok = parse_int(optarg, 2, 4096, &o->n_rot); break;
        default: ok = false; break;
        }
        if (!ok) {
            fprintf(stderr, "warm-mkmodel: bad value for option %s\n", argv[optind - 1]);
            return ERR_INVALID;
        }
    }
    if (!o->arch || !o->out || optind != argc) {
        usage(stderr);
        return ERR_INVALID;
    }
    if (!o->n_head_kv) o->n_head_kv = o->n_head;
    if (!o->head_dim) o->head_dim = o->n_embd / o->n_head;
    if (isnan(o->rope_base)) o->rope_base = o->arch->rope_base;
    if (isnan(o->eps)) o->eps = o->arch->eps;
    if (o->arch->gemma) o->tied = true; /* Gemma files carry no output.weight */
    if (!o->head_dim_swa) o->head_dim_swa = o->head_dim;
    const bool moe = o->arch->ffn != FFN_DENSE;
    if (!o->n_expert) o->n_expert = moe ? 8 : 0;
    if (!o->n_expert_used) o->n_expert_used = moe ? 2 : 0;
    if (!o->n_ff_exp) o->n_ff_exp = o->n_ff;
    if (!o->n_ff_shexp) o->n_ff_shexp = o->n_ff;
    if (!o->ssm_groups) o->ssm_groups = 2;
    if (!o->ssm_heads) o->ssm_heads = 2 * o->ssm_groups; /* v-head h reads k-head h mod H_k */
    if (!o->ssm_head_dim) o->ssm_head_dim = 32;
    if (!o->ssm_conv) o->ssm_conv = 4;
    if (!o->full_attn_interval) o->full_attn_interval = 4;
    if (!o->n_rot) o->n_rot = o->arch->hybrid ? o->head_dim / 4 : o->head_dim; /* 64 of 256 */
    if (!o->n_head_kv_swa) o->n_head_kv_swa = o->n_head_kv;
    /* --swa-pattern: n_layer (> 1) digits 0/1 are flags, anything else a period */
    if (o->swa_flags && !(o->n_layer > 1 && (int64_t)strlen(o->swa_flags) == o->n_layer &&
                          strspn(o->swa_flags, "01") == strlen(o->swa_flags))) {
        if (!parse_int(o->swa_flags, 0, 4096, &o->swa_period)) {
            fprintf(stderr, "warm-mkmodel: bad value for option --swa-pattern\n");
            return ERR_INVALID;
        }
        o->swa_flags = NULL;
    }
    /* layer l is SWA iff l mod P < P - 1 (llama.cpp's set_swa_pattern), or per flag */
    int64_t period = o->swa_period >= 0 ? o->swa_period : 6;
    for (int64_t l = 0; l < o->n_layer; l++)
        o->swa[l] = o->arch->gemma && o->window > 0 &&
                    (o->swa_flags ? o->swa_flags[l] == '1' : period == 0 || l % period < period - 1);
    const char *why = NULL;
    if (o->n_head % o->n_head_kv) why = "--n-head must be a multiple of --n-head-kv";
    else if (o->head_dim < 1) why = "--head-dim must be at least 1";
    else if (o->head_dim % 2) why = "--head-dim must be even (RoPE rotates pairs)";
    else if (!o->arch->free_head_dim && o->head_dim * o->n_head != o->n_embd)
        why = "this architecture needs head-dim * n-head == n-embd";
    else if (o->chat && !o->chat->tmpl && !is_gptoss(o->arch))
        why = "--chat-template harmony needs --arch gpt-oss (harmony has no template: the "
              "engine speaks it by the architecture)";
    else if (o->shared_kv_layers >= o->n_layer)
        why = "--shared-kv-layers must leave at least one layer that owns KV";
    else if (!o->arch->gemma && (o->swa_flags || o->swa_period >= 0 || o->ple))
        why = "--swa-pattern and --ple are for gemma3 and gemma4";
    else if (o->swa_flags && o->arch->gemma != 4)
        why = "--swa-pattern FLAGS (one 0/1 per layer): only gemma4 stores flags (gemma3: a period)";
    else if (o->head_dim_swa % 2 || o->n_head % o->n_head_kv_swa)
        why = "--head-dim-swa must be even and --n-head-kv-swa divide --n-head";
    else if (!moe && (o->n_expert || o->n_expert_used))
        why = "--experts and --experts-used are for qwen3moe, qwen35moe and gpt-oss";
    else if (o->n_expert_used > o->n_expert)
        why = "--experts-used must be at most --experts";
    else if (o->n_rot % 2 || o->n_rot > o->head_dim ||
             (!o->arch->hybrid && o->n_rot != o->head_dim))
        why = "--n-rot must be even, at most --head-dim, and equal to it but in qwen35/qwen35moe";
    else if (o->ssm_heads % o->ssm_groups)
        why = "--ssm-heads must be a multiple of --ssm-groups";
    if (why) {
        fprintf(stderr, "warm-mkmodel: %s\n", why);
        return ERR_INVALID;
    }
    return 0;
}

int main(int argc, char **argv) {
    struct opts o;
    if (parse_args(argc, argv, &o) < 0) return 2;
    struct gguf_writer *w = NULL;
    struct gguf_file *vocab = NULL;
    int r = gguf_writer_new(&w);
    if (r >= 0 && o.vocab_from) {
        struct err_detail d = {0};
        r = gguf_open(o.vocab_from, &vocab, &d);
        if (r < 0) fprintf(stderr, "warm-mkmodel: %s: %s\n", o.vocab_from, err_msg(&d, r));
    }
    if (r >= 0 && vocab) r = vocab_count(&o, vocab, &o.n_vocab);
    if (r >= 0) r = add_hparams(w, &o);
    if (r >= 0)
        r = vocab ? add_vocab_from(w, vocab)
            : is_bert(o.arch) ? add_bert_vocab(w, &o)
                              : add_synthetic_vocab(w, &o);
    if (r >= 0) r = add_tensors(w, &o);
    if (r >= 0) {
        r = gguf_writer_save(w, o.out);
        if (r < 0) fprintf(stderr, "warm-mkmodel: writing %s: %s\n", o.out, err_str(r));
    } else {
        fprintf(stderr, "warm-mkmodel: %s\n", err_str(r));
    }
    if (r >= 0)
        printf("wrote %s: %s, %" PRId64 " layers, n_embd %" PRId64 ", n_vocab %" PRId64
               ", %s weights, seed %" PRIu64 "\n", o.out, o.arch->name, o.n_layer, o.n_embd,
               o.n_vocab, kern_type_name(o.type), o.seed);
    gguf_writer_free(w);
    gguf_close(vocab);
    return r < 0 ? 1 : 0;
}
