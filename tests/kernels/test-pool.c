/* The thread pool: every thread index runs exactly once per run, results are visible to
 * the caller when kern_pool_run() returns, and workers that fell asleep wake up. */
#include "test.h"

#include "kernels/kernels.h"

#include <errno.h>
#include <stdatomic.h>
#include <time.h>

struct count_task {
    _Atomic int hits[8];
    _Atomic int bad_nth;
    int expect_nth;
    long plain[8]; /* written without atomics: checks the run's memory ordering */
};

static void count_fn(void *arg, int ith, int nth) {
    struct count_task *c = arg;
    if (nth != c->expect_nth || ith < 0 || ith >= nth) atomic_fetch_add(&c->bad_nth, 1);
    else {
        atomic_fetch_add(&c->hits[ith], 1);
        c->plain[ith] += ith + 1;
    }
}

TEST(pool_new_bad_args) {
    struct kern_pool *p = (struct kern_pool *)0x1;
    ASSERT_ERR(kern_pool_new(0, &p), -EINVAL);
    ASSERT_ERR(kern_pool_new(-3, &p), -EINVAL);
    ASSERT_ERR(kern_pool_new(1 << 20, &p), -EINVAL);
    ASSERT_ERR(kern_pool_new(2, NULL), -EINVAL);
    ASSERT_TRUE(p == (struct kern_pool *)0x1); /* not written on failure */
    kern_pool_free(NULL);
    ASSERT_EQ(kern_pool_n_threads(NULL), 1);
}

TEST(pool_null_runs_inline) {
    struct count_task c = {.expect_nth = 1};
    kern_pool_run(NULL, count_fn, &c);
    ASSERT_EQ(c.hits[0], 1);
    ASSERT_EQ(c.bad_nth, 0);
}

TEST(pool_every_thread_once) {
    for (int n = 1; n <= 4; n++) {
        struct kern_pool *p = NULL;
        ASSERT_OK(kern_pool_new(n, &p));
        ASSERT_EQ(kern_pool_n_threads(p), n);
        struct count_task c = {.expect_nth = n};
        enum { RUNS = 3000 };
        for (int r = 0; r < RUNS; r++) kern_pool_run(p, count_fn, &c);
        kern_pool_free(p);
        ASSERT_EQ(c.bad_nth, 0);
        for (int i = 0; i < n; i++) {
            ASSERT_EQ(c.hits[i], RUNS);
            ASSERT_EQ(c.plain[i], (long)RUNS * (i + 1));
        }
        for (int i = n; i < 8; i++) ASSERT_EQ(c.hits[i], 0);
    }
}

/* Pauses longer than the workers' spin phase make them sleep on the futex. */
TEST(pool_wakes_sleepers) {
    struct kern_pool *p = NULL;
    ASSERT_OK(kern_pool_new(3, &p));
    struct count_task c = {.expect_nth = 3};
    for (int r = 0; r < 20; r++) {
        struct timespec ts = {0, 2 * 1000 * 1000};
        nanosleep(&ts, NULL);
        kern_pool_run(p, count_fn, &c);
        for (int i = 0; i < 3; i++) ASSERT_EQ(c.hits[i], r + 1);
    }
    kern_pool_free(p);
}

/* A run whose thread 0 finishes long after the others, and one where a worker is last. */
struct skew_task {
    int slow;
    _Atomic int done;
};
static void skew_fn(void *arg, int ith, int nth) {
    struct skew_task *s = arg;
    if (ith == s->slow) {
        struct timespec ts = {0, 3 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    atomic_fetch_add(&s->done, 1);
}

TEST(pool_skewed_threads) {
    struct kern_pool *p = NULL;
    ASSERT_OK(kern_pool_new(2, &p));
    for (int slow = 0; slow < 2; slow++) {
        for (int r = 0; r < 5; r++) {
            struct skew_task s = {.slow = slow};
            kern_pool_run(p, skew_fn, &s);
            ASSERT_EQ(s.done, 2);
        }
    }
    kern_pool_free(p);
}

TEST(pool_free_while_idle_sleeping) {
    struct kern_pool *p = NULL;
    ASSERT_OK(kern_pool_new(4, &p));
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, NULL);
    kern_pool_free(p); /* joins workers asleep in futex_wait */
}

TEST_MAIN(T(pool_new_bad_args), T(pool_null_runs_inline), T(pool_every_thread_once),
          T(pool_wakes_sleepers), T(pool_skewed_threads), T(pool_free_while_idle_sleeping))
