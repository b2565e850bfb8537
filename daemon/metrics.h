/* metrics — the daemon's counters and gauges (lock-free atomics) and their Prometheus
 * text rendering. One table names them all; counters only grow, gauges are set. Per-RPC
 * counters are labelled by method and by gRPC status code. Thread-safe. */
#pragma once

#include "base/base.h"

#include <stdatomic.h>

/* X(ID, kind, "name", "help"); kind is counter or gauge. */
#define METRICS_TABLE(X)                                                                \
    X(CONN_ACCEPTED, counter, "warmd_connections_accepted_total",                      \
      "Connections accepted by the policy and handed to gRPC")                          \
    X(CONN_REFUSED, counter, "warmd_connections_refused_total",                        \
      "Connections closed by the peer policy before any RPC was read")                  \
    X(STREAMS_ACTIVE, gauge, "warmd_streams_active", "Calls in progress")              \
    X(MODELS_AVAILABLE, gauge, "warmd_models_available", "Models in the models directory") \
    X(MODELS_LOADED, gauge, "warmd_models_loaded", "Models resident in memory")        \
    X(MODEL_LOADS, counter, "warmd_model_loads_total", "Models loaded")                \
    X(MODEL_UNLOADS, counter, "warmd_model_unloads_total", "Models unloaded")          \
    X(MEMORY_BYTES, gauge, "warmd_memory_bytes", "Memory held by loaded models")       \
    X(QUEUE_DEPTH, gauge, "warmd_queue_depth", "Generation requests queued or running")  \
    X(TOKENS_IN, counter, "warmd_prompt_tokens_total", "Prompt tokens received")       \
    X(TOKENS_RAM, counter, "warmd_prompt_tokens_ram_total",                            \
      "Prompt tokens reused from sequences in RAM")                                     \
    X(TOKENS_STORE, counter, "warmd_prompt_tokens_store_total",                        \
      "Prompt tokens restored from the prompt cache")                                   \
    X(TOKENS_PREFILL, counter, "warmd_prompt_tokens_prefill_total",                    \
      "Prompt tokens computed")                                                         \
    X(TOKENS_OUT, counter, "warmd_generated_tokens_total", "Tokens generated")         \
    X(CACHE_HITS, counter, "warmd_cache_hits_total", "Prompt-cache records restored")  \
    X(CACHE_MISSES, counter, "warmd_cache_misses_total", "Prompt-cache lookups without a record") \
    X(CACHE_REJECTED, counter, "warmd_cache_rejected_total",                           \
      "Prompt-cache records found but incompatible")                                    \
    X(CACHE_EVICTIONS, counter, "warmd_cache_evictions_total", "Prompt-cache records evicted") \
    X(CACHE_BYTES, gauge, "warmd_cache_bytes", "Bytes in the prompt cache")              \
    X(CACHE_LOOKUPS, counter, "warmd_cache_lookups_total", "Prompt-cache lookups")       \
    X(CACHE_WRITES, counter, "warmd_cache_writes_total", "Prompt-cache records written") \
    X(CACHE_WRITES_DROPPED, counter, "warmd_cache_writes_dropped_total",                 \
      "Prompt-cache records not written because the write queue was full")             \
    X(CACHE_WRITE_ERRORS, counter, "warmd_cache_write_errors_total",                   \
      "Prompt-cache records whose write failed")

/* Why a prompt-cache record was refused (label reason of warmd_cache_rejections_total):
 * X(ID, "label"); daemon/cache.c maps error codes to these. */
#define METRICS_REJECT_REASONS(X)                                                        \
    X(BAD_BLOB, "bad_blob") X(STATE_VERSION, "state_version") X(MODEL, "model")          \
    X(LAYOUT, "layout") X(KEY_TYPE, "key_type") X(VALUE_TYPE, "value_type")              \
    X(KEY_ROTATION, "key_rotation") X(VALUE_ROTATION, "value_rotation")                  \
    X(TOKENS, "tokens") X(CHECKSUM, "checksum") X(RECORD, "record") X(OTHER, "other")

enum metric_reject {
#define X(id, label) METRIC_REJECT_##id,
    METRICS_REJECT_REASONS(X)
#undef X
    METRIC_REJECT_COUNT
};

enum metric_id {
#define X(id, kind, name, help) METRIC_##id,
    METRICS_TABLE(X)
#undef X
    METRIC_COUNT
};

#define METRICS_MAX_METHODS 32
#define METRICS_N_CODES 17 /* gRPC status codes 0..16 */

struct metrics {
    _Atomic uint64_t v[METRIC_COUNT];
    _Atomic uint64_t rpc_started[METRICS_MAX_METHODS];  /* by method index */
    _Atomic uint64_t rpc_finished[METRICS_N_CODES];     /* by status code */
    _Atomic uint64_t cache_rejected[METRIC_REJECT_COUNT]; /* by enum metric_reject */
};

static inline void metrics_add(struct metrics *m, enum metric_id id, uint64_t n) {
    atomic_fetch_add_explicit(&m->v[id], n, memory_order_relaxed);
}
static inline void metrics_sub(struct metrics *m, enum metric_id id, uint64_t n) {
    atomic_fetch_sub_explicit(&m->v[id], n, memory_order_relaxed);
}
static inline void metrics_set(struct metrics *m, enum metric_id id, uint64_t v) {
    atomic_store_explicit(&m->v[id], v, memory_order_relaxed);
}
static inline uint64_t metrics_get(struct metrics *m, enum metric_id id) {
    return atomic_load_explicit(&m->v[id], memory_order_relaxed);
}
void metrics_rpc_started(struct metrics *m, unsigned method);
void metrics_rpc_finished(struct metrics *m, unsigned code);

/* Renders every metric in the Prometheus text format 0.0.4 into a malloc'd string
 * (*ret, caller frees). method_names[i] labels rpc_started[i]. Returns 0 or -ENOMEM. */
int metrics_render(struct metrics *m, const char *const *method_names, size_t n_methods,
                   uint64_t uptime_usec, char **ret);
