/* cmd-cache — the prompt cache: stats, ls and purge through the daemon; check opens the
 * LMDB store itself, read-only, with no daemon needed. */
#include "warmctl.h"

#include "store/store.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEFAULT_CONFIG "/etc/warmd/warmd.conf"
#define DEFAULT_STATE_DIR "/var/lib/warmd"

static const char cache_usage[] =
    "Usage: warmctl cache stats|ls|purge|check [OPTIONS]\n"
    "\n"
    "  stats [--namespace NS]                 entries, bytes, budget, hits, misses\n"
    "  ls [--namespace NS] [--model M] [--limit N]\n"
    "                                          the N (default 100) most recently used\n"
    "                                          entries, newest first, with their model\n"
    "  purge [--namespace NS] [--model M]     remove entries (NS '*' = all; admin)\n"
    "  check [--state-dir DIR | --path DIR] [--config FILE]\n"
    "                                          open the store read-only, offline (no daemon),\n"
    "                                          and verify every record and the file structure\n"
    "\n"
    "The namespace defaults to your own (uid:<uid>); other namespaces need the daemon's\n"
    "admin group. 'check' reads STATE_DIR/cache, where STATE_DIR comes from --state-dir,\n"
    "else state_dir in the config (" DEFAULT_CONFIG "), else " DEFAULT_STATE_DIR ".\n"
    "Options --json and --socket PATH work as everywhere.\n";

enum { OPT_NAMESPACE = 0x100, OPT_MODEL, OPT_LIMIT, OPT_STATE_DIR, OPT_PATH, OPT_CONFIG };

struct cache_args {
    const char *ns, *model, *state_dir, *path, *config;
    uint32_t limit;
};

static int cache_parse(struct ctl *ctl, int argc, char **argv, struct cache_args *a) {
    static const struct option opts[] = {
        {"namespace", required_argument, NULL, OPT_NAMESPACE},
        {"model", required_argument, NULL, OPT_MODEL},
        {"limit", required_argument, NULL, OPT_LIMIT},
        {"state-dir", required_argument, NULL, OPT_STATE_DIR},
        {"path", required_argument, NULL, OPT_PATH},
        {"config", required_argument, NULL, OPT_CONFIG},
        CTL_COMMON_OPTIONS,
        {0}};
    optind = 0;
    int opt, r;
    while ((opt = ctl_getopt(ctl, argc, argv, "", opts)) != -1) {
        switch (opt) {
        case OPT_NAMESPACE: a->ns = optarg; break;
        case OPT_MODEL: a->model = optarg; break;
        case OPT_STATE_DIR: a->state_dir = optarg; break;
        case OPT_PATH: a->path = optarg; break;
        case OPT_CONFIG: a->config = optarg; break;
        case OPT_LIMIT:
            if (ctl_parse_u32(optarg, &a->limit) < 0)
                return ctl_bad_value(ctl, argv, "a count");
            break;
        default:
            if ((r = ctl_common_option(ctl, opt, cache_usage)) >= 0) return r;
        }
    }
    if (optind < argc) return ctl_usage_error(ctl, cache_usage, "unexpected argument '%s'", argv[optind]);
    return -1;
}

static int cache_stats(struct ctl *ctl, const struct cache_args *a) {
    int r;
    struct warm_client *c = ctl_client(ctl, &r);
    if (!c) return r;
    struct warm_error err;
    struct warm_cache_stats s;
    if (warm_cache_stats(c, a->ns, &s, &err) < 0) return ctl_fail(ctl, &err);
    if (ctl->json) {
        struct json j;
        json_begin(&j, stdout);
        json_str(&j, "namespace", a->ns ? a->ns : "");
        json_u64(&j, "entries", s.entries);
        json_u64(&j, "bytes", s.bytes);
        json_u64(&j, "budget_bytes", s.budget_bytes);
        json_u64(&j, "hits", s.hits);
        json_u64(&j, "misses", s.misses);
        json_u64(&j, "rejections", s.rejections);
        json_u64(&j, "evictions", s.evictions);
        json_end(&j);
    } else {
        char x[32], y[32];
        printf("entries:    %" PRIu64 "\n", s.entries);
        printf("bytes:      %s of %s budget\n", ctl_fmt_bytes(x, s.bytes), ctl_fmt_bytes(y, s.budget_bytes));
        printf("hits:       %" PRIu64 ", misses %" PRIu64 "\n", s.hits, s.misses);
        printf("rejections: %" PRIu64 ", evictions %" PRIu64 "\n", s.rejections, s.evictions);
    }
    return CTL_EXIT_OK;
}

static const char *fmt_time(char buf[32], uint64_t usec) {
    time_t t = (time_t)(usec / 1000000u);
    struct tm tm;
    if (!usec || !localtime_r(&t, &tm) || !strftime(buf, 32, "%Y-%m-%d %H:%M:%S", &tm))
        snprintf(buf, 32, "-");
    return buf;
}

static int cache_ls(struct ctl *ctl, const struct cache_args *a) {
    int r;
    struct warm_client *c = ctl_client(ctl, &r);
    if (!c) return r;
    struct warm_error err;
    struct warm_cache_entry *v;
    size_t n;
    if (warm_cache_list(c, a->ns, a->model, a->limit, &v, &n, &err) < 0) return ctl_fail(ctl, &err);
    if (ctl->json) {
        struct json j;
        json_begin(&j, stdout);
        json_array_begin(&j, "entries");
        for (size_t i = 0; i < n; i++) {
            json_object_begin(&j, NULL);
            json_str(&j, "namespace", v[i].namespace_);
            json_str(&j, "fingerprint", v[i].fingerprint);
            json_str(&j, "model", v[i].model);
            json_str(&j, "key", v[i].key);
            json_str(&j, "kind", v[i].kind);
            json_u64(&j, "position", v[i].position);
            json_u64(&j, "n_tokens", v[i].n_tokens);
            json_u64(&j, "bytes", v[i].bytes);
            json_u64(&j, "last_used_usec", v[i].last_used_usec);
            json_object_end(&j);
        }
        json_array_end(&j);
        json_end(&j);
    } else if (!n) {
        printf("no cache entries\n");
    } else {
        printf("%-19s  %-16s  %-5s %8s %7s %10s  %-16s  %s\n", "LAST USED", "MODEL", "KIND",
               "POSITION", "TOKENS", "BYTES", "NAMESPACE", "KEY");
        for (size_t i = 0; i < n; i++) {
            char b[32], t[32], m[sizeof v[i].model];
            /* a model the daemon cannot name: the start of its fingerprint */
            if (*v[i].model) snprintf(m, sizeof m, "%s", v[i].model);
            else if (*v[i].fingerprint) snprintf(m, sizeof m, "?%.12s", v[i].fingerprint);
            else snprintf(m, sizeof m, "-");
            printf("%-19s  %-16s  %-5s %8u %7u %10s  %-16s  %s\n", fmt_time(t, v[i].last_used_usec),
                   m, v[i].kind, v[i].position, v[i].n_tokens, ctl_fmt_bytes(b, v[i].bytes),
                   v[i].namespace_, v[i].key);
        }
    }
    warm_free(v);
    return CTL_EXIT_OK;
}

static int cache_purge(struct ctl *ctl, const struct cache_args *a) {
    int r;
    struct warm_client *c = ctl_client(ctl, &r);
    if (!c) return r;
    struct warm_error err;
    uint64_t n = 0, bytes = 0;
    if (warm_cache_purge(c, a->ns, a->model, &n, &bytes, &err) < 0) return ctl_fail(ctl, &err);
    if (ctl->json) {
        struct json j;
        json_begin(&j, stdout);
        json_u64(&j, "entries", n);
        json_u64(&j, "bytes", bytes);
        json_end(&j);
    } else {
        char b[32];
        printf("removed %" PRIu64 " entries (%s)\n", n, ctl_fmt_bytes(b, bytes));
    }
    return CTL_EXIT_OK;
}

/* ---- check (offline) ----------------------------------------------------------------- */

/* state_dir from the daemon's config file ("key = value" lines, '#' comments); 0 and
 * buf filled when found. */
static int config_state_dir(const char *path, char *buf, size_t size) {
    FILE *f = fopen(path, "r");
    if (!f) return -errno;
    char line[4096];
    int r = -ENOENT;
    while (fgets(line, sizeof line, f)) {
        char *p = line;
        while (isspace((unsigned char)*p)) p++;
        if (strncmp(p, "state_dir", 9) != 0) continue;
        p += 9;
        while (*p == ' ' || *p == '\t') p++;
        if (*p++ != '=') continue;
        while (*p == ' ' || *p == '\t') p++;
        size_t n = strcspn(p, "\r\n#");
        while (n && isspace((unsigned char)p[n - 1])) n--;
        if (!n || n >= size) continue;
        memcpy(buf, p, n);
        buf[n] = '\0';
        r = 0;
    }
    fclose(f);
    return r;
}

struct ns_acc {
    struct json *j;
    bool json;
};

static int ns_print(const char *ns, uint64_t n_entries, uint64_t bytes, void *userdata) {
    struct ns_acc *x = userdata;
    if (x->json) {
        json_object_begin(x->j, NULL);
        json_str(x->j, "namespace", ns);
        json_u64(x->j, "entries", n_entries);
        json_u64(x->j, "bytes", bytes);
        json_object_end(x->j);
    } else {
        char b[32];
        printf("  %-24s %8" PRIu64 " entries %12s\n", ns, n_entries, ctl_fmt_bytes(b, bytes));
    }
    return 0;
}

static int cache_check(struct ctl *ctl, const struct cache_args *a) {
    char state[4096], path[4096];
    if (a->path) {
        snprintf(path, sizeof path, "%s", a->path);
    } else {
        if (a->state_dir) snprintf(state, sizeof state, "%s", a->state_dir);
        else if (config_state_dir(a->config ? a->config : DEFAULT_CONFIG, state, sizeof state) < 0) {
            if (a->config) return ctl_fail_msg(ctl, "no state_dir in %s", a->config);
            snprintf(state, sizeof state, "%s", DEFAULT_STATE_DIR);
        }
        if ((size_t)snprintf(path, sizeof path, "%s/cache", state) >= sizeof path)
            return ctl_fail_msg(ctl, "state directory path too long");
    }
    struct store_options opt = {
        .path = path,
        .budget_bytes = 1ULL << 30, /* unused read-only; the file's own map size wins */
        .n_threads = 1,
        .read_only = true,
    };
    struct store_env *env = NULL;
    struct err_detail d = {0};
    int r = store_env_open(&opt, &env, NULL, &d);
    if (r < 0) {
        struct warm_error err = {.code = r == ERR_STORE_CORRUPT ? WARM_DATA_LOSS : WARM_BAD_REQUEST};
        const char *hint = "";
        if (r == -EACCES || r == -EPERM)
            hint = "; the store belongs to the daemon's user: run as root, or as that user "
                   "('runuser -u warm -- warmctl cache check')";
        else if (r == -ENOENT || r == ERR_NOT_FOUND)
            hint = "; give the daemon's state directory with --state-dir (or the store with --path)";
        snprintf(err.message, sizeof err.message, "cannot open the store in %.380s read-only: %.380s%s",
                 path, err_msg(&d, r), hint);
        ctl_fail(ctl, &err);
        return r == ERR_STORE_CORRUPT ? CTL_EXIT_CHECK : CTL_EXIT_FAILED;
    }
    struct store_stats st = {0};
    struct store_check_report rep = {0};
    int sr = store_env_stats(env, &st);
    int cr = store_env_check(env, &rep);
    struct json j;
    struct ns_acc acc = {.j = &j, .json = ctl->json};
    if (ctl->json) {
        json_begin(&j, stdout);
        json_str(&j, "path", path);
        json_bool(&j, "ok", cr == 0);
        json_u64(&j, "entries", st.n_entries);
        json_u64(&j, "chunks", st.n_chunks);
        json_u64(&j, "tails", st.n_tails);
        json_u64(&j, "bytes", st.bytes);
        json_u64(&j, "file_bytes", st.file_bytes);
        json_u64(&j, "records_checked", rep.n_records);
        json_u64(&j, "checksum_failures", rep.n_checksum_failures);
        json_u64(&j, "bad_records", rep.n_bad_records);
        json_u64(&j, "index_errors", rep.n_index_errors);
        json_u64(&j, "pages_walked", rep.n_pages_walked);
        json_bool(&j, "structure_ok", rep.structure_ok);
        json_bool(&j, "bytes_ok", rep.bytes_ok);
        json_str(&j, "first_problem", rep.first_problem);
        json_array_begin(&j, "namespaces");
    } else {
        char b[32], f[32];
        printf("store %s (read-only)\n", path);
        printf("records:  %" PRIu64 " (%" PRIu64 " chunks, %" PRIu64 " tails), %s accounted, "
               "%s on disk\n", st.n_entries, st.n_chunks, st.n_tails, ctl_fmt_bytes(b, st.bytes),
               ctl_fmt_bytes(f, st.file_bytes));
        printf("namespaces:\n");
    }
    struct store_txn *txn = NULL;
    if (store_txn_begin(env, STORE_TXN_READ, &txn) == 0) {
        store_ns_list(txn, ns_print, &acc);
        store_txn_abort(txn);
    }
    if (ctl->json) {
        json_array_end(&j);
        json_end(&j);
    } else {
        printf("checked:  %" PRIu64 " records, %" PRIu64 " pages walked; %" PRIu64
               " checksum failures, %" PRIu64 " bad records, %" PRIu64 " index errors; "
               "structure %s, byte accounting %s\n",
               rep.n_records, rep.n_pages_walked, rep.n_checksum_failures, rep.n_bad_records,
               rep.n_index_errors, rep.structure_ok ? "ok" : "BAD", rep.bytes_ok ? "ok" : "BAD");
        if (cr == 0) printf("ok\n");
        else printf("PROBLEM: %s\n", *rep.first_problem ? rep.first_problem : err_str(cr));
    }
    store_env_close(env);
    if (sr < 0 && cr == 0) return ctl_fail_msg(ctl, "reading the store's counters: %s", err_str(sr));
    if (cr != 0) {
        if (cr != ERR_STORE_CORRUPT)
            fprintf(stderr, "%s cache check: %s\n", ctl->prog, err_str(cr));
        return CTL_EXIT_CHECK;
    }
    return CTL_EXIT_OK;
}

static const struct {
    const char *name;
    int (*fn)(struct ctl *, const struct cache_args *);
} cache_commands[] = {
    {"stats", cache_stats},
    {"ls", cache_ls},
    {"list", cache_ls},
    {"purge", cache_purge},
    {"check", cache_check},
};

int ctl_cmd_cache(struct ctl *ctl, int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(cache_usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? CTL_EXIT_USAGE : CTL_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof cache_commands / sizeof cache_commands[0]; i++) {
        if (strcmp(argv[1], cache_commands[i].name) != 0) continue;
        static char name[32];
        snprintf(name, sizeof name, "cache %s", argv[1]);
        ctl->command = name;
        struct cache_args a = {0};
        int r = cache_parse(ctl, argc - 1, argv + 1, &a);
        if (r >= 0) return r;
        return cache_commands[i].fn(ctl, &a);
    }
    const char *names[sizeof cache_commands / sizeof cache_commands[0]];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) names[i] = cache_commands[i].name;
    const char *near = ctl_closest(argv[1], names, sizeof names / sizeof names[0]);
    return ctl_usage_error(ctl, cache_usage, "unknown cache command '%s'%s%s%s", argv[1],
                           near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "");
}
