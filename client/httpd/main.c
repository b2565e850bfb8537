/* warm-httpd — entry point: settings, the listening sockets (from systemd's socket
 * activation, or bound here on loopback addresses), the HTTP server, and a clean stop on
 * SIGTERM. See httpd.h for the design. */
#include "httpd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#define LISTEN_BACKLOG 128

static const char usage[] =
    "Usage: warm-httpd [--config=PATH] [--KEY=VALUE ...]\n"
    "\n"
    "Serves the OpenAI (/v1/...) and Ollama (/api/...) HTTP APIs on loopback for the apps\n"
    "that speak them, and forwards every request to warmd through libwarm on behalf of the\n"
    "local user who opened the connection (found with the kernel's socket diagnostics) or\n"
    "of the user whose `warmctl token create` token it carries. warmd must list warm-httpd's\n"
    "user in trusted_proxy_uids (the package's /etc/warmd/warmd.conf.d/10-warm-httpd.conf\n"
    "does). Socket-activated by warm-httpd.socket, or listening on --listen itself.\n"
    "\n"
    "  --config=PATH              settings file (default " HTTPD_DEFAULT_CONFIG ", optional)\n"
    "  --print-config             print the effective settings and exit\n"
    "  --help, --version\n"
    "\n"
    "Settings (in the file as 'key = value', here as --key=value):\n";

/* ---- logging -------------------------------------------------------------------------------- */

static enum log_level max_level = LOG_LEVEL_INFO;
static bool journal;

static void sink(enum log_level level, const char *msg, void *userdata) {
    (void)userdata;
    static const char *const prefix[] = {"<3>", "<4>", "<6>", "<7>"};
    static const char *const name[] = {"error", "warn", "info", "debug"};
    if (level > max_level || level >= LOG_LEVEL_COUNT) return;
    if (journal) fprintf(stderr, "%s%s\n", prefix[level], msg);
    else fprintf(stderr, "warm-httpd: %s: %s\n", name[level], msg);
}

/* ---- listening sockets ---------------------------------------------------------------------- */

/* "127.0.0.1:11434" or "[::1]:11434" into a loopback socket address. */
static int parse_addr(const char *s, struct sockaddr_storage *ss, socklen_t *len,
                      struct err_detail *err) {
    char host[HTTPD_ADDR_MAX];
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s) return err_set(err, -EINVAL, "listen: '%s' is not ADDRESS:PORT", s);
    size_t hl = (size_t)(colon - s);
    if (s[0] == '[') {
        if (hl < 2 || s[hl - 1] != ']') return err_set(err, -EINVAL, "listen: '%s': bad [IPv6]", s);
        memcpy(host, s + 1, hl - 2);
        host[hl - 2] = '\0';
    } else {
        memcpy(host, s, hl);
        host[hl] = '\0';
    }
    char *end;
    errno = 0;
    unsigned long port = strtoul(colon + 1, &end, 10);
    if (errno || *end || !colon[1] || port > 65535)
        return err_set(err, -EINVAL, "listen: '%s': bad port", s);
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        *len = sizeof *a4;
        if ((ntohl(a4->sin_addr.s_addr) >> 24) != 127) goto not_loopback;
    } else if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        *len = sizeof *a6;
        if (!IN6_IS_ADDR_LOOPBACK(&a6->sin6_addr)) goto not_loopback;
    } else {
        return err_set(err, -EINVAL, "listen: '%s': not an IPv4 or [IPv6] address", s);
    }
    return 0;
not_loopback:
    return err_set(err, -EADDRNOTAVAIL, "listen: %s is not a loopback address; warm-httpd serves "
                   "only this machine (remote peers have no local uid)", s);
}

static int bind_listen(const char *addr, int *ret_fd, struct err_detail *err) {
    struct sockaddr_storage ss;
    socklen_t len = 0;
    int r = parse_addr(addr, &ss, &len, err);
    if (r < 0) return r;
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return err_set(err, -errno, "listen: socket for %s: %s", addr, strerror(errno));
    int one = 1;
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ss.ss_family == AF_INET6) (void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&ss, len) < 0 || listen(fd, LISTEN_BACKLOG) < 0) {
        r = -errno;
        close(fd);
        return err_set(err, r, "listen: cannot listen on %s: %s", addr, strerror(-r));
    }
    *ret_fd = fd;
    return 0;
}

static void describe(int fd, char *buf, size_t size) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0) {
        if (ss.ss_family == AF_INET6) {
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, host, sizeof host);
            port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
            snprintf(buf, size, "[%s]:%u", host, port);
            return;
        }
        inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, host, sizeof host);
        port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    }
    snprintf(buf, size, "%s:%u", host, port);
}

/* ---- main ----------------------------------------------------------------------------------- */

int main(int argc, char **argv) {
    const char *config_path = NULL;
    bool print_config = false, listen_given = false;
    char **args = calloc((size_t)argc + 1, sizeof *args);
    size_t n_args = 0;
    if (!args) return 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(usage, stdout);
            config_print_help(stdout);
            free(args);
            return 0;
        }
        if (strcmp(a, "--version") == 0) {
            printf("warm-httpd %s (libwarm %s, libmicrohttpd %s, jansson %s)\n", HTTPD_VERSION,
                   warm_version(), MHD_get_version(), jansson_version_str());
            free(args);
            return 0;
        }
        if (strcmp(a, "--print-config") == 0) print_config = true;
        else if (strncmp(a, "--config=", 9) == 0) config_path = a + 9;
        else if (strcmp(a, "--config") == 0 && i + 1 < argc) config_path = argv[++i];
        else {
            if (strncmp(a, "--listen=", 9) == 0) listen_given = true;
            args[n_args++] = argv[i];
        }
    }
    struct httpd *h = calloc(1, sizeof *h);
    if (!h) return 1;
    struct err_detail err = {0};
    int r = config_load(&h->cfg, config_path, config_path != NULL, args, n_args, &err);
    free(args);
    if (r < 0) {
        fprintf(stderr, "warm-httpd: %s\n", err_msg(&err, r));
        free(h);
        return 2;
    }
    if (print_config) {
        config_print(&h->cfg, stdout);
        free(h);
        return 0;
    }
    max_level = h->cfg.log_level;
    journal = getenv("JOURNAL_STREAM") != NULL;
    log_set_sink(sink, NULL);

    int fds[HTTPD_MAX_LISTEN];
    size_t n = 0;
    int activated = listen_given ? 0 : sd_listen_fds(1);
    if (activated > HTTPD_MAX_LISTEN) activated = HTTPD_MAX_LISTEN;
    int diag_fd = -1;
    for (int i = 0; i < activated; i++) {
        int fd = SD_LISTEN_FDS_START + i;
        if (sd_is_socket(fd, AF_NETLINK, 0, -1) > 0) {
            diag_fd = fd;       /* ListenNetlink=inet-diag: lookups in the host's namespace */
            continue;
        }
        if (sd_is_socket(fd, AF_UNSPEC, SOCK_STREAM, 1) <= 0) {
            log_msg(LOG_LEVEL_ERROR, "socket-activated fd %d is not a listening TCP socket", fd);
            return 1;
        }
        fds[n++] = fd;
    }
    if (n == 0) {
        for (size_t i = 0; i < h->cfg.n_listen; i++) {
            r = bind_listen(h->cfg.listen[i], &fds[i], &err);
            if (r < 0) {
                log_msg(LOG_LEVEL_ERROR, "%s", err_msg(&err, r));
                return 1;
            }
        }
        n = h->cfg.n_listen;
    }
    if (n == 0) {
        log_msg(LOG_LEVEL_ERROR, "nothing to listen on: set listen, or start warm-httpd.socket");
        return 1;
    }

    /* Signals go to the main thread only, which waits for them below. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    r = peer_diag_init(&h->diag, diag_fd);
    if (r >= 0) r = clients_init(&h->clients, h->cfg.warmd_socket);
    if (r < 0) {
        log_msg(LOG_LEVEL_ERROR, "warmd_socket: %s", strerror(-r));
        return 1;
    }
    r = httpd_start(h, fds, n, &err);
    if (r < 0) {
        log_msg(LOG_LEVEL_ERROR, "%s", err_msg(&err, r));
        return 1;
    }
    char where[HTTPD_MAX_LISTEN * (INET6_ADDRSTRLEN + 10)] = "";
    for (size_t i = 0; i < n; i++) {
        char one[INET6_ADDRSTRLEN + 10];
        describe(fds[i], one, sizeof one);
        snprintf(where + strlen(where), sizeof where - strlen(where), "%s%s", i ? " " : "", one);
    }
    log_msg(LOG_LEVEL_INFO, "listening on %s%s; warmd at %s", where,
            activated > 0 ? " (socket-activated)" : "", h->cfg.warmd_socket);
    sd_notifyf(0, "READY=1\nSTATUS=serving on %s", where);

    for (;;) {
        int sig = 0;
        if (sigwait(&set, &sig) != 0) continue;
        if (sig == SIGHUP) continue;  /* nothing to reload: settings need a restart */
        log_msg(LOG_LEVEL_INFO, "stopping on signal %d", sig);
        break;
    }
    sd_notify(0, "STOPPING=1");
    httpd_stop(h);
    clients_done(&h->clients);
    peer_diag_done(&h->diag);
    free(h);
    return 0;
}
