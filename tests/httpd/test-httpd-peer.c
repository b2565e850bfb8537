/* peer.c against the real kernel: loopback TCP connections made here, their client's uid
 * looked up through NETLINK_SOCK_DIAG as warm-httpd does for every connection it accepts
 * (a socket of our own, and a shared one as warm-httpd.socket hands in). As root, clients
 * also run as another uid (a forked child that drops to it), and a client that closes its
 * socket before the server accepts must not be taken for root: the kernel reports such a
 * socket (orphaned, or in TIME_WAIT) with uid 0. */
#include "test.h"
#include "client/httpd/httpd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <grp.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define OTHER_UID 65534 /* nobody */

/* A listening loopback socket of family (AF_INET, AF_INET6; v6only false: dual stack). */
static int listener(int family, bool v6only, struct sockaddr_storage *addr, socklen_t *len) {
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    memset(addr, 0, sizeof *addr);
    if (family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)addr;
        a->sin_family = AF_INET;
        a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        *len = sizeof *a;
    } else {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)addr;
        int v = v6only;
        (void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v, sizeof v);
        a->sin6_family = AF_INET6;
        a->sin6_addr = v6only ? in6addr_loopback : in6addr_any;
        *len = sizeof *a;
    }
    if (bind(fd, (struct sockaddr *)addr, *len) < 0 || listen(fd, 8) < 0 ||
        getsockname(fd, (struct sockaddr *)addr, len) < 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    return fd;
}

/* A client connected to addr (an IPv4 client of a dual-stack listener: to 127.0.0.1). */
static int client(const struct sockaddr_storage *addr, socklen_t len, bool as_v4) {
    struct sockaddr_in v4 = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    const struct sockaddr *to = (const struct sockaddr *)addr;
    if (as_v4) {
        v4.sin_port = ((const struct sockaddr_in6 *)addr)->sin6_port;
        to = (const struct sockaddr *)&v4;
        len = sizeof v4;
    }
    int fd = socket(to->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    if (connect(fd, to, len) < 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    return fd;
}

/* One connection on a fresh listener; the uid peer_uid() finds for the accepted end. */
static int lookup_one(struct peer_diag *d, int family, bool v6only, bool as_v4, uint32_t *uid) {
    struct sockaddr_storage addr;
    socklen_t len;
    int l = listener(family, v6only, &addr, &len);
    if (l < 0) return l;
    int c = client(&addr, len, as_v4);
    if (c < 0) {
        close(l);
        return c;
    }
    int s = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    int r = s < 0 ? -errno : peer_uid(d, s, uid);
    if (s >= 0) close(s);
    close(c);
    close(l);
    return r;
}

static bool have_ipv6_loopback(void) {
    struct sockaddr_storage addr;
    socklen_t len;
    int l = listener(AF_INET6, true, &addr, &len);
    if (l < 0) return false;
    close(l);
    return true;
}

TEST(own_uid_ipv4) {
    struct peer_diag d;
    ASSERT_OK(peer_diag_init(&d, -1));
    uint32_t uid = UINT32_MAX;
    int r = lookup_one(&d, AF_INET, false, false, &uid);
    peer_diag_done(&d);
    ASSERT_OK(r);
    ASSERT_EQ(uid, getuid());
}

TEST(own_uid_ipv6_and_v4_mapped) {
    if (!have_ipv6_loopback()) SKIP("no IPv6 loopback here");
    struct peer_diag d;
    ASSERT_OK(peer_diag_init(&d, -1));
    uint32_t a = UINT32_MAX, b = UINT32_MAX;
    int ra = lookup_one(&d, AF_INET6, true, false, &a);
    /* A dual-stack listener sees an IPv4 client as ::ffff:127.0.0.1: asked about as IPv4. */
    int rb = lookup_one(&d, AF_INET6, false, true, &b);
    peer_diag_done(&d);
    ASSERT_OK(ra);
    ASSERT_EQ(a, getuid());
    ASSERT_OK(rb);
    ASSERT_EQ(b, getuid());
}

/* The shared socket warm-httpd.socket hands in, used for many lookups in turn; a reply
 * left unread on it (another sequence number) is skipped, not taken for the answer. */
TEST(shared_socket_skips_stale_replies) {
    int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    ASSERT_TRUE(nl >= 0);
    struct peer_diag d;
    ASSERT_OK(peer_diag_init(&d, nl));
    /* A stale answer: a request with a sequence number peer.c never uses next. */
    struct {
        struct nlmsghdr nlh;
        struct inet_diag_req_v2 req;
    } stale = {
        .nlh = {.nlmsg_len = sizeof stale, .nlmsg_type = SOCK_DIAG_BY_FAMILY,
                .nlmsg_flags = NLM_F_REQUEST, .nlmsg_seq = 0x7fffffff},
        .req = {.sdiag_family = AF_INET, .sdiag_protocol = IPPROTO_TCP, .idiag_states = ~0u,
                .id = {.idiag_cookie = {INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE}}},
    };
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    ASSERT_TRUE(sendto(nl, &stale, sizeof stale, 0, (struct sockaddr *)&kernel, sizeof kernel) ==
                (ssize_t)sizeof stale);
    int bad = 0;
    for (int i = 0; i < 20; i++) {
        uint32_t uid = UINT32_MAX;
        int r = lookup_one(&d, AF_INET, false, false, &uid);
        if (r < 0 || uid != getuid()) bad++;
    }
    peer_diag_done(&d);
    close(nl);
    ASSERT_EQ(bad, 0);
}

/* A socket that is not a TCP connection's accepted end is refused, not looked up. */
TEST(not_tcp) {
    struct peer_diag d;
    ASSERT_OK(peer_diag_init(&d, -1));
    int sv[2];
    ASSERT_TRUE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    uint32_t uid = UINT32_MAX;
    int r = peer_uid(&d, sv[0], &uid);
    close(sv[0]);
    close(sv[1]);
    peer_diag_done(&d);
    ASSERT_TRUE(r < 0);
    ASSERT_EQ(uid, UINT32_MAX);
}

/* Forks a client that becomes OTHER_UID, connects to port, and (close_first) closes its
 * socket before the parent accepts, or else waits until the parent has looked it up. */
static int other_uid_lookup(bool close_first, int *ret_r, uint32_t *ret_uid) {
    struct sockaddr_storage addr;
    socklen_t len;
    int l = listener(AF_INET, false, &addr, &len);
    if (l < 0) return l;
    int go[2];
    if (pipe(go) < 0) return -errno;
    pid_t pid = fork();
    if (pid < 0) return -errno;
    if (pid == 0) {
        close(go[1]);
        if (setgroups(0, NULL) < 0 || setresgid(OTHER_UID, OTHER_UID, OTHER_UID) < 0 ||
            setresuid(OTHER_UID, OTHER_UID, OTHER_UID) < 0)
            _exit(2);
        int c = client(&addr, len, false);
        if (c < 0) _exit(3);
        (void)write(c, "GET / HTTP/1.1\r\n\r\n", 18);
        if (close_first) _exit(0);      /* the request is sent, the socket orphaned */
        char b;
        (void)read(go[0], &b, 1);       /* until the parent looked */
        _exit(0);
    }
    close(go[0]);
    int status = 0;
    if (close_first) waitpid(pid, &status, 0);
    int s = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    struct peer_diag d;
    peer_diag_init(&d, -1);
    *ret_uid = UINT32_MAX;
    *ret_r = s < 0 ? -errno : peer_uid(&d, s, ret_uid);
    peer_diag_done(&d);
    close(go[1]);
    if (!close_first) waitpid(pid, &status, 0);
    if (s >= 0) close(s);
    close(l);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -ECHILD;
}

TEST(other_uid) {
    if (geteuid() != 0) SKIP("needs root to run a client as uid %d", OTHER_UID);
    int r;
    uint32_t uid;
    ASSERT_OK(other_uid_lookup(false, &r, &uid));
    ASSERT_OK(r);
    ASSERT_EQ(uid, OTHER_UID);
}

/* The client sent its request and closed before the accept: its socket, orphaned, has no
 * owner any more (the kernel reports uid 0). Taking that for root would serve an
 * unprivileged user's request as root; it must be "cannot tell" (a token is needed). */
TEST(closed_client_is_not_root) {
    if (geteuid() != 0) SKIP("needs root to run a client as uid %d", OTHER_UID);
    int r;
    uint32_t uid;
    ASSERT_OK(other_uid_lookup(true, &r, &uid));
    ASSERT_ERR(r, -ENOENT);
    ASSERT_EQ(uid, UINT32_MAX);
}

TEST_MAIN(T(own_uid_ipv4), T(own_uid_ipv6_and_v4_mapped), T(shared_socket_skips_stale_replies),
          T(not_tcp), T(other_uid), T(closed_client_is_not_root))
