/* config — warm-httpd's settings: one table (type, default, help), read from
 * /etc/warmd/warm-httpd.conf (`key = value`, '#' comments; unknown keys are errors with
 * file:line), then from --key=value arguments, like warmd's own. */
#include "httpd.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum key_type { KEY_STRING, KEY_ADDRS, KEY_ORIGINS, KEY_SIZE, KEY_DURATION, KEY_U32, KEY_LOG_LEVEL };

struct key {
    const char *name;
    enum key_type type;
    size_t offset, size;            /* of the field in struct httpd_config */
    const char *def;
    uint64_t lo, hi;                /* bounds of numbers */
    const char *help;
};

#define OFF(f) offsetof(struct httpd_config, f), sizeof(((struct httpd_config *)0)->f)
#define DUR_S 1000000ULL

static const struct key keys[] = {
    {"listen", KEY_ADDRS, OFF(listen), "127.0.0.1:11434 [::1]:11434", 0, 0,
     "addresses to listen on when not socket-activated (loopback only: the Host check "
     "serves no other name)"},
    {"warmd_socket", KEY_STRING, OFF(warmd_socket), WARM_DEFAULT_SOCKET, 0, 0,
     "warmd's gRPC socket"},
    {"allowed_origins", KEY_ORIGINS, OFF(allowed_origins), "", 0, 0,
     "web origins (scheme://host:port) whose pages may call the API; requests from any "
     "other page are refused; '*' allows every page"},
    {"max_body", KEY_SIZE, OFF(max_body_bytes), "8M", 1024, 1ULL << 30,
     "largest request body (larger: 413)"},
    {"max_connections", KEY_U32, OFF(max_connections), "128", 1, 65536,
     "open connections per listening address, all users together (more: 503)"},
    {"max_connections_per_uid", KEY_U32, OFF(max_connections_per_uid), "32", 1, 65536,
     "open connections of one local user; more are refused at accept (429)"},
    {"max_connections_unidentified", KEY_U32, OFF(max_connections_unidentified), "16", 1,
     65536, "open connections of all the peers whose user cannot be told (token users in "
     "containers) together; more are refused at accept (429)"},
    {"connection_timeout", KEY_DURATION, OFF(connection_timeout_usec), "60s", DUR_S,
     3600 * DUR_S, "an idle connection, or one whose client stops reading, is closed after"},
    {"request_timeout", KEY_DURATION, OFF(request_timeout_usec), "60s", DUR_S, 3600 * DUR_S,
     "a request's headers and body must arrive within this from its first byte (slow "
     "clients: 408, closed)"},
    {"default_model", KEY_STRING, OFF(default_model), "", 0, 0,
     "model for requests that name none; empty = warmd's default_model"},
    {"keep_alive", KEY_DURATION, OFF(keep_alive_usec), "5m", 1, 365 * 24 * 3600 * DUR_S,
     "how long a model stays loaded for a user after a request that names no keep_alive "
     "(Ollama's OLLAMA_KEEP_ALIVE; warmd's max_keep_alive caps it); a request's own "
     "keep_alive holds for that request only"},
    {"log_level", KEY_LOG_LEVEL, OFF(log_level), "info", 0, 0, "error, warn, info or debug"},
};

static const char *const level_names[LOG_LEVEL_COUNT] = {
    [LOG_LEVEL_ERROR] = "error", [LOG_LEVEL_WARN] = "warn",
    [LOG_LEVEL_INFO] = "info", [LOG_LEVEL_DEBUG] = "debug",
};

struct unit {
    const char *suffix;
    uint64_t mult;
};
static const struct unit size_units[] = {{"", 1}, {"K", 1ULL << 10}, {"KiB", 1ULL << 10}, {"M", 1ULL << 20},
                  {"MiB", 1ULL << 20}, {"G", 1ULL << 30}, {"GiB", 1ULL << 30}},
  dur_units[] = {{"", DUR_S}, {"us", 1}, {"ms", 1000}, {"s", DUR_S}, {"m", 60 * DUR_S},
                 {"h", 3600 * DUR_S}};

static int parse_scaled(const char *s, const struct unit *u, size_t n_units, uint64_t *ret) {
    char *end;
    if (*s < '0' || *s > '9') return -EINVAL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno) return -EINVAL;
    for (size_t i = 0; i < n_units; i++) {
        if (strcmp(end, u[i].suffix) != 0) continue;
        uint64_t r;
        if (!u64_mul(v, u[i].mult, &r)) return -ERANGE;
        *ret = r;
        return 0;
    }
    return -EINVAL;
}

static int set_list(char *dst, size_t item_size, size_t max, size_t *ret_n, const char *value,
                    const struct key *k, const char *source, struct err_detail *err) {
    size_t n = 0;
    const char *p = value;
    while (*p) {
        size_t len = strcspn(p, " ,\t");
        if (len) {
            if (n == max)
                return err_set(err, -E2BIG, "%s: %s: at most %zu entries", source, k->name, max);
            if (len >= item_size)
                return err_set(err, -ENAMETOOLONG, "%s: %s: '%.*s' is too long", source,
                               k->name, (int)len, p);
            memcpy(dst + n * item_size, p, len);
            dst[n * item_size + len] = '\0';
            n++;
        }
        p += len;
        p += strspn(p, " ,\t");
    }
    *ret_n = n;
    return 0;
}

int config_set(struct httpd_config *c, const char *name, const char *value, const char *source,
               struct err_detail *err) {
    const struct key *k = NULL;
    for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
        if (strcmp(keys[i].name, name) == 0) k = &keys[i];
    if (!k) return err_set(err, -ENOENT, "%s: unknown setting '%s' (see warm-httpd --help)", source, name);
    char *field = (char *)c + k->offset;
    uint64_t v = 0;
    int r = 0;
    switch (k->type) {
    case KEY_STRING:
        if (strlen(value) >= k->size)
            return err_set(err, -ENAMETOOLONG, "%s: %s: longer than %zu bytes", source, name,
                           k->size - 1);
        strcpy(field, value);
        return 0;
    case KEY_ADDRS:
        return set_list(field, HTTPD_ADDR_MAX, HTTPD_MAX_LISTEN, &c->n_listen, value, k, source, err);
    case KEY_ORIGINS:
        return set_list(field, HTTPD_ORIGIN_MAX, HTTPD_MAX_ORIGINS, &c->n_allowed_origins, value,
                        k, source, err);
    case KEY_LOG_LEVEL:
        for (int i = 0; i < LOG_LEVEL_COUNT; i++)
            if (strcasecmp(value, level_names[i]) == 0) {
                *(enum log_level *)field = (enum log_level)i;
                return 0;
            }
        return err_set(err, -EINVAL, "%s: log_level: '%s' is not error, warn, info or debug",
                       source, value);
    case KEY_SIZE:
        r = parse_scaled(value, size_units, ARRAY_SIZE(size_units), &v);
        break;
    case KEY_DURATION:
        r = parse_scaled(value, dur_units, ARRAY_SIZE(dur_units), &v);
        break;
    case KEY_U32:
        r = parse_scaled(value, size_units, 1, &v);
        break;
    }
    if (r < 0)
        return err_set(err, -EINVAL, "%s: %s: '%s' is not a %s", source, name, value,
                       k->type == KEY_DURATION ? "duration (30s, 5m, 250ms)"
                       : k->type == KEY_SIZE   ? "size (8M, 512K, bytes)"
                                               : "number");
    if (v < k->lo || v > k->hi)
        return err_set(err, -ERANGE, "%s: %s: %s is out of range [%" PRIu64 ", %" PRIu64 "]",
                       source, name, value, k->lo, k->hi);
    if (k->type == KEY_U32) *(uint32_t *)field = (uint32_t)v;
    else *(uint64_t *)field = v;
    return 0;
}

static void defaults(struct httpd_config *c) {
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
        int r = config_set(c, keys[i].name, keys[i].def, "default", NULL);
        assert(r == 0);
        (void)r;
    }
}

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

static int load_file(struct httpd_config *c, const char *path, bool required,
                     struct err_detail *err) {
    FILE *f = fopen(path, "re");
    if (!f) {
        if (errno == ENOENT && !required) return 0;
        return err_set(err, -errno, "cannot open %s: %s", path, strerror(errno));
    }
    char line[4096], source[512];
    int r = 0;
    for (unsigned n = 1; fgets(line, sizeof line, f); n++) {
        snprintf(source, sizeof source, "%s:%u", path, n);
        /* A line the buffer cut must not have its rest read as a line of its own. */
        if (!strchr(line, '\n') && !feof(f)) {
            r = err_set(err, -E2BIG, "%s: line longer than %zu bytes", source, sizeof line - 2);
            break;
        }
        char *s = trim(line);
        if (!*s || *s == '#') continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            r = err_set(err, -EINVAL, "%s: expected 'key = value'", source);
            break;
        }
        *eq = '\0';
        r = config_set(c, trim(s), trim(eq + 1), source, err);
        if (r < 0) break;
    }
    fclose(f);
    return r;
}

int config_load(struct httpd_config *c, const char *path, bool path_required, char **args,
                size_t n_args, struct err_detail *err) {
    defaults(c);
    int r = load_file(c, path ? path : HTTPD_DEFAULT_CONFIG, path_required, err);
    if (r < 0) return r;
    for (size_t i = 0; i < n_args; i++) {
        const char *a = args[i];
        const char *eq = strchr(a, '=');
        if (strncmp(a, "--", 2) != 0 || !eq)
            return err_set(err, -EINVAL, "argument '%s': expected --key=value", a);
        char key[64];
        size_t len = (size_t)(eq - a - 2);
        if (len >= sizeof key) return err_set(err, -EINVAL, "argument '%s': unknown setting", a);
        memcpy(key, a + 2, len);
        key[len] = '\0';
        for (char *p = key; *p; p++)
            if (*p == '-') *p = '_';
        char source[96];
        snprintf(source, sizeof source, "argument --%s", key);
        r = config_set(c, key, eq + 1, source, err);
        if (r < 0) return r;
    }
    return 0;
}

void config_print_help(FILE *f) {
    for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
        fprintf(f, "  --%-24s %s\n  %-26s (default: %s)\n", keys[i].name, keys[i].help, "",
                *keys[i].def ? keys[i].def : "empty");
}

static void print_list(FILE *f, const char *items, size_t item_size, size_t n) {
    for (size_t i = 0; i < n; i++) fprintf(f, "%s%s", i ? " " : "", items + i * item_size);
}

void config_print(const struct httpd_config *c, FILE *f) {
    for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
        const struct key *k = &keys[i];
        const char *field = (const char *)c + k->offset;
        fprintf(f, "%s = ", k->name);
        switch (k->type) {
        case KEY_STRING: fputs(field, f); break;
        case KEY_ADDRS: print_list(f, field, HTTPD_ADDR_MAX, c->n_listen); break;
        case KEY_ORIGINS: print_list(f, field, HTTPD_ORIGIN_MAX, c->n_allowed_origins); break;
        case KEY_LOG_LEVEL: fputs(level_names[*(const enum log_level *)field], f); break;
        case KEY_SIZE: fprintf(f, "%" PRIu64, *(const uint64_t *)field); break;
        case KEY_DURATION: fprintf(f, "%" PRIu64 "ms", *(const uint64_t *)field / 1000); break;
        case KEY_U32: fprintf(f, "%" PRIu32, *(const uint32_t *)field); break;
        }
        fputc('\n', f);
    }
}
