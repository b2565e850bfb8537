/* Hostile JSON bodies against warm-httpd's real server, in-process (libmicrohttpd on a
 * loopback socket, the real route table and request parsers): deep nesting, huge numbers,
 * wrong types, invalid UTF-8, not-objects, duplicate keys, trailing bytes, and a few
 * thousand seeded mutations of valid requests. Each must get a clear answer in the shape
 * of its API (OpenAI {"error":{"message","param",...}}, Ollama {"error":"..."}), 400 and
 * naming the field where one is at fault, and the server must go on serving (a final
 * /api/version). Ollama's load-only requests (no prompt, no messages) answer 200 alone. warmd's socket does not exist: a request that parses reaches the call
 * and is answered with warmd's absence (5xx), never 400, never a crash. */
#include "test.h"
#include "client/httpd/httpd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define READ_CAP_SEC 60 /* a cap on a wedged read, never a timing assertion */

static struct httpd *srv;  /* logs go to the default sink, which drops them */
static uint16_t port;

static int server_start(void) {
    if (srv) return 0;
    signal(SIGPIPE, SIG_IGN);
    srv = calloc(1, sizeof *srv);
    if (!srv) return -ENOMEM;
    char sock[4096], a_sock[4200], a_log[] = "--log-level=error";
    snprintf(sock, sizeof sock, "%s/no-warmd.sock", test_tmpdir());
    snprintf(a_sock, sizeof a_sock, "--warmd-socket=%s", sock);
    char *args[] = {a_sock, a_log};
    struct err_detail e = {0};
    int r = config_load(&srv->cfg, "/dev/null", true, args, 2, &e);
    if (r < 0) return r;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 64) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) < 0)
        return -errno;
    port = ntohs(a.sin_port);
    if ((r = peer_diag_init(&srv->diag, -1)) < 0) return r;
    if ((r = clients_init(&srv->clients, srv->cfg.warmd_socket)) < 0) return r;
    r = httpd_start(srv, &fd, 1, &e);
    if (r < 0) fprintf(stderr, "%s\n", err_msg(&e, r));
    return r;
}

static void server_stop(void) {
    if (!srv) return;
    httpd_stop(srv);
    clients_done(&srv->clients);
    peer_diag_done(&srv->diag);
    free(srv);
    srv = NULL;
}

/* splitmix64: the mutations are the same on every run. */
static uint64_t rand_next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

struct reply {
    int status;
    json_t *doc;        /* the body as JSON, NULL when it is not */
    char head[256];
};

static void reply_done(struct reply *r) {
    json_decref(r->doc);
    r->doc = NULL;
}

/* One request on its own connection (Connection: close), the whole answer read. A bearer
 * token rides along so that identity never stands in front of parsing. */
static int request(const char *method, const char *path, const char *body, size_t len,
                   struct reply *out) {
    memset(out, 0, sizeof *out);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        int e = -errno;
        if (fd >= 0) close(fd);
        return e;
    }
    struct timeval tv = {.tv_sec = READ_CAP_SEC};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char head[512];
    int hl = snprintf(head, sizeof head,
                      "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nAuthorization: Bearer test\r\n"
                      "Content-Type: application/json\r\nContent-Length: %zu\r\n"
                      "Connection: close\r\n\r\n", method, path, port, len);
    int r = 0;
    if (send(fd, head, (size_t)hl, MSG_NOSIGNAL) != hl) r = -EIO;
    for (size_t off = 0; r == 0 && off < len;) {
        ssize_t k = send(fd, body + off, len - off, MSG_NOSIGNAL);
        if (k <= 0) break;          /* the server may answer and close before the end */
        off += (size_t)k;
    }
    size_t cap = 1 << 16, have = 0;
    char *buf = malloc(cap);
    while (r == 0 && buf) {
        if (have + 1 == cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b) break;
            buf = b;
        }
        ssize_t k = recv(fd, buf + have, cap - have - 1, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == ETIMEDOUT)) r = -ETIMEDOUT;
        if (k <= 0) break;
        have += (size_t)k;
    }
    close(fd);
    if (!buf) return -ENOMEM;
    buf[have] = '\0';
    snprintf(out->head, sizeof out->head, "%.*s", (int)strcspn(buf, "\r\n"), buf);
    if (r == 0 && sscanf(buf, "HTTP/1.1 %d", &out->status) != 1) r = -EPROTO;
    const char *b = strstr(buf, "\r\n\r\n");
    if (r == 0 && b) out->doc = json_loads(b + 4, 0, NULL);
    free(buf);
    return r;
}

/* The error message of an answer in either API's shape, or NULL. */
static const char *error_message(const json_t *doc, const char **param) {
    json_t *e = json_object_get(doc, "error");
    *param = NULL;
    if (json_is_string(e)) return json_string_value(e);
    if (!json_is_object(e)) return NULL;
    json_t *p = json_object_get(e, "param");
    if (json_is_string(p)) *param = json_string_value(p);
    json_t *m = json_object_get(e, "message");
    return json_is_string(m) ? json_string_value(m) : NULL;
}

struct hostile {
    const char *path;
    const char *body;       /* NULL: built by the test */
    const char *says;       /* in the message or the param; NULL = any clear message */
};

static const struct hostile cases[] = {
    /* Not JSON, or not one object. */
    {"/v1/chat/completions", "", "JSON body"},
    {"/v1/chat/completions", "   \n\t ", "not JSON"},
    {"/v1/chat/completions", "[]", "JSON object"},
    {"/v1/completions", "\"prompt\"", "not JSON"},   /* jansson: '[' or '{' expected */
    {"/api/chat", "null", "not JSON"},
    {"/api/generate", "12", "not JSON"},
    {"/v1/chat/completions", "{\"model\":\"m\"} {}", "not JSON"},
    {"/v1/chat/completions", "{\"model\":\"m\",\"model\":\"n\"}", "not JSON"},
    {"/v1/chat/completions", "{\"model\":", "not JSON"},
    {"/v1/chat/completions", "{'model':'m'}", "not JSON"},
    {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\",}]}", "not JSON"},
    /* Huge and odd numbers. */
    {"/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":1e400}", "not JSON"},
    {"/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":123456789012345678901234567890}", "not JSON"},
    {"/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":1e300}", "max_tokens"},
    {"/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":-1}", "max_tokens"},
    {"/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":2.5}", "max_tokens"},
    {"/v1/completions", "{\"prompt\":\"a\",\"temperature\":-1e308}", "temperature"},
    {"/v1/completions", "{\"prompt\":\"a\",\"temperature\":NaN}", "not JSON"},
    {"/v1/completions", "{\"prompt\":\"a\",\"top_p\":Infinity}", "not JSON"},
    {"/v1/completions", "{\"prompt\":\"a\",\"seed\":1.5}", "seed"},
    {"/v1/completions", "{\"prompt\":[1e300]}", "prompt"},
    {"/v1/completions", "{\"prompt\":[-5]}", "prompt"},
    {"/v1/completions", "{\"prompt\":[9223372036854775807]}", "prompt"},
    {"/api/generate", "{\"model\":\"m\",\"prompt\":\"a\",\"options\":{\"num_predict\":1e300}}", "num_predict"},
    {"/api/generate", "{\"model\":\"m\",\"prompt\":\"a\",\"options\":{\"seed\":-1e30}}", "seed"},
    {"/api/generate", "{\"model\":\"m\",\"prompt\":\"a\",\"keep_alive\":\"5 parsecs\"}", "keep_alive"},
    {"/api/generate", "{\"model\":\"m\",\"prompt\":\"a\",\"keep_alive\":[]}", "keep_alive"},
    /* Wrong types. */
    {"/v1/chat/completions", "{\"messages\":\"hi\"}", "messages"},
    {"/v1/chat/completions", "{\"messages\":[]}", "messages"},
    {"/v1/chat/completions", "{\"messages\":{}}", "messages"},
    {"/v1/chat/completions", "{\"messages\":[7]}", "messages"},
    {"/v1/chat/completions", "{\"messages\":[null]}", "messages"},
    {"/v1/chat/completions", "{\"messages\":[{\"role\":5,\"content\":\"x\"}]}", "role"},
    {"/v1/chat/completions", "{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", "role"},
    {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", "content"},
    {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":{}}]}", "content"},
    {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":[7]}]}", "content"},
    {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", "image_url"},
    {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":5}]}]}", "content"},
    {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"model\":5}", "model"},
    {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":\"yes\"}", "stream"},
    {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":5}", "stop"},
    {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[1,2]}", "stop"},
    {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[\"\"]}", "stop"},
    {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream_options\":\"x\"}", "stream_options"},
    {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":3}", "'n'"},
    {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{}]}", "tools"},
    {"/v1/completions", "{\"prompt\":{}}", "prompt"},
    {"/v1/completions", "{\"prompt\":[\"a\",1]}", "prompt"},
    {"/v1/completions", "{\"prompt\":[[1],\"a\"]}", "prompt"},
    {"/api/chat", "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"options\":\"hot\"}", "options"},
    {"/api/chat", "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"keep_alive\":{}}", "keep_alive"},
    {"/api/chat", "{\"model\":[],\"messages\":[]}", "model"},
    {"/api/chat", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "model"},
    {"/api/generate", "{\"model\":\"m\",\"prompt\":7}", "prompt"},
    {"/api/generate", "{\"model\":\"m\",\"prompt\":\"a\",\"raw\":\"no\"}", "raw"},
    {"/api/show", "{\"model\":false}", "model"},
    /* Invalid UTF-8 and invalid escapes. */
    {"/v1/completions", "{\"prompt\":\"\xff\xfe\"}", "not JSON"},
    {"/v1/completions", "{\"prompt\":\"\xc0\xaf\"}", "not JSON"},
    {"/v1/completions", "{\"prompt\":\"\xed\xa0\x80\"}", "not JSON"},
    {"/v1/completions", "{\"prompt\":\"\xf4\x90\x80\x80\"}", "not JSON"},
    {"/v1/completions", "{\"prompt\":\"a\xe2\x82\"}", "not JSON"},
    {"/v1/completions", "{\"prompt\":\"\\ud800\"}", "not JSON"},
    {"/v1/completions", "{\"prompt\":\"\\u0000x\"}", "not JSON"},
    {"/v1/completions", "{\"prompt\":\"\\x41\"}", "not JSON"},
    {"/api/chat", "{\"model\":\"\xff\",\"messages\":[]}", "not JSON"},
    {"/v1/chat/completions", "{\"mess\xc3\x28ges\":[]}", "not JSON"},
};

static bool check_400(const char *path, const char *body, size_t len, const char *says,
                      char *why, size_t why_size) {
    struct reply rp;
    int r = request("POST", path, body, len, &rp);
    const char *param = NULL;
    const char *msg = r == 0 ? error_message(rp.doc, &param) : NULL;
    bool ok = r == 0 && rp.status == 400 && msg && *msg &&
              (!says || strstr(msg, says) || (param && strstr(param, says)));
    if (!ok)
        snprintf(why, why_size, "%s: %s -> %s, message '%s' (wanted 400 saying '%s')", path,
                 r < 0 ? err_name(r) : "answered", rp.head, msg ? msg : "(none)",
                 says ? says : "");
    reply_done(&rp);
    return ok;
}

TEST(hostile_bodies_get_clear_400s) {
    ASSERT_OK(server_start());
    int bad = 0;
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        char why[1024];
        if (!check_400(cases[i].path, cases[i].body, strlen(cases[i].body), cases[i].says, why,
                       sizeof why)) {
            fprintf(stderr, "case %zu: %s\n", i, why);
            bad++;
        }
    }
    ASSERT_EQ(bad, 0);
}

/* A raw NUL byte inside the body (strlen would stop at it). */
TEST(nul_byte_in_body) {
    ASSERT_OK(server_start());
    static const char body[] = "{\"prompt\":\"a\0b\"}";
    char why[1024];
    if (!check_400("/v1/completions", body, sizeof body - 1, "not JSON", why, sizeof why))
        TEST_FAIL_("%s", why);
}

/* Nesting far past jansson's depth limit (2048) and just inside it, in both APIs. */
TEST(deep_nesting) {
    ASSERT_OK(server_start());
    size_t depth = 200000;
    char *deep = malloc(2 * depth + 64);
    ASSERT_TRUE(deep);
    size_t n = (size_t)sprintf(deep, "{\"messages\":");
    memset(deep + n, '[', depth);
    n += depth;
    memset(deep + n, ']', depth);
    n += depth;
    deep[n++] = '}';
    char why[1024];
    bool a = check_400("/v1/chat/completions", deep, n, "not JSON", why, sizeof why);
    if (!a) fprintf(stderr, "%s\n", why);
    bool b = check_400("/api/chat", deep, n, "not JSON", why, sizeof why);
    if (!b) fprintf(stderr, "%s\n", why);
    /* 1000 deep is valid JSON: refused by type, naming the field. */
    n = (size_t)sprintf(deep, "{\"messages\":[{\"role\":\"user\",\"content\":");
    memset(deep + n, '[', 1000);
    n += 1000;
    memset(deep + n, ']', 1000);
    n += 1000;
    n += (size_t)sprintf(deep + n, "}]}");
    bool c = check_400("/v1/chat/completions", deep, n, "content", why, sizeof why);
    if (!c) fprintf(stderr, "%s\n", why);
    n = (size_t)sprintf(deep, "{\"model\":\"m\",\"prompt\":\"a\",\"options\":");
    for (int i = 0; i < 1000; i++) n += (size_t)sprintf(deep + n, "{\"a\":");
    n += (size_t)sprintf(deep + n, "1");
    memset(deep + n, '}', 1001);
    n += 1001;
    /* Unknown options are ignored, as Ollama does: this one parses and reaches the call. */
    struct reply rp;
    const char *param = NULL;
    bool d = request("POST", "/api/generate", deep, n, &rp) == 0 && rp.status >= 500 &&
             error_message(rp.doc, &param);
    if (!d) fprintf(stderr, "/api/generate, 1000 nested options: %s\n", rp.head);
    reply_done(&rp);
    free(deep);
    ASSERT_TRUE(a && b && c && d);
}

static bool api_load_reply(const json_t *doc) {
    const json_t *why = json_object_get(doc, "done_reason");
    return json_is_string(why) && strcmp(json_string_value(why), "load") == 0;
}

/* Valid requests, mutated at random (seeded): bytes flipped, cut, duplicated, replaced by
 * JSON punctuation. Whatever arrives gets a JSON error in the route's shape: 400 when it
 * no longer parses or a field is wrong, and otherwise the call fails for want of warmd
 * (5xx). The server answers every one. */
TEST(mutations) {
    ASSERT_OK(server_start());
    static const struct {
        const char *path, *body;
    } seeds[] = {
        {"/v1/chat/completions",
         "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},"
         "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi \\u00e9\"}]}],"
         "\"max_tokens\":8,\"temperature\":0.5,\"top_p\":0.9,\"seed\":3,\"stop\":[\"x\",\"y\"],"
         "\"stream\":true,\"stream_options\":{\"include_usage\":true}}"},
        {"/v1/completions",
         "{\"model\":\"m\",\"prompt\":[1,2,3],\"max_completion_tokens\":4,\"stop\":\"\\n\"}"},
        {"/api/chat",
         "{\"model\":\"m:latest\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
         "\"options\":{\"num_predict\":5,\"temperature\":0,\"stop\":[\"a\"]},\"keep_alive\":\"5m\","
         "\"stream\":false}"},
        {"/api/generate",
         "{\"model\":\"m\",\"prompt\":\"Once\",\"system\":\"s\",\"raw\":true,\"keep_alive\":-1}"},
        {"/api/show", "{\"model\":\"m\"}"},
    };
    static const char punct[] = "{}[]:,\"\\0123456789e-+.tfn \xff\x80";
    uint64_t seed = 0x5eed1234;
    int bad = 0, n400 = 0, other = 0;
    for (int it = 0; it < 3000 && bad < 5; it++) {
        const char *path = seeds[it % ARRAY_SIZE(seeds)].path;
        const char *src = seeds[it % ARRAY_SIZE(seeds)].body;
        size_t len = strlen(src);
        char buf[2048];
        memcpy(buf, src, len);
        int edits = 1 + (int)(rand_next(&seed) % 4);
        for (int k = 0; k < edits && len > 0; k++) {
            size_t at = rand_next(&seed) % len;
            switch (rand_next(&seed) % 4) {
            case 0: buf[at] = punct[rand_next(&seed) % (sizeof punct - 1)]; break;
            case 1: buf[at] ^= (char)(1u << (rand_next(&seed) % 8)); break;
            case 2: len = at; break;                                      /* cut */
            case 3:                                                       /* duplicate */
                if (len + (len - at) < sizeof buf) {
                    memmove(buf + len, buf + at, len - at);
                    len += len - at;
                }
                break;
            }
        }
        struct reply rp;
        int r = request("POST", path, buf, len, &rp);
        const char *param = NULL;
        const char *msg = r == 0 ? error_message(rp.doc, &param) : NULL;
        bool ok = r == 0 && rp.status >= 400 && rp.status < 600 && msg && *msg;
        /* Ollama's "load the model" (no prompt, no messages) is answered without a call;
         * any other 200 would mean a mutated request reached a warmd that is not there. */
        if (r == 0 && rp.status == 200 && api_load_reply(rp.doc)) ok = true;
        if (!ok) {
            fprintf(stderr, "mutation %d on %s: %s, %s, body %.*s\n", it, path,
                    r < 0 ? err_name(r) : rp.head, msg ? msg : "(no JSON error)", (int)len, buf);
            bad++;
        } else if (rp.status == 400) {
            n400++;
        } else {
            other++;
        }
        reply_done(&rp);
    }
    printf("  mutations: %d answered 400, %d answered for want of warmd\n", n400, other);
    ASSERT_EQ(bad, 0);
    ASSERT_TRUE(n400 > 0 && other > 0);   /* both kinds were reached */
}

/* After all of the above the same server still answers. */
TEST(still_serving) {
    ASSERT_OK(server_start());
    struct reply rp;
    ASSERT_OK(request("GET", "/api/version", "", 0, &rp));
    bool ok = rp.status == 200 && json_is_string(json_object_get(rp.doc, "version"));
    reply_done(&rp);
    server_stop();
    ASSERT_TRUE(ok);
}

TEST_MAIN(T(hostile_bodies_get_clear_400s), T(nul_byte_in_body), T(deep_nesting), T(mutations),
          T(still_serving))
