/* rpc-wire — what protobuf-c's unpacking hides: a `string` field is handed to the handlers
 * NUL-terminated, without its length, so text holding a NUL byte would silently end
 * there (everything after it dropped from a prompt). This walk over the request's wire
 * bytes finds the first NUL inside any string field, nested messages included, so the
 * request is refused naming the field and the byte offset instead. */
#include "daemon/rpc-wire.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define PATH_MAX_BYTES 200
#define NEST_MAX 16          /* warm.proto nests three deep */

/* A varint at *p (before end); false when it does not end before end. */
static bool varint(const uint8_t **p, const uint8_t *end, uint64_t *ret) {
    uint64_t v = 0;
    for (unsigned shift = 0; *p < end && shift < 64; shift += 7) {
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *ret = v;
            return true;
        }
    }
    return false;
}

/* Walks one message; 1 with path and *ret_offset set at the first NUL, 0 when there is
 * none, -1 on bytes it does not understand (the unpacker accepted them: nothing to say). */
static int walk(const ProtobufCMessageDescriptor *desc, const uint8_t *p, const uint8_t *end,
                int depth, char *path, size_t n_path, size_t *ret_offset) {
    if (depth > NEST_MAX) return -1;
    unsigned seen[64] = {0};    /* occurrences per field index: repeated fields' [i] */
    while (p < end) {
        uint64_t tag, len;
        if (!varint(&p, end, &tag)) return -1;
        switch (tag & 7) {
        case 0: if (!varint(&p, end, &len)) return -1; continue;
        case 1: if (end - p < 8) return -1; p += 8; continue;
        case 5: if (end - p < 4) return -1; p += 4; continue;
        case 2: break;
        default: return -1;
        }
        if (!varint(&p, end, &len) || len > (uint64_t)(end - p)) return -1;
        const uint8_t *v = p;
        p += len;
        uint64_t number = tag >> 3;
        const ProtobufCFieldDescriptor *f =
            number <= UINT32_MAX ? protobuf_c_message_descriptor_get_field(desc, (unsigned)number)
                                 : NULL;
        if (!f || (f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_MESSAGE))
            continue;
        size_t fi = (size_t)(f - desc->fields);
        unsigned index = fi < 64 ? seen[fi]++ : 0;
        size_t at = strlen(path);
        if (f->label == PROTOBUF_C_LABEL_REPEATED)
            snprintf(path + at, n_path - at, "%s%s[%u]", at ? "." : "", f->name, index);
        else
            snprintf(path + at, n_path - at, "%s%s", at ? "." : "", f->name);
        if (f->type == PROTOBUF_C_TYPE_STRING) {
            const uint8_t *nul = memchr(v, 0, len);
            if (nul) {
                *ret_offset = (size_t)(nul - v);
                return 1;
            }
        } else {
            int r = walk(f->descriptor, v, v + len, depth + 1, path, n_path, ret_offset);
            if (r != 0) return r;
        }
        path[at] = '\0';
    }
    return 0;
}

int rpc_request_nul_check(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len,
                          char *err, size_t n_err) {
    char path[PATH_MAX_BYTES] = "";
    size_t offset = 0;
    if (walk(desc, data, data + len, 0, path, sizeof path, &offset) != 1) return 0;
    snprintf(err, n_err, "%s.%s: a NUL byte at byte offset %zu; text fields may not contain "
             "NUL bytes", desc->name, path, offset);
    return -EINVAL;
}
