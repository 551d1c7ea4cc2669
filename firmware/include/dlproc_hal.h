/* Hardware-abstraction layer of the dlproc runtime.
 *
 * Exactly one implementation is linked into a program: hal_linux.c on the HPS (registers through
 * UIO or /dev/mem, DMA memory in a u-dma-buf buffer or a reserved region of /dev/mem) or
 * hal_sim.c on a workstation (the Verilated processor and its DDR model, loaded from the native
 * harness library).  The runtime (dlproc_rt.c) only talks to the processor through these calls, so
 * the same runtime code runs on the board and in simulation.
 *
 * The DMA region is one physically contiguous window of memory that both the CPU and the
 * processor's memory master can reach; offsets below are byte offsets into it and physical
 * (bus) addresses are dlproc_hal_dma_phys() + offset.
 */
#ifndef DLPROC_HAL_H
#define DLPROC_HAL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dlproc_hal dlproc_hal;

/* Results of dlproc_hal_wait. */
#define DLPROC_HAL_IRQ 0     /* the processor raised its interrupt (DONE or ERROR) */
#define DLPROC_HAL_TIMEOUT 1 /* the timeout elapsed first */
#define DLPROC_HAL_FAIL (-1) /* the HAL itself failed (message in err) */

/* Opens the HAL.  opts are "key=value" strings (see dlproc_hal_usage()); unknown keys are an
 * error.  Returns 0, or -1 with a message in err. */
int dlproc_hal_open(int nopts, char *const *opts, dlproc_hal **out, char *err, size_t errlen);
void dlproc_hal_close(dlproc_hal *h);

const char *dlproc_hal_name(void);  /* "linux" or "sim" */
const char *dlproc_hal_usage(void); /* the options dlproc_hal_open accepts, one per line */

uint32_t dlproc_hal_csr_read(dlproc_hal *h, uint32_t word);
void dlproc_hal_csr_write(dlproc_hal *h, uint32_t word, uint32_t value);

uint64_t dlproc_hal_dma_phys(const dlproc_hal *h);
uint64_t dlproc_hal_dma_size(const dlproc_hal *h);

/* Copy into / out of the DMA region; -1 when [off, off + n) is not inside it. */
int dlproc_hal_dma_write(dlproc_hal *h, uint64_t off, const void *src, size_t n);
int dlproc_hal_dma_read(dlproc_hal *h, uint64_t off, void *dst, size_t n);

/* Cache maintenance around a processor run: make CPU writes visible to the device before START,
 * and the device's writes visible to the CPU after DONE.  Return 0 or -1. */
int dlproc_hal_sync_for_device(dlproc_hal *h, uint64_t off, size_t n);
int dlproc_hal_sync_for_cpu(dlproc_hal *h, uint64_t off, size_t n);

/* Waits until the processor's interrupt is high or timeout_us of processor time has passed
 * (wall time on the board; simulated time at the configured clock in simulation, with a
 * wall-clock guard).  Returns DLPROC_HAL_IRQ, DLPROC_HAL_TIMEOUT or DLPROC_HAL_FAIL. */
int dlproc_hal_wait(dlproc_hal *h, uint64_t timeout_us, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* DLPROC_HAL_H */
