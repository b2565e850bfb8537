/* gate — where connections come in. warm-httpd accepts them itself and hands libmicrohttpd
 * only the ones it admits (MHD_add_connection), so every connection is counted against its
 * user before a byte of it is read:
 *
 *   - the peer's uid is asked of the kernel's socket diagnostics at accept (peer.c);
 *   - an identified user holds at most max_connections_per_uid connections, and all the
 *     peers that cannot be identified (another network namespace: token users) share
 *     max_connections_unidentified, so neither can fill what the others need;
 *   - a listening address holds at most max_connections in all.
 *
 * A connection over a cap is answered at once (429, or 503 for the total) and closed; the
 * refusal is logged at most once per LOG_INTERVAL_USEC per user and reason, with the count
 * of the lines left out, and counted in /metrics. The accept queue is drained in batches
 * of ACCEPT_BATCH per wakeup, so refused connections leave it as fast as they come.
 *
 * The same thread keeps the request deadline: a request's headers and body must arrive
 * within request_timeout from its first byte (libmicrohttpd's own timeout is an idle one,
 * which a client sending a byte a second resets forever). For a new connection the clock
 * starts at accept; between two requests of a kept-alive connection it starts when the
 * kernel's count of received bytes (TCP_INFO tcpi_bytes_received) moves, read every
 * TICK_USEC. A request past its deadline is answered 408 (while its headers were still
 * coming) and its socket shut down, which ends it on libmicrohttpd's side.
 *
 * Lifetimes: a conn_info is made here at accept and listed; libmicrohttpd's STARTED
 * notification finds it by fd and takes it as the socket context; its CLOSED notification
 * (which comes before libmicrohttpd closes the fd) unlists and frees it. The deadline check
 * touches a socket only while its conn_info is listed and started, under the lock, so it
 * never shuts down an fd that was closed and reused. */
#include "httpd.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define ACCEPT_BATCH 64
#define TICK_USEC 100000ull
#define LOG_INTERVAL_USEC 10000000ull
/* Admitted, but libmicrohttpd never started it (it closes the fd when it cannot serve a
 * connection): after this long the place it holds is given back. */
#define UNSTARTED_USEC 30000000ull
#define NO_UID UINT32_MAX /* the key of unidentified peers in the log limiter */

enum refusal { REFUSE_PER_UID, REFUSE_UNIDENTIFIED, REFUSE_TOTAL, REFUSE_TIMEOUT };

/* Each refusal's counter, status, log text, and for the caps at accept the setting, its
 * field and whose connections it counts (the answer's sentence). */
static const struct {
    enum httpd_metric metric;
    unsigned status;
    const char *text;
    const char *key;
    size_t cap_offset;
    const char *whose;
} refusals[] = {
    [REFUSE_PER_UID] = {HM_REFUSED_PER_UID, 429, "max_connections_per_uid reached",
                        "max_connections_per_uid",
                        offsetof(struct httpd_config, max_connections_per_uid),
                        "this user has too many"},
    [REFUSE_UNIDENTIFIED] = {HM_REFUSED_UNIDENTIFIED, 429, "max_connections_unidentified reached",
                             "max_connections_unidentified",
                             offsetof(struct httpd_config, max_connections_unidentified),
                             "unidentified peers (token users) have too many"},
    [REFUSE_TOTAL] = {HM_REFUSED_TOTAL, 503, "max_connections reached", "max_connections",
                      offsetof(struct httpd_config, max_connections), "too many"},
    [REFUSE_TIMEOUT] = {HM_REQUEST_TIMEOUTS, 408,
                        "request not received whole within request_timeout"},
};

/* ---- the rate-limited log -------------------------------------------------------------- */

static void log_refusal(struct httpd *h, uint32_t uid, enum refusal why, const char *detail,
                        uint64_t now) {
    struct gate_log_slot *s = NULL, *oldest = &h->gate.log[0];
    for (size_t i = 0; i < ARRAY_SIZE(h->gate.log); i++) {
        struct gate_log_slot *x = &h->gate.log[i];
        if (x->used && x->uid == uid && x->why == (unsigned)why) {
            s = x;
            break;
        }
        if (!x->used || x->last_usec < oldest->last_usec) oldest = x;
    }
    if (s && now - s->last_usec < LOG_INTERVAL_USEC) {
        s->left_out++;
        return;
    }
    if (!s) {
        /* The slot least recently logged gives way; its count of left-out lines is lost
         * (it is in /metrics), never a line of the new key. */
        s = oldest;
        *s = (struct gate_log_slot){.used = true, .uid = uid, .why = why};
    }
    char who[32];
    if (uid == NO_UID)
        snprintf(who, sizeof who, "unidentified peer");
    else
        snprintf(who, sizeof who, "uid %u", uid);
    if (s->left_out)
        log_msg(LOG_LEVEL_WARN, "%s: %s%s (and %llu more like it in the last %llu s)", who,
                refusals[why].text, detail, (unsigned long long)s->left_out,
                (unsigned long long)((now - s->last_usec) / 1000000));
    else
        log_msg(LOG_LEVEL_WARN, "%s: %s%s", who, refusals[why].text, detail);
    s->last_usec = now;
    s->left_out = 0;
}

/* ---- answering without libmicrohttpd ----------------------------------------------------- */

/* A whole HTTP/1.1 reply with Connection: close, sent best effort on a socket whose request
 * was not read: the client gets a status and a sentence instead of a bare reset. The body
 * is in OpenAI's error shape, whose "error" member Ollama clients read as well. */
static void send_refusal(int fd, unsigned status, const char *msg) {
    static const struct {
        unsigned status;
        const char *reason, *type;
    } st[] = {{408, "Request Timeout", "timeout_error"},
              {429, "Too Many Requests", "rate_limit_error"},
              {503, "Service Unavailable", "service_unavailable"}};
    size_t k = 0;
    while (k + 1 < ARRAY_SIZE(st) && st[k].status != status) k++;
    char body[512], reply[768];
    int nb = snprintf(body, sizeof body,
                      "{\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"param\":null,"
                      "\"code\":null}}\n",
                      msg, st[k].type);
    if (nb < 0 || (size_t)nb >= sizeof body) return;
    int n = snprintf(reply, sizeof reply,
                     "HTTP/1.1 %u %s\r\nContent-Type: application/json\r\nContent-Length: %d"
                     "\r\nConnection: close\r\n%s\r\n%s",
                     status, st[k].reason, nb, status == 503 ? "Retry-After: 1\r\n" : "", body);
    if (n > 0 && (size_t)n < sizeof reply)
        (void)send(fd, reply, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* ---- counting ---------------------------------------------------------------------------- */

static struct uid_count *uid_slot(struct httpd *h, uint32_t uid, bool create) {
    struct gate *g = &h->gate;
    for (size_t i = 0; i < g->n_uids; i++)
        if (g->uids[i].uid == uid) return &g->uids[i];
    if (!create) return NULL;
    if (g->n_uids == g->cap_uids) {
        size_t cap = g->cap_uids ? 2 * g->cap_uids : 16;
        struct uid_count *n = realloc(g->uids, cap * sizeof *n);
        if (!n) return NULL;
        g->uids = n;
        g->cap_uids = cap;
    }
    g->uids[g->n_uids] = (struct uid_count){.uid = uid};
    return &g->uids[g->n_uids++];
}

/* Counts ci in; the refusal that applies instead, or -1 when admitted (lock held). */
static int admit_locked(struct httpd *h, struct conn_info *ci, uint32_t *ret_open) {
    struct gate *g = &h->gate;
    const struct httpd_config *c = &h->cfg;
    if (g->open[ci->listener] >= c->max_connections) {
        *ret_open = g->open[ci->listener];
        return REFUSE_TOTAL;
    }
    if (!ci->identified) {
        *ret_open = g->open_unidentified;
        if (g->open_unidentified >= c->max_connections_unidentified) return REFUSE_UNIDENTIFIED;
        g->open_unidentified++;
    } else {
        struct uid_count *u = uid_slot(h, ci->uid, true);
        if (!u) return REFUSE_TOTAL; /* no memory to count it: as if full */
        *ret_open = u->n;
        if (u->n >= c->max_connections_per_uid) return REFUSE_PER_UID; /* (u->n >= 1) */
        u->n++;
    }
    g->open[ci->listener]++;
    ci->next = g->conns;
    if (g->conns) g->conns->prev = ci;
    g->conns = ci;
    return -1;
}

static void release_locked(struct httpd *h, struct conn_info *ci) {
    struct gate *g = &h->gate;
    if (ci->prev)
        ci->prev->next = ci->next;
    else
        g->conns = ci->next;
    if (ci->next) ci->next->prev = ci->prev;
    g->open[ci->listener]--;
    if (!ci->identified) {
        g->open_unidentified--;
        return;
    }
    struct uid_count *u = uid_slot(h, ci->uid, false);
    if (u && --u->n == 0) *u = g->uids[--g->n_uids];
}

/* ---- accepting --------------------------------------------------------------------------- */

/* Accepts one connection from listener k; false when there is none to accept now. */
static bool accept_one(struct httpd *h, size_t k, uint64_t now) {
    struct gate *g = &h->gate;
    struct sockaddr_storage addr;
    socklen_t addr_len = sizeof addr;
    int fd = accept4(g->fds[k], (struct sockaddr *)&addr, &addr_len, SOCK_CLOEXEC);
    if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            log_msg(LOG_LEVEL_WARN, "accept: %s; pausing for 100 ms", strerror(errno));
            poll(NULL, 0, 100);
        }
        return errno == EINTR || errno == ECONNABORTED;
    }
    struct conn_info *ci = calloc(1, sizeof *ci);
    if (!ci) {
        send_refusal(fd, 503, "warm-httpd is out of memory");
        close(fd);
        return true;
    }
    *ci = (struct conn_info){.fd = fd,
                             .listener = k,
                             .accepted_usec = now,
                             .phase = CONN_HEADERS,
                             .phase_usec = now,
                             .serial = ++g->serial};
    struct sockaddr_storage local;
    socklen_t len = sizeof local;
    if (getsockname(fd, (struct sockaddr *)&local, &len) == 0)
        ci->local_port =
            ntohs(local.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&local)->sin6_port
                                              : ((struct sockaddr_in *)&local)->sin_port);
    /* Streamed tokens are small writes: send each at once (warm-httpd.socket sets it too). */
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int r = peer_uid(&h->diag, fd, &ci->uid);
    ci->identified = r == 0;
    if (r < 0 && r != -ENOENT) log_msg(LOG_LEVEL_WARN, "peer uid lookup failed: %s", strerror(-r));

    uint32_t open = 0;
    pthread_mutex_lock(&g->lock);
    int why = admit_locked(h, ci, &open);
    pthread_mutex_unlock(&g->lock);
    if (why >= 0) {
        char msg[256], detail[64];
        uint32_t cap = *(const uint32_t *)((const char *)&h->cfg + refusals[why].cap_offset);
        snprintf(msg, sizeof msg,
                 "%s connections open to warm-httpd: %u (%s); close some and retry",
                 refusals[why].whose, cap, refusals[why].key);
        send_refusal(fd, refusals[why].status, msg);
        close(fd);
        atomic_fetch_add(&g->metrics[refusals[why].metric], 1);
        snprintf(detail, sizeof detail, " (%u open)", open);
        log_refusal(h, ci->identified ? ci->uid : NO_UID, why, detail, now);
        free(ci);
        return true;
    }
    atomic_fetch_add(&g->metrics[HM_ACCEPTED], 1);
    uint64_t serial = ci->serial;
    if (MHD_add_connection(h->mhd[k], fd, (struct sockaddr *)&addr, addr_len) != MHD_YES) {
        /* libmicrohttpd closed the fd. Its place is given back unless it was started
         * (then its CLOSED notification does that). */
        int e = errno;
        pthread_mutex_lock(&g->lock);
        for (struct conn_info *x = g->conns; x; x = x->next) {
            if (x->serial != serial) continue;
            if (!x->started) {
                release_locked(h, x);
                free(x);
            }
            break;
        }
        pthread_mutex_unlock(&g->lock);
        log_msg(LOG_LEVEL_WARN, "libmicrohttpd could not take a connection: %s", strerror(e));
    }
    return true;
}

/* ---- deadlines --------------------------------------------------------------------------- */

static bool bytes_received(int fd, uint64_t *ret) {
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0) return false;
    if (len < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof ti.tcpi_bytes_received)
        return false;
    *ret = ti.tcpi_bytes_received;
    return true;
}

static void tick(struct httpd *h, uint64_t now) {
    struct gate *g = &h->gate;
    uint64_t limit = h->cfg.request_timeout_usec;
    uint32_t expired[64]; /* the uids (NO_UID: unidentified) to log, after the lock */
    size_t n_expired = 0;
    pthread_mutex_lock(&g->lock);
    for (struct conn_info *ci = g->conns, *next; ci; ci = next) {
        next = ci->next;
        if (!ci->started) {
            if (now - ci->accepted_usec > UNSTARTED_USEC) {
                release_locked(h, ci);
                free(ci);
            }
            continue;
        }
        if (ci->expired) continue;
        if (ci->phase == CONN_WAITING) {
            uint64_t n;
            if (bytes_received(ci->fd, &n) && n != ci->rx_bytes) {
                ci->phase = CONN_HEADERS; /* the next request's first bytes */
                ci->phase_usec = now;
            }
            continue;
        }
        if (ci->phase == CONN_ANSWERING || now - ci->phase_usec <= limit) continue;
        if (ci->phase == CONN_HEADERS)
            send_refusal(ci->fd, 408,
                         "the request did not arrive whole within "
                         "request_timeout; send it at once");
        (void)shutdown(ci->fd, SHUT_RDWR);
        ci->expired = true;
        atomic_fetch_add(&g->metrics[HM_REQUEST_TIMEOUTS], 1);
        if (n_expired < ARRAY_SIZE(expired))
            expired[n_expired++] = ci->identified ? ci->uid : NO_UID;
    }
    pthread_mutex_unlock(&g->lock);
    char detail[64];
    snprintf(detail, sizeof detail, " (%llu ms); closed", (unsigned long long)(limit / 1000));
    for (size_t i = 0; i < n_expired; i++) log_refusal(h, expired[i], REFUSE_TIMEOUT, detail, now);
}

static void *gate_loop(void *arg) {
    struct httpd *h = arg;
    struct gate *g = &h->gate;
    struct pollfd p[HTTPD_MAX_LISTEN + 1];
    for (size_t k = 0; k < g->n_fds; k++) p[k] = (struct pollfd){.fd = g->fds[k], .events = POLLIN};
    p[g->n_fds] = (struct pollfd){.fd = g->stop_fd, .events = POLLIN};
    uint64_t last_tick = time_now_usec();
    for (;;) {
        int n = poll(p, g->n_fds + 1, (int)(TICK_USEC / 1000));
        if (n < 0 && errno != EINTR) {
            log_msg(LOG_LEVEL_ERROR, "poll: %s", strerror(errno));
            poll(NULL, 0, 100);
        }
        if (p[g->n_fds].revents) break;
        uint64_t now = time_now_usec();
        for (size_t k = 0; n > 0 && k < g->n_fds; k++) {
            if (!p[k].revents) continue;
            for (int i = 0; i < ACCEPT_BATCH && accept_one(h, k, now); i++) {
            }
        }
        if (now - last_tick >= TICK_USEC) {
            tick(h, now);
            last_tick = now;
        }
    }
    return NULL;
}

/* ---- the connections' side ---------------------------------------------------------------- */

struct conn_info *gate_conn_started(struct httpd *h, int fd) {
    struct gate *g = &h->gate;
    struct conn_info *found = NULL;
    pthread_mutex_lock(&g->lock);
    /* The newest unstarted one with this fd (an older one would be a connection that
     * libmicrohttpd dropped, whose fd number came round again). */
    for (struct conn_info *ci = g->conns; ci && !found; ci = ci->next)
        if (ci->fd == fd && !ci->started) found = ci;
    if (found) found->started = true;
    pthread_mutex_unlock(&g->lock);
    return found;
}

void gate_conn_closed(struct httpd *h, struct conn_info *ci) {
    pthread_mutex_lock(&h->gate.lock);
    release_locked(h, ci);
    pthread_mutex_unlock(&h->gate.lock);
    free(ci);
}

void gate_conn_phase(struct httpd *h, struct conn_info *ci, enum conn_phase phase) {
    pthread_mutex_lock(&h->gate.lock);
    if (phase == CONN_WAITING && !bytes_received(ci->fd, &ci->rx_bytes))
        phase = CONN_HEADERS; /* no byte count to watch: the clock runs from here */
    if (phase != CONN_BODY) ci->phase_usec = time_now_usec();
    ci->phase = phase;
    pthread_mutex_unlock(&h->gate.lock);
}

void gate_metrics(struct httpd *h, struct gate_stats *ret) {
    struct gate *g = &h->gate;
    *ret = (struct gate_stats){0};
    for (size_t i = 0; i < HM_COUNT; i++) ret->counters[i] = atomic_load(&g->metrics[i]);
    pthread_mutex_lock(&g->lock);
    for (size_t k = 0; k < g->n_fds; k++) ret->open += g->open[k];
    ret->open_unidentified = g->open_unidentified;
    ret->users = (uint32_t)g->n_uids;
    pthread_mutex_unlock(&g->lock);
}

/* ---- lifecycle --------------------------------------------------------------------------- */

int gate_start(struct httpd *h, const int *fds, size_t n, struct err_detail *err) {
    struct gate *g = &h->gate;
    pthread_mutex_init(&g->lock, NULL);
    g->n_fds = n;
    for (size_t k = 0; k < n; k++) {
        g->fds[k] = fds[k];
        /* Drained until EAGAIN: a blocking accept would stop the loop on an empty queue. */
        int fl = fcntl(fds[k], F_GETFL);
        if (fl < 0 || fcntl(fds[k], F_SETFL, fl | O_NONBLOCK) < 0)
            return err_set(err, -errno, "listening socket %d: %s", fds[k], strerror(errno));
    }
    g->stop_fd = eventfd(0, EFD_CLOEXEC);
    if (g->stop_fd < 0) return err_set(err, -errno, "eventfd: %s", strerror(errno));
    int r = -pthread_create(&g->thread, NULL, gate_loop, h);
    if (r < 0) {
        close(g->stop_fd);
        g->stop_fd = -1;
        return err_set(err, r, "starting the accept thread: %s", strerror(-r));
    }
    g->running = true;
    return 0;
}

void gate_stop(struct httpd *h) {
    struct gate *g = &h->gate;
    if (!g->running) return;
    uint64_t one = 1;
    if (write(g->stop_fd, &one, sizeof one) < 0)
        log_msg(LOG_LEVEL_WARN, "eventfd: %s", strerror(errno));
    pthread_join(g->thread, NULL);
    close(g->stop_fd);
    g->stop_fd = -1;
    g->running = false;
}

void gate_done(struct httpd *h) {
    struct gate *g = &h->gate;
    /* libmicrohttpd has stopped: every started connection was closed and freed; what is
     * left was never started. */
    while (g->conns) {
        struct conn_info *ci = g->conns;
        g->conns = ci->next;
        free(ci);
    }
    free(g->uids);
    g->uids = NULL;
    g->n_uids = g->cap_uids = 0;
}
