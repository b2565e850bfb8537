/* config.c: warm-httpd's settings from defaults, a real file and --key=value arguments;
 * every error names the file and line or the argument, and a failed load is an error,
 * never a half-applied setting taken silently. */
#include "test.h"
#include "client/httpd/httpd.h"

#include <errno.h>
#include <stdio.h>

static const char *write_file(const char *name, const char *text) {
    static char path[4096];
    snprintf(path, sizeof path, "%s/%s", test_tmpdir(), name);
    FILE *f = fopen(path, "w");
    if (!f) return NULL;
    fputs(text, f);
    fclose(f);
    return path;
}

static bool contains(const char *s, const char *part) {
    return s && strstr(s, part) != NULL;
}

TEST(defaults_without_a_file) {
    struct httpd_config c;
    struct err_detail e = {0};
    char missing[4096];
    snprintf(missing, sizeof missing, "%s/absent.conf", test_tmpdir());
    ASSERT_OK_D(config_load(&c, missing, false, NULL, 0, &e), &e);
    ASSERT_EQ(c.n_listen, 2);
    ASSERT_STREQ(c.listen[0], "127.0.0.1:11434");
    ASSERT_STREQ(c.listen[1], "[::1]:11434");
    ASSERT_STREQ(c.warmd_socket, WARM_DEFAULT_SOCKET);
    ASSERT_EQ(c.n_allowed_origins, 0);          /* no CORS unless configured */
    ASSERT_EQ(c.max_body_bytes, 8ULL << 20);
    ASSERT_EQ(c.max_connections, 128);
    ASSERT_EQ(c.max_connections_per_uid, 32);
    ASSERT_EQ(c.connection_timeout_usec, 60000000ULL);
    ASSERT_EQ(c.request_timeout_usec, 60000000ULL);
    ASSERT_STREQ(c.default_model, "");
    ASSERT_EQ(c.log_level, LOG_LEVEL_INFO);
    /* A required file that is missing is an error naming it. */
    ASSERT_ERR(config_load(&c, missing, true, NULL, 0, &e), -ENOENT);
    ASSERT_TRUE(contains(e.msg, "absent.conf"));
}

TEST(file_then_arguments) {
    const char *p = write_file("ok.conf",
                               "# comment\n"
                               "\n"
                               "  listen = 127.0.0.1:8080, [::1]:8080 \t\n"
                               "allowed_origins = http://localhost:3000 https://app.example\n"
                               "max_body = 512K\n"
                               "max_connections = 7\r\n"
                               "connection_timeout = 1500ms\n"
                               "request_timeout = 2m\n"
                               "default_model = stories\n"
                               "log_level = DEBUG\n");
    ASSERT_TRUE(p);
    char a1[] = "--max-connections-per-uid=3", a2[] = "--listen=127.0.0.1:0",
         a3[] = "--warmd_socket=/tmp/x.sock";
    char *args[] = {a1, a2, a3};
    struct httpd_config c;
    struct err_detail e = {0};
    ASSERT_OK_D(config_load(&c, p, true, args, 3, &e), &e);
    ASSERT_EQ(c.n_listen, 1);                     /* the argument replaced the list */
    ASSERT_STREQ(c.listen[0], "127.0.0.1:0");
    ASSERT_EQ(c.n_allowed_origins, 2);
    ASSERT_STREQ(c.allowed_origins[1], "https://app.example");
    ASSERT_EQ(c.max_body_bytes, 512 * 1024);
    ASSERT_EQ(c.max_connections, 7);
    ASSERT_EQ(c.max_connections_per_uid, 3);
    ASSERT_EQ(c.connection_timeout_usec, 1500000);
    ASSERT_EQ(c.request_timeout_usec, 120000000ULL);
    ASSERT_STREQ(c.default_model, "stories");
    ASSERT_STREQ(c.warmd_socket, "/tmp/x.sock");
    ASSERT_EQ(c.log_level, LOG_LEVEL_DEBUG);
}

/* What config_print writes reads back as the same settings. */
TEST(print_reads_back) {
    char a1[] = "--allowed-origins=http://a:1 http://b:2", a2[] = "--max-body=3M";
    char *args[] = {a1, a2};
    struct httpd_config c, back;
    struct err_detail e = {0};
    ASSERT_OK_D(config_load(&c, "/dev/null", true, args, 2, &e), &e);
    char path[4096];
    snprintf(path, sizeof path, "%s/printed.conf", test_tmpdir());
    FILE *f = fopen(path, "w");
    ASSERT_TRUE(f);
    config_print(&c, f);
    fclose(f);
    ASSERT_OK_D(config_load(&back, path, true, NULL, 0, &e), &e);
    ASSERT_TRUE(memcmp(&c, &back, sizeof c) == 0);
}

struct bad {
    const char *text;     /* the file, or NULL when arg is the input */
    const char *arg;
    int err;
    const char *says;     /* part of the message */
};

static const struct bad bads[] = {
    {"no_such_key = 1\n", NULL, -ENOENT, "bad.conf:1: unknown setting 'no_such_key'"},
    {"# ok\nmax_body\n", NULL, -EINVAL, "bad.conf:2: expected 'key = value'"},
    {"max_body = 8X\n", NULL, -EINVAL, "max_body: '8X' is not a size"},
    {"max_body = -1\n", NULL, -EINVAL, "is not a size"},
    {"max_body = \n", NULL, -EINVAL, "is not a size"},
    {"max_body = 100\n", NULL, -ERANGE, "out of range"},            /* below 1024 */
    {"max_body = 2G\n", NULL, -ERANGE, "out of range"},
    {"max_body = 99999999999999999999K\n", NULL, -EINVAL, "is not a size"},
    {"max_body = 18446744073709551615K\n", NULL, -EINVAL, "max_body"},  /* overflows */
    {"max_connections = 0\n", NULL, -ERANGE, "max_connections"},
    {"max_connections = 1K\n", NULL, -EINVAL, "is not a number"},
    {"max_connections_per_uid = 4294967296\n", NULL, -ERANGE, "out of range"},
    {"connection_timeout = 0\n", NULL, -ERANGE, "connection_timeout"},
    {"request_timeout = 5 s\n", NULL, -EINVAL, "is not a duration"},
    {"log_level = loud\n", NULL, -EINVAL, "'loud' is not error, warn, info or debug"},
    {"listen = a b c d e f g h i\n", NULL, -E2BIG, "at most 8 entries"},
    {NULL, "--nope=1", -ENOENT, "argument --nope: unknown setting 'nope'"},
    {NULL, "--max-body", -EINVAL, "expected --key=value"},
    {NULL, "max_body=1M", -EINVAL, "expected --key=value"},
    {NULL, "--max-body=1", -ERANGE, "argument --max_body"},
};

TEST(errors_name_the_place) {
    for (size_t i = 0; i < ARRAY_SIZE(bads); i++) {
        const struct bad *b = &bads[i];
        const char *p = write_file("bad.conf", b->text ? b->text : "");
        ASSERT_TRUE(p);
        char arg[256];
        snprintf(arg, sizeof arg, "%s", b->arg ? b->arg : "");
        char *args[] = {arg};
        struct httpd_config c;
        struct err_detail e = {0};
        int r = config_load(&c, p, true, args, b->arg ? 1 : 0, &e);
        if (r != b->err || !contains(e.msg, b->says))
            TEST_FAIL_("case %zu (%s%s): returned %s, message '%s'; expected %s, '%s'", i,
                       b->text ? b->text : "", b->arg ? b->arg : "", err_name(r), e.msg,
                       err_name(b->err), b->says);
    }
}

/* Items longer than their field, and a string longer than its buffer, are refused whole. */
TEST(too_long_values) {
    char origin[HTTPD_ORIGIN_MAX + 40], text[HTTPD_ORIGIN_MAX + 80];
    memset(origin, 'o', sizeof origin - 1);
    origin[sizeof origin - 1] = '\0';
    snprintf(text, sizeof text, "allowed_origins = %s\n", origin);
    const char *p = write_file("long.conf", text);
    struct httpd_config c;
    struct err_detail e = {0};
    ASSERT_ERR(config_load(&c, p, true, NULL, 0, &e), -ENAMETOOLONG);
    ASSERT_TRUE(contains(e.msg, "long.conf:1: allowed_origins"));
    char sock[200];
    memset(sock, 's', sizeof sock - 1);
    sock[sizeof sock - 1] = '\0';
    snprintf(text, sizeof text, "warmd_socket = /%s\n", sock);
    p = write_file("long.conf", text);
    ASSERT_ERR(config_load(&c, p, true, NULL, 0, &e), -ENAMETOOLONG);
    ASSERT_TRUE(contains(e.msg, "warmd_socket: longer than 107 bytes"));
}

/* A line longer than the reader's buffer must be refused by its line number, not cut in
 * two and the rest read as a line of its own (which could set another key). */
TEST(overlong_line_is_an_error) {
    /* A comment of 5000 bytes whose bytes past the reader's 4 KiB buffer read as a line. */
    size_t n = 5000;
    char *text = malloc(n + 2);
    ASSERT_TRUE(text);
    memset(text, 'c', n);
    text[0] = '#';
    memcpy(text + 4095, "max_body = 2048 ", 16);
    strcpy(text + n, "\n");
    const char *p = write_file("overlong.conf", text);
    free(text);
    struct httpd_config c;
    struct err_detail e = {0};
    ASSERT_ERR(config_load(&c, p, true, NULL, 0, &e), -E2BIG);
    ASSERT_TRUE(contains(e.msg, "overlong.conf:1: line longer than"));
    /* The last line of a file may end without a newline. */
    p = write_file("overlong.conf", "max_body = 2048");
    ASSERT_OK_D(config_load(&c, p, true, NULL, 0, &e), &e);
    ASSERT_EQ(c.max_body_bytes, 2048);
}

TEST(help_lists_every_key) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ASSERT_TRUE(f);
    config_print_help(f);
    fclose(f);
    static const char *const keys[] = {"listen", "warmd_socket", "allowed_origins", "max_body",
                                       "max_connections", "max_connections_per_uid",
                                       "connection_timeout", "request_timeout",
                                       "default_model", "log_level"};
    int missing = 0;
    for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
        char want[64];
        snprintf(want, sizeof want, "--%s ", keys[i]);
        if (!contains(buf, want)) missing++;
    }
    free(buf);
    ASSERT_EQ(missing, 0);
}

TEST_MAIN(T(defaults_without_a_file), T(file_then_arguments), T(print_reads_back),
          T(errors_name_the_place), T(too_long_values), T(overlong_line_is_an_error),
          T(help_lists_every_key))
