/* rpc-tokens — Tokenize and Detokenize with the model's vocabulary.
 *
 * Both run on the work pool (rpc_pool_defer): a text of max_request_bytes takes seconds to
 * tokenize (about 1 us per byte for the worst inputs measured, linear up to the merge
 * heap's log factor), and the model may have to be loaded first. */
#include "daemon/rpc-handlers.h"
#include "daemon/notify.h"

#include "warm/v1/warm.pb-c.h"

#include <errno.h>
#include <string.h>

/* Tokens to try first: most texts need fewer than one per 2 bytes, and one pass is half
 * the work of counting first. */
static size_t tokens_guess(size_t n_bytes) { return n_bytes / 2 + 16; }

static void tokenize_run(struct rpc_call *c, const ProtobufCMessage *req) {
    const Warm__V1__TokenizeRequest *q = (const Warm__V1__TokenizeRequest *)req;
    size_t n = strlen(q->text);
    if (!rpc_utf8_valid(q->text, n)) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "text: not valid UTF-8");
        return;
    }
    struct resident *res;
    uint64_t load_usec;
    if (rpc_model_acquire(c, q->model, rpc_call_peer(c)->uid, 0, &res, &load_usec) < 0) return;
    const struct engine_vocab *v = runner_vocab(res->runner);
    unsigned flags = (q->add_special ? ENGINE_TOKENIZE_ADD_SPECIAL : 0) |
                     (q->parse_special ? ENGINE_TOKENIZE_PARSE_SPECIAL : 0);
    size_t count = 0, cap = tokens_guess(n);
    /* Tokenizing is bounded work, not a loop that can wedge: O(n log n) in the text, but a
     * 4 MB single word of a BPE vocabulary takes ~50 s on a slow machine, more than
     * WatchdogSec. Like a model load, it does not count against the pool thread's beat. */
    notify_beat_pause();
    int32_t *ids = malloc_array(cap, sizeof *ids);
    int e = ids ? engine_vocab_tokenize(v, q->text, n, flags, ids, cap, &count) : -ENOMEM;
    if (e == -ENOSPC) { /* count is the real number */
        free(ids);
        ids = malloc_array(count, sizeof *ids);
        e = ids ? engine_vocab_tokenize(v, q->text, n, flags, ids, count, &count) : -ENOMEM;
    }
    notify_beat_resume();
    /* Released before answering: a client's next call must find the model idle. */
    residency_release(rpc_call_daemon(c), res);
    if (e < 0) {
        rpc_call_fail(c, rpc_status_from_err(e), "tokenize: %s", err_str(e));
    } else {
        Warm__V1__TokenizeResponse r = WARM__V1__TOKENIZE_RESPONSE__INIT;
        r.n_tokens = count;
        r.tokens = ids;
        rpc_call_reply(c, &r.base);
    }
    free(ids);
}

void rpc_tokens_tokenize(struct rpc_call *c, const ProtobufCMessage *req) {
    rpc_pool_defer(c, req, tokenize_run);
}

static void detokenize_run(struct rpc_call *c, const ProtobufCMessage *req) {
    const Warm__V1__DetokenizeRequest *q = (const Warm__V1__DetokenizeRequest *)req;
    for (size_t i = 0; i < q->n_tokens; i++) {
        if (q->tokens[i] < 0) {
            rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "tokens[%zu]: id %d is negative", i,
                          (int)q->tokens[i]);
            return;
        }
    }
    struct resident *res;
    uint64_t load_usec;
    if (rpc_model_acquire(c, q->model, rpc_call_peer(c)->uid, 0, &res, &load_usec) < 0) return;
    const struct engine_vocab *v = runner_vocab(res->runner);
    int32_t n_vocab = engine_vocab_n_tokens(v);
    for (size_t i = 0; i < q->n_tokens; i++) {
        if (q->tokens[i] >= n_vocab) {
            rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT,
                          "tokens[%zu]: id %d is out of range [0, %d)", i, (int)q->tokens[i],
                          (int)n_vocab);
            residency_release(rpc_call_daemon(c), res);
            return;
        }
    }
    unsigned flags = ENGINE_DETOK_TEXT_START | (q->skip_special ? 0 : ENGINE_DETOK_SPECIAL);
    size_t len = 0;
    char *text = NULL;
    int e = engine_vocab_detokenize(v, q->tokens, q->n_tokens, flags, NULL, 0, &len);
    if (e == -ENOSPC) {
        text = malloc(len ? len : 1);
        e = text ? engine_vocab_detokenize(v, q->tokens, q->n_tokens, flags, text, len, &len)
                 : -ENOMEM;
    }
    residency_release(rpc_call_daemon(c), res);
    if (e < 0) {
        rpc_call_fail(c, rpc_status_from_err(e), "detokenize: %s", err_str(e));
    } else {
        Warm__V1__DetokenizeResponse r = WARM__V1__DETOKENIZE_RESPONSE__INIT;
        r.text.data = (uint8_t *)text;
        r.text.len = text ? len : 0;
        rpc_call_reply(c, &r.base);
    }
    free(text);
}

void rpc_tokens_detokenize(struct rpc_call *c, const ProtobufCMessage *req) {
    rpc_pool_defer(c, req, detokenize_run);
}
