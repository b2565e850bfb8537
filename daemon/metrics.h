/* metrics — the daemon's counters and gauges (lock-free atomics) and their Prometheus
 * text rendering. One table names them all; counters only grow, gauges are set. Per-RPC
 * counters are labelled by method and by gRPC status code. Thread-safe.
 *
 * Per-namespace counters (METRICS_NS_TABLE, label namespace="...") live in a bounded
 * table: the first METRICS_NS_MAX namespaces that count something get a row each (rows
 * are never freed, so a row's figures only grow); every namespace after that is counted in
 * one overflow row (label namespace="", shown to admins only), so no client can grow the
 * table, and the memory it holds is fixed.
 *
 * Who sees what (the Metrics RPC): admins see everything; other callers see only the
 * rows that tell nothing about other users (metrics_row_public: uptime, models available
 * and loaded, their memory, which ListModels shows to everyone anyway) and the namespace
 * rows of the namespaces they may use. A row added to METRICS_TABLE is admin-only until it
 * is listed in metrics_row_public. */
#pragma once

#include "base/base.h"

#include <stdatomic.h>

/* X(ID, kind, "name", "help"); kind is counter or gauge. */
#define METRICS_TABLE(X)                                                                \
    X(CONN_ACCEPTED, counter, "warmd_connections_accepted_total",                      \
      "Connections accepted by the policy and handed to gRPC")                          \
    X(CONN_REFUSED, counter, "warmd_connections_refused_total",                        \
      "Connections closed by the peer policy before any RPC was read")                  \
    X(CONN_OPEN, gauge, "warmd_connections_open", "Connections open now")               \
    X(CONN_LIMITED, counter, "warmd_connections_limited_total",                        \
      "Connections refused by max_connections or max_connections_per_uid")              \
    X(CONN_CLOSED_IDLE, counter, "warmd_connections_idle_closed_total",                \
      "Connections closed after connection_idle_timeout without a call")               \
    X(CONN_CLOSED_ABUSE, counter, "warmd_connections_abuse_closed_total",              \
      "Connections closed for a stalled request, a client not reading, rapid resets or " \
      "bytes that are not HTTP/2")                                                      \
    X(STREAMS_ACTIVE, gauge, "warmd_streams_active", "Calls in progress")              \
    X(MODELS_AVAILABLE, gauge, "warmd_models_available", "Models in the models directory") \
    X(MODELS_LOADED, gauge, "warmd_models_loaded", "Models resident in memory")        \
    X(MODEL_LOADS, counter, "warmd_model_loads_total", "Models loaded")                \
    X(MODEL_UNLOADS, counter, "warmd_model_unloads_total", "Models unloaded")          \
    X(MODEL_FILE_CHANGES, counter, "warmd_model_file_changes_total",                  \
      "Loaded models found replaced or changed on disk (loaded again)")                 \
    X(MEMORY_BYTES, gauge, "warmd_memory_bytes", "Memory held by loaded models")       \
    X(DEVICE_CPU_BYTES, gauge, "warmd_device_cpu_reserved_bytes",                       \
      "Memory the loaded models reserved on CPU devices (weights read, KV, scratch)")     \
    X(DEVICE_CUDA_BYTES, gauge, "warmd_device_cuda_reserved_bytes",                     \
      "Device memory the loaded models reserved on CUDA devices")                         \
    X(QUEUE_DEPTH, gauge, "warmd_queue_depth", "Generation requests queued or running")  \
    X(POOL_JOBS, gauge, "warmd_pool_jobs", "Long requests queued or running on the work pool") \
    X(POOL_REFUSED, counter, "warmd_pool_refused_total",                                \
      "Long requests refused: the uid's or the work pool's cap was reached")             \
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
      "Prompt-cache records whose write failed")                                        \
    X(CACHE_WRITE_QUEUE, gauge, "warmd_cache_write_queue",                              \
      "Prompt-cache records queued or being written")                                  \
    X(EMBED_REQUESTS, counter, "warmd_embed_requests_total", "Embed requests answered")  \
    X(EMBED_INPUTS, counter, "warmd_embed_inputs_total", "Inputs embedded")              \
    X(EMBED_TOKENS, counter, "warmd_embed_tokens_total", "Tokens of embedded inputs")    \
    X(EMBED_CACHE_HITS, counter, "warmd_embed_cache_hits_total",                        \
      "Inputs answered from the in-memory embedding cache")                             \
    X(EMBED_CACHE_MISSES, counter, "warmd_embed_cache_misses_total",                    \
      "Inputs embedded by a forward pass")                                              \
    X(EMBED_CACHE_ENTRIES, gauge, "warmd_embed_cache_entries",                          \
      "Vectors in the in-memory embedding caches")

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

/* Per-namespace counters: X(ID, "name", "help"), all counters, by namespace. */
#define METRICS_NS_TABLE(X)                                                              \
    X(REQUESTS, "warmd_namespace_requests_total", "Generate and Chat requests finished")   \
    X(TOKENS_IN, "warmd_namespace_prompt_tokens_total", "Prompt tokens received")          \
    X(TOKENS_RAM, "warmd_namespace_prompt_tokens_ram_total",                             \
      "Prompt tokens reused from sequences in RAM")                                      \
    X(TOKENS_STORE, "warmd_namespace_prompt_tokens_store_total",                         \
      "Prompt tokens restored from the prompt cache")                                    \
    X(TOKENS_PREFILL, "warmd_namespace_prompt_tokens_prefill_total", "Prompt tokens computed") \
    X(TOKENS_OUT, "warmd_namespace_generated_tokens_total", "Tokens generated")          \
    X(CACHE_HITS, "warmd_namespace_cache_hits_total",                                    \
      "Requests that restored prompt tokens from the prompt cache")                      \
    X(CACHE_MISSES, "warmd_namespace_cache_misses_total",                                \
      "Requests that asked the prompt cache and restored nothing")                       \
    X(CACHE_REJECTED, "warmd_namespace_cache_rejected_total",                            \
      "Prompt-cache refusals reported in request summaries")

enum metric_ns_id {
#define X(id, name, help) METRIC_NS_##id,
    METRICS_NS_TABLE(X)
#undef X
    METRIC_NS_COUNT
};

#define METRICS_NS_MAX 1024   /* namespaces with a row of their own; the rest share one */
#define METRICS_NS_NAME_MAX 128 /* bytes of a namespace name, NUL included (CACHE_NS_MAX) */

struct metrics_ns_row {
    _Atomic uint32_t state;          /* 0 free, 1 being named, 2 named (name is final) */
    char name[METRICS_NS_NAME_MAX];
    _Atomic uint64_t v[METRIC_NS_COUNT];
};

#define METRICS_MAX_METHODS 32
#define METRICS_N_CODES 17 /* gRPC status codes 0..16 */

struct metrics {
    _Atomic uint64_t v[METRIC_COUNT];
    _Atomic uint64_t rpc_started[METRICS_MAX_METHODS];  /* by method index */
    _Atomic uint64_t rpc_finished[METRICS_N_CODES];     /* by status code */
    _Atomic uint64_t cache_rejected[METRIC_REJECT_COUNT]; /* by enum metric_reject */
    /* by namespace: open addressing on a hash of the name, rows claimed once, never freed */
    struct metrics_ns_row ns[METRICS_NS_MAX];
    _Atomic uint64_t ns_overflow[METRIC_NS_COUNT];   /* namespaces past METRICS_NS_MAX */
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

/* Adds v[METRIC_NS_COUNT] to the row of namespace ns (claiming one if ns has none and the
 * table has room; the overflow row otherwise). A name of METRICS_NS_NAME_MAX bytes or
 * more is counted in the overflow row. */
void metrics_ns_add(struct metrics *m, const char *ns, const uint64_t v[METRIC_NS_COUNT]);
/* Copies namespace ns's counters into ret (all 0 when it has no row). */
void metrics_ns_get(struct metrics *m, const char *ns, uint64_t ret[METRIC_NS_COUNT]);
/* Whether a non-admin caller may see row id of METRICS_TABLE (see the top). */
bool metrics_row_public(enum metric_id id);

/* Renders every metric in the Prometheus text format 0.0.4 into a malloc'd string
 * (*ret, caller frees): what an admin sees. method_names[i] labels rpc_started[i].
 * Returns 0 or -ENOMEM. */
int metrics_render(struct metrics *m, const char *const *method_names, size_t n_methods,
                   uint64_t uptime_usec, char **ret);
/* Renders what a non-admin caller sees: the public rows and the rows of the namespaces
 * ns[0 … n_ns) (each one shown, with zeros when it counted nothing), in the same format.
 * Returns 0 or -ENOMEM. */
int metrics_render_scoped(struct metrics *m, const char *const *ns, size_t n_ns,
                          uint64_t uptime_usec, char **ret);
