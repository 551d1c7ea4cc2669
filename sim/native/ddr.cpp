// DDR memory model (see ddr.h for the timing model and the calling sequence).
#include "ddr.h"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace dlsim {

namespace {
constexpr int64_t kCreditScale = 1024;
}

DdrModel::DdrModel(const DdrParams& params, DdrMemory& mem, std::string label, bool write_responses)
    : params_(params), mem_(mem), label_(std::move(label)), write_responses_(write_responses) {
    if (params_.latency < 1) params_.latency = 1;
    if (params_.wr_resp_latency < 1) params_.wr_resp_latency = 1;
    if (params_.queue_depth < 1) params_.queue_depth = 1;
    beat_cost_ = int64_t(params_.bus_bytes) * kCreditScale;
    credit_per_cycle_ = int64_t(params_.bytes_per_cycle * kCreditScale + 0.5);
    if (credit_per_cycle_ < 1) credit_per_cycle_ = 1;
    credit_cap_ = beat_cost_ + credit_per_cycle_;
    reset();
}

void DdrModel::reset() {
    reads_.clear();
    responses_.clear();
    wr_remaining_ = 0;
    credit_ = std::min(credit_per_cycle_, credit_cap_);
}

bool DdrModel::in_range(uint64_t address, uint64_t nbytes) const {
    return address >= params_.base && nbytes <= params_.size && address - params_.base <= params_.size - nbytes;
}

uint64_t DdrModel::outstanding_read_beats() const {
    uint64_t n = 0;
    for (const ReadCmd& c : reads_) n += c.beats_left;
    return n;
}

void DdrModel::flag(int32_t code, const std::string& msg) {
    if (error_ != DDR_OK) return;  // keep the first error: later ones are usually consequences
    error_ = code;
    error_msg_ = label_ + msg;
}

bool DdrModel::check_burst(uint64_t address, uint32_t burstcount, const char* what, uint64_t cycle) {
    char buf[256];
    if (burstcount == 0) {
        std::snprintf(buf, sizeof buf, "cycle %llu: %s burst with burstcount 0 at address 0x%llx",
                      (unsigned long long)cycle, what, (unsigned long long)address);
        flag(DDR_ZERO_BURST, buf);
        return false;
    }
    if (address % params_.bus_bytes != 0) {
        std::snprintf(buf, sizeof buf, "cycle %llu: %s address 0x%llx is not aligned to the %u-byte bus",
                      (unsigned long long)cycle, what, (unsigned long long)address, params_.bus_bytes);
        flag(DDR_MISALIGNED, buf);
        return false;
    }
    const uint64_t nbytes = uint64_t(burstcount) * params_.bus_bytes;
    if (!in_range(address, nbytes)) {
        std::snprintf(buf, sizeof buf,
                      "cycle %llu: %s of %u beats at 0x%llx is outside the DDR model [0x%llx, 0x%llx)",
                      (unsigned long long)cycle, what, burstcount, (unsigned long long)address,
                      (unsigned long long)params_.base, (unsigned long long)(params_.base + params_.size));
        flag(DDR_OUT_OF_RANGE, buf);
        return false;
    }
    return true;
}

bool DdrModel::accepts(const DdrRequest& req) const {
    if (req.read) return wr_remaining_ == 0 && reads_.size() < params_.queue_depth;
    if (req.write) return credit_ >= beat_cost_;
    return false;
}

void DdrModel::commit(const DdrRequest& req, uint64_t cycle) {
    if (req.read) {
        if (wr_remaining_ != 0) {
            flag(DDR_PROTOCOL, "cycle " + std::to_string(cycle) + ": read command during an unfinished write burst");
            return;
        }
        ++stats_.read_cmds;
        if (!check_burst(req.address, req.burstcount, "read", cycle)) return;
        reads_.push_back(ReadCmd{req.address, req.burstcount, cycle + params_.latency});
        return;
    }
    if (!req.write) return;
    if (wr_remaining_ == 0) {
        // First beat of a burst: address and burstcount are only meaningful here.
        ++stats_.write_cmds;
        if (!check_burst(req.address, req.burstcount, "write", cycle)) return;
        wr_address_ = req.address;
        wr_remaining_ = req.burstcount;
        const bool failed = write_responses_ && req.address >= err_lo_ && req.address < err_hi_;
        wr_drop_ = failed;
        wr_code_ = failed ? err_code_ : uint8_t(DDR_RESP_OKAY);
    }
    uint8_t* dst = mem_.bytes.data() + (wr_address_ - params_.base);
    uint32_t enabled = 0;
    for (uint32_t i = 0; i < params_.bus_bytes; ++i) {
        if (req.byteenable[i]) {
            if (!wr_drop_) dst[i] = req.writedata[i];
            ++enabled;
        }
    }
    credit_ -= beat_cost_;
    ++stats_.write_beats;
    ++stats_.busy_cycles;
    stats_.write_bytes += enabled;
    wr_address_ += params_.bus_bytes;
    if (--wr_remaining_ == 0 && write_responses_)
        responses_.push_back(WriteResponse{cycle + params_.wr_resp_latency, wr_code_});
}

void DdrModel::set_write_error(uint64_t lo, uint64_t hi, uint8_t response) {
    err_lo_ = lo;
    err_hi_ = hi;
    err_code_ = response;
}

bool DdrModel::advance_response(uint8_t* response, uint64_t next_cycle) {
    if (responses_.empty() || responses_.front().ready_cycle > next_cycle) return false;
    *response = responses_.front().code;
    responses_.pop_front();
    ++stats_.write_responses;
    return true;
}

bool DdrModel::advance(uint8_t* readdata, uint64_t next_cycle) {
    credit_ = std::min(credit_ + credit_per_cycle_, credit_cap_);
    if (reads_.empty() || error_ != DDR_OK) return false;
    ReadCmd& head = reads_.front();
    if (head.ready_cycle > next_cycle || credit_ < beat_cost_) return false;
    const uint8_t* src = mem_.bytes.data() + (head.address - params_.base);
    std::copy(src, src + params_.bus_bytes, readdata);
    credit_ -= beat_cost_;
    ++stats_.read_beats;
    ++stats_.busy_cycles;
    stats_.read_bytes += params_.bus_bytes;
    head.address += params_.bus_bytes;
    if (--head.beats_left == 0) reads_.pop_front();
    return true;
}

}  // namespace dlsim
