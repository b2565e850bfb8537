/* rpc-token — CreateToken and RevokeTokens (daemon/tokens.h). */
#include "daemon/rpc-handlers.h"

#include "daemon/log.h"
#include "warm/v1/warm.pb-c.h"

#include <errno.h>

void rpc_token_create(struct rpc_call *c, const ProtobufCMessage *req) {
    (void)req;
    struct daemon *d = rpc_call_daemon(c);
    const struct peer *p = rpc_call_peer(c);
    /* Only the socket, where the kernel names the caller, mints tokens: a token must never
     * beget another through the proxy it stands in for. */
    if (p->via_proxy) {
        rpc_call_fail(c, GRPC_STATUS_PERMISSION_DENIED,
                      "tokens are made on the warmd socket itself (`warmctl token create`), "
                      "not through a proxy");
        return;
    }
    char text[TOKEN_TEXT_LEN + 1];
    struct err_detail e = {0};
    int r = tokens_create(&d->tokens, p->uid, text, &e);
    if (r < 0) {
        rpc_call_fail(c, r == -ENOSPC ? GRPC_STATUS_RESOURCE_EXHAUSTED : GRPC_STATUS_INTERNAL,
                      "%s", err_msg(&e, r));
        return;
    }
    /* debug only: a client may call this as often as it likes (the table caps the tokens,
     * not the calls), and an info line per call would be a log it can grow */
    log_debug("uid %u created a bearer token", p->uid);
    Warm__V1__CreateTokenResponse resp = WARM__V1__CREATE_TOKEN_RESPONSE__INIT;
    resp.token = text;
    rpc_call_reply(c, &resp.base);
}

void rpc_token_revoke(struct rpc_call *c, const ProtobufCMessage *req) {
    (void)req;
    struct daemon *d = rpc_call_daemon(c);
    const struct peer *p = rpc_call_peer(c);
    size_t n = 0;
    struct err_detail e = {0};
    int r = tokens_revoke(&d->tokens, p->uid, &n, &e);
    if (r < 0) {
        rpc_call_fail(c, GRPC_STATUS_INTERNAL, "%s", err_msg(&e, r));
        return;
    }
    if (n) log_debug("uid %u revoked %zu bearer token(s)", p->uid, n);
    Warm__V1__RevokeTokensResponse resp = WARM__V1__REVOKE_TOKENS_RESPONSE__INIT;
    resp.revoked = (uint32_t)n;
    rpc_call_reply(c, &resp.base);
}
