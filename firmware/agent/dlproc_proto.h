/* Wire protocol of the dlproc board agent, version 1 (docs/firmware.md describes it in full).
 *
 * Every message is a 16-byte header followed by `length` payload bytes, all little endian:
 *     u32 magic 'DLPA' (0x41504C44), u16 version (1), u16 type, u32 length, u32 seq
 * The agent answers each request with exactly one reply carrying the request's seq.
 */
#ifndef DLPROC_PROTO_H
#define DLPROC_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define DLPA_MAGIC 0x41504C44u
#define DLPA_VERSION 1u
#define DLPA_HEADER_SIZE 16u

/* Requests (client -> agent). */
#define DLPA_HELLO 1u   /* payload: the token (1..256 bytes); must come first */
#define DLPA_INFO 2u    /* empty */
#define DLPA_DEPLOY 3u  /* payload: a compiled-network file */
#define DLPA_RUN 4u     /* payload: u32 timeout_us (0 = agent default), then one packed input frame */
#define DLPA_BYE 5u     /* empty; the agent replies OK and closes */

/* Replies (agent -> client). */
#define DLPA_OK 0x81u     /* HELLO/INFO: info block; DEPLOY: deploy block; BYE: empty */
#define DLPA_ERROR 0x82u  /* u32 code (dlproc_status), u32 hw_error, u32 length, message (UTF-8) */
#define DLPA_RESULT 0x83u /* RUN: see DLPA_RESULT_* */

#define DLPA_TOKEN_MAX 256u
#define DLPA_ERROR_MSG_MAX 1024u
#define DLPA_INFO_SIZE 112u
/* Deploy block: u64 base (where it runs), end, input_off, input_size, output_off, output_size;
 * u32 instructions, layers, profile entries, 0; u64 the base it was compiled for. */
#define DLPA_DEPLOY_SIZE 72u
#define DLPA_RESULT_HEAD 32u /* u64 cycles, u64 wall_us, u32 fetched, u32 prof_count, u32 n_perf, u32 0 */

typedef struct {
    uint32_t magic;
    uint16_t version, type;
    uint32_t length, seq;
} dlpa_header;

static inline void dlpa_put_header(uint8_t out[DLPA_HEADER_SIZE], uint16_t type, uint32_t length, uint32_t seq) {
    const uint32_t v[4] = {DLPA_MAGIC, (uint32_t)DLPA_VERSION | ((uint32_t)type << 16), length, seq};
    for (int w = 0; w < 4; ++w)
        for (int b = 0; b < 4; ++b) out[4 * w + b] = (uint8_t)(v[w] >> (8 * b));
}

static inline void dlpa_get_header(const uint8_t in[DLPA_HEADER_SIZE], dlpa_header *h) {
    uint32_t v[4];
    for (int w = 0; w < 4; ++w)
        v[w] = (uint32_t)in[4 * w] | ((uint32_t)in[4 * w + 1] << 8) | ((uint32_t)in[4 * w + 2] << 16) |
               ((uint32_t)in[4 * w + 3] << 24);
    h->magic = v[0];
    h->version = (uint16_t)v[1];
    h->type = (uint16_t)(v[1] >> 16);
    h->length = v[2];
    h->seq = v[3];
}

#endif /* DLPROC_PROTO_H */
