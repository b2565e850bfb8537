/* warm-grammar-bench: the cost of constrained decoding per token.
 *
 *   warm-grammar-bench [VOCAB.gguf ...]
 *
 * Joins the vocabularies given (default: deepseek-llm and gpt-2 from the shared models,
 * 102,400 + 50,257 = 152,657 tokens, the size of Qwen's) into one token table, then for a
 * JSON Schema of a typical tool call and for JSON-object mode generates a few hundred
 * tokens: random logits, the grammar's mask, the highest allowed token, accept. The first
 * pass starts with cold caches (every new parser state walks the vocabulary trie), the
 * second repeats the same tokens with warm ones. Prints microseconds per token for mask
 * and accept; compare with a decode step (about 10 ms for a 7B model on a fast CPU: the
 * grammar should stay well under 1 ms). */
#include "engine/engine.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char tool_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"location\":{\"type\":\"string\",\"description\":\"city and country\"},"
    "\"unit\":{\"enum\":[\"celsius\",\"fahrenheit\"]},"
    "\"days\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":14},"
    "\"hourly\":{\"type\":\"boolean\"},"
    "\"fields\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":24},"
    "\"maxItems\":8},"
    "\"at\":{\"type\":\"object\",\"properties\":{"
    "\"lat\":{\"type\":\"number\",\"minimum\":-90,\"maximum\":90},"
    "\"lon\":{\"type\":\"number\",\"minimum\":-180,\"maximum\":180}},"
    "\"required\":[\"lat\",\"lon\"],\"additionalProperties\":false},"
    "\"note\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]}},"
    "\"required\":[\"location\",\"unit\",\"days\",\"fields\",\"at\",\"note\"],"
    "\"additionalProperties\":false}";

struct table {
    int32_t n;
    const char **piece;
    size_t *len;
    int32_t *eog;
    size_t n_eog;
    struct engine_vocab *vocab[8];
    int n_vocab;
};

static int table_add(struct table *t, const char *path) {
    struct gguf_file *f = NULL;
    struct err_detail d = {0};
    int r = gguf_open(path, &f, &d);
    if (r < 0) {
        fprintf(stderr, "%s: %s\n", path, err_msg(&d, r));
        return r;
    }
    struct engine_vocab *v = NULL;
    r = engine_vocab_load(f, &v, &d);
    gguf_close(f);
    if (r < 0) {
        fprintf(stderr, "%s: %s\n", path, err_msg(&d, r));
        return r;
    }
    int32_t n = engine_vocab_n_tokens(v), base = t->n;
    const char **piece = realloc(t->piece, (size_t)(base + n) * sizeof *piece);
    if (piece) t->piece = piece;
    size_t *len = realloc(t->len, (size_t)(base + n) * sizeof *len);
    if (len) t->len = len;
    int32_t *eog = realloc(t->eog, (size_t)(base + n) * sizeof *eog);
    if (eog) t->eog = eog;
    if (!piece || !len || !eog || t->n_vocab == 8) {
        engine_vocab_free(v);
        return -1;
    }
    for (int32_t i = 0; i < n; i++) {
        t->piece[base + i] = engine_vocab_piece_view(v, i, 0, &t->len[base + i]);
        if (!t->piece[base + i]) t->len[base + i] = 0;
        if (engine_vocab_is_eog(v, i)) t->eog[t->n_eog++] = base + i;
    }
    t->n += n;
    t->vocab[t->n_vocab++] = v;
    printf("vocabulary %s: %d tokens\n", path, n);
    return 0;
}

static uint64_t rng;
static float rng_float(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)(rng >> 40) / 16777216.0f;
}

struct pass {
    int tokens;
    uint64_t mask_usec, accept_usec, mask_max_usec;
    size_t out_bytes;
};

/* One generation: up to max_tokens, closers favoured after wander tokens. */
static int run(struct engine_grammar_matcher *m, const struct table *t, float *l,
               const uint8_t *closer, int wander, int max_tokens, struct pass *p) {
    *p = (struct pass){0};
    rng = 0x9e3779b97f4a7c15ull;
    engine_grammar_matcher_reset(m);
    for (int step = 0; step < max_tokens; step++) {
        for (int32_t i = 0; i < t->n; i++)
            l[i] = rng_float() * 10 + (step >= wander && closer[i] ? 100 * closer[i] : 0);
        struct err_detail d = {0};
        uint64_t t0 = time_now_usec();
        int r = engine_grammar_matcher_mask(m, l, &d);
        uint64_t t1 = time_now_usec();
        if (r < 0) {
            fprintf(stderr, "mask: %s\n", err_msg(&d, r));
            return r;
        }
        int32_t best = 0;
        for (int32_t i = 1; i < t->n; i++)
            if (l[i] > l[best]) best = i;
        uint64_t t2 = time_now_usec();
        r = engine_grammar_matcher_accept(m, best, &d);
        uint64_t t3 = time_now_usec();
        if (r < 0) {
            fprintf(stderr, "accept: %s\n", err_msg(&d, r));
            return r;
        }
        p->mask_usec += t1 - t0;
        p->mask_max_usec = MAX(p->mask_max_usec, t1 - t0);
        p->accept_usec += t3 - t2;
        p->tokens++;
        p->out_bytes += t->len[best];
        if (closer[best] == 10) return 0; /* end of generation */
    }
    return 0;
}

static int bench(const char *name, const char *schema, const struct table *t,
                 const struct engine_grammar_vocab *gv, float *l, const uint8_t *closer) {
    struct engine_grammar *g = NULL;
    struct engine_grammar_matcher *m = NULL;
    struct err_detail d = {0};
    uint64_t t0 = time_now_usec();
    int r = engine_grammar_from_schema(schema, strlen(schema), &g, &d);
    uint64_t t1 = time_now_usec();
    if (r < 0) {
        fprintf(stderr, "%s: %s\n", name, err_msg(&d, r));
        return r;
    }
    if ((r = engine_grammar_matcher_new(g, gv, &m)) < 0) {
        engine_grammar_free(g);
        return r;
    }
    printf("\n%s: schema compiled in %.2f ms\n", name, (double)(t1 - t0) / 1000);
    for (int k = 0; k < 2 && r >= 0; k++) {
        struct pass p;
        if ((r = run(m, t, l, closer, 250, 600, &p)) < 0) break;
        printf("  %s caches: %d tokens (%zu bytes): mask %.1f us/token (max %.0f us), "
               "accept %.2f us/token, together %.1f us/token\n",
               k ? "warm" : "cold", p.tokens, p.out_bytes, (double)p.mask_usec / p.tokens,
               (double)p.mask_max_usec, (double)p.accept_usec / p.tokens,
               (double)(p.mask_usec + p.accept_usec) / p.tokens);
    }
    engine_grammar_matcher_free(m);
    engine_grammar_free(g);
    return r;
}

int main(int argc, char **argv) {
    struct table t = {0};
    int r = 0;
    if (argc > 1) {
        for (int i = 1; i < argc && r >= 0; i++) r = table_add(&t, argv[i]);
    } else {
        const char *dir = getenv("WARM_SHARED_MODELS");
        char path[4096];
        static const char *const files[] = {"vocab/ggml-vocab-deepseek-llm.gguf",
                                            "vocab/ggml-vocab-gpt-2.gguf"};
        for (size_t i = 0; i < ARRAY_SIZE(files) && r >= 0; i++) {
            snprintf(path, sizeof path, "%s/%s", dir ? dir : "../shared/models", files[i]);
            r = table_add(&t, path);
        }
    }
    if (r < 0 || !t.n) {
        fprintf(stderr, "usage: warm-grammar-bench [VOCAB.gguf ...] (default: deepseek-llm and "
                        "gpt-2 under $WARM_SHARED_MODELS)\n");
        return 1;
    }
    struct engine_grammar_vocab *gv = NULL;
    uint64_t t0 = time_now_usec();
    r = engine_grammar_vocab_new_pieces(t.n, t.piece, t.len, t.eog, t.n_eog, &gv);
    uint64_t t1 = time_now_usec();
    if (r < 0) {
        fprintf(stderr, "grammar vocabulary: %s\n", err_str(r));
        return 1;
    }
    printf("token table: %d tokens, trie built in %.1f ms\n", t.n, (double)(t1 - t0) / 1000);
    /* tokens favoured when wandering is over: the end (10) and one-byte closers (1) */
    uint8_t *closer = calloc((size_t)t.n, 1);
    float *l = malloc((size_t)t.n * sizeof *l);
    if (!closer || !l) return 1;
    for (size_t i = 0; i < t.n_eog; i++) closer[t.eog[i]] = 10;
    for (int32_t i = 0; i < t.n; i++)
        if (t.len[i] == 1 && strchr("\"}]0", t.piece[i][0]) && !closer[i]) closer[i] = 1;
    r = bench("tool-call arguments schema", tool_schema, &t, gv, l, closer);
    if (r >= 0) r = bench("JSON object mode", "{\"type\":\"object\"}", &t, gv, l, closer);
    printf("\nreference: a decode step of a 7B model on a CPU is about 10 ms (1.5B: ~2 ms); "
           "grammar time per token should stay below 10%% of it\n");
    free(l);
    free(closer);
    engine_grammar_vocab_free(gv);
    for (int i = 0; i < t.n_vocab; i++) engine_vocab_free(t.vocab[i]);
    free(t.piece);
    free(t.len);
    free(t.eog);
    return r < 0 ? 1 : 0;
}
