/* rpc-wire — checks on a request's wire bytes that the decoded message cannot show. */
#pragma once

#include <protobuf-c/protobuf-c.h>

#include <stddef.h>
#include <stdint.h>

/* -EINVAL with a message in err ("warm.v1.ChatRequest.messages[1].content: a NUL byte at
 * offset 5; ...")
 * when a string field of the message data[0..len) (of type desc, already unpacked
 * successfully), at any depth, holds a NUL byte; else 0. */
int rpc_request_nul_check(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len,
                          char *err, size_t n_err);
