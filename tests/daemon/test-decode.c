/* P0-11: every request message of warm.v1.Warm decoded from hostile bytes — random
 * buffers, random well-formed field sequences, truncations of them and amplification
 * bombs — through the daemon's bounded decoder: no crash, no leak (run under ASan), a
 * clean -EINVAL with a message for what does not decode, and the allocation budget holds. */
#include "test.h"

#include "daemon/rpc.h"

#include <errno.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void) {
    /* xorshift64*: deterministic, so a failure replays. */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}

static size_t put_varint(uint8_t *p, uint64_t v) {
    size_t n = 0;
    do {
        p[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return n;
}

/* A random sequence of fields with plausible numbers and wire types. */
static size_t random_fields(uint8_t *buf, size_t cap) {
    size_t n = 0;
    while (n + 32 < cap && rnd() % 8) {
        uint32_t field = 1 + (uint32_t)(rnd() % 20);
        static const uint32_t wire[] = {0, 1, 2, 5};
        uint32_t wt = wire[rnd() % 4];
        n += put_varint(buf + n, (uint64_t)field << 3 | wt);
        switch (wt) {
        case 0: n += put_varint(buf + n, rnd() >> (rnd() % 64)); break;
        case 1: for (int i = 0; i < 8; i++) buf[n++] = (uint8_t)rnd(); break;
        case 5: for (int i = 0; i < 4; i++) buf[n++] = (uint8_t)rnd(); break;
        default: {
            size_t len = rnd() % 12;
            if (rnd() % 16 == 0) len = rnd() % 100000; /* a length past the end */
            n += put_varint(buf + n, len);
            for (size_t i = 0; i < len && n < cap; i++) buf[n++] = (uint8_t)rnd();
        }
        }
    }
    return MIN(n, cap);
}

static int try_decode(const struct rpc_method *m, const uint8_t *data, size_t len) {
    struct rpc_budget b;
    ProtobufCMessage *msg = NULL;
    char err[512];
    int e = rpc_request_decode(m->request, data, len, 4 << 20, &b, &msg, err, sizeof err);
    if (e == 0) {
        rpc_request_free(msg, &b);
    } else if (e != -EINVAL || !strstr(err, m->request->name)) {
        return -1;
    }
    if (b.used > b.limit) return -2;
    return e == 0;
}

TEST(hostile_bytes) {
    uint8_t buf[4096];
    for (size_t mi = 0; mi < rpc_n_methods; mi++) {
        const struct rpc_method *m = &rpc_methods[mi];
        int ok = 0;
        ASSERT_EQ(try_decode(m, buf, 0), 1); /* empty = all defaults */
        for (int it = 0; it < 3000; it++) {
            size_t len;
            if (it % 3 == 0) {
                len = rnd() % 64;
                for (size_t i = 0; i < len; i++) buf[i] = (uint8_t)rnd();
            } else {
                len = random_fields(buf, sizeof buf);
                if (it % 3 == 2 && len) len = rnd() % len; /* truncated */
            }
            int r = try_decode(m, buf, len);
            ASSERT_TRUE(r >= 0);
            ok += r;
        }
        /* Both outcomes happen: the generator is not trivially rejected or accepted. */
        ASSERT_TRUE(ok > 0 && ok < 3000);
    }
}

TEST(amplification) {
    /* ChatRequest: 1 MiB of empty ChatMessage entries (field 2, length 0). */
    const struct rpc_method *chat = NULL;
    for (size_t i = 0; i < rpc_n_methods; i++)
        if (strcmp(rpc_methods[i].name, "Chat") == 0) chat = &rpc_methods[i];
    ASSERT_TRUE(chat != NULL);
    size_t n = 1 << 20;
    uint8_t *buf = malloc(n);
    ASSERT_TRUE(buf != NULL);
    for (size_t i = 0; i < n; i += 2) {
        buf[i] = 2 << 3 | 2;
        buf[i + 1] = 0;
    }
    struct rpc_budget b;
    ProtobufCMessage *msg = NULL;
    char err[512];
    int e = rpc_request_decode(chat->request, buf, n, 4 << 20, &b, &msg, err, sizeof err);
    free(buf);
    ASSERT_ERR(e, -EINVAL);
    ASSERT_TRUE(b.exceeded);
    ASSERT_TRUE(strstr(err, "too many fields") != NULL);
    /* Over max_bytes: refused before unpacking. */
    uint8_t small[8] = {0};
    ASSERT_ERR(rpc_request_decode(chat->request, small, sizeof small, 4, &b, &msg, err, sizeof err),
               -EINVAL);
    ASSERT_TRUE(strstr(err, "larger than max_request_bytes") != NULL);
}

TEST_MAIN(T(hostile_bytes), T(amplification))
