/* cmd-gen — run, chat and bench: the generation options they share, streaming tokens to
 * the terminal or as JSON events, cancellation with Ctrl-C, and chat's reconnection after
 * a daemon restart (the conversation is resent; the daemon restores its prefix from the
 * prompt cache). */
#include "warmctl.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_STOP 16

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

/* Ctrl-C cancels the stream instead of killing the process: the daemon sees the cancel
 * at once, and chat keeps going. */
static void catch_sigint(void) {
    struct sigaction sa = {.sa_handler = on_sigint};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}

static uint64_t now_usec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* ---- options shared by run, chat and bench ------------------------------------------- */

enum {
    OPT_TOP_K = 0x100,
    OPT_TOP_P,
    OPT_MIN_P,
    OPT_SEED,
    OPT_REPEAT_PENALTY,
    OPT_REPEAT_LAST_N,
    OPT_FREQUENCY_PENALTY,
    OPT_PRESENCE_PENALTY,
    OPT_GREEDY,
    OPT_STOP,
    OPT_CACHE,
    OPT_NO_CACHE,
    OPT_NAMESPACE,
    OPT_KEEP_ALIVE,
    OPT_SYSTEM,
    OPT_WAIT,
    OPT_PROMPT_TOKENS,
    OPT_REPS,
    OPT_PLAIN,
};

#define GEN_OPTIONS                                                                          \
    {"max-tokens", required_argument, NULL, 'n'},                                           \
        {"temperature", required_argument, NULL, 't'},                                      \
        {"top-k", required_argument, NULL, OPT_TOP_K},                                      \
        {"top-p", required_argument, NULL, OPT_TOP_P},                                      \
        {"min-p", required_argument, NULL, OPT_MIN_P},                                      \
        {"seed", required_argument, NULL, OPT_SEED},                                        \
        {"repeat-penalty", required_argument, NULL, OPT_REPEAT_PENALTY},                    \
        {"repeat-last-n", required_argument, NULL, OPT_REPEAT_LAST_N},                      \
        {"frequency-penalty", required_argument, NULL, OPT_FREQUENCY_PENALTY},              \
        {"presence-penalty", required_argument, NULL, OPT_PRESENCE_PENALTY},                \
        {"greedy", no_argument, NULL, OPT_GREEDY},                                          \
        {"stop", required_argument, NULL, OPT_STOP},                                        \
        {"cache", required_argument, NULL, OPT_CACHE},                                      \
        {"no-cache", no_argument, NULL, OPT_NO_CACHE},                                      \
        {"namespace", required_argument, NULL, OPT_NAMESPACE},                              \
        {"keep-alive", required_argument, NULL, OPT_KEEP_ALIVE},                            \
        {"verbose", no_argument, NULL, 'v'}

#define GEN_OPTIONS_HELP                                                                     \
    "  -n, --max-tokens N       stop after N generated tokens (default: until the model\n" \
    "                           ends or the context is full)\n"                              \
    "  -t, --temperature X      0 = greedy; default 0.8 (the daemon's sampling defaults)\n" \
    "      --greedy             same as --temperature 0\n"                                   \
    "      --top-k N, --top-p X, --min-p X, --seed N, --repeat-penalty X,\n"                 \
    "      --repeat-last-n N, --frequency-penalty X, --presence-penalty X\n"                 \
    "                           sampling (any of them sends all, from the defaults)\n"       \
    "      --stop TEXT          stop before TEXT (repeatable, at most 16)\n"                 \
    "      --cache use|skip|refresh   prompt cache mode (default use); --no-cache = skip\n"  \
    "      --namespace NS       cache namespace (default: your own, uid:<uid>)\n"            \
    "      --keep-alive DUR     keep the model loaded DUR after this request (30s, 10m)\n"   \
    "  -v, --verbose            print the summary (cache reuse, timings) on stderr\n"

struct gen_opts {
    struct warm_gen_params params;
    struct warm_sampling sampling;
    bool have_sampling;
    const char *stop[MAX_STOP];
    bool verbose;
};

static const char *const cache_mode_names[WARM_CACHE_MODE_COUNT] = {
    [WARM_CACHE_USE] = "use", [WARM_CACHE_SKIP] = "skip", [WARM_CACHE_REFRESH] = "refresh"};

/* Handles one generation option; returns -1 when opt is not one, 0 when handled, or an
 * exit code for a bad value. */
static int gen_option(struct ctl *ctl, struct gen_opts *g, int opt, const char *usage) {
    struct warm_sampling *s = &g->sampling;
    int bad = 0;
    if (!g->have_sampling && ((opt >= OPT_TOP_K && opt <= OPT_GREEDY) || opt == 't')) {
        *s = warm_sampling_default();
        g->have_sampling = true;
    }
    switch (opt) {
    case 'n': bad = ctl_parse_u32(optarg, &g->params.max_tokens); break;
    case 't': bad = ctl_parse_float(optarg, &s->temperature); break;
    case OPT_TOP_K: bad = ctl_parse_i32(optarg, &s->top_k); break;
    case OPT_TOP_P: bad = ctl_parse_float(optarg, &s->top_p); break;
    case OPT_MIN_P: bad = ctl_parse_float(optarg, &s->min_p); break;
    case OPT_SEED: bad = ctl_parse_u64(optarg, &s->seed); break;
    case OPT_REPEAT_PENALTY: bad = ctl_parse_float(optarg, &s->repeat_penalty); break;
    case OPT_REPEAT_LAST_N: bad = ctl_parse_i32(optarg, &s->repeat_last_n); break;
    case OPT_FREQUENCY_PENALTY: bad = ctl_parse_float(optarg, &s->frequency_penalty); break;
    case OPT_PRESENCE_PENALTY: bad = ctl_parse_float(optarg, &s->presence_penalty); break;
    case OPT_GREEDY: s->temperature = 0; break;
    case OPT_STOP:
        if (g->params.n_stop == MAX_STOP)
            return ctl_usage_error(ctl, usage, "--stop: at most %d stop strings", MAX_STOP);
        g->stop[g->params.n_stop++] = optarg;
        break;
    case OPT_CACHE: {
        bad = -EINVAL;
        for (int m = 0; m < WARM_CACHE_MODE_COUNT; m++)
            if (strcmp(optarg, cache_mode_names[m]) == 0) g->params.cache_mode = m, bad = 0;
        break;
    }
    case OPT_NO_CACHE: g->params.cache_mode = WARM_CACHE_SKIP; break;
    case OPT_NAMESPACE: g->params.cache_namespace = optarg; break;
    case OPT_KEEP_ALIVE: bad = ctl_parse_duration(optarg, &g->params.keep_alive_usec); break;
    case 'v': g->verbose = true; break;
    default: return -1;
    }
    if (bad < 0) return ctl_usage_error(ctl, usage, "bad value '%s'", optarg);
    return 0;
}

static void gen_opts_finish(struct gen_opts *g) {
    g->params.stop = g->stop;
    g->params.sampling = g->have_sampling ? &g->sampling : NULL;
    g->params.cancel = &interrupted;
}

/* Parses argv with the generation options plus extra ones; calls extra_fn for those. */
static int gen_parse(struct ctl *ctl, struct gen_opts *g, int argc, char **argv,
                     const struct option *extra, size_t n_extra, const char *usage,
                     int (*extra_fn)(struct ctl *, int opt, void *), void *extra_data) {
    static const struct option base[] = {GEN_OPTIONS, CTL_COMMON_OPTIONS};
    struct option opts[sizeof base / sizeof base[0] + 8];
    size_t n = 0;
    for (size_t i = 0; i < sizeof base / sizeof base[0]; i++) opts[n++] = base[i];
    for (size_t i = 0; i < n_extra && n + 1 < sizeof opts / sizeof opts[0]; i++) opts[n++] = extra[i];
    opts[n] = (struct option){0};
    optind = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, "n:t:v", opts, NULL)) != -1) {
        int r = gen_option(ctl, g, opt, usage);
        if (r == 0) continue;
        if (r > 0) return r;
        if (extra_fn && opt >= OPT_SYSTEM && opt <= OPT_PLAIN) {
            r = extra_fn(ctl, opt, extra_data);
            if (r > 0) return r;
            continue;
        }
        r = ctl_common_option(ctl, opt, usage);
        if (r >= 0) return r;
    }
    gen_opts_finish(g);
    return -1;
}

/* ---- streaming output ---------------------------------------------------------------- */

struct sink {
    struct ctl *ctl;
    bool quiet;                 /* bench: time the tokens, print nothing */
    bool at_line_start;         /* the last byte written was a newline (or nothing) */
    /* The reply as text, for chat's history. */
    char *text;
    size_t len, cap;
    bool out_of_memory;
    /* bench: arrival times. */
    uint64_t t_first, t_last;
    uint32_t n_tokens;
};

static int sink_token(int32_t id, const char *text, size_t len, void *userdata) {
    struct sink *k = userdata;
    uint64_t t = now_usec();
    if (!k->n_tokens++) k->t_first = t;
    k->t_last = t;
    if (k->quiet) return 0;
    if (k->ctl->json) {
        struct json j;
        json_begin(&j, stdout);
        json_object_begin(&j, "token");
        json_i64(&j, "id", id);
        json_strn(&j, "text", text, len);
        json_object_end(&j);
        json_end(&j);
    } else if (len) {
        fwrite(text, 1, len, stdout);
        fflush(stdout);
        k->at_line_start = text[len - 1] == '\n';
    }
    if (len && !k->out_of_memory) {
        if (k->len + len + 1 > k->cap) {
            size_t cap = (k->len + len + 1) * 2;
            char *nb = realloc(k->text, cap);
            if (!nb) {
                k->out_of_memory = true;
                return 0;
            }
            k->text = nb;
            k->cap = cap;
        }
        memcpy(k->text + k->len, text, len);
        k->len += len;
        k->text[k->len] = '\0';
    }
    return 0;
}

static void sink_reset(struct sink *k) {
    k->len = 0;
    if (k->text) k->text[0] = '\0';
    k->n_tokens = 0;
    k->at_line_start = true;
}

/* After a stream: the newline of human output and the summary. */
static void sink_finish(struct sink *k, const struct warm_summary *s, bool verbose) {
    if (k->ctl->json) {
        struct json j;
        json_begin(&j, stdout);
        ctl_json_summary(&j, "summary", s);
        json_end(&j);
        return;
    }
    if (!k->at_line_start) fputc('\n', stdout);
    fflush(stdout);
    if (verbose) ctl_print_summary(s);
}

/* ---- run ----------------------------------------------------------------------------- */

static const char run_usage[] =
    "Usage: warmctl run MODEL PROMPT|- [OPTIONS]\n"
    "\n"
    "Completes PROMPT (or standard input with '-') with MODEL and prints the tokens as they\n"
    "arrive. Ctrl-C cancels. With --json: one {\"token\": {\"id\", \"text\"}} line per token,\n"
    "then one {\"summary\": {...}} line.\n"
    "\n" GEN_OPTIONS_HELP;

int ctl_cmd_run(struct ctl *ctl, int argc, char **argv) {
    struct gen_opts g = {0};
    int r = gen_parse(ctl, &g, argc, argv, NULL, 0, run_usage, NULL, NULL);
    if (r >= 0) return r;
    if (argc - optind != 2) return ctl_usage_error(ctl, run_usage, "give MODEL and PROMPT");
    g.params.model = argv[optind];
    const char *prompt = argv[optind + 1];
    char *input = NULL;
    if (strcmp(prompt, "-") == 0) {
        size_t len;
        if (ctl_read_all("-", &input, &len) < 0) return ctl_fail_msg(ctl, "cannot read standard input");
        if (len && input[len - 1] == '\n') input[len - 1] = '\0';
        prompt = input;
    }
    struct warm_client *c = ctl_client(ctl, &r);
    if (!c) {
        free(input);
        return r;
    }
    catch_sigint();
    struct sink k = {.ctl = ctl, .at_line_start = true};
    struct warm_summary s;
    struct warm_error err;
    r = warm_generate(c, &g.params, prompt, NULL, 0, sink_token, &k, &s, &err);
    free(input);
    free(k.text);
    if (r < 0) {
        if (!ctl->json && !k.at_line_start) fputc('\n', stdout);
        if (err.code == WARM_CANCELLED && interrupted) {
            fprintf(stderr, "[cancelled]\n");
            return 130;
        }
        return ctl_fail(ctl, &err);
    }
    sink_finish(&k, &s, g.verbose);
    warm_summary_done(&s);
    return CTL_EXIT_OK;
}

/* ---- chat ---------------------------------------------------------------------------- */

static const char chat_usage[] =
    "Usage: warmctl chat MODEL [--system TEXT] [--wait DURATION] [OPTIONS]\n"
    "\n"
    "Talks with MODEL: each line you type is a user message; the reply streams back. The\n"
    "whole conversation is sent each turn and the daemon resumes it from its prompt cache,\n"
    "also after a restart: when warmd goes away mid-chat, warmctl waits up to --wait\n"
    "(default 30s) for it to come back and resends the turn.\n"
    "Lines '/exit' (or end of input) quit, '/reset' forgets the conversation.\n"
    "Ctrl-C stops the current reply. With --json: each turn's token and summary lines.\n"
    "\n"
    "      --system TEXT        a system message at the start of the conversation\n"
    "      --wait DURATION      how long to wait for a restarted daemon (default 30s)\n"
    "      --plain              for models without a chat template (base models): send the\n"
    "                           conversation as a plain 'User:' / 'Assistant:' transcript\n"
    "                           with Generate instead of Chat\n" GEN_OPTIONS_HELP;

struct chat_extra {
    const char *system;
    uint64_t wait_usec;
    bool plain;
};

static int chat_option(struct ctl *ctl, int opt, void *data) {
    struct chat_extra *x = data;
    if (opt == OPT_SYSTEM) x->system = optarg;
    else if (opt == OPT_PLAIN) x->plain = true;
    else if (opt == OPT_WAIT && ctl_parse_duration(optarg, &x->wait_usec) < 0)
        return ctl_usage_error(ctl, chat_usage, "--wait: '%s' is not a duration", optarg);
    return 0;
}

struct history {
    struct warm_chat_message *v;
    char **owned;               /* contents we allocated, parallel to v */
    size_t n, cap;
};

static int history_add(struct history *h, const char *role, const char *content) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 16;
        struct warm_chat_message *v = realloc(h->v, cap * sizeof *v);
        if (!v) return -ENOMEM;
        h->v = v;
        char **o = realloc(h->owned, cap * sizeof *o);
        if (!o) return -ENOMEM;
        h->owned = o;
        h->cap = cap;
    }
    char *copy = strdup(content);
    if (!copy) return -ENOMEM;
    h->owned[h->n] = copy;
    h->v[h->n++] = (struct warm_chat_message){.role = role, .content = copy};
    return 0;
}

static void history_truncate(struct history *h, size_t n) {
    while (h->n > n) free(h->owned[--h->n]);
}

/* Waits until the daemon answers again (a restart), reconnecting; false on timeout. */
static bool reconnect(struct ctl *ctl, uint64_t wait_usec) {
    uint64_t end = now_usec() + wait_usec;
    fprintf(stderr, "[warmd went away; waiting for it to come back]\n");
    warm_disconnect(ctl->client);
    ctl->client = NULL;
    while (!interrupted) {
        struct warm_error err;
        struct warm_client *c;
        if (warm_connect(ctl->socket, &c, &err) == 0) {
            struct warm_info in;
            if (warm_info_get(c, &in, &err) == 0) {
                ctl->client = c;
                fprintf(stderr, "[reconnected; resuming the conversation]\n");
                return true;
            }
            warm_disconnect(c);
        }
        if (now_usec() >= end) return false;
        usleep(200 * 1000);
    }
    return false;
}

/* The plain transcript of --plain: the system message, then "User: ..." and
 * "Assistant: ..." lines, ending with "Assistant:" for the model to continue. */
static char *plain_transcript(const struct history *h) {
    size_t n = 16;
    for (size_t i = 0; i < h->n; i++) n += strlen(h->v[i].content) + 16;
    char *t = malloc(n), *p = t;
    if (!t) return NULL;
    for (size_t i = 0; i < h->n; i++) {
        const char *role = h->v[i].role, *content = h->v[i].content;
        if (strcmp(role, "system") == 0) p += sprintf(p, "%s\n\n", content);
        else p += sprintf(p, "%s: %s\n", strcmp(role, "user") == 0 ? "User" : "Assistant", content);
    }
    strcpy(p, "Assistant:");
    return t;
}

/* One turn: Chat with the daemon's template, or Generate on the plain transcript (which
 * also stops where the model starts the user's next line). */
static int chat_turn(struct ctl *ctl, const struct gen_opts *g, const struct history *h, bool plain,
                     struct sink *k, struct warm_summary *s, struct warm_error *err) {
    if (!plain) return warm_chat(ctl->client, &g->params, h->v, h->n, 0, sink_token, k, s, err);
    const char *stop[MAX_STOP + 1];
    struct warm_gen_params p = g->params;
    for (size_t i = 0; i < p.n_stop; i++) stop[i] = p.stop[i];
    stop[p.n_stop++] = "\nUser:";
    p.stop = stop;
    char *prompt = plain_transcript(h);
    if (!prompt) {
        *err = (struct warm_error){.code = WARM_NO_MEMORY, .message = "out of memory"};
        return -WARM_NO_MEMORY;
    }
    int r = warm_generate(ctl->client, &p, prompt, NULL, 0, sink_token, k, s, err);
    free(prompt);
    return r;
}

int ctl_cmd_chat(struct ctl *ctl, int argc, char **argv) {
    static const struct option extra[] = {{"system", required_argument, NULL, OPT_SYSTEM},
                                          {"wait", required_argument, NULL, OPT_WAIT},
                                          {"plain", no_argument, NULL, OPT_PLAIN}};
    struct chat_extra x = {.wait_usec = 30 * 1000000ULL};
    struct gen_opts g = {0};
    int r = gen_parse(ctl, &g, argc, argv, extra, 3, chat_usage, chat_option, &x);
    if (r >= 0) return r;
    if (argc - optind != 1) return ctl_usage_error(ctl, chat_usage, "name one model");
    g.params.model = argv[optind];
    if (!ctl_client(ctl, &r)) return r;
    catch_sigint();
    bool tty = isatty(STDIN_FILENO);
    struct history h = {0};
    int ret = CTL_EXIT_OK;
    if (x.system && history_add(&h, "system", x.system) < 0) return ctl_fail_msg(ctl, "out of memory");
    size_t n_keep = h.n;        /* /reset keeps the system message */
    struct sink k = {.ctl = ctl, .at_line_start = true};
    char *line = NULL;
    size_t line_cap = 0;
    for (;;) {
        if (tty && !ctl->json) {
            fputs(">>> ", stdout);
            fflush(stdout);
        }
        interrupted = 0;
        ssize_t got = getline(&line, &line_cap, stdin);
        if (got < 0) {
            if (interrupted && !feof(stdin)) {
                clearerr(stdin);
                fputc('\n', stdout);
                continue;
            }
            break;
        }
        if (got && line[got - 1] == '\n') line[--got] = '\0';
        if (!*line) continue;
        if (strcmp(line, "/exit") == 0 || strcmp(line, "/quit") == 0) break;
        if (strcmp(line, "/reset") == 0) {
            history_truncate(&h, n_keep);
            if (!ctl->json) fprintf(stderr, "[conversation forgotten]\n");
            continue;
        }
        size_t n_before = h.n;
        if (history_add(&h, "user", line) < 0) {
            ret = ctl_fail_msg(ctl, "out of memory");
            break;
        }
        struct warm_summary s;
        struct warm_error err;
        for (;;) {
            sink_reset(&k);
            r = chat_turn(ctl, &g, &h, x.plain, &k, &s, &err);
            if (r >= 0 || (err.code != WARM_UNAVAILABLE && err.code != WARM_NOT_RUNNING)) break;
            if (!ctl->json && !k.at_line_start) fputc('\n', stdout);
            if (!reconnect(ctl, x.wait_usec)) break;
        }
        if (r < 0) {
            if (!ctl->json && !k.at_line_start) fputc('\n', stdout);
            if (err.code == WARM_CANCELLED && interrupted) {
                /* Keep what was said so far: the next turn continues the conversation. */
                if (k.len) history_add(&h, "assistant", k.text);
                else history_truncate(&h, n_before);
                fprintf(stderr, "[stopped]\n");
                continue;
            }
            ret = ctl_fail(ctl, &err);
            if (err.code == WARM_UNIMPLEMENTED && !x.plain)
                fprintf(stderr, "%s chat: --plain talks to base models through Generate\n",
                        ctl->prog);
            break;
        }
        sink_finish(&k, &s, g.verbose);
        warm_summary_done(&s);
        const char *reply = k.text ? k.text : "";
        while (x.plain && (*reply == ' ' || *reply == '\n')) reply++;
        if (k.out_of_memory || history_add(&h, "assistant", reply) < 0) {
            ret = ctl_fail_msg(ctl, "out of memory");
            break;
        }
        /* A plain transcript puts the next "User:" on its own line. */
        char *last = h.owned[h.n - 1];
        for (size_t n = strlen(last); x.plain && n && (last[n - 1] == ' ' || last[n - 1] == '\n');)
            last[--n] = '\0';
    }
    free(line);
    free(k.text);
    history_truncate(&h, 0);
    free(h.v);
    free(h.owned);
    return ret;
}

/* ---- bench --------------------------------------------------------------------------- */

static const char bench_usage[] =
    "Usage: warmctl bench MODEL [--prompt-tokens N] [-n N] [--reps N] [OPTIONS]\n"
    "\n"
    "Measures generation through the daemon: a prompt of --prompt-tokens tokens (default\n"
    "128, made from a repeated sentence) without the prompt cache, then -n tokens (default\n"
    "32), greedy, --reps times (default 3) after one warm-up. Reports prefill and decode\n"
    "speed as the daemon measured them, the time to the first token and the per-token\n"
    "overhead of the RPC as the client sees it. Numbers only; nothing is asserted.\n"
    "\n"
    "      --prompt-tokens N    prompt length in tokens\n"
    "      --reps N             measured runs\n" GEN_OPTIONS_HELP;

struct bench_extra {
    uint32_t prompt_tokens, reps;
};

static int bench_option(struct ctl *ctl, int opt, void *data) {
    struct bench_extra *x = data;
    uint32_t *dst = opt == OPT_PROMPT_TOKENS ? &x->prompt_tokens : opt == OPT_REPS ? &x->reps : NULL;
    if (dst && (ctl_parse_u32(optarg, dst) < 0 || *dst == 0))
        return ctl_usage_error(ctl, bench_usage, "bad value '%s'", optarg);
    return 0;
}

struct bench_run {
    struct warm_summary s;
    uint64_t ttft_usec, wall_usec, stream_usec;
    uint32_t n_tokens;
};

int ctl_cmd_bench(struct ctl *ctl, int argc, char **argv) {
    static const struct option extra[] = {
        {"prompt-tokens", required_argument, NULL, OPT_PROMPT_TOKENS},
        {"reps", required_argument, NULL, OPT_REPS}};
    struct bench_extra x = {.prompt_tokens = 128, .reps = 3};
    struct gen_opts g = {.params.max_tokens = 32};
    int r = gen_parse(ctl, &g, argc, argv, extra, 2, bench_usage, bench_option, &x);
    if (r >= 0) return r;
    if (argc - optind != 1) return ctl_usage_error(ctl, bench_usage, "name one model");
    if (!g.have_sampling) {
        g.sampling = warm_sampling_default();
        g.sampling.temperature = 0;
        g.have_sampling = true;
        gen_opts_finish(&g);
    }
    if (g.params.cache_mode == WARM_CACHE_USE) g.params.cache_mode = WARM_CACHE_SKIP;
    g.params.model = argv[optind];
    struct warm_client *c = ctl_client(ctl, &r);
    if (!c) return r;
    catch_sigint();
    struct warm_error err;

    /* The prompt: a sentence repeated until it is long enough, cut to the length. */
    static const char sentence[] = "The quick brown fox jumps over the lazy dog. ";
    int32_t *prompt = NULL;
    size_t n_prompt = 0;
    for (size_t reps = 8; n_prompt < x.prompt_tokens; reps *= 4) {
        size_t bytes = reps * (sizeof sentence - 1) + 1;
        char *text = malloc(bytes);
        if (!text) return ctl_fail_msg(ctl, "out of memory");
        text[0] = '\0';
        for (size_t i = 0; i < reps; i++) strcat(text, sentence);
        warm_free(prompt);
        prompt = NULL;
        r = warm_tokenize(c, g.params.model, text, WARM_TOKENIZE_ADD_SPECIAL, &prompt, &n_prompt, &err);
        free(text);
        if (r < 0) return ctl_fail(ctl, &err);
        if (reps > (size_t)x.prompt_tokens * 64) break;
    }
    if (n_prompt > x.prompt_tokens) n_prompt = x.prompt_tokens;
    /* Each run starts differently (the token after BOS cycles through the distinct ids of
     * the prompt), so the daemon cannot reuse a previous run's sequence from RAM and every
     * run measures a full prefill. */
    int32_t pool[64];
    size_t n_pool = 0;
    for (size_t i = 1; i < n_prompt && n_pool < sizeof pool / sizeof pool[0]; i++) {
        bool seen = false;
        for (size_t k = 0; k < n_pool; k++) seen = seen || pool[k] == prompt[i];
        if (!seen) pool[n_pool++] = prompt[i];
    }

    struct bench_run *runs = calloc(x.reps + 1, sizeof *runs);
    if (!runs) {
        warm_free(prompt);
        return ctl_fail_msg(ctl, "out of memory");
    }
    int ret = CTL_EXIT_OK;
    for (uint32_t i = 0; i <= x.reps; i++) {
        if (n_pool && n_prompt > 1) prompt[1] = pool[i % n_pool];
        struct sink k = {.ctl = ctl, .quiet = true};
        uint64_t t0 = now_usec();
        r = warm_generate(c, &g.params, NULL, prompt, n_prompt, sink_token, &k, &runs[i].s, &err);
        uint64_t t1 = now_usec();
        if (r < 0) {
            ret = ctl_fail(ctl, &err);
            break;
        }
        runs[i].wall_usec = t1 - t0;
        runs[i].ttft_usec = k.n_tokens ? k.t_first - t0 : 0;
        runs[i].stream_usec = k.n_tokens > 1 ? k.t_last - k.t_first : 0;
        runs[i].n_tokens = k.n_tokens;
    }
    if (ret == CTL_EXIT_OK) {
        double sum_pp = 0, sum_tg = 0, sum_ttft = 0, sum_ovh = 0;
        struct json j;
        if (ctl->json) {
            json_begin(&j, stdout);
            json_str(&j, "model", g.params.model);
            json_u64(&j, "prompt_tokens", n_prompt);
            json_u64(&j, "max_tokens", g.params.max_tokens);
            json_u64(&j, "warmup_load_usec", runs[0].s.load_usec);
            json_array_begin(&j, "runs");
        } else {
            printf("model %s: prompt %zu tokens, up to %u generated, %u runs after a warm-up\n",
                   g.params.model, n_prompt, g.params.max_tokens, x.reps);
            printf("%4s %12s %12s %12s %14s\n", "run", "prefill t/s", "decode t/s", "first token",
                   "overhead/token");
        }
        for (uint32_t i = 1; i <= x.reps; i++) {
            const struct bench_run *b = &runs[i];
            double pp = b->s.prefill_usec ? b->s.evaluated_tokens * 1e6 / b->s.prefill_usec : 0;
            double tg = b->s.decode_usec && b->s.generated_tokens > 1
                            ? (b->s.generated_tokens - 1) * 1e6 / b->s.decode_usec
                            : 0;
            /* What the client waits per token beyond the daemon's decode time. */
            double ovh = b->n_tokens > 1 && b->stream_usec > b->s.decode_usec
                             ? (double)(b->stream_usec - b->s.decode_usec) / (b->n_tokens - 1)
                             : 0;
            sum_pp += pp, sum_tg += tg, sum_ttft += b->ttft_usec, sum_ovh += ovh;
            if (ctl->json) {
                json_object_begin(&j, NULL);
                json_double(&j, "prefill_tokens_per_s", pp);
                json_double(&j, "decode_tokens_per_s", tg);
                json_u64(&j, "first_token_usec", b->ttft_usec);
                json_u64(&j, "wall_usec", b->wall_usec);
                json_double(&j, "overhead_usec_per_token", ovh);
                ctl_json_summary(&j, "summary", &b->s);
                json_object_end(&j);
            } else {
                char a[32];
                printf("%4u %12.1f %12.1f %12s %11.1f µs\n", i, pp, tg, ctl_fmt_usec(a, b->ttft_usec), ovh);
            }
        }
        if (ctl->json) {
            json_array_end(&j);
            json_object_begin(&j, "mean");
            json_double(&j, "prefill_tokens_per_s", sum_pp / x.reps);
            json_double(&j, "decode_tokens_per_s", sum_tg / x.reps);
            json_double(&j, "first_token_usec", sum_ttft / x.reps);
            json_double(&j, "overhead_usec_per_token", sum_ovh / x.reps);
            json_object_end(&j);
            json_end(&j);
        } else {
            char a[32];
            printf("mean %12.1f %12.1f %12s %11.1f µs\n", sum_pp / x.reps, sum_tg / x.reps,
                   ctl_fmt_usec(a, (uint64_t)(sum_ttft / x.reps)), sum_ovh / x.reps);
        }
    }
    for (uint32_t i = 0; i <= x.reps; i++) warm_summary_done(&runs[i].s);
    free(runs);
    warm_free(prompt);
    return ret;
}
