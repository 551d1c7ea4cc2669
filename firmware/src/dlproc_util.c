/* Helpers shared by the runtime, the HALs, the runner and the agent (see dlproc_util.h). */
#define _POSIX_C_SOURCE 200809L
#include "dlproc_util.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int dlproc_parse_u64(const char *s, uint64_t *out) {
    if (!s || !*s || *s == '-' || *s == '+') return -1;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || !end || *end) return -1;
    *out = (uint64_t)v;
    return 0;
}

int dlproc_parse_double(const char *s, double *out) {
    if (!s || !*s) return -1;
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || !end || *end || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

int dlproc_split_opt(char *opt, char **key, char **value) {
    char *eq = strchr(opt, '=');
    if (!eq || eq == opt) return -1;
    *eq = '\0';
    *key = opt;
    *value = eq + 1;
    return 0;
}

void dlproc_set_err(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    err[errlen - 1] = '\0';
}

uint64_t dlproc_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}
