/* warmctl token — bearer tokens for apps that reach warmd through warm-httpd from where it
 * cannot tell who they are (a container in another network namespace). */
#include "warmctl.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char token_usage[] =
    "Usage: warmctl token create [--print] [--json]\n"
    "       warmctl token revoke [--json]\n"
    "\n"
    "create  makes a bearer token for you and writes it to $XDG_CONFIG_HOME/warmd/token\n"
    "        (~/.config/warmd/token), mode 0600; --print writes it to stdout instead. An\n"
    "        app sends it as \"Authorization: Bearer TOKEN\" to warm-httpd, which serves the\n"
    "        request as you. You hold at most 8; a new one retires the oldest.\n"
    "revoke  revokes all of your tokens.\n";

/* $XDG_CONFIG_HOME/warmd (or ~/.config/warmd), created 0700 where missing. */
static int config_dir(char *buf, size_t n) {
    const char *xdg = getenv("XDG_CONFIG_HOME");
    const char *home = getenv("HOME");
    int len;
    if (xdg && xdg[0] == '/') len = snprintf(buf, n, "%s", xdg);
    else if (home && home[0] == '/') len = snprintf(buf, n, "%s/.config", home);
    else return -ENOENT;
    if (len < 0 || (size_t)len >= n - 8) return -ENAMETOOLONG;
    if (mkdir(buf, 0700) < 0 && errno != EEXIST) return -errno;
    strcat(buf, "/warmd");
    if (mkdir(buf, 0700) < 0 && errno != EEXIST) return -errno;
    return 0;
}

/* Writes text + newline to dir/token (its path into path[0..n)) through a temporary file
 * (0600) and a rename; -ENAMETOOLONG where a path does not fit, never a cut one. */
static int write_token(const char *dir, const char *text, char *path, size_t n) {
    char tmp[PATH_MAX];
    int w = snprintf(path, n, "%s/token", dir);
    if (w < 0 || (size_t)w >= n) return -ENAMETOOLONG;
    w = snprintf(tmp, sizeof tmp, "%s/.token.%ld", dir, (long)getpid());
    if (w < 0 || (size_t)w >= sizeof tmp) return -ENAMETOOLONG;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return -errno;
    size_t len = strlen(text);
    int e = 0;
    if (write(fd, text, len) != (ssize_t)len || write(fd, "\n", 1) != 1 || fsync(fd) < 0)
        e = errno ? -errno : -EIO;
    if (close(fd) < 0 && !e) e = -errno;
    if (!e && rename(tmp, path) < 0) e = -errno;
    if (e) unlink(tmp);
    return e;
}

int ctl_cmd_token(struct ctl *ctl, int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(token_usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? CTL_EXIT_USAGE : CTL_EXIT_OK;
    }
    bool create = strcmp(argv[1], "create") == 0;
    if (!create && strcmp(argv[1], "revoke") != 0)
        return ctl_usage_error(ctl, token_usage, "unknown token command '%s'", argv[1]);
    ctl->command = create ? "token create" : "token revoke";
    enum { OPT_PRINT = 1 };
    static const struct option opts[] = {{"print", no_argument, NULL, OPT_PRINT},
                                         CTL_COMMON_OPTIONS, {0}};
    bool print = false;
    optind = 0;
    int opt;
    argc--, argv++;
    while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (opt == OPT_PRINT && create) {
            print = true;
            continue;
        }
        int r = ctl_common_option(ctl, opt == OPT_PRINT ? '?' : opt, token_usage);
        if (r >= 0) return r;
    }
    if (optind < argc)
        return ctl_usage_error(ctl, token_usage, "unexpected argument '%s'", argv[optind]);
    int r;
    struct warm_client *c = ctl_client(ctl, &r);
    if (!c) return r;
    struct warm_error err;
    struct json j;
    if (!create) {
        uint32_t n = 0;
        if (warm_tokens_revoke(c, &n, &err) < 0) return ctl_fail(ctl, &err);
        if (ctl->json) {
            json_begin(&j, stdout);
            json_u64(&j, "revoked", n);
            json_end(&j);
        } else {
            printf("revoked %u token%s\n", n, n == 1 ? "" : "s");
        }
        return CTL_EXIT_OK;
    }
    char dir[PATH_MAX], path[PATH_MAX];
    int e = print ? 0 : config_dir(dir, sizeof dir);
    if (e < 0)
        return ctl_fail_msg(ctl, "cannot make the config directory (%s); set HOME or "
                                 "XDG_CONFIG_HOME, or use --print", strerror(-e));
    char *token;
    if (warm_token_create(c, &token, &err) < 0) return ctl_fail(ctl, &err);
    if (print) {
        if (ctl->json) {
            json_begin(&j, stdout);
            json_str(&j, "token", token);
            json_end(&j);
        } else {
            printf("%s\n", token);
        }
        warm_free(token);
        return CTL_EXIT_OK;
    }
    e = write_token(dir, token, path, sizeof path);
    warm_free(token);
    if (e < 0) return ctl_fail_msg(ctl, "writing %s/token: %s", dir, strerror(-e));
    if (ctl->json) {
        json_begin(&j, stdout);
        json_str(&j, "path", path);
        json_end(&j);
    } else {
        printf("token written to %s (mode 0600); send it as \"Authorization: Bearer $(cat %s)\"\n",
               path, path);
    }
    return CTL_EXIT_OK;
}
