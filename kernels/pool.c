/* A fixed set of worker threads for data-parallel kernels.
 *
 * One run at a time: the caller publishes (fn, arg), bumps the generation counter and
 * runs thread 0 itself; workers notice the new generation, run their share and count
 * themselves done. Waiting is spin-then-futex on both sides: a forward pass issues a
 * few hundred runs per token, each a few microseconds, so workers spin a while (about
 * 50 µs) before they sleep, and a sleeper costs one futex wake. */
#include "kernels/matmul.h"

#include "base/base.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

enum {
    POOL_MAX_THREADS = 512,
    POOL_SPIN = 4096, /* pause iterations before sleeping (~40 cycles each) */
    POOL_YIELD_EVERY = 256,
};

struct pool_worker {
    struct kern_pool *pool;
    int ith;
    pthread_t thread;
};

struct kern_pool {
    int n_threads;
    int n_started; /* workers created (1..n_threads-1 when creation failed midway) */
    struct pool_worker *workers;
    kern_task_fn fn;
    void *arg;
    _Atomic uint32_t gen;     /* futex word: bumped once per run and once at shutdown */
    _Atomic uint32_t n_done;  /* futex word: workers done with the current run */
    _Atomic int n_sleeping;   /* workers in futex_wait on gen */
    _Atomic int caller_sleeping;
    _Atomic bool stop;
    uint64_t n_runs; /* kern_pool_run calls: one caller at a time */
};

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void futex_wait(_Atomic uint32_t *word, uint32_t val) {
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}
static void futex_wake(_Atomic uint32_t *word, int n) {
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

/* One step of a spin wait: pause, and every POOL_YIELD_EVERY steps give the core away,
 * so that on a machine with more runnable threads than cores the thread we wait for can
 * run (spinning on its core would only delay it). */
static void spin_step(int i) {
    cpu_relax();
    if (i % POOL_YIELD_EVERY == POOL_YIELD_EVERY - 1) sched_yield();
}

/* Waits until *word != val; returns the new value. */
static uint32_t wait_change(_Atomic uint32_t *word, uint32_t val, _Atomic int *sleeping) {
    uint32_t v;
    for (int i = 0; i < POOL_SPIN; i++) {
        v = atomic_load_explicit(word, memory_order_acquire);
        if (v != val) return v;
        spin_step(i);
    }
    for (;;) {
        atomic_fetch_add(sleeping, 1); /* seq_cst: pairs with the waker's load */
        v = atomic_load(word);
        if (v == val) futex_wait(word, val);
        atomic_fetch_sub(sleeping, 1);
        v = atomic_load_explicit(word, memory_order_acquire);
        if (v != val) return v;
    }
}

static void *worker_main(void *p) {
    struct pool_worker *w = p;
    struct kern_pool *pool = w->pool;
    uint32_t seen = 0;
    for (;;) {
        seen = wait_change(&pool->gen, seen, &pool->n_sleeping);
        if (atomic_load(&pool->stop)) break;
        pool->fn(pool->arg, w->ith, pool->n_threads);
        atomic_fetch_add(&pool->n_done, 1); /* seq_cst: release our results */
        if (atomic_load(&pool->caller_sleeping)) futex_wake(&pool->n_done, 1);
    }
    return NULL;
}

static void pool_stop(struct kern_pool *pool) {
    atomic_store(&pool->stop, true);
    atomic_fetch_add(&pool->gen, 1);
    futex_wake(&pool->gen, INT_MAX);
    for (int i = 0; i < pool->n_started; i++) pthread_join(pool->workers[i].thread, NULL);
}

int kern_pool_new(int n_threads, struct kern_pool **ret) {
    if (n_threads < 1 || n_threads > POOL_MAX_THREADS || !ret) return -EINVAL;
    struct kern_pool *pool = calloc(1, sizeof(*pool));
    if (!pool) return -ENOMEM;
    pool->n_threads = n_threads;
    if (n_threads > 1) {
        pool->workers = calloc((size_t)n_threads - 1, sizeof(*pool->workers));
        if (!pool->workers) {
            free(pool);
            return -ENOMEM;
        }
    }
    for (int i = 0; i < n_threads - 1; i++) {
        struct pool_worker *w = &pool->workers[i];
        w->pool = pool;
        w->ith = i + 1;
        int r = pthread_create(&w->thread, NULL, worker_main, w);
        if (r != 0) {
            pool_stop(pool);
            free(pool->workers);
            free(pool);
            return -r;
        }
        pool->n_started++;
    }
    *ret = pool;
    return 0;
}

void kern_pool_free(struct kern_pool *pool) {
    if (!pool) return;
    pool_stop(pool);
    free(pool->workers);
    free(pool);
}

int kern_pool_n_threads(const struct kern_pool *pool) {
    return pool ? pool->n_threads : 1;
}

uint64_t kern_pool_runs(const struct kern_pool *pool) { return pool ? pool->n_runs : 0; }

void kern_pool_run(struct kern_pool *pool, kern_task_fn fn, void *arg) {
    if (pool) pool->n_runs++;
    if (!pool || pool->n_threads == 1) {
        fn(arg, 0, 1);
        return;
    }
    uint32_t n_workers = (uint32_t)pool->n_threads - 1;
    pool->fn = fn;
    pool->arg = arg;
    atomic_store_explicit(&pool->n_done, 0, memory_order_relaxed);
    atomic_fetch_add(&pool->gen, 1); /* seq_cst: publishes fn/arg, pairs with sleepers */
    if (atomic_load(&pool->n_sleeping) > 0) futex_wake(&pool->gen, INT_MAX);

    fn(arg, 0, pool->n_threads);

    uint32_t done = atomic_load_explicit(&pool->n_done, memory_order_acquire);
    for (int i = 0; i < POOL_SPIN && done != n_workers; i++) {
        spin_step(i);
        done = atomic_load_explicit(&pool->n_done, memory_order_acquire);
    }
    while (done != n_workers) {
        atomic_store(&pool->caller_sleeping, 1);
        done = atomic_load(&pool->n_done);
        if (done != n_workers) futex_wait(&pool->n_done, done);
        atomic_store(&pool->caller_sleeping, 0);
        done = atomic_load_explicit(&pool->n_done, memory_order_acquire);
    }
}
