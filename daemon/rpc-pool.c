/* rpc-pool — handlers deferred to the work pool (see rpc_pool_defer in rpc-handlers.h). */
#include "daemon/rpc-handlers.h"

#include <errno.h>
#include <stdio.h>

struct defer_job {
    struct pool_job base;
    struct rpc_call *call;      /* a reference (rpc_call_ref) */
    rpc_handler_fn fn;
    const ProtobufCMessageDescriptor *desc;
    size_t len;
    uint8_t data[];             /* the request, packed */
};

static void defer_run(struct pool_job *pj) {
    struct defer_job *j = (struct defer_job *)pj;
    struct rpc_call *c = j->call;
    const char *name = rpc_call_method(c)->name;
    /* A call the client gave up on, or the shutdown ended, while it was queued. */
    if (!rpc_call_is_cancelled(c)) {
        struct rpc_budget b;
        ProtobufCMessage *req = NULL;
        char err[512];
        if (rpc_request_decode(j->desc, j->data, j->len, j->len, &b, &req, err, sizeof err) < 0) {
            rpc_call_fail(c, GRPC_STATUS_INTERNAL, "%s: %s", name, err);
        } else {
            j->fn(c, req);
            rpc_request_free(req, &b);
            /* Deferred handlers are unary: returning means answered. */
            if (!rpc_call_is_cancelled(c))
                rpc_call_fail(c, GRPC_STATUS_INTERNAL, "%s: the handler did not answer", name);
        }
    }
    metrics_sub(&rpc_call_daemon(c)->metrics, METRIC_POOL_JOBS, 1);
    rpc_call_unref(c);
    free(j);
}

void rpc_pool_defer(struct rpc_call *c, const ProtobufCMessage *req, rpc_handler_fn fn) {
    struct daemon *d = rpc_call_daemon(c);
    const char *name = rpc_call_method(c)->name;
    size_t len = protobuf_c_message_get_packed_size(req), size;
    struct defer_job *j = NULL;
    if (size_add(sizeof *j, len, &size)) j = malloc(size);
    if (!j) {
        rpc_call_fail(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "%s: out of memory", name);
        return;
    }
    *j = (struct defer_job){
        .base = {.run = defer_run, .uid = rpc_call_peer(c)->uid},
        .call = c,
        .fn = fn,
        .desc = req->descriptor,
        .len = protobuf_c_message_pack(req, j->data),
    };
    rpc_call_ref(c);
    metrics_add(&d->metrics, METRIC_POOL_JOBS, 1);
    struct err_detail e = {0};
    int r = pool_submit(&d->pool, &j->base, &e);
    if (r < 0) {
        metrics_sub(&d->metrics, METRIC_POOL_JOBS, 1);
        metrics_add(&d->metrics, METRIC_POOL_REFUSED, 1);
        rpc_call_fail(c, rpc_status_from_err(r), "%s: %s", name, err_msg(&e, r));
        rpc_call_unref(c);
        free(j);
    }
}
