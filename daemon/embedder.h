/* embedder — the loop of a loaded embedding model (engine_model_is_embedding): a thread of
 * its own, its own queue and an embeddings context, so an Embed call never waits behind a
 * generation of another model (each loaded model has its own runner and thread; a chat
 * model's long stream runs on that model's loop, not here).
 *
 * A job is a list of inputs (token ids, each at most embedder_max_tokens() long). The loop
 * takes jobs in order; for each it first looks every input up in the cache, then packs the
 * rest into as few forward passes as the context allows (at most n_seq inputs and n_batch
 * tokens a pass: the engine takes a whole input in one step), and writes one raw pooled
 * vector (engine_model_n_embd_out() floats, not normalized) per input. Normalization and
 * Matryoshka truncation are the caller's (embed_vector_finish()).
 *
 * Cache: an LRU of raw vectors keyed by (model fingerprint, XXH3-128 of the token ids,
 * their count), at most EMBED_CACHE_ENTRIES entries and EMBED_CACHE_BYTES of vectors per
 * model; one entry serves every normalize/dimensions variant, since those are applied to a
 * copy. It lives as long as the model is loaded (a replaced file is a new model). Hits and
 * misses are counted in the metrics given at creation.
 *
 * Threads: embedder_submit and the counts from any thread; a job's callbacks run on the
 * loop thread. embedder_free ends the current job after its current pass and fails the
 * queued ones with -ESHUTDOWN ("model unloaded"). */
#pragma once

#include "base/base.h"
#include "daemon/metrics.h"
#include "daemon/notify.h"
#include "engine/engine.h"

#define EMBED_CACHE_ENTRIES 4096
#define EMBED_CACHE_BYTES (16u << 20)

struct embedder;
struct embed_job;

struct embed_job_ops {
    /* True when the client is gone: the job ends with -ECANCELED between passes. */
    bool (*cancelled)(struct embed_job *j);
    /* Called exactly once, last; the job then belongs to the callee again. err < 0 with msg
     * on failure. */
    void (*done)(struct embed_job *j, int err, const char *msg);
};

/* Embedded in the caller's job struct. */
struct embed_job {
    const struct embed_job_ops *ops;
    size_t n_inputs;
    const int32_t *const *tokens;  /* borrowed until done(): n_inputs arrays */
    const uint32_t *n_tokens;      /* each 1..embedder_max_tokens() */
    float *out;                    /* n_inputs × embedder_n_out() floats, written by the loop */
    uint32_t n_cached;             /* inputs answered from the cache, set by the loop */
    uint32_t uid;                  /* the caller: its share of the queue */
    struct embed_job *next;        /* the embedder's queue */
};

struct embedder_params {
    unsigned max_jobs;             /* queued + running; more is -EAGAIN (0 = 64) */
    unsigned max_jobs_per_uid;     /* of one uid; more is -EDQUOT (0 = max_jobs) */
    struct notify *notify;         /* the loop's watchdog beat, NULL = none */
    struct metrics *metrics;       /* cache hits and misses, NULL = none */
};

/* Starts the loop over ctx (an embeddings context, borrowed: it must outlive the embedder;
 * the loop is its only user). name is for logs. *ret on success only. */
int embedder_new(const char *name, struct engine_context *ctx, const struct embedder_params *p,
                 struct embedder **ret, struct err_detail *d);
/* Stops the loop (see above) and frees everything. NULL-safe. */
void embedder_free(struct embedder *e);

/* The longest input: the context's positions, at most its batch. */
uint32_t embedder_max_tokens(const struct embedder *e);
/* Floats of a raw vector (engine_model_n_embd_out). */
uint32_t embedder_n_out(const struct embedder *e);
/* Jobs queued or running, in all and of uid. */
unsigned embedder_n_jobs(struct embedder *e);
unsigned embedder_n_jobs_of(struct embedder *e, uint32_t uid);
unsigned embedder_max_jobs_per_uid(const struct embedder *e);
/* Entries in the cache now. */
size_t embedder_cache_entries(struct embedder *e);

/* Queues a job. -ESHUTDOWN when stopping, -EAGAIN when the queue is full, -EDQUOT when the
 * uid has max_jobs_per_uid (done() is not called then). */
int embedder_submit(struct embedder *e, struct embed_job *j);

/* A raw vector of n floats into out[0..dims): its first dims values (dims 1..n), divided by
 * their Euclidean norm unless raw (the squares summed in double, then 1/sqrt as a float, as
 * engine_context_embeddings() and llama-embedding; a zero vector stays zero). */
void embed_vector_finish(float *out, const float *in, uint32_t dims, bool raw);
