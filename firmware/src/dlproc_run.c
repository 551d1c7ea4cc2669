/* dlproc-run NET INPUT OUTPUT: deploy a compiled network, run one frame, print the profile.
 *
 * INPUT is one packed frame, the InputDataOffset image (dlproc.compiler.host.pack_frame); OUTPUT
 * receives the OutputResultOffset region.  The HAL is chosen at link time (hal_linux.c on the board,
 * hal_sim.c with the Verilated processor); its options are given as --hal key=value. */
#define _GNU_SOURCE
#include "dlproc_rt.h"
#include "dlproc_util.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FILE (1ull << 31)
#define MAX_HAL_OPTS 32

static void usage(FILE *f) {
    fprintf(f, "usage: dlproc-run [--hal KEY=VALUE]... [--timeout-ms N] [--clock-mhz F] NET INPUT OUTPUT\n"
               "  NET     compiled network (.dlnet)\n"
               "  INPUT   one packed input frame (the InputDataOffset image)\n"
               "  OUTPUT  file that receives the OutputResultOffset region\n"
               "HAL '%s' options:\n%s", dlproc_hal_name(), dlproc_hal_usage());
}

static uint8_t *read_file(const char *path, size_t *len, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        dlproc_set_err(err, errlen, "cannot open %s", path);
        return NULL;
    }
    uint8_t *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n == cap) {
            if (cap >= MAX_FILE) {
                dlproc_set_err(err, errlen, "%s is larger than %llu bytes", path, MAX_FILE);
                free(buf);
                fclose(f);
                return NULL;
            }
            size_t ncap = cap ? cap * 2 : 1 << 16;
            uint8_t *nb = realloc(buf, ncap);
            if (!nb) {
                dlproc_set_err(err, errlen, "out of memory reading %s", path);
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
            cap = ncap;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        dlproc_set_err(err, errlen, "error reading %s", path);
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

static void print_profile(const dlproc_net *net, const dlproc_profile *p, double mhz) {
    printf("total: %llu cycles, %.6f ms at %.1f MHz (wall %.3f ms), %u instructions fetched\n",
           (unsigned long long)p->cycles, (double)p->cycles / (mhz * 1e3), mhz, (double)p->wall_us / 1e3, p->fetched);
    printf("%-6s %-40s %14s %12s\n", "entry", "layers", "cycles", "ms");
    uint64_t prev = 0;
    for (uint32_t i = 0; i < p->prof_count; ++i) {
        char names[41] = "";
        size_t used = 0;
        for (uint32_t k = 0; k < net->n_layers; ++k) {
            if (net->layers[k].profile_index != (int32_t)i) continue;
            int w = snprintf(names + used, sizeof names - used, "%s%s", used ? "+" : "", net->layers[k].name);
            if (w < 0 || (size_t)w >= sizeof names - used) {
                memcpy(names + sizeof names - 4, "...", 4);
                break;
            }
            used += (size_t)w;
        }
        uint64_t d = p->prof[i] >= prev ? p->prof[i] - prev : 0;
        printf("%-6u %-40s %14llu %12.6f\n", i, names, (unsigned long long)d, (double)d / (mhz * 1e3));
        prev = p->prof[i];
    }
    printf("counters:");
    for (unsigned i = 0; i < DLPROC_N_PERF; ++i) printf(" %s=%u", dlproc_perf_name(i), p->perf[i]);
    printf("\n");
}

int main(int argc, char **argv) {
    char *hal_opts[MAX_HAL_OPTS];
    int nopts = 0;
    uint64_t timeout_ms = 10000;
    double clock_mhz = 0;
    static const struct option longopts[] = {
        {"hal", required_argument, NULL, 'H'},      {"timeout-ms", required_argument, NULL, 't'},
        {"clock-mhz", required_argument, NULL, 'c'}, {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int ch;
    while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (ch) {
        case 'H':
            if (nopts == MAX_HAL_OPTS) {
                fprintf(stderr, "dlproc-run: at most %d --hal options\n", MAX_HAL_OPTS);
                return 2;
            }
            hal_opts[nopts++] = optarg;
            break;
        case 't':
            if (dlproc_parse_u64(optarg, &timeout_ms) || timeout_ms == 0 || timeout_ms > 86400000u) {
                fprintf(stderr, "dlproc-run: --timeout-ms must be 1..86400000, not '%s'\n", optarg);
                return 2;
            }
            break;
        case 'c':
            if (dlproc_parse_double(optarg, &clock_mhz) || clock_mhz <= 0) {
                fprintf(stderr, "dlproc-run: --clock-mhz must be a positive number, not '%s'\n", optarg);
                return 2;
            }
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (argc - optind != 3) {
        usage(stderr);
        return 2;
    }
    const char *net_path = argv[optind], *in_path = argv[optind + 1], *out_path = argv[optind + 2];
    char msg[512];
    size_t net_len = 0, in_len = 0;
    uint8_t *net_buf = read_file(net_path, &net_len, msg, sizeof msg);
    uint8_t *in_buf = net_buf ? read_file(in_path, &in_len, msg, sizeof msg) : NULL;
    if (!net_buf || !in_buf) {
        fprintf(stderr, "dlproc-run: %s\n", msg);
        free(net_buf);
        return 1;
    }
    int status = 1;
    dlproc_hal *hal = NULL;
    dlproc_rt *rt = NULL;
    uint8_t *out = NULL;
    dlproc_profile *prof = calloc(1, sizeof *prof);
    dlproc_error e = {0};
    if (!prof) {
        fprintf(stderr, "dlproc-run: out of memory\n");
        goto done;
    }
    if (dlproc_hal_open(nopts, hal_opts, &hal, e.msg, sizeof e.msg)) {
        fprintf(stderr, "dlproc-run: error E_HAL: %s\n", e.msg);
        goto done;
    }
    if (dlproc_rt_open(&rt, hal, &e) || dlproc_rt_deploy(rt, net_buf, net_len, &e)) {
        fprintf(stderr, "dlproc-run: error %s: %s\n", dlproc_status_name(e.code), e.msg);
        goto done;
    }
    const dlproc_hw_info *hw = dlproc_rt_hw(rt);
    const dlproc_net *net = dlproc_rt_net(rt);
    printf("processor: config %016llx, C=%u, bus %u bytes, HAL %s, DMA region [0x%llx, +0x%llx)\n",
           (unsigned long long)hw->config_hash, hw->c, hw->mem_bytes, dlproc_hal_name(),
           (unsigned long long)hw->dma_phys, (unsigned long long)hw->dma_size);
    printf("network: %u layers, %u instructions, memory [0x%llx, 0x%llx)", net->n_layers, net->insn_count,
           (unsigned long long)net->base, (unsigned long long)(net->base + net->end));
    if (net->base != net->compiled_base)
        printf(" (relocated from 0x%llx)", (unsigned long long)net->compiled_base);
    printf("\n");
    out = malloc(net->output_size ? (size_t)net->output_size : 1);
    size_t out_len = 0;
    if (!out) {
        fprintf(stderr, "dlproc-run: out of memory\n");
        goto done;
    }
    if (dlproc_rt_run(rt, in_buf, in_len, out, (size_t)net->output_size, &out_len, timeout_ms * 1000u, prof, &e)) {
        fprintf(stderr, "dlproc-run: error %s: %s\n", dlproc_status_name(e.code), e.msg);
        goto done;
    }
    FILE *f = fopen(out_path, "wb");
    if (!f || fwrite(out, 1, out_len, f) != out_len || fclose(f)) {
        fprintf(stderr, "dlproc-run: cannot write %s\n", out_path);
        goto done;
    }
    print_profile(net, prof, clock_mhz > 0 ? clock_mhz : (net->clock_mhz > 0 ? net->clock_mhz : 100.0));
    printf("output: %zu bytes written to %s\n", out_len, out_path);
    status = 0;
done:
    dlproc_rt_close(rt);
    dlproc_hal_close(hal);
    free(out);
    free(prof);
    free(net_buf);
    free(in_buf);
    return status;
}
