/* server — gRPC core server and call state machines (see server.h and rpc.h).
 *
 * Every call is a heap struct with three tags: NEW (request_call completed), OPS (the
 * send batch in flight completed) and CLOSE (RECV_CLOSE_ON_SERVER completed). References:
 * one for CLOSE, one per send batch in flight, one while the handler runs, one per
 * producer (rpc_call_ref). The struct is freed when the last one goes.
 *
 * Sends go through a per-call queue: gRPC allows one SEND_MESSAGE in flight, so pump()
 * starts the next batch when the previous one completed. The first batch carries the
 * initial metadata, the last one the status (together with the last message when the
 * queue is short, so a unary answer is one batch). */
#include "daemon/server.h"

#include "daemon/daemon.h"
#include "daemon/log.h"
#include "daemon/rpc.h"
#include "daemon/rpc-wire.h"

#include <errno.h>
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_posix.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Requests armed per method: how many calls of one method can arrive between two
 * completions of the worker threads. */
#define ARMED_PER_METHOD 4
/* Messages and bytes queued per stream before the client counts as not reading (besides
 * a send in flight for longer than slow_reader_timeout). */
#define SEND_QUEUE_MAX 1024
#define SEND_QUEUE_MAX_BYTES (256 << 10)
/* How long in-flight calls get to end with UNAVAILABLE before they are cancelled. */
#define DRAIN_USEC 1000000
#define RPC_MAX_METHODS 32
#define SEND_MAX_BYTES (64 << 20)

enum tag_kind { TAG_NEW, TAG_OPS, TAG_CLOSE, TAG_SHUTDOWN, TAG_KIND_COUNT };

struct tag {
    enum tag_kind kind;
    void *ptr;                  /* struct rpc_call *, or struct server * for SHUTDOWN */
};

struct rpc_call {
    struct server *server;
    int method_index;           /* -1: an unregistered method */
    struct tag t_new, t_ops, t_close;
    grpc_call *call;
    grpc_call_details details;  /* unregistered methods only */
    grpc_metadata_array md;
    grpc_byte_buffer *payload;
    gpr_timespec deadline;
    struct peer peer;
    _Atomic int refs;
    _Atomic int producers;      /* references taken by rpc_call_ref */
    _Atomic bool cancelled;
    bool dispatched;            /* counted in active calls */
    int close_cancelled;        /* written by RECV_CLOSE_ON_SERVER */
    struct rpc_call *prev, *next;   /* the server's list of dispatched calls */

    pthread_mutex_t lock;       /* guards the send state below */
    bool sending, md_sent, status_queued, status_sent;
    grpc_byte_buffer **queue;   /* ring of q_cap */
    size_t q_head, q_len, q_cap;
    grpc_byte_buffer *inflight;
    uint64_t inflight_usec;     /* when the batch in flight started */
    size_t held_bytes;          /* queued + in flight, charged to the uid */
    grpc_status_code status;
    char *status_msg;
};

/* A worker thread's watchdog beat: busy while it handles one completion event. */
struct worker_beat {
    struct server *server;
    struct notify_beat beat;
    char name[32];
};

struct server {
    struct daemon *daemon;
    grpc_server *srv;
    grpc_completion_queue *cq;
    grpc_server_credentials *creds;     /* kept for add_channel_from_fd */
    void *handles[RPC_MAX_METHODS];
    char paths[RPC_MAX_METHODS][96];
    pthread_t *workers;
    struct worker_beat *beats;          /* one per worker */
    unsigned n_workers;
    _Atomic bool shutting_down;
    bool started;
    struct tag t_shutdown;
    size_t max_request_bytes;
    uint64_t slow_reader_usec;
    grpc_resource_quota *quota;

    /* Response bytes queued or in flight, per uid and in total: a client that does not
     * read cannot make the daemon hold more (max_pending_bytes[_per_uid]). */
    pthread_mutex_t bytes_lock;
    struct uid_bytes {
        uint32_t uid;
        uint64_t bytes;
    } *ub;
    size_t n_ub, cap_ub;
    uint64_t total_bytes, max_uid_bytes, max_total_bytes;

    pthread_mutex_t lock;               /* guards the fields below */
    pthread_cond_t cond;
    size_t n_calls;                     /* call structs alive, armed or not */
    unsigned n_active;                  /* dispatched and not closed */
    bool shutdown_done;
    struct rpc_call *live;              /* dispatched calls */
};

/* ---- response bytes per uid ------------------------------------------------------------ */

static struct uid_bytes *ub_find(struct server *s, uint32_t uid) {
    for (size_t i = 0; i < s->n_ub; i++)
        if (s->ub[i].uid == uid) return &s->ub[i];
    return NULL;
}

/* Charges n response bytes to the call's uid; false (nothing charged) past a cap. */
static bool bytes_charge(struct rpc_call *c, size_t n) {
    struct server *s = c->server;
    bool ok = false;
    pthread_mutex_lock(&s->bytes_lock);
    struct uid_bytes *u = ub_find(s, c->peer.uid);
    uint64_t mine = u ? u->bytes : 0;
    if (mine + n > s->max_uid_bytes || s->total_bytes + n > s->max_total_bytes) goto out;
    if (!u) {
        if (s->n_ub == s->cap_ub) {
            size_t cap = s->cap_ub ? s->cap_ub * 2 : 16;
            struct uid_bytes *nu = realloc(s->ub, cap * sizeof *nu);
            if (!nu) goto out;
            s->ub = nu;
            s->cap_ub = cap;
        }
        u = &s->ub[s->n_ub++];
        *u = (struct uid_bytes){.uid = c->peer.uid};
    }
    u->bytes += n;
    s->total_bytes += n;
    c->held_bytes += n;
    ok = true;
out:
    pthread_mutex_unlock(&s->bytes_lock);
    return ok;
}

static void bytes_release(struct rpc_call *c, size_t n) {
    struct server *s = c->server;
    if (!n) return;
    pthread_mutex_lock(&s->bytes_lock);
    struct uid_bytes *u = ub_find(s, c->peer.uid);
    if (u) {
        u->bytes -= MIN(u->bytes, (uint64_t)n);
        if (!u->bytes) *u = s->ub[--s->n_ub];
    }
    s->total_bytes -= MIN(s->total_bytes, (uint64_t)n);
    c->held_bytes -= MIN(c->held_bytes, n);
    pthread_mutex_unlock(&s->bytes_lock);
}

static void bb_destroy(struct rpc_call *c, grpc_byte_buffer *bb) {
    bytes_release(c, grpc_byte_buffer_length(bb));
    grpc_byte_buffer_destroy(bb);
}

/* ---- call lifetime ------------------------------------------------------------------- */

static void call_free(struct rpc_call *c) {
    struct server *s = c->server;
    if (c->call) grpc_call_unref(c->call);
    grpc_metadata_array_destroy(&c->md);
    if (c->method_index < 0) grpc_call_details_destroy(&c->details);
    if (c->payload) grpc_byte_buffer_destroy(c->payload);
    for (size_t i = 0; i < c->q_len; i++) bb_destroy(c, c->queue[(c->q_head + i) % c->q_cap]);
    if (c->inflight) bb_destroy(c, c->inflight);
    bytes_release(c, c->held_bytes);
    free(c->queue);
    free(c->status_msg);
    pthread_mutex_destroy(&c->lock);
    pthread_mutex_lock(&s->lock);
    if (c->dispatched) {
        if (c->prev) c->prev->next = c->next;
        else s->live = c->next;
        if (c->next) c->next->prev = c->prev;
    }
    s->n_calls--;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    free(c);
}

void rpc_call_unref(struct rpc_call *c) {
    if (atomic_fetch_sub(&c->refs, 1) == 1) call_free(c);
}

void rpc_call_ref(struct rpc_call *c) {
    atomic_fetch_add(&c->producers, 1);
    atomic_fetch_add(&c->refs, 1);
}

/* Takes a reference unless the call is already being freed. */
static bool call_ref_live(struct rpc_call *c) {
    int r = atomic_load(&c->refs);
    while (r > 0)
        if (atomic_compare_exchange_weak(&c->refs, &r, r + 1)) return true;
    return false;
}

/* Arms one request for method index mi (-1: any unregistered method). */
static int arm(struct server *s, int mi) {
    struct rpc_call *c = calloc(1, sizeof *c);
    if (!c) return -ENOMEM;
    c->server = s;
    c->method_index = mi;
    c->t_new = (struct tag){TAG_NEW, c};
    c->t_ops = (struct tag){TAG_OPS, c};
    c->t_close = (struct tag){TAG_CLOSE, c};
    atomic_init(&c->refs, 1);
    pthread_mutex_init(&c->lock, NULL);
    grpc_metadata_array_init(&c->md);
    if (mi < 0) grpc_call_details_init(&c->details);
    pthread_mutex_lock(&s->lock);
    s->n_calls++;
    pthread_mutex_unlock(&s->lock);
    grpc_call_error e =
        mi >= 0 ? grpc_server_request_registered_call(s->srv, s->handles[mi], &c->call,
                                                      &c->deadline, &c->md, &c->payload, s->cq,
                                                      s->cq, &c->t_new)
                : grpc_server_request_call(s->srv, &c->call, &c->details, &c->md, s->cq, s->cq,
                                           &c->t_new);
    if (e != GRPC_CALL_OK) {
        log_error("grpc: cannot arm a request (error %d)", (int)e);
        call_free(c);
        return -EIO;
    }
    return 0;
}

/* ---- sending ------------------------------------------------------------------------- */

static void queue_drop_locked(struct rpc_call *c) {
    for (size_t i = 0; i < c->q_len; i++) bb_destroy(c, c->queue[(c->q_head + i) % c->q_cap]);
    c->q_len = 0;
}

/* Starts the next send batch if none is in flight. */
static void pump_locked(struct rpc_call *c) {
    if (c->sending || c->status_sent) return;
    if (atomic_load(&c->cancelled)) {
        queue_drop_locked(c);
        return;
    }
    if (c->q_len == 0 && !c->status_queued) return;
    grpc_op ops[3];
    memset(ops, 0, sizeof ops);
    size_t n = 0;
    if (!c->md_sent) {
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
        c->md_sent = true;
    }
    if (c->q_len) {
        c->inflight = c->queue[c->q_head];
        c->q_head = (c->q_head + 1) % c->q_cap;
        c->q_len--;
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = c->inflight;
    }
    grpc_slice details = grpc_empty_slice();
    if (c->status_queued && c->q_len == 0) {
        details = grpc_slice_from_copied_string(c->status_msg ? c->status_msg : "");
        ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
        ops[n].data.send_status_from_server.status = c->status;
        ops[n++].data.send_status_from_server.status_details = &details;
        c->status_sent = true;
    }
    c->sending = true;
    c->inflight_usec = time_now_usec();
    atomic_fetch_add(&c->refs, 1);
    grpc_call_error e = grpc_call_start_batch(c->call, ops, n, &c->t_ops, NULL);
    grpc_slice_unref(details);
    if (e != GRPC_CALL_OK) {
        /* Never seen in practice; treat the call as dead rather than abort. */
        log_error("grpc: start_batch failed (error %d); dropping the call's output", (int)e);
        c->sending = false;
        c->status_sent = true;
        atomic_store(&c->cancelled, true);
        queue_drop_locked(c);
        if (c->inflight) bb_destroy(c, c->inflight);
        c->inflight = NULL;
        atomic_fetch_sub(&c->refs, 1); /* never the last: the caller holds one */
    }
}

static int pack(const ProtobufCMessage *msg, grpc_byte_buffer **ret) {
    size_t n = protobuf_c_message_get_packed_size(msg);
    grpc_slice s = grpc_slice_malloc(n);
    protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(s));
    *ret = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return *ret ? 0 : -ENOMEM;
}

/* Queues bb (taken over on success). -ENOBUFS: the client does not read this stream (too
 * much queued, or a send in flight for slow_reader_timeout); -EDQUOT: its uid holds
 * max_pending_bytes_per_uid of unread responses (or everyone max_pending_bytes). */
static int enqueue_locked(struct rpc_call *c, grpc_byte_buffer *bb) {
    size_t n = grpc_byte_buffer_length(bb);
    if (c->held_bytes + n > SEND_QUEUE_MAX_BYTES && c->q_len > 0) return -ENOBUFS;
    if (c->sending && time_now_usec() - c->inflight_usec > c->server->slow_reader_usec)
        return -ENOBUFS;
    if (!bytes_charge(c, n)) return -EDQUOT;
    if (c->q_len == c->q_cap) {
        size_t nc = c->q_cap ? c->q_cap * 2 : 4;
        grpc_byte_buffer **q = c->q_cap >= SEND_QUEUE_MAX ? NULL : malloc_array(nc, sizeof *q);
        if (!q) {
            bytes_release(c, n);
            return c->q_cap >= SEND_QUEUE_MAX ? -ENOBUFS : -ENOMEM;
        }
        for (size_t i = 0; i < c->q_len; i++) q[i] = c->queue[(c->q_head + i) % c->q_cap];
        free(c->queue);
        c->queue = q;
        c->q_cap = nc;
        c->q_head = 0;
    }
    c->queue[(c->q_head + c->q_len) % c->q_cap] = bb;
    c->q_len++;
    return 0;
}

static void status_queue_locked(struct rpc_call *c, grpc_status_code code, const char *msg) {
    if (c->status_queued) return;
    c->status_queued = true;
    c->status = code;
    c->status_msg = strdup(msg ? msg : "");
    metrics_rpc_finished(&c->server->daemon->metrics, (unsigned)code);
    if (code != GRPC_STATUS_OK && c->method_index >= 0)
        log_debug("%s from uid %u: status %d: %s", rpc_methods[c->method_index].name,
                  c->peer.uid, (int)code, msg ? msg : "");
}

static void status_queue_unread_locked(struct rpc_call *c, int why) {
    char msg[200];
    if (why == -EDQUOT)
        snprintf(msg, sizeof msg, "uid %u has too many response bytes its clients have not read "
                 "(max_pending_bytes_per_uid, max_pending_bytes)", c->peer.uid);
    else
        snprintf(msg, sizeof msg, "the client is not reading the stream (%zu bytes waiting)",
                 c->held_bytes);
    status_queue_locked(c, GRPC_STATUS_RESOURCE_EXHAUSTED, msg);
}

int rpc_call_send(struct rpc_call *c, const ProtobufCMessage *msg) {
    grpc_byte_buffer *bb;
    if (pack(msg, &bb) < 0) return -ENOMEM;
    pthread_mutex_lock(&c->lock);
    int r = 0;
    if (c->status_queued || atomic_load(&c->cancelled)) r = -ECANCELED;
    else if ((r = enqueue_locked(c, bb)) == -ENOBUFS || r == -EDQUOT) {
        queue_drop_locked(c);
        status_queue_unread_locked(c, r);
    }
    if (r < 0) grpc_byte_buffer_destroy(bb);
    else pump_locked(c);
    if (r == -ENOBUFS || r == -EDQUOT) pump_locked(c);
    pthread_mutex_unlock(&c->lock);
    return r;
}

void rpc_call_finish(struct rpc_call *c, const ProtobufCMessage *last, grpc_status_code code,
                     const char *message) {
    grpc_byte_buffer *bb = NULL;
    if (last && pack(last, &bb) < 0) {
        code = GRPC_STATUS_RESOURCE_EXHAUSTED;
        message = "out of memory packing the response";
    }
    pthread_mutex_lock(&c->lock);
    int e = 0;
    if (bb && (c->status_queued || (e = enqueue_locked(c, bb)) < 0)) {
        grpc_byte_buffer_destroy(bb);
        if (!c->status_queued) {
            queue_drop_locked(c);
            status_queue_unread_locked(c, e == -EDQUOT ? e : -ENOBUFS);
        }
    }
    status_queue_locked(c, code, message);
    pump_locked(c);
    pthread_mutex_unlock(&c->lock);
}

void rpc_call_reply(struct rpc_call *c, const ProtobufCMessage *msg) {
    rpc_call_finish(c, msg, GRPC_STATUS_OK, "");
}

void rpc_call_fail(struct rpc_call *c, grpc_status_code code, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    rpc_call_finish(c, NULL, code, msg);
}

struct daemon *rpc_call_daemon(const struct rpc_call *c) { return c->server->daemon; }
const struct peer *rpc_call_peer(const struct rpc_call *c) { return &c->peer; }
const struct rpc_method *rpc_call_method(const struct rpc_call *c) {
    return c->method_index >= 0 ? &rpc_methods[c->method_index] : NULL;
}
bool rpc_call_is_cancelled(struct rpc_call *c) {
    if (atomic_load(&c->cancelled)) return true;
    pthread_mutex_lock(&c->lock);
    bool done = c->status_queued;
    pthread_mutex_unlock(&c->lock);
    return done;
}

/* ---- decoding ------------------------------------------------------------------------ */

/* protobuf-c has no size limit: a budget allocator bounds what one request may allocate
 * (empty repeated sub-messages amplify input ~80x). */
static void *budget_alloc(void *data, size_t size) {
    struct rpc_budget *b = data;
    size_t used;
    if (!size_add(b->used, size, &used) || used > b->limit) {
        b->exceeded = true;
        return NULL;
    }
    b->used = used;
    return malloc(size);
}

static void budget_free(void *data, void *p) { free(p); }

int rpc_request_decode(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len,
                       size_t max_bytes, struct rpc_budget *b, ProtobufCMessage **ret,
                       char *err, size_t n_err) {
    *b = (struct rpc_budget){
        .a = {.alloc = budget_alloc, .free = budget_free, .allocator_data = b},
        .limit = len * 16 + (1 << 20),
    };
    ProtobufCMessage *msg = NULL;
    if (len <= max_bytes) msg = protobuf_c_message_unpack(desc, &b->a, len, data);
    if (!msg) {
        snprintf(err, n_err, "cannot decode %s from %zu bytes: %s", desc->name, len,
                 len > max_bytes ? "larger than max_request_bytes"
                 : b->exceeded   ? "malformed protobuf (too many fields for its size)"
                                 : "malformed protobuf");
        return -EINVAL;
    }
    if (rpc_request_nul_check(desc, data, len, err, n_err) < 0) {
        protobuf_c_message_free_unpacked(msg, &b->a);
        return -EINVAL;
    }
    *ret = msg;
    return 0;
}

void rpc_request_free(ProtobufCMessage *msg, struct rpc_budget *b) {
    if (msg) protobuf_c_message_free_unpacked(msg, &b->a);
}

static int decode(struct rpc_call *c, const struct rpc_method *m, struct rpc_budget *b,
                  ProtobufCMessage **ret, char *err, size_t n_err) {
    if (!c->payload) {
        snprintf(err, n_err, "%s: the request message is missing", m->request->name);
        return -EINVAL;
    }
    grpc_byte_buffer_reader r;
    if (!grpc_byte_buffer_reader_init(&r, c->payload)) {
        snprintf(err, n_err, "%s: cannot read the request", m->request->name);
        return -EINVAL;
    }
    grpc_slice s = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    int e = rpc_request_decode(m->request, GRPC_SLICE_START_PTR(s), GRPC_SLICE_LENGTH(s),
                               c->server->max_request_bytes, b, ret, err, n_err);
    grpc_slice_unref(s);
    return e;
}

/* ---- dispatch ------------------------------------------------------------------------ */

/* The connection's credentials, from the "fd:N" peer of channels added by fd. The fd
 * cannot have been reused by a newer connection: the call holds its transport, and gRPC
 * closes the fd only when the transport is destroyed. */
static int call_peer(struct rpc_call *c) {
    char *p = grpc_call_get_peer(c->call);
    int fd = -1;
    if (p && strncmp(p, "fd:", 3) == 0) fd = atoi(p + 3);
    gpr_free(p);
    return listener_peer_get(&c->server->daemon->listener, fd, &c->peer);
}

static void printable(char *dst, size_t n, grpc_slice s) {
    size_t len = MIN(GRPC_SLICE_LENGTH(s), n - 1);
    const uint8_t *src = GRPC_SLICE_START_PTR(s);
    for (size_t i = 0; i < len; i++) dst[i] = src[i] >= 0x20 && src[i] < 0x7f ? (char)src[i] : '?';
    dst[len] = 0;
}

/* The value of request metadata key (NULL when absent) and its length. */
static const grpc_slice *md_value(const struct rpc_call *c, const char *key) {
    size_t n = strlen(key);
    for (size_t i = 0; i < c->md.count; i++) {
        const grpc_slice *k = &c->md.metadata[i].key;
        if (GRPC_SLICE_LENGTH(*k) == n && memcmp(GRPC_SLICE_START_PTR(*k), key, n) == 0)
            return &c->md.metadata[i].value;
    }
    return NULL;
}

/* A call a trusted proxy makes on behalf of a user (metadata warm-on-behalf-of-uid, or
 * warm-user-token for a user the proxy could not name): from here on the call is that
 * user's — policy, admin rights, namespace, per-uid caps. Answers the call and returns < 0
 * when it must not run. */
static int call_represent(struct rpc_call *c) {
    const grpc_slice *uid_v = md_value(c, RPC_MD_ON_BEHALF_OF);
    const grpc_slice *tok_v = md_value(c, RPC_MD_USER_TOKEN);
    if (!uid_v && !tok_v) return 0;
    struct daemon *d = c->server->daemon;
    uint32_t uid;
    if (uid_v) {
        char buf[16];
        size_t n = GRPC_SLICE_LENGTH(*uid_v);
        char *end = NULL;
        if (n == 0 || n >= sizeof buf) goto bad_uid;
        memcpy(buf, GRPC_SLICE_START_PTR(*uid_v), n);
        buf[n] = 0;
        if (buf[0] < '0' || buf[0] > '9') goto bad_uid;
        errno = 0;
        unsigned long long v = strtoull(buf, &end, 10);
        if (errno || *end || v >= UINT32_MAX) goto bad_uid;
        uid = (uint32_t)v;
    } else if (!c->peer.trusted_proxy) {
        uid = 0; /* refused below without looking the token up */
    } else if (tokens_lookup(&d->tokens, (const char *)GRPC_SLICE_START_PTR(*tok_v),
                             GRPC_SLICE_LENGTH(*tok_v), &uid) < 0) {
        rpc_call_fail(c, GRPC_STATUS_UNAUTHENTICATED,
                      "unknown or revoked token; make one with `warmctl token create`");
        return -EACCES;
    }
    struct err_detail e = {0};
    struct peer p;
    int r = listener_represent(&d->listener.policy, &c->peer, uid, &p, &e);
    if (r < 0) {
        rpc_call_fail(c, GRPC_STATUS_PERMISSION_DENIED, "%s", err_msg(&e, r));
        return r;
    }
    c->peer = p;
    return 0;
bad_uid:
    rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT,
                  RPC_MD_ON_BEHALF_OF ": not a uid (decimal, below 4294967295)");
    return -EINVAL;
}

static void dispatch(struct rpc_call *c) {
    struct daemon *d = c->server->daemon;
    if (call_peer(c) < 0) {
        rpc_call_fail(c, GRPC_STATUS_PERMISSION_DENIED, "unknown peer credentials; refusing");
        return;
    }
    if (call_represent(c) < 0) return;
    if (c->method_index < 0) {
        char name[200];
        printable(name, sizeof name, c->details.method);
        rpc_call_fail(c, GRPC_STATUS_UNIMPLEMENTED, "unknown method %s", name);
        return;
    }
    const struct rpc_method *m = &rpc_methods[c->method_index];
    metrics_rpc_started(&d->metrics, (unsigned)c->method_index);
    if (m->admin && !c->peer.admin) {
        rpc_call_fail(c, GRPC_STATUS_PERMISSION_DENIED,
                      "%s is for the admin group; uid %u is not a member", m->name, c->peer.uid);
        return;
    }
    struct rpc_budget b;
    ProtobufCMessage *req = NULL;
    char err[512];
    if (decode(c, m, &b, &req, err, sizeof err) < 0) {
        rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "%s", err);
        return;
    }
    m->handler(c, req);
    rpc_request_free(req, &b);
    pthread_mutex_lock(&c->lock);
    bool answered = c->status_queued;
    pthread_mutex_unlock(&c->lock);
    if (!answered && atomic_load(&c->producers) == 0)
        rpc_call_fail(c, GRPC_STATUS_INTERNAL, "%s: the handler did not answer", m->name);
}

static void on_new(struct rpc_call *c, bool ok) {
    struct server *s = c->server;
    if (!ok) {  /* the server is shutting down: the armed request is void */
        rpc_call_unref(c);
        return;
    }
    if (!atomic_load(&s->shutting_down)) (void)arm(s, c->method_index);
    /* References: the one we hold becomes CLOSE's; one more while dispatching. */
    atomic_fetch_add(&c->refs, 1);
    pthread_mutex_lock(&s->lock);
    c->dispatched = true;
    c->next = s->live;
    if (s->live) s->live->prev = c;
    s->live = c;
    s->n_active++;
    pthread_mutex_unlock(&s->lock);
    metrics_add(&s->daemon->metrics, METRIC_STREAMS_ACTIVE, 1);

    grpc_op op = {.op = GRPC_OP_RECV_CLOSE_ON_SERVER};
    op.data.recv_close_on_server.cancelled = &c->close_cancelled;
    if (grpc_call_start_batch(c->call, &op, 1, &c->t_close, NULL) != GRPC_CALL_OK) {
        log_error("grpc: cannot start RECV_CLOSE_ON_SERVER");
        atomic_store(&c->cancelled, true);
        pthread_mutex_lock(&s->lock);
        s->n_active--;
        pthread_mutex_unlock(&s->lock);
        metrics_sub(&s->daemon->metrics, METRIC_STREAMS_ACTIVE, 1);
        rpc_call_unref(c);
    }
    dispatch(c);
    rpc_call_unref(c);
}

static void on_ops(struct rpc_call *c, bool ok) {
    pthread_mutex_lock(&c->lock);
    c->sending = false;
    if (c->inflight) bb_destroy(c, c->inflight);
    c->inflight = NULL;
    if (!ok) {
        /* Cancelled, deadline passed or the connection died. */
        atomic_store(&c->cancelled, true);
        c->status_sent = true;
        queue_drop_locked(c);
    } else {
        pump_locked(c);
    }
    pthread_mutex_unlock(&c->lock);
    rpc_call_unref(c);
}

static void on_close(struct rpc_call *c, bool ok) {
    struct server *s = c->server;
    if (c->close_cancelled || !ok) atomic_store(&c->cancelled, true);
    pthread_mutex_lock(&s->lock);
    s->n_active--;
    pthread_mutex_unlock(&s->lock);
    metrics_sub(&s->daemon->metrics, METRIC_STREAMS_ACTIVE, 1);
    rpc_call_unref(c);
}

static void on_shutdown(struct server *s) {
    pthread_mutex_lock(&s->lock);
    s->shutdown_done = true;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

static void *worker(void *arg) {
    struct worker_beat *w = arg;
    struct server *s = w->server;
    notify_beat_bind(&w->beat);
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
        if (ev.type != GRPC_OP_COMPLETE) continue;
        notify_beat_busy(&w->beat, true, time_now_usec());
        struct tag *t = ev.tag;
        bool ok = ev.success != 0;
        switch (t->kind) {
        case TAG_NEW: on_new(t->ptr, ok); break;
        case TAG_OPS: on_ops(t->ptr, ok); break;
        case TAG_CLOSE: on_close(t->ptr, ok); break;
        case TAG_SHUTDOWN: on_shutdown(t->ptr); break;
        case TAG_KIND_COUNT: break;
        }
        notify_beat_busy(&w->beat, false, time_now_usec());
    }
    notify_beat_bind(NULL);
    return NULL;
}

/* ---- lifecycle ----------------------------------------------------------------------- */

int server_new(struct daemon *d, const struct config *c, struct server **ret,
               struct err_detail *err) {
    if (rpc_n_methods > RPC_MAX_METHODS) return err_set(err, -EINVAL, "too many methods");
    struct server *s = calloc(1, sizeof *s);
    if (!s) return -ENOMEM;
    s->daemon = d;
    s->t_shutdown = (struct tag){TAG_SHUTDOWN, s};
    s->max_request_bytes = (size_t)c->max_request_bytes;
    s->slow_reader_usec = c->slow_reader_timeout_usec;
    s->max_uid_bytes = c->max_pending_bytes_per_uid;
    s->max_total_bytes = c->max_pending_bytes;
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->bytes_lock, NULL);
    /* gRPC core's memory for all connections together: a backstop behind the guard's and
     * the per-uid caps (its reclaimers cancel streams when it is exhausted). */
    s->quota = grpc_resource_quota_create("warmd");
    if (s->quota) grpc_resource_quota_resize(s->quota, (size_t)MIN(4 * c->max_pending_bytes,
                                                                   (uint64_t)SIZE_MAX / 2));
    pthread_cond_init(&s->cond, NULL);
    /* Limits, all explicit (P0-11). */
    grpc_arg args[] = {
        {GRPC_ARG_INTEGER, GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
         {.integer = (int)MIN(c->max_request_bytes, (uint64_t)INT32_MAX)}},
        {GRPC_ARG_INTEGER, GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, {.integer = SEND_MAX_BYTES}},
        {GRPC_ARG_INTEGER, GRPC_ARG_MAX_CONCURRENT_STREAMS, {.integer = (int)c->max_streams}},
        {GRPC_ARG_INTEGER, GRPC_ARG_MAX_METADATA_SIZE, {.integer = (int)c->max_metadata_bytes}},
        /* Idle connections are closed after 5 minutes (clients reconnect on demand). */
        {GRPC_ARG_INTEGER, GRPC_ARG_MAX_CONNECTION_IDLE_MS, {.integer = 5 * 60 * 1000}},
        {GRPC_ARG_POINTER, GRPC_ARG_RESOURCE_QUOTA,
         {.pointer = {.p = s->quota, .vtable = grpc_resource_quota_arg_vtable()}}},
    };
    grpc_channel_args ca = {.num_args = ARRAY_SIZE(args) - (s->quota ? 0 : 1), .args = args};
    s->cq = grpc_completion_queue_create_for_next(NULL);
    s->srv = grpc_server_create(&ca, NULL);
    s->creds = grpc_insecure_server_credentials_create();
    if (!s->cq || !s->srv || !s->creds) {
        server_free(s);
        return err_set(err, -ENOMEM, "cannot create the gRPC server");
    }
    grpc_server_register_completion_queue(s->srv, s->cq, NULL);
    for (size_t i = 0; i < rpc_n_methods; i++) {
        snprintf(s->paths[i], sizeof s->paths[i], "/%s/%s", rpc_service_name, rpc_methods[i].name);
        s->handles[i] = grpc_server_register_method(s->srv, s->paths[i], NULL,
                                                    GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
        if (!s->handles[i]) {
            server_free(s);
            return err_set(err, -EINVAL, "cannot register %s", s->paths[i]);
        }
    }
    *ret = s;
    return 0;
}

int server_start(struct server *s, unsigned n_workers) {
    s->workers = calloc(MAX(n_workers, 1u), sizeof *s->workers);
    s->beats = calloc(MAX(n_workers, 1u), sizeof *s->beats);
    if (!s->workers || !s->beats) return -ENOMEM;
    for (unsigned i = 0; i < MAX(n_workers, 1u); i++) {
        struct worker_beat *w = &s->beats[i];
        w->server = s;
        snprintf(w->name, sizeof w->name, "gRPC worker %u", i);
        w->beat.name = w->name;
        notify_beat_step(&w->beat, time_now_usec());
    }
    grpc_server_start(s->srv);
    s->started = true;
    for (size_t i = 0; i < rpc_n_methods; i++)
        for (int k = 0; k < ARMED_PER_METHOD; k++)
            if (arm(s, (int)i) < 0) return -EIO;
    for (int k = 0; k < ARMED_PER_METHOD; k++)
        if (arm(s, -1) < 0) return -EIO;
    for (unsigned i = 0; i < n_workers; i++) {
        (void)notify_beat_add(&s->daemon->notify, &s->beats[i].beat); /* full: unwatched */
        int r = pthread_create(&s->workers[i], NULL, worker, &s->beats[i]);
        if (r) {
            notify_beat_del(&s->daemon->notify, &s->beats[i].beat);
            return -r;
        }
        s->n_workers++;
    }
    return 0;
}

int server_add_fd(struct server *s, int fd) {
    if (atomic_load(&s->shutting_down)) {
        close(fd);
        return -ESHUTDOWN;
    }
    grpc_server_add_channel_from_fd(s->srv, fd, s->creds);
    return 0;
}

unsigned server_active_calls(struct server *s) {
    pthread_mutex_lock(&s->lock);
    unsigned n = s->n_active;
    pthread_mutex_unlock(&s->lock);
    return n;
}

/* Ends every dispatched call with UNAVAILABLE (after what it already queued). */
static void finish_live_calls(struct server *s) {
    for (;;) {
        struct rpc_call *batch[64];
        size_t n = 0;
        pthread_mutex_lock(&s->lock);
        for (struct rpc_call *c = s->live; c && n < ARRAY_SIZE(batch); c = c->next) {
            pthread_mutex_lock(&c->lock);
            bool open = !c->status_queued;
            pthread_mutex_unlock(&c->lock);
            if (open && call_ref_live(c)) batch[n++] = c;
        }
        pthread_mutex_unlock(&s->lock);
        if (n == 0) return;
        for (size_t i = 0; i < n; i++) {
            rpc_call_finish(batch[i], NULL, GRPC_STATUS_UNAVAILABLE, "warmd is shutting down");
            rpc_call_unref(batch[i]);
        }
    }
}

void server_stop(struct server *s) {
    if (!s || !s->started || atomic_exchange(&s->shutting_down, true)) return;
    /* A failed start may have left no worker: the drain below needs one. */
    if (!s->n_workers && s->workers && s->beats &&
        pthread_create(&s->workers[0], NULL, worker, &s->beats[0]) == 0)
        s->n_workers = 1;
    grpc_server_shutdown_and_notify(s->srv, s->cq, &s->t_shutdown);
    if (s->n_workers) {
        finish_live_calls(s);
        /* Give the calls a moment to flush their status, then cancel what remains. */
        uint64_t until = time_now_usec() + DRAIN_USEC;
        pthread_mutex_lock(&s->lock);
        while (s->n_active > 0 && time_now_usec() < until) {
            pthread_mutex_unlock(&s->lock);
            poll(NULL, 0, 10);
            pthread_mutex_lock(&s->lock);
        }
        pthread_mutex_unlock(&s->lock);
    }
    grpc_server_cancel_all_calls(s->srv);
    pthread_mutex_lock(&s->lock);
    while (s->n_workers && (!s->shutdown_done || s->n_calls > 0))
        pthread_cond_wait(&s->cond, &s->lock);
    pthread_mutex_unlock(&s->lock);
    grpc_completion_queue_shutdown(s->cq);
    for (unsigned i = 0; i < s->n_workers; i++) {
        pthread_join(s->workers[i], NULL);
        notify_beat_del(&s->daemon->notify, &s->beats[i].beat);
    }
    s->n_workers = 0;
}

void server_free(struct server *s) {
    if (!s) return;
    if (s->srv) {
        server_stop(s);
        grpc_server_destroy(s->srv);
    }
    if (s->cq) {
        if (!s->started) {
            /* Nothing was armed; the queue only needs its shutdown event. */
            grpc_completion_queue_shutdown(s->cq);
            while (grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL)
                       .type != GRPC_QUEUE_SHUTDOWN) {
            }
        }
        grpc_completion_queue_destroy(s->cq);
    }
    if (s->creds) grpc_server_credentials_release(s->creds);
    if (s->quota) grpc_resource_quota_unref(s->quota);
    free(s->workers);
    free(s->beats);
    free(s->ub);
    pthread_mutex_destroy(&s->bytes_lock);
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->lock);
    free(s);
}
