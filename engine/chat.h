/* chat — built-in chat templates. A model's tokenizer.chat_template is Jinja code; warmd
 * never executes it (DESIGN §3.2, reliability note G23). The template is only searched for
 * a marker string naming its family, and the conversation is rendered by the family's
 * table row below:
 *
 *   chatml   "<|im_start|>"         <|im_start|>{role}\n{content}<|im_end|>\n ...
 *                                   generation prompt <|im_start|>assistant\n
 *   llama3   "<|start_header_id|>"  <|begin_of_text|> once, then
 *                                   <|start_header_id|>{role}<|end_header_id|>\n\n
 *                                   {content|trim}<|eot_id|> ... generation prompt
 *                                   <|start_header_id|>assistant<|end_header_id|>\n\n
 *   gemma    "<start_of_turn>"      <bos> once, then <start_of_turn>user\n{content|trim}
 *                                   <end_of_turn>\n, assistant as "model"; a system message
 *                                   is prepended to the first user turn as "{system}\n\n"
 *                                   (Gemma 3's template); generation prompt
 *                                   <start_of_turn>model\n
 *   mistral  "[INST]"               Mistral-7B-Instruct v0.1/v0.2 ("v1"):
 *                                   <s>[INST] {user} [/INST]{assistant}</s>[INST] ...; a
 *                                   system message is prepended to the first user message
 *                                   as "{system}\n\n"; no generation prompt (the rendering
 *                                   ends with " [/INST]"). Llama 2 templates (they contain
 *                                   "<<SYS>>" as well) are not recognised.
 *   qwen3    "<|im_start|>" and     chatml; an assistant turn after the last user message
 *            "<think>"              holds its reasoning as <think>\n{reasoning}\n</think>\n\n
 *                                   before the content (where it has reasoning, or is the
 *                                   last message), earlier turns only their content (their
 *                                   reasoning is dropped, as Qwen3's template does); the
 *                                   reasoning is the message's own, else what the content
 *                                   holds before </think>; with thinking off the generation
 *                                   prompt is followed by <think>\n\n</think>\n\n
 *   qwen35   as qwen3, and          Qwen3.5: contents trimmed, every assistant turn after
 *            "<function="           the last user message with its think block, the
 *                                   generation prompt opens <think>\n (thinking on) or
 *                                   closes an empty one (off); a conversation needs a user
 *                                   message
 *   llama31  "Cutting Knowledge      Llama 3.1 and 3.2: <|begin_of_text|>, then always a system turn
 *            Date:"                 "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024
 *                                   \n\n" + the system text (trimmed); with tools
 *                                   "Environment: ipython\n" before it, and the tool list (each
 *                                   tool as JSON with indent 4) in the first user turn after the
 *                                   template's instructions; an assistant tool call is the turn
 *                                   {"name": "NAME", "parameters": ARGS} (one per message); a tool
 *                                   result an ipython turn holding the result as a JSON string;
 *                                   otherwise as llama3. The date is the templates' own default:
 *                                   Llama 3.2's template would print today's date when the
 *                                   renderer offers strftime_now, but a date that changes every
 *                                   day would change the first turn of every conversation at
 *                                   midnight and so void its whole cached prefix, and the same
 *                                   request would not render the same tokens twice.
 *   harmony  "<|channel|>"          gpt-oss: <|start|>system<|message|>{identity, knowledge
 *                                   cutoff, "Current date: " opts.date, "Reasoning: " effort,
 *                                   valid channels}<|end|>, then a developer message with the
 *                                   system text ("# Instructions") and the tools as a TypeScript
 *                                   namespace; user <|start|>user<|message|>..<|end|>; an
 *                                   assistant turn <|start|>assistant<|channel|>final<|message|>
 *                                   ..<|end|> (reasoning of earlier turns dropped; a tool call's
 *                                   reasoning kept until a final answer follows), a call
 *                                   <|start|>assistant to=functions.NAME<|channel|>commentary
 *                                   json<|message|>ARGS<|call|>, a result <|start|>functions.NAME
 *                                   to=assistant<|channel|>commentary<|message|>"JSON string"
 *                                   <|end|>; generation prompt <|start|>assistant
 *   gemma4   "<|turn>"              <bos> once, then <|turn>{role}\n{content|trim}<turn|>\n,
 *                                   assistant as "model", a system turn of its own
 *                                   (<|turn>system\n); generation prompt <|turn>model\n
 *                                   (Gemma 4's template without thinking; checked before
 *                                   gemma: some Gemma 4 templates mention <start_of_turn>).
 *                                   With tools, tool calls or results, exactly as
 *                                   google-gemma-4-31B-it.jinja (engine/chat-gemma4.c): the
 *                                   declarations in the system turn, calls
 *                                   <|tool_call>call:NAME{key:value}<tool_call|>, results in the
 *                                   same model turn, and the generation prompt's empty thought
 *                                   channel <|channel>thought\n<channel|>
 *
 * Messages: a system message may only come first; gemma and mistral need user and
 * assistant turns to alternate starting with user, and a generation prompt only after a
 * user turn. Anything else is -EINVAL with a message naming the message index.
 *
 * Escaping: engine_chat_tokenize() inserts the template's special tokens by id and
 * tokenizes message contents without special-token parsing, so a user writing
 * "<|im_end|>" gets the text, never the control token. */
#pragma once

#include "base/base.h"
#include "engine/gguf.h"
#include "engine/vocab.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum engine_chat_family {
    ENGINE_CHAT_CHATML,
    ENGINE_CHAT_LLAMA3,
    ENGINE_CHAT_GEMMA,
    ENGINE_CHAT_MISTRAL,
    ENGINE_CHAT_GEMMA4,
    ENGINE_CHAT_QWEN3,  /* chatml with Qwen3's thinking */
    ENGINE_CHAT_QWEN35, /* chatml with Qwen3.5's thinking */
    ENGINE_CHAT_LLAMA31, /* Llama 3.1/3.2: a date header, JSON tool calls, ipython results */
    ENGINE_CHAT_HARMONY, /* gpt-oss: channels, reasoning effort, to=functions.NAME calls */
    ENGINE_CHAT_FAMILY_COUNT,
    ENGINE_CHAT_NONE = ENGINE_CHAT_FAMILY_COUNT, /* absent or not recognised */
};

enum engine_chat_role {
    ENGINE_CHAT_SYSTEM,
    ENGINE_CHAT_USER,
    ENGINE_CHAT_ASSISTANT,
    ENGINE_CHAT_TOOL, /* a tool's result (families with tools only) */
    ENGINE_CHAT_ROLE_COUNT
};

/* A tool call an assistant turn made: the function's name and its arguments as a JSON
 * object (text). */
struct engine_chat_tool_call {
    const char *name;
    size_t name_len;
    const char *arguments;
    size_t arguments_len;
};

struct engine_chat_msg {
    enum engine_chat_role role;
    const char *content; /* len bytes, not necessarily NUL-terminated */
    size_t len;
    /* An assistant turn's reasoning (reasoning_len bytes), where the caller keeps it apart
     * (OpenAI reasoning_content, Ollama thinking); NULL: taken from the content's
     * <think>...</think>, as the templates do. Only thinking families read it. */
    const char *reasoning;
    size_t reasoning_len;
    /* An assistant turn's tool calls (families with tools only). */
    const struct engine_chat_tool_call *tool_calls;
    size_t n_tool_calls;
    /* A tool result: the function it answers (tool_name_len bytes; NULL: not known).
     * gemma4 writes it ("response:NAME{...}", "unknown" without one). */
    const char *tool_name;
    size_t tool_name_len;
};

/* The tools a conversation may call: a JSON array of OpenAI-shaped tools
 * ({"type": "function", "function": {"name", "description", "parameters"}}), as text;
 * written into the prompt as each family's template writes them (chatml, qwen3: Hermes
 * <tool_call> JSON; qwen35: XML <function=...>). NULL: no tools. */
struct engine_chat_tools {
    const char *json;
    size_t len;
};

/* gpt-oss's reasoning effort ("Reasoning: low|medium|high" in its system message). */
enum engine_chat_effort {
    ENGINE_CHAT_EFFORT_DEFAULT, /* the family's default (harmony: medium) */
    ENGINE_CHAT_EFFORT_LOW,
    ENGINE_CHAT_EFFORT_MEDIUM,
    ENGINE_CHAT_EFFORT_HIGH,
    ENGINE_CHAT_EFFORT_COUNT
};

/* What a rendering takes besides the messages; all optional (zero: none / the default). */
struct engine_chat_opts {
    struct engine_chat_tools tools;
    /* harmony's "Current date: YYYY-MM-DD" (10 bytes); NULL: today's date (UTC) */
    const char *date;
    enum engine_chat_effort effort;
};

/* "low", "medium", "high" to an effort; -EINVAL otherwise. */
int engine_chat_effort_parse(const char *name, enum engine_chat_effort *ret);
/* Whether the family has reasoning levels (harmony). */
bool engine_chat_has_effort(enum engine_chat_family fam);

enum engine_chat_flags {
    /* End with the opening of an assistant turn (the usual way to ask for a reply). */
    ENGINE_CHAT_ADD_GENERATION_PROMPT = 1u << 0,
    /* Leave the last message (the assistant's) open so the model continues it. */
    ENGINE_CHAT_CONTINUE_LAST = 1u << 1,
    /* Thinking families: the generation prompt closes an empty think block, so the model
     * answers at once (Qwen3's enable_thinking=false, Ollama think: false). */
    ENGINE_CHAT_NO_THINKING = 1u << 2,
};

/* The family whose marker the template text contains; ENGINE_CHAT_NONE for NULL, an empty
 * or an unknown template. Only searches for substrings: linear in len, any size. */
enum engine_chat_family engine_chat_detect(const char *tmpl, size_t len);
/* The family of f's tokenizer.chat_template (ENGINE_CHAT_NONE when absent or not a string);
 * without a known template, harmony for the gpt-oss architecture. */
enum engine_chat_family engine_chat_detect_gguf(const struct gguf_file *f);
/* "chatml", "llama3", "gemma", "mistral", "gemma4", "qwen3", "qwen35", "llama31",
 * "harmony"; "none" otherwise. */
const char *engine_chat_family_name(enum engine_chat_family fam);
/* The family's end-of-turn token text ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "</s>"). */
const char *engine_chat_end_of_turn(enum engine_chat_family fam);
/* "chatml, llama3, gemma, mistral": for messages that list what is recognised. */
const char *engine_chat_family_list(void);
/* Whether the family has a tool format (tools, tool calls, tool results). */
bool engine_chat_has_tools(enum engine_chat_family fam);
/* Whether the family writes reasoning in think blocks (engine_chat_think_*). */
bool engine_chat_thinks(enum engine_chat_family fam);
/* "system", "user", "assistant", "tool" to a role; -EINVAL otherwise. */
int engine_chat_role_parse(const char *name, enum engine_chat_role *ret);

/* Renders the conversation as text (flags: engine_chat_flags). Writes up to cap bytes to buf
 * (no NUL) and the full length to *ret_len; -ENOSPC when cap is too small (*ret_len is the
 * length needed), -EINVAL (with d) for a conversation the family cannot render. */
int engine_chat_render(enum engine_chat_family fam, const struct engine_chat_msg *msgs, size_t n,
                       unsigned flags, char *buf, size_t cap, size_t *ret_len,
                       struct err_detail *d);

/* engine_chat_render() and engine_chat_tokenize() with the tools the conversation may call
 * (tools NULL or tools->json NULL: none). -EINVAL (with d) for tools, tool calls or tool
 * messages in a family without tools, or tools that are not a JSON array of objects. */
int engine_chat_render_tools(enum engine_chat_family fam, const struct engine_chat_msg *msgs,
                             size_t n, const struct engine_chat_tools *tools, unsigned flags,
                             char *buf, size_t cap, size_t *ret_len, struct err_detail *d);
int engine_chat_tokenize_tools(enum engine_chat_family fam, const struct engine_vocab *v,
                               const struct engine_chat_msg *msgs, size_t n,
                               const struct engine_chat_tools *tools, unsigned flags, int32_t **ret,
                               size_t *ret_n, struct err_detail *d);

/* Tool calls in a finished answer of a family with tools (Hermes: <tool_call>{"name": ...,
 * "arguments": {...}}</tool_call>; qwen35: <tool_call><function=NAME><parameter=P>VALUE
 * </parameter></function></tool_call>; llama31: the answer is {"name": NAME, "parameters":
 * {...}}; harmony: the answer as engine_chat_think_split() writes it, Hermes calls).
 * Each call's name and arguments (a JSON object) are
 * written, NUL-terminated, to calls[i] (malloc'd strings the caller frees); *ret_n calls (at
 * most cap); *ret_content_len = the bytes of text before the first call (the answer's
 * content). A call that does not parse ends the list there (its text stays content). */
struct engine_chat_parsed_call {
    char *name, *arguments;
};
int engine_chat_parse_tool_calls(enum engine_chat_family fam, const char *text, size_t len,
                                 struct engine_chat_parsed_call *calls, size_t cap, size_t *ret_n,
                                 size_t *ret_content_len);
void engine_chat_parsed_calls_free(struct engine_chat_parsed_call *calls, size_t n);

/* ---- tool calls as they stream (engine/chat-scan.c) -------------------------------------
 * A family's calls read one byte at a time from where they may start (the text the caller
 * holds back from "<tool_call>" on; llama31: the whole answer), so a call's name can be sent
 * as soon as it is whole and its JSON arguments as they come (OpenAI's streamed tool-call
 * deltas). Hermes families and harmony (as engine_chat_think_split writes its calls) and
 * llama31 report their arguments byte by byte; qwen35's (XML) and gemma4's (Gemma's own
 * syntax) come whole with the parsed call. Text that does not follow the form ends the scan (ENGINE_CHAT_SCAN_FAIL from
 * then on); engine_chat_parse_tool_calls() stays the judge of what the finished answer
 * holds. A plain value, no resources. */
enum engine_chat_scan_event {
    ENGINE_CHAT_SCAN_NONE, /* part of the call's frame */
    ENGINE_CHAT_SCAN_NAME, /* a call's name is whole: s->name */
    ENGINE_CHAT_SCAN_ARG,  /* the byte belongs to the call's arguments (JSON text) */
    ENGINE_CHAT_SCAN_END,  /* the call is over (s->n_calls counts it) */
    ENGINE_CHAT_SCAN_FAIL, /* not (or no longer) the family's call form */
};
struct engine_chat_scan {
    int form, step, sub, depth;
    bool in_str, esc, failed, done;
    char name[128]; /* NUL-terminated after ENGINE_CHAT_SCAN_NAME */
    size_t n_name;
    char key[12];
    size_t n_key;
    unsigned n_calls;
};
void engine_chat_scan_begin(struct engine_chat_scan *s, enum engine_chat_family fam);
/* Where a family's tool calls start in an answer: "<tool_call>" (Hermes, qwen35, and
 * harmony as its split writes calls), "<|tool_call>" (gemma4); "" for llama31, whose call is
 * the whole answer; NULL for a family without tools. */
const char *engine_chat_call_open(enum engine_chat_family fam);
enum engine_chat_scan_event engine_chat_scan_byte(struct engine_chat_scan *s, char c);

/* Grammar text (engine/grammar.h, start rule root) that makes an answer of family fam tool
 * calls of tools (a JSON array of OpenAI-shaped tools, as engine_chat_tokenize_tools takes):
 * of the function named name (NULL: any of them), exactly one call (max_calls 1) or one or
 * more (0). Hermes families (chatml, qwen3): <tool_call>\n{"name": "NAME", "arguments":
 * ARGS}\n</tool_call>, ARGS the JSON of the function's "parameters" schema (absent: any
 * object); qwen35: <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n...
 * </function>\n</tool_call>, the schema's properties in the order declared (required ones
 * always, the others optional), a string-typed value free text without "</parameter>"
 * (or one of its enum values), any other the JSON of its schema. Calls are separated by
 * "\n". *ret_text (NUL-terminated, free() it) on success only. -EINVAL (with d) for a
 * family without tools, tools that are not named functions with object schemas, a name
 * not among them; ERR_GRAMMAR (with d naming tools[i]) for a schema the compiler refuses;
 * -ENOMEM. (engine/chat-grammar.c) */
int engine_chat_tool_grammar(enum engine_chat_family fam, const char *tools, size_t len,
                             const char *name, unsigned max_calls, char **ret_text,
                             struct err_detail *d);

/* engine_chat_render_tools() and engine_chat_tokenize_tools() with all the options (opts
 * NULL: none). -EINVAL (with d) also for a date that is not YYYY-MM-DD. */
int engine_chat_render_opts(enum engine_chat_family fam, const struct engine_chat_msg *msgs,
                            size_t n, const struct engine_chat_opts *opts, unsigned flags,
                            char *buf, size_t cap, size_t *ret_len, struct err_detail *d);
int engine_chat_tokenize_opts(enum engine_chat_family fam, const struct engine_vocab *v,
                              const struct engine_chat_msg *msgs, size_t n,
                              const struct engine_chat_opts *opts, unsigned flags, int32_t **ret,
                              size_t *ret_n, struct err_detail *d);

/* The same conversation as token ids for vocabulary v: the template's special tokens by id
 * (BOS as the vocabulary's BOS; chatml adds BOS only where the vocabulary asks for it),
 * every other run of text, message contents included, tokenized without special-token
 * parsing. *ret (malloc'd, the caller frees) and *ret_n on success. -EINVAL as in
 * engine_chat_render(), ERR_VOCAB when v lacks a token the family needs, -ENOMEM,
 * ERR_TOO_LARGE. */
int engine_chat_tokenize(enum engine_chat_family fam, const struct engine_vocab *v,
                         const struct engine_chat_msg *msgs, size_t n, unsigned flags,
                         int32_t **ret, size_t *ret_n, struct err_detail *d);

/* ---- reasoning apart from the answer ---------------------------------------------------
 * A thinking family's model writes <think>{reasoning}</think> before its answer (Qwen3; for
 * Qwen3.5 the generation prompt already opened the block). engine_chat_think_split() takes
 * the generated text piece by piece, as it streams, and says which bytes are reasoning and
 * which are the answer: the tags are dropped, and so is the whitespace that separates them
 * from the text. A tag cut between two pieces is held back until it is whole, so a piece
 * may return less than it was given (the rest comes with the next piece or with
 * engine_chat_think_end()). Families that do not think pass everything through as answer.
 * harmony (gpt-oss) is read by its channels: the caller passes the text of control tokens
 * (<|channel|>, <|message|>, <|end|>, ...) too; analysis is reasoning, final and commentary
 * without a recipient the answer, and a message to=functions.NAME a tool call, which goes to
 * the answer written as a Hermes call (<tool_call>\n{"name": "NAME", "arguments": ARGS}\n
 * </tool_call>) for engine_chat_parse_tool_calls(). */
struct engine_chat_think {
    int state;     /* before the block, at its start, in it, at the answer's start, in it */
    char tag[16];  /* the start of <think> or </think> (harmony: of an end tag), not yet known
                    * to be text */
    size_t n_tag;
    char ws[16];   /* reasoning whitespace that may turn out to end the block */
    size_t n_ws;
    /* harmony: the header of the message being read, and what its body is */
    bool harmony;
    int kind;
    char hdr[192];
    size_t n_hdr;
};
/* Starts a split for a generation of family fam rendered with flags (engine_chat_flags:
 * ENGINE_CHAT_NO_THINKING means the model answers at once). */
void engine_chat_think_begin(struct engine_chat_think *t, enum engine_chat_family fam,
                             unsigned flags);
/* Appends the reasoning bytes of text[0..len) to reasoning and the answer bytes to answer
 * (each up to 2 * len + ENGINE_CHAT_SPLIT_EXTRA bytes); *ret_r and *ret_a are their lengths. */
#define ENGINE_CHAT_SPLIT_EXTRA 512
void engine_chat_think_split(struct engine_chat_think *t, const char *text, size_t len,
                             char *reasoning, size_t *ret_r, char *answer, size_t *ret_a);
/* At the end of the generation: what was held back (at most ENGINE_CHAT_SPLIT_EXTRA bytes
 * each). */
void engine_chat_think_end(struct engine_chat_think *t, char *reasoning, size_t *ret_r,
                           char *answer, size_t *ret_a);
