/* peer — which local user opened a TCP connection to us. TCP carries no credentials, but
 * both ends of a loopback connection are sockets of this machine, and the kernel's socket
 * diagnostics (NETLINK_SOCK_DIAG, what `ss -e` shows) tell the uid that owns each socket.
 * We ask for the one socket whose local address is our peer's address and whose remote
 * address is ours: that is the client's end, and its idiag_uid is the user who created it
 * (as seen from our user namespace, so warm-httpd must not run with PrivateUsers=).
 *
 * The lookup is exact (no dump): one request, one answer. A client in another network
 * namespace (a container reaching us through a port forward) has no socket here with that
 * address pair: -ENOENT, and the request must bring a token instead. So does a client
 * that closed its socket before we accepted (no owner left to report).
 *
 * Under systemd the netlink socket comes from warm-httpd.socket (ListenNetlink=inet-diag),
 * created by PID 1 in the host's network namespace, so the service itself can run with
 * PrivateNetwork=yes and still ask about the host's sockets. That socket is shared by all
 * connection threads: one query at a time, answers matched by sequence number (a reply
 * left over from an earlier query, or an earlier process, is skipped). */
#include "httpd.h"

#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* The kernel answers an exact lookup at once; this only bounds a wedged netlink socket. */
#define LOOKUP_TIMEOUT_USEC 500000

/* Our end and the peer's end as one family's addresses; an IPv4 client of a dual-stack
 * IPv6 socket (::ffff:127.0.0.1) is asked about as the IPv4 socket it is. */
struct tuple {
    int family;
    uint32_t local[4], remote[4];   /* network byte order, IPv4 in [0] */
    uint16_t local_port, remote_port; /* network byte order */
};

static bool v4_mapped(const struct in6_addr *a) {
    static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return memcmp(a->s6_addr, prefix, sizeof prefix) == 0;
}

static int end_of(const struct sockaddr_storage *ss, int *family, uint32_t addr[4],
                  uint16_t *port) {
    memset(addr, 0, 4 * sizeof *addr);
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        *family = AF_INET;
        memcpy(addr, &a->sin_addr, 4);
        *port = a->sin_port;
        return 0;
    }
    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
        *port = a->sin6_port;
        if (v4_mapped(&a->sin6_addr)) {
            *family = AF_INET;
            memcpy(addr, a->sin6_addr.s6_addr + 12, 4);
        } else {
            *family = AF_INET6;
            memcpy(addr, a->sin6_addr.s6_addr, 16);
        }
        return 0;
    }
    return -EAFNOSUPPORT;
}

static int tuple_of(int fd, struct tuple *t) {
    struct sockaddr_storage local, remote;
    socklen_t ll = sizeof local, rl = sizeof remote;
    if (getsockname(fd, (struct sockaddr *)&local, &ll) < 0) return -errno;
    if (getpeername(fd, (struct sockaddr *)&remote, &rl) < 0) return -errno;
    int lf, rf;
    int r = end_of(&local, &lf, t->local, &t->local_port);
    if (r < 0) return r;
    r = end_of(&remote, &rf, t->remote, &t->remote_port);
    if (r < 0) return r;
    if (lf != rf) return -EAFNOSUPPORT;
    t->family = lf;
    return 0;
}

int peer_diag_init(struct peer_diag *d, int fd) {
    d->fd = fd;
    d->seq = 0;
    return -pthread_mutex_init(&d->lock, NULL);
}

void peer_diag_done(struct peer_diag *d) {
    pthread_mutex_destroy(&d->lock);
}

static int query(int nl, uint32_t seq, const struct tuple *t, uint32_t *ret_uid);
static int answer(struct nlmsghdr *first, ssize_t n, const struct tuple *t, uint32_t *ret_uid);

int peer_uid(struct peer_diag *d, int fd, uint32_t *ret_uid) {
    struct tuple t = {0};
    int r = tuple_of(fd, &t);
    if (r < 0) return r;
    if (d->fd >= 0) {
        pthread_mutex_lock(&d->lock);
        r = query(d->fd, ++d->seq, &t, ret_uid);
        pthread_mutex_unlock(&d->lock);
        return r;
    }
    int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (nl < 0) return -errno;
    r = query(nl, 1, &t, ret_uid);
    close(nl);
    return r;
}

/* One exact lookup on netlink socket nl. */
static int query(int nl, uint32_t seq, const struct tuple *tp, uint32_t *ret_uid) {
    const struct tuple t = *tp;
    int r;

    struct {
        struct nlmsghdr nlh;
        struct inet_diag_req_v2 req;
    } msg = {
        .nlh = {.nlmsg_len = sizeof msg, .nlmsg_type = SOCK_DIAG_BY_FAMILY,
                .nlmsg_flags = NLM_F_REQUEST, .nlmsg_seq = seq},
        .req = {.sdiag_family = (uint8_t)t.family, .sdiag_protocol = IPPROTO_TCP,
                .idiag_states = ~0u,
                /* The client's socket: its source is our peer, its destination is us. */
                .id = {.idiag_sport = t.remote_port, .idiag_dport = t.local_port,
                       .idiag_cookie = {INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE}}},
    };
    memcpy(msg.req.id.idiag_src, t.remote, sizeof t.remote);
    memcpy(msg.req.id.idiag_dst, t.local, sizeof t.local);

    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    if (sendto(nl, &msg, sizeof msg, 0, (struct sockaddr *)&kernel, sizeof kernel) < 0)
        return -errno;
    /* One answer: an inet_diag_msg, or an NLMSG_ERROR (-ENOENT: no such socket here). */
    union {
        struct nlmsghdr h;
        char bytes[8192];
    } buf;
    for (;;) {
        struct pollfd p = {.fd = nl, .events = POLLIN};
        r = poll(&p, 1, LOOKUP_TIMEOUT_USEC / 1000);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -errno;
        if (r == 0) return -ETIMEDOUT;
        ssize_t n = recv(nl, &buf, sizeof buf, MSG_DONTWAIT);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n < 0) return -errno;
        if ((size_t)n >= sizeof buf.h && buf.h.nlmsg_seq != seq) continue;  /* stale */
        return answer(&buf.h, n, &t, ret_uid);
    }
}

static int answer(struct nlmsghdr *first, ssize_t n, const struct tuple *tp, uint32_t *ret_uid) {
    const struct tuple t = *tp;
    int len = (int)n;
    for (struct nlmsghdr *h = first; NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
        if (h->nlmsg_type == NLMSG_ERROR) {
            const struct nlmsgerr *e = NLMSG_DATA(h);
            if (h->nlmsg_len < NLMSG_LENGTH(sizeof *e)) return -EPROTO;
            return e->error < 0 ? e->error : -ENOENT;
        }
        if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY) continue;
        if (h->nlmsg_len < NLMSG_LENGTH(sizeof(struct inet_diag_msg))) return -EPROTO;
        const struct inet_diag_msg *m = NLMSG_DATA(h);
        /* The answer must be the socket we asked about, not merely one of that family. */
        if (m->id.idiag_sport != t.remote_port || m->id.idiag_dport != t.local_port ||
            memcmp(m->id.idiag_src, t.remote, t.family == AF_INET ? 4 : 16) != 0)
            return -ENOENT;
        /* A socket no process holds any more (its client sent a request and closed before
         * we accepted: orphaned, or in TIME_WAIT) is reported with uid 0 and inode 0. That
         * uid is nobody's, least of all root's: the request cannot be told apart. */
        if (m->idiag_inode == 0 || m->idiag_state == TCP_TIME_WAIT) return -ENOENT;
        *ret_uid = m->idiag_uid;
        return 0;
    }
    return -EPROTO;
}
