/* cmd-models — models (the models directory, without loading anything) and show MODEL. */
#include "warmctl.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ctl_json_model(struct json *j, const char *key, const struct warm_model_info *m) {
    json_object_begin(j, key);
    json_str(j, "name", m->name);
    json_bool(j, "available", m->available);
    if (!m->available) json_str(j, "unavailable_reason", m->unavailable_reason);
    json_u64(j, "size_bytes", m->size_bytes);
    json_u64(j, "modified_usec", m->modified_usec);
    json_bool(j, "loaded", m->loaded);
    json_str(j, "fingerprint", m->fingerprint);
    json_str(j, "architecture", m->architecture);
    json_str(j, "quantization", m->quantization);
    json_u64(j, "n_params", m->n_params);
    json_u64(j, "trained_context", m->trained_context);
    json_u64(j, "memory_bytes", m->memory_bytes);
    json_u64(j, "keep_alive_left_usec", m->keep_alive_left_usec);
    json_object_end(j);
}

/* 1234567 -> "1.2M", as model cards count parameters. */
static const char *fmt_count(char buf[24], uint64_t n) {
    static const char units[] = " KMBT";
    double v = (double)n;
    int u = 0;
    while (v >= 1000 && u < 4) v /= 1000, u++;
    if (!n) snprintf(buf, 24, "-");
    else if (!u) snprintf(buf, 24, "%" PRIu64, n);
    else snprintf(buf, 24, v < 10 ? "%.1f%c" : "%.0f%c", v, units[u]);
    return buf;
}

/* The options of models and show (only the common ones) and the positional count. */
static int options(struct ctl *ctl, int argc, char **argv, const char *usage, int n_args) {
    static const struct option opts[] = {CTL_COMMON_OPTIONS, {0}};
    optind = 0;
    int opt;
    while ((opt = ctl_getopt(ctl, argc, argv, "", opts)) != -1) {
        int r = ctl_common_option(ctl, opt, usage);
        if (r >= 0) return r;
    }
    if (argc - optind < n_args) return ctl_usage_error(ctl, usage, "name one model");
    if (argc - optind > n_args)
        return ctl_usage_error(ctl, usage, "unexpected argument '%s'", argv[optind + n_args]);
    return -1;
}

static const char models_usage[] =
    "Usage: warmctl models [--json]\n"
    "\n"
    "Lists the models of the daemon's models directory (*.gguf; the name is the file stem)\n"
    "without loading them: size, architecture, parameters, the context it was trained\n"
    "for, the weight types (share of the bytes), and whether it is loaded (memory,\n"
    "remaining keep-alive). Files the daemon skips are listed after, with the reason.\n";

int ctl_cmd_models(struct ctl *ctl, int argc, char **argv) {
    int r = options(ctl, argc, argv, models_usage, 0);
    if (r >= 0) return r;
    struct warm_client *c = ctl_client(ctl, &r);
    if (!c) return r;
    struct warm_error err;
    struct warm_model_info *v;
    size_t n;
    if (warm_models_list(c, &v, &n, &err) < 0) return ctl_fail(ctl, &err);
    size_t n_skipped = 0;
    for (size_t i = 0; i < n; i++) n_skipped += !v[i].available;
    if (ctl->json) {
        struct json j;
        json_begin(&j, stdout);
        json_array_begin(&j, "models");
        for (size_t i = 0; i < n; i++) ctl_json_model(&j, NULL, &v[i]);
        json_array_end(&j);
        json_end(&j);
    } else if (n == n_skipped) {
        printf("no models: put *.gguf files into the daemon's models_dir (see 'warmd --help')\n");
    } else {
        printf("%-28s %9s  %-8s %6s %7s  %-12s %s\n", "NAME", "SIZE", "ARCH", "PARAMS", "CTX",
               "LOADED", "WEIGHTS");
        for (size_t i = 0; i < n; i++) {
            if (!v[i].available) continue;
            char a[32], p[24], ctx[16], loaded[80] = "no";
            if (v[i].loaded) {
                char b[32], k[32];
                snprintf(loaded, sizeof loaded, "%s, %s", ctl_fmt_bytes(b, v[i].memory_bytes),
                         ctl_fmt_usec(k, v[i].keep_alive_left_usec));
            }
            snprintf(ctx, sizeof ctx, "%" PRIu32, v[i].trained_context);
            printf("%-28s %9s  %-8s %6s %7s  %-12s %s\n", v[i].name,
                   ctl_fmt_bytes(a, v[i].size_bytes),
                   *v[i].architecture ? v[i].architecture : "-", fmt_count(p, v[i].n_params),
                   v[i].trained_context ? ctx : "-", loaded,
                   *v[i].quantization ? v[i].quantization : "-");
        }
    }
    if (!ctl->json && n_skipped) {
        printf("%sskipped (not served):\n", n == n_skipped ? "" : "\n");
        for (size_t i = 0; i < n; i++)
            if (!v[i].available) printf("  %s: %s\n", v[i].name, v[i].unavailable_reason);
    }
    warm_free(v);
    return CTL_EXIT_OK;
}

static const char show_usage[] =
    "Usage: warmctl show MODEL [--json]\n"
    "\n"
    "Shows MODEL from its file, without loading it: architecture, shape, weight types, the\n"
    "chat template family warmd renders for it, the cache it gets from this daemon\n"
    "(context, K/V types and rotation), and every metadata key of the file.\n";

int ctl_cmd_show(struct ctl *ctl, int argc, char **argv) {
    int r = options(ctl, argc, argv, show_usage, 1);
    if (r >= 0) return r;
    const char *model = argv[optind];
    struct warm_client *c = ctl_client(ctl, &r);
    if (!c) return r;
    struct warm_error err;
    struct warm_model_details *d;
    if (warm_model_show(c, model, &d, &err) < 0) return ctl_fail(ctl, &err);
    const struct warm_model_info *m = &d->info;
    if (ctl->json) {
        struct json j;
        json_begin(&j, stdout);
        ctl_json_model(&j, "model", m);
        json_str(&j, "chat_template", d->chat_template);
        json_object_begin(&j, "shape");
        json_u64(&j, "n_layer", d->n_layer);
        json_u64(&j, "n_embd", d->n_embd);
        json_u64(&j, "n_head", d->n_head);
        json_u64(&j, "n_head_kv", d->n_head_kv);
        json_u64(&j, "head_dim_k", d->head_dim_k);
        json_u64(&j, "head_dim_v", d->head_dim_v);
        json_u64(&j, "n_vocab", d->n_vocab);
        json_object_end(&j);
        json_object_begin(&j, "cache");
        json_u64(&j, "ctx_size", d->ctx_size);
        json_u64(&j, "parallel", d->parallel);
        json_str(&j, "type_k", d->cache_type_k);
        json_str(&j, "type_v", d->cache_type_v);
        json_bool(&j, "rotate_k", d->rotate_k);
        json_bool(&j, "rotate_v", d->rotate_v);
        json_u64(&j, "chunk_tokens", d->cache_chunk_tokens);
        json_object_end(&j);
        json_object_begin(&j, "metadata");
        for (size_t i = 0; i < d->n_metadata; i++)
            json_str(&j, d->metadata[i].key, d->metadata[i].value);
        json_object_end(&j);
        json_end(&j);
        warm_free(d);
        return CTL_EXIT_OK;
    }
    char a[32], p[24];
    printf("model:         %s (%s)\n", m->name, ctl_fmt_bytes(a, m->size_bytes));
    if (!m->available) {
        printf("not served:    %s\n", m->unavailable_reason);
        warm_free(d);
        return CTL_EXIT_OK;
    }
    printf("architecture:  %s, %s parameters, %" PRIu32 " layers, %" PRIu32 " wide, %" PRIu32
           " heads (%" PRIu32 " KV heads of %" PRIu32 "), vocabulary %" PRIu32 "\n",
           m->architecture, fmt_count(p, m->n_params), d->n_layer, d->n_embd, d->n_head,
           d->n_head_kv, d->head_dim_k, d->n_vocab);
    printf("weights:       %s\n", m->quantization);
    printf("trained for:   %" PRIu32 " tokens of context\n", m->trained_context);
    printf("chat template: %s%s\n", d->chat_template,
           strcmp(d->chat_template, "none") == 0 ? " (use 'warmctl run', or 'warmctl chat --plain')"
                                                 : "");
    printf("cache:         %" PRIu32 " tokens x %" PRIu32 " sequences, K %s%s, V %s%s, "
           "chunks of %" PRIu32 " tokens\n", d->ctx_size, d->parallel, d->cache_type_k,
           d->rotate_k ? " (rotated)" : "", d->cache_type_v, d->rotate_v ? " (rotated)" : "",
           d->cache_chunk_tokens);
    if (m->loaded) {
        char b[32], k[32];
        printf("loaded:        %s in memory, keep-alive %s, fingerprint %s\n",
               ctl_fmt_bytes(b, m->memory_bytes), ctl_fmt_usec(k, m->keep_alive_left_usec),
               m->fingerprint);
    } else {
        printf("loaded:        no\n");
    }
    printf("metadata:\n");
    for (size_t i = 0; i < d->n_metadata; i++) {
        const char *val = d->metadata[i].value;
        /* a template spans lines: its first line here, all of it with --json */
        int line = (int)strcspn(val, "\n");
        printf("  %-44s %.*s%s\n", d->metadata[i].key, line, val, val[line] ? " ..." : "");
    }
    warm_free(d);
    return CTL_EXIT_OK;
}
