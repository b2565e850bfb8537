/* rpc-cache — CacheStats, CacheList, CachePurge over the prompt store: one's own
 * namespace ("uid:<uid>") for everyone, other namespaces and "*" for admins. The event
 * counters CacheStats reports are the namespace's own (daemon/metrics.h); the store-wide
 * ones only for "*". */
#include "daemon/rpc-handlers.h"

#include "store/store.h"
#include "warm/v1/warm.pb-c.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define LIST_DEFAULT 100
#define LIST_MAX 10000

/* The namespace a request means: "" = the caller's own. */
static const char *ns_of(struct rpc_call *c, const char *ns, char own[32]) {
    snprintf(own, 32, "uid:%u", rpc_call_peer(c)->uid);
    return *ns ? ns : own;
}

static struct store_env *store_or_fail(struct rpc_call *c) {
    struct store_env *s = rpc_call_daemon(c)->store;
    if (!s)
        rpc_call_fail(c, GRPC_STATUS_FAILED_PRECONDITION,
                      "the prompt cache is off or unavailable (see cache_max_bytes and the log)");
    return s;
}

static bool model_filter_refused(struct rpc_call *c, const char *model) {
    if (!*model) return false;
    struct registry_model m;
    if (rpc_model_resolve(c, model, &m) < 0) return true;
    rpc_call_fail(c, GRPC_STATUS_UNIMPLEMENTED,
                  "model: filtering cache entries by model is not supported yet");
    return true;
}

struct ns_sum {
    const char *ns;
    uint64_t entries, bytes;
};

static int ns_sum_cb(const char *ns, uint64_t n, uint64_t bytes, void *userdata) {
    struct ns_sum *s = userdata;
    if (!s->ns || strcmp(ns, s->ns) == 0) {
        s->entries += n;
        s->bytes += bytes;
    }
    return 0;
}

/* Entries and bytes of ns (NULL = all). */
static int ns_totals(struct store_env *env, const char *ns, struct ns_sum *ret) {
    struct store_txn *txn = NULL;
    *ret = (struct ns_sum){.ns = ns};
    int e = store_txn_begin(env, STORE_TXN_READ, &txn);
    if (e < 0) return e;
    e = store_ns_list(txn, ns_sum_cb, ret);
    store_txn_abort(txn);
    return e;
}

static void cache_stats_run(struct rpc_call *c, const ProtobufCMessage *req) {
    const Warm__V1__CacheStatsRequest *q = (const Warm__V1__CacheStatsRequest *)req;
    if (rpc_namespace_check(c, q->namespace_, true) < 0) return;
    struct store_env *env = store_or_fail(c);
    if (!env) return;
    char own[32];
    const char *ns = ns_of(c, q->namespace_, own);
    struct store_stats st;
    struct ns_sum sum;
    int e = store_env_stats(env, &st);
    if (e >= 0) e = ns_totals(env, strcmp(ns, "*") == 0 ? NULL : ns, &sum);
    if (e < 0) {
        rpc_call_fail(c, GRPC_STATUS_UNAVAILABLE, "prompt cache: %s", err_str(e));
        return;
    }
    Warm__V1__CacheStatsResponse r = WARM__V1__CACHE_STATS_RESPONSE__INIT;
    r.entries = sum.entries;
    r.bytes = sum.bytes;
    r.budget_bytes = st.budget_bytes;
    /* Event counters since the daemon started: the whole store's for "*" (admins), else
     * the namespace's own, so nobody learns from them what other users asked. Eviction
     * is store-wide (least recently used over all namespaces): "*" only. */
    if (strcmp(ns, "*") == 0) {
        r.hits = st.n_hits;
        r.misses = st.n_misses;
        r.rejections = st.n_rejections;
        r.evictions = st.n_evictions;
    } else {
        uint64_t v[METRIC_NS_COUNT];
        metrics_ns_get(&rpc_call_daemon(c)->metrics, ns, v);
        r.hits = v[METRIC_NS_CACHE_HITS];
        r.misses = v[METRIC_NS_CACHE_MISSES];
        r.rejections = v[METRIC_NS_CACHE_REJECTED];
    }
    rpc_call_reply(c, &r.base);
}

struct list_ctx {
    Warm__V1__CacheEntry *entries;
    char (*strs)[3][128];       /* namespace, fingerprint (unknown: empty), key hex */
    size_t n, cap;
};

static int list_cb(const struct store_entry *e, void *userdata) {
    struct list_ctx *l = userdata;
    if (l->n == l->cap) return -ECANCELED; /* enough: ends the walk, not an error */
    Warm__V1__CacheEntry *x = &l->entries[l->n];
    char (*s)[128] = l->strs[l->n];
    warm__v1__cache_entry__init(x);
    snprintf(s[0], 128, "%s", e->ns ? e->ns : "");
    s[1][0] = 0;
    store_key_to_hex(&e->key, s[2]);
    x->namespace_ = s[0];
    x->fingerprint = s[1];
    x->key = s[2];
    x->n_tokens = e->n_tokens;
    x->position = (uint32_t)MIN(e->p0, (uint64_t)UINT32_MAX);
    x->bytes = e->bytes;
    x->last_used_usec = e->last_used_usec;
    x->kind = e->kind == STORE_KIND_TAIL ? "tail" : "chunk";
    l->n++;
    return 0;
}

static void cache_list_run(struct rpc_call *c, const ProtobufCMessage *req) {
    const Warm__V1__CacheListRequest *q = (const Warm__V1__CacheListRequest *)req;
    if (rpc_namespace_check(c, q->namespace_, false) < 0) return;
    if (model_filter_refused(c, q->model)) return;
    struct store_env *env = store_or_fail(c);
    if (!env) return;
    char own[32];
    const char *ns = ns_of(c, q->namespace_, own);
    struct list_ctx l = {.cap = q->limit ? MIN(q->limit, LIST_MAX) : LIST_DEFAULT};
    l.entries = calloc_array(l.cap, sizeof *l.entries);
    l.strs = calloc_array(l.cap, sizeof *l.strs);
    Warm__V1__CacheEntry **ptrs = calloc_array(l.cap, sizeof *ptrs);
    struct store_txn *txn = NULL;
    int e = !l.entries || !l.strs || !ptrs ? -ENOMEM : store_txn_begin(env, STORE_TXN_READ, &txn);
    if (e >= 0) e = store_list(txn, ns, list_cb, &l);
    if (e == -ECANCELED) e = 0;
    store_txn_abort(txn);
    if (e < 0) {
        rpc_call_fail(c, rpc_status_from_err(e) == GRPC_STATUS_RESOURCE_EXHAUSTED
                             ? GRPC_STATUS_RESOURCE_EXHAUSTED : GRPC_STATUS_UNAVAILABLE,
                      "prompt cache: %s", err_str(e));
    } else {
        for (size_t i = 0; i < l.n; i++) ptrs[i] = &l.entries[i];
        Warm__V1__CacheListResponse r = WARM__V1__CACHE_LIST_RESPONSE__INIT;
        r.n_entries = l.n;
        r.entries = ptrs;
        rpc_call_reply(c, &r.base);
    }
    free(ptrs);
    free(l.strs);
    free(l.entries);
}

static void cache_purge_run(struct rpc_call *c, const ProtobufCMessage *req) {
    const Warm__V1__CachePurgeRequest *q = (const Warm__V1__CachePurgeRequest *)req;
    if (rpc_namespace_check(c, q->namespace_, true) < 0) return;
    if (model_filter_refused(c, q->model)) return;
    struct store_env *env = store_or_fail(c);
    if (!env) return;
    char own[32];
    const char *ns = ns_of(c, q->namespace_, own);
    const char *which = strcmp(ns, "*") == 0 ? NULL : ns;
    struct ns_sum before;
    uint64_t n = 0;
    int e = ns_totals(env, which, &before);
    if (e >= 0) e = store_purge(env, which, &n);
    if (e < 0) {
        rpc_call_fail(c, GRPC_STATUS_UNAVAILABLE, "prompt cache: %s", err_str(e));
        return;
    }
    Warm__V1__CachePurgeResponse r = WARM__V1__CACHE_PURGE_RESPONSE__INIT;
    r.entries = n;
    r.bytes = before.bytes;
    rpc_call_reply(c, &r.base);
}

/* On the work pool: each walks the namespace's entries (all of them for "*"), and a purge
 * waits for the store's write lock and the commit's sync. */
void rpc_cache_stats(struct rpc_call *c, const ProtobufCMessage *req) {
    rpc_pool_defer(c, req, cache_stats_run);
}

void rpc_cache_list(struct rpc_call *c, const ProtobufCMessage *req) {
    rpc_pool_defer(c, req, cache_list_run);
}

void rpc_cache_purge(struct rpc_call *c, const ProtobufCMessage *req) {
    rpc_pool_defer(c, req, cache_purge_run);
}
