/* resident — which models are loaded: load on first use (or LoadModel), keep-alive as a
 * lease per uid capped by max_keep_alive, at most max_loaded_models and memory_budget bytes
 * (idle models, least recently used first, are unloaded to make room), explicit unload.
 *
 * Memory: a loaded model holds its private copy of the file (all of it; the page cache
 * does not keep a second one, gguf.h), its KV cache and recurrent state, and its CPU
 * devices' copies and scratch; a loading one counts its file plus an upper bound of its KV
 * cache (every layer, the whole context, every sequence). A load that would pass the
 * budget, or the machine's available memory (MemAvailable, plus what unloading the idle
 * models would free), even once every idle model is gone is refused with the numbers
 * (ERR_TOO_LARGE) before anything is unloaded.
 *
 * Keep-alive: each uid that uses a model holds a lease on it, its keep-alive counted from
 * its own last use (a job of its that queues or runs counts as use). An idle model stays
 * while any lease holds, so one user's keep-alive (or unload_after) never cuts another's
 * short; ending a lease ends only that uid's. The preload list holds the pin,
 * RESIDENCY_PIN's lease, counted from the model's last use by anyone. An unload (admin)
 * takes the model out at once, leases and all.
 *
 * A handler acquires a resident model, uses its runner, and releases it. A model is idle
 * when nobody holds it and its runner has no job. Unloading a busy model ends its streams
 * (UNAVAILABLE "model unloaded"); a model a handler still holds is freed by the last
 * release. Thread-safe: one mutex, never held while a model loads (a loading model has a
 * placeholder entry; other callers for it wait, everything else goes on).
 *
 * Replaced files: a loaded model is a private copy of its file (runner.h), so writing,
 * truncating or renaming over the file cannot crash or change it. Every acquire checks the
 * file's identity (inode, size, mtime, ctime) against the one it was loaded from; when it
 * differs the model is retired (out of the table; its queued and running jobs finish on
 * the copy they started on; freed once idle, or at once when the memory budget needs the
 * room, which ends its streams with UNAVAILABLE) and the file is loaded again. */
#pragma once

#include "base/base.h"
#include "daemon/config.h"
#include "daemon/registry.h"
#include "daemon/runner.h"

#include <pthread.h>

#define RESIDENT_MAX 64
/* Leases per model. Bounded: a uid beyond them takes the place of the lease that ends
 * soonest (resident.c says why that never shortens the model's stay). */
#define RESIDENT_LEASES 32
/* The owner of the pin: the preload list's lease. No caller has this uid (the kernel
 * never reports (uid_t)-1, and represented uids are below it, server.c). */
#define RESIDENCY_PIN UINT32_MAX

struct daemon;

/* uid keeps the model loaded until keep_alive_usec after last_used_usec. */
struct resident_lease {
    uint32_t uid;
    uint64_t last_used_usec;
    uint64_t keep_alive_usec;
};

struct resident {
    char name[CONFIG_NAME_MAX];
    struct runner *runner;       /* NULL while loading */
    unsigned refs;               /* handlers holding it (and the loader while loading) */
    bool loading;
    bool unloaded;               /* out of the table; freed by the last release */
    bool retired;                /* unloaded because its file changed, in residency.retired
                                    until idle (its jobs finish) */
    struct registry_file_id file_id;    /* of the file it was loaded from */
    int load_err;                /* a failed load: its code and message, for waiters */
    char load_msg[512];
    uint64_t estimate_bytes;     /* counted while loading: the file size (the private copy)
                                    + an upper bound of its KV cache */
    uint64_t held_bytes;         /* once loaded: host memory it holds (resident.c held_bytes) */
    uint64_t last_used_usec;     /* by anyone: the order in which idle models make room */
    struct resident_lease leases[RESIDENT_LEASES];
    unsigned n_leases;
};

struct residency {
    pthread_mutex_t lock;
    pthread_cond_t load_done;    /* a load finished (or failed) */
    struct resident *loaded[RESIDENT_MAX];
    size_t n_loaded;
    struct resident *retired[RESIDENT_MAX];  /* whose file changed, finishing their jobs */
    size_t n_retired;
};

void residency_init(struct residency *rs);
/* Unloads everything (after the server stopped). */
void residency_done(struct daemon *d);

/* The loaded model `name` (loading it if needed), with uid's lease on it renewed from now
 * (uid RESIDENCY_PIN: the pin). keep_alive_usec: the lease's length, capped at
 * max_keep_alive; 0 = as the lease was, or the config's keep_alive for a new lease.
 * *ret_load_usec: time spent loading (0 if resident). Errors: ERR_INVALID / ERR_NOT_FOUND
 * (name), -EBUSY (every slot busy), ERR_TOO_LARGE (over the memory budget or the machine's
 * memory, the message has the numbers), model load errors with their detail. */
int residency_acquire(struct daemon *d, const char *name, uint32_t uid, uint64_t keep_alive_usec,
                      struct resident **ret, uint64_t *ret_load_usec, struct err_detail *err);
void residency_release(struct daemon *d, struct resident *res);
/* Unloads a model; *ret_was_loaded says whether it was resident. */
int residency_unload(struct daemon *d, const char *name, bool *ret_was_loaded);
/* Unloads idle models on which no lease holds (the main loop's tick). */
void residency_expire(struct daemon *d, uint64_t now_usec);

struct residency_info {
    bool loaded;
    uint64_t memory_bytes;
    uint64_t keep_alive_left_usec;  /* of the lease that holds longest */
    struct hash128 fingerprint;
    char architecture[32];
};
/* What ListModels reports for name. */
void residency_info(struct daemon *d, const char *name, struct residency_info *ret);
size_t residency_count(struct daemon *d);
/* The devices the loaded models run on, by device name ("cpu", "cpu0", ...), at most max:
 * each with its kind ("cpu", "cuda") and the bytes the models reserved there (the weights
 * it reads, its KV and its scratch), summed over the models. Returns how many. */
struct residency_device {
    char name[16];
    char description[128]; /* a GPU's own name */
    const char *kind;
    uint64_t reserved_bytes;
};
size_t residency_devices(struct daemon *d, struct residency_device *ret, size_t max);
/* The context per sequence a model trained for n_ctx_train tokens gets: ctx_size, at most
 * n_ctx_train unless ctx_above_trained (0 = unknown: ctx_size). */
uint32_t residency_ctx_size(const struct config *c, uint32_t n_ctx_train);
/* Generation requests queued or running on all loaded models. */
unsigned residency_queue_depth(struct daemon *d);
/* The keep-alive of uid's lease on a model the caller holds; 0 when uid holds none. */
uint64_t residency_lease_get(struct daemon *d, struct resident *r, uint32_t uid);
/* Ends uid's lease on a model the caller holds (unload_after): the next tick unloads the
 * model once it is idle, unless another lease holds. */
void residency_lease_end(struct daemon *d, struct resident *r, uint32_t uid);
