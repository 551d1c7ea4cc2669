/* Compiled-network file parser (see dlproc_net.h for the guarantees, dlproc/netfile.py and
 * docs/netfile.md for the layout).  Checks run in the order of trust: header, its CRC, the section
 * table, each section's bounds and checksums, and only then the contents of MMAP, IOQ and LAYR. */
#include "dlproc_net.h"
#include "dlproc_checksum.h"
#include "dlproc_util.h"
#include "dlproc_isa.h"

#if DLPROC_LOAD_DRAM_ADDR_BITS != 32 || DLPROC_STORE_DRAM_ADDR_BITS != 32
#error "the runtime relocates 32-bit LOAD/STORE dram_addr fields; update netfile.c for the new ISA"
#endif

#include <stdlib.h>
#include <string.h>

static const uint8_t MAGIC[8] = {'D', 'L', 'P', 'R', 'N', 'E', 'T', 0};

/* Record sizes of format version 1 (dlproc/netfile.py); larger records are accepted so that a
 * later minor revision may append fields. */
#define MMAP_HEAD 16u
#define MMAP_REC 48u
#define TABLE_HEAD 8u
#define IOQ_REC 112u
#define LAYR_REC 104u
#define MAX_DIM 65535u

typedef struct {
    const uint8_t *data;
    uint64_t size;
} section;

/* Copies a fixed-width NUL-padded name: printable ASCII, then NULs up to the width (at least one),
 * exactly as the writer pads them, so that no two spellings of one name exist. */
static int copy_name(char *dst, const uint8_t *src, size_t width) {
    size_t i = 0;
    for (; i < width && src[i]; ++i) {
        if (src[i] < 0x20 || src[i] > 0x7e) return -1;
        dst[i] = (char)src[i];
    }
    if (i == width) return -1;
    dst[i] = '\0';
    for (size_t k = i; k < width; ++k)
        if (src[k]) return -1;
    return 0;
}

static int find_section(const char names[][9], uint32_t n, const char *want) {
    for (uint32_t i = 0; i < n; ++i)
        if (!strcmp(names[i], want)) return (int)i;
    return -1;
}

static int parse_sections(const uint8_t *buf, size_t len, section *meta, section *mmap, section *ioq, section *layr, section *insn,
                          section *cwgt, section *fwgt, int *has_fwgt, char *err, size_t errlen) {
    uint32_t count = dlproc_ld32(buf + 56);
    if (count == 0 || count > DLPROC_NET_MAX_SECTIONS) {
        dlproc_set_err(err, errlen, "the header lists %u sections; 1..%u are allowed", count, DLPROC_NET_MAX_SECTIONS);
        return DLPROC_NET_E_FORMAT;
    }
    if (!dlproc_in_bounds(DLPROC_NET_HEADER_SIZE, (uint64_t)count * DLPROC_NET_SECTION_SIZE, len)) {
        dlproc_set_err(err, errlen, "the section table (%u entries) is cut off: the file has %zu bytes", count, len);
        return DLPROC_NET_E_FORMAT;
    }
    char names[DLPROC_NET_MAX_SECTIONS][9];
    section secs[DLPROC_NET_MAX_SECTIONS];
    for (uint32_t k = 0; k < count; ++k) {
        const uint8_t *e = buf + DLPROC_NET_HEADER_SIZE + (size_t)k * DLPROC_NET_SECTION_SIZE;
        if (copy_name(names[k], e, 8) || !names[k][0]) {
            dlproc_set_err(err, errlen, "section %u has no valid name", k);
            return DLPROC_NET_E_FORMAT;
        }
        if (find_section(names, k, names[k]) >= 0) {
            dlproc_set_err(err, errlen, "section %s appears twice", names[k]);
            return DLPROC_NET_E_FORMAT;
        }
        uint64_t off = dlproc_ld64(e + 8), size = dlproc_ld64(e + 16);
        if (!dlproc_in_bounds(off, size, len) || off % 64u ||
            off < DLPROC_NET_HEADER_SIZE + (uint64_t)count * DLPROC_NET_SECTION_SIZE) {
            dlproc_set_err(err, errlen, "section %s at offset %llu, size %llu lies outside the %zu-byte file (truncated?)",
                           names[k], (unsigned long long)off, (unsigned long long)size, len);
            return DLPROC_NET_E_FORMAT;
        }
        uint8_t digest[32];
        dlproc_sha256(buf + off, (size_t)size, digest);
        if (dlproc_crc32(buf + off, (size_t)size) != dlproc_ld32(e + 24) || memcmp(digest, e + 32, 32)) {
            dlproc_set_err(err, errlen, "the checksum of section %s does not match (the file is corrupted)", names[k]);
            return DLPROC_NET_E_FORMAT;
        }
        secs[k].data = buf + off;
        secs[k].size = size;
    }
    const char *required[] = {"META", "MMAP", "IOQ", "LAYR", "INSN", "CWGT"};
    section *out[] = {meta, mmap, ioq, layr, insn, cwgt};
    for (size_t r = 0; r < sizeof required / sizeof required[0]; ++r) {
        int i = find_section(names, count, required[r]);
        if (i < 0) {
            dlproc_set_err(err, errlen, "the file has no %s section", required[r]);
            return DLPROC_NET_E_FORMAT;
        }
        *out[r] = secs[i];
    }
    int f = find_section(names, count, "FWGT");
    *has_fwgt = f >= 0;
    if (f >= 0) *fwgt = secs[f];
    return DLPROC_NET_OK;
}

static const dlproc_net_region *region(const dlproc_net *net, const char *name) {
    for (uint32_t i = 0; i < net->n_regions; ++i)
        if (!strcmp(net->regions[i].name, name)) return &net->regions[i];
    return NULL;
}

static int parse_mmap(dlproc_net *net, section s, char *err, size_t errlen) {
    if (s.size < MMAP_HEAD) {
        dlproc_set_err(err, errlen, "the MMAP section is %llu bytes, shorter than its header", (unsigned long long)s.size);
        return DLPROC_NET_E_FORMAT;
    }
    net->base = net->compiled_base = dlproc_ld64(s.data);
    uint32_t count = dlproc_ld32(s.data + 8), rec = dlproc_ld32(s.data + 12);
    if (rec < MMAP_REC || count == 0 || count > DLPROC_NET_MAX_REGIONS || (uint64_t)count * rec > s.size - MMAP_HEAD) {
        dlproc_set_err(err, errlen, "the MMAP section's %u records of %u bytes do not fit its %llu bytes (or are not "
                       "1..%u records of >= %u bytes)", count, rec, (unsigned long long)s.size, DLPROC_NET_MAX_REGIONS,
                       MMAP_REC);
        return DLPROC_NET_E_FORMAT;
    }
    net->n_regions = count;
    for (uint32_t i = 0; i < count; ++i) {
        const uint8_t *r = s.data + MMAP_HEAD + (size_t)i * rec;
        dlproc_net_region *g = &net->regions[i];
        if (copy_name(g->name, r, 32)) {
            dlproc_set_err(err, errlen, "memory-map record %u has no valid name", i);
            return DLPROC_NET_E_FORMAT;
        }
        g->offset = dlproc_ld64(r + 32);
        g->size = dlproc_ld64(r + 40);
    }
    const dlproc_net_region *end = region(net, "EndOffset");
    if (!end) {
        dlproc_set_err(err, errlen, "the memory map has no EndOffset");
        return DLPROC_NET_E_FORMAT;
    }
    net->end = end->offset;
    /* The processor has 32-bit addresses and DMA_LIMIT is exclusive, so the network must end at
     * or below 0xFFFFFFFF. */
    if (net->end == 0 || net->base > 0xFFFFFFFFull || net->end > 0xFFFFFFFFull - net->base) {
        dlproc_set_err(err, errlen, "the network's memory [0x%llx, +0x%llx) does not fit the 32-bit address space",
                       (unsigned long long)net->base, (unsigned long long)net->end);
        return DLPROC_NET_E_FORMAT;
    }
    for (uint32_t i = 0; i < count; ++i) {
        const dlproc_net_region *g = &net->regions[i];
        if (g == end) continue;
        if (!dlproc_in_bounds(g->offset, g->size, net->end)) {
            dlproc_set_err(err, errlen, "region %s [%llu, +%llu) lies outside the network's %llu bytes", g->name,
                           (unsigned long long)g->offset, (unsigned long long)g->size, (unsigned long long)net->end);
            return DLPROC_NET_E_FORMAT;
        }
    }
    struct { const char *name; uint64_t *off, *size; int required; } want[] = {
        {"InputDataOffset", &net->input_off, &net->input_size, 1},
        {"OutputResultOffset", &net->output_off, &net->output_size, 1},
        {"InstructionDataOffset", &net->insn_off, &net->insn_size, 1},
        {"ConvWeightDataOffset", &net->cwgt_off, &net->cwgt_size, 1},
        {"FCWeightDataOffset", &net->fwgt_off, &net->fwgt_size, 0},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; ++i) {
        const dlproc_net_region *g = region(net, want[i].name);
        if (!g && want[i].required) {
            dlproc_set_err(err, errlen, "the memory map has no %s region", want[i].name);
            return DLPROC_NET_E_FORMAT;
        }
        *want[i].off = g ? g->offset : 0;
        *want[i].size = g ? g->size : 0;
    }
    return DLPROC_NET_OK;
}

static int check_dims(const uint32_t d[3]) {
    return d[0] >= 1 && d[1] >= 1 && d[2] >= 1 && d[0] <= MAX_DIM && d[1] <= MAX_DIM && d[2] <= MAX_DIM;
}

static int parse_ioq(dlproc_net *net, section s, char *err, size_t errlen) {
    if (s.size < TABLE_HEAD) {
        dlproc_set_err(err, errlen, "the IOQ section is shorter than its header");
        return DLPROC_NET_E_FORMAT;
    }
    uint32_t count = dlproc_ld32(s.data), rec = dlproc_ld32(s.data + 4);
    if (rec < IOQ_REC || count < 2 || (uint64_t)count * rec > s.size - TABLE_HEAD) {
        dlproc_set_err(err, errlen, "the IOQ section's %u records of %u bytes do not fit its %llu bytes (an input and "
                       ">= 1 output of >= %u bytes each are required)", count, rec, (unsigned long long)s.size, IOQ_REC);
        return DLPROC_NET_E_FORMAT;
    }
    net->tensors = calloc(count, sizeof *net->tensors);
    if (!net->tensors) {
        dlproc_set_err(err, errlen, "out of memory for %u tensor records", count);
        return DLPROC_NET_E_NOMEM;
    }
    net->n_tensors = count;
    for (uint32_t i = 0; i < count; ++i) {
        const uint8_t *r = s.data + TABLE_HEAD + (size_t)i * rec;
        dlproc_net_tensor *t = &net->tensors[i];
        if (copy_name(t->name, r, 48)) {
            dlproc_set_err(err, errlen, "tensor record %u has no valid name", i);
            return DLPROC_NET_E_FORMAT;
        }
        t->role = dlproc_ld32(r + 48);
        for (int k = 0; k < 3; ++k) {
            t->shape[k] = dlproc_ld32(r + 52 + 4 * k);
            t->dram_shape[k] = dlproc_ld32(r + 64 + 4 * k);
        }
        t->zero_point = (int32_t)dlproc_ld32(r + 76);
        uint64_t bits = dlproc_ld64(r + 80);
        memcpy(&t->scale, &bits, sizeof t->scale);
        t->offset = dlproc_ld64(r + 88);
        t->has_transform = dlproc_ld32(r + 96);
        if (t->role != (i == 0 ? 0u : 1u)) {
            dlproc_set_err(err, errlen, "tensor %s has role %u; record 0 must be the input (0), the others outputs (1)",
                           t->name, t->role);
            return DLPROC_NET_E_FORMAT;
        }
        if (!check_dims(t->shape) || !check_dims(t->dram_shape) || t->has_transform > 1 || t->zero_point < -128 ||
            t->zero_point > 127 || !(t->scale > 0) || t->offset >= net->end) {
            dlproc_set_err(err, errlen, "tensor %s has an invalid shape, zero point, scale or offset", t->name);
            return DLPROC_NET_E_FORMAT;
        }
    }
    return DLPROC_NET_OK;
}

static int parse_layr(dlproc_net *net, section s, char *err, size_t errlen) {
    if (s.size < TABLE_HEAD) {
        dlproc_set_err(err, errlen, "the LAYR section is shorter than its header");
        return DLPROC_NET_E_FORMAT;
    }
    uint32_t count = dlproc_ld32(s.data), rec = dlproc_ld32(s.data + 4);
    if (rec < LAYR_REC || count == 0 || (uint64_t)count * rec > s.size - TABLE_HEAD) {
        dlproc_set_err(err, errlen, "the LAYR section's %u records of %u bytes do not fit its %llu bytes", count, rec,
                       (unsigned long long)s.size);
        return DLPROC_NET_E_FORMAT;
    }
    net->layers = calloc(count, sizeof *net->layers);
    if (!net->layers) {
        dlproc_set_err(err, errlen, "out of memory for %u layer records", count);
        return DLPROC_NET_E_NOMEM;
    }
    net->n_layers = count;
    int64_t max_profile = -1;
    for (uint32_t i = 0; i < count; ++i) {
        const uint8_t *r = s.data + TABLE_HEAD + (size_t)i * rec;
        dlproc_net_layer *l = &net->layers[i];
        if (copy_name(l->name, r, 48) || copy_name(l->op, r + 48, 16)) {
            dlproc_set_err(err, errlen, "layer record %u has no valid name or operator", i);
            return DLPROC_NET_E_FORMAT;
        }
        l->hw = dlproc_ld32(r + 64);
        l->insn_first = dlproc_ld32(r + 68);
        l->insn_count = dlproc_ld32(r + 72);
        l->profile_index = (int32_t)dlproc_ld32(r + 76);
        l->macs = dlproc_ld64(r + 80);
        for (int k = 0; k < 3; ++k) l->shape[k] = dlproc_ld32(r + 88 + 4 * k);
        if (l->hw > 1 || !dlproc_in_bounds(l->insn_first, l->insn_count, net->insn_count) || l->profile_index < -1 ||
            l->profile_index >= (int32_t)DLPROC_NET_MAX_PROFILE) {
            dlproc_set_err(err, errlen, "layer %s has an invalid HW flag, instruction range [%u, +%u) (the program has "
                           "%u instructions) or profile index %d", l->name, l->insn_first, l->insn_count,
                           net->insn_count, l->profile_index);
            return DLPROC_NET_E_FORMAT;
        }
        if (l->profile_index > max_profile) max_profile = l->profile_index;
    }
    net->n_profile = (uint32_t)(max_profile + 1);
    return DLPROC_NET_OK;
}

static int check_images(dlproc_net *net, int has_fwgt, char *err, size_t errlen) {
    if (net->insn_bytes == 0 || net->insn_bytes % 32u || net->insn_bytes / 32u > 0xFFFFFFFFull) {
        dlproc_set_err(err, errlen, "the INSN section is %llu bytes, not a positive multiple of the 32-byte instruction",
                       (unsigned long long)net->insn_bytes);
        return DLPROC_NET_E_FORMAT;
    }
    net->insn_count = (uint32_t)(net->insn_bytes / 32u);
    struct { const char *what; uint64_t bytes, size; } img[] = {
        {"INSN", net->insn_bytes, net->insn_size},
        {"CWGT", net->cwgt_bytes, net->cwgt_size},
        {"FWGT", net->fwgt_bytes, net->fwgt_size},
    };
    for (size_t i = 0; i < sizeof img / sizeof img[0]; ++i) {
        if (img[i].bytes > img[i].size) {
            dlproc_set_err(err, errlen, "the %s section (%llu bytes) is larger than its memory region (%llu bytes)",
                           img[i].what, (unsigned long long)img[i].bytes, (unsigned long long)img[i].size);
            return DLPROC_NET_E_FORMAT;
        }
    }
    if (net->fwgt_bytes && !has_fwgt) return DLPROC_NET_E_FORMAT; /* unreachable: bytes come from the section */
    /* Every DRAM address of the program must lie in the network's own memory: the runtime
     * relocates them, and the processor's DMA window is set to exactly that memory. */
    for (uint32_t i = 0; i < net->insn_count; ++i) {
        const uint8_t *insn = net->insn + 32u * (size_t)i;
        unsigned at;
        if (!dlproc_net_insn_dram_field(insn, &at)) continue;
        uint64_t addr = dlproc_net_get_u32_field(insn, at);
        if (addr < net->base || addr - net->base >= net->end) {
            dlproc_set_err(err, errlen, "instruction %u addresses DRAM 0x%08llx, outside the network's memory "
                           "[0x%llx, 0x%llx)", i, (unsigned long long)addr, (unsigned long long)net->base,
                           (unsigned long long)(net->base + net->end));
            return DLPROC_NET_E_FORMAT;
        }
    }
    return DLPROC_NET_OK;
}

int dlproc_net_insn_dram_field(const uint8_t insn[32], unsigned *bit_offset) {
    unsigned op = insn[0] & ((1u << DLPROC_HDR_OPCODE_BITS) - 1u);
    if (op == DLPROC_OP_LOAD) *bit_offset = DLPROC_LOAD_DRAM_ADDR_OFFSET;
    else if (op == DLPROC_OP_STORE) *bit_offset = DLPROC_STORE_DRAM_ADDR_OFFSET;
    else return 0;
    return 1;
}

uint32_t dlproc_net_get_u32_field(const uint8_t insn[32], unsigned bit_offset) {
    uint32_t v = 0;
    for (unsigned i = 0; i < 32 && bit_offset + i < 256; ++i) {
        unsigned b = bit_offset + i;
        v |= (uint32_t)((insn[b >> 3] >> (b & 7u)) & 1u) << i;
    }
    return v;
}

void dlproc_net_set_u32_field(uint8_t insn[32], unsigned bit_offset, uint32_t value) {
    for (unsigned i = 0; i < 32 && bit_offset + i < 256; ++i) {
        unsigned b = bit_offset + i;
        uint8_t mask = (uint8_t)(1u << (b & 7u));
        insn[b >> 3] = (uint8_t)(((value >> i) & 1u) ? (insn[b >> 3] | mask) : (insn[b >> 3] & ~mask));
    }
}

/* META is JSON written by dlproc/netfile.py with one top-level key per line ("\n \"key\": ").
 * The runtime reads only the clock, for reporting times; the scan stays inside the section and a
 * missing or odd value just leaves 0. */
static double meta_clock(section s) {
    static const char key[] = "\n \"clock_mhz\": ";
    size_t klen = sizeof key - 1;
    for (uint64_t i = 0; s.size >= klen + 1 && i <= s.size - klen - 1; ++i) {
        if (memcmp(s.data + i, key, klen)) continue;
        char num[32];
        size_t n = 0;
        for (uint64_t j = i + klen; j < s.size && n < sizeof num - 1; ++j) {
            char ch = (char)s.data[j];
            if (!((ch >= '0' && ch <= '9') || ch == '.')) break;
            num[n++] = ch;
        }
        num[n] = '\0';
        double v = 0;
        if (n && !dlproc_parse_double(num, &v) && v >= 1 && v <= 5000) return v;
        return 0;
    }
    return 0;
}

int dlproc_net_parse(const uint8_t *buf, size_t len, dlproc_net *net, char *err, size_t errlen) {
    memset(net, 0, sizeof *net);
    if (!buf || len < DLPROC_NET_HEADER_SIZE || memcmp(buf, MAGIC, sizeof MAGIC)) {
        dlproc_set_err(err, errlen, "not a dlproc compiled network (.dlnet): the file is %zu bytes and %s", len,
                       len < DLPROC_NET_HEADER_SIZE ? "shorter than the 64-byte header" : "its magic is not DLPRNET");
        return DLPROC_NET_E_FORMAT;
    }
    net->format_version = dlproc_ld32(buf + 8);
    if (net->format_version != DLPROC_NET_FORMAT_VERSION) {
        dlproc_set_err(err, errlen, "compiled-network format version %u; this runtime reads version %u (recompile the "
                       "network or update the firmware)", net->format_version, DLPROC_NET_FORMAT_VERSION);
        return DLPROC_NET_E_VERSION;
    }
    if (dlproc_ld32(buf + 12) != DLPROC_NET_HEADER_SIZE || dlproc_crc32(buf, 60) != dlproc_ld32(buf + 60)) {
        dlproc_set_err(err, errlen, "the header checksum does not match (the file is corrupted)");
        return DLPROC_NET_E_FORMAT;
    }
    net->hash64 = dlproc_ld64(buf + 16);
    memcpy(net->config_sha256, buf + 24, 32);
    section meta = {0}, mmap = {0}, ioq = {0}, layr = {0}, insn = {0}, cwgt = {0}, fwgt = {0};
    int has_fwgt = 0;
    int rc = parse_sections(buf, len, &meta, &mmap, &ioq, &layr, &insn, &cwgt, &fwgt, &has_fwgt, err, errlen);
    if (rc == DLPROC_NET_OK) net->clock_mhz = meta_clock(meta);
    if (rc == DLPROC_NET_OK) rc = parse_mmap(net, mmap, err, errlen);
    if (rc == DLPROC_NET_OK) {
        net->insn = insn.data, net->insn_bytes = insn.size;
        net->cwgt = cwgt.data, net->cwgt_bytes = cwgt.size;
        net->fwgt = has_fwgt ? fwgt.data : NULL, net->fwgt_bytes = has_fwgt ? fwgt.size : 0;
        rc = check_images(net, has_fwgt, err, errlen);
    }
    if (rc == DLPROC_NET_OK) rc = parse_ioq(net, ioq, err, errlen);
    if (rc == DLPROC_NET_OK) rc = parse_layr(net, layr, err, errlen);
    if (rc != DLPROC_NET_OK) dlproc_net_free(net);
    return rc;
}

void dlproc_net_free(dlproc_net *net) {
    if (!net) return;
    free(net->tensors);
    free(net->layers);
    net->tensors = NULL;
    net->layers = NULL;
    net->n_tensors = net->n_layers = 0;
}

uint64_t dlproc_net_tensor_bytes(const uint32_t shape[3], uint32_t c, uint32_t bus_bytes) {
    if (c == 0 || bus_bytes == 0 || !check_dims(shape)) return 0;
    uint64_t blocks = (shape[0] + (uint64_t)c - 1) / c;
    uint64_t pitch = ((c + (uint64_t)bus_bytes - 1) / bus_bytes) * bus_bytes;
    /* blocks, H and W are at most 65535 and pitch at most 2^16, so the product fits 64 bits. */
    return blocks * shape[1] * shape[2] * pitch;
}

int dlproc_net_check_geometry(const dlproc_net *net, uint32_t c, uint32_t bus_bytes, char *err, size_t errlen) {
    if (c == 0 || c > 255 || bus_bytes == 0 || bus_bytes > 255) {
        dlproc_set_err(err, errlen, "invalid processor geometry C=%u, bus %u bytes", c, bus_bytes);
        return DLPROC_NET_E_FORMAT;
    }
    if ((net->base + net->insn_off) % bus_bytes) {
        dlproc_set_err(err, errlen, "the instructions at 0x%llx do not start on a %u-byte bus beat",
                       (unsigned long long)(net->base + net->insn_off), bus_bytes);
        return DLPROC_NET_E_FORMAT;
    }
    for (uint32_t i = 0; i < net->n_tensors; ++i) {
        const dlproc_net_tensor *t = &net->tensors[i];
        uint64_t lo = i == 0 ? net->input_off : net->output_off;
        uint64_t size = i == 0 ? net->input_size : net->output_size;
        uint64_t n = dlproc_net_tensor_bytes(t->dram_shape, c, bus_bytes);
        if (t->offset < lo || !dlproc_in_bounds(t->offset - lo, n, size)) {
            dlproc_set_err(err, errlen, "%s tensor %s (%llu bytes at offset %llu) is not inside the %s region [%llu, +%llu)",
                           i == 0 ? "input" : "output", t->name, (unsigned long long)n, (unsigned long long)t->offset,
                           i == 0 ? "InputDataOffset" : "OutputResultOffset", (unsigned long long)lo,
                           (unsigned long long)size);
            return DLPROC_NET_E_FORMAT;
        }
    }
    return DLPROC_NET_OK;
}

const dlproc_net_layer *dlproc_net_layer_of_insn(const dlproc_net *net, uint32_t insn) {
    for (uint32_t i = 0; i < net->n_layers; ++i) {
        const dlproc_net_layer *l = &net->layers[i];
        if (l->insn_count && insn >= l->insn_first && insn - l->insn_first < l->insn_count) return l;
    }
    return NULL;
}
