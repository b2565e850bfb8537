/* resident — loaded models, keep-alive and the memory budget (see resident.h). */
#include "daemon/resident.h"

#include "daemon/daemon.h"
#include "daemon/log.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

void residency_init(struct residency *rs) {
    memset(rs, 0, sizeof *rs);
    pthread_mutex_init(&rs->lock, NULL);
    pthread_cond_init(&rs->load_done, NULL);
}

static bool idle(struct resident *r) {
    return !r->loading && r->refs == 0 && runner_n_jobs(r->runner) == 0;
}

static uint64_t memory_of(const struct resident *r) {
    return r->runner ? r->held_bytes : r->estimate_bytes;
}

/* Host memory a loaded model holds: its private copy of the file (all of it: the weights,
 * repacked in place, and the metadata), the copies a CPU device made of some weights (its
 * column slices of a split), the KV cache and recurrent state (runner_memory_bytes() is the
 * weights the engine counts plus engine_context_kv_bytes()) and the CPU devices' scratch. A
 * GPU's own memory is not the host's and not in the budget. */
static uint64_t held_bytes(const struct runner *rn) {
    const struct engine_model *m = runner_model(rn);
    uint64_t n = gguf_size(engine_model_gguf(m));
    n += runner_memory_bytes(rn) - MIN(m->weight_bytes, runner_memory_bytes(rn));
    struct engine_device_info di;
    for (uint32_t k = 0; runner_device_info(rn, k, &di) >= 0; k++)
        if (strcmp(di.kind, "cpu") == 0) n += di.copied_bytes + di.scratch_bytes;
    return n;
}

/* An upper bound of the KV cache a model will get, from its file's metadata: every layer
 * holds K and V for the whole context of every sequence (sliding-window rings, layers that
 * share another's KV and recurrent layers hold less), the types as runner.c picks them. */
static uint64_t kv_bound(const struct config *c, const struct registry_meta *mt) {
    uint64_t n_seq = MIN(MAX(c->parallel, 1u), 256u);
    enum kern_type tk = (enum kern_type)kern_type_from_name(config_cache_type_names[c->cache_type_k]);
    enum kern_type tv = (enum kern_type)kern_type_from_name(config_cache_type_names[c->cache_type_v]);
    if (mt->embedding) { /* runner.c's embed_params */
        n_seq = MIN(n_seq, 8u);
        tk = tk == KERN_TYPE_F32 ? KERN_TYPE_F32 : KERN_TYPE_F16;
        tv = tv == KERN_TYPE_F32 ? KERN_TYPE_F32 : KERN_TYPE_F16;
    }
    const int64_t nk = (int64_t)mt->n_head_kv * mt->head_dim_k, nv = (int64_t)mt->n_head_kv * mt->head_dim_v;
    size_t rk = kern_row_size(tk, nk), rv = kern_row_size(tv, nv);
    uint64_t row = (rk ? rk : (uint64_t)nk * 4) + (rv ? rv : (uint64_t)nv * 4), n;
    const uint64_t cells = (uint64_t)residency_ctx_size(c, mt->n_ctx_train) * n_seq * mt->n_layer;
    return __builtin_mul_overflow(cells, row, &n) ? UINT64_MAX : n;
}

/* MemAvailable of /proc/meminfo in bytes; 0 when unknown. */
static uint64_t mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "re");
    char line[128];
    unsigned long long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    if (f) fclose(f);
    return (uint64_t)kb << 10;
}

static void resident_free(struct daemon *d, struct resident *r) {
    if (r->runner) {
        log_info("unloading model '%s'", r->name);
        runner_free(r->runner);
        metrics_add(&d->metrics, METRIC_MODEL_UNLOADS, 1);
    }
    free(r);
}

/* Removes slot i from the table (lock held); returns the resident. */
static struct resident *take_locked(struct daemon *d, size_t i) {
    struct residency *rs = &d->residency;
    struct resident *r = rs->loaded[i];
    rs->loaded[i] = rs->loaded[--rs->n_loaded];
    r->unloaded = true;
    metrics_set(&d->metrics, METRIC_MODELS_LOADED, rs->n_loaded);
    if (r->runner) metrics_sub(&d->metrics, METRIC_MEMORY_BYTES, r->held_bytes);
    return r;
}

/* Retired models count until freed: their memory is still held. */
static uint64_t memory_locked(struct residency *rs) {
    uint64_t sum = 0;
    for (size_t i = 0; i < rs->n_loaded; i++) sum += memory_of(rs->loaded[i]);
    for (size_t i = 0; i < rs->n_retired; i++) sum += memory_of(rs->retired[i]);
    return sum;
}

/* Takes slot i out of the table because its file changed. A busy model goes to the retired
 * list to finish its jobs on its copy; returns the resident to free now (idle, or no room
 * on the list and nobody holding it), else NULL. */
static struct resident *retire_locked(struct daemon *d, size_t i) {
    struct residency *rs = &d->residency;
    struct resident *r = take_locked(d, i);
    if (idle(r)) return r;
    if (rs->n_retired < RESIDENT_MAX) {
        r->retired = true;
        rs->retired[rs->n_retired++] = r;
        return NULL;
    }
    return r->refs == 0 ? r : NULL; /* else freed by the last release */
}

/* Removes retired entry i (lock held); returns it if nobody holds it (the caller frees it),
 * else NULL (the last release frees it). */
static struct resident *unretire_locked(struct residency *rs, size_t i) {
    struct resident *r = rs->retired[i];
    rs->retired[i] = rs->retired[--rs->n_retired];
    r->retired = false;
    return r->refs == 0 ? r : NULL;
}

/* The least recently used idle model, or -1. */
static ssize_t lru_idle_locked(struct residency *rs) {
    ssize_t best = -1;
    for (size_t i = 0; i < rs->n_loaded; i++)
        if (idle(rs->loaded[i]) &&
            (best < 0 || rs->loaded[i]->last_used_usec < rs->loaded[best]->last_used_usec))
            best = (ssize_t)i;
    return best;
}

/* What a model about to load would need, and what holds memory now. */
struct room {
    uint64_t need;        /* the new model: its file (the copy) + kv bound */
    uint64_t file, kv;
    uint64_t held;        /* by every loaded, loading and retired model */
    uint64_t busy;        /* of which by models in use or loading (never unloaded for room) */
    uint64_t idle;        /* of which by idle and retired models (unloaded to make room) */
    uint64_t loading;     /* of which by models still loading (not yet in MemAvailable) */
    uint64_t available;   /* MemAvailable when asked; 0 = unknown */
    uint64_t freeing;     /* by models already out of the table, freed once the lock is
                             released (an idle model whose file changed) */
    size_t n_busy;
};

/* Would evicting every idle and retired model make room for rm->need (lock held)? 0 when
 * it would, -EBUSY when every slot is busy, ERR_TOO_LARGE (with the numbers in err) when the
 * busy models leave too little of the memory budget or the machine has too little memory
 * even once the idle ones are gone. Nothing is evicted here: a load that would fail anyway
 * must not cost the loaded models their place. */
static int room_check_locked(struct daemon *d, const char *name, struct room *rm,
                             struct err_detail *err) {
    struct residency *rs = &d->residency;
    rm->held = rm->busy = rm->idle = rm->loading = 0;
    rm->n_busy = 0;
    for (size_t i = 0; i < rs->n_loaded; i++) {
        const uint64_t b = memory_of(rs->loaded[i]);
        rm->held += b;
        if (rs->loaded[i]->loading) rm->loading += b;
        if (idle(rs->loaded[i])) {
            rm->idle += b;
        } else {
            rm->busy += b;
            rm->n_busy++;
        }
    }
    for (size_t i = 0; i < rs->n_retired; i++) {
        rm->held += memory_of(rs->retired[i]);
        rm->idle += memory_of(rs->retired[i]);
    }
    char what[160];
    snprintf(what, sizeof what, "its file %llu + KV cache up to %llu", (unsigned long long)rm->file,
             (unsigned long long)rm->kv);
    if (rm->busy > d->memory_budget_bytes || rm->need > d->memory_budget_bytes - rm->busy)
        return err_set(err, ERR_TOO_LARGE, "model '%s' needs %llu bytes (%s) and does not fit the "
                       "memory budget of %llu bytes: loaded models hold %llu bytes, %llu of them "
                       "by the %zu in use or loading (never unloaded to make room); nothing was "
                       "unloaded", name, (unsigned long long)rm->need, what,
                       (unsigned long long)d->memory_budget_bytes, (unsigned long long)rm->held,
                       (unsigned long long)rm->busy, rm->n_busy);
    /* The machine: what is available now, less what loads still in flight will take, plus
     * what unloading the idle models gives back. */
    const uint64_t avail = rm->available - MIN(rm->loading, rm->available) + rm->idle + rm->freeing;
    if (rm->available && rm->need > avail)
        return err_set(err, ERR_TOO_LARGE, "model '%s' needs %llu bytes (%s) and the machine has "
                       "%llu bytes available (MemAvailable %llu, less %llu for loads in flight, "
                       "plus %llu held by idle models that could be unloaded); nothing was "
                       "unloaded", name, (unsigned long long)rm->need, what,
                       (unsigned long long)avail, (unsigned long long)rm->available,
                       (unsigned long long)rm->loading, (unsigned long long)(rm->idle + rm->freeing));
    return rm->n_busy < d->config.max_loaded_models && rm->n_busy < RESIDENT_MAX ? 0 : -EBUSY;
}

uint32_t residency_ctx_size(const struct config *c, uint32_t n_ctx_train) {
    return c->ctx_above_trained || !n_ctx_train ? c->ctx_size : MIN(c->ctx_size, n_ctx_train);
}

static uint64_t keep_alive(const struct config *c, uint64_t want) {
    return MIN(want ? want : c->keep_alive_usec, c->max_keep_alive_usec);
}

/* ---- leases: who keeps a model loaded, and how long ------------------------------------- */

/* How long lease l still holds at now; 0 = it ended. */
static uint64_t lease_left(const struct resident_lease *l, uint64_t now) {
    uint64_t idle_for = now > l->last_used_usec ? now - l->last_used_usec : 0;
    return idle_for < l->keep_alive_usec ? l->keep_alive_usec - idle_for : 0;
}

/* How long the longest lease on r still holds at now; 0 = none holds. */
static uint64_t leases_left(const struct resident *r, uint64_t now) {
    uint64_t left = 0;
    for (unsigned i = 0; i < r->n_leases; i++) left = MAX(left, lease_left(&r->leases[i], now));
    return left;
}

static struct resident_lease *lease_find(struct resident *r, uint32_t uid) {
    for (unsigned i = 0; i < r->n_leases; i++)
        if (r->leases[i].uid == uid) return &r->leases[i];
    return NULL;
}

/* A place for a new lease (lock held). With all RESIDENT_LEASES taken, the lease that ends
 * soonest gives up its place (never the pin): the other leases, 30 at least, all end no
 * sooner, so the model stays at least as long as it would have. */
static struct resident_lease *lease_slot(struct resident *r, uint64_t now) {
    if (r->n_leases < RESIDENT_LEASES) return &r->leases[r->n_leases++];
    struct resident_lease *soonest = NULL;
    for (unsigned i = 0; i < r->n_leases; i++) {
        struct resident_lease *l = &r->leases[i];
        if (l->uid != RESIDENCY_PIN && (!soonest || lease_left(l, now) < lease_left(soonest, now)))
            soonest = l;
    }
    return soonest;
}

/* Renews uid's lease from now (lock held); keep_alive_usec as in residency_acquire. Every
 * use renews the pin as well: it holds for its length after the model's last use. */
static void lease_renew_locked(const struct config *c, struct resident *r, uint32_t uid,
                               uint64_t keep_alive_usec, uint64_t now) {
    struct resident_lease *l = lease_find(r, uid);
    if (!l) {
        l = lease_slot(r, now);
        *l = (struct resident_lease){.uid = uid, .keep_alive_usec = keep_alive(c, 0)};
    }
    if (keep_alive_usec) l->keep_alive_usec = keep_alive(c, keep_alive_usec);
    l->last_used_usec = now;
    struct resident_lease *pin = lease_find(r, RESIDENCY_PIN);
    if (pin) pin->last_used_usec = now;
}

/* A busy model is in use (lock held): the leases of the uids with a job queued or running
 * on it count from now, and so does the pin. A handler holding it renewed its uid's lease
 * when it acquired it. */
static void leases_renew_busy(struct resident *r, uint64_t now) {
    for (unsigned i = 0; i < r->n_leases; i++) {
        struct resident_lease *l = &r->leases[i];
        if (l->uid == RESIDENCY_PIN || (r->runner && runner_n_jobs_of(r->runner, l->uid)))
            l->last_used_usec = now;
    }
}

/* Waits for a model another thread is loading (lock held, a reference taken). */
static int wait_loading(struct daemon *d, struct resident *r, struct err_detail *err) {
    struct residency *rs = &d->residency;
    while (r->loading) pthread_cond_wait(&rs->load_done, &rs->lock);
    if (r->load_err >= 0) return 0;
    int e = err_set(err, r->load_err, "%s", r->load_msg);
    if (--r->refs == 0) free(r); /* the failed placeholder; out of the table already */
    return e;
}

int residency_acquire(struct daemon *d, const char *name, uint32_t uid, uint64_t keep_alive_usec,
                      struct resident **ret, uint64_t *ret_load_usec, struct err_detail *err) {
    struct residency *rs = &d->residency;
    const struct config *c = &d->config;
    struct registry_model m;
    int e = registry_find(&d->registry, name, &m, err);
    if (e < 0) return e;
    /* The file as it is now: a loaded model whose file changed is loaded again (a file
     * that cannot be opened any more counts as changed; its load then says why). A file
     * that would not load (registry.h checks it as the loader does) is refused here,
     * before anything loaded is retired or evicted for it. */
    struct err_detail se = {0};
    e = registry_stat(&d->registry, name, &m, &se);
    if (e == ERR_UNSUPPORTED) return err_set(err, e, "%s", se.msg);
    bool on_disk = e >= 0;
    struct room rm = {.file = m.size_bytes, .kv = kv_bound(c, &m.meta),
                      .available = mem_available()};
    rm.need = rm.file + MIN(rm.kv, UINT64_MAX - rm.file);
    struct resident *evict[2 * RESIDENT_MAX + 1];
    size_t n_evict = 0;
    bool changed = false;
    pthread_mutex_lock(&rs->lock);
    for (size_t i = 0; i < rs->n_loaded; i++) {
        struct resident *r = rs->loaded[i];
        if (strcmp(r->name, name) != 0) continue;
        /* (a model still loading is taken as it comes: its file was opened just now) */
        if (!r->loading && (!on_disk || !registry_file_id_eq(&r->file_id, &m.id))) {
            struct resident *x = retire_locked(d, i);
            if (x) evict[n_evict++] = x;
            changed = true;
            metrics_add(&d->metrics, METRIC_MODEL_FILE_CHANGES, 1);
            break;
        }
        r->refs++;
        e = wait_loading(d, r, err);
        if (e >= 0) {
            r->last_used_usec = time_now_usec();
            lease_renew_locked(c, r, uid, keep_alive_usec, r->last_used_usec);
            *ret = r;
            *ret_load_usec = 0;
        }
        pthread_mutex_unlock(&rs->lock);
        return e;
    }
    /* Make room: a free slot and the model's memory (its file, which the private copy
     * holds whole, and its KV cache at most) within the budget and the machine's memory.
     * Idle models go first; retired ones last, since freeing them ends their streams.
     * Nothing is evicted unless that makes room: a load that would fail anyway (every slot
     * busy, or too big even then) must not cost the loaded models their place. */
    struct err_detail re = {0};
    for (size_t i = 0; i < n_evict; i++) rm.freeing += memory_of(evict[i]);
    int room = room_check_locked(d, name, &rm, &re);
    uint64_t freed = rm.freeing; /* by the models unloaded once the lock is released */
    const uint64_t avail = rm.available - MIN(rm.loading, rm.available);
    bool no_room = false, no_mem = false;
    for (; room >= 0;) {
        no_room = memory_locked(rs) + rm.need > d->memory_budget_bytes;
        no_mem = rm.available && rm.need > avail + freed;
        if (rs->n_loaded < c->max_loaded_models && !no_room && !no_mem) break;
        ssize_t i = lru_idle_locked(rs);
        if (i >= 0) {
            freed += memory_of(rs->loaded[i]);
            evict[n_evict++] = take_locked(d, (size_t)i);
        } else if ((no_room || no_mem) && rs->n_retired) {
            freed += memory_of(rs->retired[rs->n_retired - 1]);
            struct resident *x = unretire_locked(rs, rs->n_retired - 1);
            if (x) evict[n_evict++] = x;
        } else {
            break;
        }
    }
    struct resident *r = NULL;
    if (room == ERR_TOO_LARGE) {
        e = err_set(err, room, "%s", re.msg);
    } else if (room == -EBUSY || rs->n_loaded >= c->max_loaded_models ||
               rs->n_loaded >= RESIDENT_MAX) {
        e = err_set(err, -EBUSY, "model '%s' cannot be loaded: all %zu loaded models are busy "
                    "(max_loaded_models = %u)", name, rs->n_loaded, c->max_loaded_models);
    } else if (no_room || no_mem) {
        /* (the check above saw room once the idle ones are gone; it cannot get here) */
        e = err_set(err, ERR_TOO_LARGE, "model '%s' needs %llu bytes and does not fit the "
                    "memory budget of %llu bytes or the machine's memory: loaded models hold "
                    "%llu bytes", name, (unsigned long long)rm.need,
                    (unsigned long long)d->memory_budget_bytes, (unsigned long long)memory_locked(rs));
    } else if (!(r = calloc(1, sizeof *r))) {
        e = -ENOMEM;
    } else {
        /* A placeholder: the slot and the memory are taken while the model loads. */
        snprintf(r->name, sizeof r->name, "%s", name);
        r->loading = true;
        r->refs = 1;
        r->estimate_bytes = rm.need;
        lease_renew_locked(c, r, uid, keep_alive_usec, time_now_usec());
        rs->loaded[rs->n_loaded++] = r;
        metrics_set(&d->metrics, METRIC_MODELS_LOADED, rs->n_loaded);
    }
    pthread_mutex_unlock(&rs->lock);
    if (changed)
        log_info("model '%s': its file changed on disk (%s); requests in flight finish on the "
                 "loaded copy, new ones load the file again", name,
                 on_disk ? "another inode, size, mtime or ctime" : "it cannot be opened");
    for (size_t i = 0; i < n_evict; i++) resident_free(d, evict[i]);
    if (!r) return e;

    /* The load itself runs without the lock. */
    uint64_t t0 = time_now_usec();
    struct runner *runner = NULL;
    struct err_detail le = {0};
    int fd = -1;
    e = registry_open(&d->registry, name, &fd, &le);
    /* The identity is taken before the copy is read: if the file changes in between, the
     * next acquire sees a difference and loads it again (never the other way round). */
    if (e >= 0 && (e = registry_file_id_get(fd, &r->file_id)) < 0) {
        err_set(&le, e, "stat: %s", err_str(e));
        close(fd);
    }
    if (e >= 0) {
        if (residency_ctx_size(c, m.meta.n_ctx_train) < c->ctx_size)
            log_info("model '%s': context %u tokens, the context it was trained for "
                     "(ctx_size = %u; ctx_above_trained = yes gives it all)", name,
                     m.meta.n_ctx_train, c->ctx_size);
        struct runner_params p = {
            .n_ctx = residency_ctx_size(c, m.meta.n_ctx_train),
            .n_seq = c->parallel,
            .n_threads = (int)d->threads,
            .type_k = (enum kern_type)kern_type_from_name(config_cache_type_names[c->cache_type_k]),
            .type_v = (enum kern_type)kern_type_from_name(config_cache_type_names[c->cache_type_v]),
            .notify = &d->notify,
            .max_jobs = 16 * c->parallel,
            /* a uid's share: a quarter of the queue, at least a batch of its own */
            .max_jobs_per_uid = c->max_queued_per_uid ? c->max_queued_per_uid
                                                      : 4 * c->parallel,
            .store = d->store,
            .writer = d->store ? &d->writer : NULL,
            .kv_rotation = c->kv_rotation,
            .device = c->device,
            .gpu_layers = c->gpu_layers,
            .experts = c->experts,
            .devices = c->devices,
            .split = c->split,
            .tensor_split = c->tensor_split,
            .chunk_tokens = c->cache_chunk_tokens,
            .restore_min_tokens = c->cache_restore_min_tokens,
            .metrics = &d->metrics,
            .test_stall_usec = d->test_stall_usec,
        };
        e = runner_new(name, fd, &p, &runner, &le);
    }
    uint64_t usec = time_now_usec() - t0;
    const uint64_t held = e >= 0 ? held_bytes(runner) : 0;

    pthread_mutex_lock(&rs->lock);
    r->loading = false;
    if (e < 0) {
        r->load_err = e;
        snprintf(r->load_msg, sizeof r->load_msg, "model '%s' cannot be loaded: %s", name,
                 err_msg(&le, e));
        for (size_t i = 0; i < rs->n_loaded; i++)
            if (rs->loaded[i] == r) take_locked(d, i);
        pthread_cond_broadcast(&rs->load_done);
        e = err_set(err, e, "%s", r->load_msg);
        bool last = --r->refs == 0;
        pthread_mutex_unlock(&rs->lock);
        log_warn("%s", err->msg);
        if (last) free(r);
        return e;
    }
    r->runner = runner;
    r->held_bytes = held;
    r->last_used_usec = time_now_usec();
    lease_renew_locked(c, r, uid, 0, r->last_used_usec); /* from the end of the load */
    if (!r->unloaded) metrics_add(&d->metrics, METRIC_MEMORY_BYTES, held);
    metrics_add(&d->metrics, METRIC_MODEL_LOADS, 1);
    pthread_cond_broadcast(&rs->load_done);
    pthread_mutex_unlock(&rs->lock);
    log_info("loaded model '%s' (%s, %llu bytes held: its file %llu, KV cache and scratch) "
             "in %.1f ms (%.2f GB/s of file)", name, runner_model(runner)->arch_name,
             (unsigned long long)held, (unsigned long long)m.size_bytes, (double)usec / 1e3,
             usec ? (double)m.size_bytes / (double)usec / 1e3 : 0.0);
    /* where it runs, and what that reserved on each device: one line whatever the count */
    char where[1024];
    size_t len = 0;
    struct engine_device_info di;
    for (uint32_t k = 0; runner_device_info(runner, k, &di) >= 0 && len < sizeof where; k++) {
        int n = snprintf(where + len, sizeof where - len, "%s%s%s%s%s %llu bytes (weights %llu, KV %llu, "
                         "scratch %llu)", k ? "; " : "", di.name, *di.device_name ? " (" : "",
                         di.device_name, *di.device_name ? ")" : "",
                         (unsigned long long)(di.weight_bytes + di.kv_bytes + di.scratch_bytes),
                         (unsigned long long)di.weight_bytes, (unsigned long long)di.kv_bytes,
                         (unsigned long long)di.scratch_bytes);
        len = n < 0 ? sizeof where : len + (size_t)n;
    }
    log_info("model '%s' reserved on %s", name, len ? where : "no device");
    if (*runner_device_note(runner))
        log_info("model '%s': device auto: on the CPU, since %s", name, runner_device_note(runner));
    *ret = r;
    *ret_load_usec = usec;
    return 0;
}

void residency_release(struct daemon *d, struct resident *r) {
    struct residency *rs = &d->residency;
    pthread_mutex_lock(&rs->lock);
    r->last_used_usec = time_now_usec();
    /* a retired model with jobs left is freed by residency_expire once they are done */
    bool gone = --r->refs == 0 && r->unloaded && !r->retired;
    pthread_mutex_unlock(&rs->lock);
    if (gone) resident_free(d, r);
}

int residency_unload(struct daemon *d, const char *name, bool *ret_was_loaded) {
    struct residency *rs = &d->residency;
    struct resident *r = NULL, *old[RESIDENT_MAX];
    size_t n_old = 0;
    pthread_mutex_lock(&rs->lock);
    for (size_t i = 0; i < rs->n_loaded; i++) {
        if (strcmp(rs->loaded[i]->name, name) == 0) {
            r = take_locked(d, i);
            break;
        }
    }
    /* copies of earlier versions of its file end their streams too */
    for (size_t i = 0; i < rs->n_retired;) {
        if (strcmp(rs->retired[i]->name, name) != 0) {
            i++;
            continue;
        }
        struct resident *x = unretire_locked(rs, i);
        if (x) old[n_old++] = x;
    }
    bool free_now = r && r->refs == 0;
    pthread_mutex_unlock(&rs->lock);
    *ret_was_loaded = r != NULL;
    if (free_now) resident_free(d, r);
    for (size_t i = 0; i < n_old; i++) resident_free(d, old[i]);
    return 0;
}

void residency_expire(struct daemon *d, uint64_t now) {
    struct residency *rs = &d->residency;
    struct resident *expired[2 * RESIDENT_MAX];
    size_t n = 0;
    pthread_mutex_lock(&rs->lock);
    for (size_t i = 0; i < rs->n_retired;) {
        struct resident *r = rs->retired[i];
        if (r->refs == 0 && runner_n_jobs(r->runner) == 0) expired[n++] = unretire_locked(rs, i);
        else i++;
    }
    for (size_t i = 0; i < rs->n_loaded;) {
        struct resident *r = rs->loaded[i];
        if (!idle(r)) {  /* busy counts as use */
            r->last_used_usec = now;
            leases_renew_busy(r, now);
        } else if (!leases_left(r, now)) {
            expired[n++] = take_locked(d, i);
            continue;
        }
        i++;
    }
    pthread_mutex_unlock(&rs->lock);
    for (size_t i = 0; i < n; i++) resident_free(d, expired[i]);
}

void residency_info(struct daemon *d, const char *name, struct residency_info *ret) {
    struct residency *rs = &d->residency;
    memset(ret, 0, sizeof *ret);
    uint64_t now = time_now_usec();
    pthread_mutex_lock(&rs->lock);
    for (size_t i = 0; i < rs->n_loaded; i++) {
        struct resident *r = rs->loaded[i];
        if (strcmp(r->name, name) != 0 || r->loading) continue;
        const struct engine_model *m = runner_model(r->runner);
        ret->loaded = true;
        ret->memory_bytes = r->held_bytes;
        ret->keep_alive_left_usec = leases_left(r, now);
        ret->fingerprint = m->fingerprint;
        snprintf(ret->architecture, sizeof ret->architecture, "%s", m->arch_name);
    }
    pthread_mutex_unlock(&rs->lock);
}

size_t residency_devices(struct daemon *d, struct residency_device *ret, size_t max) {
    struct residency *rs = &d->residency;
    size_t n = 0;
    pthread_mutex_lock(&rs->lock);
    for (size_t i = 0; i < rs->n_loaded; i++) {
        const struct resident *r = rs->loaded[i];
        struct engine_device_info di;
        for (uint32_t k = 0; r->runner && !r->loading && runner_device_info(r->runner, k, &di) >= 0; k++) {
            size_t j = 0;
            while (j < n && strcmp(ret[j].name, di.name)) j++;
            if (j == n) {
                if (n == max) continue;
                ret[n] = (struct residency_device){.kind = di.kind};
                snprintf(ret[n].description, sizeof ret->description, "%s", di.device_name);
                snprintf(ret[n++].name, sizeof ret->name, "%s", di.name);
            }
            ret[j].reserved_bytes += di.weight_bytes + di.kv_bytes + di.scratch_bytes;
        }
    }
    pthread_mutex_unlock(&rs->lock);
    return n;
}

size_t residency_count(struct daemon *d) {
    pthread_mutex_lock(&d->residency.lock);
    size_t n = d->residency.n_loaded;
    pthread_mutex_unlock(&d->residency.lock);
    return n;
}

unsigned residency_queue_depth(struct daemon *d) {
    unsigned n = 0;
    pthread_mutex_lock(&d->residency.lock);
    for (size_t i = 0; i < d->residency.n_loaded; i++)
        if (d->residency.loaded[i]->runner) n += runner_n_jobs(d->residency.loaded[i]->runner);
    for (size_t i = 0; i < d->residency.n_retired; i++)
        n += runner_n_jobs(d->residency.retired[i]->runner);
    pthread_mutex_unlock(&d->residency.lock);
    return n;
}

void residency_done(struct daemon *d) {
    struct residency *rs = &d->residency;
    pthread_mutex_lock(&rs->lock);
    while (rs->n_retired) {
        struct resident *r = unretire_locked(rs, rs->n_retired - 1);
        pthread_mutex_unlock(&rs->lock);
        if (r) resident_free(d, r);
        pthread_mutex_lock(&rs->lock);
    }
    while (rs->n_loaded) {
        struct resident *r = take_locked(d, rs->n_loaded - 1);
        pthread_mutex_unlock(&rs->lock);
        resident_free(d, r);
        pthread_mutex_lock(&rs->lock);
    }
    pthread_mutex_unlock(&rs->lock);
    pthread_cond_destroy(&rs->load_done);
    pthread_mutex_destroy(&rs->lock);
}

uint64_t residency_lease_get(struct daemon *d, struct resident *r, uint32_t uid) {
    pthread_mutex_lock(&d->residency.lock);
    const struct resident_lease *l = lease_find(r, uid);
    uint64_t v = l ? l->keep_alive_usec : 0;
    pthread_mutex_unlock(&d->residency.lock);
    return v;
}

void residency_lease_end(struct daemon *d, struct resident *r, uint32_t uid) {
    pthread_mutex_lock(&d->residency.lock);
    struct resident_lease *l = lease_find(r, uid);
    if (l) *l = r->leases[--r->n_leases];
    pthread_mutex_unlock(&d->residency.lock);
}
