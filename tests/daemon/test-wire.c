/* Issue 17 item 16: a NUL byte inside a string field of a request is found on the wire
 * (protobuf-c hands the field over NUL-terminated, so it would silently end there) and
 * the decoder refuses the request naming the field, its index in a repeated field, and
 * the byte offset — at any depth; bytes fields and other fields may hold zeros. */
#include "test.h"

#include "daemon/rpc-wire.h"
#include "daemon/rpc.h"

#include "warm/v1/warm.pb-c.h"

#include <errno.h>
#include <string.h>

/* A length-delimited field: tag, length, bytes. */
static size_t put_field(uint8_t *p, unsigned number, const void *data, size_t n) {
    p[0] = (uint8_t)(number << 3 | 2);
    p[1] = (uint8_t)n; /* the tests keep every field under 128 bytes */
    memcpy(p + 2, data, n);
    return 2 + n;
}

TEST(nul_in_nested_repeated_string) {
    /* ChatRequest{model: "m", messages: [{role: "user", content: "hi"},
     *                                    {role: "user", content: "ab\0cd"}]} */
    uint8_t msg[2][32], buf[128];
    size_t n0 = put_field(msg[0], 1, "user", 4);
    n0 += put_field(msg[0] + n0, 2, "hi", 2);
    size_t n1 = put_field(msg[1], 1, "user", 4);
    n1 += put_field(msg[1] + n1, 2, "ab\0cd", 5);
    size_t n = put_field(buf, 1, "m", 1);
    n += put_field(buf + n, 2, msg[0], n0);
    n += put_field(buf + n, 2, msg[1], n1);
    char err[256] = "";
    ASSERT_EQ(rpc_request_nul_check(&warm__v1__chat_request__descriptor, buf, n, err,
                                    sizeof err), -EINVAL);
    ASSERT_STREQ(err, "warm.v1.ChatRequest.messages[1].content: a NUL byte at byte offset 2; "
                      "text fields may not contain NUL bytes");
    /* The decoder refuses it as INVALID_ARGUMENT material, with that message. */
    struct rpc_budget b;
    ProtobufCMessage *m = NULL;
    ASSERT_EQ(rpc_request_decode(&warm__v1__chat_request__descriptor, buf, n, 4096, &b, &m, err,
                                 sizeof err), -EINVAL);
    ASSERT_TRUE(m == NULL);
    ASSERT_TRUE(strstr(err, "messages[1].content") != NULL);
}

TEST(clean_requests_and_other_fields_pass) {
    /* TokenizeRequest{model: "m", text: "Once upon"}: nothing to say. */
    uint8_t buf[64];
    size_t n = put_field(buf, 1, "m", 1);
    n += put_field(buf + n, 2, "Once upon", 9);
    char err[256] = "";
    ASSERT_EQ(rpc_request_nul_check(&warm__v1__tokenize_request__descriptor, buf, n, err,
                                    sizeof err), 0);
    /* A zero varint (add_special = false written out) is no NUL in text. */
    buf[n++] = 3 << 3 | 0;
    buf[n++] = 0;
    ASSERT_EQ(rpc_request_nul_check(&warm__v1__tokenize_request__descriptor, buf, n, err,
                                    sizeof err), 0);
    /* The NUL at the very start of the text is offset 0 of field text. */
    n = put_field(buf, 2, "\0x", 2);
    ASSERT_EQ(rpc_request_nul_check(&warm__v1__tokenize_request__descriptor, buf, n, err,
                                    sizeof err), -EINVAL);
    ASSERT_TRUE(strstr(err, "TokenizeRequest.text: a NUL byte at byte offset 0") != NULL);
    /* A repeated string: stop[1] of GenerateRequest (field 6). */
    n = put_field(buf, 6, "ok", 2);
    n += put_field(buf + n, 6, "x\0", 2);
    ASSERT_EQ(rpc_request_nul_check(&warm__v1__generate_request__descriptor, buf, n, err,
                                    sizeof err), -EINVAL);
    ASSERT_TRUE(strstr(err, "GenerateRequest.stop[1]: a NUL byte at byte offset 1") != NULL);
}

TEST_MAIN(T(nul_in_nested_repeated_string), T(clean_requests_and_other_fields_pass))
