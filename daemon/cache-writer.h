/* cache-writer — the thread that writes prompt-cache records to the store, off the
 * response path (DESIGN.md §2 step 6). Model loops export KV blobs and queue them here;
 * the writer calls store_write for each. The queue is bounded in bytes: past the bound a
 * record is dropped (and counted) rather than holding a model loop back. At stop, what is
 * queued is written before the thread ends.
 *
 * Failures. Every failed write is counted (n_failed, warmd_cache_write_errors_total) and
 * logged once per episode, not once per record. A full filesystem (-ENOSPC from the store)
 * pauses nothing but the log: the store stays open and lookups serve what is stored, each
 * queued record is still tried (and fails cheaply), and the first write that succeeds
 * with space free again is logged as "space is back". */
#pragma once

#include "base/base.h"
#include "store/store.h"

#include <pthread.h>

/* One record to write; owns tokens and blob (malloc'd), freed by the writer. */
struct cache_write {
    struct store_chain chain;
    enum store_kind kind;
    struct hash128 parent;
    uint64_t p0;
    int32_t *tokens;
    uint32_t n_tokens;
    void *blob;
    size_t blob_bytes;
    struct cache_write *next;
};

struct cache_writer {
    struct store_env *env;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond, idle;
    struct cache_write *head, *tail;
    size_t queued_bytes;
    size_t n_queued;            /* records in the list */
    unsigned busy;              /* records taken but not yet written */
    bool running, stopping;
    uint64_t n_written, n_dropped, n_failed;
    uint64_t drain_until_usec;  /* stopping: queued records past this time are dropped */
    /* writer thread only: the episode being reported (one log line per episode) */
    bool no_space;              /* a write failed for lack of space; none succeeded since
                                   with space free again */
    uint64_t n_space_failed;    /* writes failed for lack of space in this episode */
    int last_error;             /* the last write's error other than -ENOSPC, 0 after a success */
    uint64_t n_error_run;       /* writes failed with last_error in a row */
};

int cache_writer_start(struct cache_writer *w, struct store_env *env);
/* Writes what is queued, then ends the thread. Safe on a writer never started. */
void cache_writer_stop(struct cache_writer *w);
/* Queues a record (ownership moves to the writer; freed at once when dropped). */
void cache_writer_put(struct cache_writer *w, struct cache_write *item);
void cache_write_free(struct cache_write *item);
