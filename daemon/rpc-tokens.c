/* rpc-tokens — Tokenize and Detokenize. */
#include "daemon/rpc-handlers.h"

#include "warm/v1/warm.pb-c.h"

#include <string.h>

void rpc_tokens_tokenize(struct rpc_call *c, const ProtobufCMessage *req) {
    const Warm__V1__TokenizeRequest *q = (const Warm__V1__TokenizeRequest *)req;
    size_t n = strlen(q->text);
    if (!rpc_utf8_valid(q->text, n)) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "text: not valid UTF-8");
        return;
    }
    struct registry_model m;
    if (rpc_model_resolve(c, q->model, &m) < 0) return;
    rpc_not_wired(c);
}

void rpc_tokens_detokenize(struct rpc_call *c, const ProtobufCMessage *req) {
    const Warm__V1__DetokenizeRequest *q = (const Warm__V1__DetokenizeRequest *)req;
    for (size_t i = 0; i < q->n_tokens; i++) {
        if (q->tokens[i] < 0) {
            rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "tokens[%zu]: id %d is negative", i,
                          (int)q->tokens[i]);
            return;
        }
    }
    struct registry_model m;
    if (rpc_model_resolve(c, q->model, &m) < 0) return;
    rpc_not_wired(c);
}
