/* daemon — lifecycle of the whole service (see daemon.h). */
#include "daemon/daemon.h"

#include "daemon/log.h"
#include "daemon/server.h"
#include "engine/engine.h"
#include "store/store.h"

#include <errno.h>
#include <malloc.h>
#include <grpc/grpc.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* gRPC worker threads: handlers are short (long work runs on the work pool and on the
 * model loops), so a few answer every short call promptly. */
#define RPC_WORKERS 4
/* The work pool (pool.h): Tokenize, Detokenize, LoadModel and the cache walks. A uid's
 * jobs past POOL_MAX_PER_UID, or anyone's past POOL_MAX_TOTAL, are refused at once. */
#define POOL_THREADS 4
#define POOL_MAX_PER_UID 4
#define POOL_MAX_TOTAL 64
/* How often freed heap memory is returned to the system. */
#define TRIM_USEC 2000000ull
/* File descriptors kept for models, the store, logs and gRPC's own. */
#define FDS_RESERVED 256
/* How often idle stale LMDB reader slots are looked for. */
#define STORE_CHECK_USEC (60 * 1000000ull)

/* Opens the prompt store in state_dir/cache. Failure is not fatal: the daemon serves
 * without a persistent cache (degraded), and says so. */
static void store_open(struct daemon *d) {
    const struct config *c = &d->config;
    if (!c->cache_max_bytes) {
        log_info("prompt cache off (cache_max_bytes = 0)");
        return;
    }
    char path[PATH_MAX + 8];
    snprintf(path, sizeof path, "%s/cache", c->state_dir);
    struct store_options opt = {
        .path = path,
        .budget_bytes = c->cache_max_bytes,
        .n_threads = RPC_WORKERS + POOL_THREADS + c->max_loaded_models + 2,
    };
    struct store_open_info info = {0};
    struct err_detail e = {0};
    int r = store_env_open(&opt, &d->store, &info, &e);
    if (r < 0) {
        d->store = NULL;
        log_error("prompt cache %s unavailable, serving without it: %s", path, err_msg(&e, r));
        return;
    }
    if (info.quarantined)
        log_error("prompt cache %s was corrupt (%s); moved aside to %s and started empty", path,
                  info.quarantine_reason, info.quarantine_path);
    if (info.n_readers_cleared) log_info("prompt cache: cleared %d stale readers", info.n_readers_cleared);
    r = cache_writer_start(&d->writer, d->store);
    if (r < 0) {
        log_error("prompt cache: cannot start the writer (%s); serving without it", err_str(r));
        store_env_close(d->store);
        d->store = NULL;
        return;
    }
    log_info("prompt cache %s open (budget %llu bytes)", path, (unsigned long long)c->cache_max_bytes);
    d->store_check_usec = time_now_usec();
}

static void status_line(struct daemon *d, char *buf, size_t n) {
    char cache[64] = "prompt cache off";
    struct store_stats st;
    if (d->store && store_env_stats(d->store, &st) >= 0) {
        uint64_t lookups = st.n_hits + st.n_misses;
        if (lookups)
            snprintf(cache, sizeof cache, "cache hit rate %.0f%%",
                     100.0 * (double)st.n_hits / (double)lookups);
        else
            snprintf(cache, sizeof cache, "cache hit rate -");
    }
    snprintf(buf, n, "serving on %s: %zu models available, %zu loaded, %u calls active, %s",
             d->listener.path, registry_count(&d->registry), residency_count(d),
             d->server ? server_active_calls(d->server) : 0, cache);
}

/* Loads the models named by `preload` before READY=1. A model that fails is logged and
 * skipped: the service is still useful without it. */
static void preload(struct daemon *d) {
    char list[sizeof d->config.preload];
    snprintf(list, sizeof list, "%s", d->config.preload);
    for (char *save = NULL, *name = strtok_r(list, CONFIG_LIST_SEP, &save); name;
         name = strtok_r(NULL, CONFIG_LIST_SEP, &save)) {
        char status[256];
        snprintf(status, sizeof status, "loading model %s", name);
        notify_status(&d->notify, status);
        /* Start-up may outlast TimeoutStartSec with a big model: ask for the time a
         * slow disk needs (50 MiB/s) plus 30 s. */
        struct registry_model m;
        if (registry_find(&d->registry, name, &m, NULL) >= 0)
            notify_extend_timeout(&d->notify, 30000000ull + m.size_bytes / 50 * 1000000ull / 1048576);
        struct resident *res;
        uint64_t usec;
        struct err_detail e = {0};
        /* the pin: max_keep_alive after the model's last use by anyone */
        int r = residency_acquire(d, name, RESIDENCY_PIN, d->config.max_keep_alive_usec, &res,
                                  &usec, &e);
        if (r < 0) {
            log_error("preload: %s", err_msg(&e, r));
            continue;
        }
        residency_release(d, res);
    }
}

int daemon_start(struct daemon *d, struct err_detail *err) {
    const struct config *c = &d->config;
    d->start_usec = time_now_usec();
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    d->threads = c->threads ? c->threads : (uint32_t)(cpus > 0 ? cpus : 1);
    /* device = auto: which device, said once here (cuda:N is checked at each model load) */
    enum engine_device_kind kind;
    int index, r_dev;
    char why[256];
    if ((r_dev = engine_device_resolve(c->device, &kind, &index, why, sizeof why, err)) < 0)
        return r_dev;
    if (*why) log_info("no usable CUDA device (%s); running on the CPU", why);
    if (kind == ENGINE_DEVICE_AUTO) {
        char gpu[128];
        log_info("device auto: models load on cuda:0 (%s) where they run and fit there, else on "
                 "the CPU", engine_cuda_device_name(0, gpu, sizeof gpu));
    }
    d->memory_budget_bytes = c->memory_budget_bytes;
    if (!d->memory_budget_bytes) {
        long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
        if (pages > 0 && psize > 0) d->memory_budget_bytes = (uint64_t)pages * (uint64_t)psize / 4 * 3;
    }
    /* Every connection is three fds (the client's and the relay's socketpair): take the
     * hard limit, as servers under systemd do, and fit the connection cap into it. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        if (rl.rlim_cur < rl.rlim_max) {
            rl.rlim_cur = rl.rlim_max;
            (void)setrlimit(RLIMIT_NOFILE, &rl);
            (void)getrlimit(RLIMIT_NOFILE, &rl);
        }
        uint64_t need = 3ull * c->max_connections + FDS_RESERVED;
        if (rl.rlim_cur != RLIM_INFINITY && need > rl.rlim_cur) {
            uint32_t fit = rl.rlim_cur > 2 * FDS_RESERVED
                               ? (uint32_t)((rl.rlim_cur - FDS_RESERVED) / 3) : 16;
            log_warn("max_connections = %u needs %llu file descriptors, the limit is %llu "
                     "(LimitNOFILE=); serving at most %u connections",
                     c->max_connections, (unsigned long long)need,
                     (unsigned long long)rl.rlim_cur, fit);
            d->config.max_connections = fit;
            d->config.max_connections_per_uid = MIN(d->config.max_connections_per_uid, fit);
        }
    }
    const char *stall = getenv("WARM_TEST_STALL_USEC");
    if (stall) d->test_stall_usec = strtoull(stall, NULL, 10);
    notify_init(&d->notify);
    registry_init(&d->registry, c->models_dir);
    residency_init(&d->residency);
    d->parts_up = true;
    struct err_detail e = {0};
    int r = registry_scan(&d->registry, &e);
    if (r < 0) log_warn("%s; serving no models until it exists (SIGHUP rescans)", err_msg(&e, r));
    metrics_set(&d->metrics, METRIC_MODELS_AVAILABLE, registry_count(&d->registry));

    e = (struct err_detail){0};
    r = tokens_open(&d->tokens, c->state_dir, &e);
    if (r < 0) log_warn("%s; bearer tokens cannot be created or revoked", err_msg(&e, r));
    store_open(d);
    r = listener_open(&d->listener, c, err);
    d->listener_open = true;
    if (r < 0) return r;
    grpc_init();
    d->grpc_up = true;
    struct pool_options po = {POOL_THREADS, POOL_MAX_PER_UID, POOL_MAX_TOTAL, &d->notify};
    r = pool_start(&d->pool, &po);
    if (r < 0) return err_set(err, r, "starting the work pool: %s", err_str(r));
    r = server_new(d, c, &d->server, err);
    if (r < 0) return r;
    r = server_start(d->server, RPC_WORKERS);
    if (r < 0) return err_set(err, r, "starting the gRPC server: %s", err_str(r));
    struct guard_limits lim;
    guard_limits_from_config(&lim, c);
    r = guard_start(&d->guard, &d->listener, d->server, &lim, &d->metrics, &d->notify);
    if (r < 0) return err_set(err, r, "starting the accept thread: %s", err_str(r));
    d->guard_up = true;
    preload(d);
    log_info("warmd %s listening on %s (%s); %zu models in %s", DAEMON_VERSION,
             d->listener.path, d->listener.activated ? "socket-activated" : "bound",
             registry_count(&d->registry), c->models_dir);
    char status[256];
    status_line(d, status, sizeof status);
    notify_ready(&d->notify, status);
    return 0;
}

void daemon_reload(struct daemon *d) {
    notify_reloading(&d->notify);
    struct err_detail e = {0};
    int r = registry_scan(&d->registry, &e);
    if (r < 0) log_warn("rescan: %s", err_msg(&e, r));
    else log_info("rescanned %s: %d models", d->config.models_dir, r);
    metrics_set(&d->metrics, METRIC_MODELS_AVAILABLE, registry_count(&d->registry));
    char status[256];
    status_line(d, status, sizeof status);
    notify_ready(&d->notify, status);
}

void daemon_tick(struct daemon *d) {
    uint64_t now = time_now_usec();
    residency_expire(d, now);
    if (d->store && now - d->store_check_usec >= STORE_CHECK_USEC) {
        int cleared = 0;
        if (store_env_check_readers(d->store, &cleared) >= 0 && cleared)
            log_info("prompt cache: cleared %d stale readers", cleared);
        d->store_check_usec = now;
    }
    /* Give memory that big requests used back to the system (glibc keeps freed heap and
     * arena pages; what clients can make the daemon allocate must not stay resident). */
    if (now - d->trim_usec >= TRIM_USEC) {
        malloc_trim(0);
        d->trim_usec = now;
    }
    notify_tick(&d->notify, time_now_usec());
    char status[256];
    status_line(d, status, sizeof status);
    notify_status(&d->notify, status);
}

void daemon_run(struct daemon *d) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    for (;;) {
        uint64_t usec = notify_interval_usec(&d->notify);
        struct timespec ts = {.tv_sec = (time_t)(usec / 1000000), .tv_nsec = (long)(usec % 1000000) * 1000};
        int sig = sigtimedwait(&set, NULL, &ts);
        if (sig == SIGTERM || sig == SIGINT) {
            log_info("%s: shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
            return;
        }
        if (sig == SIGHUP) daemon_reload(d);
        daemon_tick(d);
    }
}

void daemon_stop(struct daemon *d) {
    if (!d->parts_up) return;
    notify_stopping(&d->notify, "draining");
    if (d->guard_up) guard_quiesce(&d->guard); /* no new connections */
    if (d->server) server_stop(d->server); /* streams end UNAVAILABLE over the relays */
    if (d->guard_up) guard_stop(&d->guard);
    d->guard_up = false;
    if (d->server) {
        server_free(d->server);
        d->server = NULL;
    }
    pool_stop(&d->pool); /* after the server: its queued calls end UNAVAILABLE there */
    if (d->listener_open) listener_close(&d->listener);
    d->listener_open = false;
    residency_done(d);
    cache_writer_stop(&d->writer); /* writes what the models queued */
    store_env_close(d->store);
    d->store = NULL;
    if (d->grpc_up) grpc_shutdown();
    d->grpc_up = false;
    registry_done(&d->registry);
    tokens_close(&d->tokens);
    notify_done(&d->notify);
    d->parts_up = false;
    log_info("stopped");
}
