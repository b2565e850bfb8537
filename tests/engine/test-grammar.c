/* Constrained decoding: grammar text errors, byte strings accepted and refused by grammars,
 * JSON and JSON Schema keywords (each supported one with a positive and a negative case,
 * each refused one named with its pointer), token masks and the sampler under a grammar,
 * and end-to-end generation with real vocabularies under random logits whose output must
 * parse (jansson) and validate against the schema (a small validator below). */
#include "test.h"

#include "engine/engine.h"

#include <errno.h>
#include <jansson.h>

/* ---- helpers ------------------------------------------------------------------------ */

/* A vocabulary of the 256 single bytes plus an end-of-generation token (id 256, no bytes):
 * token masks then speak about bytes. */
static struct engine_grammar_vocab *byte_vocab(void) {
    static char bytes[256];
    const char *piece[257];
    size_t len[257];
    for (int i = 0; i < 256; i++) {
        bytes[i] = (char)i;
        piece[i] = &bytes[i];
        len[i] = 1;
    }
    piece[256] = "";
    len[256] = 0;
    int32_t eog = 256;
    struct engine_grammar_vocab *gv = NULL;
    return engine_grammar_vocab_new_pieces(257, piece, len, &eog, 1, &gv) < 0 ? NULL : gv;
}

static struct engine_grammar *parse(const char *text) {
    struct engine_grammar *g = NULL;
    struct err_detail d = {0};
    int r = engine_grammar_parse(text, strlen(text), &g, &d);
    if (r < 0) fprintf(stderr, "grammar: %s\n", err_msg(&d, r));
    return g;
}

static struct engine_grammar *schema(const char *text) {
    struct engine_grammar *g = NULL;
    struct err_detail d = {0};
    int r = engine_grammar_from_schema(text, strlen(text), &g, &d);
    if (r < 0) fprintf(stderr, "schema %s: %s\n", text, err_msg(&d, r));
    return g;
}

/* 1 when the whole of s is a sentence of g, 0 when it is not, -1 on a setup failure. */
static int accepts(const struct engine_grammar *g, const char *s, size_t n) {
    struct engine_grammar_vocab *gv = byte_vocab();
    struct engine_grammar_matcher *m = NULL;
    if (!gv || engine_grammar_matcher_new(g, gv, &m) < 0) {
        engine_grammar_vocab_free(gv);
        return -1;
    }
    int ok =
        engine_grammar_matcher_accept_bytes(m, s, n, NULL) == 0 && engine_grammar_matcher_done(m);
    engine_grammar_matcher_free(m);
    engine_grammar_vocab_free(gv);
    return ok;
}

#define ACCEPTS(g, s) ASSERT_EQ(accepts(g, s, strlen(s)), 1)
#define REJECTS(g, s) ASSERT_EQ(accepts(g, s, strlen(s)), 0)

/* ---- grammar text ------------------------------------------------------------------- */

TEST(parse_errors) {
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"root ::= foo", "rule 'foo' is used but not defined"},
        {"start ::= \"a\"", "no rule named 'root'"},
        {"root ::= root \"a\" | \"b\"", "rule 'root' is left-recursive"},
        {"root ::= a\na ::= b \"x\"\nb ::= \"\" | a", "left-recursive"},
        {"root ::= (\"\")*", "group or repetition"},
        {"root ::= \"abc", "line 1, column 14: unterminated literal"},
        {"root ::= \"\\q\"", "unknown escape '\\q'"},
        {"root ::= [a-", "unterminated class"},
        {"root ::= []", "empty class"},
        {"root ::= [z-a]", "backwards"},
        {"root ::= [\xc3\xa9]", "non-ASCII byte in a class"},
        {"root ::= \"a\"{3,2}", "max < min"},
        {"root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1: rule 'root' is defined twice"},
        {"root ::= \"a\" )", "unexpected ')'"},
        {"root ::= (\"a\"", "expected ')'"},
        {"::= \"a\"", "expected a rule definition"},
        {"root ::= \"\\x4\"", "\\x needs two hex digits"},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct engine_grammar *g = NULL;
        struct err_detail d = {0};
        int r = engine_grammar_parse(cases[i].text, strlen(cases[i].text), &g, &d);
        if (r != ERR_GRAMMAR || !strstr(d.msg, cases[i].want))
            TEST_FAIL_("grammar %zu (%s): got %s \"%s\", expected a message with \"%s\"", i,
                       cases[i].text, err_name(r), d.msg, cases[i].want);
        ASSERT_TRUE(g == NULL);
    }
    struct engine_grammar *g = NULL;
    ASSERT_ERR(engine_grammar_parse("root ::= \"a\"{5000}", 18, &g, NULL), ERR_TOO_LARGE);
}

TEST(parse_language) {
    struct engine_grammar *g = parse("# a comment\n"
                                     "root ::= greet (\" \" name)? \"!\"{1,3} tail\n"
                                     "greet ::= \"hi\" | \"hello\"   # two ways\n"
                                     "name ::= [A-Z] [a-z]* digits\n"
                                     "digits ::= [0-9]+ | \n"
                                     "tail ::= [^a-z\\n]? .\n");
    ASSERT_TRUE(g);
    ACCEPTS(g, "hi!!A");
    ACCEPTS(g, "hello Bob7!x");
    ACCEPTS(g, "hi Al!!!Ax");
    ACCEPTS(g, "hi!\xff");
    REJECTS(g, "hi!!!!!!x"); /* six '!': the tail takes at most two bytes */
    REJECTS(g, "hi bob!x");  /* lower-case name */
    REJECTS(g, "hi!");       /* tail needs a byte */
    REJECTS(g, "hi!ax");     /* [^a-z\n] refuses 'a' before the last byte */
    REJECTS(g, "hey!x");
    engine_grammar_free(g);
    /* exact counts and right recursion */
    ASSERT_TRUE((g = parse("root ::= x{2} \"-\" x{0,2} \"-\" x{2,}\nx ::= \"ab\" | \"c\"")));
    ACCEPTS(g, "abc--cc");
    ACCEPTS(g, "cc-abab-ccabcab");
    REJECTS(g, "c--cc");
    REJECTS(g, "cc-ccc-cc");
    REJECTS(g, "cc--c");
    engine_grammar_free(g);
    ASSERT_TRUE((g = parse("root ::= \"(\" root \")\" | \"\"")));
    ACCEPTS(g, "((()))");
    ACCEPTS(g, "");
    REJECTS(g, "(()");
    engine_grammar_free(g);
}

/* ---- JSON and JSON Schema ----------------------------------------------------------- */

TEST(json_any) {
    struct engine_grammar *g = schema("{}");
    ASSERT_TRUE(g);
    static const char *const good[] = {
        "{}",
        "[]",
        "0",
        "-1.5e+10",
        "\"a\\u00e9\\n\\\"\"",
        "true",
        "null",
        "{\"a\": [1, 2, {\"b\": null}], \"c\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"}",
        "[\n  1,\n  2\n]",
        "\"\\ud83d\\ude00\"",
    };
    static const char *const bad[] = {
        "{\"a\":}", "[1,]", "01",        "\"\x01\"", "\"\xc3\"",    "\"\xed\xa0\x80\"",
        "{'a':1}",  "{} x", "[1 2]",     "tru",      "\"\\ud83d\"", "\"\\x41\"",
        "1.",       "-",    "{\"a\" 1}", " {}",
    };
    for (size_t i = 0; i < ARRAY_SIZE(good); i++) {
        if (accepts(g, good[i], strlen(good[i])) != 1) TEST_FAIL_("refused %s", good[i]);
    }
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        if (accepts(g, bad[i], strlen(bad[i])) != 0) TEST_FAIL_("accepted %s", bad[i]);
    }
    engine_grammar_free(g);
    ASSERT_TRUE((g = schema("{\"type\": \"object\"}")));
    ACCEPTS(g, "{\"k\": [true]}");
    REJECTS(g, "[]");
    REJECTS(g, "1");
    engine_grammar_free(g);
}

struct schema_case {
    const char *schema, *good, *bad;
};

TEST(schema_keywords) {
    static const struct schema_case cases[] = {
        {"{\"type\":\"string\"}", "\"x\"", "1"},
        {"{\"type\":\"number\"}", "-0.5e3", "\"1\""},
        {"{\"type\":\"integer\"}", "-12", "1.5"},
        {"{\"type\":\"boolean\"}", "false", "0"},
        {"{\"type\":\"null\"}", "null", "false"},
        {"{\"type\":[\"integer\",\"null\"]}", "null", "\"a\""},
        {"{\"type\":[\"integer\",\"null\"]}", "7", "true"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{}}}",
         "{\"a\": 1, \"b\": [2]}", "{\"a\": \"x\"}"},
        /* properties come in the declared order */
        {"{\"properties\":{\"a\":{},\"b\":{}},\"additionalProperties\":false}", "{\"a\":1,\"b\":2}",
         "{\"b\":2,\"a\":1}"},
        {"{\"properties\":{\"a\":{},\"b\":{}},\"required\":[\"b\"],"
         "\"additionalProperties\":false}",
         "{\"b\":2}", "{\"a\":1}"},
        {"{\"properties\":{\"a\":{}},\"additionalProperties\":false}", "{}", "{\"c\":1}"},
        /* absent or true additionalProperties: other keys, but never a declared one again */
        {"{\"properties\":{\"a\":{\"type\":\"null\"}}}", "{\"a\":null,\"ab\":1,\"\":2}",
         "{\"a\":null,\"a\":1}"},
        {"{\"properties\":{\"a\":{}},\"additionalProperties\":true}", "{\"zz\":{}}",
         "{\"a\":1,\"a\":2}"},
        {"{\"additionalProperties\":{\"type\":\"integer\"}}", "{\"x\":1,\"y\":2}", "{\"x\":\"s\"}"},
        {"{\"required\":[\"id\"],\"additionalProperties\":false}", "{\"id\":[]}", "{}"},
        {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}", "[1, 2, 3]", "[1, \"2\"]"},
        {"{\"items\":{},\"minItems\":2}", "[1,2]", "[1]"},
        {"{\"items\":{},\"maxItems\":2}", "[1,2]", "[1,2,3]"},
        {"{\"items\":{},\"maxItems\":0}", "[]", "[1]"},
        {"{\"enum\":[\"red\",1,null,{\"a\":1}]}", "{\"a\":1}", "\"blue\""},
        {"{\"enum\":[\"red\",1,null]}", "null", "\"Red\""},
        {"{\"const\":\"v1\"}", "\"v1\"", "\"v2\""},
        {"{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\"}]}", "\"s\"", "true"},
        {"{\"oneOf\":[{\"const\":1},{\"const\":2}]}", "2", "3"},
        {"{\"allOf\":[{\"type\":\"boolean\"}]}", "true", "null"},
        {"{\"$defs\":{\"n\":{\"type\":\"integer\"}},\"items\":{\"$ref\":\"#/$defs/n\"}}", "[1]",
         "[\"1\"]"},
        {"{\"definitions\":{\"n\":{\"type\":\"integer\"}},\"$ref\":\"#/definitions/n\"}", "5",
         "[]"},
        /* recursion through a reference */
        {"{\"$defs\":{\"t\":{\"properties\":{\"k\":{\"type\":\"array\",\"items\":{\"$ref\":"
         "\"#/$defs/t\"}}},\"additionalProperties\":false}},\"$ref\":\"#/$defs/t\"}",
         "{\"k\":[{\"k\":[{}]},{}]}", "{\"k\":[1]}"},
        {"{\"type\":\"string\",\"minLength\":2}", "\"\xc3\xa9\\n\"", "\"\xc3\xa9\""},
        {"{\"type\":\"string\",\"maxLength\":2}", "\"\\u00e9b\"", "\"abc\""},
        {"{\"type\":\"integer\",\"minimum\":-5,\"maximum\":123}", "-5", "-6"},
        {"{\"type\":\"integer\",\"minimum\":-5,\"maximum\":123}", "123", "124"},
        {"{\"type\":\"integer\",\"minimum\":-5,\"maximum\":123}", "99", "1000"},
        {"{\"type\":\"integer\",\"exclusiveMinimum\":0}", "1", "0"},
        {"{\"type\":\"integer\",\"exclusiveMaximum\":11,\"minimum\":9.5}", "10", "9"},
        {"{\"type\":\"integer\",\"exclusiveMaximum\":11,\"minimum\":9.5}", "10", "11"},
        {"{\"type\":\"integer\",\"maximum\":-10}", "-10", "-9"},
        {"{\"type\":\"integer\",\"minimum\":10}", "1000000", "9"},
        {"{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", "0.25", "1.5"},
        {"{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", "1.000", "1.01"},
        {"{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", "0", "-0.5"},
        {"{\"type\":\"number\",\"minimum\":-2,\"maximum\":-1}", "-1.5", "-0.5"},
        {"{\"type\":\"number\",\"minimum\":-2,\"maximum\":-1}", "-2.0", "-2.5"},
        {"{\"type\":\"number\",\"minimum\":-2,\"maximum\":-1}", "-1", "1e0"},
        {"{\"type\":\"string\",\"format\":\"date\"}", "\"2024-02-29\"", "\"2024-13-01\""},
        {"{\"type\":\"string\",\"format\":\"date-time\"}", "\"2024-02-29T23:59:01.5Z\"",
         "\"2024-02-29 23:59:01Z\""},
        {"{\"type\":\"string\",\"format\":\"uuid\"}", "\"123e4567-e89b-12d3-a456-426614174000\"",
         "\"123e4567e89b12d3a456426614174000\""},
        {"{\"type\":\"string\",\"format\":\"email\"}", "\"anything\"", "1"},
        {"{\"type\":\"string\",\"title\":\"t\",\"description\":\"d\",\"x-custom\":1}", "\"a\"",
         "2"},
        {"true", "[1]", "[1"},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct engine_grammar *g = schema(cases[i].schema);
        if (!g) TEST_FAIL_("schema %zu did not compile", i);
        int good = accepts(g, cases[i].good, strlen(cases[i].good));
        int bad = accepts(g, cases[i].bad, strlen(cases[i].bad));
        engine_grammar_free(g);
        if (good != 1) TEST_FAIL_("schema %s refused %s", cases[i].schema, cases[i].good);
        if (bad != 0) TEST_FAIL_("schema %s accepted %s", cases[i].schema, cases[i].bad);
    }
}

TEST(schema_refused) {
    static const struct {
        const char *schema, *keyword, *pointer;
    } cases[] = {
        {"{\"type\":\"string\",\"pattern\":\"^a\"}", "'pattern'", "the root"},
        {"{\"properties\":{\"zip\":{\"type\":\"string\",\"pattern\":\"[0-9]+\"}}}", "'pattern'",
         "at /properties/zip"},
        {"{\"patternProperties\":{}}", "'patternProperties'", "root"},
        {"{\"items\":{\"if\":{},\"then\":{}}}", "'if'", "at /items"},
        {"{\"anyOf\":[{},{\"not\":{}}]}", "'not'", "at /anyOf/1"},
        {"{\"unevaluatedProperties\":false}", "'unevaluatedProperties'", "root"},
        {"{\"items\":{},\"unevaluatedItems\":false}", "'unevaluatedItems'", "root"},
        {"{\"$defs\":{\"a/b\":{\"minProperties\":1}},\"$ref\":\"#/$defs/a~1b\"}", "'minProperties'",
         "at /$defs/a~1b"},
        {"{\"type\":\"array\",\"uniqueItems\":true}", "'uniqueItems'", "root"},
        {"{\"type\":\"array\",\"items\":[{},{}]}", "'items' as an array", "root"},
        {"{\"type\":\"integer\",\"multipleOf\":2}", "'multipleOf'", "root"},
        {"{\"allOf\":[{},{}]}", "'allOf'", "root"},
        {"{\"$ref\":\"http://example.com/s.json\"}", "'$ref'", "root"},
        {"{\"type\":\"object\",\"anyOf\":[{},{}]}", "'type' next to 'anyOf'", "root"},
        {"{\"type\":\"number\",\"minimum\":0.5}", "'minimum' with a non-integer bound", "root"},
        {"{\"type\":\"number\",\"exclusiveMinimum\":0}", "'exclusiveMinimum'", "root"},
        {"{\"properties\":{\"a\":{\"prefixItems\":[]}}}", "'prefixItems'", "/properties/a"},
        {"{\"dependentRequired\":{}}", "'dependentRequired'", "root"},
        {"{\"propertyNames\":{}}", "'propertyNames'", "root"},
        {"{\"type\":\"array\",\"contains\":{}}", "'contains'", "root"},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        char *text = NULL;
        struct err_detail d = {0};
        int r = engine_grammar_schema_text(cases[i].schema, strlen(cases[i].schema), "", &text, &d);
        free(text);
        if (r != ERR_GRAMMAR || !strstr(d.msg, cases[i].keyword) ||
            !strstr(d.msg, cases[i].pointer))
            TEST_FAIL_("schema %s: got %s \"%s\", expected %s at %s", cases[i].schema, err_name(r),
                       d.msg, cases[i].keyword, cases[i].pointer);
    }
    /* malformed schemas */
    static const struct {
        const char *schema, *want;
    } bad[] = {
        {"{\"type\":", "not valid JSON"},
        {"false", "allows no value"},
        {"{\"type\":\"strin\"}", "unknown type 'strin'"},
        {"{\"type\":\"string\",\"minLength\":-1}", "'minLength' must be a non-negative integer"},
        {"{\"type\":\"string\",\"maxLength\":100000}", "above the supported"},
        {"{\"$ref\":\"#/$defs/missing\"}", "points at nothing"},
        {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "no integer"},
        {"{\"properties\":{\"a\":{\"required\":[1]}}}", "/properties/a/required/0"},
        {"{\"a\":1,\"a\":2}", "not valid JSON"},
    };
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        struct engine_grammar *g = NULL;
        struct err_detail d = {0};
        int r = engine_grammar_from_schema(bad[i].schema, strlen(bad[i].schema), &g, &d);
        if (r != ERR_GRAMMAR || !strstr(d.msg, bad[i].want))
            TEST_FAIL_("schema %s: got %s \"%s\", expected \"%s\"", bad[i].schema, err_name(r),
                       d.msg, bad[i].want);
    }
}

/* The schema text embeds under a prefix: a tool call built around it. */
TEST(schema_prefix_tool_call) {
    const char *args = "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},"
                       "\"required\":[\"city\"],\"additionalProperties\":false}";
    char *text = NULL;
    struct err_detail d = {0};
    ASSERT_OK_D(engine_grammar_schema_text(args, strlen(args), "t0-", &text, &d), &d);
    size_t n = strlen(text) + 256;
    char *full = malloc(n);
    ASSERT_TRUE(full);
    snprintf(full, n,
             "root ::= \"<tool_call>\\n{\\\"name\\\": \\\"weather\\\", \\\"arguments\\\": \" "
             "t0-root \"}\\n</tool_call>\"\n%s",
             text);
    free(text);
    struct engine_grammar *g = parse(full);
    free(full);
    ASSERT_TRUE(g);
    ACCEPTS(g, "<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Oslo\"}}\n"
               "</tool_call>");
    REJECTS(g, "<tool_call>\n{\"name\": \"weather\", \"arguments\": {}}\n</tool_call>");
    engine_grammar_free(g);
}

/* ---- masks and the sampler ---------------------------------------------------------- */

TEST(mask_bytes) {
    struct engine_grammar *g = parse("root ::= \"ab\" | \"ac\" | \"b\"*");
    struct engine_grammar_vocab *gv = byte_vocab();
    struct engine_grammar_matcher *m = NULL;
    ASSERT_TRUE(g && gv);
    ASSERT_OK(engine_grammar_matcher_new(g, gv, &m));
    float l[257];
    for (int i = 0; i < 257; i++) l[i] = 1;
    ASSERT_EQ(engine_grammar_matcher_mask(m, l, NULL), 3); /* 'a', 'b', and the end */
    for (int i = 0; i < 257; i++)
        if ((i == 'a' || i == 'b' || i == 256) != (l[i] == 1)) TEST_FAIL_("token %d", i);
    ASSERT_OK(engine_grammar_matcher_accept(m, 'a', NULL));
    ASSERT_TRUE(!engine_grammar_matcher_done(m));
    ASSERT_TRUE(engine_grammar_matcher_allows(m, 'c') && !engine_grammar_matcher_allows(m, 256));
    struct err_detail d = {0};
    ASSERT_ERR(engine_grammar_matcher_accept(m, 256, &d), ERR_GRAMMAR_TOKEN);
    ASSERT_TRUE(strstr(d.msg, "before the output is complete"));
    ASSERT_ERR(engine_grammar_matcher_accept(m, 'a', &d), ERR_GRAMMAR_TOKEN);
    ASSERT_TRUE(strstr(d.msg, "token 97 (\"a\") is not allowed"));
    ASSERT_ERR(engine_grammar_matcher_accept(m, 257, &d), ERR_TOKEN);
    ASSERT_OK(engine_grammar_matcher_accept(m, 'c', NULL));
    for (int i = 0; i < 257; i++) l[i] = 1;
    ASSERT_EQ(engine_grammar_matcher_mask(m, l, NULL), 1);
    ASSERT_TRUE(l[256] == 1 && isinf(l['c']));
    ASSERT_OK(engine_grammar_matcher_accept(m, 256, NULL));
    ASSERT_ERR(engine_grammar_matcher_mask(m, l, NULL), ERR_GRAMMAR_TOKEN);
    ASSERT_ERR(engine_grammar_matcher_accept(m, 'b', NULL), ERR_GRAMMAR_TOKEN);
    engine_grammar_matcher_reset(m);
    ASSERT_OK(engine_grammar_matcher_accept_bytes(m, "bbbb", 4, NULL));
    ASSERT_TRUE(engine_grammar_matcher_done(m));
    engine_grammar_matcher_free(m);
    engine_grammar_free(g);

    /* a byte no token produces: stuck, with the logits untouched */
    ASSERT_TRUE((g = parse("root ::= \"a\" \"\\xff\"")));
    const char *piece[3] = {"a", "b", ""};
    size_t len[3] = {1, 1, 0};
    int32_t eog = 2;
    struct engine_grammar_vocab *small = NULL;
    ASSERT_OK(engine_grammar_vocab_new_pieces(3, piece, len, &eog, 1, &small));
    ASSERT_OK(engine_grammar_matcher_new(g, small, &m));
    ASSERT_OK(engine_grammar_matcher_accept(m, 0, NULL));
    float l3[3] = {1, 2, 3};
    ASSERT_ERR(engine_grammar_matcher_mask(m, l3, &d), ERR_GRAMMAR_STUCK);
    ASSERT_TRUE(l3[0] == 1 && l3[1] == 2 && l3[2] == 3);
    engine_grammar_matcher_free(m);
    engine_grammar_vocab_free(small);
    engine_grammar_vocab_free(gv);
    engine_grammar_free(g);
}

TEST(sampler_grammar) {
    /* tokens: "{", "}", "{}", "x", " ", end */
    const char *piece[6] = {"{", "}", "{}", "x", " ", ""};
    size_t len[6] = {1, 1, 2, 1, 1, 0};
    int32_t eog = 5;
    struct engine_grammar_vocab *gv = NULL;
    struct engine_grammar *g = schema("{\"type\":\"object\",\"additionalProperties\":false}");
    struct engine_grammar_matcher *m = NULL;
    ASSERT_TRUE(g);
    ASSERT_OK(engine_grammar_vocab_new_pieces(6, piece, len, &eog, 1, &gv));
    ASSERT_OK(engine_grammar_matcher_new(g, gv, &m));
    struct engine_sampler_params p;
    engine_sampler_params_default(&p);
    struct engine_sampler *s = NULL, *wrong = NULL;
    ASSERT_OK(engine_sampler_new(&p, 6, &s));
    ASSERT_OK(engine_sampler_new(&p, 7, &wrong));
    ASSERT_ERR(engine_sampler_set_grammar(wrong, m), ERR_INVALID);
    engine_sampler_free(wrong);
    ASSERT_OK(engine_sampler_set_grammar(s, m));
    /* prompt tokens do not move the grammar */
    engine_sampler_accept(s, 3);
    engine_sampler_accept(s, 1);
    const float l[6] = {1, 9, 2, 8, 0, 7};
    ASSERT_EQ(engine_sampler_sample(s, l, NULL), 2); /* "{}": 'x' and '}' are ruled out */
    ASSERT_OK(engine_sampler_accept_generated(s, 2, NULL));
    ASSERT_EQ(engine_sampler_sample(s, l, NULL), 5); /* complete: the end beats ' ' */
    struct err_detail d = {0};
    ASSERT_ERR(engine_sampler_accept_generated(s, 3, &d), ERR_GRAMMAR_TOKEN);
    ASSERT_OK(engine_sampler_accept_generated(s, 5, NULL));
    ASSERT_ERR(engine_sampler_sample(s, l, &d), ERR_GRAMMAR_TOKEN);
    engine_sampler_reset(s); /* back to the start of the grammar */
    ASSERT_EQ(engine_sampler_sample(s, l, NULL), 2);
    /* non-greedy draws only allowed tokens too */
    struct engine_sampler *t = NULL;
    p.temperature = 5;
    ASSERT_OK(engine_sampler_new(&p, 6, &t));
    ASSERT_OK(engine_sampler_set_grammar(t, m));
    engine_grammar_matcher_reset(m);
    for (int i = 0; i < 50; i++) {
        int tok = engine_sampler_sample(t, l, NULL);
        ASSERT_TRUE(tok == 0 || tok == 2);
    }
    ASSERT_OK(engine_sampler_set_grammar(t, NULL));
    int other = 0;
    for (int i = 0; i < 200; i++) other += engine_sampler_sample(t, l, NULL) == 3;
    ASSERT_TRUE(other > 0); /* without the grammar 'x' comes back */
    engine_sampler_free(t);
    engine_sampler_free(s);
    engine_grammar_matcher_free(m);
    engine_grammar_vocab_free(gv);
    engine_grammar_free(g);
}

/* ---- end to end with real vocabularies ---------------------------------------------- */

static size_t utf8_chars(const char *s) {
    size_t n = 0;
    for (; *s; s++) n += ((uint8_t)*s & 0xc0) != 0x80;
    return n;
}

/* A validator for the keywords the end-to-end schemas use. Returns NULL when v is valid,
 * else what is wrong. */
static const char *validate(json_t *root, json_t *s, json_t *v) {
    json_t *x;
    if ((x = json_object_get(s, "$ref"))) {
        const char *ref = json_string_value(x); /* "#/$defs/name" */
        return validate(root, json_object_get(json_object_get(root, "$defs"), ref + 8), v);
    }
    if ((x = json_object_get(s, "anyOf"))) {
        for (size_t i = 0; i < json_array_size(x); i++)
            if (!validate(root, json_array_get(x, i), v)) return NULL;
        return "no anyOf branch";
    }
    if ((x = json_object_get(s, "enum"))) {
        for (size_t i = 0; i < json_array_size(x); i++)
            if (json_equal(json_array_get(x, i), v)) return NULL;
        return "not in enum";
    }
    if ((x = json_object_get(s, "const"))) return json_equal(x, v) ? NULL : "not the const";
    const char *type = json_string_value(json_object_get(s, "type"));
    if (!type) return NULL;
    if (!strcmp(type, "string")) {
        if (!json_is_string(v)) return "not a string";
        size_t n = utf8_chars(json_string_value(v));
        if ((x = json_object_get(s, "maxLength")) && n > (size_t)json_integer_value(x))
            return "too long";
        if ((x = json_object_get(s, "minLength")) && n < (size_t)json_integer_value(x))
            return "too short";
        return NULL;
    }
    if (!strcmp(type, "integer") || !strcmp(type, "number")) {
        if (!strcmp(type, "integer") ? !json_is_integer(v) : !json_is_number(v))
            return "not a number of the type";
        double d = json_number_value(v);
        if ((x = json_object_get(s, "minimum")) && d < json_number_value(x)) return "below min";
        if ((x = json_object_get(s, "maximum")) && d > json_number_value(x)) return "above max";
        return NULL;
    }
    if (!strcmp(type, "boolean")) return json_is_boolean(v) ? NULL : "not a boolean";
    if (!strcmp(type, "null")) return json_is_null(v) ? NULL : "not null";
    if (!strcmp(type, "array")) {
        if (!json_is_array(v)) return "not an array";
        size_t n = json_array_size(v);
        if ((x = json_object_get(s, "maxItems")) && n > (size_t)json_integer_value(x))
            return "too many items";
        if ((x = json_object_get(s, "minItems")) && n < (size_t)json_integer_value(x))
            return "too few items";
        for (size_t i = 0; i < n; i++) {
            const char *e = validate(root, json_object_get(s, "items"), json_array_get(v, i));
            if (e) return e;
        }
        return NULL;
    }
    if (!json_is_object(v)) return "not an object";
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    for (size_t i = 0; i < json_array_size(req); i++)
        if (!json_object_get(v, json_string_value(json_array_get(req, i))))
            return "a required property is missing";
    const char *key;
    json_t *val;
    json_object_foreach(v, key, val) {
        json_t *ps = json_object_get(props, key);
        if (!ps) {
            if (json_is_false(json_object_get(s, "additionalProperties")))
                return "an additional property";
            continue;
        }
        const char *e = validate(root, ps, val);
        if (e) return e;
    }
    return NULL;
}

static struct engine_vocab *vocab_open(const char *rel) {
    const char *path = test_shared_path(rel);
    if (!path) return NULL;
    struct gguf_file *f = NULL;
    struct engine_vocab *v = NULL;
    if (gguf_open(path, &f, NULL) < 0) return NULL;
    if (engine_vocab_load(f, &v, NULL) < 0) v = NULL;
    gguf_close(f);
    return v;
}

static uint64_t rng_state;
static float rng_float(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)(rng_state >> 40) / 16777216.0f;
}

static const char e2e_schema[] =
    "{\"$defs\":{\"point\":{\"type\":\"object\",\"properties\":{"
    "\"x\":{\"type\":\"integer\",\"minimum\":-50,\"maximum\":50},"
    "\"y\":{\"type\":\"number\",\"minimum\":0,\"maximum\":10}},"
    "\"required\":[\"x\"],\"additionalProperties\":false}},"
    "\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":12},"
    "\"kind\":{\"enum\":[\"cat\",\"dog\",3,null]},"
    "\"alive\":{\"type\":\"boolean\"},"
    "\"where\":{\"$ref\":\"#/$defs/point\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":5},"
    "\"minItems\":1,\"maxItems\":3},"
    "\"score\":{\"anyOf\":[{\"type\":\"integer\",\"minimum\":0,\"maximum\":9},"
    "{\"type\":\"null\"}]},"
    "\"v\":{\"const\":\"1.0\"}},"
    "\"required\":[\"name\",\"where\",\"tags\",\"v\"],\"additionalProperties\":false}";

/* Generates with the sampler (greedy) under the grammar from random logits; after
 * `wander` steps tokens that close things get a bonus so the output ends. Writes the bytes
 * to out. Returns the token count, or -1 when the output did not end in max_tokens. */
static int generate(struct engine_sampler *s, const struct engine_vocab *v, int32_t n_vocab,
                    float *l, int wander, int max_tokens, char *out, size_t cap) {
    size_t n_out = 0;
    for (int step = 0; step < max_tokens; step++) {
        for (int32_t i = 0; i < n_vocab; i++) l[i] = rng_float() * 10;
        if (step >= wander) {
            for (int32_t i = 0; i < n_vocab; i++) {
                size_t len;
                const char *p = engine_vocab_piece_view(v, i, 0, &len);
                if (engine_vocab_is_eog(v, i))
                    l[i] += 1000;
                else if (len == 1 && strchr("\"}]0", p[0]))
                    l[i] += 100;
            }
        }
        struct err_detail d = {0};
        int tok = engine_sampler_sample(s, l, &d);
        if (tok < 0) {
            fprintf(stderr, "sample: %s\n", err_msg(&d, tok));
            return -1;
        }
        if (engine_sampler_accept_generated(s, tok, &d) < 0) {
            fprintf(stderr, "accept: %s\n", d.msg);
            return -1;
        }
        if (engine_vocab_is_eog(v, tok)) {
            out[n_out] = '\0';
            return step;
        }
        size_t len;
        const char *p = engine_vocab_piece_view(v, tok, 0, &len);
        if (n_out + len + 1 > cap) return -1;
        memcpy(out + n_out, p, len);
        n_out += len;
    }
    return -1;
}

static void e2e(const char *rel, const char *schema_text, int seeds) {
    struct engine_vocab *v = vocab_open(rel);
    if (!v) SKIP("%s not found under WARM_SHARED_MODELS", rel);
    int32_t n = engine_vocab_n_tokens(v);
    struct engine_grammar_vocab *gv = NULL;
    struct engine_grammar *g = schema(schema_text);
    struct engine_grammar_matcher *m = NULL;
    struct engine_sampler *s = NULL;
    struct engine_sampler_params p;
    engine_sampler_params_default(&p);
    float *l = malloc_array((size_t)n, sizeof *l);
    char *out = malloc(1 << 16);
    json_t *sch = json_loads(schema_text, 0, NULL);
    bool ok = g && l && out && sch && engine_grammar_vocab_new(v, &gv) >= 0 &&
              engine_grammar_matcher_new(g, gv, &m) >= 0 && engine_sampler_new(&p, n, &s) >= 0 &&
              engine_sampler_set_grammar(s, m) >= 0;
    int failures = 0, total_tokens = 0;
    for (int seed = 0; ok && seed < seeds && failures < 3; seed++) {
        rng_state = 0x9e3779b97f4a7c15ull * (uint64_t)(seed + 1);
        engine_sampler_reset(s);
        int k = generate(s, v, n, l, 40 + seed % 40, 1500, out, 1 << 16);
        if (k < 0) {
            fprintf(stderr, "%s seed %d: no end\n", rel, seed);
            failures++;
            continue;
        }
        total_tokens += k;
        json_error_t je;
        json_t *doc = json_loads(out, JSON_ALLOW_NUL | JSON_DECODE_ANY, &je);
        const char *bad = doc ? validate(sch, sch, doc) : je.text;
        if (bad) {
            fprintf(stderr, "%s seed %d: %s in:\n%s\n", rel, seed, bad, out);
            failures++;
        }
        if (seed == 0) printf("  seed 0: %s\n", out);
        json_decref(doc);
    }
    printf("  %s: %d seeds, %d tokens\n", rel, seeds, total_tokens);
    json_decref(sch);
    free(out);
    free(l);
    engine_sampler_free(s);
    engine_grammar_matcher_free(m);
    engine_grammar_vocab_free(gv);
    engine_grammar_free(g);
    engine_vocab_free(v);
    ASSERT_TRUE(ok);
    ASSERT_EQ(failures, 0);
}

TEST(e2e_schema_bpe) { e2e("vocab/ggml-vocab-deepseek-llm.gguf", e2e_schema, 24); }
TEST(e2e_schema_spm) { e2e("vocab/ggml-vocab-llama-spm.gguf", e2e_schema, 24); }
TEST(e2e_json_object_bpe) { e2e("vocab/ggml-vocab-gpt-2.gguf", "{\"type\":\"object\"}", 24); }

TEST_MAIN(T(parse_errors), T(parse_language), T(json_any), T(schema_keywords), T(schema_refused),
          T(schema_prefix_tool_call), T(mask_bytes), T(sampler_grammar), T(e2e_schema_bpe),
          T(e2e_schema_spm), T(e2e_json_object_bpe))
