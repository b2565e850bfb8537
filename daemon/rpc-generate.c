/* rpc-generate — Generate and Chat: request validation (every field's bounds, P0-12)
 * before anything is resolved or allocated. */
#include "daemon/rpc-handlers.h"

#include "warm/v1/warm.pb-c.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#define STOP_MAX 16
#define STOP_MAX_BYTES 256
#define CHAT_MAX_MESSAGES 4096

static bool in_range(float v, float lo, float hi) { return isfinite(v) && v >= lo && v <= hi; }

/* Sampling bounds as documented in warm.proto. */
static int sampling_check(struct rpc_call *c, const Warm__V1__Sampling *s) {
    if (!s) return 0;
    const char *field = NULL;
    if (!in_range(s->temperature, 0, 10)) field = "temperature must be in [0, 10]";
    else if (s->top_k < 0) field = "top_k must be >= 0";
    else if (!in_range(s->top_p, 0, 1)) field = "top_p must be in [0, 1]";
    else if (!in_range(s->min_p, 0, 1)) field = "min_p must be in [0, 1]";
    else if (!in_range(s->repeat_penalty, 0, 10)) field = "repeat_penalty must be in [0, 10]";
    else if (s->repeat_last_n < -1) field = "repeat_last_n must be >= -1";
    else if (!in_range(s->frequency_penalty, -2, 2)) field = "frequency_penalty must be in [-2, 2]";
    else if (!in_range(s->presence_penalty, -2, 2)) field = "presence_penalty must be in [-2, 2]";
    if (field) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "sampling.%s", field);
        return -EINVAL;
    }
    return 0;
}

static int stop_check(struct rpc_call *c, char **stop, size_t n) {
    if (n > STOP_MAX) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "stop: %zu strings, at most %d", n, STOP_MAX);
        return -EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(stop[i]);
        if (len == 0 || len > STOP_MAX_BYTES || !rpc_utf8_valid(stop[i], len)) {
            rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT,
                          "stop[%zu]: must be 1..%d bytes of UTF-8", i, STOP_MAX_BYTES);
            return -EINVAL;
        }
    }
    return 0;
}

static int cache_check(struct rpc_call *c, const Warm__V1__CacheOptions *o) {
    if (!o) return 0;
    if (o->mode != WARM__V1__CACHE_MODE__CACHE_MODE_USE &&
        o->mode != WARM__V1__CACHE_MODE__CACHE_MODE_SKIP &&
        o->mode != WARM__V1__CACHE_MODE__CACHE_MODE_REFRESH) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "cache.mode: unknown value %d", (int)o->mode);
        return -EINVAL;
    }
    return rpc_namespace_check(c, o->namespace_, false);
}

/* The limits on prompt length: max_prompt_tokens (0 = ctx_size) tokens, and a byte cap
 * applied before tokenization (a token is rarely longer than 16 bytes of text). */
static uint32_t prompt_token_cap(const struct config *cfg) {
    return cfg->max_prompt_tokens ? cfg->max_prompt_tokens : cfg->ctx_size;
}

void rpc_generate_generate(struct rpc_call *c, const ProtobufCMessage *req) {
    const Warm__V1__GenerateRequest *q = (const Warm__V1__GenerateRequest *)req;
    const struct config *cfg = &rpc_call_daemon(c)->config;
    size_t plen = strlen(q->prompt);
    uint32_t cap = prompt_token_cap(cfg);
    if ((plen == 0) == (q->n_tokens == 0)) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT,
                      "exactly one of prompt and tokens must be set (prompt %zu bytes, %zu tokens)",
                      plen, q->n_tokens);
        return;
    }
    if (plen > (size_t)cap * 16) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT,
                      "prompt: %zu bytes is more than %u tokens can hold", plen, cap);
        return;
    }
    if (!rpc_utf8_valid(q->prompt, plen)) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "prompt: not valid UTF-8");
        return;
    }
    if (q->n_tokens > cap) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "tokens: %zu tokens, at most %u",
                      q->n_tokens, cap);
        return;
    }
    for (size_t i = 0; i < q->n_tokens; i++) {
        if (q->tokens[i] < 0) {
            rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "tokens[%zu]: id %d is negative", i,
                          (int)q->tokens[i]);
            return;
        }
    }
    if (q->max_tokens > cfg->ctx_size) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "max_tokens: %u is more than ctx_size %u",
                      q->max_tokens, cfg->ctx_size);
        return;
    }
    if (sampling_check(c, q->sampling) < 0 || stop_check(c, q->stop, q->n_stop) < 0 ||
        cache_check(c, q->cache) < 0)
        return;
    struct registry_model m;
    if (rpc_model_resolve(c, q->model, &m) < 0) return;
    rpc_not_wired(c);
}

void rpc_generate_chat(struct rpc_call *c, const ProtobufCMessage *req) {
    const Warm__V1__ChatRequest *q = (const Warm__V1__ChatRequest *)req;
    const struct config *cfg = &rpc_call_daemon(c)->config;
    if (q->n_messages == 0 || q->n_messages > CHAT_MAX_MESSAGES) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "messages: %zu messages, need 1..%d",
                      q->n_messages, CHAT_MAX_MESSAGES);
        return;
    }
    static const char *const roles[] = {"system", "user", "assistant"};
    size_t total = 0;
    for (size_t i = 0; i < q->n_messages; i++) {
        const Warm__V1__ChatMessage *m = q->messages[i];
        bool known = false;
        for (size_t k = 0; k < ARRAY_SIZE(roles); k++) known = known || strcmp(m->role, roles[k]) == 0;
        if (!known) {
            rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT,
                          "messages[%zu].role: must be system, user or assistant", i);
            return;
        }
        size_t len = strlen(m->content);
        if (!rpc_utf8_valid(m->content, len)) {
            rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "messages[%zu].content: not valid UTF-8", i);
            return;
        }
        total += len;
    }
    uint32_t cap = prompt_token_cap(cfg);
    if (total > (size_t)cap * 16) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT,
                      "messages: %zu bytes of content is more than %u tokens can hold", total, cap);
        return;
    }
    if (q->max_tokens > cfg->ctx_size) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "max_tokens: %u is more than ctx_size %u",
                      q->max_tokens, cfg->ctx_size);
        return;
    }
    if (sampling_check(c, q->sampling) < 0 || stop_check(c, q->stop, q->n_stop) < 0 ||
        cache_check(c, q->cache) < 0)
        return;
    struct registry_model m;
    if (rpc_model_resolve(c, q->model, &m) < 0) return;
    rpc_not_wired(c);
}
