/* sample — choosing the next token from logits.
 *
 * The chain (llama.cpp's default order): penalties over the recent tokens (repetition,
 * frequency, presence) -> top-k -> top-p -> min-p -> temperature -> a draw from the
 * seeded generator. temperature <= 0 is greedy: the argmax after the penalties (ties go
 * to the lowest id). The same parameters, seed and accepted tokens give the same output.
 *
 * A sampler owns its scratch (sized for n_vocab at creation; sampling allocates nothing)
 * and its history; one thread at a time.
 *
 * Constrained decoding: with a grammar matcher set (engine_sampler_set_grammar), sampling
 * first rules out every token the grammar does not allow next (they get -inf, then the
 * chain runs as usual), and engine_sampler_accept_generated() advances the grammar over
 * each generated token. Prompt tokens go through engine_sampler_accept(), which never
 * touches the grammar. */
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
struct engine_grammar_matcher;

int engine_sampler_new(const struct engine_sampler_params *p, int32_t n_vocab,
                       struct engine_sampler **ret);
void engine_sampler_free(struct engine_sampler *s);
/* Forgets the history and re-seeds the generator with the seed it was made with; a grammar
 * matcher, if set, goes back to the start of its grammar. */
void engine_sampler_reset(struct engine_sampler *s);
/* Records a token (prompt or generated) in the penalty history. Never advances the
 * grammar: for generated tokens under a grammar use engine_sampler_accept_generated(). */
void engine_sampler_accept(struct engine_sampler *s, int32_t token);
/* Constrains sampling with m (borrowed: it must outlive the sampler or be unset; NULL
 * unsets), whose vocabulary must have the sampler's n_vocab tokens (ERR_INVALID if not).
 * Allocates the masking scratch (-ENOMEM). */
int engine_sampler_set_grammar(struct engine_sampler *s, struct engine_grammar_matcher *m);
/* Records a generated token: the penalty history, as engine_sampler_accept(), and, with a
 * grammar set, advances the grammar over it (an end-of-generation token ends it). Returns
 * 0, or the grammar's ERR_GRAMMAR_TOKEN / ERR_TOKEN (nothing recorded, d says why) for a
 * token the grammar does not allow. */
int engine_sampler_accept_generated(struct engine_sampler *s, int32_t token, struct err_detail *d);
/* Picks a token from n_vocab logits (not modified); does not accept it. Returns the token
 * id (>= 0), or -EDOM when no draw is meaningful: a logit is NaN or +inf (the model
 * produced non-finite values), the penalties made one so, or every logit is -inf; d (may
 * be NULL) then names the token. -inf marks a token that is ruled out. With a grammar,
 * only tokens it allows can be drawn, and its errors pass through: ERR_GRAMMAR_STUCK when
 * no token of the vocabulary can continue the output, ERR_GRAMMAR_TOKEN after the output
 * ended, ERR_TOO_LARGE / -ENOMEM when the matcher ran out of room. */
int engine_sampler_sample(struct engine_sampler *s, const float *logits, struct err_detail *d);

/* The distribution the last non-greedy sample drew from: *ret_ids / *ret_p point at n
 * (id, probability) pairs (the survivors of the filters, in the order the draw walked
 * them), valid until the next call. Returns n (0 after a greedy sample). */
int32_t engine_sampler_last_probs(const struct engine_sampler *s, const int32_t **ret_ids,
                                  const float **ret_p);
