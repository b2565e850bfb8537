/* rpc-handlers — the handlers of the method table and the helpers they share. Only the
 * rpc-*.c files include this (and the generated warm.pb-c.h). */
#pragma once

#include "daemon/daemon.h"
#include "daemon/registry.h"
#include "daemon/rpc.h"

void rpc_info_get_info(struct rpc_call *c, const ProtobufCMessage *req);
void rpc_info_metrics(struct rpc_call *c, const ProtobufCMessage *req);
void rpc_models_list(struct rpc_call *c, const ProtobufCMessage *req);
void rpc_models_show(struct rpc_call *c, const ProtobufCMessage *req);
void rpc_models_load(struct rpc_call *c, const ProtobufCMessage *req);
void rpc_models_unload(struct rpc_call *c, const ProtobufCMessage *req);
void rpc_tokens_tokenize(struct rpc_call *c, const ProtobufCMessage *req);
void rpc_tokens_detokenize(struct rpc_call *c, const ProtobufCMessage *req);
void rpc_generate_generate(struct rpc_call *c, const ProtobufCMessage *req);
void rpc_generate_chat(struct rpc_call *c, const ProtobufCMessage *req);
void rpc_cache_stats(struct rpc_call *c, const ProtobufCMessage *req);
void rpc_cache_list(struct rpc_call *c, const ProtobufCMessage *req);
void rpc_cache_purge(struct rpc_call *c, const ProtobufCMessage *req);
void rpc_token_create(struct rpc_call *c, const ProtobufCMessage *req);
void rpc_token_revoke(struct rpc_call *c, const ProtobufCMessage *req);
void rpc_embed_embed(struct rpc_call *c, const ProtobufCMessage *req);

/* Runs fn(c, req) on the work pool (daemon/pool.h) instead of this gRPC worker thread:
 * for unary handlers whose work can take long. The request is packed again and decoded on
 * the pool thread (the caller's copy is freed when the handler returns). Past the pool's
 * caps the call is answered at once with RESOURCE_EXHAUSTED. */
void rpc_pool_defer(struct rpc_call *c, const ProtobufCMessage *req, rpc_handler_fn fn);
/* Resolves a request's model field (empty = default_model) to a registry entry. On
 * failure the call is answered (INVALID_ARGUMENT for a bad name, NOT_FOUND otherwise)
 * and a negative code is returned. */
int rpc_model_resolve(struct rpc_call *c, const char *name, struct registry_model *ret);
/* Resolves the model like rpc_model_resolve and acquires it (loading it if needed), with
 * uid's lease on it renewed (see residency_acquire; uid is the caller's or RESIDENCY_PIN).
 * On failure the call is answered and a negative code returned; on success the caller
 * releases *ret with residency_release. */
int rpc_model_acquire(struct rpc_call *c, const char *name, uint32_t uid, uint64_t keep_alive_usec,
                      struct resident **ret, uint64_t *ret_load_usec);
/* Answers a request that needs a part of the engine this build lacks (UNIMPLEMENTED,
 * "<Method>: <what> are not available in this build of warmd yet"). */
void rpc_not_wired(struct rpc_call *c, const char *what);
/* True when s[0..n) is valid UTF-8 (no overlongs, surrogates or values past U+10FFFF). */
bool rpc_utf8_valid(const char *s, size_t n);
/* Checks a cache namespace against the caller: "" and "uid:<own uid>" are always
 * allowed, anything else needs admin (all_ok: "*" is accepted for admins). On failure the
 * call is answered and a negative code returned. */
int rpc_namespace_check(struct rpc_call *c, const char *ns, bool all_ok);
