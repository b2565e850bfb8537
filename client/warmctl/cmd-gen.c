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
#include <sys/stat.h>

#include <editline/readline.h>

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
    OPT_FORMAT,
    OPT_JSON_SCHEMA,
    OPT_GRAMMAR,
    OPT_TOOLS,
    OPT_TOOL_CHOICE,
    OPT_THINK,
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
        {"format", required_argument, NULL, OPT_FORMAT},                                    \
        {"json-schema", required_argument, NULL, OPT_JSON_SCHEMA},                          \
        {"grammar", required_argument, NULL, OPT_GRAMMAR},                                  \
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
    "      --keep-alive DUR     keep the model loaded DUR after this request (30s, 10m;\n"  \
    "                           0 = unload it after; -1 or forever = as long as allowed)\n"\
    "      --format json        JSON mode: the output is one JSON object\n"                   \
    "      --json-schema FILE   the output is one JSON value valid under the JSON Schema in\n" \
    "                           FILE ('-' = standard input; unsupported keywords are named)\n" \
    "      --grammar FILE       the output follows the grammar in FILE (warmd's GBNF-like\n"  \
    "                           form, start rule root)\n"                                   \
    "  -v, --verbose            print the summary (cache reuse, timings) on stderr\n"

struct gen_opts {
    struct warm_gen_params params;
    struct warm_sampling sampling;
    bool have_sampling;
    const char *stop[MAX_STOP];
    char *format_text;          /* the schema or grammar read from a file (owned) */
    bool verbose;
};

static void gen_opts_done(struct gen_opts *g) {
    free(g->format_text);
    g->format_text = NULL;
}

static const char *const cache_mode_names[WARM_CACHE_MODE_COUNT] = {
    [WARM_CACHE_USE] = "use", [WARM_CACHE_SKIP] = "skip", [WARM_CACHE_REFRESH] = "refresh"};

/* What a value of opt must be, for messages; NULL for options without a value. */
static const char *value_kind(int opt) {
    switch (opt) {
    case 'n': case OPT_TOP_K: case OPT_SEED: case OPT_REPEAT_LAST_N: return "a number";
    case 't': case OPT_TOP_P: case OPT_MIN_P: case OPT_REPEAT_PENALTY:
    case OPT_FREQUENCY_PENALTY: case OPT_PRESENCE_PENALTY: return "a number";
    case OPT_CACHE: return "one of use, skip, refresh";
    case OPT_KEEP_ALIVE: return "a duration (30s, 10m, 2h; 0 = unload after; -1 or forever)";
    case OPT_FORMAT: return "json (or none)";
    case OPT_JSON_SCHEMA: case OPT_GRAMMAR: return "a readable file ('-' = standard input)";
    default: return NULL;
    }
}

/* Sets one generation option from its text value (chat's /set too); -1 when opt is not
 * one, -EINVAL for a bad value, -E2BIG for one stop string too many, else 0. */
static int gen_value(struct gen_opts *g, int opt, const char *value) {
    struct warm_sampling *s = &g->sampling;
    if (!g->have_sampling && ((opt >= OPT_TOP_K && opt <= OPT_GREEDY) || opt == 't')) {
        *s = warm_sampling_default();
        g->have_sampling = true;
    }
    switch (opt) {
    case 'n': return ctl_parse_u32(value, &g->params.max_tokens);
    case 't': return ctl_parse_float(value, &s->temperature);
    case OPT_TOP_K: return ctl_parse_i32(value, &s->top_k);
    case OPT_TOP_P: return ctl_parse_float(value, &s->top_p);
    case OPT_MIN_P: return ctl_parse_float(value, &s->min_p);
    case OPT_SEED: return ctl_parse_u64(value, &s->seed);
    case OPT_REPEAT_PENALTY: return ctl_parse_float(value, &s->repeat_penalty);
    case OPT_REPEAT_LAST_N: return ctl_parse_i32(value, &s->repeat_last_n);
    case OPT_FREQUENCY_PENALTY: return ctl_parse_float(value, &s->frequency_penalty);
    case OPT_PRESENCE_PENALTY: return ctl_parse_float(value, &s->presence_penalty);
    case OPT_GREEDY: s->temperature = 0; return 0;
    case OPT_STOP:
        if (g->params.n_stop == MAX_STOP) return -E2BIG;
        g->stop[g->params.n_stop++] = value;
        return 0;
    case OPT_CACHE:
        for (int m = 0; m < WARM_CACHE_MODE_COUNT; m++)
            if (strcmp(value, cache_mode_names[m]) == 0) {
                g->params.cache_mode = m;
                return 0;
            }
        return -EINVAL;
    case OPT_NO_CACHE: g->params.cache_mode = WARM_CACHE_SKIP; return 0;
    case OPT_NAMESPACE: g->params.cache_namespace = value; return 0;
    case OPT_KEEP_ALIVE: {
        uint64_t v;
        if (ctl_parse_duration(value, &v) < 0) return -EINVAL;
        /* 0 as in Ollama: unload the model when this request is over */
        g->params.keep_alive_usec = v;
        g->params.unload_after = v == 0;
        return 0;
    }
    case OPT_FORMAT:
        if (strcmp(value, "json") != 0 && strcmp(value, "none") != 0) return -EINVAL;
        free(g->format_text);
        g->format_text = NULL;
        g->params.json_schema = strcmp(value, "json") == 0 ? WARM_JSON_OBJECT : NULL;
        g->params.grammar = NULL;
        return 0;
    case OPT_JSON_SCHEMA:
    case OPT_GRAMMAR: {
        char *text;
        size_t len;
        if (ctl_read_all(value, &text, &len) < 0) return -EINVAL;
        free(g->format_text);
        g->format_text = text;
        g->params.json_schema = opt == OPT_JSON_SCHEMA ? text : NULL;
        g->params.grammar = opt == OPT_GRAMMAR ? text : NULL;
        return 0;
    }
    case 'v': g->verbose = true; return 0;
    default: return -1;
    }
}

/* Handles one generation option of argv; -1 when opt is not one, 0 when handled, or an
 * exit code for a bad value. */
static int gen_option(struct ctl *ctl, struct gen_opts *g, int opt, char **argv,
                      const char *usage) {
    int r = gen_value(g, opt, optarg);
    if (r == -E2BIG) return ctl_usage_error(ctl, usage, "--stop: at most %d stop strings", MAX_STOP);
    if (r == -EINVAL) return ctl_bad_value(ctl, argv, value_kind(opt));
    return r;
}

static bool gen_greedy(const struct gen_opts *g) {
    return g->have_sampling && g->sampling.temperature == 0;
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
    while ((opt = ctl_getopt(ctl, argc, argv, "n:t:v", opts)) != -1) {
        int r = gen_option(ctl, g, opt, argv, usage);
        if (r == 0) continue;
        if (r > 0) return r;
        bool chat_only = opt >= OPT_TOOLS && opt <= OPT_THINK;
        if (extra_fn && ((opt >= OPT_SYSTEM && opt <= OPT_PLAIN) || chat_only)) {
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
    bool show_progress;         /* a terminal, not --json: draw the progress line */
    bool progress_shown;        /* a progress line is on stderr now */
    const char *model;          /* for the progress line */
    /* The reply as text, for chat's history. */
    char *text;
    size_t len, cap;
    bool out_of_memory;
    bool escape;                /* control characters shown as ^X (stdout is a terminal) */
    /* bench: arrival times. */
    uint64_t t_first, t_last;
    uint32_t n_tokens;
};

/* Progress goes to a terminal only: stdout and stderr both one, and no --json. */
static bool progress_wanted(const struct ctl *ctl) {
    return !ctl->json && isatty(STDOUT_FILENO) && isatty(STDERR_FILENO);
}

static void progress_clear(struct sink *k) {
    if (!k->progress_shown) return;
    fputs("\r\033[K", stderr);
    fflush(stderr);
    k->progress_shown = false;
}

static void sink_progress(const struct warm_progress *p, void *userdata) {
    struct sink *k = userdata;
    if (!k->show_progress || k->quiet) return;
    char line[200];
    if (p->stage == WARM_PROGRESS_LOAD) {
        snprintf(line, sizeof line, "loading model %s ...", k->model ? k->model : "");
    } else if (p->done_tokens >= p->prompt_tokens) {
        progress_clear(k);
        return;
    } else {
        int n = snprintf(line, sizeof line, "prompt: %u of %u tokens (%u%%)", p->done_tokens,
                         p->prompt_tokens,
                         p->prompt_tokens ? (unsigned)(100ull * p->done_tokens / p->prompt_tokens) : 0);
        if (p->store_tokens || p->ram_tokens)
            snprintf(line + n, sizeof line - (size_t)n, ", %u restored from the cache, %u reused",
                     p->store_tokens, p->ram_tokens);
    }
    fprintf(stderr, "\r\033[K%s", line);
    fflush(stderr);
    k->progress_shown = true;
}

static int sink_token(int32_t id, const char *text, size_t len, void *userdata) {
    struct sink *k = userdata;
    uint64_t t = now_usec();
    if (!k->n_tokens++) k->t_first = t;
    k->t_last = t;
    if (k->quiet) return 0;
    progress_clear(k);
    if (k->ctl->json) {
        struct json j;
        json_begin(&j, stdout);
        json_object_begin(&j, "token");
        json_i64(&j, "id", id);
        json_strn(&j, "text", text, len);
        json_object_end(&j);
        json_end(&j);
    } else if (len) {
        ctl_write_text(stdout, text, len, k->escape);
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

/* A thinking model's reasoning: dimmed on a terminal, on stderr otherwise (stdout keeps
 * the answer), {"reasoning": {"id", "text"}} lines with --json. */
static int sink_reasoning(int32_t id, const char *text, size_t len, void *userdata) {
    struct sink *k = userdata;
    if (k->quiet || !len) return 0;
    progress_clear(k);
    if (k->ctl->json) {
        struct json j;
        json_begin(&j, stdout);
        json_object_begin(&j, "reasoning");
        json_i64(&j, "id", id);
        json_strn(&j, "text", text, len);
        json_object_end(&j);
        json_end(&j);
    } else if (isatty(STDOUT_FILENO)) {
        fputs("\033[2m", stdout);
        ctl_write_text(stdout, text, len, k->escape);
        fputs("\033[0m", stdout);
        fflush(stdout);
        k->at_line_start = text[len - 1] == '\n';
    } else {
        ctl_write_text(stderr, text, len, false);
        fflush(stderr);
    }
    return 0;
}

static void sink_reset(struct sink *k) {
    k->len = 0;
    if (k->text) k->text[0] = '\0';
    k->n_tokens = 0;
    k->at_line_start = true;
}

/* After a stream: the newline of human output, the daemon's warnings and the summary. */
static void sink_finish(struct sink *k, const struct warm_summary *s, bool verbose, bool greedy) {
    progress_clear(k);
    if (k->ctl->json) {
        struct json j;
        json_begin(&j, stdout);
        ctl_json_summary(&j, "summary", s);
        json_end(&j);
        return;
    }
    if (!k->at_line_start) fputc('\n', stdout);
    for (size_t i = 0; i < s->n_tool_calls; i++)
        printf("[tool call %s: %s %s]\n", s->tool_calls[i].id, s->tool_calls[i].name,
               s->tool_calls[i].arguments);
    fflush(stdout);
    for (const char *w = s->warnings; *w;) {
        size_t n = strcspn(w, "\n");
        fprintf(stderr, "%s %s: warmd: %.*s\n", k->ctl->prog, k->ctl->command, (int)n, w);
        w += n + (w[n] == '\n');
    }
    if (verbose) ctl_print_summary(s, greedy);
}

/* ---- run ----------------------------------------------------------------------------- */

static const char run_usage[] =
    "Usage: warmctl run MODEL PROMPT|- [OPTIONS]\n"
    "\n"
    "Completes PROMPT (or standard input with '-') with MODEL and prints the tokens as they\n"
    "arrive. Ctrl-C cancels. On a terminal, a line on stderr shows the model loading and a\n"
    "long prompt's progress. With --json: one {\"token\": {\"id\", \"text\"}} line per token,\n"
    "then one {\"summary\": {...}} line.\n"
    "\n" GEN_OPTIONS_HELP;

static int run_main(struct ctl *ctl, struct gen_opts *g, int argc, char **argv) {
    int r = gen_parse(ctl, g, argc, argv, NULL, 0, run_usage, NULL, NULL);
    if (r >= 0) return r;
    if (argc - optind != 2) return ctl_usage_error(ctl, run_usage, "give MODEL and PROMPT");
    g->params.model = argv[optind];
    const char *prompt = argv[optind + 1];
    char *input = NULL;
    if (strcmp(prompt, "-") == 0) {
        size_t len;
        if (ctl_read_all("-", &input, &len) < 0) return ctl_fail_msg(ctl, "cannot read standard input");
        if (strlen(input) != len) {
            free(input);
            return ctl_fail_msg(ctl, "standard input holds a NUL byte at offset %zu; the prompt "
                                "must be text", strlen(input));
        }
        if (len && input[len - 1] == '\n') input[len - 1] = '\0';
        prompt = input;
    }
    struct warm_client *c = ctl_client(ctl, &r);
    if (!c) {
        free(input);
        return r;
    }
    catch_sigint();
    struct sink k = {.ctl = ctl, .at_line_start = true, .show_progress = progress_wanted(ctl),
                     .escape = ctl_escape_wanted(ctl), .model = g->params.model};
    g->params.on_progress = sink_progress;
    struct warm_summary s;
    struct warm_error err;
    r = warm_generate(c, &g->params, prompt, NULL, 0, sink_token, &k, &s, &err);
    free(input);
    free(k.text);
    progress_clear(&k);
    if (r < 0) {
        if (!ctl->json && !k.at_line_start) fputc('\n', stdout);
        if (err.code == WARM_CANCELLED && interrupted) {
            fprintf(stderr, "[cancelled]\n");
            return 130;
        }
        return ctl_fail(ctl, &err);
    }
    sink_finish(&k, &s, g->verbose, gen_greedy(g));
    warm_summary_done(&s);
    return CTL_EXIT_OK;
}

int ctl_cmd_run(struct ctl *ctl, int argc, char **argv) {
    struct gen_opts g = {0};
    int r = run_main(ctl, &g, argc, argv);
    gen_opts_done(&g);
    return r;
}

/* ---- chat ---------------------------------------------------------------------------- */

static const char chat_usage[] =
    "Usage: warmctl chat MODEL [--system TEXT] [--wait DURATION] [OPTIONS]\n"
    "\n"
    "Talks with MODEL: each line you type is a user message; the reply streams back. On a\n"
    "terminal the line can be edited and earlier lines come back with the arrow keys (the\n"
    "history is kept in $XDG_STATE_HOME/warmctl/chat_history). The whole conversation is\n"
    "sent each turn and the daemon resumes it from its prompt cache, also after a restart:\n"
    "when warmd goes away mid-chat, warmctl waits up to --wait (default 30s) for it to come\n"
    "back and resends the turn. Ctrl-C stops the current reply; Ctrl-D or /bye leaves.\n"
    "With --json: each turn's token and summary lines.\n"
    "\n"
    "In the chat:\n"
    "  /help                this list\n"
    "  /bye                 leave (also /exit, /quit, end of input)\n"
    "  /clear               forget the conversation (the --system message stays)\n"
    "  /set                 show the sampling settings\n"
    "  /set NAME VALUE      change one: temperature, top-k, top-p, min-p, seed,\n"
    "                       repeat-penalty, repeat-last-n, frequency-penalty,\n"
    "                       presence-penalty, max-tokens; '/set greedy' for temperature 0;\n"
    "                       format json|none, json-schema FILE, grammar FILE\n"
    "  /result [ID] TEXT    answer the model's tool call ID (which may be left out when one\n"
    "                       call waits) with TEXT; after the last waiting call's result\n"
    "                       the model goes on\n"
    "  \"\"\"                  start and end a message of several lines (or end a line with\n"
    "                       '\\' to go on on the next one)\n"
    "\n"
    "      --system TEXT        a system message at the start of the conversation\n"
    "      --wait DURATION      how long to wait for a restarted daemon (default 30s)\n"
    "      --plain              for models without a chat template (base models): send the\n"
    "                           conversation as a plain 'User:' / 'Assistant:' transcript\n"
    "                           instead of through the model's template\n"
    "      --tools FILE         the tools the model may call: a JSON array of OpenAI-shaped\n"
    "                           tools ({\"type\": \"function\", \"function\": {\"name\",\n"
    "                           \"description\", \"parameters\"}}); its calls are printed as\n"
    "                           [tool call ID: NAME ARGUMENTS] (--json: the summary's\n"
    "                           tool_calls); answer them with /result\n"
    "      --tool-choice auto|none|required|NAME   whether the model must call a tool (a\n"
    "                           required or named call follows the tool's parameters)\n"
    "      --think on|off|low|medium|high   thinking models (qwen3, qwen35, gpt-oss): think\n"
    "                           first or answer at once, or with that effort (gpt-oss's\n"
    "                           levels; on for the others); the reasoning is shown dimmed\n"
    "                           (not a terminal: on stderr; --json: \"reasoning\" lines)\n"
    GEN_OPTIONS_HELP;

static const char chat_help[] =
    "  /help              this list\n"
    "  /bye               leave (also /exit, /quit, Ctrl-D)\n"
    "  /clear             forget the conversation (the --system message stays)\n"
    "  /set               show the sampling settings\n"
    "  /set NAME VALUE    temperature, top-k, top-p, min-p, seed, repeat-penalty,\n"
    "                     repeat-last-n, frequency-penalty, presence-penalty, max-tokens\n"
    "  /set greedy        temperature 0\n"
    "  /set format json   JSON replies (none: free text again); also json-schema FILE,\n"
    "                     grammar FILE\n"
    "  /result [ID] TEXT  the result of tool call ID (ID not needed when one call waits);\n"
    "                     after the last waiting call's result the model goes on\n"
    "  \"\"\"                start and end a message of several lines; a line ending in '\\'\n"
    "                     goes on on the next one\n"
    "  Ctrl-C             stop the current reply\n";

struct chat_extra {
    const char *system;
    uint64_t wait_usec;
    bool plain;
    char *tools;                /* --tools: the file's text (owned) */
    struct warm_gen_params *params;
};

static int chat_option(struct ctl *ctl, int opt, void *data) {
    struct chat_extra *x = data;
    if (opt == OPT_TOOLS) {
        size_t len;
        free(x->tools);
        x->tools = NULL;
        if (ctl_read_all(optarg, &x->tools, &len) < 0)
            return ctl_usage_error(ctl, chat_usage, "--tools: cannot read '%s'", optarg);
        x->params->tools_json = x->tools;
    } else if (opt == OPT_TOOL_CHOICE) {
        static const char *const names[] = {"auto", "none", "required"};
        x->params->tool_choice = WARM_TOOLS_FUNCTION;
        x->params->tool_choice_name = optarg;
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            if (strcmp(optarg, names[i]) == 0) {
                x->params->tool_choice = (enum warm_tool_choice)i;
                x->params->tool_choice_name = NULL;
            }
    } else if (opt == OPT_THINK) {
        static const char *const levels[] = {"", "on", "off", "low", "medium", "high"};
        x->params->think = WARM_THINK_DEFAULT;
        for (size_t i = 1; i < sizeof levels / sizeof levels[0]; i++)
            if (strcmp(optarg, levels[i]) == 0) x->params->think = (enum warm_think)i;
        if (x->params->think == WARM_THINK_DEFAULT)
            return ctl_usage_error(ctl, chat_usage, "--think: on, off, low, medium or high, "
                                   "not '%s'", optarg);
    } else if (opt == OPT_SYSTEM) x->system = optarg;
    else if (opt == OPT_PLAIN) x->plain = true;
    else if (opt == OPT_WAIT && ctl_parse_duration(optarg, &x->wait_usec) < 0)
        return ctl_usage_error(ctl, chat_usage, "--wait: '%s' is not a duration", optarg);
    return 0;
}

/* What a history entry owns: its content, an assistant message's tool calls (and their
 * strings), a tool message's call id and function name. */
struct owned {
    char *content;
    struct warm_tool_call *calls;
    size_t n_calls;
    char *id, *name;
};

struct history {
    struct warm_chat_message *v;
    struct owned *owned;        /* parallel to v */
    size_t n, cap;
};

static int history_add(struct history *h, const char *role, const char *content) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 16;
        struct warm_chat_message *v = realloc(h->v, cap * sizeof *v);
        if (!v) return -ENOMEM;
        h->v = v;
        struct owned *o = realloc(h->owned, cap * sizeof *o);
        if (!o) return -ENOMEM;
        h->owned = o;
        h->cap = cap;
    }
    char *copy = strdup(content);
    if (!copy) return -ENOMEM;
    h->owned[h->n] = (struct owned){.content = copy};
    h->v[h->n++] = (struct warm_chat_message){.role = role, .content = copy};
    return 0;
}

static void owned_free(struct owned *o) {
    for (size_t i = 0; i < o->n_calls; i++) {
        free((char *)o->calls[i].id);
        free((char *)o->calls[i].name);
        free((char *)o->calls[i].arguments);
    }
    free(o->calls);
    free(o->content);
    free(o->id);
    free(o->name);
}

static void history_truncate(struct history *h, size_t n) {
    while (h->n > n) owned_free(&h->owned[--h->n]);
}

/* Gives the last message (the assistant's reply) the calls the answer made, so the next
 * turn's template renders them before their results. */
static int history_set_calls(struct history *h, const struct warm_summary *s) {
    if (!s->n_tool_calls) return 0;
    struct owned *o = &h->owned[h->n - 1];
    o->calls = calloc(s->n_tool_calls, sizeof *o->calls);
    if (!o->calls) return -ENOMEM;
    for (size_t i = 0; i < s->n_tool_calls; i++, o->n_calls++) {
        const struct warm_tool_call *c = &s->tool_calls[i];
        struct warm_tool_call *d = &o->calls[i];
        d->id = c->id ? strdup(c->id) : NULL;
        d->name = strdup(c->name ? c->name : "");
        d->arguments = strdup(c->arguments ? c->arguments : "{}");
        if ((c->id && !d->id) || !d->name || !d->arguments) {
            o->n_calls++; /* freed with the rest */
            return -ENOMEM;
        }
    }
    h->v[h->n - 1].tool_calls = o->calls;
    h->v[h->n - 1].n_tool_calls = o->n_calls;
    return 0;
}

/* A role-tool message answering the call id of function name. */
static int history_add_result(struct history *h, const char *id, const char *name,
                              const char *text) {
    if (history_add(h, "tool", text) < 0) return -ENOMEM;
    struct owned *o = &h->owned[h->n - 1];
    o->id = strdup(id);
    o->name = strdup(name);
    if (!o->id || !o->name) {
        history_truncate(h, h->n - 1);
        return -ENOMEM;
    }
    h->v[h->n - 1].tool_call_id = o->id;
    h->v[h->n - 1].name = o->name;
    return 0;
}

/* The calls still waiting for a result: those of the last assistant message when only
 * tool messages follow it, less the ones they answer. Fills pending (up to max) and
 * returns how many there are. */
static size_t pending_calls(const struct history *h, const struct warm_tool_call **pending,
                            size_t max) {
    size_t a = h->n;
    while (a && strcmp(h->v[a - 1].role, "tool") == 0) a--;
    if (!a || strcmp(h->v[a - 1].role, "assistant") != 0) return 0;
    const struct warm_chat_message *m = &h->v[a - 1];
    size_t n = 0;
    for (size_t i = 0; i < m->n_tool_calls; i++) {
        const char *id = m->tool_calls[i].id;
        bool answered = !id;
        for (size_t j = a; j < h->n && !answered; j++)
            answered = h->v[j].tool_call_id && strcmp(h->v[j].tool_call_id, id) == 0;
        if (!answered && n < max) pending[n] = &m->tool_calls[i];
        if (!answered) n++;
    }
    return n;
}

/* Waits until the daemon answers again (a restart), reconnecting; false on timeout. */
static bool reconnect(struct ctl *ctl, uint64_t wait_usec) {
    uint64_t now = now_usec();
    uint64_t end = wait_usec > UINT64_MAX - now ? UINT64_MAX : now + wait_usec;
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

/* ---- chat: reading what the user types ----------------------------------------------- */

/* Where the line history lives: $XDG_STATE_HOME/warmctl/chat_history, else
 * ~/.local/state/warmctl/chat_history (directories made as needed); "" when neither. */
static void history_path(char *buf, size_t size) {
    const char *state = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
    char dir[4096];
    buf[0] = '\0';
    if (state && *state) snprintf(dir, sizeof dir, "%s/warmctl", state);
    else if (home && *home) snprintf(dir, sizeof dir, "%s/.local/state/warmctl", home);
    else return;
    /* mkdir -p, best effort: a chat without history is still a chat */
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        (void)mkdir(dir, 0700);
        *p = '/';
    }
    (void)mkdir(dir, 0700);
    snprintf(buf, size, "%s/chat_history", dir);
}

struct reader {
    bool edit;                  /* a terminal: libedit with history */
    char history_file[4200];
    char *line;                 /* getline's buffer */
    size_t line_cap;
};

static void reader_init(struct reader *rd, bool tty) {
    *rd = (struct reader){.edit = tty};
    if (!tty) return;
    using_history();
    stifle_history(1000);
    history_path(rd->history_file, sizeof rd->history_file);
    if (*rd->history_file) (void)read_history(rd->history_file);
}

static void reader_done(struct reader *rd) {
    if (rd->edit && *rd->history_file) (void)write_history(rd->history_file);
    free(rd->line);
}

/* One line without its newline, malloc'd; NULL at the end of input. *ret_interrupted:
 * Ctrl-C at the prompt (the line is then NULL and reading goes on). */
static char *reader_line(struct reader *rd, const char *prompt, bool *ret_interrupted) {
    *ret_interrupted = false;
    interrupted = 0;
    if (rd->edit) {
        char *l = readline(prompt);
        if (!l && interrupted) *ret_interrupted = true;
        return l;
    }
    ssize_t got = getline(&rd->line, &rd->line_cap, stdin);
    if (got < 0) {
        if (interrupted && !feof(stdin)) {
            clearerr(stdin);
            *ret_interrupted = true;
        }
        return NULL;
    }
    if (got && rd->line[got - 1] == '\n') rd->line[--got] = '\0';
    return strdup(rd->line);
}

/* Appends line (and a newline before it when buf is not empty) to *buf. */
static int buf_append(char **buf, size_t *len, const char *line, size_t n) {
    size_t need = *len + n + 2;
    char *nb = realloc(*buf, need);
    if (!nb) return -ENOMEM;
    *buf = nb;
    if (*len) nb[(*len)++] = '\n';
    memcpy(nb + *len, line, n);
    *len += n;
    nb[*len] = '\0';
    return 0;
}

/* The next message: one line, or the lines between triple quotes (""" ... """), or lines
 * ending in a backslash joined. NULL at the end of input (what was typed of an unfinished
 * message is returned first) or after Ctrl-C (*ret_interrupted). */
static char *read_message(struct reader *rd, bool prompts, bool *ret_interrupted) {
    static const char quotes[] = "\"\"\"";
    char *msg = NULL;
    size_t len = 0;
    bool quoted = false, more = false;
    for (;;) {
        char *l = reader_line(rd, !prompts ? "" : quoted || more ? "... " : ">>> ", ret_interrupted);
        if (!l) {
            if (*ret_interrupted) {
                free(msg);
                return NULL;
            }
            return msg;
        }
        if (rd->edit && *l) add_history(l);
        size_t n = strlen(l);
        const char *body = l;
        bool end = true;
        if (!quoted && !more && strncmp(l, quotes, 3) == 0) {
            quoted = true;
            body += 3, n -= 3;
            if (n == 0) { /* the opening line alone */
                free(l);
                continue;
            }
        }
        if (quoted) {
            end = n >= 3 && strcmp(body + n - 3, quotes) == 0;
            if (end) n -= 3;
        } else if (n && body[n - 1] == '\\') {
            n--;
            more = true;
            end = false;
        }
        /* the closing quotes alone end the message without another line */
        int r = end && quoted && n == 0 && msg ? 0 : buf_append(&msg, &len, body, n);
        free(l);
        if (r < 0) {
            free(msg);
            return NULL;
        }
        if (end) return msg ? msg : strdup("");
    }
}

/* /set NAME VALUE: the generation option of that name. */
static const struct {
    const char *name;
    int opt;
} set_names[] = {
    {"temperature", 't'}, {"top-k", OPT_TOP_K}, {"top-p", OPT_TOP_P}, {"min-p", OPT_MIN_P},
    {"seed", OPT_SEED}, {"repeat-penalty", OPT_REPEAT_PENALTY},
    {"repeat-last-n", OPT_REPEAT_LAST_N}, {"frequency-penalty", OPT_FREQUENCY_PENALTY},
    {"presence-penalty", OPT_PRESENCE_PENALTY}, {"max-tokens", 'n'}, {"greedy", OPT_GREEDY},
    {"format", OPT_FORMAT}, {"json-schema", OPT_JSON_SCHEMA}, {"grammar", OPT_GRAMMAR},
};

static void show_settings(const struct gen_opts *g) {
    struct warm_sampling s = g->have_sampling ? g->sampling : warm_sampling_default();
    char seed[32] = "random", max[32] = "no limit";
    if (s.seed) snprintf(seed, sizeof seed, "%" PRIu64, s.seed);
    if (g->params.max_tokens) snprintf(max, sizeof max, "%u", g->params.max_tokens);
    fprintf(stderr,
            "temperature %g, top-k %d, top-p %g, min-p %g, repeat-penalty %g, repeat-last-n %d, "
            "frequency-penalty %g, presence-penalty %g, seed %s, max-tokens %s\n",
            (double)s.temperature, s.top_k, (double)s.top_p, (double)s.min_p,
            (double)s.repeat_penalty, s.repeat_last_n, (double)s.frequency_penalty,
            (double)s.presence_penalty, seed, max);
}

/* Handles "/set ..." (args: what follows "/set"). */
static void chat_set(struct gen_opts *g, char *args) {
    char *save, *name = strtok_r(args, " \t", &save), *value = strtok_r(NULL, "", &save);
    while (value && (*value == ' ' || *value == '\t')) value++;
    if (!name) {
        show_settings(g);
        return;
    }
    int opt = -1;
    const char *names[sizeof set_names / sizeof set_names[0]];
    for (size_t i = 0; i < sizeof set_names / sizeof set_names[0]; i++) {
        names[i] = set_names[i].name;
        if (strcmp(name, set_names[i].name) == 0) opt = set_names[i].opt;
    }
    if (opt < 0) {
        const char *near = ctl_closest(name, names, sizeof names / sizeof names[0]);
        fprintf(stderr, "/set: unknown setting '%s'%s%s%s; /help lists them\n", name,
                near ? " (did you mean '" : "", near ? near : "", near ? "'?)" : "");
        return;
    }
    if (opt != OPT_GREEDY && (!value || !*value)) {
        fprintf(stderr, "/set %s: give a value\n", name);
        return;
    }
    struct gen_opts before = *g;
    if (gen_value(g, opt, value ? value : "") < 0) {
        *g = before;
        fprintf(stderr, "/set %s: '%s' is not %s\n", name, value, value_kind(opt));
        return;
    }
    gen_opts_finish(g);
    fprintf(stderr, "[%s set]\n", name);
}

/* Names the calls waiting for a result on stderr: " (waiting: ID NAME, ...)". */
static void print_waiting(const struct warm_tool_call *const *pending, size_t n) {
    fputs(" (waiting:", stderr);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, "%s %s %s", i ? "," : "", pending[i]->id, pending[i]->name);
    fputc(')', stderr);
}

/* Handles "/result [ID] TEXT" (args: what follows "/result"): the tool's answer to a call
 * the model made, as a role-tool message. Returns 1 when no call waits any more (the
 * model's turn), 0 when others still wait or the line was refused (said on stderr,
 * nothing changed), -ENOMEM. */
static int chat_result(struct ctl *ctl, struct history *h, char *args) {
    enum { MAX_SHOWN = 64 };
    const struct warm_tool_call *pending[MAX_SHOWN];
    size_t n = pending_calls(h, pending, MAX_SHOWN);
    size_t shown = n < MAX_SHOWN ? n : MAX_SHOWN;
    while (*args == ' ' || *args == '\t') args++;
    if (!n) {
        fprintf(stderr, "/result: no tool call is waiting for a result (the model's last "
                "reply made none, or all have one)\n");
        return 0;
    }
    /* The first word is an id when a waiting call has it, or when it looks like one
     * ("call_..."): a mistyped id must not become the result. */
    size_t w = strcspn(args, " \t");
    const struct warm_tool_call *call = NULL;
    for (size_t i = 0; i < shown && !call; i++)
        if (strlen(pending[i]->id) == w && strncmp(args, pending[i]->id, w) == 0) call = pending[i];
    const char *text = args;
    if (call) {
        text = args + w;
        while (*text == ' ' || *text == '\t') text++;
    } else if (w && strncmp(args, "call_", 5) == 0) {
        fprintf(stderr, "/result: no tool call '%.*s' is waiting for a result", (int)w, args);
        print_waiting(pending, shown);
        fputc('\n', stderr);
        return 0;
    } else if (n > 1) {
        fprintf(stderr, "/result: %zu tool calls are waiting; name one: /result ID TEXT", n);
        print_waiting(pending, shown);
        fputc('\n', stderr);
        return 0;
    } else {
        call = pending[0];
    }
    if (!*text) {
        fprintf(stderr, "/result: give the result of %s %s after the command\n", call->id,
                call->name);
        return 0;
    }
    if (history_add_result(h, call->id, call->name, text) < 0) return -ENOMEM;
    if (n == 1) return 1;
    if (!ctl->json)
        fprintf(stderr, "[result of %s added; %zu more call%s waiting]\n", call->id, n - 1,
                n == 2 ? "" : "s");
    return 0;
}

/* A model without a chat template: what to do instead, in the user's words. */
static int no_template(struct ctl *ctl, const char *model, const struct warm_error *err) {
    struct warm_error e = {.code = err->code};
    snprintf(e.message, sizeof e.message,
             "model '%s' has no chat template warmd supports; use `warmctl chat --plain %s` "
             "(a plain User:/Assistant: transcript) or `warmctl run %s PROMPT`", model, model,
             model);
    return ctl_fail(ctl, &e);
}

static int chat_main(struct ctl *ctl, struct gen_opts *g, int argc, char **argv) {
    static const struct option extra[] = {{"system", required_argument, NULL, OPT_SYSTEM},
                                          {"wait", required_argument, NULL, OPT_WAIT},
                                          {"plain", no_argument, NULL, OPT_PLAIN},
                                          {"tools", required_argument, NULL, OPT_TOOLS},
                                          {"tool-choice", required_argument, NULL, OPT_TOOL_CHOICE},
                                          {"think", required_argument, NULL, OPT_THINK}};
    struct chat_extra x = {.wait_usec = 30 * 1000000ULL, .params = &g->params};
    int r = gen_parse(ctl, g, argc, argv, extra, sizeof extra / sizeof extra[0], chat_usage, chat_option, &x);
    if (r >= 0) {
        free(x.tools);
        return r;
    }
    if (argc - optind != 1 || !ctl_client(ctl, &r)) {
        free(x.tools);
        return argc - optind != 1 ? ctl_usage_error(ctl, chat_usage, "name one model") : r;
    }
    g->params.model = argv[optind];
    catch_sigint();
    bool tty = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO) && !ctl->json;
    struct history h = {0};
    int ret = CTL_EXIT_OK;
    if (x.system && history_add(&h, "system", x.system) < 0) return ctl_fail_msg(ctl, "out of memory");
    size_t n_keep = h.n;        /* /clear keeps the system message */
    struct sink k = {.ctl = ctl, .at_line_start = true, .show_progress = progress_wanted(ctl),
                     .escape = ctl_escape_wanted(ctl), .model = g->params.model};
    g->params.on_progress = sink_progress;
    g->params.on_reasoning = sink_reasoning;
    struct reader rd;
    reader_init(&rd, tty);
    if (tty)
        printf("Chatting with %s through warmd at %s. Type /help for help, /bye or Ctrl-D to "
               "leave.\n", g->params.model, warm_client_socket(ctl->client));
    for (;;) {
        bool intr;
        char *line = read_message(&rd, tty, &intr);
        if (!line) {
            if (intr) {
                fputc('\n', stdout);
                continue;
            }
            break;
        }
        if (!*line) {
            free(line);
            continue;
        }
        /* A user message or the last result the calls waited for: the model's turn. */
        size_t n_before = h.n;
        bool answered = false;
        if (line[0] == '/' && !strchr(line, '\n')) {
            char *cmd = line + 1, *args = cmd + strcspn(cmd, " \t");
            if (*args) *args++ = '\0';
            bool done = false;
            if (strcmp(cmd, "bye") == 0 || strcmp(cmd, "exit") == 0 || strcmp(cmd, "quit") == 0) {
                done = true;
            } else if (strcmp(cmd, "clear") == 0 || strcmp(cmd, "reset") == 0) {
                history_truncate(&h, n_keep);
                if (!ctl->json) fprintf(stderr, "[conversation forgotten]\n");
            } else if (strcmp(cmd, "help") == 0 || strcmp(cmd, "?") == 0) {
                fputs(chat_help, stderr);
            } else if (strcmp(cmd, "set") == 0) {
                chat_set(g, args);
            } else if (strcmp(cmd, "result") == 0) {
                r = chat_result(ctl, &h, args);
                if (r < 0) {
                    free(line);
                    ret = ctl_fail_msg(ctl, "out of memory");
                    break;
                }
                answered = r == 1;
            } else {
                static const char *const cmds[] = {"help", "bye", "clear", "set", "result"};
                const char *near = ctl_closest(cmd, cmds, 5);
                fprintf(stderr, "unknown command '/%s'%s%s%s; /help lists them (a message that "
                        "starts with '/': begin it with a space)\n", cmd,
                        near ? " (did you mean '/" : "", near ? near : "", near ? "'?)" : "");
            }
            free(line);
            if (done) break;
            if (!answered) continue;
        } else {
            r = history_add(&h, "user", line);
            free(line);
            if (r < 0) {
                ret = ctl_fail_msg(ctl, "out of memory");
                break;
            }
        }
        struct warm_summary s;
        struct warm_error err;
        for (;;) {
            sink_reset(&k);
            r = chat_turn(ctl, g, &h, x.plain, &k, &s, &err);
            /* a daemon restarting may refuse for a moment what it served before */
            if (r >= 0 || (err.code != WARM_UNAVAILABLE && err.code != WARM_NOT_RUNNING &&
                           err.code != WARM_SOCKET_ACCESS))
                break;
            progress_clear(&k);
            if (!ctl->json && !k.at_line_start) fputc('\n', stdout);
            if (!reconnect(ctl, x.wait_usec)) break;
        }
        if (r < 0) {
            progress_clear(&k);
            if (!ctl->json && !k.at_line_start) fputc('\n', stdout);
            if (err.code == WARM_CANCELLED && interrupted) {
                /* Keep what was said so far: the next turn continues the conversation. */
                if (k.len) history_add(&h, "assistant", k.text);
                else history_truncate(&h, n_before);
                fprintf(stderr, "[stopped]\n");
                continue;
            }
            if (!x.plain && (err.code == WARM_UNIMPLEMENTED ||
                             (err.code == WARM_FAILED_PRECONDITION &&
                              strstr(err.message, "chat template"))))
                ret = no_template(ctl, g->params.model, &err);
            else
                ret = ctl_fail(ctl, &err);
            break;
        }
        sink_finish(&k, &s, g->verbose, gen_greedy(g));
        const char *reply = k.text ? k.text : "";
        while (x.plain && (*reply == ' ' || *reply == '\n')) reply++;
        if (k.out_of_memory || history_add(&h, "assistant", reply) < 0 ||
            history_set_calls(&h, &s) < 0) {
            warm_summary_done(&s);
            ret = ctl_fail_msg(ctl, "out of memory");
            break;
        }
        warm_summary_done(&s);
        /* A plain transcript puts the next "User:" on its own line. */
        char *last = h.owned[h.n - 1].content;
        for (size_t n = strlen(last); x.plain && n && (last[n - 1] == ' ' || last[n - 1] == '\n');)
            last[--n] = '\0';
    }
    reader_done(&rd);
    free(k.text);
    free(x.tools);
    history_truncate(&h, 0);
    free(h.v);
    free(h.owned);
    return ret;
}

int ctl_cmd_chat(struct ctl *ctl, int argc, char **argv) {
    struct gen_opts g = {0};
    int r = chat_main(ctl, &g, argc, argv);
    gen_opts_done(&g);
    return r;
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
        return ctl_usage_error(ctl, bench_usage, "--%s: '%s' is not a number above 0",
                               opt == OPT_PROMPT_TOKENS ? "prompt-tokens" : "reps", optarg);
    return 0;
}

struct bench_run {
    struct warm_summary s;
    uint64_t ttft_usec, wall_usec, stream_usec;
    uint32_t n_tokens;
};

static int bench_main(struct ctl *ctl, struct gen_opts *g, int argc, char **argv) {
    static const struct option extra[] = {
        {"prompt-tokens", required_argument, NULL, OPT_PROMPT_TOKENS},
        {"reps", required_argument, NULL, OPT_REPS}};
    struct bench_extra x = {.prompt_tokens = 128, .reps = 3};
    int r = gen_parse(ctl, g, argc, argv, extra, 2, bench_usage, bench_option, &x);
    if (r >= 0) return r;
    if (argc - optind != 1) return ctl_usage_error(ctl, bench_usage, "name one model");
    if (!g->have_sampling) {
        g->sampling = warm_sampling_default();
        g->sampling.temperature = 0;
        g->have_sampling = true;
        gen_opts_finish(g);
    }
    if (g->params.cache_mode == WARM_CACHE_USE) g->params.cache_mode = WARM_CACHE_SKIP;
    g->params.model = argv[optind];
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
        r = warm_tokenize(c, g->params.model, text, WARM_TOKENIZE_ADD_SPECIAL, &prompt, &n_prompt, &err);
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
        r = warm_generate(c, &g->params, NULL, prompt, n_prompt, sink_token, &k, &runs[i].s, &err);
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
            json_str(&j, "model", g->params.model);
            json_u64(&j, "prompt_tokens", n_prompt);
            json_u64(&j, "max_tokens", g->params.max_tokens);
            json_u64(&j, "warmup_load_usec", runs[0].s.load_usec);
            json_array_begin(&j, "runs");
        } else {
            printf("model %s: prompt %zu tokens, up to %u generated, %u runs after a warm-up\n",
                   g->params.model, n_prompt, g->params.max_tokens, x.reps);
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

int ctl_cmd_bench(struct ctl *ctl, int argc, char **argv) {
    struct gen_opts g = {.params.max_tokens = 32};
    int r = bench_main(ctl, &g, argc, argv);
    gen_opts_done(&g);
    return r;
}
