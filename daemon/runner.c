/* runner — a loaded model and its generation loop (see runner.h). */
#include "daemon/runner.h"

#include "daemon/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

struct runner {
    char name[160];
    struct engine_model *model;
    struct engine_vocab *vocab;
    struct engine_context *ctx;
    uint32_t n_ctx;
    uint64_t memory_bytes;
    struct notify *notify;
    uint64_t test_stall_usec;
    struct notify_beat beat;
    char beat_name[192];

    /* Tokens whose KV is in sequence 0 (the previous job's prompt and output). */
    int32_t *cached;
    uint32_t n_cached;
    int32_t *pos;               /* scratch: positions 0..n_ctx-1 */
    char *piece;                /* scratch for the detokenizer */
    size_t piece_cap;

    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct runner_job *head, *tail;
    unsigned n_jobs;            /* queued + running */
    unsigned max_jobs;
    bool stopping;
};

const struct engine_vocab *runner_vocab(const struct runner *r) { return r->vocab; }
const struct engine_model *runner_model(const struct runner *r) { return r->model; }
uint32_t runner_n_ctx(const struct runner *r) { return r->n_ctx; }
uint64_t runner_memory_bytes(const struct runner *r) { return r->memory_bytes; }

unsigned runner_n_jobs(struct runner *r) {
    pthread_mutex_lock(&r->lock);
    unsigned n = r->n_jobs;
    pthread_mutex_unlock(&r->lock);
    return n;
}

int runner_submit(struct runner *r, struct runner_job *j) {
    j->submit_usec = time_now_usec();
    j->next = NULL;
    pthread_mutex_lock(&r->lock);
    if (r->stopping || r->n_jobs >= r->max_jobs) {
        int e = r->stopping ? -ESHUTDOWN : -EAGAIN;
        pthread_mutex_unlock(&r->lock);
        return e;
    }
    if (r->tail) r->tail->next = j;
    else r->head = j;
    r->tail = j;
    r->n_jobs++;
    pthread_cond_signal(&r->cond);
    pthread_mutex_unlock(&r->lock);
    return 0;
}

static bool stopping(struct runner *r) {
    pthread_mutex_lock(&r->lock);
    bool s = r->stopping;
    pthread_mutex_unlock(&r->lock);
    return s;
}

/* The test hook: waits test_stall_usec without stamping progress (a stop ends it). */
static void stall(struct runner *r) {
    uint64_t until = time_now_usec() + r->test_stall_usec;
    while (time_now_usec() < until && !stopping(r)) usleep(10000);
}

/* Runs one job to its end; returns 0 or an error (with msg). */
static int run_job(struct runner *r, struct runner_job *j, struct runner_result *res,
                   char *msg, size_t n_msg) {
    struct err_detail d = {0};
    uint64_t t0 = time_now_usec();
    res->queue_usec = t0 - j->submit_usec;
    res->prompt_tokens = (uint32_t)j->n_prompt;
    if (j->n_prompt == 0 || j->n_prompt > r->n_ctx) {
        snprintf(msg, n_msg, "the prompt has %zu tokens; the context holds %u", j->n_prompt,
                 r->n_ctx);
        return ERR_CTX_FULL;
    }
    /* Reuse the cached prefix, but always recompute the last prompt token: its logits
     * are what the first sample needs. */
    uint32_t keep = 0, lim = (uint32_t)MIN((size_t)r->n_cached, j->n_prompt - 1);
    while (keep < lim && r->cached[keep] == j->prompt[keep]) keep++;
    int e = engine_kv_seq_rm(r->ctx, 0, keep);
    if (e < 0) {
        r->n_cached = 0;
        snprintf(msg, n_msg, "cannot reset the sequence: %s", err_str(e));
        return e;
    }
    r->n_cached = keep;
    res->ram_tokens = keep;
    res->evaluated_tokens = (uint32_t)j->n_prompt - keep;

    struct engine_sampler *s = NULL;
    e = engine_sampler_new(&j->sampling, engine_vocab_n_tokens(r->vocab), &s);
    if (e < 0) {
        snprintf(msg, n_msg, "sampler: %s", err_str(e));
        return e;
    }
    for (size_t i = 0; i < j->n_prompt; i++) engine_sampler_accept(s, j->prompt[i]);

    /* Prefill in chunks of 64 tokens (the widest matmul tile): cancellation is seen and
     * the watchdog beat stamped between them, so even a big model on a CPU stays well
     * inside WatchdogSec per step. */
    const uint32_t chunk = 64;
    for (uint32_t p = keep; p < j->n_prompt; p += chunk) {
        if (stopping(r)) { e = -ESHUTDOWN; goto out; }
        if (j->ops->cancelled(j)) { e = -ECANCELED; goto out; }
        uint32_t n = (uint32_t)MIN((size_t)chunk, j->n_prompt - p);
        struct engine_batch b = {.n_tok = (int32_t)n, .token = j->prompt + p, .pos = r->pos + p};
        e = engine_context_decode(r->ctx, &b, &d);
        if (e < 0) {
            snprintf(msg, n_msg, "prefill: %s", err_msg(&d, e));
            goto out;
        }
        memcpy(r->cached + p, j->prompt + p, n * sizeof(int32_t));
        r->n_cached = p + n;
        notify_beat_step(&r->beat, time_now_usec());
    }
    uint64_t t1 = time_now_usec();
    res->prefill_usec = t1 - t0;

    struct engine_detok dt;
    engine_detok_init(&dt, r->vocab, ENGINE_DETOK_TEXT_START | ENGINE_DETOK_VALID_UTF8);
    /* Feed the prompt so a leading-space rule sees where the text stands. */
    for (size_t i = 0; i < j->n_prompt; i++)
        if (engine_detok_feed(&dt, j->prompt[i], r->piece, r->piece_cap) < 0) break;
    uint32_t pos = (uint32_t)j->n_prompt;  /* where the next sampled token goes */
    for (;;) {
        if (stopping(r)) { e = -ESHUTDOWN; break; }
        if (j->ops->cancelled(j)) { e = -ECANCELED; break; }
        int32_t tok = engine_sampler_sample(s, engine_context_logits(r->ctx, 0));
        if (engine_vocab_is_eog(r->vocab, tok)) {
            res->stop = RUNNER_STOP_EOS;
            break;
        }
        engine_sampler_accept(s, tok);
        res->generated_tokens++;
        int n = engine_detok_feed(&dt, tok, r->piece, r->piece_cap);
        if (n < 0) n = 0;
        if (!j->ops->token(j, tok, r->piece, (size_t)n)) {
            res->stop = RUNNER_STOP_CALLER;
            break;
        }
        if (j->max_tokens && res->generated_tokens >= j->max_tokens) {
            res->stop = RUNNER_STOP_MAX_TOKENS;
            break;
        }
        if (pos >= r->n_ctx) {
            res->stop = RUNNER_STOP_CONTEXT_FULL;
            break;
        }
        if (r->test_stall_usec) stall(r);
        struct engine_batch one = {.n_tok = 1, .token = &tok, .pos = r->pos + pos};
        e = engine_context_decode(r->ctx, &one, &d);
        if (e < 0) {
            snprintf(msg, n_msg, "decode: %s", err_msg(&d, e));
            break;
        }
        r->cached[pos] = tok;
        r->n_cached = ++pos;
        notify_beat_step(&r->beat, time_now_usec());
    }
    /* An unfinished character at the very end is dropped (never sent half). */
    res->decode_usec = time_now_usec() - t1;
out:
    if (e == -ESHUTDOWN) snprintf(msg, n_msg, "model '%s' was unloaded", r->name);
    else if (e == -ECANCELED) snprintf(msg, n_msg, "cancelled by the client");
    engine_sampler_free(s);
    return e;
}

static void *loop(void *arg) {
    struct runner *r = arg;
    pthread_mutex_lock(&r->lock);
    for (;;) {
        while (!r->head && !r->stopping) pthread_cond_wait(&r->cond, &r->lock);
        struct runner_job *j = r->head;
        if (!j) break; /* stopping with an empty queue */
        r->head = j->next;
        if (!r->head) r->tail = NULL;
        bool stop = r->stopping;
        pthread_mutex_unlock(&r->lock);

        struct runner_result res = {0};
        char msg[600] = "";
        int e = -ESHUTDOWN;
        if (stop) snprintf(msg, sizeof msg, "model '%s' was unloaded", r->name);
        else {
            notify_beat_busy(&r->beat, true, time_now_usec());
            e = run_job(r, j, &res, msg, sizeof msg);
            notify_beat_busy(&r->beat, false, time_now_usec());
        }
        j->ops->done(j, &res, e, msg);

        pthread_mutex_lock(&r->lock);
        r->n_jobs--;
    }
    pthread_mutex_unlock(&r->lock);
    return NULL;
}

int runner_new(const char *name, int fd, const struct runner_params *p, struct runner **ret,
               struct err_detail *d) {
    struct runner *r = calloc(1, sizeof *r);
    if (!r) {
        close(fd);
        return -ENOMEM;
    }
    snprintf(r->name, sizeof r->name, "%s", name);
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->cond, NULL);
    /* The fd was opened beneath the models directory; reopen it through /proc so the
     * loader maps exactly that file. */
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    int e = engine_model_load(path, NULL, &r->model, d);
    close(fd);
    if (e < 0) goto fail;
    e = engine_vocab_load(engine_model_gguf(r->model), &r->vocab, d);
    if (e < 0) goto fail;
    struct engine_context_params cp;
    engine_context_params_default(&cp);
    cp.n_ctx = p->n_ctx;
    cp.n_seq = 1;
    cp.n_threads = p->n_threads;
    cp.type_k = p->type_k;
    cp.type_v = p->type_v;
    e = engine_context_new(r->model, &cp, &r->ctx, d);
    if (e < 0) goto fail;
    r->n_ctx = engine_context_params(r->ctx)->n_ctx;
    r->memory_bytes = r->model->weight_bytes + engine_context_kv_bytes(r->ctx);
    r->cached = malloc_array(r->n_ctx, sizeof *r->cached);
    r->pos = malloc_array(r->n_ctx, sizeof *r->pos);
    r->piece_cap = 4 * (engine_vocab_max_piece(r->vocab) + 8);
    r->piece = malloc(r->piece_cap);
    if (!r->cached || !r->pos || !r->piece) {
        e = err_set(d, -ENOMEM, "out of memory for model '%s'", name);
        goto fail;
    }
    for (uint32_t i = 0; i < r->n_ctx; i++) r->pos[i] = (int32_t)i;
    r->notify = p->notify;
    r->test_stall_usec = p->test_stall_usec;
    r->max_jobs = p->max_jobs ? p->max_jobs : 64;
    snprintf(r->beat_name, sizeof r->beat_name, "model loop '%s'", name);
    r->beat.name = r->beat_name;
    notify_beat_step(&r->beat, time_now_usec());
    if (r->notify && (e = notify_beat_add(r->notify, &r->beat)) < 0) {
        err_set(d, e, "too many loaded models for the watchdog table");
        r->notify = NULL;
        goto fail;
    }
    e = -pthread_create(&r->thread, NULL, loop, r);
    if (e < 0) {
        err_set(d, e, "cannot start the loop of model '%s'", name);
        goto fail;
    }
    *ret = r;
    return 0;
fail:
    if (r->notify) notify_beat_del(r->notify, &r->beat);
    engine_context_free(r->ctx);
    engine_vocab_free(r->vocab);
    engine_model_free(r->model);
    free(r->cached);
    free(r->pos);
    free(r->piece);
    pthread_cond_destroy(&r->cond);
    pthread_mutex_destroy(&r->lock);
    free(r);
    return e;
}

void runner_free(struct runner *r) {
    if (!r) return;
    pthread_mutex_lock(&r->lock);
    r->stopping = true;
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
    /* The loop ends the running job after its current step and fails the queued ones. */
    pthread_join(r->thread, NULL);
    if (r->notify) notify_beat_del(r->notify, &r->beat);
    engine_context_free(r->ctx);
    engine_vocab_free(r->vocab);
    engine_model_free(r->model);
    free(r->cached);
    free(r->pos);
    free(r->piece);
    pthread_cond_destroy(&r->cond);
    pthread_mutex_destroy(&r->lock);
    free(r);
}
