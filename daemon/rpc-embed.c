/* rpc-embed — Embed: every field checked before a model is resolved, the inputs tokenized
 * (or taken as given) and checked against the model's limit, then one job on the embedding
 * model's own loop (daemon/embedder.h), which answers the call when its vectors are ready.
 *
 * Caps: at most EMBED_MAX_INPUTS inputs and EMBED_MAX_TOKENS tokens in all (after
 * truncation), each input at most the model's limit (its context, which is also its batch);
 * the text of an input at most 16 bytes per token of that (checked before tokenizing); a
 * uid's jobs queued or running on a model are capped as Generate's (max_queued_per_uid). */
#include "daemon/rpc-handlers.h"

#include "daemon/embedder.h"
#include "daemon/log.h"

#include "warm/v1/warm.pb-c.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EMBED_MAX_INPUTS 2048
#define EMBED_MAX_TOKENS 262144

struct ejob {
    struct embed_job base;        /* first: the embedder hands us &base */
    struct rpc_call *call;        /* referenced until done */
    struct daemon *d;
    char model[CONFIG_NAME_MAX];
    size_t n;
    int32_t **tokens;
    uint32_t *n_tokens;
    float *out;                   /* n × n_out raw */
    uint32_t n_out, dims;
    bool raw;
    uint32_t prompt_tokens, truncated;
    uint64_t start_usec, load_usec, keep_alive_usec;
};

static void ejob_free(struct ejob *j) {
    for (size_t i = 0; j->tokens && i < j->n; i++) free(j->tokens[i]);
    free(j->tokens);
    free(j->n_tokens);
    free(j->out);
    free(j);
}

static bool ejob_cancelled(struct embed_job *b) {
    return rpc_call_is_cancelled(((struct ejob *)b)->call);
}

static void ejob_done(struct embed_job *b, int err, const char *msg) {
    struct ejob *j = (struct ejob *)b;
    struct rpc_call *c = j->call;
    if (err < 0) {
        grpc_status_code code = rpc_status_from_err(err);
        if (err == -ESHUTDOWN) code = GRPC_STATUS_UNAVAILABLE;
        rpc_call_fail(c, code, "%s", msg ? msg : err_str(err));
    } else {
        Warm__V1__Vector *vecs = calloc_array(j->n, sizeof *vecs);
        Warm__V1__Vector **ptrs = calloc_array(j->n, sizeof *ptrs);
        float *fin = malloc_array(j->n, (size_t)j->dims * sizeof(float));
        if (!vecs || !ptrs || !fin) {
            rpc_call_fail(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for the answer");
        } else {
            for (size_t i = 0; i < j->n; i++) {
                float *v = fin + i * (size_t)j->dims;
                embed_vector_finish(v, j->out + i * (size_t)j->n_out, j->dims, j->raw);
                warm__v1__vector__init(&vecs[i]);
                vecs[i].n_values = j->dims;
                vecs[i].values = v;
                ptrs[i] = &vecs[i];
            }
            Warm__V1__EmbedResponse resp = WARM__V1__EMBED_RESPONSE__INIT;
            resp.n_embeddings = j->n;
            resp.embeddings = ptrs;
            resp.prompt_tokens = j->prompt_tokens;
            resp.model = j->model;
            resp.cached_inputs = j->base.n_cached;
            resp.truncated_inputs = j->truncated;
            resp.load_usec = j->load_usec;
            resp.total_usec = time_now_usec() - j->start_usec;
            resp.keep_alive_usec = j->keep_alive_usec;
            metrics_add(&j->d->metrics, METRIC_EMBED_REQUESTS, 1);
            metrics_add(&j->d->metrics, METRIC_EMBED_INPUTS, j->n);
            metrics_add(&j->d->metrics, METRIC_EMBED_TOKENS, j->prompt_tokens);
            rpc_call_reply(c, &resp.base);
        }
        free(vecs);
        free(ptrs);
        free(fin);
    }
    ejob_free(j);
    rpc_call_unref(c);
}

static const struct embed_job_ops ejob_ops = {.cancelled = ejob_cancelled, .done = ejob_done};

/* Input i's tokens into j: the text tokenized with the model's specials, or the ids checked
 * against the vocabulary; then cut to limit (truncate) or refused past it. */
static int input_tokens(struct rpc_call *c, const Warm__V1__EmbedRequest *q, size_t i,
                        const struct engine_vocab *v, uint32_t limit, struct ejob *j) {
    int32_t *ids = NULL;
    size_t n = 0;
    if (q->n_inputs) {
        const char *text = q->inputs[i];
        size_t len = strlen(text);
        const unsigned flags = ENGINE_TOKENIZE_ADD_SPECIAL | ENGINE_TOKENIZE_PARSE_SPECIAL;
        int e = engine_vocab_tokenize(v, text, len, flags, NULL, 0, &n);
        if (e == -ENOSPC || (e == 0 && n == 0)) {
            ids = malloc_array(n + 1, sizeof *ids);
            e = !ids ? -ENOMEM : n ? engine_vocab_tokenize(v, text, len, flags, ids, n, &n) : 0;
        }
        if (e < 0) {
            free(ids);
            rpc_call_fail(c, rpc_status_from_err(e), "inputs[%zu]: %s", i, err_str(e));
            return e;
        }
    } else {
        const Warm__V1__TokenList *t = q->token_inputs[i];
        int32_t n_vocab = engine_vocab_n_tokens(v);
        for (size_t k = 0; k < t->n_tokens; k++)
            if (t->tokens[k] >= n_vocab) {
                rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT,
                              "token_inputs[%zu][%zu]: id %d is out of range [0, %d)", i, k,
                              (int)t->tokens[k], (int)n_vocab);
                return -EINVAL;
            }
        n = t->n_tokens;
        if ((ids = malloc_array(n, sizeof *ids))) memcpy(ids, t->tokens, n * sizeof *ids);
    }
    if (!ids) {
        rpc_call_fail(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for the inputs");
        return -ENOMEM;
    }
    const char *field = q->n_inputs ? "inputs" : "token_inputs";
    if (n == 0) {
        free(ids);
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "%s[%zu]: no tokens", field, i);
        return -EINVAL;
    }
    if (n > limit) {
        if (!q->truncate) {
            free(ids);
            rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT,
                          "%s[%zu]: %zu tokens, more than model '%s' takes (%u); shorten it or "
                          "set truncate", field, i, n, j->model, limit);
            return -EINVAL;
        }
        /* The first tokens, with a tokenizer's closing special ([SEP], EOS) kept last:
         * CLS/mean pooling expect it and last-token pooling reads it. */
        if (q->n_inputs && engine_vocab_token_type(v, ids[n - 1]) == ENGINE_TOKEN_TYPE_CONTROL)
            ids[limit - 1] = ids[n - 1];
        n = limit;
        j->truncated++;
    }
    j->tokens[i] = ids;
    j->n_tokens[i] = (uint32_t)n;
    j->prompt_tokens += (uint32_t)n;
    if (j->prompt_tokens > EMBED_MAX_TOKENS) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT,
                      "%s: more than %d tokens in all (at %s[%zu]); split the request", field,
                      EMBED_MAX_TOKENS, field, i);
        return -EINVAL;
    }
    return 0;
}

/* Checks that need no model. */
static int request_check(struct rpc_call *c, const Warm__V1__EmbedRequest *q) {
    size_t n = q->n_inputs + q->n_token_inputs;
    if ((q->n_inputs == 0) == (q->n_token_inputs == 0)) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT,
                      "exactly one of inputs and token_inputs must be set (%zu inputs, %zu "
                      "token_inputs)", q->n_inputs, q->n_token_inputs);
        return -EINVAL;
    }
    if (n > EMBED_MAX_INPUTS) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "%s: %zu inputs, at most %d",
                      q->n_inputs ? "inputs" : "token_inputs", n, EMBED_MAX_INPUTS);
        return -EINVAL;
    }
    size_t bytes = 0;
    for (size_t i = 0; i < q->n_inputs; i++) {
        size_t len = strlen(q->inputs[i]);
        if (len == 0 || !rpc_utf8_valid(q->inputs[i], len)) {
            rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "inputs[%zu]: %s", i,
                          len ? "not valid UTF-8" : "empty");
            return -EINVAL;
        }
        bytes += len;
    }
    if (bytes > (size_t)EMBED_MAX_TOKENS * 16) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT,
                      "inputs: %zu bytes is more than %d tokens can hold", bytes, EMBED_MAX_TOKENS);
        return -EINVAL;
    }
    size_t n_tok = 0;
    for (size_t i = 0; i < q->n_token_inputs; i++) {
        const Warm__V1__TokenList *t = q->token_inputs[i];
        n_tok += t->n_tokens;
        for (size_t k = 0; k < t->n_tokens; k++)
            if (t->tokens[k] < 0) {
                rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT,
                              "token_inputs[%zu][%zu]: id %d is negative", i, k, (int)t->tokens[k]);
                return -EINVAL;
            }
    }
    if (!q->truncate && n_tok > EMBED_MAX_TOKENS) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "token_inputs: %zu tokens in all, at most %d",
                      n_tok, EMBED_MAX_TOKENS);
        return -EINVAL;
    }
    return 0;
}

void rpc_embed_embed(struct rpc_call *c, const ProtobufCMessage *req) {
    const Warm__V1__EmbedRequest *q = (const Warm__V1__EmbedRequest *)req;
    struct daemon *d = rpc_call_daemon(c);
    const struct config *cfg = &d->config;
    uint64_t start = time_now_usec(), load_usec = 0;
    if (request_check(c, q) < 0) return;
    /* keep-alive as Generate's: 0 keeps the lease as it was, past the cap is capped */
    uint64_t keep_alive = q->unload_after || q->keep_alive_usec == 0 ? 0
                          : MIN(q->keep_alive_usec, cfg->max_keep_alive_usec);
    uint32_t uid = rpc_call_peer(c)->uid;
    struct resident *res;
    if (rpc_model_acquire(c, q->model, uid, keep_alive, &res, &load_usec) < 0) return;
    struct embedder *e = runner_embedder(res->runner);
    if (!e) {
        rpc_call_fail(c, GRPC_STATUS_FAILED_PRECONDITION,
                      "model '%s' does not produce embeddings: it generates text (use Generate "
                      "or Chat, or an embedding model such as nomic-embed-text)", res->name);
        residency_release(d, res);
        return;
    }
    if (q->dimensions > embedder_n_out(e)) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT,
                      "dimensions: %u is more than model '%s' gives (%u)", q->dimensions,
                      res->name, embedder_n_out(e));
        residency_release(d, res);
        return;
    }
    size_t n = q->n_inputs + q->n_token_inputs;
    struct ejob *j = calloc(1, sizeof *j);
    if (j) {
        j->tokens = calloc_array(n, sizeof *j->tokens);
        j->n_tokens = calloc_array(n, sizeof *j->n_tokens);
        j->out = malloc_array(n, (size_t)embedder_n_out(e) * sizeof(float));
    }
    if (!j || !j->tokens || !j->n_tokens || !j->out) {
        rpc_call_fail(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for %zu inputs", n);
        if (j) ejob_free(j);
        residency_release(d, res);
        return;
    }
    j->n = n;
    j->d = d;
    j->call = c;
    snprintf(j->model, sizeof j->model, "%s", res->name);
    j->n_out = embedder_n_out(e);
    j->dims = q->dimensions ? q->dimensions : j->n_out;
    j->raw = q->raw;
    j->start_usec = start;
    j->load_usec = load_usec;
    if (q->unload_after) residency_lease_end(d, res, uid);
    j->keep_alive_usec = residency_lease_get(d, res, uid);
    const struct engine_vocab *v = runner_vocab(res->runner);
    for (size_t i = 0; i < n; i++)
        if (input_tokens(c, q, i, v, embedder_max_tokens(e), j) < 0) {
            ejob_free(j);
            residency_release(d, res);
            return;
        }
    j->base.ops = &ejob_ops;
    j->base.n_inputs = n;
    j->base.tokens = (const int32_t *const *)j->tokens;
    j->base.n_tokens = j->n_tokens;
    j->base.out = j->out;
    j->base.uid = uid;
    rpc_call_ref(c);
    int r = embedder_submit(e, &j->base);
    if (r < 0) {
        rpc_call_unref(c);
        if (r == -EAGAIN)
            rpc_call_fail(c, GRPC_STATUS_RESOURCE_EXHAUSTED,
                          "model '%s' has too many requests waiting; try again later", res->name);
        else if (r == -EDQUOT)
            rpc_call_fail(c, GRPC_STATUS_RESOURCE_EXHAUSTED,
                          "uid %u has %u requests queued or running on model '%s' "
                          "(max_queued_per_uid); try again when one ends", uid,
                          embedder_max_jobs_per_uid(e), res->name);
        else
            rpc_call_fail(c, GRPC_STATUS_UNAVAILABLE, "model '%s' is being unloaded", res->name);
        ejob_free(j);
    }
    residency_release(d, res);
}
