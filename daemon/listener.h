/* listener — the Unix socket, our own accept loop, peer credentials and the access policy.
 *
 * The listening socket comes from systemd (sd_listen_fds, exactly one AF_UNIX stream
 * socket) or is bound here: an absolute path (never the abstract namespace), guarded by
 * an flock on PATH.lock so a second instance refuses instead of stealing a live socket,
 * mode 0660, group = socket_group. No TCP socket ever exists.
 *
 * The accept loop (daemon/guard.c) calls listener_admit, which reads SO_PEERCRED and
 * SO_PEERGROUPS of every connection and applies the policy before a single byte is read
 * from it: refused peers are closed at once (fail closed when the credentials cannot be
 * read). The credentials of admitted connections are remembered by the fd number gRPC
 * sees (listener_peer_put, listener_peer_get). */
#pragma once

#include "base/base.h"
#include "daemon/config.h"

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

/* The caller of a connection, as SO_PEERCRED said at connect time; for a call a trusted
 * proxy makes on behalf of a user, that user (listener_represent), with via_proxy set. */
struct peer {
    uint32_t uid, gid, pid;
    bool admin;
    bool trusted_proxy;         /* the connection's uid is in trusted_proxy_uids (or root) */
    bool via_proxy;             /* represented: proxy_uid made the call for uid */
    uint32_t proxy_uid;
};

/* The access policy, resolved from the config. */
struct policy {
    struct config_idlist allowed_uids, allowed_groups;
    struct config_group admin_group;
    struct config_idlist trusted_proxy_uids;
    uint32_t self_uid;          /* the daemon's euid: always allowed and admin, like root */
};

void listener_policy_from_config(struct policy *p, const struct config *c);
/* Decides a peer from its uid, primary gid and supplementary groups. Returns 0 and sets
 * *ret_admin when allowed, -EACCES with a message naming the uid when refused. Pure. */
int listener_policy_check(const struct policy *p, uint32_t uid, uint32_t gid,
                          const uint32_t *groups, size_t n_groups, bool *ret_admin,
                          struct err_detail *d);

/* The peer a trusted proxy's call represents: uid's primary group and supplementary groups
 * from the user database, then the same policy as a direct connection of uid. Returns 0
 * with *ret filled (via_proxy, proxy_uid = proxy->uid); -EPERM when proxy is not trusted;
 * -EACCES (naming the uid) when uid is refused by the policy. */
int listener_represent(const struct policy *p, const struct peer *proxy, uint32_t uid,
                       struct peer *ret, struct err_detail *d);

struct listener_slot;

struct listener {
    int fd;                      /* listening socket */
    int lock_fd;                 /* flock on PATH.lock; -1 when socket-activated */
    int stop_fd;                 /* eventfd that ends the accept loop */
    bool activated;              /* fd came from systemd */
    bool bound;                  /* we created the socket file (and remove it at close) */
    dev_t dev;
    ino_t ino;                   /* of the socket file we bound */
    char path[CONFIG_SOCKET_PATH_MAX];
    struct policy policy;
    /* Peer credentials by fd number. */
    pthread_mutex_t lock;
    struct listener_slot *slots;
    size_t n_slots;
};

/* Opens the listening socket (activation or bind, see above). *ret is initialized even
 * on failure so listener_close is always safe. */
int listener_open(struct listener *l, const struct config *c, struct err_detail *d);
/* Reads the credentials of the connection on fd and applies the policy: 0 and *ret
 * filled when allowed; < 0 with a message when refused (ret->uid is set when it could be
 * read). The accept loop is guard.c's. */
int listener_admit(struct listener *l, int fd, struct peer *ret, struct err_detail *d);
/* Records the credentials of the connection gRPC will see as fd. */
int listener_peer_put(struct listener *l, int fd, const struct peer *p);
/* Closes the socket; removes the socket file if we bound it and it is still ours. */
void listener_close(struct listener *l);
/* The credentials recorded for the connection on fd. -ENOENT if none. */
int listener_peer_get(struct listener *l, int fd, struct peer *ret);
