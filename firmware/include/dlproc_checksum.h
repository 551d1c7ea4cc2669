/* CRC-32 (the zlib/IEEE polynomial) and SHA-256, as the compiled-network file uses them. */
#ifndef DLPROC_CHECKSUM_H
#define DLPROC_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

uint32_t dlproc_crc32(const uint8_t *data, size_t n);
void dlproc_sha256(const uint8_t *data, size_t n, uint8_t digest[32]);

#endif /* DLPROC_CHECKSUM_H */
