/* cmd-info — status, metrics, load, unload. */
#include "warmctl.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parses the options every simple command has (only the common ones) and checks the
 * number of positional arguments. Returns -1 to go on, else the exit code. */
static int simple_options(struct ctl *ctl, int argc, char **argv, const char *usage,
                          int n_min, int n_max) {
    static const struct option opts[] = {CTL_COMMON_OPTIONS, {0}};
    optind = 0;
    int opt;
    while ((opt = ctl_getopt(ctl, argc, argv, "", opts)) != -1) {
        int r = ctl_common_option(ctl, opt, usage);
        if (r >= 0) return r;
    }
    int n = argc - optind;
    if (n < n_min) return ctl_usage_error(ctl, usage, "missing argument");
    if (n > n_max) return ctl_usage_error(ctl, usage, "unexpected argument '%s'", argv[optind + n_max]);
    return -1;
}

/* ---- status -------------------------------------------------------------------------- */

static const char status_usage[] =
    "Usage: warmctl status [--json]\n"
    "\n"
    "Shows whether warmd is running, its version and uptime, the effective configuration,\n"
    "the models it holds, and who you are to it (uid, admin, cache namespace).\n";

int ctl_cmd_status(struct ctl *ctl, int argc, char **argv) {
    int r = simple_options(ctl, argc, argv, status_usage, 0, 0);
    if (r >= 0) return r;
    struct warm_client *c = ctl_client(ctl, &r);
    if (!c) return r;
    struct warm_error err;
    struct warm_info in;
    if (warm_info_get(c, &in, &err) < 0) return ctl_fail(ctl, &err);
    if (ctl->json) {
        struct json j;
        json_begin(&j, stdout);
        json_str(&j, "socket", warm_client_socket(c));
        json_str(&j, "version", in.version);
        json_str(&j, "api_version", in.api_version);
        json_u64(&j, "uptime_usec", in.uptime_usec);
        json_object_begin(&j, "peer");
        json_u64(&j, "uid", in.uid);
        json_u64(&j, "gid", in.gid);
        json_u64(&j, "pid", in.pid);
        json_bool(&j, "admin", in.admin);
        json_str(&j, "namespace", in.namespace_);
        json_object_end(&j);
        json_u64(&j, "threads", in.threads);
        json_u64(&j, "ctx_size", in.ctx_size);
        json_u64(&j, "parallel", in.parallel);
        json_str(&j, "cache_type_k", in.cache_type_k);
        json_str(&j, "cache_type_v", in.cache_type_v);
        json_bool(&j, "kv_rotation", in.kv_rotation);
        json_u64(&j, "max_keep_alive_usec", in.max_keep_alive_usec);
        json_u64(&j, "max_loaded_models", in.max_loaded_models);
        json_u64(&j, "memory_budget_bytes", in.memory_budget_bytes);
        json_u64(&j, "cache_max_bytes", in.cache_max_bytes);
        json_u64(&j, "models_available", in.models_available);
        json_u64(&j, "models_loaded", in.models_loaded);
        json_u64(&j, "active_streams", in.active_streams);
        json_array_begin(&j, "features");
        for (char *p = in.features, *tok; (tok = strtok_r(p, " ", &p));) json_str(&j, NULL, tok);
        json_array_end(&j);
        json_array_begin(&j, "devices");
        for (uint32_t i = 0; i < in.n_devices; i++) {
            json_object_begin(&j, NULL);
            json_str(&j, "name", in.devices[i].name);
            json_str(&j, "kind", in.devices[i].kind);
            json_str(&j, "description", in.devices[i].description);
            json_u64(&j, "reserved_bytes", in.devices[i].reserved_bytes);
            json_object_end(&j);
        }
        json_array_end(&j);
        json_end(&j);
        return CTL_EXIT_OK;
    }
    char a[32], b[32], k[32];
    printf("warmd %s (%s) is running on %s, up %s\n", in.version, in.api_version,
           warm_client_socket(c), ctl_fmt_usec(a, in.uptime_usec));
    printf("you:      uid %u, gid %u, %s, cache namespace %s\n", in.uid, in.gid,
           in.admin ? "admin" : "not admin", in.namespace_);
    printf("models:   %u loaded (at most %u), %u available, memory budget %s\n", in.models_loaded,
           in.max_loaded_models, in.models_available, ctl_fmt_bytes(b, in.memory_budget_bytes));
    printf("streams:  %u active\n", in.active_streams);
    printf("engine:   %u threads, context %u tokens, %u parallel sequences, KV %s/%s, "
           "rotation %s\n", in.threads, in.ctx_size, in.parallel, in.cache_type_k,
           in.cache_type_v, in.kv_rotation ? "on" : "off");
    printf("keep-alive: at most %s (longer requests are capped)\n",
           ctl_fmt_usec(a, in.max_keep_alive_usec));
    printf("cache:    budget %s\n", ctl_fmt_bytes(k, in.cache_max_bytes));
    printf("features: %s\n", in.features);
    if (!in.n_devices) printf("devices:  none in use (no model loaded)\n");
    for (uint32_t i = 0; i < in.n_devices; i++)
        printf("%s %s (%s%s%s), %s reserved\n", i ? "         " : "devices: ", in.devices[i].name,
               in.devices[i].kind, *in.devices[i].description ? ": " : "", in.devices[i].description,
               ctl_fmt_bytes(b, in.devices[i].reserved_bytes));
    return CTL_EXIT_OK;
}

/* ---- metrics ------------------------------------------------------------------------- */

static const char metrics_usage[] =
    "Usage: warmctl metrics [--json]\n"
    "\n"
    "Prints the daemon's counters and gauges in the Prometheus text format. With --json:\n"
    "{\"metrics\": {\"<name>{<labels>}\": value, ...}}.\n";

int ctl_cmd_metrics(struct ctl *ctl, int argc, char **argv) {
    int r = simple_options(ctl, argc, argv, metrics_usage, 0, 0);
    if (r >= 0) return r;
    struct warm_client *c = ctl_client(ctl, &r);
    if (!c) return r;
    struct warm_error err;
    char *text;
    if (warm_metrics_get(c, &text, &err) < 0) return ctl_fail(ctl, &err);
    if (!ctl->json) {
        fputs(text, stdout);
        warm_free(text);
        return CTL_EXIT_OK;
    }
    struct json j;
    json_begin(&j, stdout);
    json_object_begin(&j, "metrics");
    /* Sample lines are "<series> <value> [timestamp]"; the series may hold spaces inside
     * quoted label values, so split at the first space after the closing brace. */
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        if (*line == '#' || !*line) continue;
        char *brace = strrchr(line, '}');
        char *sp = strchr(brace ? brace : line, ' ');
        if (!sp) continue;
        *sp = '\0';
        char *end;
        double v = strtod(sp + 1, &end);
        json_double(&j, line, v);
    }
    json_object_end(&j);
    json_end(&j);
    warm_free(text);
    return CTL_EXIT_OK;
}

/* ---- models -------------------------------------------------------------------------- */

/* (models: cmd-models.c) */

static const char load_usage[] =
    "Usage: warmctl load MODEL [--keep-alive DURATION] [--json]\n"
    "\n"
    "Loads MODEL now and holds your keep-alive lease on it for DURATION after your last use\n"
    "of it (e.g. 30s, 10m, 2h; default: the daemon's keep_alive, capped by its\n"
    "max_keep_alive); other users' leases keep it as long as theirs run. Admin only: the\n"
    "daemon's admin_group, root or the daemon's user.\n";

int ctl_cmd_load(struct ctl *ctl, int argc, char **argv) {
    static const struct option opts[] = {
        {"keep-alive", required_argument, NULL, 'k'}, CTL_COMMON_OPTIONS, {0}};
    uint64_t keep_alive = 0;
    optind = 0;
    int opt, r;
    while ((opt = ctl_getopt(ctl, argc, argv, "k:", opts)) != -1) {
        if (opt == 'k') {
            if (ctl_parse_duration(optarg, &keep_alive) < 0)
                return ctl_bad_value(ctl, argv, "a duration (30s, 10m, 2h, -1 or forever)");
        } else if ((r = ctl_common_option(ctl, opt, load_usage)) >= 0) {
            return r;
        }
    }
    if (argc - optind != 1) return ctl_usage_error(ctl, load_usage, "name one model");
    const char *model = argv[optind];
    struct warm_client *c = ctl_client(ctl, &r);
    if (!c) return r;
    struct warm_error err;
    struct warm_model_info m;
    uint64_t load_usec;
    if (warm_model_load(c, model, keep_alive, &m, &load_usec, &err) < 0) return ctl_fail(ctl, &err);
    /* the daemon caps what is asked without an error: say so (forever means the cap) */
    struct warm_info in;
    if (keep_alive && keep_alive != WARM_KEEP_ALIVE_FOREVER && warm_info_get(c, &in, &err) >= 0 &&
        keep_alive > in.max_keep_alive_usec) {
        char a[32], b[32];
        fprintf(stderr, "%s load: keep-alive %s is more than warmd allows (max_keep_alive %s): "
                "capped\n", ctl->prog, ctl_fmt_usec(a, keep_alive),
                ctl_fmt_usec(b, in.max_keep_alive_usec));
    }
    if (ctl->json) {
        struct json j;
        json_begin(&j, stdout);
        ctl_json_model(&j, "model", &m);
        json_u64(&j, "load_usec", load_usec);
        json_end(&j);
    } else {
        char a[32], b[32], k[32];
        if (load_usec)
            printf("loaded %s (%s, %s in memory) in %s, keep-alive %s\n", m.name,
                   *m.architecture ? m.architecture : "?", ctl_fmt_bytes(a, m.memory_bytes),
                   ctl_fmt_usec(b, load_usec), ctl_fmt_usec(k, m.keep_alive_left_usec));
        else
            printf("%s was already loaded; keep-alive now %s\n", m.name,
                   ctl_fmt_usec(k, m.keep_alive_left_usec));
    }
    return CTL_EXIT_OK;
}

static const char unload_usage[] =
    "Usage: warmctl unload MODEL [--json]\n"
    "\n"
    "Unloads MODEL; streams running on it end with UNAVAILABLE. Admin only: the daemon's\n"
    "admin_group, root or the daemon's user.\n";

int ctl_cmd_unload(struct ctl *ctl, int argc, char **argv) {
    int r = simple_options(ctl, argc, argv, unload_usage, 1, 1);
    if (r >= 0) return r;
    const char *model = argv[optind];
    struct warm_client *c = ctl_client(ctl, &r);
    if (!c) return r;
    struct warm_error err;
    int was = warm_model_unload(c, model, &err);
    if (was < 0) return ctl_fail(ctl, &err);
    if (ctl->json) {
        struct json j;
        json_begin(&j, stdout);
        json_str(&j, "model", model);
        json_bool(&j, "was_loaded", was == 1);
        json_end(&j);
    } else {
        printf(was ? "unloaded %s\n" : "%s was not loaded\n", model);
    }
    return CTL_EXIT_OK;
}
