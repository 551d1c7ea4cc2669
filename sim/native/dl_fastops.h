// Sign-extension helpers for the Verilated model of the native harness.
//
// Verilator's runtime writes a sign extension as `-(x & (1 << (n - 1))) | x` (VL_EXTENDS_II and
// everything built on it: signed multiplies and compares). GCC does not recognise that as a sign
// extension, so the conv engine's signed 8 x 8 products, which Verilator writes as
// VL_MULS_III(16, VL_EXTENDS_II(16, 8, x), VL_EXTENDS_II(16, 8, w)), cost about twenty
// instructions each. Written as a left shift and an arithmetic right shift, the same extension
// is one `movsx` or a shift pair, and GCC folds the nested extensions of such a product into
// one: on de10nano_int8 the model's instructions per simulated cycle fell from 14.98 k to 12.56 k
// (callgrind; docs/simulation.md "Speed").
//
// sim/build.py renames the calls in the generated model (`VL_EXTENDS_II(` -> `DL_EXTENDS_II(`,
// ...) between Verilator and the C++ compiler and includes this header. Each function returns
// what the Verilator function of the same name returns for a clean operand (no bits set at or
// above its width `lbits`), which is what Verilator passes to them; tests/test_sim_fastops.py
// checks that against verilated_funcs.h for every width.
#ifndef DL_FASTOPS_H
#define DL_FASTOPS_H

#include <cstdint>

// The value of the low `lbits` bits of `x` as a signed number (1 <= lbits <= 32).
static inline int32_t dl_sext32(int lbits, uint32_t x) {
    const int shift = 32 - lbits;
    return static_cast<int32_t>(x << shift) >> shift;
}

// The value of the low `lbits` bits of `x` as a signed number (1 <= lbits <= 64).
static inline int64_t dl_sext64(int lbits, uint64_t x) {
    const int shift = 64 - lbits;
    return static_cast<int64_t>(x << shift) >> shift;
}

static inline uint32_t DL_EXTENDS_II(int, int lbits, uint32_t lhs) {
    return static_cast<uint32_t>(dl_sext32(lbits, lhs));
}
static inline uint64_t DL_EXTENDS_QI(int, int lbits, uint64_t lhs) {
    return static_cast<uint64_t>(dl_sext64(lbits, lhs));
}
static inline uint64_t DL_EXTENDS_QQ(int, int lbits, uint64_t lhs) {
    return static_cast<uint64_t>(dl_sext64(lbits, lhs));
}

// The products wrap like Verilator's (two's complement, low 32/64 bits); the multiply is done
// unsigned so that the wrap is defined behaviour in C++.
static inline uint32_t DL_MULS_III(int lbits, uint32_t lhs, uint32_t rhs) {
    return static_cast<uint32_t>(dl_sext32(lbits, lhs)) * static_cast<uint32_t>(dl_sext32(lbits, rhs));
}
static inline uint64_t DL_MULS_QQQ(int lbits, uint64_t lhs, uint64_t rhs) {
    return static_cast<uint64_t>(dl_sext64(lbits, lhs)) * static_cast<uint64_t>(dl_sext64(lbits, rhs));
}

// The signed compares, for operands of up to 32 (III) and up to 64 (IQQ) bits.
#define DL_SIGNED_COMPARE(name, op)                                                        \
    static inline uint32_t DL_##name##_III(int lbits, uint32_t lhs, uint32_t rhs) {      \
        return dl_sext32(lbits, lhs) op dl_sext32(lbits, rhs);                            \
    }                                                                                     \
    static inline uint32_t DL_##name##_IQQ(int lbits, uint64_t lhs, uint64_t rhs) {      \
        return dl_sext64(lbits, lhs) op dl_sext64(lbits, rhs);                            \
    }
DL_SIGNED_COMPARE(GTS, >)
DL_SIGNED_COMPARE(GTES, >=)
DL_SIGNED_COMPARE(LTS, <)
DL_SIGNED_COMPARE(LTES, <=)
#undef DL_SIGNED_COMPARE

#endif  // DL_FASTOPS_H
