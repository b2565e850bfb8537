/* guard — the accept loop and the connection guard: what one client can make warmd hold
 * over its connections is bounded here, before gRPC sees a byte.
 *
 * One thread (epoll; nice -10 where RLIMIT_NICE or CAP_SYS_NICE allows, so that peers
 * churning connections cannot fill the listen backlog before it refuses them) accepts on
 * the listening socket, reads SO_PEERCRED, applies the access policy and the connection
 * caps (in total and per uid), and relays every admitted connection through a socketpair
 * whose other end is handed to gRPC. The relay reads the HTTP/2 frame headers in both
 * directions (never the payloads) and so knows, per connection, which streams are open,
 * how many request bytes gRPC holds for them, how many streams the client reset, and
 * whether the client reads what it is sent:
 *
 *  - request bytes of streams the server has not finished (incomplete or queued
 *    requests): per connection at most 2 x max_request_bytes + one read, per uid
 *    max_pending_bytes_per_uid, in total max_pending_bytes; past a cap the connection
 *    is not read from (TCP back-pressure) until the server finishes streams;
 *  - a request must arrive whole within request_timeout (slow-loris uploads);
 *  - a client that does not read for slow_reader_timeout is disconnected;
 *  - more than max_stream_resets resets within 10 s (HTTP/2 rapid reset), a stream table
 *    beyond twice max_streams, or bytes that are not HTTP/2 close the connection;
 *  - a connection without an open stream for connection_idle_timeout is closed,
 *    whatever it did before.
 *
 * Refusals and closures are logged once per uid and reason per interval, with a count,
 * so a client cannot flood the journal. Threads: guard_start/guard_stop from the main
 * thread; everything else runs on the guard's thread. */
#pragma once

#include "base/base.h"
#include "daemon/config.h"
#include "daemon/listener.h"
#include "daemon/metrics.h"
#include "daemon/notify.h"

#include <pthread.h>
#include <stdatomic.h>

struct server;
struct guard_conn;
struct guard_user;

struct guard_limits {
    uint32_t max_connections, max_connections_per_uid;
    uint64_t conn_pending_bytes;    /* 2 x max_request_bytes */
    uint64_t uid_pending_bytes, total_pending_bytes;
    uint64_t idle_usec, request_usec, slow_reader_usec;
    uint32_t max_stream_resets;     /* per RESET_WINDOW_USEC */
    uint32_t max_streams;           /* the server's SETTINGS_MAX_CONCURRENT_STREAMS */
};

void guard_limits_from_config(struct guard_limits *g, const struct config *c);

/* Log lines a client can cause, per (uid, reason) and interval. */
#define GUARD_LOG_SLOTS 64
struct guard_logslot {
    uint32_t uid;
    int reason;
    uint64_t since_usec;
    uint64_t suppressed;
    bool used;
};

struct guard {
    struct listener *listener;
    struct server *server;
    struct metrics *metrics;
    struct notify *notify;
    struct guard_limits lim;
    struct notify_beat beat;
    int epfd;
    pthread_t thread;
    bool running;
    bool accepting;                 /* the guard thread's */
    _Atomic bool exit;
    /* the guard thread's own state */
    struct guard_conn *conns;       /* every open connection */
    struct guard_conn *dead;        /* closed during the current batch of events */
    struct guard_user *users;       /* uids with open connections */
    _Atomic uint32_t n_conns;       /* written by the guard thread only */
    uint64_t total_pending;
    uint64_t last_sweep_usec;
    uint8_t *scratch;               /* one read */
    struct guard_logslot log[GUARD_LOG_SLOTS];
};

/* Starts the accept-and-relay thread over the listener's socket; admitted connections go
 * to server_add_fd. */
int guard_start(struct guard *g, struct listener *l, struct server *s,
                const struct guard_limits *lim, struct metrics *m, struct notify *n);
/* Stops accepting; relayed connections keep flowing (the server drains over them). */
void guard_quiesce(struct guard *g);
/* Ends the thread and closes every relayed connection (gRPC sees them end). */
void guard_stop(struct guard *g);
/* Connections open now (any thread; approximate). */
uint32_t guard_n_connections(const struct guard *g);
