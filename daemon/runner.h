/* runner — one loaded model: its weights, vocabulary and a context of n_seq sequences,
 * and the loop thread that runs generation jobs on them with continuous batching: every
 * forward pass carries the next token of each decoding sequence and a step of prompt
 * tokens of sequences still prefilling. A new job takes the free sequence whose cached
 * tokens share the longest prefix with its prompt, and only the rest is prefilled
 * (ram_tokens).
 *
 * With a prompt store, a job restores the stored chunks of its prompt that RAM does not
 * have (records the engine refuses are reported and queued for deletion), and at its end
 * exports the chunks and the tail the store does not have yet to the cache writer.
 *
 * The loop marks its watchdog beat busy while it has jobs and stamps progress after
 * every step, so a wedged forward pass stops the WATCHDOG=1 pings.
 *
 * A job with a grammar samples only tokens that keep its output in the grammar's language
 * (engine/grammar.h); it ends with EOS once the output is complete, and with
 * ERR_GRAMMAR_STUCK when no token of the vocabulary can continue it.
 *
 * Threads: runner_submit from any thread; the callbacks of a job run on the loop thread.
 * runner_free stops the loop after the current decode step: the current and queued jobs
 * end with err = -ESHUTDOWN ("model unloaded"). */
#pragma once

#include "base/base.h"
#include "daemon/cache-writer.h"
#include "daemon/metrics.h"
#include "daemon/notify.h"
#include "engine/engine.h"

struct runner;
struct runner_job;

/* What a job does with the prompt store (proto CacheMode). */
enum runner_cache {
    RUNNER_CACHE_USE,       /* restore the longest stored prefix, save new chunks */
    RUNNER_CACHE_SKIP,      /* neither */
    RUNNER_CACHE_REFRESH,   /* recompute (no RAM reuse, no restore); save every chunk */
    RUNNER_CACHE_COUNT
};

#define RUNNER_MAX_REJECTED 4

/* A stored record found for the prompt but refused by the engine's import. */
struct runner_rejected {
    uint32_t position;      /* where its tokens start */
    int code;               /* ERR_STATE_* or ERR_CHECKSUM ... */
    char msg[256];
};

enum runner_stop {
    RUNNER_STOP_NONE,
    RUNNER_STOP_MAX_TOKENS,
    RUNNER_STOP_EOS,
    RUNNER_STOP_CALLER,        /* the token callback asked to stop (stop string) */
    RUNNER_STOP_CONTEXT_FULL,
    RUNNER_STOP_COUNT
};

struct runner_result {
    uint32_t prompt_tokens, ram_tokens, store_tokens, evaluated_tokens, generated_tokens;
    enum runner_stop stop;
    uint64_t queue_usec, restore_usec, prefill_usec, decode_usec;
    unsigned n_rejected;
    struct runner_rejected rejected[RUNNER_MAX_REJECTED];
};

/* How far a job's prompt is (runner_job_ops.progress). */
struct runner_progress {
    uint32_t prompt_tokens;    /* the whole prompt */
    uint32_t done_tokens;      /* whose KV is ready: ram + store + computed so far */
    uint32_t ram_tokens, store_tokens;
};

struct runner_job_ops {
    /* A sampled token and the new complete UTF-8 text it brings (maybe empty). Return
     * false to stop generating (RUNNER_STOP_CALLER). */
    bool (*token)(struct runner_job *j, int32_t id, const char *text, size_t len);
    /* Optional (NULL: none). For a prompt whose computed part is longer than one batch
     * step: called after the RAM and store lookup, after each prefill step and when the
     * prompt is done (done_tokens == prompt_tokens). */
    void (*progress)(struct runner_job *j, const struct runner_progress *p);
    /* True when the client is gone: the job ends at once with -ECANCELED. */
    bool (*cancelled)(struct runner_job *j);
    /* Called exactly once, last; the job then belongs to the callee again. err < 0 with
     * msg on failure (res is still filled as far as it got). */
    void (*done)(struct runner_job *j, const struct runner_result *res, int err,
                 const char *msg);
};

/* Embedded in the caller's job struct. */
struct runner_job {
    const struct runner_job_ops *ops;
    const int32_t *prompt;     /* borrowed until done(); n_prompt >= 1 */
    size_t n_prompt;
    uint32_t max_tokens;       /* 0 = until EOS or the context is full */
    struct engine_sampler_params sampling;
    /* Constrained output (proto OutputFormat), borrowed until done(); NULL = free text.
     * The loop builds the model's grammar vocabulary on the first such job, then gives
     * each one a matcher of its own. */
    const struct engine_grammar *grammar;
    enum runner_cache cache;
    char ns[128];              /* the store namespace, e.g. "uid:1000" */
    uint32_t uid;              /* the caller: its share of the queue and of the slots */
    uint64_t submit_usec;      /* set by runner_submit */
    struct runner_job *next;   /* queue link, the runner's */
};

struct runner_params {
    uint32_t n_ctx;            /* positions per sequence */
    uint32_t n_seq;            /* sequences decoded together (config parallel), 1..256 */
    int n_threads;
    enum kern_type type_k, type_v;
    struct notify *notify;     /* the loop's watchdog beat is registered here */
    unsigned max_jobs;         /* queued + running; more is -EAGAIN (0 = 64) */
    unsigned max_jobs_per_uid; /* queued + running of one uid; more is -EDQUOT (0 = max_jobs) */
    struct store_env *store;   /* the prompt store, NULL = none */
    struct cache_writer *writer;   /* where new records go (with store) */
    bool kv_rotation;          /* config kv_rotation (and WARM_ATTN_ROT_DISABLE) */
    const char *device;        /* config device ("auto", "cpu", "cuda:N"; NULL = cpu) */
    uint32_t gpu_layers;       /* config gpu_layers (0 = all) */
    int experts;               /* config experts (enum engine_experts_place) */
    const char *devices;       /* config devices ("cpu,cpu"; NULL = one CPU) */
    int split;                 /* config split (enum engine_split) */
    const char *tensor_split;  /* config tensor_split (NULL or "" = equal shares) */
    uint32_t chunk_tokens;     /* C (config cache_chunk_tokens; halved for big KV rows; 0 =
                                  ENGINE_CHUNK_TOKENS) */
    uint32_t restore_min_tokens;   /* config cache_restore_min_tokens */
    struct metrics *metrics;   /* an embedding model's cache counters (NULL = none) */
    uint64_t test_stall_usec;  /* tests (WARM_TEST_STALL_USEC): sleep before each decode
                                  step, like a wedged forward pass; 0 in production */
};

/* Loads the model file open at fd (taken over: closed in all cases) and starts its loop.
 * name is for logs. *ret on success only. */
int runner_new(const char *name, int fd, const struct runner_params *p, struct runner **ret,
               struct err_detail *d);
/* Stops the loop (jobs end with -ESHUTDOWN) and frees everything. NULL-safe. */
void runner_free(struct runner *r);

const struct engine_vocab *runner_vocab(const struct runner *r);
/* An embedding model (engine_model_is_embedding) runs on an embedder (embedder.h) instead
 * of the generation loop: it takes no runner_submit() jobs (-EOPNOTSUPP). NULL for a text
 * model. Valid as long as the runner. */
struct embedder *runner_embedder(const struct runner *r);
const struct engine_model *runner_model(const struct runner *r);
uint32_t runner_n_ctx(const struct runner *r);
/* Weights plus KV cache, bytes. */
uint64_t runner_memory_bytes(const struct runner *r);
/* Device i of the model's context (engine_context_device_info); ERR_INVALID past the last. */
int runner_device_info(const struct runner *r, uint32_t i, struct engine_device_info *ret);
/* device = auto that fell back to the CPU for this model: why (else ""). */
const char *runner_device_note(const struct runner *r);
/* Jobs queued or running. */
unsigned runner_n_jobs(struct runner *r);
/* Jobs of uid queued or running. */
unsigned runner_n_jobs_of(struct runner *r, uint32_t uid);
/* What one uid may have queued or running (runner_params.max_jobs_per_uid, effective). */
unsigned runner_max_jobs_per_uid(const struct runner *r);

/* Queues a job. -ESHUTDOWN when the runner is stopping, -EAGAIN when the queue is full,
 * -EDQUOT when the job's uid has max_jobs_per_uid (done() is not called then).
 * Free slots go to the queued job whose uid runs the fewest sequences (the oldest among
 * those), so one uid's many requests never stand before another uid's first. */
int runner_submit(struct runner *r, struct runner_job *j);
