/* pool — a few threads for request work that can take long (tokenizing megabytes, loading
 * a model, walking a big prompt store), so that the gRPC worker threads only decode,
 * dispatch and answer, and a flood of long requests cannot delay a short one.
 *
 * Bounded: a job counts from pool_submit until its run function returns (queued or
 * running); a uid has at most max_per_uid jobs in the pool and the pool max_total, and a
 * job past either cap is refused at once (nothing waits for room). Jobs run in the order
 * they were submitted.
 *
 * Watchdog: each thread owns a notify_beat, busy while it runs a job and stamped when the
 * job returns, so a wedged job stops the pings. A step whose length is not the job's own
 * (a model load) is bracketed by notify_beat_pause/resume.
 *
 * Ownership: pool_submit takes the job; its run function owns it from then on and frees
 * it. Threads: pool_submit from any thread; pool_start/pool_stop from the main thread. */
#pragma once

#include "base/base.h"
#include "daemon/notify.h"

#include <pthread.h>

struct pool_job;

/* Runs the job on a pool thread and frees it. */
typedef void (*pool_run_fn)(struct pool_job *j);

struct pool_job {
    pool_run_fn run;
    uint32_t uid;               /* whose job: the per-uid cap */
    struct pool_job *next;      /* the pool's queue */
};

struct pool_options {
    unsigned n_threads;         /* at least 1 */
    unsigned max_per_uid;       /* jobs of one uid, queued or running */
    unsigned max_total;         /* jobs of everyone */
    struct notify *notify;      /* the watchdog; NULL: threads are not watched */
};

struct pool_uid {
    uint32_t uid;
    unsigned n_jobs;            /* 0: a free row */
};

struct pool_thread {
    struct pool *pool;
    pthread_t thread;
    struct notify_beat beat;
    char name[32];
};

struct pool {
    struct pool_options opt;
    struct pool_thread *threads;
    unsigned n_threads;         /* started */
    pthread_mutex_t lock;       /* guards the fields below */
    pthread_cond_t cond;
    struct pool_job *head, *tail;
    unsigned n_jobs;            /* queued or running */
    struct pool_uid *uids;      /* max_total rows: every job's uid has one */
    bool stopping;
};

/* Starts the threads. On failure nothing is left running. */
int pool_start(struct pool *p, const struct pool_options *o);
/* Queues j (j->run and j->uid set by the caller). 0: queued, the pool owns j. -EBUSY when
 * j->uid already has max_per_uid jobs in the pool or the pool has max_total (err names
 * which, with the counts), -ESHUTDOWN once pool_stop began; then j stays the caller's. */
int pool_submit(struct pool *p, struct pool_job *j, struct err_detail *err);
/* Runs what is queued, then joins the threads. Safe on a pool that never started. */
void pool_stop(struct pool *p);
/* Jobs in the pool (queued or running). */
unsigned pool_n_jobs(struct pool *p);
