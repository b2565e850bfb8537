/* server — the gRPC core server: completion queue, worker threads, call state machines,
 * explicit limits, and connections handed over by the listener
 * (grpc_server_add_channel_from_fd). There is no port: gRPC never binds anything.
 *
 * Lifecycle: server_new → server_start → (listener feeds server_add_fd) → server_stop
 * (in-flight calls end with UNAVAILABLE, every call struct is released, workers joined)
 * → server_free. grpc_init/grpc_shutdown are the caller's (the daemon's). */
#pragma once

#include "base/base.h"
#include "daemon/config.h"

struct daemon;
struct server;

int server_new(struct daemon *d, const struct config *c, struct server **ret,
               struct err_detail *err);
int server_start(struct server *s, unsigned n_workers);
/* Takes ownership of a connected non-blocking fd. */
int server_add_fd(struct server *s, int fd);
/* Calls in progress (for STATUS= and metrics). */
unsigned server_active_calls(struct server *s);
/* Drains: no new calls, in-flight calls end with UNAVAILABLE, waits for every call. */
void server_stop(struct server *s);
void server_free(struct server *s);
