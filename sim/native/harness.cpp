// Native harness: the Verilated processor top level plus the DDR model, behind a small C API.
//
// The whole clock loop runs here, so Python (ctypes) only pays a call per transaction: load memory,
// poke a CSR, run until the interrupt. The top level must follow the dlproc port contract:
//   clk, rst; CSR Avalon-MM slave (csr__address/read/write/writedata/readdata, word addressed, fixed
//   read latency 1, no waitrequest); memory Avalon-MM burst master (mem__address/burstcount/read/
//   write/writedata/byteenable, inputs mem__waitrequest/readdata/readdatavalid); irq.
//
// The Verilated top is the wrapper dlsim_top (sim/build.py, harness_wrapper): the contract's ports
// plus in_strobe, which samples rst and the CSR inputs into the design (see latch()). The wrapper
// always has two full memory ports, mem__* (port 0) and mem1__* (port 1); it ties the outputs a
// top level does not have to zero. A one-port top uses mem__* for everything and leaves port 1
// quiet; a two-port top (MemoryPorts = 2) reads on mem__* and writes on mem1__*. Each port has its
// own DDR model (bandwidth, latency, command queue) over one shared memory array. Port 1 also
// returns Avalon write responses (mem1__writeresponsevalid, mem1__response[1:0]), one per write
// burst after the write-response latency (dl_create), which a two-port top waits for.
//
// Build-time defines (set by sim/build.py):
//   DL_MEM_BYTES    memory bus width in bytes (W / 8)
//   DL_SETTLE_EVAL  (dl_schedule.h) 1 if an output depends combinationally on an input
//   VM_TRACE, VM_TRACE_FST, VM_TRACE_VCD  (set by verilated.mk from --trace-fst / --trace-vcd)
//
// One clock cycle (step_one):
//   clk=0, eval      the inputs prepared for this cycle settle; the master's request is visible
//                    (skipped when the outputs depend on registers only, see kSettleEval);
//   DDR decides      waitrequest for this cycle from the request, per port (a combinational slave);
//   clk=1, eval      the rising edge; the DUT samples waitrequest/readdata/readdatavalid;
//   DDR commits      the accepted transfers (port 0, then port 1), then prepares readdata/
//                    readdatavalid of the next cycle (port 0, then port 1) and port 1's write
//                    response (writeresponsevalid/response).
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <type_traits>

#include "Vtop.h"
#include "Vtop___024root.h"
#include "verilated.h"
#include "ddr.h"
#include "dl_schedule.h"  // DL_SETTLE_EVAL, written by sim/build.py after Verilating

#if VM_TRACE_FST
#include "verilated_fst_c.h"
using TraceFile = VerilatedFstC;
#elif VM_TRACE_VCD || VM_TRACE
#include "verilated_vcd_c.h"
using TraceFile = VerilatedVcdC;
#endif

// Verilator escapes a double underscore in a port name as "___05F", so the contract's
// csr__address becomes the C++ member csr___05Faddress.
#define CSR_ADDRESS csr___05Faddress
#define CSR_READ csr___05Fread
#define CSR_WRITE csr___05Fwrite
#define CSR_WRITEDATA csr___05Fwritedata
#define CSR_READDATA csr___05Freaddata
#define MEM_ADDRESS mem___05Faddress
#define MEM_BURSTCOUNT mem___05Fburstcount
#define MEM_READ mem___05Fread
#define MEM_WRITE mem___05Fwrite
#define MEM_WRITEDATA mem___05Fwritedata
#define MEM_BYTEENABLE mem___05Fbyteenable
#define MEM_WAITREQUEST mem___05Fwaitrequest
#define MEM_READDATA mem___05Freaddata
#define MEM_READDATAVALID mem___05Freaddatavalid
#define MEM1_ADDRESS mem1___05Faddress
#define MEM1_BURSTCOUNT mem1___05Fburstcount
#define MEM1_READ mem1___05Fread
#define MEM1_WRITE mem1___05Fwrite
#define MEM1_WRITEDATA mem1___05Fwritedata
#define MEM1_BYTEENABLE mem1___05Fbyteenable
#define MEM1_WAITREQUEST mem1___05Fwaitrequest
#define MEM1_READDATA mem1___05Freaddata
#define MEM1_READDATAVALID mem1___05Freaddatavalid
#define MEM1_WRITERESPONSEVALID mem1___05Fwriteresponsevalid
#define MEM1_RESPONSE mem1___05Fresponse

#ifndef DL_MEM_BYTES
#error "DL_MEM_BYTES (memory bus width in bytes) must be defined"
#endif

namespace {

// Verilator represents a port of up to 64 bits as an integer and wider ones as VlWide<N> of
// 32-bit words; these helpers move little-endian byte arrays in and out of either form.
template <typename T>
void port_to_bytes(const T& port, uint8_t* out, unsigned nbytes) {
    if constexpr (std::is_integral_v<T>) {
        const uint64_t v = uint64_t(port);
        for (unsigned i = 0; i < nbytes; ++i) out[i] = uint8_t(v >> (8 * i));
    } else {
        for (unsigned i = 0; i < nbytes; ++i) out[i] = uint8_t(port[i / 4] >> (8 * (i % 4)));
    }
}

template <typename T>
void bytes_to_port(T& port, const uint8_t* in, unsigned nbytes) {
    if constexpr (std::is_integral_v<T>) {
        uint64_t v = 0;
        for (unsigned i = 0; i < nbytes; ++i) v |= uint64_t(in[i]) << (8 * i);
        port = T(v);
    } else {
        for (unsigned w = 0; w < (nbytes + 3) / 4; ++w) port[w] = 0;
        for (unsigned i = 0; i < nbytes; ++i) port[i / 4] |= uint32_t(in[i]) << (8 * (i % 4));
    }
}

template <typename T>
void bits_to_flags(const T& port, uint8_t* flags, unsigned nbits) {
    if constexpr (std::is_integral_v<T>) {
        const uint64_t v = uint64_t(port);
        for (unsigned i = 0; i < nbits; ++i) flags[i] = uint8_t((v >> i) & 1u);
    } else {
        for (unsigned i = 0; i < nbits; ++i) flags[i] = uint8_t((port[i / 32] >> (i % 32)) & 1u);
    }
}

// Verilator detects the rising edge by comparing clk with its value at the previous eval().
// Setting that saved value to 0 lets the next eval() see a rising edge without a falling-edge
// eval() in between. Returns false (and the harness does the falling-edge eval()) if this
// Verilator version names the member differently.
template <typename R>
auto forget_clock_high(R* root, int) -> decltype(root->__Vtrigprevexpr___TOP__clk__0 = 0, bool()) {
    root->__Vtrigprevexpr___TOP__clk__0 = 0;
    return true;
}
template <typename R>
bool forget_clock_high(R*, long) { return false; }

// The falling-edge eval() only re-settles the input-combinational logic with the inputs set after
// the last rising edge (readdata/readdatavalid of this cycle). The rising-edge eval() settles it
// again anyway before the edge, so the falling-edge one matters only when an output the DDR model
// reads depends combinationally on an input (sim/build.py checks the generated model), or when a
// waveform is written (the falling-edge dump shows the settled inputs).
#if VM_TRACE || DL_SETTLE_EVAL
constexpr bool kSettleEval = true;
#else
constexpr bool kSettleEval = false;
#endif

}  // namespace

// Status codes of dl_run / dl_step (mirrored in sim/harness.py).
enum : int32_t {
    DL_IRQ = 0,        // the interrupt went high
    DL_TIMEOUT = 1,    // max_cycles elapsed without an interrupt
    DL_DDR_ERROR = 2,  // the DDR model flagged a bad access (see dl_ddr_error)
    DL_DONE = 3,       // dl_step: all requested cycles ran
};

constexpr int kPorts = 2;

// One memory port's request sampling and DDR decision (the port members differ only in name).
template <typename A, typename B, typename WD, typename BE>
bool offer(dlsim::DdrModel& ddr, dlsim::DdrRequest& req, uint8_t rd, uint8_t wr, const A& address,
           const B& burstcount, const WD& writedata, const BE& byteenable, uint8_t* wdata, uint8_t* be) {
    req = dlsim::DdrRequest{};
    req.read = rd;
    req.write = wr;
    if (!req.read && !req.write) return false;
    req.address = uint64_t(address);
    req.burstcount = uint32_t(burstcount);
    port_to_bytes(writedata, wdata, DL_MEM_BYTES);
    bits_to_flags(byteenable, be, DL_MEM_BYTES);
    req.writedata = wdata;
    req.byteenable = be;
    const bool accept = ddr.accepts(req);
    if (!accept) ddr.note_wait();
    return accept;
}

struct DlSim {
    std::unique_ptr<VerilatedContext> ctx;
    std::unique_ptr<Vtop> top;
    dlsim::DdrMemory mem;
    dlsim::DdrModel ddr[kPorts];
    uint64_t cycle = 0;
    uint8_t wdata[kPorts][DL_MEM_BYTES];
    uint8_t rdata[kPorts][DL_MEM_BYTES];
    uint8_t be[kPorts][DL_MEM_BYTES];
#ifdef VM_TRACE
#if VM_TRACE
    std::unique_ptr<TraceFile> trace;
#endif
#endif
    // Trace time window [trace_lo, trace_hi) in half cycles (dl_trace_window): a waveform of the
    // cycles that matter, not of the whole run, stays small enough to open.
    uint64_t trace_lo = 0;
    uint64_t trace_hi = ~uint64_t(0);

    explicit DlSim(const dlsim::DdrParams& p)
        : ctx(new VerilatedContext),
          mem(p.size),
          ddr{dlsim::DdrModel(p, mem), dlsim::DdrModel(p, mem, "port 1: ", /*write_responses=*/true)} {
        ctx->debug(0);
        ctx->randReset(0);
        ctx->commandArgs(0, static_cast<const char**>(nullptr));
        top.reset(new Vtop(ctx.get(), "TOP"));
        std::memset(rdata, 0, sizeof rdata);
        top->clk = 0;
        top->rst = 0;
        top->CSR_READ = 0;
        top->CSR_WRITE = 0;
        top->CSR_ADDRESS = 0;
        top->CSR_WRITEDATA = 0;
        top->MEM_WAITREQUEST = 1;
        top->MEM_READDATAVALID = 0;
        bytes_to_port(top->MEM_READDATA, rdata[0], DL_MEM_BYTES);
        top->MEM1_WAITREQUEST = 1;
        top->MEM1_READDATAVALID = 0;
        bytes_to_port(top->MEM1_READDATA, rdata[1], DL_MEM_BYTES);
        top->MEM1_WRITERESPONSEVALID = 0;
        top->MEM1_RESPONSE = 0;
        top->in_strobe = 0;
        top->eval();
        latch();
    }

    // The wrapper (sim/build.py, harness_wrapper) passes rst and the CSR inputs to the design
    // through registers clocked by in_strobe, so that the logic they feed is not re-evaluated on
    // every eval(). Call latch() after changing any of them and before the next clock edge. The
    // falling strobe gets its own eval so that back-to-back latches each see a rising edge.
    void latch() {
        top->in_strobe = 1;
        top->eval();
        top->in_strobe = 0;
        top->eval();
    }

    void dump(uint64_t t) {
#ifdef VM_TRACE
#if VM_TRACE
        if (trace && t >= trace_lo && t < trace_hi) trace->dump(t);
#endif
#endif
        (void)t;
    }

    int32_t error() const {
        for (const dlsim::DdrModel& d : ddr)
            if (d.error() != dlsim::DDR_OK) return d.error();
        return dlsim::DDR_OK;
    }

    const std::string& error_message() const {
        for (const dlsim::DdrModel& d : ddr)
            if (d.error() != dlsim::DDR_OK) return d.error_message();
        return ddr[0].error_message();
    }

    void reset_ddr() {
        for (dlsim::DdrModel& d : ddr) d.reset();
    }

    // One clock cycle; see the file comment for the phases.
    void step_one() {
        top->clk = 0;
        if (kSettleEval || !forget_clock_high(top->rootp, 0)) top->eval();
        dump(2 * cycle);
        dlsim::DdrRequest req[kPorts];
        const bool accept0 = offer(ddr[0], req[0], top->MEM_READ, top->MEM_WRITE, top->MEM_ADDRESS, top->MEM_BURSTCOUNT,
                                   top->MEM_WRITEDATA, top->MEM_BYTEENABLE, wdata[0], be[0]);
        const bool accept1 = offer(ddr[1], req[1], top->MEM1_READ, top->MEM1_WRITE, top->MEM1_ADDRESS,
                                   top->MEM1_BURSTCOUNT, top->MEM1_WRITEDATA, top->MEM1_BYTEENABLE, wdata[1], be[1]);
        top->MEM_WAITREQUEST = accept0 ? 0 : 1;
        top->MEM1_WAITREQUEST = accept1 ? 0 : 1;
        top->clk = 1;
        top->eval();
        dump(2 * cycle + 1);
        if (accept0) ddr[0].commit(req[0], cycle);
        if (accept1) ddr[1].commit(req[1], cycle);
        ++cycle;
        const bool valid0 = ddr[0].advance(rdata[0], cycle);
        top->MEM_READDATAVALID = valid0 ? 1 : 0;
        if (valid0) bytes_to_port(top->MEM_READDATA, rdata[0], DL_MEM_BYTES);
        const bool valid1 = ddr[1].advance(rdata[1], cycle);
        top->MEM1_READDATAVALID = valid1 ? 1 : 0;
        if (valid1) bytes_to_port(top->MEM1_READDATA, rdata[1], DL_MEM_BYTES);
        uint8_t response = 0;
        top->MEM1_WRITERESPONSEVALID = ddr[1].advance_response(&response, cycle) ? 1 : 0;
        top->MEM1_RESPONSE = response;
    }
};

extern "C" {

// Bumped whenever a signature below changes; sim/harness.py checks it.
int32_t dl_abi_version() { return 3; }

uint32_t dl_mem_bytes() { return DL_MEM_BYTES; }

int32_t dl_has_trace() {
#ifdef VM_TRACE
    return VM_TRACE ? 1 : 0;
#else
    return 0;
#endif
}

// `wr_resp_latency`: cycles from a write burst's last beat to its write response (port 1).
void* dl_create(uint64_t ddr_base, uint64_t ddr_size, double bytes_per_cycle, uint32_t latency,
                uint32_t queue_depth, uint32_t wr_resp_latency, const char* trace_path) {
    dlsim::DdrParams p{ddr_base, ddr_size, DL_MEM_BYTES, bytes_per_cycle, latency, queue_depth, wr_resp_latency};
    DlSim* s = new (std::nothrow) DlSim(p);
    if (!s) return nullptr;
#ifdef VM_TRACE
#if VM_TRACE
    if (trace_path && *trace_path) {
        s->ctx->traceEverOn(true);
        s->trace.reset(new TraceFile);
        s->top->trace(s->trace.get(), 99);
        s->trace->open(trace_path);
    }
#endif
#endif
    (void)trace_path;
    return s;
}

void dl_free(void* h) {
    DlSim* s = static_cast<DlSim*>(h);
    if (!s) return;
#ifdef VM_TRACE
#if VM_TRACE
    if (s->trace) s->trace->close();
#endif
#endif
    s->top->final();
    delete s;
}

// Dumps only the cycles [first_cycle, end_cycle) of the simulation's clock (dl_cycles) from now on.
void dl_trace_window(void* h, uint64_t first_cycle, uint64_t end_cycle) {
    DlSim* s = static_cast<DlSim*>(h);
    s->trace_lo = 2 * first_cycle;
    s->trace_hi = end_cycle >= (~uint64_t(0) >> 1) ? ~uint64_t(0) : 2 * end_cycle;
}

void dl_trace_flush(void* h) {
#ifdef VM_TRACE
#if VM_TRACE
    DlSim* s = static_cast<DlSim*>(h);
    if (s->trace) s->trace->flush();
#endif
#endif
    (void)h;
}

// Holds rst high for `cycles` clock cycles (the DDR model forgets outstanding commands).
void dl_reset(void* h, uint32_t cycles) {
    DlSim* s = static_cast<DlSim*>(h);
    s->top->rst = 1;
    s->top->CSR_READ = 0;
    s->top->CSR_WRITE = 0;
    s->latch();
    s->reset_ddr();
    for (uint32_t i = 0; i < (cycles ? cycles : 1); ++i) s->step_one();
    s->reset_ddr();
    s->top->MEM_READDATAVALID = 0;
    s->top->MEM1_READDATAVALID = 0;
    s->top->MEM1_WRITERESPONSEVALID = 0;
    s->top->rst = 0;
    s->latch();
}

int32_t dl_mem_write(void* h, uint64_t addr, const uint8_t* data, uint64_t n) {
    DlSim* s = static_cast<DlSim*>(h);
    if (!s->ddr[0].in_range(addr, n)) return -1;
    std::memcpy(s->ddr[0].memory() + (addr - s->ddr[0].params().base), data, n);
    return 0;
}

int32_t dl_mem_read(void* h, uint64_t addr, uint8_t* out, uint64_t n) {
    DlSim* s = static_cast<DlSim*>(h);
    if (!s->ddr[0].in_range(addr, n)) return -1;
    std::memcpy(out, s->ddr[0].memory() + (addr - s->ddr[0].params().base), n);
    return 0;
}

// One CSR write: write is high for one cycle.
void dl_csr_write(void* h, uint32_t word_addr, uint32_t value) {
    DlSim* s = static_cast<DlSim*>(h);
    s->top->CSR_ADDRESS = word_addr;
    s->top->CSR_WRITEDATA = value;
    s->top->CSR_WRITE = 1;
    s->latch();
    s->step_one();
    s->top->CSR_WRITE = 0;
    s->latch();
}

// One CSR read: read is high for one cycle; with a fixed read latency of 1 the slave's readdata is
// valid in the following cycle, which is after the rising edge that sampled the read.
uint32_t dl_csr_read(void* h, uint32_t word_addr) {
    DlSim* s = static_cast<DlSim*>(h);
    s->top->CSR_ADDRESS = word_addr;
    s->top->CSR_READ = 1;
    s->latch();
    s->step_one();
    s->top->CSR_READ = 0;
    s->latch();
    s->top->clk = 0;
    s->top->eval();
    return uint32_t(s->top->CSR_READDATA);
}

int32_t dl_irq(void* h) {
    DlSim* s = static_cast<DlSim*>(h);
    return s->top->irq ? 1 : 0;
}

uint64_t dl_cycles(void* h) { return static_cast<DlSim*>(h)->cycle; }

// Runs until irq is high after a cycle (at least one cycle runs), the DDR model flags an error, or
// max_cycles have run. *ran receives the number of cycles this call ran.
int32_t dl_run(void* h, uint64_t max_cycles, uint64_t* ran) {
    DlSim* s = static_cast<DlSim*>(h);
    uint64_t n = 0;
    int32_t status = DL_TIMEOUT;
    while (n < max_cycles) {
        s->step_one();
        ++n;
        if (s->error() != dlsim::DDR_OK) { status = DL_DDR_ERROR; break; }
        if (s->top->irq) { status = DL_IRQ; break; }
    }
    if (ran) *ran = n;
    return status;
}

// Runs exactly n cycles (stopping early only on a DDR error).
int32_t dl_step(void* h, uint64_t n, uint64_t* ran) {
    DlSim* s = static_cast<DlSim*>(h);
    uint64_t i = 0;
    int32_t status = DL_DONE;
    for (; i < n; ++i) {
        s->step_one();
        if (s->error() != dlsim::DDR_OK) { status = DL_DDR_ERROR; ++i; break; }
    }
    if (ran) *ran = i;
    return status;
}

uint32_t dl_ddr_ports() { return kPorts; }

// Statistics of one port (0 or 1) as 9 uint64 in the order of dlsim::DdrStats; port -1 gives
// the sum over the ports. Returns -1 for another port number.
int32_t dl_ddr_stats(void* h, int32_t port, uint64_t* out) {
    if (port < -1 || port >= kPorts) return -1;
    uint64_t v[9] = {};
    for (int p = 0; p < kPorts; ++p) {
        if (port != -1 && p != port) continue;
        const dlsim::DdrStats& st = static_cast<DlSim*>(h)->ddr[p].stats();
        const uint64_t w[9] = {st.read_cmds, st.write_cmds, st.read_beats, st.write_beats, st.read_bytes,
                               st.write_bytes, st.wait_cycles, st.busy_cycles, st.write_responses};
        for (int i = 0; i < 9; ++i) v[i] += w[i];
    }
    std::memcpy(out, v, sizeof v);
    return 0;
}

void dl_ddr_clear_stats(void* h) {
    for (dlsim::DdrModel& d : static_cast<DlSim*>(h)->ddr) d.clear_stats();
}

// Returns the first DDR error code (0 = none) and copies its message into msg (NUL terminated).
int32_t dl_ddr_error(void* h, char* msg, uint32_t len) {
    DlSim* s = static_cast<DlSim*>(h);
    if (msg && len) {
        std::strncpy(msg, s->error_message().c_str(), len - 1);
        msg[len - 1] = 0;
    }
    return s->error();
}

uint64_t dl_ddr_outstanding(void* h) {
    uint64_t n = 0;
    for (const dlsim::DdrModel& d : static_cast<DlSim*>(h)->ddr) n += d.outstanding_read_beats();
    return n;
}

// Write responses the DDR models owe (accepted bursts whose response has not been returned).
uint64_t dl_ddr_outstanding_responses(void* h) {
    uint64_t n = 0;
    for (const dlsim::DdrModel& d : static_cast<DlSim*>(h)->ddr) n += d.outstanding_write_responses();
    return n;
}

// Write bursts on port 1 starting in [lo, hi) get the Avalon response `response` (2 SLVERR,
// 3 DECODEERROR) and write nothing; hi <= lo turns the error range off.
void dl_ddr_set_write_error(void* h, uint64_t lo, uint64_t hi, uint32_t response) {
    static_cast<DlSim*>(h)->ddr[1].set_write_error(lo, hi, uint8_t(response & 3));
}

}  // extern "C"
