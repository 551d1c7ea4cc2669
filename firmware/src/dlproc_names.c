/* Names of runtime status codes, processor error codes and performance counters. */
#include "dlproc_rt.h"
#include "dlproc_regs.h"

const char *dlproc_status_name(int code) {
    switch (code) {
    case DLPROC_OK: return "OK";
    case DLPROC_E_ARG: return "E_ARG";
    case DLPROC_E_NOMEM: return "E_NOMEM";
    case DLPROC_E_FORMAT: return "E_FORMAT";
    case DLPROC_E_VERSION: return "E_VERSION";
    case DLPROC_E_CONFIG: return "E_CONFIG";
    case DLPROC_E_HW: return "E_HW";
    case DLPROC_E_RANGE: return "E_RANGE";
    case DLPROC_E_STATE: return "E_STATE";
    case DLPROC_E_TIMEOUT: return "E_TIMEOUT";
    case DLPROC_E_PROC: return "E_PROC";
    case DLPROC_E_HAL: return "E_HAL";
    case DLPROC_E_INPUT: return "E_INPUT";
    case DLPROC_E_AUTH: return "E_AUTH";
    case DLPROC_E_PROTO: return "E_PROTO";
    case DLPROC_E_TOO_BIG: return "E_TOO_BIG";
    default: return "E_UNKNOWN";
    }
}

/* Names of STATUS.ERROR_CODE values, from the generated DLPROC_ERR_* macros (dlproc.isa.ErrorCode).
 * tests/test_firmware_netfile.py checks this list against dlproc.isa, so a new code fails a test
 * until it is added here (a generated name table in dlproc_regs.h would remove this list). */
const char *dlproc_hw_error_name(uint32_t code) {
    switch (code) {
    case DLPROC_ERR_NONE: return "NONE";
    case DLPROC_ERR_ILLEGAL_OPCODE: return "ILLEGAL_OPCODE";
    case DLPROC_ERR_RAN_OFF_END: return "RAN_OFF_END";
    case DLPROC_ERR_DMA_FETCH: return "DMA_FETCH";
    case DLPROC_ERR_DMA_LOAD: return "DMA_LOAD";
    case DLPROC_ERR_DMA_STORE: return "DMA_STORE";
    case DLPROC_ERR_SRAM_RANGE: return "SRAM_RANGE";
    case DLPROC_ERR_DEADLOCK: return "DEADLOCK";
    case DLPROC_ERR_ABORTED: return "ABORTED";
    case DLPROC_ERR_ILLEGAL_FIELD: return "ILLEGAL_FIELD";
    case DLPROC_ERR_TOKEN_OVERFLOW: return "TOKEN_OVERFLOW";
    case DLPROC_ERR_COMPUTE: return "COMPUTE";
#ifdef DLPROC_ERR_BLOCK_ABSENT
    case DLPROC_ERR_BLOCK_ABSENT: return "BLOCK_ABSENT";
#endif
#ifdef DLPROC_ERR_WRITE_RESPONSE
    case DLPROC_ERR_WRITE_RESPONSE: return "WRITE_RESPONSE";
#endif
    default: return "UNKNOWN";
    }
}

static const char *const PERF_NAMES[DLPROC_N_PERF] = {
    "FETCH_BUSY", "LOAD_BUSY", "LOAD_STALL", "COMPUTE_BUSY", "COMPUTE_STALL",
    "STORE_BUSY", "STORE_STALL", "MEM_RD_BEATS", "MEM_WR_BEATS", "MEM_WAIT",
};
const char *dlproc_perf_name(unsigned i) { return i < DLPROC_N_PERF ? PERF_NAMES[i] : "?"; }
