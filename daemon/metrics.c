/* metrics — Prometheus text rendering (see metrics.h). */
#include "daemon/metrics.h"

#include <errno.h>
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

void metrics_rpc_started(struct metrics *m, unsigned method) {
    if (method < METRICS_MAX_METHODS)
        atomic_fetch_add_explicit(&m->rpc_started[method], 1, memory_order_relaxed);
}

void metrics_rpc_finished(struct metrics *m, unsigned code) {
    if (code < METRICS_N_CODES)
        atomic_fetch_add_explicit(&m->rpc_finished[code], 1, memory_order_relaxed);
}

int metrics_render(struct metrics *m, const char *const *method_names, size_t n_methods,
                   uint64_t uptime_usec, char **ret) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return -ENOMEM;
    fprintf(f, "# HELP warmd_uptime_seconds Seconds since the daemon started\n"
               "# TYPE warmd_uptime_seconds gauge\nwarmd_uptime_seconds %.3f\n",
            (double)uptime_usec / 1e6);
    for (int i = 0; i < METRIC_COUNT; i++)
        fprintf(f, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", defs[i].name, defs[i].help,
                defs[i].name, defs[i].kind, defs[i].name,
                (unsigned long long)atomic_load(&m->v[i]));
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
    if (fclose(f) != 0 || !buf) {
        free(buf);
        return -ENOMEM;
    }
    *ret = buf;
    return 0;
}
