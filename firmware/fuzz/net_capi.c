/* A flat C API over the compiled-network parser for tests (ctypes on libdlproc_net.so): no
 * structures cross the boundary, only a fixed array of summary values. */
#include "dlproc_net.h"
#include "dlproc_rt.h"

#include <string.h>

#define SUMMARY_LEN 16

/* Parses buf; on success fills summary (see the order below) and returns 0, else the
 * DLPROC_NET_E_* code with a message in err. */
int dlproc_capi_parse(const uint8_t *buf, size_t len, uint64_t summary[SUMMARY_LEN], char *err, size_t errlen) {
    dlproc_net net;
    int rc = dlproc_net_parse(buf, len, &net, err, errlen);
    if (rc) return rc;
    const uint64_t v[SUMMARY_LEN] = {
        net.hash64, net.base, net.end, net.insn_count, net.n_layers, net.n_tensors, net.n_profile,
        net.input_off, net.input_size, net.output_off, net.output_size, net.cwgt_bytes, net.fwgt_bytes,
        (uint64_t)(net.clock_mhz * 1000.0 + 0.5), net.format_version, net.n_regions,
    };
    memcpy(summary, v, sizeof v);
    dlproc_net_free(&net);
    return 0;
}

/* Parses buf and checks it against a processor geometry. */
int dlproc_capi_check(const uint8_t *buf, size_t len, uint32_t c, uint32_t bus_bytes, char *err, size_t errlen) {
    dlproc_net net;
    int rc = dlproc_net_parse(buf, len, &net, err, errlen);
    if (rc) return rc;
    rc = dlproc_net_check_geometry(&net, c, bus_bytes, err, errlen);
    dlproc_net_free(&net);
    return rc;
}

/* Layer i's name and profile index (for checking the layer table), -1 when out of range. */
int dlproc_capi_layer(const uint8_t *buf, size_t len, uint32_t i, char *name, size_t namelen, int32_t *profile_index) {
    dlproc_net net;
    char err[16];
    if (dlproc_net_parse(buf, len, &net, err, sizeof err)) return -1;
    int rc = -1;
    if (i < net.n_layers && namelen) {
        strncpy(name, net.layers[i].name, namelen - 1);
        name[namelen - 1] = '\0';
        *profile_index = net.layers[i].profile_index;
        rc = 0;
    }
    dlproc_net_free(&net);
    return rc;
}

const char *dlproc_capi_hw_error_name(uint32_t code) { return dlproc_hw_error_name(code); }
const char *dlproc_capi_status_name(int code) { return dlproc_status_name(code); }
