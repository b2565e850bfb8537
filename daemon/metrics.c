/* metrics — Prometheus text rendering (see metrics.h). */
#include "daemon/metrics.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

static const struct {
    const char *name, *kind, *help;
} defs[METRIC_COUNT] = {
#define X(id, kind_, name_, help_) [METRIC_##id] = {name_, #kind_, help_},
    METRICS_TABLE(X)
#undef X
};

/* gRPC status names by code, for the code="" label. */
static const char *const code_names[METRICS_N_CODES] = {
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
    "UNAUTHENTICATED",
};

static const struct {
    const char *name, *help;
} ns_defs[METRIC_NS_COUNT] = {
#define X(id, name_, help_) [METRIC_NS_##id] = {name_, help_},
    METRICS_NS_TABLE(X)
#undef X
};

/* The rows of METRICS_TABLE that tell a caller nothing about other users' activity: the
 * models directory and what is loaded (ListModels shows both to everyone). Connections,
 * streams, queue depth, RPC and status counts, cache and token totals are all moved by
 * other users' requests, so they stay admin-only; so does any row not listed here. */
static const bool row_public[METRIC_COUNT] = {
    [METRIC_MODELS_AVAILABLE] = true,
    [METRIC_MODELS_LOADED] = true,
    [METRIC_MEMORY_BYTES] = true,
};

bool metrics_row_public(enum metric_id id) {
    return (unsigned)id < METRIC_COUNT && row_public[id];
}

/* ---- namespaces ---------------------------------------------------------------------- */

enum { ROW_FREE, ROW_NAMING, ROW_NAMED };

static size_t ns_hash(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return (size_t)(h % METRICS_NS_MAX);
}

/* The row of ns, claimed when it has none and create is set. NULL: no row (an empty or
 * too long name, not found, or the table is full). Rows are claimed in probe order and
 * never freed, so a lookup may stop at the first free row of ns's probe sequence. */
static struct metrics_ns_row *ns_row(struct metrics *m, const char *ns, bool create) {
    size_t len = strnlen(ns, METRICS_NS_NAME_MAX);
    if (len == 0 || len >= METRICS_NS_NAME_MAX) return NULL;
    size_t h = ns_hash(ns);
    for (size_t i = 0; i < METRICS_NS_MAX; i++) {
        struct metrics_ns_row *r = &m->ns[(h + i) % METRICS_NS_MAX];
        uint32_t st = atomic_load_explicit(&r->state, memory_order_acquire);
        if (st == ROW_FREE) {
            if (!create) return NULL;
            if (atomic_compare_exchange_strong_explicit(&r->state, &st, ROW_NAMING,
                                                        memory_order_acquire,
                                                        memory_order_acquire)) {
                memcpy(r->name, ns, len + 1);
                atomic_store_explicit(&r->state, ROW_NAMED, memory_order_release);
                return r;
            }
        }
        /* another thread is naming this row (a memcpy away): it may be ns itself */
        while (st == ROW_NAMING) {
            sched_yield();
            st = atomic_load_explicit(&r->state, memory_order_acquire);
        }
        if (strcmp(r->name, ns) == 0) return r;
    }
    return NULL;
}

void metrics_ns_add(struct metrics *m, const char *ns, const uint64_t v[METRIC_NS_COUNT]) {
    struct metrics_ns_row *r = ns_row(m, ns, true);
    _Atomic uint64_t *dst = r ? r->v : m->ns_overflow;
    for (int i = 0; i < METRIC_NS_COUNT; i++)
        if (v[i]) atomic_fetch_add_explicit(&dst[i], v[i], memory_order_relaxed);
}

void metrics_ns_get(struct metrics *m, const char *ns, uint64_t ret[METRIC_NS_COUNT]) {
    struct metrics_ns_row *r = ns_row(m, ns, false);
    for (int i = 0; i < METRIC_NS_COUNT; i++)
        ret[i] = r ? atomic_load_explicit(&r->v[i], memory_order_relaxed) : 0;
}

/* ---- rendering ----------------------------------------------------------------------- */

/* A label value, escaped as the text format wants (backslash, quote, newline). */
static void put_label(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '\\') fputs("\\\\", f);
        else if (*s == '"') fputs("\\\"", f);
        else if (*s == '\n') fputs("\\n", f);
        else fputc(*s, f);
    }
}

static void put_ns_sample(FILE *f, int id, const char *ns, uint64_t v) {
    fprintf(f, "%s{namespace=\"", ns_defs[id].name);
    put_label(f, ns);
    fprintf(f, "\"} %llu\n", (unsigned long long)v);
}

/* The namespace families: every named row and the overflow row (all), or the rows of
 * ns[0 … n_ns). */
static void render_ns(FILE *f, struct metrics *m, bool all, const char *const *ns, size_t n_ns) {
    for (int id = 0; id < METRIC_NS_COUNT; id++) {
        fprintf(f, "# HELP %s %s, by namespace\n# TYPE %s counter\n", ns_defs[id].name,
                ns_defs[id].help, ns_defs[id].name);
        for (size_t i = 0; !all && i < n_ns; i++) {
            uint64_t v[METRIC_NS_COUNT];
            metrics_ns_get(m, ns[i], v);
            put_ns_sample(f, id, ns[i], v[id]);
        }
        for (size_t i = 0; all && i < METRICS_NS_MAX; i++) {
            struct metrics_ns_row *r = &m->ns[i];
            if (atomic_load_explicit(&r->state, memory_order_acquire) != ROW_NAMED) continue;
            put_ns_sample(f, id, r->name, atomic_load_explicit(&r->v[id], memory_order_relaxed));
        }
        if (all) /* namespace "" names no namespace: the ones past the table's capacity */
            put_ns_sample(f, id, "",
                          atomic_load_explicit(&m->ns_overflow[id], memory_order_relaxed));
    }
    if (!all) return;
    size_t n = 0;
    for (size_t i = 0; i < METRICS_NS_MAX; i++)
        n += atomic_load_explicit(&m->ns[i].state, memory_order_acquire) == ROW_NAMED;
    fprintf(f, "# HELP warmd_namespaces_tracked Namespaces with counters of their own (at most "
               "%d; the rest are counted under namespace=\"\")\n"
               "# TYPE warmd_namespaces_tracked gauge\nwarmd_namespaces_tracked %zu\n",
            METRICS_NS_MAX, n);
}

void metrics_rpc_started(struct metrics *m, unsigned method) {
    if (method < METRICS_MAX_METHODS)
        atomic_fetch_add_explicit(&m->rpc_started[method], 1, memory_order_relaxed);
}

void metrics_rpc_finished(struct metrics *m, unsigned code) {
    if (code < METRICS_N_CODES)
        atomic_fetch_add_explicit(&m->rpc_finished[code], 1, memory_order_relaxed);
}

/* all: everything (an admin's view); otherwise the public rows and ns[0 … n_ns). */
static int render(struct metrics *m, bool all, const char *const *method_names,
                  size_t n_methods, const char *const *ns, size_t n_ns, uint64_t uptime_usec,
                  char **ret) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return -ENOMEM;
    fprintf(f, "# HELP warmd_uptime_seconds Seconds since the daemon started\n"
               "# TYPE warmd_uptime_seconds gauge\nwarmd_uptime_seconds %.3f\n",
            (double)uptime_usec / 1e6);
    for (int i = 0; i < METRIC_COUNT; i++)
        if (all || row_public[i])
            fprintf(f, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", defs[i].name, defs[i].help,
                    defs[i].name, defs[i].kind, defs[i].name,
                    (unsigned long long)atomic_load(&m->v[i]));
    render_ns(f, m, all, ns, n_ns);
    if (!all) goto done;
    fprintf(f, "# HELP warmd_rpc_requests_total RPCs received, by method\n"
               "# TYPE warmd_rpc_requests_total counter\n");
    for (size_t i = 0; i < n_methods && i < METRICS_MAX_METHODS; i++)
        fprintf(f, "warmd_rpc_requests_total{method=\"%s\"} %llu\n", method_names[i],
                (unsigned long long)atomic_load(&m->rpc_started[i]));
    fprintf(f, "# HELP warmd_rpc_responses_total RPCs answered, by gRPC status code\n"
               "# TYPE warmd_rpc_responses_total counter\n");
    for (int i = 0; i < METRICS_N_CODES; i++)
        fprintf(f, "warmd_rpc_responses_total{code=\"%s\"} %llu\n", code_names[i],
                (unsigned long long)atomic_load(&m->rpc_finished[i]));
    static const char *const reject_labels[METRIC_REJECT_COUNT] = {
#define X(id, label) label,
        METRICS_REJECT_REASONS(X)
#undef X
    };
    fprintf(f, "# HELP warmd_cache_rejections_total Prompt-cache records refused, by reason\n"
               "# TYPE warmd_cache_rejections_total counter\n");
    for (int i = 0; i < METRIC_REJECT_COUNT; i++)
        fprintf(f, "warmd_cache_rejections_total{reason=\"%s\"} %llu\n", reject_labels[i],
                (unsigned long long)atomic_load(&m->cache_rejected[i]));
done:
    if (fclose(f) != 0 || !buf) {
        free(buf);
        return -ENOMEM;
    }
    *ret = buf;
    return 0;
}

int metrics_render(struct metrics *m, const char *const *method_names, size_t n_methods,
                   uint64_t uptime_usec, char **ret) {
    return render(m, true, method_names, n_methods, NULL, 0, uptime_usec, ret);
}

int metrics_render_scoped(struct metrics *m, const char *const *ns, size_t n_ns,
                          uint64_t uptime_usec, char **ret) {
    return render(m, false, NULL, 0, ns, n_ns, uptime_usec, ret);
}
