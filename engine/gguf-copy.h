/* gguf-copy — reads a model file into private anonymous memory for gguf_open_copy(), at the
 * speed of reading the file, holding it in memory once.
 *
 * Why this shape (measured in tests/tools/warm-load-bench; figures in its header):
 *  - a copy, not a mapping: pages of a MAP_PRIVATE file mapping stay the page cache's until
 *    written, so a write over the file changes them and a truncation faults them (SIGBUS);
 *    only bytes of our own are a snapshot. O_DIRECT would skip the page cache but read a
 *    warm file from the disk again; a reflink needs a file system that has them.
 *  - the page cache does not keep a second copy: each chunk's pages are dropped
 *    (POSIX_FADV_DONTNEED) once copied, so the resident memory is the weights once, and the
 *    copy's own pages are mostly the ones just dropped (no reclaim of other files' pages).
 *  - transparent huge pages on a 2 MiB-aligned mapping: 512 times fewer page faults while
 *    the copy is written (4 KiB faults alone took 20+ s for 7 GB on a virtual machine), and
 *    fewer TLB misses when every token reads every weight.
 *  - several readers: from a warm cache the read is a memory copy that one core does at a
 *    fraction of the memory's speed; from a cold one they keep the disk's queue full.
 *  - the fingerprint (XXH3-128 of the bytes, engine_model.fingerprint) is computed while the
 *    file is read, in order, by whichever reader finds the next chunk done, on bytes still
 *    in the CPU's cache: a separate pass over 20 GB would cost seconds more. */
#pragma once

#include "base/base.h"

#include <stddef.h>

/* Reads the size bytes of the regular file open at fd into a new private read-write
 * anonymous mapping of size bytes, 2 MiB-aligned (*ret_map, munmap(*ret_map, size)), and
 * hashes them (*ret_hash: XXH3-128 of the size bytes). Returns 0 (out-params written), 1
 * when the file ended before size bytes (it shrank; nothing written), or a negative errno
 * (-ENOMEM when there is no memory for the copy). */
int gguf_copy_read(int fd, size_t size, void **ret_map, struct hash128 *ret_hash);
