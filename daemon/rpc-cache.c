/* rpc-cache — CacheStats, CacheList, CachePurge: namespace checks (one's own namespace,
 * others for admins), then the store. */
#include "daemon/rpc-handlers.h"

#include "warm/v1/warm.pb-c.h"

void rpc_cache_stats(struct rpc_call *c, const ProtobufCMessage *req) {
    const Warm__V1__CacheStatsRequest *q = (const Warm__V1__CacheStatsRequest *)req;
    if (rpc_namespace_check(c, q->namespace_, true) < 0) return;
    rpc_not_wired(c);
}

void rpc_cache_list(struct rpc_call *c, const ProtobufCMessage *req) {
    const Warm__V1__CacheListRequest *q = (const Warm__V1__CacheListRequest *)req;
    if (rpc_namespace_check(c, q->namespace_, false) < 0) return;
    struct registry_model m;
    if (*q->model && rpc_model_resolve(c, q->model, &m) < 0) return;
    rpc_not_wired(c);
}

void rpc_cache_purge(struct rpc_call *c, const ProtobufCMessage *req) {
    const Warm__V1__CachePurgeRequest *q = (const Warm__V1__CachePurgeRequest *)req;
    if (rpc_namespace_check(c, q->namespace_, true) < 0) return;
    struct registry_model m;
    if (*q->model && rpc_model_resolve(c, q->model, &m) < 0) return;
    rpc_not_wired(c);
}
