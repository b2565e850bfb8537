/* engine_chat_tool_grammar (engine/chat-grammar.c): the grammar of a forced tool call
 * accepts the family's call text for valid arguments, and only that: other functions, a
 * second call where one is asked, arguments outside the schema, and for qwen35 a free-text
 * value holding "</parameter>"; what it accepts parses back with
 * engine_chat_parse_tool_calls. */
#include "test.h"
#include "engine/engine.h"

#include <errno.h>
#include <string.h>

static const char tools[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": "
    "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": "
    "{\"type\": \"integer\", \"minimum\": 1, \"maximum\": 7}, \"unit\": {\"type\": \"string\", "
    "\"enum\": [\"C\", \"F\"]}}, \"required\": [\"city\", \"days\"], "
    "\"additionalProperties\": false}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"ping\"}}]";

/* Whether the grammar g accepts exactly text (one byte per token). */
static bool accepts(const struct engine_grammar *g, const char *text) {
    static char bytes[256][1];
    const char *piece[257];
    size_t len[257];
    for (int i = 0; i < 256; i++) {
        bytes[i][0] = (char)i;
        piece[i] = bytes[i];
        len[i] = 1;
    }
    piece[256] = "";
    len[256] = 0;
    int32_t eog = 256;
    struct engine_grammar_vocab *gv;
    struct engine_grammar_matcher *m;
    if (engine_grammar_vocab_new_pieces(257, piece, len, &eog, 1, &gv) < 0) return false;
    if (engine_grammar_matcher_new(g, gv, &m) < 0) {
        engine_grammar_vocab_free(gv);
        return false;
    }
    bool ok = engine_grammar_matcher_accept_bytes(m, text, strlen(text), NULL) == 0 &&
              engine_grammar_matcher_done(m);
    engine_grammar_matcher_free(m);
    engine_grammar_vocab_free(gv);
    return ok;
}

static struct engine_grammar *grammar(enum engine_chat_family fam, const char *name,
                                      unsigned max_calls) {
    char *text = NULL;
    struct err_detail d = {0};
    struct engine_grammar *g = NULL;
    if (engine_chat_tool_grammar(fam, tools, strlen(tools), name, max_calls, &text, &d) < 0 ||
        engine_grammar_parse(text, strlen(text), &g, &d) < 0)
        fprintf(stderr, "grammar: %s\n%s\n", d.msg, text ? text : "");
    free(text);
    return g;
}

/* text parses back into calls named names[0..n) (harmony's after its split, as the daemon
 * reads it) */
static bool parses(enum engine_chat_family fam, const char *text, const char *const *names,
                   size_t n) {
    struct engine_chat_parsed_call calls[4];
    size_t got, content, len = strlen(text);
    static char r[4096], a[4096];
    if (fam == ENGINE_CHAT_HARMONY) {
        struct engine_chat_think t;
        size_t nr, na, nr2, na2;
        engine_chat_think_begin(&t, fam, 0);
        engine_chat_think_split(&t, text, len, r, &nr, a, &na);
        engine_chat_think_end(&t, r + nr, &nr2, a + na, &na2);
        text = a;
        len = na + na2;
    }
    if (engine_chat_parse_tool_calls(fam, text, len, calls, 4, &got, &content) < 0)
        return false;
    bool ok = got == n && content == 0;
    for (size_t i = 0; ok && i < n; i++) ok = strcmp(calls[i].name, names[i]) == 0;
    engine_chat_parsed_calls_free(calls, got);
    return ok;
}

TEST(hermes) {
    const char one[] = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                       "{\"city\":\"Paris\",\"days\":2}}\n</tool_call>";
    const char ping[] = "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>";
    struct engine_grammar *any = grammar(ENGINE_CHAT_QWEN3, NULL, 1), *named =
        grammar(ENGINE_CHAT_CHATML, "ping", 1), *many = grammar(ENGINE_CHAT_CHATML, NULL, 0);
    ASSERT_TRUE(any && named && many);
    ASSERT_TRUE(accepts(any, one) && accepts(any, ping));
    ASSERT_TRUE(!accepts(any, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                              "{\"city\":\"Paris\",\"days\":9}}\n</tool_call>"));
    ASSERT_TRUE(!accepts(any, "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>"));
    ASSERT_TRUE(!accepts(named, one) && accepts(named, ping));
    char two[512];
    snprintf(two, sizeof two, "%s\n%s", one, ping);
    ASSERT_TRUE(!accepts(any, two) && accepts(many, two));
    const char *const names[] = {"get_weather", "ping"};
    ASSERT_TRUE(parses(ENGINE_CHAT_QWEN3, two, names, 2));
    engine_grammar_free(any);
    engine_grammar_free(named);
    engine_grammar_free(many);
}

TEST(qwen35_xml) {
    struct engine_grammar *g = grammar(ENGINE_CHAT_QWEN35, NULL, 1);
    ASSERT_TRUE(g != NULL);
    const char *head = "<tool_call>\n<function=get_weather>\n<parameter=city>\n";
    const char *tail = "\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n"
                       "</tool_call>";
    static const struct {
        const char *city;
        bool ok;
    } cities[] = {
        {"Paris", true}, {"a <b> c", true}, {"</param", true}, {"x</parameter", true},
        {"<<</parameter>>", false}, {"</parameter>", false}, {"two\nlines", true}, {"", true},
    };
    char text[512];
    for (size_t i = 0; i < ARRAY_SIZE(cities); i++) {
        snprintf(text, sizeof text, "%s%s%s", head, cities[i].city, tail);
        if (accepts(g, text) != cities[i].ok) TEST_FAIL_("city \"%s\"", cities[i].city);
    }
    /* optional parameter with its enum, in the order declared; a missing required one */
    ASSERT_TRUE(accepts(g, "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n"
                           "</parameter>\n<parameter=days>\n7\n</parameter>\n<parameter=unit>\n"
                           "C\n</parameter>\n</function>\n</tool_call>"));
    ASSERT_TRUE(!accepts(g, "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n"
                            "</parameter>\n</function>\n</tool_call>"));
    ASSERT_TRUE(accepts(g, "<tool_call>\n<function=ping>\n</function>\n</tool_call>"));
    snprintf(text, sizeof text, "%sParis%s", head, tail);
    const char *const names[] = {"get_weather"};
    ASSERT_TRUE(parses(ENGINE_CHAT_QWEN35, text, names, 1));
    engine_grammar_free(g);
}

TEST(llama31) {
    struct engine_grammar *any = grammar(ENGINE_CHAT_LLAMA31, NULL, 0),
                          *named = grammar(ENGINE_CHAT_LLAMA31, "ping", 1);
    ASSERT_TRUE(any && named);
    const char one[] = "{\"name\": \"get_weather\", \"parameters\": {\"city\":\"Oslo\",\"days\":1}}";
    const char ping[] = "{\"name\": \"ping\", \"parameters\": {}}";
    ASSERT_TRUE(accepts(any, one) && accepts(any, ping) && accepts(named, ping));
    ASSERT_TRUE(!accepts(named, one));
    /* one call however many are allowed: Llama 3.x writes one per turn */
    char two[256];
    snprintf(two, sizeof two, "%s\n%s", one, ping);
    ASSERT_TRUE(!accepts(any, two));
    ASSERT_TRUE(!accepts(any, "{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Oslo\",\"days\":1}}"));
    const char *const names[] = {"get_weather"};
    ASSERT_TRUE(parses(ENGINE_CHAT_LLAMA31, one, names, 1));
    engine_grammar_free(any);
    engine_grammar_free(named);
}

TEST(harmony) {
    struct engine_grammar *any = grammar(ENGINE_CHAT_HARMONY, NULL, 0);
    ASSERT_TRUE(any != NULL);
    const char one[] = "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
                       "{\"city\": \"Oslo\", \"days\": 3}";
    ASSERT_TRUE(accepts(any, one));
    ASSERT_TRUE(accepts(any, "<|channel|>commentary to=functions.ping <|constrain|>json<|message|>{}"));
    ASSERT_TRUE(!accepts(any, "<|channel|>commentary to=functions.nope <|constrain|>json<|message|>{}"));
    ASSERT_TRUE(!accepts(any, "<|channel|>analysis<|message|>hm"));
    const char *const names[] = {"get_weather"};
    ASSERT_TRUE(parses(ENGINE_CHAT_HARMONY, one, names, 1));
    engine_grammar_free(any);
    char *text = NULL;
    struct err_detail d = {0};
    static const char odd[] = "[{\"type\": \"function\", \"function\": {\"name\": \"a b\"}}]";
    ASSERT_ERR(engine_chat_tool_grammar(ENGINE_CHAT_HARMONY, odd, strlen(odd), NULL, 1, &text, &d),
               -EINVAL);
    ASSERT_TRUE(strstr(d.msg, "tools[0]") && strstr(d.msg, "harmony"));
}

TEST(gemma4) {
    struct engine_grammar *any = grammar(ENGINE_CHAT_GEMMA4, NULL, 1),
                          *many = grammar(ENGINE_CHAT_GEMMA4, NULL, 0);
    ASSERT_TRUE(any && many);
    /* the properties sorted (city, days, unit), strings between <|"|> marks */
    const char one[] = "<|tool_call>call:get_weather{city:<|\"|>Oslo <b>, \"x\"<|\"|>,days:3}"
                       "<tool_call|>";
    const char ping[] = "<|tool_call>call:ping{}<tool_call|>";
    ASSERT_TRUE(accepts(any, one) && accepts(any, ping));
    ASSERT_TRUE(accepts(any, "<|tool_call>call:get_weather{city:<|\"|><|\"|>,days:-2,"
                             "unit:<|\"|>F<|\"|>}<tool_call|>"));
    ASSERT_TRUE(accepts(any, "<|tool_call>call:ping{a:[1,<|\"|>x<|\"|>],b:{c:None}}<tool_call|>"));
    ASSERT_TRUE(!accepts(any, "<|tool_call>call:get_weather{days:3,city:<|\"|>Oslo<|\"|>}"
                              "<tool_call|>"));                       /* not sorted */
    ASSERT_TRUE(!accepts(any, "<|tool_call>call:get_weather{city:<|\"|>Oslo<|\"|>}<tool_call|>"));
    ASSERT_TRUE(!accepts(any, "<|tool_call>call:get_weather{city:<|\"|>O<|\"|>,days:1,"
                              "unit:<|\"|>K<|\"|>}<tool_call|>"));    /* not in the enum */
    ASSERT_TRUE(!accepts(any, "<|tool_call>call:get_weather{city:<|\"|>a<|\"|>b<|\"|>,days:1}"
                              "<tool_call|>"));                       /* a mark in the text */
    char two[256];
    snprintf(two, sizeof two, "%s%s", one, ping);
    ASSERT_TRUE(!accepts(any, two) && accepts(many, two));
    const char *const names[] = {"get_weather", "ping"};
    ASSERT_TRUE(parses(ENGINE_CHAT_GEMMA4, two, names, 2));
    engine_grammar_free(any);
    engine_grammar_free(many);
}

TEST(refused) {
    char *text = NULL;
    struct err_detail d = {0};
    ASSERT_ERR(engine_chat_tool_grammar(ENGINE_CHAT_LLAMA3, tools, strlen(tools), NULL, 1, &text,
                                        &d), -EINVAL);
    ASSERT_ERR(engine_chat_tool_grammar(ENGINE_CHAT_GEMMA, tools, strlen(tools), NULL, 1, &text,
                                        &d), -EINVAL);
    ASSERT_ERR(engine_chat_tool_grammar(ENGINE_CHAT_CHATML, tools, strlen(tools), "nope", 1,
                                        &text, &d), -EINVAL);
    ASSERT_TRUE(strstr(d.msg, "nope") != NULL);
    static const char bad[] = "[{\"type\": \"function\", \"function\": {\"name\": \"f\", "
                              "\"parameters\": {\"type\": \"string\", \"pattern\": \"a+\"}}}]";
    ASSERT_ERR(engine_chat_tool_grammar(ENGINE_CHAT_CHATML, bad, strlen(bad), NULL, 1, &text, &d),
               ERR_GRAMMAR);
    ASSERT_TRUE(strstr(d.msg, "tools[0].function.parameters") && strstr(d.msg, "pattern"));
    ASSERT_ERR(engine_chat_tool_grammar(ENGINE_CHAT_CHATML, "[]", 2, NULL, 1, &text, &d), -EINVAL);
    ASSERT_TRUE(text == NULL);
}

TEST_MAIN(T(hermes), T(qwen35_xml), T(llama31), T(harmony), T(gemma4), T(refused))
