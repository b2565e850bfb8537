/* cache-writer — queued prompt-cache writes (see cache-writer.h). */
#include "daemon/cache-writer.h"

#include "daemon/log.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Bytes of blobs waiting; beyond it new records are dropped. */
#define QUEUE_MAX_BYTES (512ull << 20)
/* A full filesystem ends (and "space is back" is logged) at the first write that succeeds
 * while at least this much is free: LMDB may reuse pages of its own file while the disk
 * is still full, and such a write alone says nothing about the disk. */
#define SPACE_BACK_BYTES (1ull << 20)
/* At stop, queued records are written for at most this long (systemd's stop timeout is
 * 90 s by default; a drain must leave room for the rest of the shutdown). */
#define DRAIN_MAX_USEC (20 * 1000000ull)

void cache_write_free(struct cache_write *item) {
    if (!item) return;
    free(item->tokens);
    free(item->blob);
    free(item);
}

static void format_bytes(uint64_t n, char *out, size_t size) {
    static const char *const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
    unsigned u = 0;
    while (n >= 10240 && u + 1 < ARRAY_SIZE(units)) {
        n >>= 10;
        u++;
    }
    snprintf(out, size, "%llu %s", (unsigned long long)n, units[u]);
}

/* Logs the outcome of one write, once per episode: a full filesystem is reported when it
 * starts (with the store's detail: the path and what is free) and when a write succeeds
 * with space free again; a run of the same other error is reported by its first write
 * and, when it ends, by its length. Every failure is counted by the caller. Writer thread
 * only (the episode state is its own). */
static void report(struct cache_writer *w, int e, const struct err_detail *d, uint64_t p0) {
    if (e == -ENOSPC) {
        if (!w->no_space)
            log_warn("prompt cache: %s; writes paused, serving from what is stored",
                     err_msg(d, e));
        w->no_space = true;
        w->n_space_failed++;
        return;
    }
    if (e < 0 && e == w->last_error) {
        w->n_error_run++;
        return;
    }
    if (w->n_error_run > 1)
        log_warn("prompt cache: %llu writes in a row failed with: %s",
                 (unsigned long long)w->n_error_run, err_str(w->last_error));
    w->last_error = e;
    w->n_error_run = e < 0 ? 1 : 0;
    if (e < 0) {
        log_warn("prompt cache: cannot write a record at position %llu: %s",
                 (unsigned long long)p0, err_msg(d, e));
        return;
    }
    uint64_t free_bytes = 0;
    if (!w->no_space || store_env_space(w->env, &free_bytes) < 0 ||
        free_bytes < SPACE_BACK_BYTES)
        return;
    char f[32];
    format_bytes(free_bytes, f, sizeof f);
    log_info("prompt cache: space is back on %s (%s free); writes resumed after %llu failed "
             "for lack of space", store_env_path(w->env), f,
             (unsigned long long)w->n_space_failed);
    w->no_space = false;
    w->n_space_failed = 0;
}

static void *writer_loop(void *arg) {
    struct cache_writer *w = arg;
    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (!w->head && !w->stopping) pthread_cond_wait(&w->cond, &w->lock);
        struct cache_write *item = w->head;
        if (!item) break; /* stopping and drained */
        if (w->stopping && time_now_usec() > w->drain_until_usec) {
            /* SIGTERM drain is bounded: what is left is dropped (and counted) */
            w->head = item->next;
            if (!w->head) w->tail = NULL;
            w->queued_bytes -= item->blob_bytes;
            w->n_queued--;
            w->n_dropped++;
            cache_write_free(item);
            continue;
        }
        w->head = item->next;
        if (!w->head) w->tail = NULL;
        w->queued_bytes -= item->blob_bytes;
        w->n_queued--;
        w->busy++;
        pthread_mutex_unlock(&w->lock);

        struct store_put put = {
            .chain = &item->chain, .kind = item->kind, .parent = item->parent, .p0 = item->p0,
            .tokens = item->tokens, .n_tokens = item->n_tokens, .blob = item->blob,
            .blob_bytes = item->blob_bytes,
        };
        struct err_detail d = {0};
        int e = store_write(w->env, &put, NULL, &d);
        report(w, e, &d, item->p0);
        cache_write_free(item);

        pthread_mutex_lock(&w->lock);
        w->busy--;
        if (e < 0) w->n_failed++;
        else w->n_written++;
        pthread_cond_broadcast(&w->idle);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

int cache_writer_start(struct cache_writer *w, struct store_env *env) {
    memset(w, 0, sizeof *w);
    w->env = env;
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cond, NULL);
    pthread_cond_init(&w->idle, NULL);
    int e = -pthread_create(&w->thread, NULL, writer_loop, w);
    if (e < 0) return e;
    w->running = true;
    return 0;
}

void cache_writer_put(struct cache_writer *w, struct cache_write *item) {
    item->next = NULL;
    pthread_mutex_lock(&w->lock);
    if (!w->running || w->stopping || w->queued_bytes + item->blob_bytes > QUEUE_MAX_BYTES) {
        w->n_dropped++;
        pthread_mutex_unlock(&w->lock);
        cache_write_free(item);
        return;
    }
    if (w->tail) w->tail->next = item;
    else w->head = item;
    w->tail = item;
    w->queued_bytes += item->blob_bytes;
    w->n_queued++;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

void cache_writer_stop(struct cache_writer *w) {
    if (!w->running) return;
    pthread_mutex_lock(&w->lock);
    w->stopping = true;
    w->drain_until_usec = time_now_usec() + DRAIN_MAX_USEC;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    w->running = false;
    pthread_cond_destroy(&w->idle);
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->lock);
}
