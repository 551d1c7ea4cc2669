/* dlproc runtime: deploy a compiled network on the processor and run frames through it.
 *
 *     dlproc_hal *hal;  dlproc_rt *rt;  dlproc_error e;
 *     dlproc_hal_open(nopts, opts, &hal, e.msg, sizeof e.msg);
 *     dlproc_rt_open(&rt, hal, &e);                 // identifies the processor (ID, version, hash)
 *     dlproc_rt_deploy(rt, file, file_len, &e);     // validates, places instructions + weights
 *     dlproc_rt_run(rt, in, in_len, out, out_cap, &out_len, timeout_us, &prof, &e);
 *
 * The input of a run is the InputDataOffset image of one frame (the host quantizes, folds and
 * packs it: dlproc.compiler.host.pack_frame), exactly as many bytes as that region holds; the
 * output is the whole OutputResultOffset region, where each output tensor sits at its IOQ offset.
 * Every function returns DLPROC_OK or a dlproc_status code and fills the dlproc_error.
 */
#ifndef DLPROC_RT_H
#define DLPROC_RT_H

#include <stddef.h>
#include <stdint.h>

#include "dlproc_hal.h"
#include "dlproc_net.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DLPROC_RT_VERSION 1
#define DLPROC_N_PERF 10        /* FETCH_BUSY .. MEM_WAIT, in register order */
#define DLPROC_MAX_PROFILE 1024 /* profile entries a run reports */

typedef enum {
    DLPROC_OK = 0,
    DLPROC_E_ARG = 1,      /* a bad argument from the caller */
    DLPROC_E_NOMEM = 2,    /* out of memory */
    DLPROC_E_FORMAT = 3,   /* malformed or corrupted compiled-network file */
    DLPROC_E_VERSION = 4,  /* file format or instruction-set version this runtime/processor does not speak */
    DLPROC_E_CONFIG = 5,   /* the network was compiled for another processor configuration */
    DLPROC_E_HW = 6,       /* no dlproc processor answers, or one of another major version */
    DLPROC_E_RANGE = 7,    /* the network does not fit the DMA region */
    DLPROC_E_STATE = 8,    /* no network deployed, or the processor is busy */
    DLPROC_E_TIMEOUT = 9,  /* the run did not finish in time (it was aborted) */
    DLPROC_E_PROC = 10,    /* the processor stopped with an error code */
    DLPROC_E_HAL = 11,     /* the HAL failed (device, mapping, simulation) */
    DLPROC_E_INPUT = 12,   /* input of the wrong size */
    /* Used by the agent protocol. */
    DLPROC_E_AUTH = 20,
    DLPROC_E_PROTO = 21,
    DLPROC_E_TOO_BIG = 22,
} dlproc_status;

typedef struct {
    int code;              /* dlproc_status */
    uint32_t hw_error;     /* STATUS.ERROR_CODE for DLPROC_E_PROC */
    char msg[512];
} dlproc_error;

typedef struct {
    uint32_t id, version;
    uint64_t config_hash;
    uint32_t c, mem_bytes, max_burst, queue_depth;
    uint32_t inp_depth, wgt_depth, prm_depth, out_depth, profile_depth;
    uint64_t dma_phys, dma_size;
} dlproc_hw_info;

typedef struct {
    uint64_t cycles;                    /* CYCLES: START to DONE */
    uint32_t fetched;                   /* instructions fetched */
    uint32_t prof_count;                /* profile entries below (MARKs executed, capped) */
    uint64_t prof[DLPROC_MAX_PROFILE];  /* cycle count latched by MARK i */
    uint32_t perf[DLPROC_N_PERF];
    uint64_t wall_us;                   /* wall time of the run, START to the interrupt */
} dlproc_profile;

typedef struct dlproc_rt dlproc_rt;

const char *dlproc_status_name(int code);          /* "E_FORMAT", ... */
const char *dlproc_hw_error_name(uint32_t code);   /* "DMA_STORE", ... ("UNKNOWN" otherwise) */
const char *dlproc_perf_name(unsigned i);          /* "FETCH_BUSY", ... */

int dlproc_rt_open(dlproc_rt **out, dlproc_hal *hal, dlproc_error *err);
void dlproc_rt_close(dlproc_rt *rt);   /* does not close the HAL */
const dlproc_hw_info *dlproc_rt_hw(const dlproc_rt *rt);

/* Validates the file against this processor and the DMA region and writes its instructions and
 * weights.  On failure the previously deployed network (if any) is forgotten. */
int dlproc_rt_deploy(dlproc_rt *rt, const uint8_t *file, size_t len, dlproc_error *err);
/* The deployed network (section pointers are NULL: the file is not kept), or NULL. */
const dlproc_net *dlproc_rt_net(const dlproc_rt *rt);

/* Runs one frame.  timeout_us of 0 means 10 s. */
int dlproc_rt_run(dlproc_rt *rt, const uint8_t *input, size_t in_len, uint8_t *output, size_t out_cap,
                  size_t *out_len, uint64_t timeout_us, dlproc_profile *prof, dlproc_error *err);

#ifdef __cplusplus
}
#endif

#endif /* DLPROC_RT_H */
