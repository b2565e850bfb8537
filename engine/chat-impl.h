/* chat-impl — what the chat family files share (engine/chat.c and its format files): the
 * family rows and the emitter that writes a conversation as text or as token ids. Private
 * to engine/. */
#pragma once

#include "engine/chat.h"

#include <jansson.h>

struct chat_out;

/* How a special string of a template is tokenized when the vocabulary is asked for it. */
enum chat_special_kind {
    SPECIAL_REQUIRED, /* the vocabulary must have it as one token (else ERR_VOCAB) */
    SPECIAL_TEXT_OK,  /* a token if the vocabulary has one, else plain text ("[INST]" v1) */
    SPECIAL_BOS,      /* that token, else the vocabulary's BOS, else nothing */
    SPECIAL_EOS,      /* that token, else the vocabulary's EOS */
};

struct chat_special {
    const char *text;
    enum chat_special_kind kind;
};

#define CHAT_MAX_SPECIALS 12

struct chat_family {
    const char *name;
    const char *marker;       /* detection: the template contains this */
    const char *bos;          /* rendered once first; NULL = none */
    /* Per role: the text before and after the content. prefix[SYSTEM] NULL: the family
     * has no system turn; the system content goes before the first user content with
     * system_sep after it. */
    const char *prefix[ENGINE_CHAT_ROLE_COUNT];
    const char *suffix[ENGINE_CHAT_ROLE_COUNT];
    const char *system_sep;
    const char *gen_prompt;   /* "" = none */
    const char *end_of_turn;
    bool alternate;           /* user, assistant, user, ... after the system message */
    bool trim;                /* contents are whitespace-trimmed (Jinja "| trim") */
    /* Thinking (chat.h's qwen3 and qwen35): how assistant turns carry their reasoning, and
     * what follows the generation prompt with thinking on and off */
    enum chat_think { THINK_NONE, THINK_QWEN3, THINK_QWEN35, THINK_HARMONY } think;
    /* Tools (chat.h): Qwen2.5's and Qwen3's Hermes JSON in <tool_call>, or Qwen3.5's XML */
    enum chat_tools {
        TOOLS_NONE, TOOLS_HERMES, TOOLS_QWEN35, TOOLS_LLAMA31, TOOLS_HARMONY, TOOLS_GEMMA4
    } tools;
    const char *gen_think_on, *gen_think_off;
    struct chat_special specials[CHAT_MAX_SPECIALS];
    /* A family whose turns do not fit the prefix/suffix rows renders the whole
     * conversation itself (after chat_check); NULL: the table-driven walk. */
    int (*walk)(struct chat_out *o, const struct engine_chat_msg *m, size_t n, unsigned flags);
    /* The same for a conversation with tools, tool calls or results only (gemma4). */
    int (*tools_walk)(struct chat_out *o, const struct engine_chat_msg *m, size_t n,
                      unsigned flags);
};

struct chat_out {
    const struct chat_family *fam;
    json_t *tools;                    /* the parsed tool list, NULL: none */
    const struct engine_vocab *vocab; /* NULL: render text */
    struct err_detail *d;
    int err;
    const struct engine_chat_opts *opts; /* never NULL */
    /* text mode */
    char *buf;
    size_t cap, len;
    /* token mode: plain text waiting to be tokenized, and the ids so far */
    char *run;
    size_t n_run, cap_run;
    int32_t *ids;
    size_t n_ids, cap_ids;
};

/* The emitter (engine/chat.c). Errors stick in o->err; every call after one is a no-op. */
/* Plain text: never special tokens. */
void chat_out_text(struct chat_out *o, const char *s, size_t n);
/* Template text: the family's special strings in it become their tokens. */
void chat_out_template(struct chat_out *o, const char *s);
/* x as Python's json.dumps(x, ensure_ascii=False) writes it (the templates' tojson), with
 * indent spaces per level (0: on one line). */
void chat_out_json_indent(struct chat_out *o, const json_t *x, int indent);
void chat_out_json(struct chat_out *o, const json_t *x);
char *chat_py_json(const json_t *x);
/* Message i's call k's arguments parsed (an object); NULL, with o->err set, otherwise. */
json_t *chat_call_args(struct chat_out *o, const struct engine_chat_tool_call *c, size_t i,
                       size_t k);
/* Python's str() of a JSON scalar (True, None, 2.5), as Jinja prints one. */
void chat_out_py_scalar(struct chat_out *o, const json_t *v);
bool chat_is_space(char c);
void chat_strip_space(const char **s, size_t *n);
char *chat_dup_n(const char *s, size_t n);

/* Llama 3.1/3.2 (engine/chat-llama.c). */
int chat_walk_llama31(struct chat_out *o, const struct engine_chat_msg *m, size_t n,
                      unsigned flags);
int chat_parse_llama31(const char *text, size_t len, struct engine_chat_parsed_call *calls,
                       size_t cap, size_t *ret_n, size_t *ret_content_len);
/* Gemma 4 with tools (engine/chat-gemma4.c). */
int chat_walk_gemma4(struct chat_out *o, const struct engine_chat_msg *m, size_t n,
                     unsigned flags);
int chat_parse_gemma4(const char *text, size_t len, struct engine_chat_parsed_call *calls,
                      size_t cap, size_t *ret_n, size_t *ret_content_len);
/* gpt-oss harmony (engine/chat-harmony.c). */
int chat_walk_harmony(struct chat_out *o, const struct engine_chat_msg *m, size_t n,
                      unsigned flags);

/* The two outputs of a reasoning split (engine_chat_think_split). */
struct chat_split_out {
    char *r, *a;
    size_t nr, na;
};
void chat_split_put(struct chat_split_out *so, bool reasoning, const char *s, size_t n);
void chat_harmony_byte(struct engine_chat_think *t, char c, struct chat_split_out *so);
void chat_harmony_end(struct engine_chat_think *t, struct chat_split_out *so);
