/* cmd-embed — embed: embeddings of texts with an embedding model. */
#include "warmctl.h"

#include "json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char embed_usage[] =
    "Usage: warmctl embed MODEL TEXT... [--truncate] [--raw] [--dimensions N] [--all]\n"
    "                     [--keep-alive DURATION] [--json]\n"
    "\n"
    "Prints the embedding of each TEXT ('-' reads standard input) under embedding model MODEL:\n"
    "one line per text with its width and first values (--all: every value).\n"
    "  --truncate        cut a text longer than the model takes instead of refusing it\n"
    "  --raw             the pooled vectors as computed (default: L2-normalized)\n"
    "  --dimensions N    keep the first N values (Matryoshka), then normalize\n"
    "  --keep-alive D    how long the model stays loaded after this (30s, 5m, forever)\n"
    "With --json: {\"model\", \"embeddings\": [[floats]...], \"prompt_tokens\", \"cached_inputs\",\n"
    "\"load_usec\", \"total_usec\"}.\n";

#define PREVIEW 8

int ctl_cmd_embed(struct ctl *ctl, int argc, char **argv) {
    static const struct option opts[] = {
        {"truncate", no_argument, NULL, 't'},
        {"raw", no_argument, NULL, 'r'},
        {"dimensions", required_argument, NULL, 'd'},
        {"all", no_argument, NULL, 'a'},
        {"keep-alive", required_argument, NULL, 'k'},
        CTL_COMMON_OPTIONS,
        {0}};
    struct warm_embed_params p = {0};
    bool all = false;
    optind = 0;
    int opt, r;
    while ((opt = ctl_getopt(ctl, argc, argv, "", opts)) != -1) {
        if (opt == 't') p.truncate = true;
        else if (opt == 'r') p.raw = true;
        else if (opt == 'a') all = true;
        else if (opt == 'd') {
            if (ctl_parse_u32(optarg, &p.dimensions) < 0 || !p.dimensions)
                return ctl_bad_value(ctl, argv, "a positive number");
        } else if (opt == 'k') {
            if (ctl_parse_duration(optarg, &p.keep_alive_usec) < 0)
                return ctl_bad_value(ctl, argv, "a duration");
        } else if ((r = ctl_common_option(ctl, opt, embed_usage)) >= 0) return r;
    }
    if (argc - optind < 2) return ctl_usage_error(ctl, embed_usage, "give MODEL and at least one TEXT");
    p.model = argv[optind];
    size_t n = (size_t)(argc - optind - 1);
    char **texts = calloc(n, sizeof *texts);
    char *in = NULL;
    if (!texts) return ctl_fail_msg(ctl, "out of memory");
    for (size_t i = 0; i < n; i++) {
        texts[i] = argv[optind + 1 + i];
        if (strcmp(texts[i], "-") == 0) {
            if (!in && ctl_read_all("-", &in, NULL) < 0) {
                free(texts);
                return ctl_fail_msg(ctl, "cannot read standard input");
            }
            texts[i] = in;
        }
    }
    p.inputs = (const char *const *)texts;
    p.n_inputs = n;
    struct warm_client *c = ctl_client(ctl, &r);
    if (!c) {
        free(texts);
        free(in);
        return r;
    }
    struct warm_error err;
    struct warm_embed_result *res = NULL;
    r = warm_embed(c, &p, &res, &err);
    free(texts);
    free(in);
    if (r < 0) return ctl_fail(ctl, &err);
    if (ctl->json) {
        struct json j;
        json_begin(&j, stdout);
        json_str(&j, "model", res->model);
        json_array_begin(&j, "embeddings");
        for (size_t i = 0; i < res->n_embeddings; i++) {
            json_array_begin(&j, NULL);
            for (uint32_t k = 0; k < res->dimensions; k++)
                json_double(&j, NULL, res->values[i * res->dimensions + k]);
            json_array_end(&j);
        }
        json_array_end(&j);
        json_u64(&j, "prompt_tokens", res->prompt_tokens);
        json_u64(&j, "cached_inputs", res->cached_inputs);
        json_u64(&j, "truncated_inputs", res->truncated_inputs);
        json_u64(&j, "load_usec", res->load_usec);
        json_u64(&j, "total_usec", res->total_usec);
        json_end(&j);
    } else {
        for (size_t i = 0; i < res->n_embeddings; i++) {
            const float *v = res->values + i * res->dimensions;
            uint32_t shown = all || res->dimensions < PREVIEW ? res->dimensions : PREVIEW;
            printf("%zu: [%u]", i, res->dimensions);
            for (uint32_t k = 0; k < shown; k++) printf(" %.6f", v[k]);
            printf("%s\n", shown < res->dimensions ? " ..." : "");
        }
        printf("%u tokens, %u from the cache, %.1f ms\n", res->prompt_tokens, res->cached_inputs,
               res->total_usec / 1e3);
    }
    warm_free(res);
    return CTL_EXIT_OK;
}
