/* libwarm internals shared by its files: the client struct, error helpers and the two
 * call shapes (unary, server stream) on the gRPC core API. Not installed. */
#pragma once

#define WARM_BUILDING_LIBRARY 1
#include "warm.h"

#include <grpc/grpc.h>
#include <protobuf-c/protobuf-c.h>

#define LIBWARM_VERSION "0.1.0"

struct warm_client {
    grpc_channel *channel;
    uint64_t timeout_usec;      /* deadline of unary calls; 0 = none */
    char socket[108];           /* sun_path of the daemon's socket */
    /* Sent with every call: warm-on-behalf-of-uid or warm-user-token (n_md 0 or 1). */
    grpc_metadata md[1];
    size_t n_md;
};
/* Points op (a GRPC_OP_SEND_INITIAL_METADATA) at the client's metadata. */
void lw_initial_metadata(const struct warm_client *c, grpc_op *op);

/* Fills err (may be NULL) with code and a formatted message; returns -code. */
int lw_fail(struct warm_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Copies src (NULL = "") into dst[size], cutting at a UTF-8 character boundary. */
void lw_copy(char *dst, size_t size, const char *src);

/* Connects to path with a plain AF_UNIX socket and closes it again: 0 when something
 * listens (also when its listen backlog is full: the connect fails with EAGAIN, and
 * does not wait); otherwise fills err with WARM_NOT_RUNNING or WARM_SOCKET_ACCESS and
 * the message telling the person what to do. */
int lw_socket_probe(const char *path, struct warm_error *err);

/* One unary RPC: method is the bare name ("GetInfo"); *ret is the unpacked response,
 * freed with protobuf_c_message_free_unpacked(*ret, NULL). A call that fails because the
 * daemon's listen backlog is full (gRPC's connect failed with EAGAIN) is made once more
 * when the channel has connected, within the same deadline. */
int lw_call_unary(struct warm_client *c, const char *method, const ProtobufCMessage *req,
                  const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **ret,
                  struct warm_error *err);

/* Called for each streamed message (owned by the caller: lw_call_stream frees it after
 * the callback). Return 0 to go on, non-zero to cancel the call. */
typedef int (*lw_message_fn)(const ProtobufCMessage *msg, void *userdata);
/* One server-streaming RPC without a deadline; polls *cancel (may be NULL) every 50 ms.
 * Returns -WARM_CANCELLED when on_message or *cancel cancelled it. */
int lw_call_stream(struct warm_client *c, const char *method, const ProtobufCMessage *req,
                   const ProtobufCMessageDescriptor *msg_desc, lw_message_fn on_message,
                   void *userdata, const volatile sig_atomic_t *cancel, struct warm_error *err);
