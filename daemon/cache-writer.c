/* cache-writer — queued prompt-cache writes (see cache-writer.h). */
#include "daemon/cache-writer.h"

#include "daemon/log.h"

#include <errno.h>
#include <string.h>

/* Bytes of blobs waiting; beyond it new records are dropped. */
#define QUEUE_MAX_BYTES (512ull << 20)
/* At stop, queued records are written for at most this long (systemd's stop timeout is
 * 90 s by default; a drain must leave room for the rest of the shutdown). */
#define DRAIN_MAX_USEC (20 * 1000000ull)

void cache_write_free(struct cache_write *item) {
    if (!item) return;
    free(item->tokens);
    free(item->blob);
    free(item);
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
            w->n_dropped++;
            cache_write_free(item);
            continue;
        }
        w->head = item->next;
        if (!w->head) w->tail = NULL;
        w->queued_bytes -= item->blob_bytes;
        w->busy++;
        pthread_mutex_unlock(&w->lock);

        struct store_put put = {
            .chain = &item->chain, .kind = item->kind, .parent = item->parent, .p0 = item->p0,
            .tokens = item->tokens, .n_tokens = item->n_tokens, .blob = item->blob,
            .blob_bytes = item->blob_bytes,
        };
        struct err_detail d = {0};
        int e = store_write(w->env, &put, NULL, &d);
        if (e < 0) log_warn("prompt cache: cannot write a record at position %llu: %s",
                            (unsigned long long)item->p0, err_msg(&d, e));
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
