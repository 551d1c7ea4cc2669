/* dlproc runtime (see dlproc_rt.h): identity check, deployment and runs over the HAL. */
#include "dlproc_rt.h"
#include "dlproc_regs.h"
#include "dlproc_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_TIMEOUT_US 10000000u
/* After a timeout the runtime aborts the program; the processor drains its outstanding bus
 * transfers within microseconds, this is the generous bound on that. */
#define ABORT_WAIT_US 100000u

struct dlproc_rt {
    dlproc_hal *hal;
    dlproc_hw_info hw;
    int deployed;
    dlproc_net net;
};

static int fail(dlproc_error *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(dlproc_error *err, int code, const char *fmt, ...) {
    if (err) {
        err->code = code;
        err->hw_error = 0;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

static void ok(dlproc_error *err) {
    if (err) {
        err->code = DLPROC_OK;
        err->hw_error = 0;
        err->msg[0] = '\0';
    }
}

static const uint32_t PERF_REGS[DLPROC_N_PERF] = {
    DLPROC_REG_FETCH_BUSY, DLPROC_REG_LOAD_BUSY, DLPROC_REG_LOAD_STALL, DLPROC_REG_COMPUTE_BUSY,
    DLPROC_REG_COMPUTE_STALL, DLPROC_REG_STORE_BUSY, DLPROC_REG_STORE_STALL, DLPROC_REG_MEM_RD_BEATS,
    DLPROC_REG_MEM_WR_BEATS, DLPROC_REG_MEM_WAIT,
};


static uint32_t rd(dlproc_rt *rt, uint32_t reg) { return dlproc_hal_csr_read(rt->hal, reg); }
static void wr(dlproc_rt *rt, uint32_t reg, uint32_t v) { dlproc_hal_csr_write(rt->hal, reg, v); }

/* 64-bit counters: reading LO latches HI (docs/registers.md). */
static uint64_t rd64(dlproc_rt *rt, uint32_t lo, uint32_t hi) {
    uint64_t l = rd(rt, lo);
    return l | ((uint64_t)rd(rt, hi) << 32);
}

int dlproc_rt_open(dlproc_rt **out, dlproc_hal *hal, dlproc_error *err) {
    if (!out || !hal) return fail(err, DLPROC_E_ARG, "dlproc_rt_open needs a HAL");
    dlproc_rt probe = {.hal = hal};
    dlproc_rt *rt = &probe;
    dlproc_hw_info *hw = &probe.hw;
    hw->id = rd(rt, DLPROC_REG_ID);
    if (hw->id != DLPROC_MAGIC)
        return fail(err, DLPROC_E_HW, "no dlproc processor answers: the ID register reads 0x%08x, expected 0x%08x",
                    hw->id, DLPROC_MAGIC);
    hw->version = rd(rt, DLPROC_REG_VERSION);
    uint32_t major = (hw->version & DLPROC_VERSION_MAJOR_MASK) >> DLPROC_VERSION_MAJOR_SHIFT;
    uint32_t isa = (hw->version & DLPROC_VERSION_ISA_MASK) >> DLPROC_VERSION_ISA_SHIFT;
    if (major != DLPROC_VERSION_MAJOR || isa != DLPROC_ISA_VERSION)
        return fail(err, DLPROC_E_VERSION, "the processor is hardware version %u, instruction set %u; this runtime "
                    "drives version %u, instruction set %u", major, isa, DLPROC_VERSION_MAJOR, DLPROC_ISA_VERSION);
    hw->config_hash = ((uint64_t)rd(rt, DLPROC_REG_CONFIG_HASH_HI) << 32) | rd(rt, DLPROC_REG_CONFIG_HASH_LO);
    uint32_t p = rd(rt, DLPROC_REG_HW_PARAMS);
    hw->c = (p & DLPROC_HW_PARAMS_C_MASK) >> DLPROC_HW_PARAMS_C_SHIFT;
    hw->mem_bytes = (p & DLPROC_HW_PARAMS_MEM_BYTES_MASK) >> DLPROC_HW_PARAMS_MEM_BYTES_SHIFT;
    hw->max_burst = (p & DLPROC_HW_PARAMS_MAX_BURST_MASK) >> DLPROC_HW_PARAMS_MAX_BURST_SHIFT;
    hw->queue_depth = (p & DLPROC_HW_PARAMS_QUEUE_DEPTH_MASK) >> DLPROC_HW_PARAMS_QUEUE_DEPTH_SHIFT;
    hw->inp_depth = rd(rt, DLPROC_REG_HW_INP_DEPTH);
    hw->wgt_depth = rd(rt, DLPROC_REG_HW_WGT_DEPTH);
    hw->prm_depth = rd(rt, DLPROC_REG_HW_PRM_DEPTH);
    hw->out_depth = rd(rt, DLPROC_REG_HW_OUT_DEPTH);
    hw->profile_depth = rd(rt, DLPROC_REG_HW_PROFILE_DEPTH);
    hw->dma_phys = dlproc_hal_dma_phys(hal);
    hw->dma_size = dlproc_hal_dma_size(hal);
    if (hw->c == 0 || hw->mem_bytes == 0)
        return fail(err, DLPROC_E_HW, "the processor reports C=%u lanes and a %u-byte bus", hw->c, hw->mem_bytes);
    rt = malloc(sizeof *rt);
    if (!rt) return fail(err, DLPROC_E_NOMEM, "out of memory");
    *rt = probe;
    *out = rt;
    ok(err);
    return DLPROC_OK;
}

void dlproc_rt_close(dlproc_rt *rt) {
    if (!rt) return;
    dlproc_net_free(&rt->net);
    free(rt);
}

const dlproc_hw_info *dlproc_rt_hw(const dlproc_rt *rt) { return &rt->hw; }
const dlproc_net *dlproc_rt_net(const dlproc_rt *rt) { return rt->deployed ? &rt->net : NULL; }

/* DMA-region offset of network offset off (the caller has checked the network fits). */
static uint64_t region_off(const dlproc_rt *rt, uint64_t off) { return rt->net.base - rt->hw.dma_phys + off; }

static int place(dlproc_rt *rt, const char *what, uint64_t off, const uint8_t *data, uint64_t n, dlproc_error *err) {
    if (!n) return DLPROC_OK;
    uint64_t at = region_off(rt, off);
    if (dlproc_hal_dma_write(rt->hal, at, data, (size_t)n) || dlproc_hal_sync_for_device(rt->hal, at, (size_t)n))
        return fail(err, DLPROC_E_HAL, "could not write the %s (%llu bytes) into the DMA region", what,
                    (unsigned long long)n);
    return DLPROC_OK;
}

/* A network compiled for another base runs at the start of the DMA region: every LOAD/STORE
 * dram_addr (the only absolute addresses, docs/netfile.md) moves by the same delta.  The parser
 * has checked that each one lies in [base, base + end), so each moved one lies in the region. */
static int relocate(dlproc_rt *rt, uint8_t **out, dlproc_error *err) {
    dlproc_net *net = &rt->net;
    const dlproc_hw_info *hw = &rt->hw;
    uint64_t to = hw->dma_phys;
    if (net->end > hw->dma_size || to > 0xFFFFFFFFull - net->end || to % 4096u)
        return fail(err, DLPROC_E_RANGE, "the network needs %llu bytes [0x%llx, 0x%llx) and cannot be moved into the "
                    "DMA region [0x%llx, 0x%llx) (too small, or not 4 KiB aligned below 4 GiB)",
                    (unsigned long long)net->end, (unsigned long long)net->base,
                    (unsigned long long)(net->base + net->end), (unsigned long long)hw->dma_phys,
                    (unsigned long long)(hw->dma_phys + hw->dma_size));
    uint8_t *insn = malloc((size_t)net->insn_bytes);
    if (!insn) return fail(err, DLPROC_E_NOMEM, "out of memory relocating the program");
    memcpy(insn, net->insn, (size_t)net->insn_bytes);
    for (uint32_t i = 0; i < net->insn_count; ++i) {
        uint8_t *w = insn + 32u * (size_t)i;
        unsigned at;
        if (!dlproc_net_insn_dram_field(w, &at)) continue;
        uint64_t addr = dlproc_net_get_u32_field(w, at);
        dlproc_net_set_u32_field(w, at, (uint32_t)(addr - net->base + to));
    }
    net->base = to;
    *out = insn;
    return DLPROC_OK;
}

int dlproc_rt_deploy(dlproc_rt *rt, const uint8_t *file, size_t len, dlproc_error *err) {
    if (!rt || (!file && len)) return fail(err, DLPROC_E_ARG, "dlproc_rt_deploy: bad arguments");
    dlproc_net_free(&rt->net);
    rt->deployed = 0;
    dlproc_net *net = &rt->net;
    uint8_t *relocated = NULL;
    char msg[400];
    int rc = dlproc_net_parse(file, len, net, msg, sizeof msg);
    if (rc != DLPROC_NET_OK) return fail(err, rc, "compiled network rejected: %s", msg);
    const dlproc_hw_info *hw = &rt->hw;
    if (net->hash64 != hw->config_hash) {
        rc = fail(err, DLPROC_E_CONFIG, "the network was compiled for processor configuration %016llx, but this "
                  "processor's configuration hash is %016llx; recompile the network for this processor's configuration",
                  (unsigned long long)net->hash64, (unsigned long long)hw->config_hash);
        goto reject;
    }
    rc = dlproc_net_check_geometry(net, hw->c, hw->mem_bytes, msg, sizeof msg);
    if (rc != DLPROC_NET_OK) {
        rc = fail(err, DLPROC_E_FORMAT, "compiled network rejected: %s", msg);
        goto reject;
    }
    if (net->base < hw->dma_phys || !dlproc_in_bounds(net->base - hw->dma_phys, net->end, hw->dma_size)) {
        rc = relocate(rt, &relocated, err);
        if (rc) goto reject;
    }
    if (rd(rt, DLPROC_REG_STATUS) & DLPROC_STATUS_BUSY_MASK) {
        rc = fail(err, DLPROC_E_STATE, "the processor is busy; a network cannot be deployed now");
        goto reject;
    }
    if ((rc = place(rt, "instructions", net->insn_off, relocated ? relocated : net->insn, net->insn_bytes, err)) ||
        (rc = place(rt, "conv weights", net->cwgt_off, net->cwgt, net->cwgt_bytes, err)) ||
        (rc = place(rt, "FC weights", net->fwgt_off, net->fwgt, net->fwgt_bytes, err)))
        goto reject;
    free(relocated);
    /* The file is not kept: forget the pointers into it. */
    net->insn = net->cwgt = net->fwgt = NULL;
    rt->deployed = 1;
    ok(err);
    return DLPROC_OK;
reject:
    free(relocated);
    dlproc_net_free(net);
    memset(net, 0, sizeof *net);
    return rc;
}

static void read_profile(dlproc_rt *rt, dlproc_profile *prof) {
    prof->cycles = rd64(rt, DLPROC_REG_CYCLES_LO, DLPROC_REG_CYCLES_HI);
    prof->fetched = rd(rt, DLPROC_REG_FETCHED);
    uint32_t n = rd(rt, DLPROC_REG_PROF_COUNT);
    if (n > rt->hw.profile_depth) n = rt->hw.profile_depth;
    if (n > DLPROC_MAX_PROFILE) n = DLPROC_MAX_PROFILE;
    prof->prof_count = n;
    for (uint32_t i = 0; i < n; ++i) {
        wr(rt, DLPROC_REG_PROF_INDEX, i);
        prof->prof[i] = rd64(rt, DLPROC_REG_PROF_DATA_LO, DLPROC_REG_PROF_DATA_HI);
    }
    for (unsigned i = 0; i < DLPROC_N_PERF; ++i) prof->perf[i] = rd(rt, PERF_REGS[i]);
}

/* Stops a program that ran out of time; returns nonzero when the processor is idle afterwards. */
static int abort_run(dlproc_rt *rt) {
    wr(rt, DLPROC_REG_CTRL, DLPROC_CTRL_ABORT_MASK);
    char ignored[64];
    for (int i = 0; i < 100; ++i) {
        if (!(rd(rt, DLPROC_REG_STATUS) & DLPROC_STATUS_BUSY_MASK)) return 1;
        dlproc_hal_wait(rt->hal, ABORT_WAIT_US / 100, ignored, sizeof ignored);
    }
    return !(rd(rt, DLPROC_REG_STATUS) & DLPROC_STATUS_BUSY_MASK);
}

static int processor_error(dlproc_rt *rt, uint32_t status, dlproc_error *err) {
    uint32_t code = (status & DLPROC_STATUS_ERROR_CODE_MASK) >> DLPROC_STATUS_ERROR_CODE_SHIFT;
    uint32_t insn = rd(rt, DLPROC_REG_ERR_INSN), addr = rd(rt, DLPROC_REG_ERR_ADDR);
    const dlproc_net_layer *l = dlproc_net_layer_of_insn(&rt->net, insn);
    char where[128] = "";
    if (code == DLPROC_ERR_DMA_FETCH || code == DLPROC_ERR_DMA_LOAD || code == DLPROC_ERR_DMA_STORE ||
        code == DLPROC_ERR_WRITE_RESPONSE)
        snprintf(where, sizeof where, ", address 0x%08x (window [0x%llx, 0x%llx))", addr,
                 (unsigned long long)rt->net.base, (unsigned long long)(rt->net.base + rt->net.end));
    fail(err, DLPROC_E_PROC, "the processor stopped with error %s (code %u) at instruction %u%s%s%s%s",
         dlproc_hw_error_name(code), code, insn, l ? " (layer '" : "", l ? l->name : "", l ? "')" : "", where);
    if (err) err->hw_error = code;
    return DLPROC_E_PROC;
}

int dlproc_rt_run(dlproc_rt *rt, const uint8_t *input, size_t in_len, uint8_t *output, size_t out_cap,
                  size_t *out_len, uint64_t timeout_us, dlproc_profile *prof, dlproc_error *err) {
    if (!rt || (!input && in_len) || (!output && out_cap)) return fail(err, DLPROC_E_ARG, "dlproc_rt_run: bad arguments");
    if (!rt->deployed) return fail(err, DLPROC_E_STATE, "no network is deployed");
    const dlproc_net *net = &rt->net;
    if (in_len != net->input_size)
        return fail(err, DLPROC_E_INPUT, "the input is %zu bytes; this network's InputDataOffset region takes exactly "
                    "%llu bytes (one packed frame)", in_len, (unsigned long long)net->input_size);
    if (out_cap < net->output_size)
        return fail(err, DLPROC_E_ARG, "the output buffer holds %zu bytes; the OutputResultOffset region has %llu",
                    out_cap, (unsigned long long)net->output_size);
    if (rd(rt, DLPROC_REG_STATUS) & DLPROC_STATUS_BUSY_MASK)
        return fail(err, DLPROC_E_STATE, "the processor is busy with another program");
    if (!timeout_us) timeout_us = DEFAULT_TIMEOUT_US;
    int rc = place(rt, "input", net->input_off, input, in_len, err);
    if (rc) return rc;
    uint64_t insn_base = net->base + net->insn_off;
    wr(rt, DLPROC_REG_CTRL, DLPROC_CTRL_ACK_MASK);
    wr(rt, DLPROC_REG_INSN_BASE, (uint32_t)insn_base);
    wr(rt, DLPROC_REG_INSN_COUNT, net->insn_count);
    wr(rt, DLPROC_REG_DMA_BASE, (uint32_t)net->base);
    wr(rt, DLPROC_REG_DMA_LIMIT, (uint32_t)(net->base + net->end));
    uint64_t t0 = dlproc_now_us();
    wr(rt, DLPROC_REG_CTRL, DLPROC_CTRL_START_MASK | DLPROC_CTRL_IRQ_EN_MASK);
    char msg[300];
    int w = dlproc_hal_wait(rt->hal, timeout_us, msg, sizeof msg);
    uint64_t wall = dlproc_now_us() - t0;
    uint32_t status = rd(rt, DLPROC_REG_STATUS);
    if (w == DLPROC_HAL_FAIL) {
        abort_run(rt);
        wr(rt, DLPROC_REG_CTRL, DLPROC_CTRL_ACK_MASK);
        return fail(err, DLPROC_E_HAL, "waiting for the processor failed: %s", msg);
    }
    if (w == DLPROC_HAL_TIMEOUT && !(status & (DLPROC_STATUS_DONE_MASK | DLPROC_STATUS_ERROR_MASK))) {
        uint32_t fetched = rd(rt, DLPROC_REG_FETCHED);
        int idle = abort_run(rt);
        wr(rt, DLPROC_REG_CTRL, DLPROC_CTRL_ACK_MASK);
        return fail(err, DLPROC_E_TIMEOUT, "the run did not finish within %llu us (%u of %u instructions fetched); it "
                    "was aborted%s", (unsigned long long)timeout_us, fetched, net->insn_count,
                    idle ? "" : " but the processor is still busy");
    }
    if (status & DLPROC_STATUS_ERROR_MASK) {
        rc = processor_error(rt, status, err);
        wr(rt, DLPROC_REG_CTRL, DLPROC_CTRL_ACK_MASK);
        return rc;
    }
    if (prof) {
        memset(prof, 0, sizeof *prof);
        read_profile(rt, prof);
        prof->wall_us = wall;
    }
    wr(rt, DLPROC_REG_CTRL, DLPROC_CTRL_ACK_MASK);
    uint64_t at = region_off(rt, net->output_off);
    if (dlproc_hal_sync_for_cpu(rt->hal, at, (size_t)net->output_size) ||
        dlproc_hal_dma_read(rt->hal, at, output, (size_t)net->output_size))
        return fail(err, DLPROC_E_HAL, "could not read the output region back from the DMA region");
    if (out_len) *out_len = (size_t)net->output_size;
    ok(err);
    return DLPROC_OK;
}
