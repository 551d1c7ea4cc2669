/* Minimal declarations of the two liblz4 functions that Verilator's FST writer calls.
 *
 * Used only when the system lacks liblz4's development header (see sim/build.py, _lz4_compat);
 * the program links against the system's liblz4.so.1, whose stable ABI these declarations match. */
#ifndef DLPROC_COMPAT_LZ4_H
#define DLPROC_COMPAT_LZ4_H
#ifdef __cplusplus
extern "C" {
#endif
int LZ4_compressBound(int inputSize);
int LZ4_compress_default(const char* src, char* dst, int srcSize, int dstCapacity);
#ifdef __cplusplus
}
#endif
#endif
