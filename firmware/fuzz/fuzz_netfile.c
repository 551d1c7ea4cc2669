/* Persistent fuzz driver of the compiled-network parser, built with AddressSanitizer and
 * UndefinedBehaviorSanitizer (any out-of-bounds access, overflow or leak aborts the process).
 *
 * stdin: records "u32 length (little endian), length bytes" until end of file.  For each record
 * the driver parses the bytes, and if they parse, checks them against the geometries C=4/bus 16
 * and C=8/bus 32 as deploy does, then writes one result byte to stdout (the parser's code, with
 * bit 7 set when a geometry check failed).  A record is copied into a buffer of exactly its length,
 * so ASan sees any read beyond it.  Running many inputs in one process keeps fuzzing fast. */
#include "dlproc_net.h"
#include "dlproc_util.h"

#include <stdio.h>
#include <stdlib.h>

#define MAX_RECORD (64u << 20)

int main(void) {
    for (;;) {
        uint8_t head[4];
        if (fread(head, 1, 4, stdin) != 4) break;
        uint32_t n = dlproc_ld32(head);
        if (n > MAX_RECORD) {
            fprintf(stderr, "fuzz-netfile: record of %u bytes exceeds %u\n", n, MAX_RECORD);
            return 2;
        }
        uint8_t *buf = malloc(n ? n : 1);
        if (!buf || fread(buf, 1, n, stdin) != n) {
            fprintf(stderr, "fuzz-netfile: truncated record\n");
            free(buf);
            return 2;
        }
        dlproc_net net;
        char err[512];
        int rc = dlproc_net_parse(n ? buf : NULL, n, &net, err, sizeof err);
        uint8_t result = (uint8_t)rc;
        if (rc == DLPROC_NET_OK) {
            if (dlproc_net_check_geometry(&net, 4, 16, err, sizeof err) ||
                dlproc_net_check_geometry(&net, 8, 32, err, sizeof err))
                result |= 0x80;
            for (uint32_t i = 0; i < net.n_layers + 2; ++i) (void)dlproc_net_layer_of_insn(&net, i * 7u);
            dlproc_net_free(&net);
        }
        free(buf);
        if (fwrite(&result, 1, 1, stdout) != 1) return 2;
        fflush(stdout);
    }
    return 0;
}
