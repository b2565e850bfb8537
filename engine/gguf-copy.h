/* gguf-copy — reads a model file into private anonymous memory for gguf_open_copy(), at the
 * speed of reading the file, holding it in memory once.
 *
 * Measured with tests/tools/warm-load-bench on a 2-vCPU VM (f16 qwen3moe files of 7.0 and
 * 12.8 GiB, best runs): cold, 0.9-1.1x the time of `cat FILE > /dev/null`; warm, 1.0x
 * (7.0 GiB) to 1.8-2.1x (12.8 GiB: fresh memory is zeroed by the kernel and then written,
 * about 3-4 times the memory traffic of cat's reads into one cached buffer; that is the
 * floor of any private copy). The single reader before took 13.6x cat warm and left the
 * file in the page cache beside the copy (twice the memory).
 *
 * Why this shape:
 *  - a copy, not a mapping: pages of a MAP_PRIVATE file mapping stay the page cache's until
 *    written, so a write over the file changes them and a truncation faults them (SIGBUS);
 *    only bytes of our own are a snapshot. O_DIRECT would skip the page cache but read a
 *    warm file from the disk again; a reflink needs a file system that has them; a memfd
 *    (tmpfs) copy would skip the zeroing but gets 4 KiB pages where shmem huge pages are off
 *    (Debian's default): mapping 12.8 GiB of them took 6-15 s.
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
