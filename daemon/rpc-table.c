/* rpc-table — the methods of warm.v1.Warm, in proto order (see rpc.h). */
#include "daemon/rpc-handlers.h"

#include "warm/v1/warm.pb-c.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

const char rpc_service_name[] = "warm.v1.Warm";

const struct rpc_method rpc_methods[] = {
    {"GetInfo", &warm__v1__get_info_request__descriptor, false, false, rpc_info_get_info},
    {"ListModels", &warm__v1__list_models_request__descriptor, false, false, rpc_models_list},
    {"ShowModel", &warm__v1__show_model_request__descriptor, false, false, rpc_models_show},
    {"LoadModel", &warm__v1__load_model_request__descriptor, false, true, rpc_models_load},
    {"UnloadModel", &warm__v1__unload_model_request__descriptor, false, true, rpc_models_unload},
    {"Tokenize", &warm__v1__tokenize_request__descriptor, false, false, rpc_tokens_tokenize},
    {"Detokenize", &warm__v1__detokenize_request__descriptor, false, false, rpc_tokens_detokenize},
    {"Generate", &warm__v1__generate_request__descriptor, true, false, rpc_generate_generate},
    {"Chat", &warm__v1__chat_request__descriptor, true, false, rpc_generate_chat},
    {"CacheStats", &warm__v1__cache_stats_request__descriptor, false, false, rpc_cache_stats},
    {"CacheList", &warm__v1__cache_list_request__descriptor, false, false, rpc_cache_list},
    {"CachePurge", &warm__v1__cache_purge_request__descriptor, false, false, rpc_cache_purge},
    {"Metrics", &warm__v1__metrics_request__descriptor, false, false, rpc_info_metrics},
    {"CreateToken", &warm__v1__create_token_request__descriptor, false, false, rpc_token_create},
    {"RevokeTokens", &warm__v1__revoke_tokens_request__descriptor, false, false, rpc_token_revoke},
    {"Embed", &warm__v1__embed_request__descriptor, false, false, rpc_embed_embed},
};
const size_t rpc_n_methods = ARRAY_SIZE(rpc_methods);

/* Project error → gRPC status; anything not listed is INTERNAL. */
static const struct {
    int err;
    grpc_status_code code;
} status_map[] = {
    {ERR_INVALID, GRPC_STATUS_INVALID_ARGUMENT},
    {-EINVAL, GRPC_STATUS_INVALID_ARGUMENT},
    {ERR_NOT_FOUND, GRPC_STATUS_NOT_FOUND},
    {-ENOENT, GRPC_STATUS_NOT_FOUND},
    {-EACCES, GRPC_STATUS_PERMISSION_DENIED},
    {-EPERM, GRPC_STATUS_PERMISSION_DENIED},
    {-ENOMEM, GRPC_STATUS_RESOURCE_EXHAUSTED},
    {-ENOBUFS, GRPC_STATUS_RESOURCE_EXHAUSTED},
    {ERR_TOO_LARGE, GRPC_STATUS_RESOURCE_EXHAUSTED},
    {ERR_CTX_FULL, GRPC_STATUS_RESOURCE_EXHAUSTED},
    {ERR_TOKEN, GRPC_STATUS_INVALID_ARGUMENT},
    {ERR_UNSUPPORTED, GRPC_STATUS_FAILED_PRECONDITION},
    {ERR_MODEL_ARCH, GRPC_STATUS_FAILED_PRECONDITION},
    {ERR_GRAMMAR, GRPC_STATUS_INVALID_ARGUMENT},
    /* the request's output format cannot be completed with the model's tokens */
    {ERR_GRAMMAR_STUCK, GRPC_STATUS_FAILED_PRECONDITION},
    {-ECANCELED, GRPC_STATUS_CANCELLED},
    {-EBUSY, GRPC_STATUS_RESOURCE_EXHAUSTED},
    {-ESHUTDOWN, GRPC_STATUS_UNAVAILABLE},
    {-EOPNOTSUPP, GRPC_STATUS_FAILED_PRECONDITION},
};

grpc_status_code rpc_status_from_err(int err) {
    for (size_t i = 0; i < ARRAY_SIZE(status_map); i++)
        if (status_map[i].err == err) return status_map[i].code;
    return GRPC_STATUS_INTERNAL;
}

/* ---- helpers shared by the handlers ------------------------------------------------- */

int rpc_model_resolve(struct rpc_call *c, const char *name, struct registry_model *ret) {
    struct daemon *d = rpc_call_daemon(c);
    if (!name || !*name) name = d->config.default_model;
    if (!*name) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT,
                      "model: no model named and the server has no default_model");
        return -EINVAL;
    }
    struct err_detail e = {0};
    int r = registry_find(&d->registry, name, ret, &e);
    if (r < 0) {
        rpc_call_fail(c, rpc_status_from_err(r), "%s", err_msg(&e, r));
        return r;
    }
    return 0;
}

int rpc_model_acquire(struct rpc_call *c, const char *name, uint32_t uid, uint64_t keep_alive_usec,
                      struct resident **ret, uint64_t *ret_load_usec) {
    struct daemon *d = rpc_call_daemon(c);
    struct registry_model m;
    int r = rpc_model_resolve(c, name, &m);
    if (r < 0) return r;
    struct err_detail e = {0};
    /* A load (or the wait for another call's) lasts as long as the file is big: the
     * watchdog does not count it against this thread's loop. */
    notify_beat_pause();
    r = residency_acquire(d, m.name, uid, keep_alive_usec, ret, ret_load_usec, &e);
    notify_beat_resume();
    if (r < 0) {
        grpc_status_code code = rpc_status_from_err(r);
        /* A file that does not load is the model's problem, not the server's. */
        if (code == GRPC_STATUS_INTERNAL) code = GRPC_STATUS_FAILED_PRECONDITION;
        rpc_call_fail(c, code, "%s", err_msg(&e, r));
    }
    return r;
}

void rpc_not_wired(struct rpc_call *c, const char *what) {
    rpc_call_fail(c, GRPC_STATUS_UNIMPLEMENTED, "%s: %s are not available in this build of warmd yet",
                  rpc_call_method(c)->name, what);
}

bool rpc_utf8_valid(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    for (size_t i = 0; i < n;) {
        unsigned char b = s[i];
        size_t len;
        uint32_t cp, min;
        if (b < 0x80) {
            i++;
            continue;
        } else if ((b & 0xe0) == 0xc0) len = 2, cp = b & 0x1f, min = 0x80;
        else if ((b & 0xf0) == 0xe0) len = 3, cp = b & 0x0f, min = 0x800;
        else if ((b & 0xf8) == 0xf0) len = 4, cp = b & 0x07, min = 0x10000;
        else return false;
        if (n - i < len) return false;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80) return false;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
        i += len;
    }
    return true;
}

int rpc_namespace_check(struct rpc_call *c, const char *ns, bool all_ok) {
    const struct peer *p = rpc_call_peer(c);
    char own[32];
    snprintf(own, sizeof own, "uid:%u", p->uid);
    if (!*ns || strcmp(ns, own) == 0) return 0;
    if (strlen(ns) > 127 || !rpc_utf8_valid(ns, strlen(ns))) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "namespace: longer than 127 bytes or not UTF-8");
        return -EINVAL;
    }
    if (strcmp(ns, "*") == 0 && !all_ok) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "namespace: '*' is not valid here");
        return -EINVAL;
    }
    if (!p->admin) {
        rpc_call_fail(c, GRPC_STATUS_PERMISSION_DENIED,
                      "namespace '%s' belongs to another user; uid %u may use '%s'", ns, p->uid, own);
        return -EACCES;
    }
    return 0;
}
