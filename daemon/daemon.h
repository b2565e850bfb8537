/* daemon — warmd, the model service: the pieces and their lifecycle.
 *
 * struct daemon holds everything the process runs (config, metrics, notify, model
 * registry, listener, gRPC server). Exactly one exists, in main.c; every function gets
 * it passed down (handlers through rpc_call_daemon). Threads: main (signals, watchdog,
 * STATUS=), the accept loop, gRPC workers, the work pool (pool.h), gRPC's own threads.
 *
 * Startup order: config → log → block signals → prompt store (state_dir/cache; without
 * it the daemon serves uncached) → grpc_init → registry scan → listener
 * (activated fd or bound socket) → work pool → server → accept loop → READY=1. Shutdown: STOPPING=1
 * → stop accepting → drain the server (streams end UNAVAILABLE) → stop the work pool → close → unload models → close the store → grpc_shutdown. */
#pragma once

#include "base/base.h"
#include "daemon/cache-writer.h"
#include "daemon/config.h"
#include "daemon/guard.h"
#include "daemon/listener.h"
#include "daemon/metrics.h"
#include "daemon/notify.h"
#include "daemon/pool.h"
#include "daemon/registry.h"
#include "daemon/resident.h"
#include "daemon/tokens.h"

#define DAEMON_VERSION "0.1.0"

struct server;
struct store_env;

struct daemon {
    struct config config;
    struct metrics metrics;
    struct notify notify;
    struct registry registry;
    struct residency residency;
    struct listener listener;
    struct guard guard;         /* accept loop and connection guard */
    struct server *server;
    struct tokens tokens;       /* bearer tokens for callers a proxy cannot name */
    struct pool pool;           /* long request work, off the gRPC worker threads */
    struct store_env *store;    /* the prompt cache; NULL when off or unavailable */
    struct cache_writer writer; /* writes new records (running with the store) */
    uint64_t store_check_usec;  /* last periodic reader check */
    uint64_t trim_usec;         /* last malloc_trim */
    uint64_t start_usec;        /* time_now_usec() at startup */
    uint32_t threads;           /* effective: config threads, or the online CPUs */
    uint64_t memory_budget_bytes;   /* effective: config, or 3/4 of physical memory */
    uint64_t test_stall_usec;   /* WARM_TEST_STALL_USEC (tests only, see runner.h) */
    bool parts_up, listener_open, guard_up, grpc_up;  /* what daemon_stop must undo */
};

/* Brings the daemon up to serving (see the order above); on failure everything started
 * is torn down again and err says why. */
int daemon_start(struct daemon *d, struct err_detail *err);
/* SIGHUP: rescan the models directory. */
void daemon_reload(struct daemon *d);
/* Periodic work of the main loop: watchdog, STATUS=. */
void daemon_tick(struct daemon *d);
/* Drains and tears everything down (safe after a failed or partial start). */
void daemon_stop(struct daemon *d);
/* The main loop: waits for signals (which the caller blocked before daemon_start) and
 * ticks; returns on SIGTERM/SIGINT. */
void daemon_run(struct daemon *d);
