/* guard — accept loop and HTTP/2 connection guard (see guard.h).
 *
 * HTTP/2 facts used (RFC 9113): the client starts with the 24-byte preface
 * "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"; every frame then starts with a 9-byte header:
 * length (24 bits, big-endian), type (8), flags (8), stream id (31 bits). Types: DATA 0,
 * HEADERS 1, RST_STREAM 3; flag END_STREAM = 0x1 on DATA and HEADERS. A stream is opened
 * by the client's HEADERS; it is over for the server once the server sent END_STREAM
 * (the trailers) or either side sent RST_STREAM. */
#include "daemon/guard.h"

#include "daemon/log.h"
#include "daemon/server.h"

#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#define READ_BYTES (64 << 10)
#define SOCKPAIR_BUF_BYTES (64 << 10)
#define ACCEPTS_PER_ROUND 64
/* The accept loop's nice value (its thread only). A peer that connects and closes in a
 * loop spends about as much CPU per connection as its refusal costs here: when it runs as
 * often as this thread, it fills the listen backlog, and every other connect then fails
 * with EAGAIN (two such processes on 2 cores failed over half of an allowed user's).
 * Raising it needs CAP_SYS_NICE or RLIMIT_NICE (warmd.service: LimitNICE=); without
 * either the loop runs at the daemon's priority. */
#define ACCEPT_NICE (-10)
#define SWEEP_USEC 100000ull
#define RESET_WINDOW_USEC 10000000ull
#define LOG_INTERVAL_USEC 10000000ull
/* After the GOAWAY of an idle connection, the client has this long to leave by itself. */
#define GOAWAY_GRACE_USEC 1000000ull

#define H2_PREFACE "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#define H2_PREFACE_LEN 24
#define H2_DATA 0
#define H2_HEADERS 1
#define H2_RST_STREAM 3
#define H2_GOAWAY 7
#define H2_END_STREAM 0x1

/* Why a connection was refused or closed: the log, the metrics. */
enum why {
    WHY_POLICY, WHY_TOTAL, WHY_PER_UID, WHY_IDLE, WHY_REQUEST_TIMEOUT, WHY_SLOW_READER,
    WHY_RESETS, WHY_STREAMS, WHY_NOT_HTTP2, WHY_COUNT
};

static const struct {
    const char *text;
    enum metric_id metric;
    int level;
} whys[WHY_COUNT] = {
    [WHY_POLICY] = {"refused by the access policy", METRIC_CONN_REFUSED, LOG_LEVEL_INFO},
    [WHY_TOTAL] = {"refused: max_connections reached", METRIC_CONN_LIMITED, LOG_LEVEL_WARN},
    [WHY_PER_UID] = {"refused: max_connections_per_uid reached", METRIC_CONN_LIMITED,
                     LOG_LEVEL_WARN},
    [WHY_IDLE] = {"closed: idle (connection_idle_timeout)", METRIC_CONN_CLOSED_IDLE,
                  LOG_LEVEL_DEBUG},
    [WHY_REQUEST_TIMEOUT] = {"closed: a request did not arrive whole within request_timeout",
                             METRIC_CONN_CLOSED_ABUSE, LOG_LEVEL_WARN},
    [WHY_SLOW_READER] = {"closed: the client did not read for slow_reader_timeout",
                         METRIC_CONN_CLOSED_ABUSE, LOG_LEVEL_WARN},
    [WHY_RESETS] = {"closed: more than max_stream_resets streams reset in 10 s (HTTP/2 "
                    "rapid reset)", METRIC_CONN_CLOSED_ABUSE, LOG_LEVEL_WARN},
    [WHY_STREAMS] = {"closed: more open streams than max_streams allows",
                     METRIC_CONN_CLOSED_ABUSE, LOG_LEVEL_WARN},
    [WHY_NOT_HTTP2] = {"closed: not HTTP/2", METRIC_CONN_CLOSED_ABUSE, LOG_LEVEL_INFO},
};

enum end_kind { END_LISTEN, END_STOP, END_CLIENT, END_GRPC };

struct guard_end {
    enum end_kind kind;
    struct guard_conn *conn;
    int fd;
    uint32_t events;            /* registered with epoll */
};

struct guard_stream {
    uint32_t id;
    bool client_done;           /* END_STREAM from the client: the request is whole */
    uint64_t open_usec;
    uint64_t bytes;             /* DATA the client sent on it */
};

/* Frame-header reader of one direction. */
struct h2_reader {
    unsigned n_preface;         /* preface bytes still expected (client direction) */
    uint8_t hdr[9];
    unsigned n_hdr;
    uint32_t left;              /* payload bytes of the current frame still to come */
};

struct guard_user {
    uint32_t uid;
    uint32_t n_conns;
    uint64_t pending;           /* request bytes held for its open streams */
    struct guard_user *next;
};

struct guard_conn {
    struct guard_end client, grpc;
    struct peer peer;
    struct guard_user *user;
    struct h2_reader up, down;
    uint8_t *up_buf, *down_buf;         /* bytes read but not yet written on */
    size_t up_len, up_off, down_len, down_off;
    uint64_t down_since_usec;           /* down_buf non-empty since (the client is slow) */
    struct guard_stream *streams;
    uint32_t n_streams, cap_streams;
    uint64_t pending;                   /* request bytes of open streams */
    uint64_t idle_since_usec;           /* no stream open since */
    uint64_t reset_window_usec;
    uint32_t n_resets;
    uint32_t last_id;                   /* highest stream id the client opened */
    uint64_t goaway_usec;               /* when the idle GOAWAY went out */
    bool closed;
    struct guard_conn *prev, *next;     /* the guard's list; next also links `dead` */
};

void guard_limits_from_config(struct guard_limits *g, const struct config *c) {
    *g = (struct guard_limits){
        .max_connections = c->max_connections,
        .max_connections_per_uid = c->max_connections_per_uid,
        .conn_pending_bytes = 2 * c->max_request_bytes,
        .uid_pending_bytes = c->max_pending_bytes_per_uid,
        .total_pending_bytes = c->max_pending_bytes,
        .idle_usec = c->connection_idle_timeout_usec,
        .request_usec = c->request_timeout_usec,
        .slow_reader_usec = c->slow_reader_timeout_usec,
        .max_stream_resets = c->max_stream_resets,
        .max_streams = c->max_streams,
    };
}

uint32_t guard_n_connections(const struct guard *g) { return atomic_load(&g->n_conns); }

/* ---- rate-limited log ---------------------------------------------------------------- */

/* Logs "uid U: WHY" at most once per interval per (uid, reason); the next line after an
 * interval says how many were not logged. */
static void guard_log(struct guard *g, uint32_t uid, enum why why, const char *extra,
                      uint64_t now) {
    struct guard_logslot *slot = NULL, *oldest = &g->log[0];
    for (size_t i = 0; i < GUARD_LOG_SLOTS; i++) {
        struct guard_logslot *s = &g->log[i];
        if (s->used && s->uid == uid && s->reason == (int)why) {
            slot = s;
            break;
        }
        if (!s->used || (oldest->used && s->since_usec < oldest->since_usec)) oldest = s;
    }
    const char *text = whys[why].text;
    int level = whys[why].level;
    if (slot && now - slot->since_usec < LOG_INTERVAL_USEC) {
        slot->suppressed++;
        return;
    }
    if (!slot) {
        if (oldest->used && oldest->suppressed)
            log_msg(whys[oldest->reason].level, "connections of uid %u: %llu more %s", oldest->uid,
                    (unsigned long long)oldest->suppressed, whys[oldest->reason].text);
        slot = oldest;
        *slot = (struct guard_logslot){.uid = uid, .reason = (int)why, .used = true};
    }
    char head[400];
    if (why == WHY_POLICY) /* extra is the policy's own message, naming the uid */
        snprintf(head, sizeof head, "refused connection%s", extra ? extra : "");
    else
        snprintf(head, sizeof head, "connection of uid %u %s%s", uid, text, extra ? extra : "");
    if (slot->suppressed)
        log_msg(level, "%s (and %llu more in the last %llu s)", head,
                (unsigned long long)slot->suppressed,
                (unsigned long long)((now - slot->since_usec) / 1000000));
    else
        log_msg(level, "%s", head);
    slot->since_usec = now;
    slot->suppressed = 0;
}

/* ---- users --------------------------------------------------------------------------- */

static struct guard_user *user_get(struct guard *g, uint32_t uid, bool create) {
    for (struct guard_user *u = g->users; u; u = u->next)
        if (u->uid == uid) return u;
    if (!create) return NULL;
    struct guard_user *u = calloc(1, sizeof *u);
    if (!u) return NULL;
    u->uid = uid;
    u->next = g->users;
    g->users = u;
    return u;
}

static void user_put(struct guard *g, struct guard_user *u) {
    if (u->n_conns || u->pending) return;
    for (struct guard_user **p = &g->users; *p; p = &(*p)->next)
        if (*p == u) {
            *p = u->next;
            free(u);
            return;
        }
}

/* ---- epoll interest ------------------------------------------------------------------ */

static void end_set(struct guard *g, struct guard_end *e, uint32_t events) {
    if (e->fd < 0 || e->events == events) return;
    struct epoll_event ev = {.events = events, .data.ptr = e};
    if (epoll_ctl(g->epfd, EPOLL_CTL_MOD, e->fd, &ev) == 0) e->events = events;
}

/* Whether the client may send more: its request bytes are under every cap. */
static bool may_read_client(const struct guard *g, const struct guard_conn *c) {
    return c->up_len == 0 && c->pending < g->lim.conn_pending_bytes &&
           c->user->pending < g->lim.uid_pending_bytes &&
           g->total_pending < g->lim.total_pending_bytes;
}

static void conn_update(struct guard *g, struct guard_conn *c) {
    if (c->closed) return;
    end_set(g, &c->client, (may_read_client(g, c) ? EPOLLIN : 0) | (c->down_len ? EPOLLOUT : 0));
    end_set(g, &c->grpc, (c->down_len ? 0 : EPOLLIN) | (c->up_len ? EPOLLOUT : 0));
}

/* ---- streams ------------------------------------------------------------------------- */

static struct guard_stream *stream_find(struct guard_conn *c, uint32_t id) {
    for (uint32_t i = 0; i < c->n_streams; i++)
        if (c->streams[i].id == id) return &c->streams[i];
    return NULL;
}

static void pending_sub(struct guard *g, struct guard_conn *c, uint64_t n) {
    c->pending -= n;
    c->user->pending -= n;
    g->total_pending -= n;
}

static void stream_end(struct guard *g, struct guard_conn *c, struct guard_stream *s,
                       uint64_t now) {
    pending_sub(g, c, s->bytes);
    *s = c->streams[--c->n_streams];
    if (c->n_streams == 0) c->idle_since_usec = now;
}

/* ---- closing ------------------------------------------------------------------------- */

static void conn_close_how(struct guard *g, struct guard_conn *c, int why, uint64_t now,
                           const char *how) {
    if (c->closed) return;
    c->closed = true;
    if (why >= 0) {
        metrics_add(g->metrics, whys[why].metric, 1);
        guard_log(g, c->peer.uid, (enum why)why, NULL, now);
    } else {
        log_debug("connection of uid %u closed (%s)", c->peer.uid, how);
    }
    while (c->n_streams) stream_end(g, c, &c->streams[0], now);
    close(c->client.fd);
    close(c->grpc.fd); /* gRPC sees the end of its transport and cancels its calls */
    c->client.fd = c->grpc.fd = -1;
    c->user->n_conns--;
    user_put(g, c->user);
    atomic_fetch_sub(&g->n_conns, 1);
    metrics_sub(g->metrics, METRIC_CONN_OPEN, 1);
    if (c->prev) c->prev->next = c->next;
    else g->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    c->next = g->dead;
    g->dead = c;
}

#define conn_close(g, c, why, now) conn_close_how(g, c, why, now, __func__)
#define conn_close_because(g, c, how, now) conn_close_how(g, c, -1, now, how)

static void conn_free(struct guard_conn *c) {
    free(c->up_buf);
    free(c->down_buf);
    free(c->streams);
    free(c);
}

/* ---- frames -------------------------------------------------------------------------- */

/* A frame header from the client. Returns a reason (>= 0) to close the connection, or -1. */
static int client_frame(struct guard *g, struct guard_conn *c, uint8_t type, uint8_t flags,
                        uint32_t id, uint32_t len, uint64_t now) {
    struct guard_stream *s = id ? stream_find(c, id) : NULL;
    switch (type) {
    case H2_HEADERS:
        if (!s) {
            if (c->n_streams >= 2 * g->lim.max_streams + 8) return WHY_STREAMS;
            if (c->n_streams == c->cap_streams) {
                uint32_t cap = c->cap_streams ? c->cap_streams * 2 : 8;
                struct guard_stream *n = realloc(c->streams, cap * sizeof *n);
                if (!n) return WHY_STREAMS;
                c->streams = n;
                c->cap_streams = cap;
            }
            s = &c->streams[c->n_streams++];
            *s = (struct guard_stream){.id = id, .open_usec = now};
            c->last_id = MAX(c->last_id, id);
        }
        if (flags & H2_END_STREAM) s->client_done = true;
        break;
    case H2_DATA:
        if (!s || s->client_done) break; /* gRPC refuses it and holds nothing */
        s->bytes += len;
        c->pending += len;
        c->user->pending += len;
        g->total_pending += len;
        if (flags & H2_END_STREAM) s->client_done = true;
        break;
    case H2_RST_STREAM:
        if (s) stream_end(g, c, s, now);
        if (now - c->reset_window_usec > RESET_WINDOW_USEC) {
            c->reset_window_usec = now;
            c->n_resets = 0;
        }
        if (++c->n_resets > g->lim.max_stream_resets) return WHY_RESETS;
        break;
    default:
        break;
    }
    return -1;
}

/* A frame header from gRPC: the server is done with a stream once it ends or resets it. */
static void server_frame(struct guard *g, struct guard_conn *c, uint8_t type, uint8_t flags,
                         uint32_t id, uint64_t now) {
    if (!id) return;
    bool over = type == H2_RST_STREAM ||
                ((type == H2_HEADERS || type == H2_DATA) && (flags & H2_END_STREAM));
    struct guard_stream *s = over ? stream_find(c, id) : NULL;
    if (s) stream_end(g, c, s, now);
}

/* Walks the frame headers in buf. Returns a reason to close, or -1. */
static int h2_scan(struct guard *g, struct guard_conn *c, bool from_client, const uint8_t *buf,
                   size_t n, uint64_t now) {
    struct h2_reader *r = from_client ? &c->up : &c->down;
    size_t i = 0;
    while (i < n) {
        if (r->n_preface) {
            size_t at = H2_PREFACE_LEN - r->n_preface;
            size_t k = MIN(n - i, (size_t)r->n_preface);
            if (memcmp(buf + i, H2_PREFACE + at, k) != 0) return WHY_NOT_HTTP2;
            r->n_preface -= (unsigned)k;
            i += k;
        } else if (r->left) {
            size_t k = MIN(n - i, (size_t)r->left);
            r->left -= (uint32_t)k;
            i += k;
        } else {
            size_t k = MIN(n - i, (size_t)(9 - r->n_hdr));
            memcpy(r->hdr + r->n_hdr, buf + i, k);
            r->n_hdr += (unsigned)k;
            i += k;
            if (r->n_hdr < 9) break;
            r->n_hdr = 0;
            const uint8_t *h = r->hdr;
            uint32_t len = (uint32_t)h[0] << 16 | (uint32_t)h[1] << 8 | h[2];
            uint32_t id = ((uint32_t)h[5] << 24 | (uint32_t)h[6] << 16 | (uint32_t)h[7] << 8 |
                           h[8]) & 0x7fffffffu;
            r->left = len;
            if (from_client) {
                int why = client_frame(g, c, h[3], h[4], id, len, now);
                if (why >= 0) return why;
            } else {
                server_frame(g, c, h[3], h[4], id, now);
            }
        }
    }
    return -1;
}

/* ---- relaying ------------------------------------------------------------------------ */

/* Writes what is buffered for one direction. */
static int flush(int fd, uint8_t **buf, size_t *len, size_t *off) {
    while (*len) {
        ssize_t w = send(fd, *buf + *off, *len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) return errno == EAGAIN || errno == EINTR ? 0 : -errno;
        *off += (size_t)w;
        *len -= (size_t)w;
    }
    free(*buf);
    *buf = NULL;
    *off = 0;
    return 0;
}

/* Sends buf[0..n) on fd, keeping what does not fit now. */
static int forward(int fd, const uint8_t *src, size_t n, uint8_t **buf, size_t *len,
                   size_t *off) {
    size_t done = 0;
    while (done < n) {
        ssize_t w = send(fd, src + done, n - done, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN) return -errno;
            break;
        }
        done += (size_t)w;
    }
    if (done == n) return 0;
    *buf = malloc(n - done);
    if (!*buf) return -ENOMEM;
    memcpy(*buf, src + done, n - done);
    *len = n - done;
    *off = 0;
    return 0;
}

static void on_client(struct guard *g, struct guard_conn *c, uint32_t ev, uint64_t now) {
    if (ev & EPOLLOUT) {
        if (flush(c->client.fd, &c->down_buf, &c->down_len, &c->down_off) < 0) {
            conn_close_because(g, c, "writing to the client failed", now);
            return;
        }
        if (!c->down_len) c->down_since_usec = 0;
    }
    if ((ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) && may_read_client(g, c)) {
        ssize_t n = recv(c->client.fd, g->scratch, READ_BYTES, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            if (c->goaway_usec) conn_close(g, c, WHY_IDLE, now); /* it took the hint */
            else conn_close_because(g, c, "the client left", now); /* the client left */
            return;
        }
        if (n > 0) {
            int why = h2_scan(g, c, true, g->scratch, (size_t)n, now);
            if (why >= 0) {
                conn_close(g, c, why, now);
                return;
            }
            if (forward(c->grpc.fd, g->scratch, (size_t)n, &c->up_buf, &c->up_len, &c->up_off) < 0) {
                conn_close_because(g, c, "writing to gRPC failed", now);
                return;
            }
        }
    } else if (ev & (EPOLLHUP | EPOLLERR)) {
        conn_close_because(g, c, "the client hung up", now);
        return;
    }
    conn_update(g, c);
}

static void on_grpc(struct guard *g, struct guard_conn *c, uint32_t ev, uint64_t now) {
    if (ev & EPOLLOUT) {
        if (flush(c->grpc.fd, &c->up_buf, &c->up_len, &c->up_off) < 0) {
            conn_close_because(g, c, "writing to gRPC failed", now);
            return;
        }
    }
    if ((ev & (EPOLLHUP | EPOLLERR)) && c->down_len) {
        /* gRPC is gone while the client still has bytes to take: one last try */
        (void)flush(c->client.fd, &c->down_buf, &c->down_len, &c->down_off);
        conn_close_because(g, c, "gRPC ended the transport", now);
        return;
    }
    if ((ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) && !c->down_len) {
        ssize_t n = recv(c->grpc.fd, g->scratch, READ_BYTES, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            conn_close_because(g, c, "gRPC ended the transport", now); /* gRPC closed the transport (GOAWAY, idle, error) */
            return;
        }
        if (n > 0) {
            h2_scan(g, c, false, g->scratch, (size_t)n, now);
            if (forward(c->client.fd, g->scratch, (size_t)n, &c->down_buf, &c->down_len,
                        &c->down_off) < 0) {
                conn_close_because(g, c, "writing to the client failed", now);
                return;
            }
            if (c->down_len) c->down_since_usec = now;
        }
    }
    conn_update(g, c);
}

/* ---- accepting ----------------------------------------------------------------------- */

static int add_end(struct guard *g, struct guard_end *e, uint32_t events) {
    struct epoll_event ev = {.events = events, .data.ptr = e};
    if (epoll_ctl(g->epfd, EPOLL_CTL_ADD, e->fd, &ev) < 0) return -errno;
    e->events = events;
    return 0;
}

/* Relays the admitted connection fd: a socketpair whose other end goes to gRPC. */
static int conn_new(struct guard *g, int fd, const struct peer *p, uint64_t now) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0) return -errno;
    int sz = SOCKPAIR_BUF_BYTES;
    for (int i = 0; i < 2; i++) {
        (void)setsockopt(sv[i], SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
        (void)setsockopt(sv[i], SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
    }
    struct guard_conn *c = calloc(1, sizeof *c);
    struct guard_user *u = user_get(g, p->uid, true);
    int r = !c || !u ? -ENOMEM : listener_peer_put(g->listener, sv[1], p);
    if (r < 0) goto fail;
    c->peer = *p;
    c->user = u;
    c->client = (struct guard_end){.kind = END_CLIENT, .conn = c, .fd = fd};
    c->grpc = (struct guard_end){.kind = END_GRPC, .conn = c, .fd = sv[0]};
    c->up.n_preface = H2_PREFACE_LEN;
    c->idle_since_usec = now;
    if ((r = add_end(g, &c->client, EPOLLIN)) < 0) goto fail;
    if ((r = add_end(g, &c->grpc, EPOLLIN)) < 0) {
        epoll_ctl(g->epfd, EPOLL_CTL_DEL, fd, NULL);
        goto fail;
    }
    u->n_conns++;
    atomic_fetch_add(&g->n_conns, 1);
    metrics_add(g->metrics, METRIC_CONN_OPEN, 1);
    c->next = g->conns;
    if (g->conns) g->conns->prev = c;
    g->conns = c;
    server_add_fd(g->server, sv[1]); /* takes sv[1] */
    return 0;
fail:
    free(c);
    if (u) user_put(g, u);
    close(sv[0]);
    close(sv[1]);
    return r;
}

/* Accepts one connection; false when there is none to accept now. */
static bool accept_one(struct guard *g, uint64_t now) {
    int fd = accept4(g->listener->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            log_warn("accept: %s; pausing for 100 ms", strerror(errno));
            poll(NULL, 0, 100);
        }
        return errno == EINTR || errno == ECONNABORTED;
    }
    struct peer p = {0};
    struct err_detail d = {0};
    int r = listener_admit(g->listener, fd, &p, &d);
    if (r < 0) {
        /* Say why before closing (libwarm tells a refused user so in a sentence, without
         * retrying): an HTTP/2 GOAWAY, no stream processed, whose debug data names the
         * policy; nothing of the connection is read. Best effort: a full buffer drops it. */
        static const char why[] = "warmd: refused by the access policy";
        uint8_t goaway[9 + 8 + sizeof why - 1] = {0, 0, 8 + sizeof why - 1, H2_GOAWAY};
        memcpy(goaway + 9 + 8, why, sizeof why - 1);
        (void)send(fd, goaway, sizeof goaway, MSG_NOSIGNAL | MSG_DONTWAIT);
        close(fd);
        metrics_add(g->metrics, METRIC_CONN_REFUSED, 1);
        char extra[300];
        snprintf(extra, sizeof extra, ": %s", err_msg(&d, r));
        guard_log(g, p.uid, WHY_POLICY, extra, now);
        return true;
    }
    struct guard_user *u = user_get(g, p.uid, false);
    enum why why = WHY_COUNT;
    uint32_t n_conns = atomic_load(&g->n_conns);
    if (n_conns >= g->lim.max_connections) why = WHY_TOTAL;
    else if (u && u->n_conns >= g->lim.max_connections_per_uid) why = WHY_PER_UID;
    if (why != WHY_COUNT) {
        close(fd);
        metrics_add(g->metrics, whys[why].metric, 1);
        char extra[64];
        snprintf(extra, sizeof extra, " (%u open)",
                 why == WHY_TOTAL ? n_conns : u->n_conns);
        guard_log(g, p.uid, why, extra, now);
        return true;
    }
    r = conn_new(g, fd, &p, now);
    if (r < 0) {
        close(fd);
        log_warn("cannot serve a connection of uid %u: %s", p.uid, err_str(r));
        return true;
    }
    metrics_add(g->metrics, METRIC_CONN_ACCEPTED, 1);
    log_debug("connection: uid %u gid %u pid %u%s", p.uid, p.gid, p.pid, p.admin ? " (admin)" : "");
    return true;
}

/* ---- timers -------------------------------------------------------------------------- */

/* Tells an idle client to go (HTTP/2 GOAWAY, NO_ERROR, naming the last stream it opened),
 * so a call it starts meanwhile is retried on a new connection instead of failing.
 * Only between two of gRPC's frames; false when that is not the case now. */
static bool send_goaway(struct guard_conn *c) {
    if (c->down_len || c->down.n_hdr || c->down.left) return false;
    uint8_t f[17] = {0, 0, 8, H2_GOAWAY, 0, 0, 0, 0, 0};
    f[9] = (uint8_t)(c->last_id >> 24 & 0x7f);
    f[10] = (uint8_t)(c->last_id >> 16);
    f[11] = (uint8_t)(c->last_id >> 8);
    f[12] = (uint8_t)c->last_id;
    return send(c->client.fd, f, sizeof f, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)sizeof f;
}

static void sweep(struct guard *g, uint64_t now) {
    for (struct guard_conn *c = g->conns, *next; c; c = next) {
        next = c->next;
        int why = -1;
        if (c->n_streams == 0 && now - c->idle_since_usec > g->lim.idle_usec) {
            if (!c->goaway_usec && send_goaway(c)) c->goaway_usec = now;
            if (!c->goaway_usec || now - c->goaway_usec > GOAWAY_GRACE_USEC) why = WHY_IDLE;
        }
        if (c->down_len && now - c->down_since_usec > g->lim.slow_reader_usec)
            why = WHY_SLOW_READER;
        for (uint32_t i = 0; why < 0 && i < c->n_streams; i++)
            if (!c->streams[i].client_done && now - c->streams[i].open_usec > g->lim.request_usec)
                why = WHY_REQUEST_TIMEOUT;
        if (why >= 0) conn_close(g, c, why, now);
        else conn_update(g, c); /* a cap freed elsewhere may let it read again */
    }
}

/* Raises the calling thread to ACCEPT_NICE; says so once when it may not. */
static void accept_priority_raise(void) {
    id_t tid = (id_t)gettid();
    errno = 0;
    int cur = getpriority(PRIO_PROCESS, tid);
    if (errno == 0 && cur <= ACCEPT_NICE) return;
    if (setpriority(PRIO_PROCESS, tid, ACCEPT_NICE) < 0)
        log_info("accept loop: cannot take nice %d (%s); peers churning connections can "
                 "fill the listen backlog of a busy machine (LimitNICE=%d allows it)",
                 ACCEPT_NICE, strerror(errno), ACCEPT_NICE);
}

static void *guard_loop(void *arg) {
    struct guard *g = arg;
    accept_priority_raise();
    struct epoll_event evs[64];
    bool stop = false;
    while (!stop) {
        notify_beat_step(&g->beat, time_now_usec());
        int n = epoll_wait(g->epfd, evs, ARRAY_SIZE(evs), (int)(SWEEP_USEC / 1000));
        if (n < 0 && errno != EINTR) {
            log_error("epoll_wait: %s", strerror(errno));
            poll(NULL, 0, 100);
            continue;
        }
        uint64_t now = time_now_usec();
        bool accept_ready = false;
        /* Connections first: ends seen now free their place before new ones are counted. */
        for (int i = 0; i < n; i++) {
            struct guard_end *e = evs[i].data.ptr;
            if (e->kind == END_STOP) {
                uint64_t v;
                if (read(e->fd, &v, sizeof v) < 0 && errno != EAGAIN) poll(NULL, 0, 10);
                if (atomic_load(&g->exit)) stop = true;
                else if (g->accepting) { /* quiesce: the drain still needs the relays */
                    epoll_ctl(g->epfd, EPOLL_CTL_DEL, g->listener->fd, NULL);
                    g->accepting = false;
                }
            }
            else if (e->kind == END_LISTEN) accept_ready = g->accepting;
            else if (e->conn->closed) continue;
            else if (e->kind == END_CLIENT) on_client(g, e->conn, evs[i].events, now);
            else on_grpc(g, e->conn, evs[i].events, now);
        }
        for (int k = 0; accept_ready && !stop && k < ACCEPTS_PER_ROUND && accept_one(g, now); k++) {
        }
        if (now - g->last_sweep_usec >= SWEEP_USEC) {
            sweep(g, now);
            g->last_sweep_usec = now;
        }
        while (g->dead) {
            struct guard_conn *c = g->dead;
            g->dead = c->next;
            conn_free(c);
        }
    }
    return NULL;
}

/* ---- lifecycle ----------------------------------------------------------------------- */

static struct guard_end listen_end = {.kind = END_LISTEN, .fd = -1};
static struct guard_end stop_end = {.kind = END_STOP, .fd = -1};

int guard_start(struct guard *g, struct listener *l, struct server *s,
                const struct guard_limits *lim, struct metrics *m, struct notify *n) {
    *g = (struct guard){.listener = l, .server = s, .metrics = m, .notify = n, .lim = *lim};
    g->scratch = malloc(READ_BYTES);
    g->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (!g->scratch || g->epfd < 0) {
        int e = g->scratch ? -errno : -ENOMEM;
        free(g->scratch);
        if (g->epfd >= 0) close(g->epfd);
        return e;
    }
    listen_end.fd = l->fd;
    stop_end.fd = l->stop_fd;
    int r = add_end(g, &listen_end, EPOLLIN);
    if (r >= 0) r = add_end(g, &stop_end, EPOLLIN);
    if (r < 0) goto fail;
    g->beat.name = "accept loop";
    notify_beat_step(&g->beat, time_now_usec());
    notify_beat_add(n, &g->beat);
    r = -pthread_create(&g->thread, NULL, guard_loop, g);
    if (r < 0) {
        notify_beat_del(n, &g->beat);
        goto fail;
    }
    g->running = true;
    g->accepting = true;
    return 0;
fail:
    close(g->epfd);
    free(g->scratch);
    g->scratch = NULL;
    return r;
}

void guard_quiesce(struct guard *g) {
    if (!g->running) return;
    uint64_t one = 1;
    if (write(g->listener->stop_fd, &one, sizeof one) < 0)
        log_error("eventfd write: %s", strerror(errno));
}

void guard_stop(struct guard *g) {
    if (!g->running) return;
    atomic_store(&g->exit, true);
    uint64_t one = 1;
    if (write(g->listener->stop_fd, &one, sizeof one) < 0)
        log_error("eventfd write: %s", strerror(errno));
    pthread_join(g->thread, NULL);
    notify_beat_del(g->notify, &g->beat);
    uint64_t now = time_now_usec();
    while (g->conns) conn_close(g, g->conns, -1, now);
    while (g->dead) {
        struct guard_conn *c = g->dead;
        g->dead = c->next;
        conn_free(c);
    }
    close(g->epfd);
    free(g->scratch);
    g->scratch = NULL;
    g->running = false;
}
