/* moe — a router's arithmetic (see moe.h). */
#include "engine/moe.h"

#include <math.h>

/* llama.cpp's clamp of the weights' sum before the division: the smallest normal f16 */
#define MOE_SUM_MIN 6.103515625e-5f

struct moe_route_params moe_route_params_of(const struct engine_hparams *hp) {
    return (struct moe_route_params){.gating = hp->moe_gating, .norm_w = hp->moe_norm_w,
                                     .w_scale = hp->moe_w_scale,
                                     .n_expert = (int32_t)hp->n_expert,
                                     .n_used = (int32_t)hp->n_expert_used};
}

/* ids[0..k) = the indices of the k largest of x[0..n), largest first, ties to the lower
 * index: k passes over x (k is small: 1..16 in shipped models). */
static void top_k(int32_t *ids, const float *x, int32_t n, int32_t k) {
    for (int32_t j = 0; j < k; j++) {
        int32_t best = -1;
        for (int32_t i = 0; i < n; i++) {
            bool taken = false;
            for (int32_t q = 0; q < j && !taken; q++) taken = ids[q] == i;
            if (!taken && (best < 0 || x[i] > x[best])) best = i;
        }
        ids[j] = best;
    }
}

/* x[0..n) = softmax(x) in place, over the n values */
static void softmax(float *x, int32_t n) {
    float max = x[0], sum = 0;
    for (int32_t i = 1; i < n; i++) max = fmaxf(max, x[i]);
    for (int32_t i = 0; i < n; i++) sum += x[i] = expf(x[i] - max);
    for (int32_t i = 0; i < n; i++) x[i] /= sum;
}

void moe_route_token(int32_t *ids, float *w, const float *logits,
                     const struct moe_route_params *p) {
    const int32_t n = p->n_expert, k = p->n_used;
    if (p->gating == ENGINE_MOE_SOFTMAX) {
        /* the probabilities of every expert, then the top k of them */
        float prob[ENGINE_MAX_EXPERTS];
        for (int32_t i = 0; i < n; i++) prob[i] = logits[i];
        softmax(prob, n);
        top_k(ids, prob, n, k);
        for (int32_t j = 0; j < k; j++) w[j] = prob[ids[j]];
    } else {
        /* the top k logits, a softmax over them alone */
        top_k(ids, logits, n, k);
        for (int32_t j = 0; j < k; j++) w[j] = logits[ids[j]];
        softmax(w, k);
    }
    if (p->norm_w) {
        float sum = 0;
        for (int32_t j = 0; j < k; j++) sum += w[j];
        sum = fmaxf(sum, MOE_SUM_MIN);
        for (int32_t j = 0; j < k; j++) w[j] /= sum;
    }
    if (p->w_scale != 0 && p->w_scale != 1)
        for (int32_t j = 0; j < k; j++) w[j] *= p->w_scale;
}
