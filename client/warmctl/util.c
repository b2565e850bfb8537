/* util — what every warmctl command uses: common options, the lazy connection, errors,
 * value parsers and human formatting. */
#include "warmctl.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int ctl_common_option(struct ctl *ctl, int opt, const char *usage) {
    switch (opt) {
    case CTL_OPT_SOCKET:
        ctl->socket = optarg;
        return -1;
    case CTL_OPT_JSON:
        ctl->json = true;
        return -1;
    case CTL_OPT_HELP:
        fputs(usage, stdout);
        return CTL_EXIT_OK;
    default:
        /* ctl_getopt (or getopt_long) already named the bad option. */
        (void)usage;
        fprintf(stderr, "Try '%s %s --help'.\n", ctl->prog, ctl->command);
        return CTL_EXIT_USAGE;
    }
}

int ctl_usage_error(struct ctl *ctl, const char *usage, const char *fmt, ...) {
    (void)usage; /* a pointer to --help, not the whole text: the message is what matters */
    fprintf(stderr, "%s %s: ", ctl->prog, ctl->command);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry '%s %s --help'.\n", ctl->prog, ctl->command);
    return CTL_EXIT_USAGE;
}

/* ---- "did you mean" ------------------------------------------------------------------ */

/* Edit distance of a and b (insertions, deletions, substitutions and swaps of two
 * neighbours), capped at 9 for words longer than 62 bytes. */
static unsigned edit_distance(const char *a, const char *b) {
    size_t n = strlen(a), m = strlen(b);
    if (n > 62 || m > 62) return 9;
    unsigned d[64][64];
    for (size_t i = 0; i <= n; i++) d[i][0] = (unsigned)i;
    for (size_t j = 0; j <= m; j++) d[0][j] = (unsigned)j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            unsigned v = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < v) v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[n][m];
}

const char *ctl_closest(const char *word, const char *const *names, size_t n) {
    const char *best = NULL;
    unsigned best_d = strlen(word) <= 4 ? 2 : 3; /* what counts as a typo */
    for (size_t i = 0; i < n; i++) {
        if (!names[i]) continue;
        unsigned dist = edit_distance(word, names[i]);
        if (dist < best_d) {
            best = names[i];
            best_d = dist;
        }
    }
    return best;
}

/* The option as the user wrote it ("-n", "--max-tokens") for the value in optarg. */
static const char *typed_option(char buf[64], char **argv) {
    const char *a = argv[optind - 1];
    if (a == optarg && optind >= 2) a = argv[optind - 2];
    size_t n = strlen(a);
    if (optarg >= a && optarg <= a + n) n = (size_t)(optarg - a);
    if (n && a[n - 1] == '=') n--;
    if (n >= 64) n = 63;
    memcpy(buf, a, n);
    buf[n] = '\0';
    return buf;
}

int ctl_bad_value(struct ctl *ctl, char **argv, const char *what) {
    char name[64];
    fprintf(stderr, "%s %s: %s: '%s' is not %s\n", ctl->prog, ctl->command,
            typed_option(name, argv), optarg, what);
    fprintf(stderr, "Try '%s %s --help'.\n", ctl->prog, ctl->command);
    return CTL_EXIT_USAGE;
}

int ctl_getopt(struct ctl *ctl, int argc, char **argv, const char *shortopts,
               const struct option *longopts) {
    char sopts[64];
    snprintf(sopts, sizeof sopts, ":%s", shortopts); /* ':' = a missing value is ':' */
    opterr = 0;
    int opt = getopt_long(argc, argv, sopts, longopts, NULL);
    if (opt != '?' && opt != ':') return opt;
    const char *a = optind > 0 && optind <= argc ? argv[optind - 1] : "";
    char word[64];
    if (strncmp(a, "--", 2) == 0) {
        size_t n = strcspn(a + 2, "=");
        snprintf(word, sizeof word, "%.*s", (int)(n < 63 ? n : 63), a + 2);
    } else if (optopt > 0 && optopt < 128) {
        snprintf(word, sizeof word, "%c", optopt);
    } else {
        snprintf(word, sizeof word, "%s", a);
    }
    bool is_long = strncmp(a, "--", 2) == 0;
    if (opt == ':') {
        fprintf(stderr, "%s %s: %s%s needs a value\n", ctl->prog, ctl->command,
                is_long ? "--" : "-", word);
    } else {
        const char *names[64];
        size_t n = 0, n_prefix = 0;
        char prefixed[256] = "";
        for (const struct option *o = longopts; o->name && n < 64; o++) {
            names[n++] = o->name;
            if (is_long && strncmp(o->name, word, strlen(word)) == 0) {
                size_t at = strlen(prefixed);
                snprintf(prefixed + at, sizeof prefixed - at, "%s--%s", n_prefix++ ? ", " : "",
                         o->name);
            }
        }
        if (n_prefix > 1) {
            fprintf(stderr, "%s %s: '--%s' is ambiguous: %s\n", ctl->prog, ctl->command, word,
                    prefixed);
        } else {
            const char *near = is_long ? ctl_closest(word, names, n) : NULL;
            fprintf(stderr, "%s %s: unknown option '%s%s'", ctl->prog, ctl->command,
                    is_long ? "--" : "-", word);
            if (near) fprintf(stderr, "; did you mean '--%s'?", near);
            fputc('\n', stderr);
        }
    }
    return '?';
}

static int exit_for(int code) {
    switch (code) {
    case WARM_NOT_RUNNING:
    case WARM_SOCKET_ACCESS:
        return CTL_EXIT_UNREACHABLE;
    case WARM_UNIMPLEMENTED:
        return CTL_EXIT_UNIMPLEMENTED;
    default:
        return CTL_EXIT_FAILED;
    }
}

int ctl_fail(struct ctl *ctl, const struct warm_error *err) {
    if (ctl->json) {
        struct json j;
        json_begin(&j, stdout);
        json_object_begin(&j, "error");
        json_str(&j, "code", warm_code_name(err->code));
        json_str(&j, "message", err->message);
        json_object_end(&j);
        json_end(&j);
    }
    if (err->code == WARM_UNIMPLEMENTED)
        fprintf(stderr, "%s %s: this warmd does not support it yet (%s)\n", ctl->prog,
                ctl->command, err->message);
    else fprintf(stderr, "%s %s: %s\n", ctl->prog, ctl->command, err->message);
    return exit_for(err->code);
}

int ctl_fail_msg(struct ctl *ctl, const char *fmt, ...) {
    struct warm_error err = {.code = WARM_BAD_REQUEST};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err.message, sizeof err.message, fmt, ap);
    va_end(ap);
    ctl_fail(ctl, &err);
    return CTL_EXIT_FAILED;
}

struct warm_client *ctl_client(struct ctl *ctl, int *ret_exit) {
    if (ctl->client) return ctl->client;
    struct warm_error err = {0};
    if (warm_connect(ctl->socket, &ctl->client, &err) < 0) {
        *ret_exit = ctl_fail(ctl, &err);
        return NULL;
    }
    return ctl->client;
}

/* ---- parsers ------------------------------------------------------------------------- */

int ctl_parse_u64(const char *s, uint64_t *ret) {
    if (!s || *s < '0' || *s > '9') return -EINVAL;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return -EINVAL;
    *ret = v;
    return 0;
}

int ctl_parse_u32(const char *s, uint32_t *ret) {
    uint64_t v;
    if (ctl_parse_u64(s, &v) < 0 || v > UINT32_MAX) return -EINVAL;
    *ret = (uint32_t)v;
    return 0;
}

int ctl_parse_i32(const char *s, int32_t *ret) {
    if (!s || !*s) return -EINVAL;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < INT32_MIN || v > INT32_MAX) return -EINVAL;
    *ret = (int32_t)v;
    return 0;
}

int ctl_parse_float(const char *s, float *ret) {
    if (!s || !*s) return -EINVAL;
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || *end || !isfinite(v)) return -EINVAL;
    *ret = v;
    return 0;
}

static const struct {
    const char *suffix;
    uint64_t usec;
} duration_units[] = {
    {"us", 1}, {"ms", 1000}, {"s", 1000000}, {"", 1000000},
    {"m", 60000000}, {"h", 3600000000ULL}, {"d", 86400000000ULL},
};

int ctl_parse_duration(const char *s, uint64_t *ret_usec) {
    if (s && (strcmp(s, "-1") == 0 || strcmp(s, "forever") == 0)) {
        *ret_usec = WARM_KEEP_ALIVE_FOREVER;
        return 0;
    }
    if (!s || *s < '0' || *s > '9') return -EINVAL;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno) return -EINVAL;
    for (size_t i = 0; i < sizeof duration_units / sizeof duration_units[0]; i++) {
        if (strcmp(end, duration_units[i].suffix) != 0) continue;
        uint64_t r;
        if (__builtin_mul_overflow((uint64_t)v, duration_units[i].usec, &r)) return -EINVAL;
        *ret_usec = r;
        return 0;
    }
    return -EINVAL;
}

/* ---- formatting ---------------------------------------------------------------------- */

const char *ctl_fmt_bytes(char buf[32], uint64_t bytes) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)bytes;
    size_t u = 0;
    while (v >= 1024 && u + 1 < sizeof units / sizeof units[0]) v /= 1024, u++;
    if (u == 0) snprintf(buf, 32, "%" PRIu64 " B", bytes);
    else snprintf(buf, 32, "%.1f %s", v, units[u]);
    return buf;
}

const char *ctl_fmt_usec(char buf[32], uint64_t usec) {
    if (usec < 1000) snprintf(buf, 32, "%" PRIu64 " µs", usec);
    else if (usec < 1000000) snprintf(buf, 32, "%.1f ms", usec / 1e3);
    else if (usec < 120000000) snprintf(buf, 32, "%.2f s", usec / 1e6);
    else if (usec < 7200000000ULL) snprintf(buf, 32, "%" PRIu64 "m%02" PRIu64 "s", usec / 60000000,
                                            usec / 1000000 % 60);
    else snprintf(buf, 32, "%" PRIu64 "h%02" PRIu64 "m", (uint64_t)(usec / 3600000000ULL),
                  usec / 60000000 % 60);
    return buf;
}

bool ctl_escape_wanted(const struct ctl *ctl) {
    return !ctl->json && isatty(STDOUT_FILENO);
}

void ctl_write_text(FILE *f, const char *text, size_t len, bool escape) {
    if (!escape) {
        fwrite(text, 1, len, f);
        return;
    }
    const unsigned char *p = (const unsigned char *)text;
    size_t plain = 0; /* start of the bytes not yet written, which need no escape */
    for (size_t i = 0; i < len; i++) {
        unsigned char c = p[i];
        /* U+0080..U+009F, the C1 controls, are 0xC2 0x80..0x9F in UTF-8 */
        bool c1 = c == 0xC2 && i + 1 < len && p[i + 1] >= 0x80 && p[i + 1] <= 0x9F;
        if ((c >= 0x20 && c != 0x7F && !c1) || c == '\n' || c == '\t') continue;
        fwrite(p + plain, 1, i - plain, f);
        if (c1) {
            fputs("M-BM-", f); /* cat -v: 0xC2 is M-B, 0x80 + x is M-^X */
            c = p[++i] & 0x7F;
        }
        fputc('^', f);
        fputc(c == 0x7F ? '?' : c + '@', f);
        plain = i + 1;
    }
    fwrite(p + plain, 1, len - plain, f);
}

int ctl_read_all(const char *path, char **ret, size_t *ret_len) {
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f) return -errno;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    int r = 0;
    while (buf) {
        if (n + 1 >= cap) {
            char *nb = cap < SIZE_MAX / 2 ? realloc(buf, cap * 2) : NULL;
            if (!nb) break;
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) r = -EIO;
            break;
        }
    }
    if (f != stdin) fclose(f);
    if (!buf || n + 1 > cap) {
        free(buf);
        return -ENOMEM;
    }
    if (r < 0) {
        free(buf);
        return r;
    }
    buf[n] = '\0';
    *ret = buf;
    if (ret_len) *ret_len = n;
    return 0;
}

/* ---- generation summaries ------------------------------------------------------------ */

void ctl_json_summary(struct json *j, const char *key, const struct warm_summary *s) {
    json_object_begin(j, key);
    json_u64(j, "prompt_tokens", s->prompt_tokens);
    json_u64(j, "ram_tokens", s->ram_tokens);
    json_u64(j, "store_tokens", s->store_tokens);
    json_u64(j, "evaluated_tokens", s->evaluated_tokens);
    json_u64(j, "generated_tokens", s->generated_tokens);
    json_str(j, "stop_reason", warm_stop_reason_name(s->stop_reason));
    json_str(j, "stop_string", s->stop_string);
    json_u64(j, "queue_usec", s->queue_usec);
    json_u64(j, "load_usec", s->load_usec);
    json_u64(j, "restore_usec", s->restore_usec);
    json_u64(j, "prefill_usec", s->prefill_usec);
    json_u64(j, "decode_usec", s->decode_usec);
    json_u64(j, "total_usec", s->total_usec);
    json_u64(j, "seed", s->seed);
    json_u64(j, "keep_alive_usec", s->keep_alive_usec);
    json_array_begin(j, "warnings");
    for (const char *w = s->warnings; *w;) {
        size_t n = strcspn(w, "\n");
        json_strn(j, NULL, w, n);
        w += n + (w[n] == '\n');
    }
    json_array_end(j);
    json_array_begin(j, "rejected");
    for (size_t i = 0; i < s->n_rejected; i++) {
        json_object_begin(j, NULL);
        json_u64(j, "position", s->rejected[i].position);
        json_str(j, "reason", s->rejected[i].reason);
        json_str(j, "message", s->rejected[i].message);
        json_object_end(j);
    }
    json_array_end(j);
    json_array_begin(j, "tool_calls");
    for (size_t i = 0; i < s->n_tool_calls; i++) {
        json_object_begin(j, NULL);
        json_str(j, "id", s->tool_calls[i].id);
        json_str(j, "name", s->tool_calls[i].name);
        json_str(j, "arguments", s->tool_calls[i].arguments);
        json_object_end(j);
    }
    json_array_end(j);
    json_object_end(j);
}

void ctl_print_summary(const struct warm_summary *s, bool greedy) {
    char a[32], b[32], c[32];
    fputc('[', stderr);
    if (s->load_usec) fprintf(stderr, "model loaded in %s; ", ctl_fmt_usec(a, s->load_usec));
    fprintf(stderr,
            "prompt %u tokens: %u from RAM, %u from the cache, %u computed in %s; "
            "%u generated in %s",
            s->prompt_tokens, s->ram_tokens, s->store_tokens, s->evaluated_tokens,
            ctl_fmt_usec(a, s->prefill_usec), s->generated_tokens, ctl_fmt_usec(b, s->decode_usec));
    if (s->decode_usec && s->generated_tokens > 1)
        fprintf(stderr, " (%.1f tokens/s)", (s->generated_tokens - 1) * 1e6 / s->decode_usec);
    fprintf(stderr, "; stop: %s", warm_stop_reason_name(s->stop_reason));
    if (s->stop_reason == WARM_STOP_STOP_STRING) fprintf(stderr, " '%s'", s->stop_string);
    fprintf(stderr, "; total %s", ctl_fmt_usec(c, s->total_usec));
    /* greedy decoding draws no random numbers: a seed would only suggest it mattered */
    if (!greedy) fprintf(stderr, "; seed %" PRIu64, s->seed);
    fputs("]\n", stderr);
    for (size_t i = 0; i < s->n_rejected; i++)
        fprintf(stderr, "[cache entry at token %u not used: %s]\n", s->rejected[i].position,
                s->rejected[i].message);
}
