/* warmctl — the command-line client of warmd on libwarm. This header is what the command
 * files share: the invocation context, option parsing helpers, exit codes, formatting.
 *
 * Exit codes: 0 success, 1 the daemon refused or failed the request, 2 usage error,
 * 3 warmd is not reachable (not running, or permission denied on its socket), 4 the
 * daemon does not implement the call, 5 the offline store check found problems. */
#pragma once

#include "json.h"
#include "warm.h"

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>

enum ctl_exit {
    CTL_EXIT_OK = 0,
    CTL_EXIT_FAILED = 1,
    CTL_EXIT_USAGE = 2,
    CTL_EXIT_UNREACHABLE = 3,
    CTL_EXIT_UNIMPLEMENTED = 4,
    CTL_EXIT_CHECK = 5,
};

struct ctl {
    const char *socket;         /* --socket; NULL = $WARM_SOCKET or the default */
    bool json;                  /* --json */
    const char *prog;           /* "warmctl" */
    const char *command;        /* "run", "cache ls", ... for messages */
    struct warm_client *client; /* connected lazily by ctl_client */
};

/* Options every command takes (--socket, --json, --help); append to a command's table
 * with CTL_COMMON_OPTIONS and hand unknown option values to ctl_common_option. */
enum { CTL_OPT_SOCKET = 0x1000, CTL_OPT_JSON, CTL_OPT_HELP };
#define CTL_COMMON_OPTIONS                                                                   \
    {"socket", required_argument, NULL, CTL_OPT_SOCKET},                                    \
        {"json", no_argument, NULL, CTL_OPT_JSON}, { "help", no_argument, NULL, CTL_OPT_HELP }

/* Handles a common option or an error from getopt_long. Returns -1 to go on, otherwise
 * the exit code (usage printed for --help: 0, for a bad option: 2). */
int ctl_common_option(struct ctl *ctl, int opt, const char *usage);
/* Prints "warmctl CMD: <message>" and a pointer to --help (not the whole usage); returns
 * CTL_EXIT_USAGE. */
int ctl_usage_error(struct ctl *ctl, const char *usage, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* getopt_long that names a bad option itself: "unknown option '--max-token'; did you mean
 * '--max-tokens'?", "'--top' is ambiguous: ...", "--stop needs a value"; returns '?' then. */
int ctl_getopt(struct ctl *ctl, int argc, char **argv, const char *shortopts,
               const struct option *longopts);
/* For a value the option's parser refused: "warmctl run: -n: 'abc' is not a number" (the
 * option as written, from argv and optarg); returns CTL_EXIT_USAGE. */
int ctl_bad_value(struct ctl *ctl, char **argv, const char *what);
/* The name of names[0..n) (NULL entries skipped) closest to word when it looks like a typo
 * of it, else NULL. */
const char *ctl_closest(const char *word, const char *const *names, size_t n);

/* The connection, made on first use. On failure prints the error and returns NULL with
 * *ret_exit set. */
struct warm_client *ctl_client(struct ctl *ctl, int *ret_exit);
/* Prints a libwarm error (to stderr, or as {"error":{...}} on stdout with --json) and
 * returns the exit code that matches it. */
int ctl_fail(struct ctl *ctl, const struct warm_error *err);
/* Prints a local error (bad file, bad value) the same way; returns CTL_EXIT_FAILED. */
int ctl_fail_msg(struct ctl *ctl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Value parsers; each returns 0 or -EINVAL and writes *ret on success only. */
int ctl_parse_u32(const char *s, uint32_t *ret);
int ctl_parse_u64(const char *s, uint64_t *ret);
int ctl_parse_i32(const char *s, int32_t *ret);
int ctl_parse_float(const char *s, float *ret);
/* "30s", "5m", "1h", "250ms", "2d", a bare number = seconds; "-1" or "forever" =
 * WARM_KEEP_ALIVE_FOREVER. */
int ctl_parse_duration(const char *s, uint64_t *ret_usec);

/* Human formatting into buf (returned). */
const char *ctl_fmt_bytes(char buf[32], uint64_t bytes);
const char *ctl_fmt_usec(char buf[32], uint64_t usec);

/* Whether text from the model goes to stdout escaped: stdout is a terminal and no --json. */
bool ctl_escape_wanted(const struct ctl *ctl);
/* Writes the UTF-8 text[0..len) to f; with escape, its control characters but \n and \t as
 * `cat -v` shows them (ESC as ^[, CR as ^M, DEL as ^?, U+009B as M-BM-^[), so a model's
 * output cannot move the cursor or change the terminal's settings. */
void ctl_write_text(FILE *f, const char *text, size_t len, bool escape);

/* Reads all of a stream ("-" = stdin, else a file) into a NUL-terminated heap string. */
int ctl_read_all(const char *path, char **ret, size_t *ret_len);

/* Summary of a generation, shared by run, chat and bench. */
void ctl_json_summary(struct json *j, const char *key, const struct warm_summary *s);
/* -v's summary line on stderr: load time (when the request loaded the model), prompt
 * reuse, timings, stop reason, and the seed unless the run was greedy. */
void ctl_print_summary(const struct warm_summary *s, bool greedy);

/* A model as JSON (an object under key; NULL inside arrays). */
void ctl_json_model(struct json *j, const char *key, const struct warm_model_info *m);

/* The commands: argc/argv start at the command's name. */
int ctl_cmd_status(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_metrics(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_models(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_show(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_load(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_unload(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_tokenize(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_embed(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_detokenize(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_run(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_chat(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_bench(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_cache(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_token(struct ctl *ctl, int argc, char **argv);
