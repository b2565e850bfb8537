/* cmd-tokens — tokenize, detokenize. */
#include "warmctl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char tokenize_usage[] =
    "Usage: warmctl tokenize MODEL TEXT|- [--add-special] [--parse-special] [--pieces] [--json]\n"
    "\n"
    "Prints the token ids of TEXT (or of standard input with '-') under MODEL's tokenizer.\n"
    "  --add-special    add BOS/EOS as the model's tokenizer says\n"
    "  --parse-special  read special-token text such as <|im_start|> as the special token\n"
    "  --pieces         also print the text of each token (one line per token)\n"
    "With --json: {\"model\": ..., \"tokens\": [ids], \"pieces\": [texts] (with --pieces)}.\n";

int ctl_cmd_tokenize(struct ctl *ctl, int argc, char **argv) {
    static const struct option opts[] = {
        {"add-special", no_argument, NULL, 'a'},
        {"parse-special", no_argument, NULL, 'p'},
        {"pieces", no_argument, NULL, 'P'},
        CTL_COMMON_OPTIONS,
        {0}};
    unsigned flags = 0;
    bool pieces = false;
    optind = 0;
    int opt, r;
    while ((opt = ctl_getopt(ctl, argc, argv, "", opts)) != -1) {
        if (opt == 'a') flags |= WARM_TOKENIZE_ADD_SPECIAL;
        else if (opt == 'p') flags |= WARM_TOKENIZE_PARSE_SPECIAL;
        else if (opt == 'P') pieces = true;
        else if ((r = ctl_common_option(ctl, opt, tokenize_usage)) >= 0) return r;
    }
    if (argc - optind != 2) return ctl_usage_error(ctl, tokenize_usage, "give MODEL and TEXT");
    const char *model = argv[optind];
    char *text = NULL;
    if (strcmp(argv[optind + 1], "-") == 0) {
        if (ctl_read_all("-", &text, NULL) < 0) return ctl_fail_msg(ctl, "cannot read standard input");
    }
    struct warm_client *c = ctl_client(ctl, &r);
    if (!c) {
        free(text);
        return r;
    }
    struct warm_error err;
    int32_t *ids;
    size_t n;
    r = warm_tokenize(c, model, text ? text : argv[optind + 1], flags, &ids, &n, &err);
    free(text);
    if (r < 0) return ctl_fail(ctl, &err);
    /* Pieces: one Detokenize per token, so each shows its own text. */
    char **piece = NULL;
    size_t *piece_len = NULL;
    if (pieces && n) {
        piece = calloc(n, sizeof *piece);
        piece_len = calloc(n, sizeof *piece_len);
        if (!piece || !piece_len) {
            free(piece);
            free(piece_len);
            warm_free(ids);
            return ctl_fail_msg(ctl, "out of memory");
        }
        /* Alone, a token loses what the tokenizer drops at the start of a text (the
         * SentencePiece space); a token's piece is therefore what it adds after the token
         * before it: detok(prev, id) minus detok(prev). */
        char *single = NULL;
        size_t single_len = 0;
        for (size_t i = 0; i < n && r >= 0; i++) {
            char *pair = NULL, *prev = single;
            size_t pair_len = 0, prev_len = single_len;
            single = NULL;
            r = warm_detokenize(c, model, &ids[i], 1, 0, &single, &single_len, &err);
            if (r >= 0 && i > 0)
                r = warm_detokenize(c, model, &ids[i - 1], 2, 0, &pair, &pair_len, &err);
            if (r >= 0 && pair && pair_len >= prev_len && memcmp(pair, prev, prev_len) == 0) {
                memmove(pair, pair + prev_len, pair_len - prev_len + 1);
                piece[i] = pair;
                piece_len[i] = pair_len - prev_len;
                pair = NULL;
            } else if (r >= 0) {
                piece[i] = malloc(single_len + 1);
                if (!piece[i]) {
                    r = -WARM_NO_MEMORY;
                    err = (struct warm_error){.code = WARM_NO_MEMORY, .message = "out of memory"};
                } else {
                    memcpy(piece[i], single, single_len + 1);
                    piece_len[i] = single_len;
                }
            }
            warm_free(pair);
            warm_free(prev);
        }
        warm_free(single);
    }
    int ret = CTL_EXIT_OK;
    if (r < 0) {
        ret = ctl_fail(ctl, &err);
    } else if (ctl->json) {
        struct json j;
        json_begin(&j, stdout);
        json_str(&j, "model", model);
        json_array_begin(&j, "tokens");
        for (size_t i = 0; i < n; i++) json_i64(&j, NULL, ids[i]);
        json_array_end(&j);
        if (pieces) {
            json_array_begin(&j, "pieces");
            for (size_t i = 0; i < n; i++) json_strn(&j, NULL, piece[i], piece_len[i]);
            json_array_end(&j);
        }
        json_end(&j);
    } else if (pieces) {
        for (size_t i = 0; i < n; i++) {
            printf("%8d  '", ids[i]);
            ctl_write_text(stdout, piece[i], piece_len[i], ctl_escape_wanted(ctl));
            printf("'\n");
        }
    } else {
        for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        printf("\n");
    }
    if (piece)
        for (size_t i = 0; i < n; i++) warm_free(piece[i]);
    free(piece);
    free(piece_len);
    warm_free(ids);
    return ret;
}

static const char detokenize_usage[] =
    "Usage: warmctl detokenize MODEL ID... [--skip-special] [--json]\n"
    "\n"
    "Prints the text of the token ids under MODEL's tokenizer.\n"
    "  --skip-special   leave out the text of control tokens (BOS, EOS, ...)\n"
    "With --json: {\"model\": ..., \"text\": ...}.\n";

int ctl_cmd_detokenize(struct ctl *ctl, int argc, char **argv) {
    /* Parsed by hand: negative ids ("-1") are arguments, not options (the daemon answers
     * them with a message). */
    unsigned flags = 0;
    size_t n = 0;
    int32_t *ids = calloc((size_t)argc, sizeof *ids);
    if (!ids) return ctl_fail_msg(ctl, "out of memory");
    const char *model = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--skip-special") == 0) {
            flags |= WARM_DETOKENIZE_SKIP_SPECIAL;
        } else if (strcmp(a, "--json") == 0) {
            ctl->json = true;
        } else if (strcmp(a, "--socket") == 0 && i + 1 < argc) {
            ctl->socket = argv[++i];
        } else if (strncmp(a, "--socket=", 9) == 0) {
            ctl->socket = a + 9;
        } else if (strcmp(a, "--help") == 0) {
            free(ids);
            fputs(detokenize_usage, stdout);
            return CTL_EXIT_OK;
        } else if (strncmp(a, "--", 2) == 0) {
            free(ids);
            return ctl_usage_error(ctl, detokenize_usage, "unknown option '%s'", a);
        } else if (!model) {
            model = a;
        } else if (ctl_parse_i32(a, &ids[n++]) < 0) {
            free(ids);
            return ctl_usage_error(ctl, detokenize_usage, "'%s' is not a token id", a);
        }
    }
    int r;
    if (!model || !n) {
        free(ids);
        return ctl_usage_error(ctl, detokenize_usage, "give MODEL and at least one ID");
    }
    struct warm_client *c = ctl_client(ctl, &r);
    if (!c) {
        free(ids);
        return r;
    }
    struct warm_error err;
    char *text;
    size_t len;
    r = warm_detokenize(c, model, ids, n, flags, &text, &len, &err);
    free(ids);
    if (r < 0) return ctl_fail(ctl, &err);
    if (ctl->json) {
        struct json j;
        json_begin(&j, stdout);
        json_str(&j, "model", model);
        json_strn(&j, "text", text, len);
        json_end(&j);
    } else {
        ctl_write_text(stdout, text, len, ctl_escape_wanted(ctl));
        printf("\n");
    }
    warm_free(text);
    return CTL_EXIT_OK;
}
