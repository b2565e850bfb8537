/* cache — namespaces, refusal names and cache metrics (see cache.h). */
#include "daemon/cache.h"

#include "daemon/daemon.h"
#include "store/store.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- refusal reasons ----------------------------------------------------------------- */

/* A refusal code (engine import, store verification) -> its label and metrics index. */
static const struct {
    int code;
    enum metric_reject index;
    const char *label;
} reject_rows[] = {
    {ERR_STATE_BAD, METRIC_REJECT_BAD_BLOB, "bad_blob"},
    {ERR_STATE_VERSION, METRIC_REJECT_STATE_VERSION, "state_version"},
    {ERR_STATE_MODEL, METRIC_REJECT_MODEL, "model"},
    {ERR_STATE_LAYOUT, METRIC_REJECT_LAYOUT, "layout"},
    {ERR_STATE_KEY_TYPE, METRIC_REJECT_KEY_TYPE, "key_type"},
    {ERR_STATE_VALUE_TYPE, METRIC_REJECT_VALUE_TYPE, "value_type"},
    {ERR_STATE_KEY_ROT, METRIC_REJECT_KEY_ROTATION, "key_rotation"},
    {ERR_STATE_VALUE_ROT, METRIC_REJECT_VALUE_ROTATION, "value_rotation"},
    {ERR_STATE_TOKENS, METRIC_REJECT_TOKENS, "tokens"},
    {ERR_STATE_CHECKSUM, METRIC_REJECT_CHECKSUM, "checksum"},
    {ERR_CHECKSUM, METRIC_REJECT_CHECKSUM, "checksum"},
    {ERR_STORE_RECORD, METRIC_REJECT_RECORD, "record"},
};

const char *cache_reject_label(int code) {
    for (size_t i = 0; i < ARRAY_SIZE(reject_rows); i++)
        if (reject_rows[i].code == code) return reject_rows[i].label;
    return "other";
}

enum metric_reject cache_reject_index(int code) {
    for (size_t i = 0; i < ARRAY_SIZE(reject_rows); i++)
        if (reject_rows[i].code == code) return reject_rows[i].index;
    return METRIC_REJECT_OTHER;
}

/* ---- namespaces ---------------------------------------------------------------------- */

/* Resolves one group name or number; false when unknown. */
static bool group_id(const char *name, gid_t *ret) {
    char *end;
    unsigned long v = strtoul(name, &end, 10);
    if (*name && !*end) {
        *ret = (gid_t)v;
        return true;
    }
    char buf[4096];
    struct group gr, *res = NULL;
    if (getgrnam_r(name, &gr, buf, sizeof buf, &res) != 0 || !res) return false;
    *ret = res->gr_gid;
    return true;
}

/* Whether uid (primary group gid) is a member of group want: the primary group, or a
 * supplementary group of its passwd entry. */
static bool peer_in_group(const struct peer *p, gid_t want) {
    if (p->gid == want) return true;
    char buf[4096];
    struct passwd pw, *res = NULL;
    if (getpwuid_r(p->uid, &pw, buf, sizeof buf, &res) != 0 || !res) return false;
    gid_t groups[256];
    int n = (int)ARRAY_SIZE(groups);
    if (getgrouplist(res->pw_name, res->pw_gid, groups, &n) < 0) n = (int)ARRAY_SIZE(groups);
    for (int i = 0; i < n; i++)
        if (groups[i] == want) return true;
    return false;
}

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t')) s[--n] = 0;
    return s;
}

bool cache_namespace_shared_ok(const char *shared, const struct peer *p, const char *ns) {
    char list[sizeof ((struct config *)0)->cache_shared_namespaces];
    if (!shared || !*ns || strlen(shared) >= sizeof list) return false;
    memcpy(list, shared, strlen(shared) + 1);
    char *s = list, *name, *groups;
    int r;
    while ((r = config_shared_ns_next(&s, &name, &groups, NULL)) != 0) {
        /* a malformed entry (the config refuses them when read) never matches */
        if (r < 0 || strcmp(name, ns) != 0) continue;
        char *gsave = NULL;
        for (char *g = strtok_r(groups, ",", &gsave); g; g = strtok_r(NULL, ",", &gsave)) {
            gid_t gid;
            g = trim(g);
            if (*g && group_id(g, &gid) && peer_in_group(p, gid)) return true;
        }
    }
    return false;
}

int cache_namespace_resolve(const struct config *cfg, const struct peer *p,
                            const char *requested, char ret[CACHE_NS_MAX], struct err_detail *d) {
    char own[32];
    snprintf(own, sizeof own, "uid:%u", p->uid);
    if (!requested || !*requested || strcmp(requested, own) == 0) {
        snprintf(ret, CACHE_NS_MAX, "%s", own);
        return 0;
    }
    size_t len = strlen(requested);
    if (len >= CACHE_NS_MAX || strcmp(requested, "*") == 0)
        return err_set(d, -EINVAL, "namespace: '%s' is not a namespace name (1..%d bytes)",
                       len >= CACHE_NS_MAX ? "(too long)" : requested, CACHE_NS_MAX - 1);
    if (!p->admin && !cache_namespace_shared_ok(cfg->cache_shared_namespaces, p, requested))
        return err_set(d, -EACCES,
                       "namespace '%s' is neither uid %u's own ('%s') nor a shared namespace "
                       "open to its groups (cache_shared_namespaces)", requested, p->uid, own);
    memcpy(ret, requested, len + 1);
    return 0;
}

/* ---- metrics ------------------------------------------------------------------------- */

void cache_metrics_sync(struct daemon *d) {
    struct metrics *m = &d->metrics;
    /* The writer's counters first: they must show a store in trouble, whose stats
     * may well fail. */
    struct cache_writer *w = &d->writer;
    if (w->running) {
        pthread_mutex_lock(&w->lock);
        uint64_t written = w->n_written, dropped = w->n_dropped, failed = w->n_failed;
        uint64_t queued = w->n_queued + w->busy;
        pthread_mutex_unlock(&w->lock);
        metrics_set(m, METRIC_CACHE_WRITE_QUEUE, queued);
        metrics_set(m, METRIC_CACHE_WRITES, written);
        metrics_set(m, METRIC_CACHE_WRITES_DROPPED, dropped);
        metrics_set(m, METRIC_CACHE_WRITE_ERRORS, failed);
    }
    struct store_stats st;
    if (!d->store || store_env_stats(d->store, &st) < 0) return;
    /* The store keeps these since it opened (with the daemon); mirror them. */
    metrics_set(m, METRIC_CACHE_BYTES, st.bytes);
    metrics_set(m, METRIC_CACHE_LOOKUPS, st.n_hits + st.n_misses);
    metrics_set(m, METRIC_CACHE_HITS, st.n_hits);
    metrics_set(m, METRIC_CACHE_MISSES, st.n_misses);
    metrics_set(m, METRIC_CACHE_REJECTED, st.n_rejections);
    metrics_set(m, METRIC_CACHE_EVICTIONS, st.n_evictions);
    uint64_t by[METRIC_REJECT_COUNT] = {0};
    for (unsigned i = 0; i < st.n_reject_reasons && i < STORE_REJECT_SLOTS; i++)
        by[cache_reject_index(st.rejections[i].reason)] += st.rejections[i].n;
    for (int i = 0; i < METRIC_REJECT_COUNT; i++)
        atomic_store_explicit(&m->cache_rejected[i], by[i], memory_order_relaxed);
}

/* ---- per-namespace figures ----------------------------------------------------------- */

size_t cache_namespaces_visible(const struct config *cfg, const struct peer *p,
                                char ret[][CACHE_NS_MAX], size_t max) {
    if (max == 0) return 0;
    size_t n = 0;
    snprintf(ret[n++], CACHE_NS_MAX, "uid:%u", p->uid);
    char list[sizeof cfg->cache_shared_namespaces];
    snprintf(list, sizeof list, "%s", cfg->cache_shared_namespaces);
    char *s = list, *name, *groups;
    int r;
    while (n < max && (r = config_shared_ns_next(&s, &name, &groups, NULL)) != 0) {
        if (r < 0 || strlen(name) >= CACHE_NS_MAX ||
            !cache_namespace_shared_ok(cfg->cache_shared_namespaces, p, name))
            continue;
        bool dup = false;
        for (size_t i = 0; i < n; i++) dup = dup || strcmp(ret[i], name) == 0;
        if (!dup) snprintf(ret[n++], CACHE_NS_MAX, "%s", name);
    }
    return n;
}

void cache_metrics_request(struct daemon *d, const char *ns, enum runner_cache mode,
                           const struct runner_result *res) {
    /* The runner places a prompt as RAM + store + computed tokens, computing at least the
     * last one; a request that ended before (queued at unload, refused) has no split. */
    bool placed = res->evaluated_tokens > 0 &&
                  (uint64_t)res->ram_tokens + res->store_tokens + res->evaluated_tokens ==
                      res->prompt_tokens;
    bool asked = placed && d->store && mode == RUNNER_CACHE_USE &&
                 res->prompt_tokens - res->ram_tokens > d->config.cache_restore_min_tokens;
    uint64_t v[METRIC_NS_COUNT] = {
        [METRIC_NS_REQUESTS] = 1,
        [METRIC_NS_TOKENS_IN] = res->prompt_tokens,
        [METRIC_NS_TOKENS_RAM] = res->ram_tokens,
        [METRIC_NS_TOKENS_STORE] = res->store_tokens,
        [METRIC_NS_TOKENS_PREFILL] = res->evaluated_tokens,
        [METRIC_NS_TOKENS_OUT] = res->generated_tokens,
        [METRIC_NS_CACHE_HITS] = res->store_tokens > 0,
        [METRIC_NS_CACHE_MISSES] = asked && res->store_tokens == 0,
        [METRIC_NS_CACHE_REJECTED] = MIN(res->n_rejected, (unsigned)RUNNER_MAX_REJECTED),
    };
    metrics_add(&d->metrics, METRIC_TOKENS_IN, res->prompt_tokens);
    metrics_add(&d->metrics, METRIC_TOKENS_RAM, res->ram_tokens);
    metrics_add(&d->metrics, METRIC_TOKENS_STORE, res->store_tokens);
    metrics_add(&d->metrics, METRIC_TOKENS_PREFILL, res->evaluated_tokens);
    metrics_add(&d->metrics, METRIC_TOKENS_OUT, res->generated_tokens);
    metrics_ns_add(&d->metrics, ns, v);
}
