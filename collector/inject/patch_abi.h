/*
 * patch_abi.h - memory layout shared by the device patches (gpuprof_patch.cu)
 * and the host side of the Sanitizer pass (sanitizer_pass.cpp).
 *
 * One trace buffer per in-flight instrumented launch:
 *   - gp_ctl lives in device memory (sanitizerAlloc). Its address is the
 *     userdata pointer of the launch (sanitizerSetLaunchCallbackData). The
 *     reservation counters are device-memory atomics.
 *   - the mailbox and the record array live in pinned, device-mapped host
 *     memory (sanitizerAllocHost): warps write their records straight into
 *     host memory, and the full/drain handshake is a flag the host polls
 *     without any CUDA call.
 *   - the record array has two halves that the device fills in turn: when
 *     one is full the device hands it to the host and goes on in the other,
 *     and waits only when the other is still being drained.
 *   - records are variable-length and already in the wire's compact
 *     encodings (affine addresses, uniform values; docs/wire.md), padded to
 *     8 bytes so that every field is aligned for the device's stores: a
 *     4-byte access of a full warp takes 168 or 48 bytes of host memory and
 *     of PCIe traffic instead of a 416-byte slot.
 * Plain C with fixed-size fields, so nvcc and g++ agree on the layout.
 */
#ifndef GPUPROF_PATCH_ABI_H
#define GPUPROF_PATCH_ABI_H

#include <stdint.h>

#define GP_WARP 32
#define GP_REC_MAX 808u /* longest device record: 24 + 32 x 8 + 32 x 16 + 16 */

/* Device record (little-endian host and device):
 *   bytes 0-23  the wire's ACCESS record header (pc u64, block u32, warp
 *               u16, space u8, flags u8, active u32, size u8, enc u8),
 *               except bytes 22-23: the device record's length in bytes
 *               (a multiple of 8; the wire has 0 there)
 *   then, for size > 0:
 *     enc & AFFINE:   base u64, stride u64
 *     !(enc & AFFINE): n addresses (u64, lanes in order)
 *     enc & UNIFORM:  one value of size bytes
 *     !(enc & UNIFORM): n values of size bytes (lanes in order)
 *   then padding to 8 bytes. n = popcount(active).
 * The wire's body is the same except that plain records (neither encoding)
 * interleave each lane's address and value: gp_dev_to_wire converts. */
#define GP_ENC_AFFINE 0x1u
#define GP_ENC_UNIFORM 0x2u

typedef struct gp_half {
    volatile uint32_t full;    /* device sets 1 when the half is full; host clears */
    volatile uint32_t bytes;   /* bytes of records valid when full is set */
    volatile uint32_t records; /* records in them */
    volatile uint32_t fill;    /* the fill's number (host drains in this order) */
} gp_half;

typedef struct gp_mailbox {
    gp_half half[2];
    volatile uint32_t fills; /* number of full events (device increments) */
    uint32_t pad[7];
} gp_mailbox;

typedef struct gp_ctl {
    unsigned long long tail; /* fill number << 32 | bytes reserved in it (device atomics) */
    unsigned long long done; /* records << 32 | bytes completely written in the current fill */
    uint32_t capacity;       /* bytes per half */
    uint32_t period;         /* P of block sampling; 0 = launch not traced */
    uint32_t offset;         /* r of block sampling */
    uint32_t spaces;         /* bit 0 global, 1 shared, 2 local, 3 block enter/exit */
    uint64_t dropped;        /* records lost on the device (host never drained) */
    uint64_t timeout_ns;     /* how long a full buffer waits for the host before dropping */
    gp_mailbox *mbox;        /* pinned host memory */
    uint8_t *records;        /* pinned host memory, 2 x capacity bytes */
    uint64_t waited_ns;      /* time warps stood at full halves (handovers, device clock) */
    uint32_t encode;         /* 1: compact encodings; 0: plain (GPUPROF_COMPACT=0) */
    uint32_t pad;
    uint64_t block_magic;    /* 2^64 / period rounded up (0 for period 1): the sampling test */
} gp_ctl;

#define GP_SPACE_GLOBAL_BIT 0x1u
#define GP_SPACE_SHARED_BIT 0x2u
#define GP_SPACE_LOCAL_BIT 0x4u
#define GP_SPACE_BLOCK_BIT 0x8u

#if !defined(__CUDACC__)
#include <string.h>

/* gp_dev_len returns the length of the device record at r, or 0 when its
 * header is not one the device writes (sizes and length disagree): the
 * caller stops at such a record. avail is the bytes left from r. */
static inline uint32_t gp_dev_len(const uint8_t *r, uint32_t avail) {
    uint32_t len, size, n, enc, need;
    if (avail < 24) return 0;
    len = (uint32_t)r[22] | (uint32_t)r[23] << 8;
    size = r[20];
    enc = r[21];
    n = (uint32_t)__builtin_popcount((uint32_t)r[16] | (uint32_t)r[17] << 8 | (uint32_t)r[18] << 16 |
                                     (uint32_t)r[19] << 24);
    if (len < 24 || (len & 7) || len > avail || len > GP_REC_MAX || n == 0 || (enc & ~3u)) return 0;
    if (size != 0 && size != 1 && size != 2 && size != 4 && size != 8 && size != 16) return 0;
    need = 24;
    if (size) {
        need += (enc & GP_ENC_AFFINE) ? 16 : 8 * n;
        need += (enc & GP_ENC_UNIFORM) ? size : n * size;
    }
    need = (need + 7) & ~7u;
    return need == len ? len : 0;
}

/* gp_dev_to_wire writes the wire form of the device record r (len bytes,
 * checked by gp_dev_len) at p and returns its length: at most len. */
static inline uint32_t gp_dev_to_wire(uint8_t *p, const uint8_t *r, uint32_t len) {
    const uint32_t size = r[20], enc = r[21];
    uint32_t n, i, body;
    memcpy(p, r, 24);
    p[22] = p[23] = 0;
    if (size == 0) return 24;
    n = (uint32_t)__builtin_popcount((uint32_t)r[16] | (uint32_t)r[17] << 8 | (uint32_t)r[18] << 16 |
                                     (uint32_t)r[19] << 24);
    if (enc) { /* the wire's body as the device wrote it */
        body = ((enc & GP_ENC_AFFINE) ? 16 : 8 * n) + ((enc & GP_ENC_UNIFORM) ? size : n * size);
        memcpy(p + 24, r + 24, body);
        return 24 + body;
    }
    /* plain: interleave each lane's address and value */
    {
        const uint8_t *a = r + 24, *v = r + 24 + 8 * n;
        uint8_t *q = p + 24;
        for (i = 0; i < n; i++) {
            memcpy(q, a + 8 * i, 8);
            memcpy(q + 8, v + size * i, size);
            q += 8 + size;
        }
        (void)len;
        return 24 + n * (8 + size);
    }
}
#endif

#endif
