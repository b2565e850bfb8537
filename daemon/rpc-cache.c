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

/* CacheList keeps the `cap` most recently used entries of the walk (a min-heap on
 * last use, so the walk stays O(n log cap) over a big store), then answers them newest
 * first. */
struct list_item {
    struct store_entry e;       /* e.ns points at ns below */
    char ns[128];
};

struct list_ctx {
    struct list_item *items;
    size_t n, cap;
};

/* a is older than b: last use, then namespace and key, so the order is total */
static bool older(const struct list_item *a, const struct list_item *b) {
    if (a->e.last_used_usec != b->e.last_used_usec) return a->e.last_used_usec < b->e.last_used_usec;
    int c = strcmp(a->ns, b->ns);
    if (c) return c > 0;
    return memcmp(a->e.key.bytes, b->e.key.bytes, sizeof a->e.key.bytes) > 0;
}

static void heap_down(struct list_item *h, size_t n, size_t i) {
    for (;;) {
        size_t m = i, l = 2 * i + 1, r = l + 1;
        if (l < n && older(&h[l], &h[m])) m = l;
        if (r < n && older(&h[r], &h[m])) m = r;
        if (m == i) return;
        struct list_item t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

static void heap_up(struct list_item *h, size_t i) {
    while (i && older(&h[i], &h[(i - 1) / 2])) {
        struct list_item t = h[i];
        h[i] = h[(i - 1) / 2];
        h[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}

static int list_cb(const struct store_entry *e, void *userdata) {
    struct list_ctx *l = userdata;
    struct list_item x = {.e = *e};
    snprintf(x.ns, sizeof x.ns, "%s", e->ns ? e->ns : "");
    if (l->n < l->cap) {
        l->items[l->n] = x;
        heap_up(l->items, l->n++);
    } else if (l->cap && older(&l->items[0], &x)) {
        l->items[0] = x;
        heap_down(l->items, l->n, 0);
    }
    return 0;
}

static int newest_first(const void *a, const void *b) {
    return older(a, b) ? 1 : older(b, a) ? -1 : 0;
}

/* The loaded models' fingerprints and names, to name the model of each entry. */
struct model_names {
    struct registry_model *list;
    size_t n;
    struct hash128 *fp;
    bool *known;
};

static void model_names_init(struct daemon *d, struct model_names *m) {
    *m = (struct model_names){0};
    if (registry_list(&d->registry, &m->list, &m->n) < 0 || !m->n) return;
    m->fp = calloc_array(m->n, sizeof *m->fp);
    m->known = calloc_array(m->n, sizeof *m->known);
    if (!m->fp || !m->known) {
        m->n = 0;
        return;
    }
    for (size_t i = 0; i < m->n; i++) {
        struct residency_info ri;
        residency_info(d, m->list[i].name, &ri);
        m->fp[i] = ri.fingerprint;
        m->known[i] = ri.loaded;
    }
}

static const char *model_name_of(const struct model_names *m, struct hash128 fp) {
    for (size_t i = 0; i < m->n; i++)
        if (m->known[i] && hash128_eq(m->fp[i], fp)) return m->list[i].name;
    return "";
}

static void model_names_done(struct model_names *m) {
    free(m->list);
    free(m->fp);
    free(m->known);
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
    l.items = calloc_array(l.cap, sizeof *l.items);
    Warm__V1__CacheEntry *entries = calloc_array(l.cap, sizeof *entries);
    Warm__V1__CacheEntry **ptrs = calloc_array(l.cap, sizeof *ptrs);
    char (*strs)[2][72] = calloc_array(l.cap, sizeof *strs); /* fingerprint, key hex */
    struct model_names names;
    model_names_init(rpc_call_daemon(c), &names);
    struct store_txn *txn = NULL;
    int e = !l.items || !entries || !ptrs || !strs ? -ENOMEM
                                                   : store_txn_begin(env, STORE_TXN_READ, &txn);
    if (e >= 0) e = store_list(txn, ns, list_cb, &l);
    if (e >= 0) {
        qsort(l.items, l.n, sizeof *l.items, newest_first);
        for (size_t i = 0; i < l.n; i++) {
            struct list_item *it = &l.items[i];
            Warm__V1__CacheEntry *x = &entries[i];
            warm__v1__cache_entry__init(x);
            /* the model: from the blob's header (a record that does not read is listed
             * without one; the lookup that meets it refuses it) */
            struct store_rec rec;
            struct hash128 fp;
            strs[i][0][0] = 0;
            x->model = "";
            if (store_get(txn, &it->e.key, &rec, NULL) >= 0 &&
                engine_kv_blob_model(rec.blob, rec.blob_bytes, &fp, NULL) >= 0) {
                hash128_to_hex(fp, strs[i][0]);
                x->model = (char *)model_name_of(&names, fp);
            }
            store_key_to_hex(&it->e.key, strs[i][1]);
            x->namespace_ = it->ns;
            x->fingerprint = strs[i][0];
            x->key = strs[i][1];
            x->n_tokens = it->e.n_tokens;
            x->position = (uint32_t)MIN(it->e.p0, (uint64_t)UINT32_MAX);
            x->bytes = it->e.bytes;
            x->last_used_usec = it->e.last_used_usec;
            x->kind = it->e.kind == STORE_KIND_TAIL ? "tail" : "chunk";
            ptrs[i] = x;
        }
    }
    if (e < 0) {
        store_txn_abort(txn);
        rpc_call_fail(c, rpc_status_from_err(e) == GRPC_STATUS_RESOURCE_EXHAUSTED
                             ? GRPC_STATUS_RESOURCE_EXHAUSTED : GRPC_STATUS_UNAVAILABLE,
                      "prompt cache: %s", err_str(e));
    } else {
        Warm__V1__CacheListResponse r = WARM__V1__CACHE_LIST_RESPONSE__INIT;
        r.n_entries = l.n;
        r.entries = ptrs;
        rpc_call_reply(c, &r.base); /* packed here: the txn (views) is still open */
        store_txn_abort(txn);
    }
    model_names_done(&names);
    free(strs);
    free(ptrs);
    free(entries);
    free(l.items);
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
