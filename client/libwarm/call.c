/* call — the connection and the two call shapes on the gRPC core API (notes/grpc-c-core.md
 * §4): one pluck completion queue per call, the request packed straight into a slice,
 * statuses turned into messages a person can act on. */
#include "libwarm.h"

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
/* Responses can be large (a long CacheList, metrics of many models). */
#define MAX_RECEIVE_BYTES (64 << 20)
#define DEFAULT_TIMEOUT_USEC (600ULL * 1000000ULL)
/* How often a stream waiting for the next event looks at the cancel flag. */
#define CANCEL_POLL_MSEC 50
/* How long the probe waits for the daemon's first bytes (its HTTP/2 SETTINGS, sent at once
 * to a peer it serves) before it stops waiting and lets gRPC find out. */
#define PROBE_WAIT_MSEC 5000
/* gRPC waits 1 s, then longer, before it connects again after a failed connect: a call
 * that waits for the daemon's full listen backlog to drain (wait_connected) tries again
 * after 20 ms, then at most every 250 ms. */
#define RECONNECT_FIRST_MSEC 20
#define RECONNECT_MAX_MSEC 250

/* ---- errors -------------------------------------------------------------------------- */

static const char *const code_names[WARM_CODE_COUNT] = {
    [WARM_OK] = "OK",
    [WARM_CANCELLED] = "CANCELLED",
    [WARM_UNKNOWN] = "UNKNOWN",
    [WARM_INVALID_ARGUMENT] = "INVALID_ARGUMENT",
    [WARM_DEADLINE_EXCEEDED] = "DEADLINE_EXCEEDED",
    [WARM_NOT_FOUND] = "NOT_FOUND",
    [WARM_ALREADY_EXISTS] = "ALREADY_EXISTS",
    [WARM_PERMISSION_DENIED] = "PERMISSION_DENIED",
    [WARM_RESOURCE_EXHAUSTED] = "RESOURCE_EXHAUSTED",
    [WARM_FAILED_PRECONDITION] = "FAILED_PRECONDITION",
    [WARM_ABORTED] = "ABORTED",
    [WARM_OUT_OF_RANGE] = "OUT_OF_RANGE",
    [WARM_UNIMPLEMENTED] = "UNIMPLEMENTED",
    [WARM_INTERNAL] = "INTERNAL",
    [WARM_UNAVAILABLE] = "UNAVAILABLE",
    [WARM_DATA_LOSS] = "DATA_LOSS",
    [WARM_UNAUTHENTICATED] = "UNAUTHENTICATED",
    [WARM_NOT_RUNNING] = "NOT_RUNNING",
    [WARM_SOCKET_ACCESS] = "SOCKET_ACCESS",
    [WARM_NO_MEMORY] = "NO_MEMORY",
    [WARM_PROTOCOL] = "PROTOCOL",
    [WARM_BAD_REQUEST] = "BAD_REQUEST",
};

WARM_API const char *warm_code_name(int code) {
    if (code < 0) code = -code;
    if (code >= WARM_CODE_COUNT || !code_names[code]) return "?";
    return code_names[code];
}

WARM_API const char *warm_version(void) {
    return LIBWARM_VERSION;
}

WARM_API void warm_free(void *p) {
    free(p);
}

int lw_fail(struct warm_error *err, int code, const char *fmt, ...) {
    if (err) {
        err->code = code;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return -code;
}

void lw_copy(char *dst, size_t size, const char *src) {
    if (!size) return;
    size_t n = src ? strlen(src) : 0;
    if (n >= size) {
        n = size - 1;
        /* Do not leave half a UTF-8 character at the cut. */
        while (n > 0 && ((unsigned char)src[n] & 0xc0) == 0x80) n--;
    }
    if (n) memcpy(dst, src, n);
    dst[n] = '\0';
}

/* ---- connection ---------------------------------------------------------------------- */

static const char start_hint[] =
    "start it with 'sudo systemctl start warmd.socket' (or run 'warmd'), or point "
    "--socket / WARM_SOCKET at the socket of a running warmd";

/* A non-blocking connect to the Unix socket at path (its length checked by the caller):
 * returns the socket (connected or not) with *ret_errno the connect's errno (0: connected;
 * EAGAIN: the listen backlog is full, since a Unix socket connect is never in progress), or
 * -errno when no socket could be made. */
static int connect_nb(const char *path, int *ret_errno) {
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -errno;
    *ret_errno = connect(fd, (const struct sockaddr *)&sa, sizeof sa) < 0 ? errno : 0;
    return fd;
}

int lw_socket_probe(const char *path, struct warm_error *err) {
    if (strlen(path) >= sizeof((struct sockaddr_un *)0)->sun_path)
        return lw_fail(err, WARM_BAD_REQUEST, "socket path '%s' is longer than %zu bytes", path,
                       sizeof((struct sockaddr_un *)0)->sun_path - 1);
    int e = 0, fd = connect_nb(path, &e);
    if (fd < 0) return lw_fail(err, WARM_NOT_RUNNING, "socket(AF_UNIX): %s", strerror(-fd));
    if (e == EAGAIN) { /* it listens, busy: the calls wait for room (wait_connected) */
        close(fd);
        return 0;
    }
    if (e == 0) {
        /* warmd greets a peer it serves with its HTTP/2 SETTINGS, and one its access
         * policy refuses with a GOAWAY naming the policy, then closes: telling them apart
         * here means a refused user costs the daemon one refusal (one log line), not one
         * for this probe, one for gRPC's connection and one for the probe explaining it. */
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        char buf[128];
        ssize_t got = poll(&pfd, 1, PROBE_WAIT_MSEC) == 1
                          ? recv(fd, buf, sizeof buf - 1, MSG_PEEK | MSG_DONTWAIT)
                          : 1;
        e = errno;
        close(fd);
        if (got > 0 && memmem(buf, (size_t)got, "access policy", 13))
            return lw_fail(err, WARM_SOCKET_ACCESS,
                           "warmd at %s does not serve uid %u: its access policy (allowed_uids, "
                           "allowed_groups in warmd.conf) leaves this user out; ask the "
                           "administrator to add you", path, (unsigned)getuid());
        if (got > 0 || (got < 0 && e != ECONNRESET)) return 0;
        return lw_fail(err, WARM_NOT_RUNNING,
                       "warmd at %s closed the connection without answering: it is stopping, "
                       "or its access policy (allowed_uids, allowed_groups in warmd.conf) "
                       "refuses uid %u", path, (unsigned)getuid());
    }
    close(fd);
    struct stat st;
    bool is_dir = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
    bool is_file = !is_dir && e != ENOENT && stat(path, &st) == 0 && !S_ISSOCK(st.st_mode);
    if (is_dir)
        return lw_fail(err, WARM_NOT_RUNNING,
                       "%s is a directory, not warmd's socket: point --socket / WARM_SOCKET at "
                       "the socket itself (its 'socket' setting in warmd.conf, default %s)",
                       path, WARM_DEFAULT_SOCKET);
    if (is_file || e == ENOTSOCK)
        return lw_fail(err, WARM_NOT_RUNNING,
                       "%s is not a socket (a regular file or another kind of file): point "
                       "--socket / WARM_SOCKET at warmd's socket (its 'socket' setting in "
                       "warmd.conf, default %s)", path, WARM_DEFAULT_SOCKET);
    if (e == ENOENT || e == ENOTDIR)
        return lw_fail(err, WARM_NOT_RUNNING, "warmd is not running: no socket at %s; %s", path,
                       start_hint);
    if (e == ECONNREFUSED)
        return lw_fail(err, WARM_NOT_RUNNING,
                       "warmd is not running: nothing listens on %s (a stale socket); %s", path,
                       start_hint);
    if (e == EACCES || e == EPERM) {
        if (stat(path, &st) < 0)
            return lw_fail(err, WARM_SOCKET_ACCESS,
                           "permission denied on a directory above %s: ask the administrator "
                           "for access, or point --socket / WARM_SOCKET elsewhere", path);
        struct group *g = getgrgid(st.st_gid);
        char gname[64];
        if (g) lw_copy(gname, sizeof gname, g->gr_name);
        else snprintf(gname, sizeof gname, "%u", (unsigned)st.st_gid);
        return lw_fail(err, WARM_SOCKET_ACCESS,
                       "permission denied on %s: join the group '%s' that owns it "
                       "('sudo usermod -aG %s $USER', then log in again)", path, gname, gname);
    }
    return lw_fail(err, WARM_NOT_RUNNING, "cannot connect to %s: %s", path, strerror(e));
}

WARM_API int warm_connect(const char *socket_path, struct warm_client **ret,
                          struct warm_error *err) {
    const char *path = socket_path;
    if (!path || !*path) path = getenv("WARM_SOCKET");
    if (!path || !*path) path = WARM_DEFAULT_SOCKET;
    if (!ret) return lw_fail(err, WARM_BAD_REQUEST, "warm_connect: ret is NULL");
    struct warm_client *c = calloc(1, sizeof *c);
    if (!c) return lw_fail(err, WARM_NO_MEMORY, "out of memory");
    if (strlen(path) >= sizeof c->socket) {
        free(c);
        return lw_fail(err, WARM_BAD_REQUEST, "socket path '%s' is longer than %zu bytes", path,
                       sizeof c->socket - 1);
    }
    memcpy(c->socket, path, strlen(path) + 1);
    c->timeout_usec = DEFAULT_TIMEOUT_USEC;
    int r = lw_socket_probe(c->socket, err);
    if (r < 0) {
        free(c);
        return r;
    }
    char target[sizeof c->socket + 8];
    snprintf(target, sizeof target, "unix:%s", c->socket);
    grpc_init();
    grpc_arg args[] = {
        {.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
         .value.integer = MAX_RECEIVE_BYTES},
        {.type = GRPC_ARG_STRING, .key = GRPC_ARG_PRIMARY_USER_AGENT_STRING,
         .value.string = "libwarm/" LIBWARM_VERSION},
        {.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
         .value.integer = RECONNECT_FIRST_MSEC},
        {.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
         .value.integer = RECONNECT_MAX_MSEC},
    };
    grpc_channel_args ch_args = {.num_args = ARRAY_LEN(args), .args = args};
    grpc_channel_credentials *creds = grpc_insecure_credentials_create();
    c->channel = grpc_channel_create(target, creds, &ch_args);
    grpc_channel_credentials_release(creds);
    if (!c->channel) {
        grpc_shutdown();
        free(c);
        return lw_fail(err, WARM_NO_MEMORY, "cannot create a gRPC channel to %s", target);
    }
    *ret = c;
    return 0;
}

static void md_clear(struct warm_client *c) {
    for (size_t i = 0; i < c->n_md; i++) {
        grpc_slice_unref(c->md[i].key);
        grpc_slice_unref(c->md[i].value);
    }
    c->n_md = 0;
}

WARM_API void warm_disconnect(struct warm_client *c) {
    if (!c) return;
    md_clear(c);
    grpc_channel_destroy(c->channel);
    free(c);
    grpc_shutdown();
}

WARM_API const char *warm_client_socket(const struct warm_client *c) {
    return c->socket;
}

WARM_API void warm_client_set_timeout(struct warm_client *c, uint64_t usec) {
    c->timeout_usec = usec;
}

WARM_API void warm_client_act_for_uid(struct warm_client *c, int64_t uid) {
    md_clear(c);
    if (uid < 0 || uid >= UINT32_MAX) return;
    char buf[16];
    snprintf(buf, sizeof buf, "%lld", (long long)uid);
    c->md[0].key = grpc_slice_from_static_string("warm-on-behalf-of-uid");
    c->md[0].value = grpc_slice_from_copied_string(buf);
    c->n_md = 1;
}

WARM_API int warm_client_act_for_token(struct warm_client *c, const char *token,
                                       struct warm_error *err) {
    md_clear(c);
    if (!token) return 0;
    /* A header value: printable ASCII only, so a hostile token cannot smuggle another. */
    size_t n = strlen(token);
    if (n == 0 || n > 256)
        return lw_fail(err, WARM_BAD_REQUEST, "token: must be 1..256 bytes, not %zu", n);
    for (size_t i = 0; i < n; i++)
        if (token[i] <= 0x20 || token[i] >= 0x7f)
            return lw_fail(err, WARM_BAD_REQUEST,
                           "token: byte %zu is not printable ASCII", i);
    c->md[0].key = grpc_slice_from_static_string("warm-user-token");
    c->md[0].value = grpc_slice_from_copied_buffer(token, n);
    c->n_md = 1;
    return 0;
}

void lw_initial_metadata(const struct warm_client *c, grpc_op *op) {
    op->data.send_initial_metadata.count = c->n_md;
    op->data.send_initial_metadata.metadata = c->n_md ? (grpc_metadata *)c->md : NULL;
}

/* ---- calls --------------------------------------------------------------------------- */

/* A call to "/warm.v1.Warm/<method>" on cq with a deadline. */
static grpc_call *call_create(struct warm_client *c, grpc_completion_queue *cq,
                              const char *method, gpr_timespec deadline) {
    char buf[96];
    snprintf(buf, sizeof buf, "/warm.v1.Warm/%s", method);
    grpc_slice path = grpc_slice_from_copied_string(buf);
    grpc_call *call = grpc_channel_create_call(c->channel, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                               path, NULL, deadline, NULL);
    grpc_slice_unref(path);
    return call;
}

static gpr_timespec deadline_after(uint64_t usec) {
    if (!usec) return gpr_inf_future(GPR_CLOCK_REALTIME);
    return gpr_time_add(gpr_now(GPR_CLOCK_REALTIME),
                        gpr_time_from_micros((int64_t)usec, GPR_TIMESPAN));
}

static grpc_byte_buffer *pack(const ProtobufCMessage *msg) {
    size_t n = protobuf_c_message_get_packed_size(msg);
    grpc_slice s = grpc_slice_malloc(n);
    protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(s));
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

static ProtobufCMessage *unpack(const ProtobufCMessageDescriptor *desc, grpc_byte_buffer *bb) {
    grpc_byte_buffer_reader r;
    if (!grpc_byte_buffer_reader_init(&r, bb)) return NULL;
    grpc_slice s = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    ProtobufCMessage *m =
        protobuf_c_message_unpack(desc, NULL, GRPC_SLICE_LENGTH(s), GRPC_SLICE_START_PTR(s));
    grpc_slice_unref(s);
    return m;
}

/* Waits for tag on cq; with cancel, wakes up every CANCEL_POLL_MSEC to cancel the call once
 * *cancel is set. */
static bool wait_tag(grpc_completion_queue *cq, grpc_call *call, void *tag,
                     const volatile sig_atomic_t *cancel, bool *cancelled) {
    for (;;) {
        if (cancel && *cancel && !*cancelled) {
            *cancelled = true;
            grpc_call_cancel(call, NULL);
        }
        gpr_timespec until = cancel && !*cancelled
                                 ? gpr_time_add(gpr_now(GPR_CLOCK_REALTIME),
                                                gpr_time_from_millis(CANCEL_POLL_MSEC, GPR_TIMESPAN))
                                 : gpr_inf_future(GPR_CLOCK_REALTIME);
        grpc_event ev = grpc_completion_queue_pluck(cq, tag, until, NULL);
        if (ev.type == GRPC_OP_COMPLETE) return ev.success;
        if (ev.type == GRPC_QUEUE_SHUTDOWN) return false;
    }
}

static void cq_destroy(grpc_completion_queue *cq) {
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_pluck(cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(cq);
}

/* Turns a non-OK status into err; UNAVAILABLE without a daemon message is explained by
 * probing the socket again (the daemon stopped, or refused this user). */
static int status_fail(struct warm_client *c, const char *method, grpc_status_code status,
                       grpc_slice details, struct warm_error *err) {
    char msg[768];
    size_t n = GRPC_SLICE_LENGTH(details);
    if (n >= sizeof msg) n = sizeof msg - 1;
    memcpy(msg, GRPC_SLICE_START_PTR(details), n);
    msg[n] = '\0';
    int code = (int)status > 0 && (int)status <= WARM_UNAUTHENTICATED ? (int)status : WARM_UNKNOWN;
    if (code == WARM_UNAVAILABLE) {
        struct warm_error probe;
        if (lw_socket_probe(c->socket, &probe) < 0)
            return lw_fail(err, probe.code, "%s", probe.message);
        /* The server's own UNAVAILABLE messages say what happened (shutting down, model
         * unloaded); transport errors only name a socket condition. */
        if (!*msg || strstr(msg, "ocket") || strstr(msg, "onnect") || strstr(msg, "pipe") ||
            strstr(msg, "EOF") || strstr(msg, "reset"))
            return lw_fail(err, WARM_UNAVAILABLE,
                           "warmd at %s closed the connection (%s): it is stopping, or its "
                           "access policy (allowed_uids, allowed_groups in warmd.conf) refuses "
                           "this user; see its log ('journalctl -u warmd')", c->socket,
                           *msg ? msg : "no details");
    }
    if (code == WARM_UNIMPLEMENTED && !*msg)
        return lw_fail(err, code, "%s: this warmd does not implement the call (an older version?)",
                       method);
    if (code == WARM_DEADLINE_EXCEEDED)
        return lw_fail(err, code, "%s: no answer from warmd within the deadline (%s)", method,
                       *msg ? msg : "timed out");
    return lw_fail(err, code, "%s", *msg ? msg : warm_code_name(code));
}

/* True when a connect to path fails with EAGAIN now: the daemon's listen backlog is full
 * (it is busy refusing a flood of connections), and gRPC's connect may have failed so. */
static bool backlog_full(const char *path) {
    if (strlen(path) >= sizeof((struct sockaddr_un *)0)->sun_path) return false;
    int e = 0, fd = connect_nb(path, &e);
    if (fd < 0) return false;
    close(fd);
    return e == EAGAIN;
}

/* After a call failed UNAVAILABLE: when the daemon's listen backlog is full, waits until
 * the channel is connected, gRPC connecting again after its backoff. True when it is
 * before deadline; false at once for any other failure, and as soon as the probe says the
 * daemon went away or refuses this user. */
static bool wait_connected(struct warm_client *c, gpr_timespec deadline) {
    if (!backlog_full(c->socket)) return false;
    grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
    bool ok = true;
    grpc_connectivity_state s;
    while (ok && (s = grpc_channel_check_connectivity_state(c->channel, 1)) != GRPC_CHANNEL_READY) {
        if (s == GRPC_CHANNEL_SHUTDOWN ||
            (s == GRPC_CHANNEL_TRANSIENT_FAILURE && lw_socket_probe(c->socket, NULL) < 0)) {
            ok = false;
            break;
        }
        grpc_channel_watch_connectivity_state(c->channel, s, deadline, cq, &s);
        ok = grpc_completion_queue_pluck(cq, &s, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).success;
    }
    cq_destroy(cq);
    return ok;
}

/* One attempt of a unary call. With may_wait, a failure because the daemon's listen
 * backlog was full returns UNARY_AGAIN once the channel has connected. */
#define UNARY_AGAIN 1
static int unary_once(struct warm_client *c, const char *method, const ProtobufCMessage *req,
                      const ProtobufCMessageDescriptor *resp_desc, gpr_timespec deadline,
                      bool may_wait, ProtobufCMessage **ret, struct warm_error *err) {
    grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
    grpc_call *call = call_create(c, cq, method, deadline);
    grpc_byte_buffer *send = pack(req), *recv = NULL;
    grpc_metadata_array md_initial, md_trailing;
    grpc_metadata_array_init(&md_initial);
    grpc_metadata_array_init(&md_trailing);
    grpc_status_code status = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    const char *error_string = NULL;
    grpc_op ops[6] = {
        {.op = GRPC_OP_SEND_INITIAL_METADATA},
        {.op = GRPC_OP_SEND_MESSAGE, .data.send_message.send_message = send},
        {.op = GRPC_OP_SEND_CLOSE_FROM_CLIENT},
        {.op = GRPC_OP_RECV_INITIAL_METADATA,
         .data.recv_initial_metadata.recv_initial_metadata = &md_initial},
        {.op = GRPC_OP_RECV_MESSAGE, .data.recv_message.recv_message = &recv},
        {.op = GRPC_OP_RECV_STATUS_ON_CLIENT,
         .data.recv_status_on_client = {.trailing_metadata = &md_trailing,
                                        .status = &status,
                                        .status_details = &details,
                                        .error_string = &error_string}},
    };
    int r;
    bool cancelled = false;
    lw_initial_metadata(c, &ops[0]);
    if (grpc_call_start_batch(call, ops, ARRAY_LEN(ops), ops, NULL) != GRPC_CALL_OK) {
        r = lw_fail(err, WARM_INTERNAL, "%s: the gRPC call could not start", method);
    } else {
        wait_tag(cq, call, ops, NULL, &cancelled);
        if (status == GRPC_STATUS_UNAVAILABLE && may_wait && wait_connected(c, deadline)) {
            r = UNARY_AGAIN;
        } else if (status != GRPC_STATUS_OK) {
            r = status_fail(c, method, status, details, err);
        } else if (!recv) {
            r = lw_fail(err, WARM_PROTOCOL, "%s: warmd answered OK without a message", method);
        } else {
            ProtobufCMessage *m = unpack(resp_desc, recv);
            if (!m) r = lw_fail(err, WARM_PROTOCOL, "%s: cannot decode the answer of warmd", method);
            else {
                *ret = m;
                r = 0;
            }
        }
    }
    grpc_byte_buffer_destroy(send);
    if (recv) grpc_byte_buffer_destroy(recv);
    grpc_metadata_array_destroy(&md_initial);
    grpc_metadata_array_destroy(&md_trailing);
    grpc_slice_unref(details);
    gpr_free((void *)error_string);
    grpc_call_unref(call);
    cq_destroy(cq);
    return r;
}

int lw_call_unary(struct warm_client *c, const char *method, const ProtobufCMessage *req,
                  const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **ret,
                  struct warm_error *err) {
    gpr_timespec deadline = deadline_after(c->timeout_usec);
    int r = unary_once(c, method, req, resp_desc, deadline, true, ret, err);
    if (r == UNARY_AGAIN) r = unary_once(c, method, req, resp_desc, deadline, false, ret, err);
    return r;
}

int lw_call_stream(struct warm_client *c, const char *method, const ProtobufCMessage *req,
                   const ProtobufCMessageDescriptor *msg_desc, lw_message_fn on_message,
                   void *userdata, const volatile sig_atomic_t *cancel, struct warm_error *err) {
    grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
    grpc_call *call = call_create(c, cq, method, gpr_inf_future(GPR_CLOCK_REALTIME));
    grpc_byte_buffer *send = pack(req);
    grpc_metadata_array md_initial, md_trailing;
    grpc_metadata_array_init(&md_initial);
    grpc_metadata_array_init(&md_trailing);
    grpc_status_code status = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    const char *error_string = NULL;
    bool cancelled = false, by_caller = false, bad_message = false;
    int r = 0;

    grpc_op start[4] = {
        {.op = GRPC_OP_SEND_INITIAL_METADATA},
        {.op = GRPC_OP_SEND_MESSAGE, .data.send_message.send_message = send},
        {.op = GRPC_OP_SEND_CLOSE_FROM_CLIENT},
        {.op = GRPC_OP_RECV_INITIAL_METADATA,
         .data.recv_initial_metadata.recv_initial_metadata = &md_initial},
    };
    lw_initial_metadata(c, &start[0]);
    if (grpc_call_start_batch(call, start, ARRAY_LEN(start), start, NULL) != GRPC_CALL_OK) {
        r = lw_fail(err, WARM_INTERNAL, "%s: the gRPC call could not start", method);
        goto done;
    }
    wait_tag(cq, call, start, cancel, &cancelled);
    /* Read until the stream ends (a NULL message); after a cancel the pending read ends
     * with NULL too. */
    for (;;) {
        grpc_byte_buffer *recv = NULL;
        grpc_op op = {.op = GRPC_OP_RECV_MESSAGE, .data.recv_message.recv_message = &recv};
        if (grpc_call_start_batch(call, &op, 1, &op, NULL) != GRPC_CALL_OK) break;
        bool ok = wait_tag(cq, call, &op, cancel, &cancelled);
        if (!ok || !recv) {
            if (recv) grpc_byte_buffer_destroy(recv);
            break;
        }
        ProtobufCMessage *m = unpack(msg_desc, recv);
        grpc_byte_buffer_destroy(recv);
        if (!m) {
            bad_message = true;
            cancelled = true;
            grpc_call_cancel(call, NULL);
            continue;
        }
        if (!cancelled && on_message && on_message(m, userdata) != 0) {
            by_caller = cancelled = true;
            grpc_call_cancel(call, NULL);
        }
        protobuf_c_message_free_unpacked(m, NULL);
    }
    grpc_op fin = {.op = GRPC_OP_RECV_STATUS_ON_CLIENT,
                   .data.recv_status_on_client = {.trailing_metadata = &md_trailing,
                                                  .status = &status,
                                                  .status_details = &details,
                                                  .error_string = &error_string}};
    if (grpc_call_start_batch(call, &fin, 1, &fin, NULL) != GRPC_CALL_OK) {
        r = lw_fail(err, WARM_INTERNAL, "%s: the gRPC call could not finish", method);
        goto done;
    }
    wait_tag(cq, call, &fin, NULL, &cancelled);
    if (bad_message)
        r = lw_fail(err, WARM_PROTOCOL, "%s: cannot decode an event sent by warmd", method);
    else if (cancelled && (by_caller || (cancel && *cancel)))
        r = lw_fail(err, WARM_CANCELLED, "%s: cancelled by the caller", method);
    else if (status != GRPC_STATUS_OK)
        r = status_fail(c, method, status, details, err);
done:
    grpc_byte_buffer_destroy(send);
    grpc_metadata_array_destroy(&md_initial);
    grpc_metadata_array_destroy(&md_trailing);
    grpc_slice_unref(details);
    gpr_free((void *)error_string);
    grpc_call_unref(call);
    cq_destroy(cq);
    return r;
}
