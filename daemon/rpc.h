/* rpc — what an RPC handler sees: its call, the caller's identity, and the calls that
 * answer it. The method table (rpc-table.c) maps each method of warm.v1.Warm to its
 * request type, flags and handler; server.c decodes the request (INVALID_ARGUMENT when
 * the bytes do not decode), checks the admin flag (PERMISSION_DENIED), then runs the
 * handler on a gRPC worker thread.
 *
 * Answering: a unary handler calls exactly one of rpc_call_reply() / rpc_call_fail()
 * before it returns. A streaming handler either answers the same way or takes a
 * reference (rpc_call_ref) and answers later from any thread: rpc_call_send() for each
 * event, then rpc_call_finish(). Sends are queued and go out one at a time (gRPC allows
 * one message in flight per call), so producers never block. A handler that returns
 * without answering and without a reference gets INTERNAL.
 *
 * Messages are protobuf-c messages (ProtobufCMessage *): the generated types stay in
 * the rpc-*.c files. */
#pragma once

#include "base/base.h"
#include "daemon/listener.h"

#include <grpc/status.h>
#include <protobuf-c/protobuf-c.h>

struct daemon;
struct rpc_call;

/* Request metadata of a trusted proxy (warm-httpd) acting for a user: the uid it found
 * for its client, or the bearer token the client presented (see daemon/tokens.h). */
#define RPC_MD_ON_BEHALF_OF "warm-on-behalf-of-uid"
#define RPC_MD_USER_TOKEN "warm-user-token"

typedef void (*rpc_handler_fn)(struct rpc_call *call, const ProtobufCMessage *request);

struct rpc_method {
    const char *name;                            /* "GetInfo" */
    const ProtobufCMessageDescriptor *request;   /* decoded before the handler runs */
    bool streaming;                              /* server-streaming response */
    bool admin;                                  /* admin group only */
    rpc_handler_fn handler;
};

/* The service: "warm.v1.Warm" and its methods, in proto order. */
extern const char rpc_service_name[];
extern const struct rpc_method rpc_methods[];
extern const size_t rpc_n_methods;

/* Accessors for handlers. Valid for the call's lifetime. */
struct daemon *rpc_call_daemon(const struct rpc_call *c);
const struct peer *rpc_call_peer(const struct rpc_call *c);
const struct rpc_method *rpc_call_method(const struct rpc_call *c);
/* True once the client cancelled, the deadline passed, the connection died, the server
 * is shutting down or the call's status is already queued: stop producing. */
bool rpc_call_is_cancelled(struct rpc_call *c);

/* Unary success: sends msg and status OK. */
void rpc_call_reply(struct rpc_call *c, const ProtobufCMessage *msg);
/* Ends the call with a non-OK status and a message for a person. */
void rpc_call_fail(struct rpc_call *c, grpc_status_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Streaming: queues one message. -ECANCELED when the call is over; -ENOBUFS when the
 * client does not read (the call is then ended with RESOURCE_EXHAUSTED). */
int rpc_call_send(struct rpc_call *c, const ProtobufCMessage *msg);
/* Streaming: queues the final message (NULL = none) and the status. */
void rpc_call_finish(struct rpc_call *c, const ProtobufCMessage *last, grpc_status_code code,
                     const char *message);

/* References for producers that answer after the handler returned. */
void rpc_call_ref(struct rpc_call *c);
void rpc_call_unref(struct rpc_call *c);

/* Decoding a request with a bounded allocator (protobuf-c itself has no limit): at most
 * 16 bytes per input byte plus 1 MiB. */
struct rpc_budget {
    ProtobufCAllocator a;
    size_t used, limit;
    bool exceeded;
};
/* Unpacks data[0..len) as desc. -EINVAL with a message in err when it is malformed,
 * longer than max_bytes or over the budget. Free *ret with rpc_request_free(*ret, b). */
int rpc_request_decode(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len,
                       size_t max_bytes, struct rpc_budget *b, ProtobufCMessage **ret,
                       char *err, size_t n_err);
void rpc_request_free(ProtobufCMessage *msg, struct rpc_budget *b);

/* Maps a project error code to the closest gRPC status. */
grpc_status_code rpc_status_from_err(int err);
