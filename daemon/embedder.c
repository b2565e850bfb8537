/* embedder — an embedding model's loop and its cache of vectors (see embedder.h). */
#include "daemon/embedder.h"

#include "daemon/log.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the cache: a hash table of chains over an LRU list ------------------------------- */

#define CACHE_BUCKETS 8192 /* a power of two, about 2 x EMBED_CACHE_ENTRIES */

struct cache_entry {
    struct hash128 key;           /* XXH3-128 of the token ids */
    uint32_t n_tokens;
    struct cache_entry *chain;    /* same bucket */
    struct cache_entry *prev, *next; /* LRU, most recent first */
    float vec[];                  /* n_out raw floats */
};

struct embed_cache {
    struct cache_entry *bucket[CACHE_BUCKETS];
    struct cache_entry *head, *tail;
    size_t n_entries, max_entries;
};

static void lru_unlink(struct embed_cache *c, struct cache_entry *x) {
    if (x->prev) x->prev->next = x->next;
    else c->head = x->next;
    if (x->next) x->next->prev = x->prev;
    else c->tail = x->prev;
    x->prev = x->next = NULL;
}

static void lru_push(struct embed_cache *c, struct cache_entry *x) {
    x->prev = NULL;
    x->next = c->head;
    if (c->head) c->head->prev = x;
    c->head = x;
    if (!c->tail) c->tail = x;
}

static struct cache_entry **chain_of(struct embed_cache *c, struct hash128 k) {
    return &c->bucket[k.lo & (CACHE_BUCKETS - 1)];
}

static struct cache_entry *cache_get(struct embed_cache *c, struct hash128 k, uint32_t n) {
    for (struct cache_entry *x = *chain_of(c, k); x; x = x->chain)
        if (x->n_tokens == n && hash128_eq(x->key, k)) {
            lru_unlink(c, x);
            lru_push(c, x);
            return x;
        }
    return NULL;
}

static void cache_drop(struct embed_cache *c, struct cache_entry *x) {
    for (struct cache_entry **p = chain_of(c, x->key); *p; p = &(*p)->chain)
        if (*p == x) {
            *p = x->chain;
            break;
        }
    lru_unlink(c, x);
    free(x);
    c->n_entries--;
}

/* Adds a vector (no-op when there is no memory: a cache may forget). */
static void cache_put(struct embed_cache *c, struct hash128 k, uint32_t n, const float *v,
                      uint32_t n_out) {
    if (!c->max_entries || cache_get(c, k, n)) return;
    while (c->n_entries >= c->max_entries) cache_drop(c, c->tail);
    struct cache_entry *x = malloc(sizeof *x + (size_t)n_out * sizeof(float));
    if (!x) return;
    x->key = k;
    x->n_tokens = n;
    memcpy(x->vec, v, (size_t)n_out * sizeof(float));
    x->chain = *chain_of(c, k);
    *chain_of(c, k) = x;
    x->prev = x->next = NULL;
    lru_push(c, x);
    c->n_entries++;
}

static void cache_clear(struct embed_cache *c) {
    while (c->tail) cache_drop(c, c->tail);
}

/* ---- the embedder -------------------------------------------------------------------- */

struct embedder {
    char name[160];
    struct engine_context *ctx;
    const struct engine_model *model;
    uint32_t n_seq, n_batch, max_tokens, n_out;
    struct metrics *metrics;
    struct notify *notify;
    struct notify_beat beat;
    char beat_name[192];
    /* one pass: the tokens of up to n_seq inputs, and which input each sequence is */
    int32_t *b_token, *b_pos, *b_seq;
    bool *b_want;
    size_t *b_input;
    float *vec;                   /* one raw vector */
    bool *hit;                    /* per input of the current job */
    size_t hit_cap;
    struct embed_cache cache;     /* the loop's, but entries counted under lock */

    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct embed_job *head, *tail;
    bool running;                 /* a job is between dequeue and done */
    uint32_t running_uid;         /* its uid: the job itself may be freed by done */
    size_t n_cache_entries;       /* mirrored under lock for embedder_cache_entries */
    unsigned n_jobs, max_jobs, max_jobs_per_uid;
    bool stopping;
};

uint32_t embedder_max_tokens(const struct embedder *e) { return e->max_tokens; }
uint32_t embedder_n_out(const struct embedder *e) { return e->n_out; }
unsigned embedder_max_jobs_per_uid(const struct embedder *e) { return e->max_jobs_per_uid; }

unsigned embedder_n_jobs(struct embedder *e) {
    pthread_mutex_lock(&e->lock);
    unsigned n = e->n_jobs;
    pthread_mutex_unlock(&e->lock);
    return n;
}

static unsigned uid_jobs_locked(struct embedder *e, uint32_t uid) {
    unsigned n = e->running && e->running_uid == uid;
    for (struct embed_job *q = e->head; q; q = q->next) n += q->uid == uid;
    return n;
}

unsigned embedder_n_jobs_of(struct embedder *e, uint32_t uid) {
    pthread_mutex_lock(&e->lock);
    unsigned n = uid_jobs_locked(e, uid);
    pthread_mutex_unlock(&e->lock);
    return n;
}

size_t embedder_cache_entries(struct embedder *e) {
    pthread_mutex_lock(&e->lock);
    size_t n = e->n_cache_entries;
    pthread_mutex_unlock(&e->lock);
    return n;
}

int embedder_submit(struct embedder *e, struct embed_job *j) {
    j->next = NULL;
    j->n_cached = 0;
    pthread_mutex_lock(&e->lock);
    int r = e->stopping ? -ESHUTDOWN : e->n_jobs >= e->max_jobs ? -EAGAIN : 0;
    if (!r && uid_jobs_locked(e, j->uid) >= e->max_jobs_per_uid) r = -EDQUOT;
    if (r == 0) {
        if (e->tail) e->tail->next = j;
        else e->head = j;
        e->tail = j;
        e->n_jobs++;
        pthread_cond_signal(&e->cond);
    }
    pthread_mutex_unlock(&e->lock);
    return r;
}

void embed_vector_finish(float *out, const float *in, uint32_t dims, bool raw) {
    double sum = 0;
    for (uint32_t i = 0; i < dims; i++) sum += (double)(in[i] * in[i]);
    const float s = raw ? 1.0f : sum > 0 ? (float)(1.0 / sqrt(sum)) : 0.0f;
    for (uint32_t i = 0; i < dims; i++) out[i] = in[i] * s;
}

static bool stopping_get(struct embedder *e) {
    pthread_mutex_lock(&e->lock);
    bool s = e->stopping;
    pthread_mutex_unlock(&e->lock);
    return s;
}

static struct hash128 tokens_key(const int32_t *t, uint32_t n) {
    return hash128(t, (size_t)n * sizeof *t);
}

/* One forward pass over inputs in[0..n) of j (all misses); their vectors into j->out and
 * the cache. */
static int pass_run(struct embedder *e, struct embed_job *j, const size_t *in, uint32_t n,
                    struct err_detail *d) {
    int32_t n_tok = 0;
    for (uint32_t s = 0; s < n; s++) {
        const int32_t *t = j->tokens[in[s]];
        for (uint32_t p = 0; p < j->n_tokens[in[s]]; p++, n_tok++) {
            e->b_token[n_tok] = t[p];
            e->b_pos[n_tok] = (int32_t)p;
            e->b_seq[n_tok] = (int32_t)s;
            e->b_want[n_tok] = true;
        }
    }
    const struct engine_batch b = {.n_tok = n_tok, .token = e->b_token, .pos = e->b_pos,
                                   .seq = e->b_seq, .want_logits = e->b_want};
    int r = engine_context_decode(e->ctx, &b, d);
    if (r < 0) return r;
    for (uint32_t s = 0; s < n; s++) {
        float *out = j->out + in[s] * (size_t)e->n_out;
        if ((r = engine_context_embeddings(e->ctx, (int32_t)s, out, false, d)) < 0) return r;
        cache_put(&e->cache, tokens_key(j->tokens[in[s]], j->n_tokens[in[s]]),
                  j->n_tokens[in[s]], out, e->n_out);
    }
    return 0;
}

static void job_run(struct embedder *e, struct embed_job *j) {
    struct err_detail d = {0};
    int r = 0;
    uint64_t hits = 0, misses = 0;
    if (j->n_inputs > e->hit_cap) {
        bool *h = realloc(e->hit, j->n_inputs * sizeof *h);
        if (!h) r = err_set(&d, -ENOMEM, "out of memory");
        else e->hit = h, e->hit_cap = j->n_inputs;
    }
    for (size_t i = 0; r == 0 && i < j->n_inputs; i++) {
        struct cache_entry *x =
            cache_get(&e->cache, tokens_key(j->tokens[i], j->n_tokens[i]), j->n_tokens[i]);
        e->hit[i] = x != NULL;
        if (x) memcpy(j->out + i * (size_t)e->n_out, x->vec, (size_t)e->n_out * sizeof(float));
        hits += x != NULL;
    }
    misses = j->n_inputs - hits;
    j->n_cached = (uint32_t)hits;
    /* Greedy packing in request order: a pass takes inputs while they fit. */
    size_t in[256];
    uint32_t n = 0, n_tok = 0;
    for (size_t i = 0; r == 0 && i <= j->n_inputs; i++) {
        bool flush = i == j->n_inputs ||
                     (!e->hit[i] && (n == e->n_seq || n_tok + j->n_tokens[i] > e->n_batch));
        if (flush && n) {
            if (j->ops->cancelled(j)) r = -ECANCELED;
            else if (stopping_get(e)) r = err_set(&d, -ESHUTDOWN, "model '%s' was unloaded", e->name);
            else r = pass_run(e, j, in, n, &d);
            n = n_tok = 0;
            notify_beat_step(&e->beat, time_now_usec());
        }
        if (r == 0 && i < j->n_inputs && !e->hit[i]) {
            in[n++] = i;
            n_tok += j->n_tokens[i];
        }
    }
    if (e->metrics) {
        metrics_add(e->metrics, METRIC_EMBED_CACHE_HITS, hits);
        metrics_add(e->metrics, METRIC_EMBED_CACHE_MISSES, misses);
    }
    pthread_mutex_lock(&e->lock);
    if (e->metrics) {
        metrics_sub(e->metrics, METRIC_EMBED_CACHE_ENTRIES, e->n_cache_entries);
        metrics_add(e->metrics, METRIC_EMBED_CACHE_ENTRIES, e->cache.n_entries);
    }
    e->n_cache_entries = e->cache.n_entries;
    pthread_mutex_unlock(&e->lock);
    j->ops->done(j, r, r < 0 ? err_msg(&d, r) : NULL);
}

static void *loop(void *arg) {
    struct embedder *e = arg;
    pthread_mutex_lock(&e->lock);
    for (;;) {
        while (!e->head && !e->stopping) {
            notify_beat_busy(&e->beat, false, time_now_usec());
            pthread_cond_wait(&e->cond, &e->lock);
        }
        struct embed_job *j = e->head;
        if (!j) break; /* stopping and nothing queued */
        e->head = j->next;
        if (!e->head) e->tail = NULL;
        e->running = true;
        e->running_uid = j->uid;
        bool stop = e->stopping;
        pthread_mutex_unlock(&e->lock);
        notify_beat_busy(&e->beat, true, time_now_usec());
        if (stop) {
            char msg[200];
            snprintf(msg, sizeof msg, "model '%s' was unloaded", e->name);
            j->ops->done(j, -ESHUTDOWN, msg);
        } else {
            job_run(e, j);
        }
        notify_beat_step(&e->beat, time_now_usec());
        pthread_mutex_lock(&e->lock);
        e->running = false;
        e->n_jobs--;
    }
    pthread_mutex_unlock(&e->lock);
    return NULL;
}

static void release(struct embedder *e) {
    if (e->notify) notify_beat_del(e->notify, &e->beat);
    cache_clear(&e->cache);
    if (e->metrics) metrics_sub(e->metrics, METRIC_EMBED_CACHE_ENTRIES, e->n_cache_entries);
    free(e->b_token);
    free(e->b_pos);
    free(e->b_seq);
    free(e->b_want);
    free(e->vec);
    free(e->hit);
    pthread_cond_destroy(&e->cond);
    pthread_mutex_destroy(&e->lock);
    free(e);
}

int embedder_new(const char *name, struct engine_context *ctx, const struct embedder_params *p,
                 struct embedder **ret, struct err_detail *d) {
    struct embedder *e = calloc(1, sizeof *e);
    if (!e) return err_set(d, -ENOMEM, "out of memory for model '%s'", name);
    snprintf(e->name, sizeof e->name, "%s", name);
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->cond, NULL);
    e->ctx = ctx;
    e->model = engine_context_model(ctx);
    const struct engine_context_params *cp = engine_context_params(ctx);
    e->n_seq = MIN(cp->n_seq, 256u);
    e->n_batch = cp->n_batch;
    e->max_tokens = MIN(cp->n_ctx, cp->n_batch);
    e->n_out = engine_model_n_embd_out(e->model);
    e->metrics = p->metrics;
    e->max_jobs = p->max_jobs ? p->max_jobs : 64;
    e->max_jobs_per_uid = p->max_jobs_per_uid ? MIN(p->max_jobs_per_uid, e->max_jobs) : e->max_jobs;
    size_t row = (size_t)e->n_out * sizeof(float) + sizeof(struct cache_entry);
    e->cache.max_entries = MIN((size_t)EMBED_CACHE_ENTRIES, EMBED_CACHE_BYTES / row);
    e->b_token = malloc_array(e->n_batch, sizeof *e->b_token);
    e->b_pos = malloc_array(e->n_batch, sizeof *e->b_pos);
    e->b_seq = malloc_array(e->n_batch, sizeof *e->b_seq);
    e->b_want = malloc_array(e->n_batch, sizeof *e->b_want);
    e->vec = malloc_array(e->n_out, sizeof *e->vec);
    int r;
    if (!e->b_token || !e->b_pos || !e->b_seq || !e->b_want || !e->vec) {
        r = err_set(d, -ENOMEM, "out of memory for model '%s'", name);
        goto fail;
    }
    snprintf(e->beat_name, sizeof e->beat_name, "embedding loop '%s'", name);
    e->beat.name = e->beat_name;
    notify_beat_step(&e->beat, time_now_usec());
    if (p->notify && (r = notify_beat_add(p->notify, &e->beat)) < 0) {
        err_set(d, r, "too many loaded models for the watchdog table");
        goto fail;
    }
    e->notify = p->notify;
    r = -pthread_create(&e->thread, NULL, loop, e);
    if (r < 0) {
        err_set(d, r, "cannot start the loop of model '%s'", name);
        goto fail;
    }
    *ret = e;
    return 0;
fail:
    release(e);
    return r;
}

void embedder_free(struct embedder *e) {
    if (!e) return;
    pthread_mutex_lock(&e->lock);
    e->stopping = true;
    pthread_cond_broadcast(&e->cond);
    pthread_mutex_unlock(&e->lock);
    pthread_join(e->thread, NULL);
    release(e);
}
