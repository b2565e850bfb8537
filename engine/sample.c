/* Samplers: penalties, top-k, top-p, min-p, temperature, seeded draw (see sample.h). */
#include "engine/sample.h"
#include "engine/grammar.h"

#include <errno.h>
#include <math.h>
#include <string.h>

struct cand {
    int32_t id;
    float logit;
};

struct engine_sampler {
    struct engine_sampler_params p;
    int32_t n_vocab;
    float *work;      /* (n_vocab) logits after penalties */
    int32_t *count;   /* (n_vocab) occurrences in the window; zero between calls */
    struct cand *cand; /* (n_vocab) */
    int32_t *hist;    /* ring of the last penalty_last_n accepted tokens */
    int32_t n_hist, hist_at;
    uint64_t rng;
    /* the last draw's distribution */
    int32_t *last_ids;
    float *last_p;
    int32_t n_last;
    struct engine_grammar_matcher *grammar; /* borrowed, may be NULL */
    float *masked;                          /* (n_vocab) logits under the grammar's mask */
};

void engine_sampler_params_default(struct engine_sampler_params *p) {
    *p = (struct engine_sampler_params){
        .temperature = 0,
        .top_k = 0,
        .top_p = 1,
        .min_p = 0,
        .repeat_penalty = 1,
        .frequency_penalty = 0,
        .presence_penalty = 0,
        .penalty_last_n = 64,
        .seed = 0,
    };
}

void engine_sampler_free(struct engine_sampler *s) {
    if (!s) return;
    free(s->work);
    free(s->count);
    free(s->cand);
    free(s->hist);
    free(s->last_ids);
    free(s->last_p);
    free(s->masked);
    free(s);
}

int engine_sampler_new(const struct engine_sampler_params *p, int32_t n_vocab,
                       struct engine_sampler **ret) {
    if (n_vocab <= 0 || !p || p->penalty_last_n < 0 || !(p->repeat_penalty > 0) ||
        isnan(p->temperature) || isnan(p->top_p) || isnan(p->min_p) ||
        !isfinite(p->frequency_penalty) || !isfinite(p->presence_penalty))
        return ERR_INVALID;
    struct engine_sampler *s = calloc(1, sizeof *s);
    if (!s) return -ENOMEM;
    s->p = *p;
    s->n_vocab = n_vocab;
    s->work = malloc_array((size_t)n_vocab, sizeof *s->work);
    s->count = calloc_array((size_t)n_vocab, sizeof *s->count);
    s->cand = malloc_array((size_t)n_vocab, sizeof *s->cand);
    s->hist = malloc_array(p->penalty_last_n ? (size_t)p->penalty_last_n : 1, sizeof *s->hist);
    s->last_ids = malloc_array((size_t)n_vocab, sizeof *s->last_ids);
    s->last_p = malloc_array((size_t)n_vocab, sizeof *s->last_p);
    if (!s->work || !s->count || !s->cand || !s->hist || !s->last_ids || !s->last_p) {
        engine_sampler_free(s);
        return -ENOMEM;
    }
    engine_sampler_reset(s);
    *ret = s;
    return 0;
}

void engine_sampler_reset(struct engine_sampler *s) {
    s->n_hist = s->hist_at = 0;
    s->n_last = 0;
    s->rng = s->p.seed;
    if (s->grammar) engine_grammar_matcher_reset(s->grammar);
}

void engine_sampler_accept(struct engine_sampler *s, int32_t token) {
    if (s->p.penalty_last_n == 0 || token < 0 || token >= s->n_vocab) return;
    s->hist[s->hist_at] = token;
    s->hist_at = (s->hist_at + 1) % s->p.penalty_last_n;
    if (s->n_hist < s->p.penalty_last_n) s->n_hist++;
}

int engine_sampler_set_grammar(struct engine_sampler *s, struct engine_grammar_matcher *m) {
    if (m && engine_grammar_matcher_n_tokens(m) != s->n_vocab) return ERR_INVALID;
    if (m && !s->masked && !(s->masked = malloc_array((size_t)s->n_vocab, sizeof *s->masked)))
        return -ENOMEM;
    s->grammar = m;
    return 0;
}

int engine_sampler_accept_generated(struct engine_sampler *s, int32_t token, struct err_detail *d) {
    if (s->grammar) {
        int r = engine_grammar_matcher_accept(s->grammar, token, d);
        if (r < 0) return r;
    }
    engine_sampler_accept(s, token);
    return 0;
}

/* splitmix64: a small, well-mixed generator; the state is the seed advanced per draw */
static uint64_t rng_next(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* uniform in [0, 1) with 24 random bits */
static float rng_uniform(uint64_t *state) {
    return (float)(rng_next(state) >> 40) * (1.0f / 16777216.0f);
}

static bool penalties_on(const struct engine_sampler_params *p) {
    return p->penalty_last_n > 0 &&
           (p->repeat_penalty != 1 || p->frequency_penalty != 0 || p->presence_penalty != 0);
}

/* work = logits with the penalties of the tokens in the window applied */
static const float *penalties_apply(struct engine_sampler *s, const float *logits) {
    if (!penalties_on(&s->p) || s->n_hist == 0) return logits;
    memcpy(s->work, logits, (size_t)s->n_vocab * sizeof *s->work);
    for (int32_t i = 0; i < s->n_hist; i++) s->count[s->hist[i]]++;
    for (int32_t i = 0; i < s->n_hist; i++) {
        int32_t id = s->hist[i], c = s->count[id];
        if (c == 0) continue; /* already applied for this id */
        float l = s->work[id];
        if (s->p.repeat_penalty != 1) l = l > 0 ? l / s->p.repeat_penalty : l * s->p.repeat_penalty;
        l -= (float)c * s->p.frequency_penalty + s->p.presence_penalty;
        s->work[id] = l;
        s->count[id] = 0;
    }
    return s->work;
}

/* Orders by logit, higher first; ties by lower id, so the order is total. */
static int cand_cmp(const void *a, const void *b) {
    const struct cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static bool cand_before(const struct cand *x, const struct cand *y) {
    return cand_cmp(x, y) < 0;
}

/* Moves the m best of c[0..n) to the front, sorted (quickselect, then a sort of m). */
static void cand_top(struct cand *c, int32_t n, int32_t m) {
    if (m < n) {
        int32_t lo = 0, hi = n - 1;
        while (lo < hi) {
            struct cand pivot = c[lo + (hi - lo) / 2];
            int32_t i = lo, j = hi;
            while (i <= j) {
                while (cand_before(&c[i], &pivot)) i++;
                while (cand_before(&pivot, &c[j])) j--;
                if (i <= j) {
                    struct cand t = c[i];
                    c[i++] = c[j];
                    c[j--] = t;
                }
            }
            if (m - 1 <= j)
                hi = j;
            else if (m - 1 >= i)
                lo = i;
            else
                break;
        }
    }
    qsort(c, (size_t)m, sizeof *c, cand_cmp);
}

static int32_t argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* Whether a draw is possible at all: every logit finite or -inf (a token ruled out), at
 * least one finite. A NaN or +inf from the model means broken weights or an overflow in
 * the forward pass; no token means anything then, so it is an error, not a guess. The
 * penalties (finite parameters, but products may overflow) are checked the same way. */
static int logits_check(const struct engine_sampler *s, const float *logits, const float *l,
                        struct err_detail *d) {
    int32_t n_finite = 0;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        if (isnan(logits[i]) || logits[i] == INFINITY)
            return err_set(d, -EDOM,
                           "logits contain %s at token %d: the model produced non-finite values",
                           isnan(logits[i]) ? "NaN" : "+inf", i);
        if (isnan(l[i]) || l[i] == INFINITY)
            return err_set(d, -EDOM, "the penalties turned the logit %g of token %d into %s",
                           (double)logits[i], i, isnan(l[i]) ? "NaN" : "+inf");
        n_finite += isfinite(l[i]);
    }
    if (n_finite == 0)
        return err_set(d, -EDOM, "every logit is -inf%s: no token can be drawn",
                       l != logits ? " after the penalties" : "");
    return 0;
}

int engine_sampler_sample(struct engine_sampler *s, const float *logits, struct err_detail *d) {
    const struct engine_sampler_params *p = &s->p;
    if (s->grammar) {
        /* the mask first: the penalties and filters then only see allowed tokens */
        memcpy(s->masked, logits, (size_t)s->n_vocab * sizeof *s->masked);
        s->n_last = 0;
        int r = engine_grammar_matcher_mask(s->grammar, s->masked, d);
        if (r < 0) return r;
        logits = s->masked;
    }
    const float *l = penalties_apply(s, logits);
    s->n_last = 0;
    int bad = logits_check(s, logits, l, d);
    if (bad < 0) return bad;
    /* From here every value is finite or -inf and the best is finite, so each filter
     * below keeps at least the best candidate. */
    if (p->temperature <= 0 || p->top_k == 1) return argmax(l, s->n_vocab);

    struct cand *c = s->cand;
    int32_t n = s->n_vocab, n_sorted = 0;
    for (int32_t i = 0; i < n; i++) c[i] = (struct cand){i, l[i]};

    if (p->top_k > 0 && p->top_k < n) {
        cand_top(c, n, p->top_k);
        n = n_sorted = p->top_k;
    }
    if (p->top_p < 1) {
        /* sort a growing prefix until it holds mass top_p (most of the mass sits in few
         * tokens, so the full vocabulary is rarely sorted) */
        int32_t m = MIN(n, 64);
        double total = -1;
        for (;;) {
            if (m > n_sorted) {
                cand_top(c, n, m);
                n_sorted = m;
            }
            float max = c[0].logit;
            if (total < 0) {
                total = 0;
                for (int32_t i = 0; i < n; i++) total += exp((double)(c[i].logit - max));
            }
            double cum = 0;
            int32_t keep = -1;
            for (int32_t i = 0; i < m; i++) {
                cum += exp((double)(c[i].logit - max)) / total;
                if (cum >= p->top_p) {
                    keep = i + 1;
                    break;
                }
            }
            if (keep > 0) {
                n = keep;
                break;
            }
            if (m == n) break;
            m = (int32_t)MIN((int64_t)n, (int64_t)m * 8);
        }
    }
    if (p->min_p > 0) {
        /* p_i >= min_p · p_max  <=>  logit_i >= max_logit + ln(min_p) */
        float max = c[0].logit;
        for (int32_t i = 1; i < n; i++) max = c[i].logit > max ? c[i].logit : max;
        /* min_p is clamped to 1 so that floor_ <= max: the max always stays */
        float floor_ = max + logf(MIN(p->min_p, 1.0f));
        int32_t k = 0;
        for (int32_t i = 0; i < n; i++)
            if (c[i].logit >= floor_) c[k++] = c[i];
        n = k;
    }

    /* temperature, softmax over the survivors, and the draw */
    float max = c[0].logit;
    for (int32_t i = 1; i < n; i++) max = c[i].logit > max ? c[i].logit : max;
    double total = 0;
    for (int32_t i = 0; i < n; i++) {
        /* a -inf distance (a ruled-out token, or one too far below to represent) has no
         * mass at any temperature (-inf / inf would be NaN) */
        float z = c[i].logit - max, e = z == -INFINITY ? 0 : expf(z / p->temperature);
        s->last_p[i] = e;
        s->last_ids[i] = c[i].id;
        total += e;
    }
    for (int32_t i = 0; i < n; i++) s->last_p[i] = (float)(s->last_p[i] / total);
    s->n_last = n;
    float r = rng_uniform(&s->rng), cum = 0;
    for (int32_t i = 0; i < n; i++) {
        cum += s->last_p[i];
        if (r < cum) return s->last_ids[i];
    }
    /* rounding left r above the total: the last candidate with any mass (the max has 1) */
    int32_t last = n - 1;
    while (last > 0 && !(s->last_p[last] > 0)) last--;
    return s->last_ids[last];
}

int32_t engine_sampler_last_probs(const struct engine_sampler *s, const int32_t **ret_ids,
                                  const float **ret_p) {
    *ret_ids = s->last_ids;
    *ret_p = s->last_p;
    return s->n_last;
}
