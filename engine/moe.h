/* moe — private to the engine: a mixture-of-experts router's arithmetic (notes/hybrid.md
 * §A.7, §C), the plain-C spec that every device's moe_route (engine/exec.h) follows:
 * from one token's router logits, its n_used experts and their weights.
 *
 * The gatings are llama.cpp's build_moe_ffn: softmax over all experts then the top n_used
 * probabilities (qwen3moe, qwen35moe; gemma4), or the top n_used logits then a softmax
 * over those (gpt-oss); then, as the arch says, the weights renormalised to sum 1 (the sum
 * clamped at 2^-14, the smallest normal f16, as llama.cpp) and scaled. Ties go to the
 * lower expert index. No allocation; thread-safe. */
#pragma once

#include "engine/model.h"

struct moe_route_params {
    enum engine_moe_gating gating;
    bool norm_w;
    float w_scale;      /* 0 or 1: none */
    int32_t n_expert;   /* logits a token */
    int32_t n_used;     /* experts a token, 1..n_expert */
};

/* The router of m's hparams. */
struct moe_route_params moe_route_params_of(const struct engine_hparams *hp);

/* One token: ids[0..n_used) its experts (best first) and w[0..n_used) their weights, from
 * logits[0..n_expert). */
void moe_route_token(int32_t *ids, float *w, const float *logits,
                     const struct moe_route_params *p);
