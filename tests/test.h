/* A tiny test harness: TEST(name) functions registered in a table, ASSERT_* macros that
 * print file:line and the error's name and message, and a closing line CTest-style
 * runners and humans can read: "N passed, N failed". A test that needs missing outside
 * data calls SKIP("why"); the executable exits 77 (CTest SKIP_RETURN_CODE) when every
 * test skipped. */
#pragma once

#include "base/base.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct test_case {
    const char *name;
    void (*fn)(void);
};

extern int test_failed_;   /* set by a failing assertion in the current test */
extern int test_skipped_;  /* set by SKIP() */

#define TEST(name)                                                                     \
    static void test_##name(void)

#define TEST_FAIL_(...)                                                                \
    do {                                                                               \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                \
        fprintf(stderr, __VA_ARGS__);                                                  \
        fputc('\n', stderr);                                                           \
        test_failed_ = 1;                                                              \
        return;                                                                        \
    } while (0)

#define ASSERT_TRUE(c)                                                                 \
    do {                                                                               \
        if (!(c)) TEST_FAIL_("assertion failed: %s", #c);                              \
    } while (0)

#define ASSERT_OK(expr)                                                                \
    do {                                                                               \
        int r_ = (expr);                                                               \
        if (r_ < 0) TEST_FAIL_("%s failed: %s (%s)", #expr, err_name(r_), err_str(r_)); \
    } while (0)

/* Like ASSERT_OK, printing the detail buffer's message. */
#define ASSERT_OK_D(expr, d)                                                           \
    do {                                                                               \
        int r_ = (expr);                                                               \
        if (r_ < 0) TEST_FAIL_("%s failed: %s: %s", #expr, err_name(r_), err_msg(d, r_)); \
    } while (0)

#define ASSERT_ERR(expr, code)                                                         \
    do {                                                                               \
        int r_ = (expr), c_ = (code);                                                  \
        if (r_ != c_)                                                                  \
            TEST_FAIL_("%s returned %s, expected %s", #expr, err_name(r_), err_name(c_)); \
    } while (0)

#define ASSERT_EQ(a, b)                                                                \
    do {                                                                               \
        long long a_ = (long long)(a), b_ = (long long)(b);                            \
        if (a_ != b_) TEST_FAIL_("%s == %lld, expected %s == %lld", #a, a_, #b, b_);   \
    } while (0)

#define ASSERT_STREQ(a, b)                                                             \
    do {                                                                               \
        const char *a_ = (a), *b_ = (b);                                               \
        if (!a_ || !b_ || strcmp(a_, b_) != 0)                                         \
            TEST_FAIL_("%s == \"%s\", expected \"%s\"", #a, a_ ? a_ : "(null)",         \
                       b_ ? b_ : "(null)");                                            \
    } while (0)

#define ASSERT_NEAR(a, b, tol)                                                         \
    do {                                                                               \
        double a_ = (a), b_ = (b), t_ = (tol);                                         \
        if (!(fabs(a_ - b_) <= t_))                                                    \
            TEST_FAIL_("%s == %.9g, expected %.9g within %.3g", #a, a_, b_, t_);       \
    } while (0)

#define SKIP(...)                                                                      \
    do {                                                                               \
        printf("  skipped: ");                                                         \
        printf(__VA_ARGS__);                                                           \
        printf("\n");                                                                  \
        test_skipped_ = 1;                                                             \
        return;                                                                        \
    } while (0)

/* Path of a file under ../shared/models (WARM_SHARED_MODELS, set by CMake or the
 * environment). Returns NULL when the file is absent, so the caller can SKIP. */
const char *test_shared_path(const char *rel);
/* A fresh temporary directory for this test executable (removed at exit). */
const char *test_tmpdir(void);

/* $WARM_BIN/NAME (WARM_BIN: the build's bin/, set by CTest) when it is an executable there,
 * else NULL, so the caller can SKIP. Valid until the next call. */
const char *test_tool_path(const char *name);
/* Runs warm-mkmodel with the options printf(fmt, ...) (shell words, quoted as the shell
 * needs), writing the model to path; its messages go to test_tmpdir()/mkmodel.log, which
 * each run overwrites. Returns the tool's exit status, -1 when it is not built or did not
 * run. */
int test_mkmodel_run(const char *path, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The model warm-mkmodel makes with the options printf(fmt, ...), in
 * test_tmpdir()/NAME.gguf, made once per test executable: a later call with the same name
 * returns that file (a different shape takes a different name). Returns its path, valid
 * until exit, or NULL when warm-mkmodel is not built or failed (see mkmodel.log). */
const char *test_mkmodel(const char *name, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The index of the largest of n values (the first of equals): a greedy token. */
int32_t test_top_index(const float *x, int32_t n);
/* Σ(got - ref)² / Σ ref² over n values (the plain sum when ref is all zero). */
double test_nmse(const float *got, const float *ref, size_t n);

int test_main(const struct test_case *cases, size_t n, int argc, char **argv);

#define TEST_MAIN(...)                                                                 \
    int main(int argc, char **argv) {                                                  \
        static const struct test_case cases_[] = {__VA_ARGS__};                        \
        return test_main(cases_, ARRAY_SIZE(cases_), argc, argv);                      \
    }
#define T(name) {#name, test_##name}
