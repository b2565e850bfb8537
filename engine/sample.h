/* sample — choosing the next token from logits.
 *
 * The chain (llama.cpp's default order): penalties over the recent tokens (repetition,
 * frequency, presence) -> top-k -> top-p -> min-p -> temperature -> a draw from the
 * seeded generator. temperature <= 0 is greedy: the argmax after the penalties (ties go
 * to the lowest id). The same parameters, seed and accepted tokens give the same output.
 *
 * A sampler owns its scratch (sized for n_vocab at creation; sampling allocates nothing)
 * and its history; one thread at a time. */
#pragma once

#include "base/base.h"

struct engine_sampler_params {
    float temperature;       /* <= 0: greedy */
    int32_t top_k;           /* <= 0: off */
    float top_p;             /* >= 1: off; keep the smallest set with mass >= top_p */
    float min_p;             /* <= 0: off; keep p >= min_p · p_max */
    float repeat_penalty;    /* 1: off; logit / penalty if > 0, else · penalty */
    float frequency_penalty; /* 0: off; logit -= count · frequency_penalty */
    float presence_penalty;  /* 0: off; logit -= presence_penalty if count > 0 */
    int32_t penalty_last_n;  /* tokens of history the penalties look at; 0 = none */
    uint64_t seed;
};

/* Greedy, no penalties, penalty window 64, seed 0. */
void engine_sampler_params_default(struct engine_sampler_params *p);

struct engine_sampler;

int engine_sampler_new(const struct engine_sampler_params *p, int32_t n_vocab,
                       struct engine_sampler **ret);
void engine_sampler_free(struct engine_sampler *s);
/* Forgets the history and re-seeds the generator with the seed it was made with. */
void engine_sampler_reset(struct engine_sampler *s);
/* Records a token (prompt or generated) in the penalty history. */
void engine_sampler_accept(struct engine_sampler *s, int32_t token);
/* Picks a token from n_vocab logits (not modified); does not accept it. Returns the token
 * id (>= 0), or -EDOM when no draw is meaningful: a logit is NaN or +inf (the model
 * produced non-finite values), the penalties made one so, or every logit is -inf; d (may
 * be NULL) then names the token. -inf marks a token that is ruled out. */
int engine_sampler_sample(struct engine_sampler *s, const float *logits, struct err_detail *d);

/* The distribution the last non-greedy sample drew from: *ret_ids / *ret_p point at n
 * (id, probability) pairs (the survivors of the filters, in the order the draw walked
 * them), valid until the next call. Returns n (0 after a greedy sample). */
int32_t engine_sampler_last_probs(const struct engine_sampler *s, const int32_t **ret_ids,
                                  const float **ret_p);
