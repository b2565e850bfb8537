#include "test.h"

#include <errno.h>

TEST(err_table) {
    ASSERT_TRUE(ERR_INVALID < 0 && ERR_INVALID > ERR__START);
    ASSERT_STREQ(err_name(ERR_GGUF_BAD_SHAPE), "ERR_GGUF_BAD_SHAPE");
    ASSERT_STREQ(err_str(ERR_GGUF_BAD_SHAPE), "gguf: bad tensor shape");
    ASSERT_STREQ(err_name(ERR_CONFIG), "ERR_CONFIG");
    ASSERT_STREQ(err_name(-ENOENT), "ENOENT");
    ASSERT_STREQ(err_str(-ENOMEM), "Cannot allocate memory");
    ASSERT_STREQ(err_name(0), "OK");
    /* every project code has a distinct name */
    for (int c = ERR__START + 1; c < ERR__END; c++)
        for (int k = c + 1; k < ERR__END; k++) ASSERT_TRUE(strcmp(err_name(c), err_name(k)) != 0);
}

TEST(detail) {
    struct err_detail d = {0};
    int r = err_set(&d, ERR_GGUF_DATA_EOF, "tensor '%s': data ends %d bytes past the end", "x", 9);
    ASSERT_EQ(r, ERR_GGUF_DATA_EOF);
    ASSERT_STREQ(err_msg(&d, r), "tensor 'x': data ends 9 bytes past the end");
    ASSERT_STREQ(err_msg(NULL, r), "gguf: tensor data past end of file");
    ASSERT_EQ(err_set(NULL, -EINVAL, "ignored"), -EINVAL);
    /* a detail set for another code does not leak into this one */
    ASSERT_STREQ(err_msg(&d, ERR_TRUNCATED), err_str(ERR_TRUNCATED));
}

TEST(checked_arith) {
    size_t s = 7;
    ASSERT_TRUE(!size_mul(SIZE_MAX / 2 + 1, 2, &s));
    ASSERT_EQ(s, 7); /* untouched on failure */
    ASSERT_TRUE(size_mul(1u << 20, 1u << 10, &s) && s == (size_t)1 << 30);
    uint64_t u = 0;
    ASSERT_TRUE(!u64_add(UINT64_MAX, 1, &u));
    ASSERT_TRUE(u64_align_up(33, 32, &u) && u == 64);
    ASSERT_TRUE(u64_align_up(64, 32, &u) && u == 64);
    ASSERT_TRUE(!u64_align_up(UINT64_MAX - 3, 32, &u));
    ASSERT_TRUE(!u64_align_up(5, 0, &u));
    int64_t i = 0;
    ASSERT_TRUE(!i64_mul(INT64_MAX / 2 + 1, 2, &i));
    ASSERT_TRUE(malloc_array(SIZE_MAX / 8, 16) == NULL);
}

TEST(hashing) {
    /* XXH3 known answers: the empty input. */
    ASSERT_EQ(hash64("", 0), (long long)0x2D06800538D394C2ull);
    struct hash128 e = hash128("", 0);
    ASSERT_TRUE(e.hi == 0x99aa06d3014798d8ull && e.lo == 0x6001c324468d497full);
    /* streaming equals one-shot */
    const char *text = "the quick brown fox jumps over the lazy dog, many times over";
    struct hash128_state *st = NULL;
    ASSERT_OK(hash128_state_new(&st));
    for (size_t k = 0; k < strlen(text); k += 5)
        hash128_state_update(st, text + k, MIN((size_t)5, strlen(text) - k));
    struct hash128 a = hash128_state_digest(st), b = hash128(text, strlen(text));
    hash128_state_free(st);
    ASSERT_TRUE(hash128_eq(a, b));
    uint8_t bytes[16];
    hash128_to_bytes(a, bytes);
    ASSERT_TRUE(hash128_eq(hash128_from_bytes(bytes), a));
    char hex[33];
    hash128_to_hex(e, hex);
    ASSERT_STREQ(hex, "99aa06d3014798d86001c324468d497f");
}

TEST(clock) {
    uint64_t a = time_now_usec(), b = time_now_usec();
    ASSERT_TRUE(b >= a);
    ASSERT_TRUE(time_wall_usec() > 1600000000ull * 1000000ull);
}

static int sink_calls;
static void sink(enum log_level l, const char *m, void *u) {
    sink_calls += (l == LOG_LEVEL_DEBUG && strcmp(m, "x=3") == 0);
}

TEST(logging) {
    log_debug("dropped %d", 1);
    log_set_sink(sink, NULL);
    log_debug("x=%d", 3);
    log_set_sink(NULL, NULL);
    log_debug("x=%d", 3);
    ASSERT_EQ(sink_calls, 1);
}

TEST_MAIN(T(err_table), T(detail), T(checked_arith), T(hashing), T(clock), T(logging))
