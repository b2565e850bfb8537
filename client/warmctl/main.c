/* warmctl — command-line client of warmd: global options, the command table, dispatch. */
#include "warmctl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct command {
    const char *name;
    int (*fn)(struct ctl *ctl, int argc, char **argv);
    const char *summary;
};

static const struct command commands[] = {
    {"status", ctl_cmd_status, "daemon version, uptime, configuration, who you are to it"},
    {"models", ctl_cmd_models, "list the models of the models directory"},
    {"show", ctl_cmd_show, "a model in detail: metadata, chat template, cache settings"},
    {"load", ctl_cmd_load, "load a model now and keep it resident (admins only)"},
    {"unload", ctl_cmd_unload, "unload a model (admins only)"},
    {"run", ctl_cmd_run, "complete a prompt, printing tokens as they arrive"},
    {"chat", ctl_cmd_chat, "interactive chat that keeps the conversation"},
    {"tokenize", ctl_cmd_tokenize, "text to token ids"},
    {"detokenize", ctl_cmd_detokenize, "token ids to text"},
    {"embed", ctl_cmd_embed, "embeddings of texts with an embedding model"},
    {"cache", ctl_cmd_cache, "prompt cache: stats, ls, purge, check (offline)"},
    {"metrics", ctl_cmd_metrics, "counters and gauges (Prometheus text)"},
    {"token", ctl_cmd_token, "bearer tokens for apps that reach warmd through warm-httpd"},
    {"bench", ctl_cmd_bench, "measure prefill and decode speed through the daemon"},
};

static void usage(FILE *f) {
    fprintf(f,
            "Usage: warmctl [--socket PATH] [--json] COMMAND [ARGS...]\n"
            "\n"
            "Talks to warmd, the local model service, over its Unix socket.\n"
            "\n"
            "Commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-11s %s\n", commands[i].name, commands[i].summary);
    fprintf(f,
            "\n"
            "Options (before or after the command):\n"
            "  --socket PATH  the daemon's socket (default: $WARM_SOCKET, else %s)\n"
            "  --json         machine-readable output: one JSON document per line\n"
            "  --help         this text; 'warmctl COMMAND --help' for a command\n"
            "  --version      print the version\n"
            "\n"
            "Exit status: 0 ok, 1 the request failed, 2 usage error, 3 warmd not reachable,\n"
            "4 the daemon does not implement the call, 5 'cache check' found problems.\n",
            WARM_DEFAULT_SOCKET);
}

/* Whether name begins with word's stem: word less its last letter when it has 5 or more,
 * at least 4 letters ("tokens": token and tokenize; "stat": status). */
static bool same_stem(const char *word, const char *name) {
    size_t n = strlen(word);
    if (n >= 5) n--;
    return n >= 4 && strncmp(word, name, n) == 0;
}

/* "unknown command" with the commands the user may have meant: the nearest typo and those
 * of the same stem, each with its summary when there are several ('tokens' may be 'token'
 * or 'tokenize'). */
static void unknown_command(const char *word) {
    const size_t n = sizeof commands / sizeof commands[0];
    const char *names[sizeof commands / sizeof commands[0]];
    for (size_t k = 0; k < n; k++) names[k] = commands[k].name;
    const char *typo = ctl_closest(word, names, n);
    const struct command *near[sizeof commands / sizeof commands[0]];
    size_t n_near = 0;
    for (size_t k = 0; k < n; k++)
        if (names[k] == typo || same_stem(word, names[k])) near[n_near++] = &commands[k];
    fprintf(stderr, "warmctl: unknown command '%s'", word);
    if (n_near == 1) fprintf(stderr, "; did you mean '%s'?", near[0]->name);
    if (n_near > 1) fprintf(stderr, "; did you mean one of these?");
    fputc('\n', stderr);
    for (size_t k = 0; n_near > 1 && k < n_near; k++)
        fprintf(stderr, "  %-11s %s\n", near[k]->name, near[k]->summary);
    fprintf(stderr, "Try 'warmctl --help' for the commands.\n");
}

int main(int argc, char **argv) {
    struct ctl ctl = {.prog = "warmctl"};
    int i = 1;
    for (; i < argc && argv[i][0] == '-' && argv[i][1]; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--json") == 0) {
            ctl.json = true;
        } else if (strcmp(a, "--socket") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "warmctl: --socket needs a path\n");
                return CTL_EXIT_USAGE;
            }
            ctl.socket = argv[++i];
        } else if (strncmp(a, "--socket=", 9) == 0) {
            ctl.socket = a + 9;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return CTL_EXIT_OK;
        } else if (strcmp(a, "--version") == 0) {
            printf("warmctl %s\n", warm_version());
            return CTL_EXIT_OK;
        } else if (strcmp(a, "--") == 0) {
            i++;
            break;
        } else {
            static const char *const globals[] = {"--json", "--socket", "--help", "--version"};
            char word[64];
            snprintf(word, sizeof word, "%.*s", (int)strcspn(a, "="), a);
            const char *near = ctl_closest(word, globals, sizeof globals / sizeof globals[0]);
            fprintf(stderr, "warmctl: unknown option '%s'", word);
            if (near) fprintf(stderr, "; did you mean '%s'?", near);
            fprintf(stderr, "\nTry 'warmctl --help'.\n");
            return CTL_EXIT_USAGE;
        }
    }
    if (i >= argc) {
        usage(stderr);
        return CTL_EXIT_USAGE;
    }
    const char *name = argv[i];
    if (strcmp(name, "help") == 0) {
        usage(stdout);
        return CTL_EXIT_OK;
    }
    for (size_t k = 0; k < sizeof commands / sizeof commands[0]; k++) {
        if (strcmp(commands[k].name, name) != 0) continue;
        ctl.command = name;
        int r = commands[k].fn(&ctl, argc - i, argv + i);
        warm_disconnect(ctl.client);
        return r;
    }
    unknown_command(name);
    return CTL_EXIT_USAGE;
}
