/* Simulation HAL: the runtime drives the Verilated processor of the native harness.
 *
 * The harness library (libdlsim.so, built by dlproc.sim.build for one ProcessorConfig) holds the
 * Verilated dlproc_top and a DDR model behind an extern "C" API (sim/native/harness.cpp).  It is
 * loaded with dlopen() at run time, so one runner/agent binary serves every configuration: the
 * library path is the option lib=PATH.  The DMA region is the whole modelled DDR
 * [ddr_base, ddr_base + ddr_size); CPU accesses to it are zero-time copies, as a cache-coherent
 * bus would make them, so the sync calls have nothing to do.
 *
 * Time: a timeout is processor time, converted to cycles at clock_mhz, so a run that times out in
 * simulation would also time out on the board at that clock.  wall_limit_s additionally bounds the
 * wall-clock time of one wait, because a slow simulation must never hang its caller.
 */
#define _POSIX_C_SOURCE 200809L
#include "dlproc_hal.h"
#include "dlproc_util.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

/* The harness C API, as defined (extern "C") in sim/native/harness.cpp, ABI version 3.  There is
 * no shared header yet, so the prototypes are declared here as function-pointer types; the ABI
 * version check below catches a drift. (Version 2 added per-port DDR statistics for processors
 * with two memory masters; version 3 the write-response latency argument of dl_create. A
 * two-master processor needs nothing else from the HAL: both masters address the same memory,
 * which dl_mem_write/read reach.) */
#define HARNESS_ABI 3
#define DL_IRQ 0
#define DL_TIMEOUT 1
#define DL_DDR_ERROR 2
typedef int32_t (*dl_abi_version_fn)(void);
typedef uint32_t (*dl_mem_bytes_fn)(void);
typedef void *(*dl_create_fn)(uint64_t ddr_base, uint64_t ddr_size, double bytes_per_cycle, uint32_t latency,
                              uint32_t queue_depth, uint32_t wr_resp_latency, const char *trace_path);
typedef void (*dl_free_fn)(void *h);
typedef void (*dl_reset_fn)(void *h, uint32_t cycles);
typedef int32_t (*dl_mem_write_fn)(void *h, uint64_t addr, const uint8_t *data, uint64_t n);
typedef int32_t (*dl_mem_read_fn)(void *h, uint64_t addr, uint8_t *out, uint64_t n);
typedef void (*dl_csr_write_fn)(void *h, uint32_t word_addr, uint32_t value);
typedef uint32_t (*dl_csr_read_fn)(void *h, uint32_t word_addr);
typedef int32_t (*dl_run_fn)(void *h, uint64_t max_cycles, uint64_t *ran);
typedef int32_t (*dl_ddr_error_fn)(void *h, char *msg, uint32_t len);

struct dlproc_hal {
    void *lib;
    void *sim;
    uint64_t ddr_base, ddr_size;
    double clock_mhz;
    double wall_limit_s;
    uint64_t chunk_cycles;
    dl_free_fn free_;
    dl_mem_write_fn mem_write;
    dl_mem_read_fn mem_read;
    dl_csr_write_fn csr_write;
    dl_csr_read_fn csr_read;
    dl_run_fn run;
    dl_ddr_error_fn ddr_error;
};

const char *dlproc_hal_name(void) { return "sim"; }

const char *dlproc_hal_usage(void) {
    return "lib=PATH              native harness library libdlsim.so of the configuration (required)\n"
           "ddr_base=ADDR         byte address of the modelled DDR, the DMA region (default 0)\n"
           "ddr_size=BYTES        size of the modelled DDR (default 64 MiB)\n"
           "bytes_per_cycle=X     DDR bandwidth of the model (default 16)\n"
           "latency=CYCLES        DDR read latency of the model (default 20)\n"
           "queue_depth=N         DDR command queue depth (default 8)\n"
           "clock_mhz=F           processor clock that converts timeouts to cycles (default 100)\n"
           "wall_limit_s=S        wall-clock limit of one wait (default 300)\n";
}

static void *sym(struct dlproc_hal *h, const char *name, char *err, size_t errlen) {
    void *p = dlsym(h->lib, name);
    if (!p) dlproc_set_err(err, errlen, "the harness library has no symbol %s", name);
    return p;
}

static int parse_opts(struct dlproc_hal *h, int nopts, char *const *opts, const char **lib, double *bpc,
                      uint64_t *latency, uint64_t *qdepth, char *err, size_t errlen) {
    for (int i = 0; i < nopts; ++i) {
        char buf[512];
        char *key, *val;
        if (strlen(opts[i]) >= sizeof buf) {
            dlproc_set_err(err, errlen, "sim HAL option too long: %.40s...", opts[i]);
            return -1;
        }
        strcpy(buf, opts[i]);
        if (dlproc_split_opt(buf, &key, &val)) {
            dlproc_set_err(err, errlen, "sim HAL option '%s' is not key=value", opts[i]);
            return -1;
        }
        int bad = 0;
        if (!strcmp(key, "lib")) *lib = opts[i] + (val - buf);
        else if (!strcmp(key, "ddr_base")) bad = dlproc_parse_u64(val, &h->ddr_base);
        else if (!strcmp(key, "ddr_size")) bad = dlproc_parse_u64(val, &h->ddr_size);
        else if (!strcmp(key, "bytes_per_cycle")) bad = dlproc_parse_double(val, bpc) || *bpc <= 0;
        else if (!strcmp(key, "latency")) bad = dlproc_parse_u64(val, latency) || *latency > 100000;
        else if (!strcmp(key, "queue_depth")) bad = dlproc_parse_u64(val, qdepth) || *qdepth == 0 || *qdepth > 1024;
        else if (!strcmp(key, "clock_mhz")) bad = dlproc_parse_double(val, &h->clock_mhz) || h->clock_mhz <= 0;
        else if (!strcmp(key, "wall_limit_s")) bad = dlproc_parse_double(val, &h->wall_limit_s) || h->wall_limit_s <= 0;
        else {
            dlproc_set_err(err, errlen, "unknown sim HAL option '%s'; allowed:\n%s", key, dlproc_hal_usage());
            return -1;
        }
        if (bad) {
            dlproc_set_err(err, errlen, "sim HAL option %s has a bad value '%s'", key, val);
            return -1;
        }
    }
    return 0;
}

int dlproc_hal_open(int nopts, char *const *opts, dlproc_hal **out, char *err, size_t errlen) {
    struct dlproc_hal *h = calloc(1, sizeof *h);
    if (!h) {
        dlproc_set_err(err, errlen, "out of memory");
        return -1;
    }
    const char *lib = NULL;
    double bpc = 16.0;
    uint64_t latency = 20, qdepth = 8;
    h->ddr_size = 64u << 20;
    h->clock_mhz = 100.0;
    h->wall_limit_s = 300.0;
    h->chunk_cycles = 20000;
    if (parse_opts(h, nopts, opts, &lib, &bpc, &latency, &qdepth, err, errlen)) goto fail;
    if (!lib) {
        dlproc_set_err(err, errlen, "the sim HAL needs lib=PATH of the native harness library (libdlsim.so)");
        goto fail;
    }
    if (h->ddr_size == 0 || h->ddr_size > (1ull << 32) || h->ddr_base > (1ull << 32) - h->ddr_size) {
        dlproc_set_err(err, errlen, "the modelled DDR [0x%llx, +0x%llx) must be non-empty and below 4 GiB",
                       (unsigned long long)h->ddr_base, (unsigned long long)h->ddr_size);
        goto fail;
    }
    h->lib = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h->lib) {
        dlproc_set_err(err, errlen, "cannot load the harness library: %s", dlerror());
        goto fail;
    }
    dl_abi_version_fn abi = (dl_abi_version_fn)sym(h, "dl_abi_version", err, errlen);
    dl_mem_bytes_fn mem_bytes = (dl_mem_bytes_fn)sym(h, "dl_mem_bytes", err, errlen);
    dl_create_fn create = (dl_create_fn)sym(h, "dl_create", err, errlen);
    dl_reset_fn reset = (dl_reset_fn)sym(h, "dl_reset", err, errlen);
    h->free_ = (dl_free_fn)sym(h, "dl_free", err, errlen);
    h->mem_write = (dl_mem_write_fn)sym(h, "dl_mem_write", err, errlen);
    h->mem_read = (dl_mem_read_fn)sym(h, "dl_mem_read", err, errlen);
    h->csr_write = (dl_csr_write_fn)sym(h, "dl_csr_write", err, errlen);
    h->csr_read = (dl_csr_read_fn)sym(h, "dl_csr_read", err, errlen);
    h->run = (dl_run_fn)sym(h, "dl_run", err, errlen);
    h->ddr_error = (dl_ddr_error_fn)sym(h, "dl_ddr_error", err, errlen);
    if (!abi || !mem_bytes || !create || !reset || !h->free_ || !h->mem_write || !h->mem_read || !h->csr_write ||
        !h->csr_read || !h->run || !h->ddr_error)
        goto fail;
    if (abi() != HARNESS_ABI) {
        dlproc_set_err(err, errlen, "harness library ABI %d, this HAL speaks ABI %d; rebuild one of them",
                       (int)abi(), HARNESS_ABI);
        goto fail;
    }
    uint32_t mb = mem_bytes();
    if (mb == 0 || h->ddr_base % mb || h->ddr_size % mb) {
        dlproc_set_err(err, errlen, "ddr_base and ddr_size must be multiples of the %u-byte memory bus", mb);
        goto fail;
    }
    /* Write responses (port 1, two-master processors) come after the read latency, as in NativeSim. */
    h->sim = create(h->ddr_base, h->ddr_size, bpc, (uint32_t)latency, (uint32_t)qdepth, (uint32_t)latency, NULL);
    if (!h->sim) {
        dlproc_set_err(err, errlen, "the harness could not create a %llu-byte DDR model",
                       (unsigned long long)h->ddr_size);
        goto fail;
    }
    reset(h->sim, 4);
    *out = h;
    return 0;
fail:
    dlproc_hal_close(h);
    return -1;
}

void dlproc_hal_close(dlproc_hal *h) {
    if (!h) return;
    if (h->sim && h->free_) h->free_(h->sim);
    if (h->lib) dlclose(h->lib);
    free(h);
}

uint32_t dlproc_hal_csr_read(dlproc_hal *h, uint32_t word) { return h->csr_read(h->sim, word); }
void dlproc_hal_csr_write(dlproc_hal *h, uint32_t word, uint32_t value) { h->csr_write(h->sim, word, value); }
uint64_t dlproc_hal_dma_phys(const dlproc_hal *h) { return h->ddr_base; }
uint64_t dlproc_hal_dma_size(const dlproc_hal *h) { return h->ddr_size; }

int dlproc_hal_dma_write(dlproc_hal *h, uint64_t off, const void *src, size_t n) {
    if (!dlproc_in_bounds(off, n, h->ddr_size)) return -1;
    if (n == 0) return 0;
    return h->mem_write(h->sim, h->ddr_base + off, (const uint8_t *)src, n) ? -1 : 0;
}

int dlproc_hal_dma_read(dlproc_hal *h, uint64_t off, void *dst, size_t n) {
    if (!dlproc_in_bounds(off, n, h->ddr_size)) return -1;
    if (n == 0) return 0;
    return h->mem_read(h->sim, h->ddr_base + off, (uint8_t *)dst, n) ? -1 : 0;
}

int dlproc_hal_sync_for_device(dlproc_hal *h, uint64_t off, size_t n) {
    return dlproc_in_bounds(off, n, h->ddr_size) ? 0 : -1;
}

int dlproc_hal_sync_for_cpu(dlproc_hal *h, uint64_t off, size_t n) {
    return dlproc_in_bounds(off, n, h->ddr_size) ? 0 : -1;
}

int dlproc_hal_wait(dlproc_hal *h, uint64_t timeout_us, char *err, size_t errlen) {
    double cycles_d = (double)timeout_us * h->clock_mhz;
    uint64_t budget = cycles_d >= 1.8e19 ? UINT64_MAX : (uint64_t)cycles_d;
    if (budget == 0) budget = 1;
    uint64_t start = dlproc_now_us();
    uint64_t wall_limit = (uint64_t)(h->wall_limit_s * 1e6);
    while (budget > 0) {
        uint64_t ran = 0, chunk = budget < h->chunk_cycles ? budget : h->chunk_cycles;
        int32_t st = h->run(h->sim, chunk, &ran);
        budget -= ran < budget ? ran : budget;
        if (st == DL_IRQ) return DLPROC_HAL_IRQ;
        if (st == DL_DDR_ERROR) {
            char msg[256];
            int code = (int)h->ddr_error(h->sim, msg, sizeof msg);
            dlproc_set_err(err, errlen, "the DDR model flagged a bad access (code %d): %s", code, msg);
            return DLPROC_HAL_FAIL;
        }
        if (st != DL_TIMEOUT) {
            dlproc_set_err(err, errlen, "the harness returned an unknown run status %d", (int)st);
            return DLPROC_HAL_FAIL;
        }
        if (dlproc_now_us() - start > wall_limit) {
            dlproc_set_err(err, errlen, "the simulation exceeded its wall-clock limit of %.0f s", h->wall_limit_s);
            return DLPROC_HAL_TIMEOUT;
        }
    }
    return DLPROC_HAL_TIMEOUT;
}
