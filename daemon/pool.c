/* pool — bounded work threads for long request work (see pool.h). */
#include "daemon/pool.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* The row of uid (lock held); with add, a free row becomes uid's. NULL: none. A free row
 * always exists while n_jobs < max_total, as every row in use holds a job. */
static struct pool_uid *uid_row_locked(struct pool *p, uint32_t uid, bool add) {
    struct pool_uid *free_row = NULL;
    for (unsigned i = 0; i < p->opt.max_total; i++) {
        struct pool_uid *u = &p->uids[i];
        if (u->n_jobs && u->uid == uid) return u;
        if (!u->n_jobs && !free_row) free_row = u;
    }
    if (!add || !free_row) return NULL;
    free_row->uid = uid;
    return free_row;
}

static void *pool_main(void *arg) {
    struct pool_thread *t = arg;
    struct pool *p = t->pool;
    notify_beat_bind(&t->beat);
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->head && !p->stopping) pthread_cond_wait(&p->cond, &p->lock);
        struct pool_job *j = p->head;
        if (!j) break; /* stopping, and the queue is drained */
        p->head = j->next;
        if (!p->head) p->tail = NULL;
        uint32_t uid = j->uid;
        pthread_mutex_unlock(&p->lock);

        notify_beat_busy(&t->beat, true, time_now_usec());
        j->run(j); /* frees j */
        notify_beat_busy(&t->beat, false, time_now_usec());

        pthread_mutex_lock(&p->lock);
        struct pool_uid *u = uid_row_locked(p, uid, false);
        if (u) u->n_jobs--;
        p->n_jobs--;
    }
    pthread_mutex_unlock(&p->lock);
    notify_beat_bind(NULL);
    return NULL;
}

int pool_start(struct pool *p, const struct pool_options *o) {
    memset(p, 0, sizeof *p);
    p->opt = *o;
    p->opt.n_threads = MAX(o->n_threads, 1u);
    p->opt.max_total = MAX(o->max_total, 1u);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cond, NULL);
    p->uids = calloc_array(p->opt.max_total, sizeof *p->uids);
    p->threads = calloc_array(p->opt.n_threads, sizeof *p->threads);
    if (!p->uids || !p->threads) {
        pool_stop(p);
        return -ENOMEM;
    }
    for (unsigned i = 0; i < p->opt.n_threads; i++) {
        struct pool_thread *t = &p->threads[i];
        t->pool = p;
        snprintf(t->name, sizeof t->name, "work pool thread %u", i);
        t->beat.name = t->name;
        notify_beat_step(&t->beat, time_now_usec());
        int r = p->opt.notify ? notify_beat_add(p->opt.notify, &t->beat) : 0;
        if (r >= 0 && (r = -pthread_create(&t->thread, NULL, pool_main, t)) < 0 && p->opt.notify)
            notify_beat_del(p->opt.notify, &t->beat);
        if (r < 0) {
            pool_stop(p);
            return r;
        }
        p->n_threads++;
    }
    return 0;
}

int pool_submit(struct pool *p, struct pool_job *j, struct err_detail *err) {
    pthread_mutex_lock(&p->lock);
    int r = 0;
    struct pool_uid *u = NULL;
    if (p->stopping || !p->n_threads) {
        r = err_set(err, -ESHUTDOWN, "warmd is shutting down");
    } else if ((u = uid_row_locked(p, j->uid, false)) && u->n_jobs >= p->opt.max_per_uid) {
        r = err_set(err, -EBUSY, "uid %u has %u long requests in progress; at most %u per uid",
                    j->uid, u->n_jobs, p->opt.max_per_uid);
    } else if (p->n_jobs >= p->opt.max_total) {
        r = err_set(err, -EBUSY, "the work pool has %u long requests in progress; at most %u",
                    p->n_jobs, p->opt.max_total);
    } else {
        if (!u) u = uid_row_locked(p, j->uid, true);
        u->n_jobs++;
        p->n_jobs++;
        j->next = NULL;
        if (p->tail) p->tail->next = j;
        else p->head = j;
        p->tail = j;
        pthread_cond_signal(&p->cond);
    }
    pthread_mutex_unlock(&p->lock);
    return r;
}

void pool_stop(struct pool *p) {
    if (!p->uids && !p->threads) return; /* never started, or stopped */
    pthread_mutex_lock(&p->lock);
    p->stopping = true;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
    for (unsigned i = 0; i < p->n_threads; i++) {
        pthread_join(p->threads[i].thread, NULL);
        if (p->opt.notify) notify_beat_del(p->opt.notify, &p->threads[i].beat);
    }
    p->n_threads = 0;
    free(p->threads);
    free(p->uids);
    p->threads = NULL;
    p->uids = NULL;
    pthread_cond_destroy(&p->cond);
    pthread_mutex_destroy(&p->lock);
}

unsigned pool_n_jobs(struct pool *p) {
    pthread_mutex_lock(&p->lock);
    unsigned n = p->n_jobs;
    pthread_mutex_unlock(&p->lock);
    return n;
}
