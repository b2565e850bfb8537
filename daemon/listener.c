/* listener — socket, SO_PEERCRED policy, peers by fd (see listener.h). */
#include "daemon/listener.h"

#include "daemon/log.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

/* Connections the kernel queues before accept (capped by net.core.somaxconn): a client
 * churning connections must not fill it while the accept loop refuses them. */
#define LISTEN_BACKLOG 4096

struct listener_slot {
    bool used;
    struct peer peer;
};

/* ---- policy -------------------------------------------------------------------------- */

void listener_policy_from_config(struct policy *p, const struct config *c) {
    *p = (struct policy){
        .allowed_uids = c->allowed_uids,
        .allowed_groups = c->allowed_groups,
        .admin_group = c->admin_group,
        .trusted_proxy_uids = c->trusted_proxy_uids,
        .self_uid = (uint32_t)geteuid(),
    };
}

static bool idlist_has(const struct config_idlist *l, uint32_t id) {
    for (uint32_t i = 0; i < l->n; i++)
        if (l->ids[i] == id) return true;
    return false;
}

static bool in_groups(uint32_t want, uint32_t gid, const uint32_t *groups, size_t n) {
    if (gid == want) return true;
    for (size_t i = 0; i < n; i++)
        if (groups[i] == want) return true;
    return false;
}

int listener_policy_check(const struct policy *p, uint32_t uid, uint32_t gid,
                          const uint32_t *groups, size_t n_groups, bool *ret_admin,
                          struct err_detail *d) {
    bool privileged = uid == 0 || uid == p->self_uid;
    bool allowed = privileged || (p->allowed_uids.n == 0 && p->allowed_groups.n == 0) ||
                   idlist_has(&p->allowed_uids, uid);
    for (uint32_t i = 0; !allowed && i < p->allowed_groups.n; i++)
        allowed = in_groups(p->allowed_groups.ids[i], gid, groups, n_groups);
    if (!allowed)
        return err_set(d, -EACCES, "uid %u (gid %u) is not in allowed_uids or allowed_groups",
                       uid, gid);
    *ret_admin = privileged || (p->admin_group.set &&
                                in_groups(p->admin_group.gid, gid, groups, n_groups));
    return 0;
}

/* ---- socket -------------------------------------------------------------------------- */

static int open_activated(struct listener *l, struct err_detail *d) {
    int n = sd_listen_fds(1);
    if (n < 0) return err_set(d, n, "sd_listen_fds: %s", strerror(-n));
    if (n == 0) return 0;
    if (n != 1) return err_set(d, -EINVAL, "systemd passed %d sockets, expected exactly one", n);
    int fd = SD_LISTEN_FDS_START;
    int r = sd_is_socket_unix(fd, SOCK_STREAM, 1, NULL, 0);
    if (r <= 0)
        return err_set(d, -EINVAL, "the socket systemd passed is not a listening AF_UNIX "
                                   "stream socket");
    /* A pathname socket only: never the abstract namespace (P0-7 d). */
    struct sockaddr_un sa;
    socklen_t len = sizeof sa;
    if (getsockname(fd, (struct sockaddr *)&sa, &len) < 0 ||
        len <= offsetof(struct sockaddr_un, sun_path) || sa.sun_path[0] == 0)
        return err_set(d, -EINVAL, "the socket systemd passed is not a pathname socket");
    snprintf(l->path, sizeof l->path, "%.*s",
             (int)(len - offsetof(struct sockaddr_un, sun_path)), sa.sun_path);
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ||
        fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
        return err_set(d, -errno, "fcntl on the activated socket: %s", strerror(errno));
    /* listen() again raises the backlog of the activated socket (Backlog= of the unit). */
    if (listen(fd, LISTEN_BACKLOG) < 0)
        return err_set(d, -errno, "listen on the activated socket: %s", strerror(errno));
    l->fd = fd;
    l->activated = true;
    return 1;
}

/* True when something accepts connections on path. */
static bool socket_is_live(const char *path) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    bool live = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    close(fd);
    return live;
}

static int open_bound(struct listener *l, const struct config *c, struct err_detail *d) {
    const char *path = c->socket;
    if (path[0] != '/') return err_set(d, -EINVAL, "socket: '%s' is not an absolute path", path);
    char lock[CONFIG_SOCKET_PATH_MAX + 8];
    snprintf(lock, sizeof lock, "%s.lock", path);
    l->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0600);
    if (l->lock_fd < 0) return err_set(d, -errno, "%s: %s", lock, strerror(errno));
    if (flock(l->lock_fd, LOCK_EX | LOCK_NB) < 0) {
        int e = errno;
        if (e == EWOULDBLOCK)
            return err_set(d, -EADDRINUSE, "%s is in use by another warmd (%s is locked)", path,
                           lock);
        return err_set(d, -e, "flock %s: %s", lock, strerror(e));
    }
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode))
            return err_set(d, -EEXIST, "%s exists and is not a socket; refusing to replace it",
                           path);
        if (socket_is_live(path))
            return err_set(d, -EADDRINUSE, "%s is a live socket of another process", path);
        if (unlink(path) < 0) return err_set(d, -errno, "unlink stale %s: %s", path, strerror(errno));
        log_info("removed stale socket %s", path);
    }
    l->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (l->fd < 0) return err_set(d, -errno, "socket: %s", strerror(errno));
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    /* The mode is set at bind time by the umask: 0660 with no window where it is wider. */
    mode_t old = umask(0117);
    int r = bind(l->fd, (struct sockaddr *)&sa, sizeof sa);
    int e = errno;
    umask(old);
    if (r < 0) return err_set(d, -e, "bind %s: %s", path, strerror(e));
    l->bound = true;
    snprintf(l->path, sizeof l->path, "%s", path);
    if (lstat(path, &st) < 0) return err_set(d, -errno, "stat %s: %s", path, strerror(errno));
    l->dev = st.st_dev;
    l->ino = st.st_ino;
    if (c->socket_group.set && chown(path, (uid_t)-1, c->socket_group.gid) < 0)
        return err_set(d, -errno, "chown %s to group %u: %s", path, c->socket_group.gid,
                       strerror(errno));
    if (listen(l->fd, LISTEN_BACKLOG) < 0) return err_set(d, -errno, "listen: %s", strerror(errno));
    return 0;
}

int listener_open(struct listener *l, const struct config *c, struct err_detail *d) {
    memset(l, 0, sizeof *l);
    l->fd = l->lock_fd = l->stop_fd = -1;
    pthread_mutex_init(&l->lock, NULL);
    listener_policy_from_config(&l->policy, c);
    l->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (l->stop_fd < 0) return err_set(d, -errno, "eventfd: %s", strerror(errno));
    int r = open_activated(l, d);
    if (r < 0) return r;
    if (r > 0) return 0;
    return open_bound(l, c, d);
}

/* ---- peers by fd --------------------------------------------------------------------- */

int listener_peer_put(struct listener *l, int fd, const struct peer *p) {
    pthread_mutex_lock(&l->lock);
    if ((size_t)fd >= l->n_slots) {
        size_t n = MAX((size_t)fd + 1, l->n_slots * 2);
        struct listener_slot *s = realloc(l->slots, n * sizeof *s);
        if (!s) {
            pthread_mutex_unlock(&l->lock);
            return -ENOMEM;
        }
        memset(s + l->n_slots, 0, (n - l->n_slots) * sizeof *s);
        l->slots = s;
        l->n_slots = n;
    }
    l->slots[fd] = (struct listener_slot){.used = true, .peer = *p};
    pthread_mutex_unlock(&l->lock);
    return 0;
}

int listener_peer_get(struct listener *l, int fd, struct peer *ret) {
    int r = -ENOENT;
    pthread_mutex_lock(&l->lock);
    if (fd >= 0 && (size_t)fd < l->n_slots && l->slots[fd].used) {
        *ret = l->slots[fd].peer;
        r = 0;
    }
    pthread_mutex_unlock(&l->lock);
    return r;
}

/* ---- accept loop --------------------------------------------------------------------- */

int listener_admit(struct listener *l, int fd, struct peer *ret, struct err_detail *d) {
    struct ucred uc;
    socklen_t len = sizeof uc;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) < 0 || len != sizeof uc)
        return err_set(d, -EACCES, "cannot read SO_PEERCRED (%s); refusing", strerror(errno));
    ret->uid = (uint32_t)uc.uid; /* for the refusal's log line */
    bool admin = false;
    /* Without allowed_groups the groups cannot admit a refused uid: refuse it without
     * reading them (one system call less per connection of a churning peer). */
    if (l->policy.allowed_groups.n == 0) {
        int r = listener_policy_check(&l->policy, (uint32_t)uc.uid, (uint32_t)uc.gid, NULL, 0,
                                      &admin, d);
        if (r < 0) return r;
    }
    uint32_t small[64];
    _cleanup_free_ uint32_t *big = NULL;
    uint32_t *groups = small;
    len = sizeof small;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0) {
        if (errno != ERANGE || len == 0 || len > 65536 * sizeof(uint32_t))
            return err_set(d, -EACCES, "uid %u: cannot read SO_PEERGROUPS (%s); refusing",
                           (unsigned)uc.uid, strerror(errno));
        big = malloc(len);
        if (!big) return err_set(d, -ENOMEM, "out of memory for peer groups");
        groups = big;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0)
            return err_set(d, -EACCES, "uid %u: cannot read SO_PEERGROUPS (%s); refusing",
                           (unsigned)uc.uid, strerror(errno));
    }
    int r = listener_policy_check(&l->policy, (uint32_t)uc.uid, (uint32_t)uc.gid, groups,
                                  len / sizeof(uint32_t), &admin, d);
    if (r < 0) return r;
    uint32_t uid = (uint32_t)uc.uid;
    bool privileged = uid == 0 || uid == l->policy.self_uid;
    *ret = (struct peer){.uid = uid, .gid = (uint32_t)uc.gid, .pid = (uint32_t)uc.pid,
                         .admin = admin,
                         .trusted_proxy = privileged ||
                                          idlist_has(&l->policy.trusted_proxy_uids, uid)};
    return 0;
}

/* Bounds the supplementary groups read for a represented user (NGROUPS_MAX is 65536). */
#define REPRESENT_MAX_GROUPS 1024

int listener_represent(const struct policy *p, const struct peer *proxy, uint32_t uid,
                       struct peer *ret, struct err_detail *d) {
    if (!proxy->trusted_proxy)
        return err_set(d, -EPERM, "uid %u may not act on behalf of other users: it is not "
                                  "in trusted_proxy_uids", proxy->uid);
    /* A uid without a user database entry has no groups: the uid alone decides. */
    uint32_t gid = UINT32_MAX;
    int n = 0;
    _cleanup_free_ gid_t *groups = NULL;
    char buf[4096];
    struct passwd pw, *pwp = NULL;
    if (getpwuid_r((uid_t)uid, &pw, buf, sizeof buf, &pwp) == 0 && pwp) {
        gid = (uint32_t)pw.pw_gid;
        groups = calloc(REPRESENT_MAX_GROUPS, sizeof *groups);
        if (!groups) return err_set(d, -ENOMEM, "out of memory for the groups of uid %u", uid);
        n = REPRESENT_MAX_GROUPS;
        if (getgrouplist(pw.pw_name, pw.pw_gid, groups, &n) < 0) n = REPRESENT_MAX_GROUPS;
    }
    uint32_t g32[REPRESENT_MAX_GROUPS];
    for (int i = 0; i < n; i++) g32[i] = (uint32_t)groups[i];
    bool admin = false;
    int r = listener_policy_check(p, uid, gid, g32, (size_t)n, &admin, d);
    if (r < 0) return r;
    *ret = (struct peer){.uid = uid, .gid = gid, .pid = proxy->pid, .admin = admin,
                         .via_proxy = true, .proxy_uid = proxy->uid};
    return 0;
}

void listener_close(struct listener *l) {
    if (l->bound) {
        struct stat st;
        /* Remove the file only if it is still the socket we bound. */
        if (lstat(l->path, &st) == 0 && st.st_dev == l->dev && st.st_ino == l->ino)
            unlink(l->path);
    }
    if (l->fd >= 0) close(l->fd);
    if (l->lock_fd >= 0) close(l->lock_fd);
    if (l->stop_fd >= 0) close(l->stop_fd);
    free(l->slots);
    pthread_mutex_destroy(&l->lock);
    l->fd = l->lock_fd = l->stop_fd = -1;
    l->slots = NULL;
    l->n_slots = 0;
    l->bound = false;
}
