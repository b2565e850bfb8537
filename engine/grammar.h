/* grammar — constrained decoding: a context-free grammar over bytes that masks the
 * sampler's candidates so the output always belongs to the language (JSON, a JSON Schema,
 * a tool call).
 *
 * Three objects:
 *   struct engine_grammar          a compiled grammar. Built from text in a small GBNF-like
 *                                  form (engine_grammar_parse) or from a JSON Schema
 *                                  (engine_grammar_from_schema). Immutable: any number of
 *                                  threads and matchers may share it.
 *   struct engine_grammar_vocab    the bytes each token of a vocabulary produces, as a trie
 *                                  in preorder, plus the end-of-generation ids. Immutable,
 *                                  shared the same way; build it once per loaded model.
 *   struct engine_grammar_matcher  one generation's parse state: a set of stacks of grammar
 *                                  positions (a pushdown automaton run on all parses at
 *                                  once), plus caches. One thread at a time. Borrows the
 *                                  grammar and the vocabulary: both must outlive it.
 *
 * Grammar text. Rules `name ::= alternatives`, one per definition, the start rule named
 * `root`. An alternative is a sequence of: "literal" (escapes \n \r \t \\ \" \xHH),
 * [byte class] ([a-z_], [^"\\], escapes as in literals plus \] \[ \- \^; classes are over
 * bytes, so a class holds ASCII and \xHH only: write UTF-8 characters as literals), `.` (any
 * byte), a rule name, or a (group); each may carry a postfix `*`, `+`, `?`, `{m}`, `{m,}` or
 * `{m,n}` (counts up to ENGINE_GRAMMAR_MAX_REPEAT). An empty alternative matches nothing.
 * `#` starts a comment to the end of the line. Left recursion is refused (the automaton
 * would not terminate); write repetition instead.
 *
 * Matching runs on the bytes a token produces (engine_vocab_piece_view without flags), so
 * byte-level BPE and SentencePiece vocabularies behave alike and one token may end in the
 * middle of a UTF-8 character. Control tokens spelled <|name|>, <|name> or <name|> (gpt-oss's
 * harmony tokens <|channel|>, <|message|>, <|constrain|>; Gemma 4's <|tool_call>; Llama 3's
 * headers) are walked by that text, so a grammar can ask for them (a forced tool call); a caller that reads the output as
 * text renders them (ENGINE_DETOK_SPECIAL) where that matters. Other tokens that produce no
 * bytes (control tokens) are never allowed, except the end-of-generation tokens, which are
 * allowed exactly when the grammar is complete (the text so far is a whole sentence of the
 * language).
 *
 * Speed: the matcher interns stacks and sets of stacks; each set gets a lazily filled
 * 256-entry transition table (a DFA built on demand) and, the first time it is masked,
 * a bitmap of the tokens it allows, found by one walk of the vocabulary trie that skips
 * every subtree whose prefix is already dead. A state seen before costs one pass over the
 * logits. Nesting deeper than ENGINE_GRAMMAR_MAX_DEPTH stack frames is treated as not
 * allowed (the path is dropped), never as an error. */
#pragma once

#include "base/base.h"
#include "engine/vocab.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ENGINE_GRAMMAR_MAX_TEXT_BYTES ((size_t)1 << 20) /* grammar text and schema text */
#define ENGINE_GRAMMAR_MAX_REPEAT 4096                  /* m and n of x{m,n} */
#define ENGINE_GRAMMAR_MAX_ELEMS ((int32_t)1 << 21)     /* compiled grammar size */
#define ENGINE_GRAMMAR_MAX_DEPTH 1024                   /* stack frames of one parse */

struct engine_grammar;
struct engine_grammar_vocab;
struct engine_grammar_matcher;

/* Compiles grammar text text[0..len) (start rule `root`). ERR_GRAMMAR with a detail naming
 * the line, column and problem (an unknown rule, left recursion, a bad escape, ...);
 * ERR_TOO_LARGE past the limits above; -ENOMEM. *ret is written on success only. */
int engine_grammar_parse(const char *text, size_t len, struct engine_grammar **ret,
                         struct err_detail *d);
void engine_grammar_free(struct engine_grammar *g);

/* JSON Schema (text, one JSON document) to grammar text. Every rule name starts with
 * prefix (may be ""), and the schema's own rule is `<prefix>root`, so a caller can embed
 * it in a larger grammar (a tool call: root ::= "<tool_call>\n" t-root "\n</tool_call>").
 * The text allows whitespace only inside the value, not around it.
 *
 * Supported: type (string, number, integer, boolean, null, object, array, and arrays of
 * these), properties (emitted in the order declared), required, additionalProperties
 * (absent or true: other keys, printable ASCII without '"' or '\', any value; false: none;
 * a schema: other keys with that value), items (one schema), minItems, maxItems, enum,
 * const, anyOf, oneOf (as anyOf: exclusivity is not enforced), allOf with one member,
 * $ref to local JSON pointers (#/$defs/x, #/definitions/x, #, ... recursion allowed),
 * minLength and maxLength (in characters; an escape is one), minimum, maximum,
 * exclusiveMinimum and exclusiveMaximum (numbers) on integers exactly; on numbers when the
 * bounds are integers (inclusive only; a bounded number has no exponent), format
 * date, time, date-time and uuid (other formats are annotations: any string). A schema
 * without type takes the type its keywords imply (properties: object, items: array, ...)
 * and is any JSON value if none does. true is any value; false is refused. Annotations
 * (title, description, default, examples, $schema, $id, $comment, ...) and unknown
 * keywords are ignored, as the specification says.
 *
 * Refused with ERR_GRAMMAR and a detail naming the keyword and its JSON pointer
 * ("unsupported keyword 'pattern' at /properties/zip"): pattern, patternProperties, if,
 * then, else, not, unevaluatedProperties, unevaluatedItems, dependentRequired,
 * dependentSchemas, dependencies, propertyNames, minProperties, maxProperties, contains,
 * minContains, maxContains, uniqueItems true, multipleOf, prefixItems, items as an array,
 * allOf with several members, $dynamicRef, $recursiveRef, non-local $ref, anyOf/oneOf next
 * to type-specific keywords, bounds on numbers that are not integers. Also ERR_GRAMMAR for
 * a schema that is not valid JSON or has a value of the wrong type for its keyword.
 * *ret_text (NUL-terminated, free() it) is written on success only. */
int engine_grammar_schema_text(const char *schema, size_t len, const char *prefix, char **ret_text,
                               struct err_detail *d);
/* engine_grammar_schema_text() with prefix "" and engine_grammar_parse(). For JSON mode
 * (format "json", response_format json_object) pass {"type":"object"}; {} or true is any
 * JSON value. */
int engine_grammar_from_schema(const char *schema, size_t len, struct engine_grammar **ret,
                               struct err_detail *d);

/* The bytes of every token of v (engine_vocab_piece_view, no flags) and its end-of-
 * generation ids (engine_vocab_is_eog). Does not borrow v. -ENOMEM. */
int engine_grammar_vocab_new(const struct engine_vocab *v, struct engine_grammar_vocab **ret);
/* The same from explicit pieces: token i produces piece[i][0..piece_len[i]); eog[0..n_eog)
 * are the end-of-generation ids. Copies everything. ERR_INVALID for an id out of range. */
int engine_grammar_vocab_new_pieces(int32_t n_tokens, const char *const *piece,
                                    const size_t *piece_len, const int32_t *eog, size_t n_eog,
                                    struct engine_grammar_vocab **ret);
void engine_grammar_vocab_free(struct engine_grammar_vocab *gv);
int32_t engine_grammar_vocab_n_tokens(const struct engine_grammar_vocab *gv);

/* A matcher at the start of g for the tokens of gv. Both are borrowed. -ENOMEM. */
int engine_grammar_matcher_new(const struct engine_grammar *g,
                               const struct engine_grammar_vocab *gv,
                               struct engine_grammar_matcher **ret);
void engine_grammar_matcher_free(struct engine_grammar_matcher *m);
/* The vocabulary size the matcher masks (engine_grammar_vocab_n_tokens of its vocab). */
int32_t engine_grammar_matcher_n_tokens(const struct engine_grammar_matcher *m);
/* Back to the start of the grammar (caches are kept). */
void engine_grammar_matcher_reset(struct engine_grammar_matcher *m);

/* Sets logits[i] = -INFINITY for every token i in [0, n_tokens) the grammar does not allow
 * next (logits has engine_grammar_vocab_n_tokens() entries). Returns the number of tokens
 * left allowed (> 0); ERR_GRAMMAR_STUCK when none is (no token's bytes continue the
 * output and the grammar is not complete: nothing was changed then); ERR_GRAMMAR_TOKEN
 * after an end-of-generation token was accepted; ERR_TOO_LARGE when the state outgrew the
 * matcher's memory bound; -ENOMEM. d names the problem. */
int engine_grammar_matcher_mask(struct engine_grammar_matcher *m, float *logits,
                                struct err_detail *d);
/* Whether token may come next (the mask's verdict for one token, without the trie walk). */
bool engine_grammar_matcher_allows(struct engine_grammar_matcher *m, int32_t token);
/* Advances over token. ERR_GRAMMAR_TOKEN (state unchanged, d names the token and its
 * bytes) when the grammar does not allow it; ERR_TOKEN for an id out of range. Accepting
 * an end-of-generation token ends the matcher: after it nothing is allowed. */
int engine_grammar_matcher_accept(struct engine_grammar_matcher *m, int32_t token,
                                  struct err_detail *d);
/* Advances over raw bytes (a forced prefix, tests). ERR_GRAMMAR_TOKEN (state unchanged)
 * when they are not a continuation. */
int engine_grammar_matcher_accept_bytes(struct engine_grammar_matcher *m, const char *s, size_t n,
                                        struct err_detail *d);
/* Whether the output so far is a complete sentence (end of generation would be allowed). */
bool engine_grammar_matcher_done(const struct engine_grammar_matcher *m);
