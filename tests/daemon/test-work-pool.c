/* The daemon's work pool (daemon/pool.h): the per-uid and total caps refuse at once with a
 * message naming the counts, a refused uid is served again once its jobs finished, jobs
 * run in submission order and pool_stop runs what is queued, and each pool thread's beat
 * is busy for the watchdog while it runs a job (and not while the job paused it). */
#include "test.h"

#include "daemon/pool.h"

#include <errno.h>
#include <pthread.h>

/* Jobs wait at a gate the test opens; they record the order in which they ran. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static bool gate_open;
static unsigned n_started, n_done, order[64];

struct job {
    struct pool_job base;
    unsigned id;
    bool pause; /* brackets its wait with notify_beat_pause/resume */
};

static void job_run(struct pool_job *pj) {
    struct job *j = (struct job *)pj;
    if (j->pause) notify_beat_pause();
    pthread_mutex_lock(&lock);
    n_started++;
    pthread_cond_broadcast(&cond);
    while (!gate_open) pthread_cond_wait(&cond, &lock);
    if (n_done < ARRAY_SIZE(order)) order[n_done] = j->id;
    n_done++;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
    if (j->pause) notify_beat_resume();
    free(j);
}

static void reset(bool open) {
    pthread_mutex_lock(&lock);
    gate_open = open;
    n_started = n_done = 0;
    pthread_mutex_unlock(&lock);
}

static void gate(bool open) {
    pthread_mutex_lock(&lock);
    gate_open = open;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
}

static void wait_started(unsigned n) {
    pthread_mutex_lock(&lock);
    while (n_started < n) pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
}

/* Waits until the pool holds no job (n_done counts a job before its row is released). */
static void wait_empty(struct pool *p) {
    while (pool_n_jobs(p) > 0) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

static int submit(struct pool *p, uint32_t uid, unsigned id, bool pause, struct err_detail *e) {
    struct job *j = calloc(1, sizeof *j);
    if (!j) return -ENOMEM;
    *j = (struct job){.base = {.run = job_run, .uid = uid}, .id = id, .pause = pause};
    int r = pool_submit(p, &j->base, e);
    if (r < 0) free(j);
    return r;
}

TEST(caps_refuse_at_once) {
    struct pool p;
    reset(false);
    struct pool_options o = {.n_threads = 1, .max_per_uid = 2, .max_total = 3};
    ASSERT_OK(pool_start(&p, &o));
    struct err_detail e = {0};
    ASSERT_OK(submit(&p, 1000, 1, false, &e));
    ASSERT_OK(submit(&p, 1000, 2, false, &e));
    wait_started(1); /* one running, one queued: both count */
    ASSERT_ERR(submit(&p, 1000, 3, false, &e), -EBUSY);
    ASSERT_STREQ(e.msg, "uid 1000 has 2 long requests in progress; at most 2 per uid");
    ASSERT_OK(submit(&p, 1001, 4, false, &e));
    ASSERT_ERR(submit(&p, 1002, 5, false, &e), -EBUSY);
    ASSERT_STREQ(e.msg, "the work pool has 3 long requests in progress; at most 3");
    ASSERT_EQ(pool_n_jobs(&p), 3);
    gate(true);
    wait_empty(&p);
    ASSERT_EQ(n_done, 3);
    /* Room again, for the refused uid too. */
    ASSERT_OK(submit(&p, 1000, 6, false, &e));
    ASSERT_OK(submit(&p, 1002, 7, false, &e));
    wait_empty(&p);
    ASSERT_EQ(n_done, 5);
    pool_stop(&p);
}

TEST(order_and_stop_drains) {
    struct pool p;
    reset(false);
    struct pool_options o = {.n_threads = 1, .max_per_uid = 64, .max_total = 64};
    ASSERT_OK(pool_start(&p, &o));
    struct err_detail e = {0};
    for (unsigned i = 0; i < 20; i++) ASSERT_OK(submit(&p, i % 3, i, false, &e));
    wait_started(1);
    gate(true);
    pool_stop(&p); /* runs the 19 queued before it returns */
    ASSERT_EQ(n_done, 20);
    for (unsigned i = 0; i < 20; i++) ASSERT_EQ(order[i], i);
}

static struct notify_beat *beat_named(struct notify *n, const char *name) {
    for (unsigned i = 0; i < n->n_beats; i++)
        if (strcmp(n->beats[i]->name, name) == 0) return n->beats[i];
    return NULL;
}

TEST(threads_are_watched) {
    struct notify n;
    notify_init(&n);
    n.watchdog_usec = 1000000; /* as if WATCHDOG_USEC=1s */
    struct pool p;
    reset(false);
    struct pool_options o = {.n_threads = 2, .max_per_uid = 4, .max_total = 4, .notify = &n};
    ASSERT_OK(pool_start(&p, &o));
    ASSERT_EQ(n.n_beats, 2);
    struct notify_beat *b0 = beat_named(&n, "work pool thread 0");
    struct notify_beat *b1 = beat_named(&n, "work pool thread 1");
    ASSERT_TRUE(b0 && b1);
    /* Idle threads never hold the watchdog back. */
    notify_tick(&n, time_now_usec() + 10000000);
    ASSERT_TRUE(!n.stalled);
    /* A job that does not return: its thread is busy without progress. */
    struct err_detail e = {0};
    ASSERT_OK(submit(&p, 1, 1, false, &e));
    wait_started(1);
    ASSERT_TRUE(atomic_load(&b0->busy) || atomic_load(&b1->busy));
    notify_tick(&n, time_now_usec() + 10000000);
    ASSERT_TRUE(n.stalled);
    gate(true);
    wait_empty(&p);
    ASSERT_TRUE(!atomic_load(&b0->busy) && !atomic_load(&b1->busy));
    notify_tick(&n, time_now_usec() + 10000000);
    ASSERT_TRUE(!n.stalled);
    /* A job that paused its beat (a model load) does not count as a stall. */
    reset(false);
    ASSERT_OK(submit(&p, 1, 2, true, &e));
    wait_started(1);
    notify_tick(&n, time_now_usec() + 10000000);
    ASSERT_TRUE(!n.stalled);
    gate(true);
    wait_empty(&p);
    pool_stop(&p);
    ASSERT_EQ(n.n_beats, 0);
    notify_done(&n);
}

TEST(stop_twice_and_never_started) {
    struct pool p;
    struct pool_options o = {.n_threads = 1, .max_per_uid = 1, .max_total = 1};
    ASSERT_OK(pool_start(&p, &o));
    pool_stop(&p);
    pool_stop(&p); /* twice is fine */
    struct pool never = {0};
    pool_stop(&never);
}

TEST_MAIN(T(caps_refuse_at_once), T(order_and_stop_drains), T(threads_are_watched),
          T(stop_twice_and_never_started))
