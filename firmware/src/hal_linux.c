/* Linux HAL for the HPS (Cyclone V / Arria 10 SoC, Cortex-A9): the processor's CSRs and a DMA
 * region mapped into user space.
 *
 * Registers (choose one):
 *   uio=/dev/uioN        a UIO device whose map0 is the CSR slave on the lightweight bridge
 *                        (device-tree node with compatible "generic-uio" and the IRQ, see
 *                        docs/boards.md); its file descriptor also delivers the interrupt.
 *   csr_phys=ADDR        the CSR slave's physical address through /dev/mem (no interrupt: the
 *                        runtime polls STATUS), csr_size=BYTES (default 256).
 * DMA memory (choose one):
 *   udmabuf=NAME         a u-dma-buf buffer (/dev/NAME); its physical address and size come from
 *                        sysfs.  It is mapped cached, and the runtime's sync calls use the
 *                        driver's sync_for_device / sync_for_cpu attributes.  dma_cached=0 maps
 *                        it with O_SYNC (uncached) instead.
 *   dma_phys=ADDR,dma_size=BYTES   a reserved-memory region through /dev/mem, mapped with O_SYNC,
 *                        so the CPU's accesses are uncached and need only barriers.
 * Other: irq=0 polls STATUS even with UIO; poll_us=N is the polling interval (default 20);
 *   mem_dev=PATH replaces /dev/mem (the tests map a sparse file there to check, on the ARM binary
 *   under qemu, which registers and memory the runtime writes).
 *
 * The physical address seen by the CPU is the one the processor's memory master uses: on both
 * SoCs the FPGA-to-SDRAM port addresses SDRAM from 0 like the MPU does (with two masters,
 * MemoryPorts = 2 on the Arria 10, both ports do, so one DMA window serves reads and writes).
 */
#define _GNU_SOURCE
/* The HPS is 32-bit: without 64-bit file offsets, mmap() of /dev/mem could not reach physical
 * addresses at or above 2 GiB, where the lightweight bridge (0xFF200000) lives. */
#define _FILE_OFFSET_BITS 64
#include "dlproc_hal.h"
#include "dlproc_util.h"
#include "dlproc_regs.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

_Static_assert(sizeof(off_t) == 8, "hal_linux.c needs a 64-bit off_t to map physical addresses above 2 GiB");

struct dlproc_hal {
    int uio_fd;              /* -1 without UIO */
    int mem_fd;              /* /dev/mem, -1 when not needed */
    int dma_fd;              /* u-dma-buf device, -1 otherwise */
    volatile uint32_t *csr;  /* CSR words */
    void *csr_map;
    size_t csr_map_len;
    uint8_t *dma;            /* DMA region */
    void *dma_map;
    size_t dma_map_len;
    uint64_t dma_phys, dma_size;
    size_t csr_words;
    int use_irq;
    int dma_cached;          /* cached u-dma-buf mapping: sync through sysfs */
    char sysfs[256];         /* u-dma-buf sysfs folder */
    uint64_t poll_us;
    const char *mem_dev;
};

const char *dlproc_hal_name(void) { return "linux"; }

const char *dlproc_hal_usage(void) {
    return "uio=/dev/uioN         CSR slave as UIO map0, interrupt through UIO\n"
           "csr_phys=ADDR         CSR slave physical address through /dev/mem (polling)\n"
           "csr_size=BYTES        size of the CSR window (default 256)\n"
           "udmabuf=NAME          u-dma-buf DMA buffer /dev/NAME (address and size from sysfs)\n"
           "dma_cached=0|1        map the u-dma-buf cached with explicit syncs (default 1)\n"
           "dma_phys=ADDR         reserved DMA region physical address through /dev/mem\n"
           "dma_size=BYTES        size of that region\n"
           "irq=0|1               wait for the UIO interrupt (default 1) or poll STATUS\n"
           "poll_us=N             STATUS polling interval in microseconds (default 20)\n"
           "mem_dev=PATH          physical-memory device (default /dev/mem)\n";
}

static int read_sysfs_u64(const char *path, int base, uint64_t *out) {
    char buf[64];
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(buf, &end, base);
    if (errno || end == buf) return -1;
    *out = (uint64_t)v;
    return 0;
}

static int write_sysfs(const char *dir, const char *attr, uint64_t value) {
    char path[320], buf[32];
    snprintf(path, sizeof path, "%s/%s", dir, attr);
    int fd = open(path, O_WRONLY);
    if (fd < 0) return -1;
    int len = snprintf(buf, sizeof buf, "%llu", (unsigned long long)value);
    ssize_t w = write(fd, buf, (size_t)len);
    close(fd);
    return w == len ? 0 : -1;
}

/* Maps [phys, phys + len) of /dev/mem; phys need not be page aligned. */
static volatile void *map_phys(struct dlproc_hal *h, uint64_t phys, size_t len, void **map, size_t *map_len,
                               char *err, size_t errlen) {
    if (h->mem_fd < 0) {
        h->mem_fd = open(h->mem_dev, O_RDWR | O_SYNC | O_CLOEXEC);
        if (h->mem_fd < 0) {
            dlproc_set_err(err, errlen, "cannot open %s: %s (run as root)", h->mem_dev, strerror(errno));
            return NULL;
        }
    }
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t base = phys & ~(page - 1);
    size_t total = (size_t)(phys - base) + len;
    void *p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, h->mem_fd, (off_t)base);
    if (p == MAP_FAILED) {
        dlproc_set_err(err, errlen, "cannot map physical memory 0x%llx (+%zu): %s", (unsigned long long)phys, len,
                       strerror(errno));
        return NULL;
    }
    *map = p;
    *map_len = total;
    return (volatile uint8_t *)p + (phys - base);
}

static int open_uio(struct dlproc_hal *h, const char *dev, char *err, size_t errlen) {
    const char *name = strrchr(dev, '/');
    name = name ? name + 1 : dev;
    char path[256];
    uint64_t size = 0;
    snprintf(path, sizeof path, "/sys/class/uio/%s/maps/map0/size", name);
    if (read_sysfs_u64(path, 0, &size) || size < 4 * 64) {
        dlproc_set_err(err, errlen, "cannot read the size of %s map0 from %s", dev, path);
        return -1;
    }
    h->uio_fd = open(dev, O_RDWR | O_CLOEXEC);
    if (h->uio_fd < 0) {
        dlproc_set_err(err, errlen, "cannot open %s: %s", dev, strerror(errno));
        return -1;
    }
    /* UIO selects map N with an mmap offset of N pages. */
    void *p = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, h->uio_fd, 0);
    if (p == MAP_FAILED) {
        dlproc_set_err(err, errlen, "cannot map %s map0: %s", dev, strerror(errno));
        return -1;
    }
    h->csr_map = p;
    h->csr_map_len = (size_t)size;
    h->csr = (volatile uint32_t *)p;
    h->csr_words = (size_t)size / 4;
    return 0;
}

static int open_udmabuf(struct dlproc_hal *h, const char *name, char *err, size_t errlen) {
    char path[320];
    const char *classes[] = {"/sys/class/u-dma-buf", "/sys/class/udmabuf"};
    int found = 0;
    for (size_t i = 0; i < sizeof classes / sizeof classes[0] && !found; ++i) {
        snprintf(h->sysfs, sizeof h->sysfs, "%s/%s", classes[i], name);
        snprintf(path, sizeof path, "%s/phys_addr", h->sysfs);
        found = read_sysfs_u64(path, 16, &h->dma_phys) == 0;
    }
    snprintf(path, sizeof path, "%s/size", h->sysfs);
    if (!found || read_sysfs_u64(path, 10, &h->dma_size) || h->dma_size == 0 || h->dma_size > SIZE_MAX ||
        h->dma_size > (1ull << 32) || h->dma_phys > (1ull << 32) - h->dma_size) {
        dlproc_set_err(err, errlen, "cannot read a usable phys_addr/size of u-dma-buf %s from sysfs (is the driver "
                       "loaded? the buffer must lie below 4 GiB)", name);
        return -1;
    }
    snprintf(path, sizeof path, "/dev/%s", name);
    h->dma_fd = open(path, O_RDWR | O_CLOEXEC | (h->dma_cached ? 0 : O_SYNC));
    if (h->dma_fd < 0) {
        dlproc_set_err(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    void *p = mmap(NULL, (size_t)h->dma_size, PROT_READ | PROT_WRITE, MAP_SHARED, h->dma_fd, 0);
    if (p == MAP_FAILED) {
        dlproc_set_err(err, errlen, "cannot map %s: %s", path, strerror(errno));
        return -1;
    }
    h->dma_map = p;
    h->dma_map_len = (size_t)h->dma_size;
    h->dma = p;
    return 0;
}

int dlproc_hal_open(int nopts, char *const *opts, dlproc_hal **out, char *err, size_t errlen) {
    struct dlproc_hal *h = calloc(1, sizeof *h);
    if (!h) {
        dlproc_set_err(err, errlen, "out of memory");
        return -1;
    }
    h->uio_fd = h->mem_fd = h->dma_fd = -1;
    h->dma_cached = 1;
    h->use_irq = 1;
    h->poll_us = 20;
    h->mem_dev = "/dev/mem";
    const char *uio = NULL, *udmabuf = NULL;
    uint64_t csr_phys = 0, csr_size = 256, dma_phys = 0, dma_size = 0, flag = 0;
    int have_csr_phys = 0, have_dma_phys = 0;
    for (int i = 0; i < nopts; ++i) {
        char buf[512];
        char *key, *val;
        if (strlen(opts[i]) >= sizeof buf || (strcpy(buf, opts[i]), dlproc_split_opt(buf, &key, &val))) {
            dlproc_set_err(err, errlen, "linux HAL option '%.60s' is not key=value", opts[i]);
            goto fail;
        }
        int bad = 0;
        if (!strcmp(key, "uio")) uio = opts[i] + (val - buf);
        else if (!strcmp(key, "udmabuf")) udmabuf = opts[i] + (val - buf);
        else if (!strcmp(key, "csr_phys")) bad = dlproc_parse_u64(val, &csr_phys), have_csr_phys = 1;
        else if (!strcmp(key, "csr_size")) bad = dlproc_parse_u64(val, &csr_size) || csr_size < 256 || csr_size > (1u << 20);
        else if (!strcmp(key, "dma_phys")) bad = dlproc_parse_u64(val, &dma_phys), have_dma_phys = 1;
        else if (!strcmp(key, "dma_size")) bad = dlproc_parse_u64(val, &dma_size);
        else if (!strcmp(key, "dma_cached")) bad = dlproc_parse_u64(val, &flag) || flag > 1, h->dma_cached = (int)flag;
        else if (!strcmp(key, "irq")) bad = dlproc_parse_u64(val, &flag) || flag > 1, h->use_irq = (int)flag;
        else if (!strcmp(key, "mem_dev")) h->mem_dev = opts[i] + (val - buf);
        else if (!strcmp(key, "poll_us")) bad = dlproc_parse_u64(val, &h->poll_us) || h->poll_us > 1000000;
        else {
            dlproc_set_err(err, errlen, "unknown linux HAL option '%s'; allowed:\n%s", key, dlproc_hal_usage());
            goto fail;
        }
        if (bad) {
            dlproc_set_err(err, errlen, "linux HAL option %s has a bad value '%s'", key, val);
            goto fail;
        }
    }
    if (!!uio + have_csr_phys != 1) {
        dlproc_set_err(err, errlen, "give exactly one of uio=/dev/uioN or csr_phys=ADDR for the registers");
        goto fail;
    }
    if (!!udmabuf + have_dma_phys != 1) {
        dlproc_set_err(err, errlen, "give exactly one of udmabuf=NAME or dma_phys=ADDR,dma_size=BYTES for DMA memory");
        goto fail;
    }
    if (uio) {
        if (open_uio(h, uio, err, errlen)) goto fail;
    } else {
        h->use_irq = 0;
        h->csr = (volatile uint32_t *)map_phys(h, csr_phys, (size_t)csr_size, &h->csr_map, &h->csr_map_len, err, errlen);
        if (!h->csr) goto fail;
        h->csr_words = (size_t)csr_size / 4;
    }
    if (udmabuf) {
        if (open_udmabuf(h, udmabuf, err, errlen)) goto fail;
    } else {
        if (dma_size == 0 || dma_size > SIZE_MAX || dma_size > (1ull << 32) || dma_phys > (1ull << 32) - dma_size) {
            dlproc_set_err(err, errlen, "dma_size must be > 0 and the region below 4 GiB");
            goto fail;
        }
        h->dma_phys = dma_phys;
        h->dma_size = dma_size;
        h->dma_cached = 0;
        h->dma = (uint8_t *)map_phys(h, dma_phys, (size_t)dma_size, &h->dma_map, &h->dma_map_len, err, errlen);
        if (!h->dma) goto fail;
    }
    *out = h;
    return 0;
fail:
    dlproc_hal_close(h);
    return -1;
}

void dlproc_hal_close(dlproc_hal *h) {
    if (!h) return;
    if (h->csr_map) munmap(h->csr_map, h->csr_map_len);
    if (h->dma_map) munmap(h->dma_map, h->dma_map_len);
    if (h->uio_fd >= 0) close(h->uio_fd);
    if (h->dma_fd >= 0) close(h->dma_fd);
    if (h->mem_fd >= 0) close(h->mem_fd);
    free(h);
}

uint32_t dlproc_hal_csr_read(dlproc_hal *h, uint32_t word) {
    return word < h->csr_words ? h->csr[word] : 0xFFFFFFFFu;
}

void dlproc_hal_csr_write(dlproc_hal *h, uint32_t word, uint32_t value) {
    /* Every earlier store to the DMA region must reach memory before a CSR write can start the
     * processor, hence the full barrier (a DMB on ARM). */
    __sync_synchronize();
    if (word < h->csr_words) h->csr[word] = value;
    __sync_synchronize();
}

uint64_t dlproc_hal_dma_phys(const dlproc_hal *h) { return h->dma_phys; }
uint64_t dlproc_hal_dma_size(const dlproc_hal *h) { return h->dma_size; }

int dlproc_hal_dma_write(dlproc_hal *h, uint64_t off, const void *src, size_t n) {
    if (!dlproc_in_bounds(off, n, h->dma_size)) return -1;
    memcpy(h->dma + off, src, n);
    return 0;
}

int dlproc_hal_dma_read(dlproc_hal *h, uint64_t off, void *dst, size_t n) {
    if (!dlproc_in_bounds(off, n, h->dma_size)) return -1;
    memcpy(dst, h->dma + off, n);
    return 0;
}

/* u-dma-buf's manual cache maintenance: the range and direction, then the trigger attribute.
 * Direction 1 is DMA_TO_DEVICE (clean), 2 DMA_FROM_DEVICE (invalidate). */
static int udmabuf_sync(struct dlproc_hal *h, uint64_t off, size_t n, int direction, const char *trigger) {
    if (!dlproc_in_bounds(off, n, h->dma_size)) return -1;
    __sync_synchronize();
    if (!h->dma_cached || n == 0) return 0;
    if (write_sysfs(h->sysfs, "sync_offset", off) || write_sysfs(h->sysfs, "sync_size", n) ||
        write_sysfs(h->sysfs, "sync_direction", (uint64_t)direction) || write_sysfs(h->sysfs, trigger, 1))
        return -1;
    return 0;
}

int dlproc_hal_sync_for_device(dlproc_hal *h, uint64_t off, size_t n) {
    return udmabuf_sync(h, off, n, 1, "sync_for_device");
}

int dlproc_hal_sync_for_cpu(dlproc_hal *h, uint64_t off, size_t n) {
    return udmabuf_sync(h, off, n, 2, "sync_for_cpu");
}

static int finished(struct dlproc_hal *h) {
    return (dlproc_hal_csr_read(h, DLPROC_REG_STATUS) & (DLPROC_STATUS_DONE_MASK | DLPROC_STATUS_ERROR_MASK)) != 0;
}

int dlproc_hal_wait(dlproc_hal *h, uint64_t timeout_us, char *err, size_t errlen) {
    uint64_t start = dlproc_now_us();
    for (;;) {
        if (finished(h)) return DLPROC_HAL_IRQ;
        uint64_t elapsed = dlproc_now_us() - start;
        if (elapsed >= timeout_us) return finished(h) ? DLPROC_HAL_IRQ : DLPROC_HAL_TIMEOUT;
        uint64_t left = timeout_us - elapsed;
        if (h->use_irq && h->uio_fd >= 0) {
            /* uio_pdrv_genirq masks the interrupt in its handler; writing 1 unmasks it, and a
             * level still high fires again at once, so no edge can be missed. */
            uint32_t one = 1, count = 0;
            if (write(h->uio_fd, &one, sizeof one) != (ssize_t)sizeof one) {
                dlproc_set_err(err, errlen, "cannot enable the UIO interrupt: %s", strerror(errno));
                return DLPROC_HAL_FAIL;
            }
            struct pollfd p = {.fd = h->uio_fd, .events = POLLIN};
            uint64_t ms = (left + 999) / 1000;
            int r = poll(&p, 1, ms > 60000 ? 60000 : (int)ms);
            if (r < 0 && errno != EINTR) {
                dlproc_set_err(err, errlen, "poll on the UIO device failed: %s", strerror(errno));
                return DLPROC_HAL_FAIL;
            }
            if (r > 0 && read(h->uio_fd, &count, sizeof count) != (ssize_t)sizeof count) {
                dlproc_set_err(err, errlen, "read of the UIO interrupt count failed: %s", strerror(errno));
                return DLPROC_HAL_FAIL;
            }
        } else {
            uint64_t us = h->poll_us < left ? h->poll_us : left;
            struct timespec ts = {.tv_sec = (time_t)(us / 1000000u), .tv_nsec = (long)(us % 1000000u) * 1000};
            nanosleep(&ts, NULL);
        }
    }
}
