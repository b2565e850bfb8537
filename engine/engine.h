/* engine — models, tokenizers, the KV cache, the forward pass and sampling.
 *
 * The engine's public surface is this header; the sub-headers it includes are parts of
 * it, one per object (gguf reader and writer, vocabulary, model, context, sampler,
 * grammar). Other modules include only engine/engine.h. */
#pragma once

#include "base/base.h"
#include "kernels/kernels.h"
#include "engine/gguf.h"
#include "engine/vocab.h"
#include "engine/model.h"
#include "engine/context.h"
#include "engine/sample.h"
#include "engine/grammar.h"
#include "engine/chat.h"
