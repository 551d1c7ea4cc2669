// DDR memory model: the Avalon-MM slave behind the processor's pipelined burst master.
//
// One DdrModel serves one Avalon-MM master port. A processor with two masters (MemoryPorts = 2:
// a read-only port for fetch and load, a write-only port for store) gets one DdrModel per port;
// they share one memory array (DdrMemory) and each has its own bandwidth bucket, latency and
// command queue, as two FPGA-to-SDRAM ports of an HPS SDRAM controller do.
//
// The model is cycle based and independent of Verilator. Each clock cycle the harness calls
//   1. accepts(req)   before the rising edge, with the request the master presents: the return
//                     value is the inverse of waitrequest for this cycle;
//   2. commit(req)    after the rising edge, if the request was accepted;
//   3. advance(data)  to move to the next cycle; it returns readdatavalid for the next cycle and
//                     fills the read beat;
//   4. advance_response(resp)  (a port with write responses) returns writeresponsevalid for the
//                     next cycle and fills response[1:0].
//
// Timing model (all values from ProcessorConfig):
//   * read latency: a read command accepted in cycle t returns its first beat in cycle
//     t + latency (latency >= 1); later beats follow back to back, throughput permitting;
//   * throughput: a byte-credit bucket fills by bytes_per_cycle each cycle (capped at one bus beat
//     plus one cycle's worth, so idle time cannot be banked). A read beat returned or a write beat
//     accepted costs one bus beat of credit; when bytes_per_cycle is smaller than the bus width this
//     inserts bubbles, when it is larger the bus (one beat per cycle) is the limit. Read returns
//     have priority over write acceptance;
//   * command queue: at most queue_depth read commands may be outstanding; a further read command
//     sees waitrequest until the oldest one has returned all its beats;
//   * write responses (only a port made with write_responses, the write master mem1 of a two-port
//     processor): one response per write burst, in burst order, at the earliest wr_resp_latency
//     cycles (>= 1) after the burst's last beat was accepted, at most one per cycle. The response
//     is OKAY unless the burst starts inside the error range (set_write_error): then it is that
//     code (SLVERR or DECODEERROR) and the burst's data is dropped, as a failed write would be.
// Protocol checks (first error is latched, the harness stops the run): address out of the modelled
// range, address not aligned to the bus width, burstcount of zero, a read command in the middle of
// a write burst.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace dlsim {

struct DdrParams {
    uint64_t base;            // first byte address of the modelled memory
    uint64_t size;            // bytes
    uint32_t bus_bytes;       // W / 8
    double bytes_per_cycle;   // sustained DDR throughput
    uint32_t latency;         // cycles from read command to first beat (>= 1)
    uint32_t queue_depth;     // outstanding read commands (>= 1)
    uint32_t wr_resp_latency; // cycles from a write burst's last beat to its response (>= 1)
};

struct DdrStats {
    uint64_t read_cmds;
    uint64_t write_cmds;      // write bursts (first beats)
    uint64_t read_beats;
    uint64_t write_beats;
    uint64_t read_bytes;      // bus bytes returned
    uint64_t write_bytes;     // bytes with byteenable set
    uint64_t wait_cycles;     // cycles with a request held off by waitrequest
    uint64_t busy_cycles;     // cycles with a beat on the data bus
    uint64_t write_responses; // write responses returned (ports with write responses)
};

enum DdrErrorCode : int32_t {
    DDR_OK = 0,
    DDR_OUT_OF_RANGE = 1,
    DDR_MISALIGNED = 2,
    DDR_ZERO_BURST = 3,
    DDR_PROTOCOL = 4,
};

// Avalon-MM response[1:0] (the AXI BRESP codes).
enum DdrResponse : uint8_t {
    DDR_RESP_OKAY = 0,
    DDR_RESP_SLVERR = 2,
    DDR_RESP_DECODEERROR = 3,
};

struct DdrRequest {
    bool read;
    bool write;
    uint64_t address;
    uint32_t burstcount;
    const uint8_t* writedata;   // bus_bytes bytes, little endian
    const uint8_t* byteenable;  // one byte per bus byte, 0 or 1
};

// The modelled memory, shared by the ports.
struct DdrMemory {
    explicit DdrMemory(uint64_t size) : bytes(size, 0) {}
    std::vector<uint8_t> bytes;
};

class DdrModel {
public:
    // `mem` must outlive the model and hold params.size bytes; `label` prefixes error messages
    // (empty for port 0, so single-port messages read as before).
    DdrModel(const DdrParams& params, DdrMemory& mem, std::string label = "", bool write_responses = false);

    const DdrParams& params() const { return params_; }
    uint8_t* memory() { return mem_.bytes.data(); }
    bool in_range(uint64_t address, uint64_t nbytes) const;

    // Forget outstanding commands and bursts (memory contents are kept), as at a bus reset.
    void reset();

    bool accepts(const DdrRequest& req) const;
    void commit(const DdrRequest& req, uint64_t cycle);
    void note_wait() { ++stats_.wait_cycles; }
    bool advance(uint8_t* readdata, uint64_t next_cycle);
    bool advance_response(uint8_t* response, uint64_t next_cycle);
    // Write bursts starting in [lo, hi) get `response` (hi <= lo: none do).
    void set_write_error(uint64_t lo, uint64_t hi, uint8_t response);

    const DdrStats& stats() const { return stats_; }
    void clear_stats() { stats_ = DdrStats{}; }
    int32_t error() const { return error_; }
    const std::string& error_message() const { return error_msg_; }
    uint64_t outstanding_read_beats() const;
    bool write_burst_open() const { return wr_remaining_ != 0; }
    uint64_t outstanding_write_responses() const { return responses_.size(); }

private:
    struct WriteResponse {
        uint64_t ready_cycle;
        uint8_t code;
    };
    struct ReadCmd {
        uint64_t address;
        uint32_t beats_left;
        uint64_t ready_cycle;
    };

    void flag(int32_t code, const std::string& msg);
    bool check_burst(uint64_t address, uint32_t burstcount, const char* what, uint64_t cycle);

    DdrParams params_;
    DdrMemory& mem_;
    std::string label_;
    std::deque<ReadCmd> reads_;
    // Credits are kept in 1/1024 byte units so that fractional bytes_per_cycle is exact enough.
    int64_t credit_ = 0;
    int64_t credit_per_cycle_ = 0;
    int64_t credit_cap_ = 0;
    int64_t beat_cost_ = 0;
    uint64_t wr_address_ = 0;
    uint32_t wr_remaining_ = 0;
    bool write_responses_ = false;
    bool wr_drop_ = false;  // the open burst got an error response: its beats are not written
    uint8_t wr_code_ = DDR_RESP_OKAY;
    uint64_t err_lo_ = 0, err_hi_ = 0;
    uint8_t err_code_ = DDR_RESP_OKAY;
    std::deque<WriteResponse> responses_;
    DdrStats stats_{};
    int32_t error_ = DDR_OK;
    std::string error_msg_;
};

}  // namespace dlsim
