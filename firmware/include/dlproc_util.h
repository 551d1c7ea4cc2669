/* Small helpers shared by the runtime, the HALs, the runner and the agent. */
#ifndef DLPROC_UTIL_H
#define DLPROC_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Parses a whole string as an unsigned integer (decimal, 0x hex or 0 octal); 0 on success. */
int dlproc_parse_u64(const char *s, uint64_t *out);
/* Parses a whole string as a finite double; 0 on success. */
int dlproc_parse_double(const char *s, double *out);
/* Splits "key=value" in place into key and value (the '=' is replaced by NUL); 0 on success. */
int dlproc_split_opt(char *opt, char **key, char **value);
/* snprintf into err (which may be NULL); always NUL terminated. */
void dlproc_set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Monotonic time in microseconds. */
uint64_t dlproc_now_us(void);
/* Little-endian loads and stores that never read or write outside [p, p + width). */
static inline uint16_t dlproc_ld16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t dlproc_ld32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t dlproc_ld64(const uint8_t *p) {
    return (uint64_t)dlproc_ld32(p) | ((uint64_t)dlproc_ld32(p + 4) << 32);
}
static inline void dlproc_st16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static inline void dlproc_st32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}
static inline void dlproc_st64(uint8_t *p, uint64_t v) {
    dlproc_st32(p, (uint32_t)v); dlproc_st32(p + 4, (uint32_t)(v >> 32));
}
/* True when [off, off + n) lies inside [0, size) -- written so that off + n cannot overflow. */
static inline int dlproc_in_bounds(uint64_t off, uint64_t n, uint64_t size) {
    return off <= size && n <= size - off;
}

#endif /* DLPROC_UTIL_H */
