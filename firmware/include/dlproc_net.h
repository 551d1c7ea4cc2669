/* Parser and validator of the compiled-network file (.dlnet, format version 1).
 *
 * The layout is defined by dlproc/netfile.py (docs/netfile.md): a 64-byte header, a table of
 * 64-byte section entries and 64-byte aligned sections, each with a CRC-32 and a SHA-256.  The
 * file is treated as hostile: every count, offset and size is checked against the bytes actually
 * present before it is used, with arithmetic that cannot overflow, and every checksum is verified
 * before a section is interpreted.  The parser allocates only arrays whose length is bounded by
 * the file size, and never reads outside [buf, buf + len).
 */
#ifndef DLPROC_NET_H
#define DLPROC_NET_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DLPROC_NET_FORMAT_VERSION 1u
#define DLPROC_NET_HEADER_SIZE 64u
#define DLPROC_NET_SECTION_SIZE 64u
#define DLPROC_NET_MAX_SECTIONS 64u
#define DLPROC_NET_MAX_REGIONS 64u
#define DLPROC_NET_MAX_PROFILE 65536u

/* Parser results (also used as dlproc_status codes by the runtime, see dlproc_rt.h). */
#define DLPROC_NET_OK 0
#define DLPROC_NET_E_NOMEM 2
#define DLPROC_NET_E_FORMAT 3
#define DLPROC_NET_E_VERSION 4

typedef struct {
    char name[33];
    uint64_t offset, size; /* bytes from the network's base address */
} dlproc_net_region;

typedef struct {
    char name[49];
    uint32_t role;                      /* 0 input, 1 output */
    uint32_t shape[3], dram_shape[3];   /* (C, H, W) */
    int32_t zero_point;
    double scale;
    uint64_t offset;                    /* bytes from the base address */
    uint32_t has_transform;
} dlproc_net_tensor;

typedef struct {
    char name[49];
    char op[17];
    uint32_t hw, insn_first, insn_count;
    int32_t profile_index;              /* -1: no profile entry */
    uint64_t macs;
    uint32_t shape[3];
} dlproc_net_layer;

typedef struct {
    uint32_t format_version;
    uint64_t hash64;                    /* CONFIG_HASH_HI:LO the network was compiled for */
    uint8_t config_sha256[32];
    uint64_t base;                      /* absolute DRAM address of offset 0 (where it runs) */
    uint64_t compiled_base;             /* the base the file was compiled for (MMAP) */
    uint64_t end;                       /* EndOffset: the network uses [base, base + end) */
    uint32_t n_regions;
    dlproc_net_region regions[DLPROC_NET_MAX_REGIONS];
    /* Offsets/sizes of the regions the runtime uses (FC: size 0 when absent). */
    uint64_t input_off, input_size, output_off, output_size, insn_off, insn_size;
    uint64_t cwgt_off, cwgt_size, fwgt_off, fwgt_size;
    /* Section bodies: pointers into the parsed buffer, valid only while it lives. */
    const uint8_t *insn, *cwgt, *fwgt;
    uint64_t insn_bytes, cwgt_bytes, fwgt_bytes;
    uint32_t insn_count;
    uint32_t n_tensors;
    dlproc_net_tensor *tensors;         /* [0] is the input */
    uint32_t n_layers;
    dlproc_net_layer *layers;
    uint32_t n_profile;                 /* 1 + the largest profile_index */
    double clock_mhz;                   /* META's clock_mhz, 0 when absent */
} dlproc_net;

/* Parses and validates buf; on success *net owns allocations freed by dlproc_net_free.  On
 * failure returns a DLPROC_NET_E_* code with a message in err and *net holds nothing to free. */
int dlproc_net_parse(const uint8_t *buf, size_t len, dlproc_net *net, char *err, size_t errlen);
void dlproc_net_free(dlproc_net *net);

/* Checks what needs the processor's geometry: every IOQ tensor (C lanes of int8 per element,
 * elements padded to the bus width) lies inside its region, and the instruction region starts
 * on a bus beat.  Returns DLPROC_NET_OK or DLPROC_NET_E_FORMAT. */
int dlproc_net_check_geometry(const dlproc_net *net, uint32_t c, uint32_t bus_bytes, char *err, size_t errlen);

/* Byte size of a (C, H, W) tensor in the channel-block DRAM layout, 0 when it overflows. */
uint64_t dlproc_net_tensor_bytes(const uint32_t shape[3], uint32_t c, uint32_t bus_bytes);

/* If the 32-byte instruction is a LOAD or STORE, stores the bit offset of its 32-bit dram_addr
 * field and returns 1; otherwise returns 0. */
int dlproc_net_insn_dram_field(const uint8_t insn[32], unsigned *bit_offset);
uint32_t dlproc_net_get_u32_field(const uint8_t insn[32], unsigned bit_offset);
void dlproc_net_set_u32_field(uint8_t insn[32], unsigned bit_offset, uint32_t value);

/* The layer whose instruction range holds instruction index insn, or NULL. */
const dlproc_net_layer *dlproc_net_layer_of_insn(const dlproc_net *net, uint32_t insn);

#ifdef __cplusplus
}
#endif

#endif /* DLPROC_NET_H */
