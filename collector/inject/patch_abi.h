/*
 * patch_abi.h - memory layout shared by the device patches (gpuprof_patch.cu)
 * and the host side of the Sanitizer pass (sanitizer_pass.cpp).
 *
 * One trace buffer per in-flight instrumented launch:
 *   - gp_ctl lives in device memory (sanitizerAlloc). Its address is the
 *     userdata pointer of the launch (sanitizerSetLaunchCallbackData). The
 *     reservation counters are device-memory atomics.
 *   - gp_mailbox and the record array live in pinned, device-mapped host memory
 *     (sanitizerAllocHost): warps write their records straight into host
 *     memory, and the full/drain handshake is a flag the host polls without any
 *     CUDA call.
 * Plain C with fixed-size fields, so nvcc and g++ agree on the layout.
 */
#ifndef GPUPROF_PATCH_ABI_H
#define GPUPROF_PATCH_ABI_H

#include <stdint.h>

#define GP_WARP 32
#define GP_REC_STRIDE 800u   /* bytes per record slot */
#define GP_REC_ADDR_OFF 32u  /* u64 addr[32] */
#define GP_REC_VAL_OFF 288u  /* lane * size bytes of values, up to 32 x 16 */

/* Record header; the first 24 bytes are byte-for-byte the wire's ACCESS record
 * header (little-endian host and device). */
typedef struct gp_rec_hdr {
    uint64_t pc;     /* absolute device PC */
    uint32_t block;  /* flat block id */
    uint16_t warp;   /* warp index within the block */
    uint8_t space;   /* GPW_SPACE_* */
    uint8_t flags;   /* GPW_ACC_* */
    uint32_t active; /* active lane mask */
    uint8_t size;    /* bytes per lane, 0 for block events */
    uint8_t reserved[3];
    uint64_t pad;
} gp_rec_hdr;

typedef struct gp_mailbox {
    volatile uint32_t full;  /* device sets 1 when the record array is full; host clears */
    volatile uint32_t count; /* records valid when full is set */
    volatile uint32_t fills; /* number of full events (device increments) */
    uint32_t pad;
} gp_mailbox;

typedef struct gp_ctl {
    uint32_t tail;      /* next slot to reserve (device atomics) */
    uint32_t done;      /* records completely written in the current fill */
    uint32_t capacity;  /* record slots */
    uint32_t period;    /* P of block sampling; 0 = launch not traced */
    uint32_t offset;    /* r of block sampling */
    uint32_t spaces;    /* bit 0 global, 1 shared, 2 local, 3 block enter/exit */
    uint64_t dropped;   /* records lost on the device (host never drained) */
    uint64_t timeout_ns; /* how long a full buffer waits for the host before dropping */
    gp_mailbox *mbox;   /* pinned host memory */
    uint8_t *records;   /* pinned host memory, capacity x GP_REC_STRIDE */
} gp_ctl;

#define GP_SPACE_GLOBAL_BIT 0x1u
#define GP_SPACE_SHARED_BIT 0x2u
#define GP_SPACE_LOCAL_BIT 0x4u
#define GP_SPACE_BLOCK_BIT 0x8u

#if !defined(__CUDACC__)
#include <string.h>
/* gp_copy_slots copies n record slots from src (the pinned array the device
 * wrote) to dst, each only as far as its record reaches: the header and the
 * 32 addresses, then 32 values of the record's size (a block event: the
 * header). A slot has room for 16-byte values; a 4-byte access uses about
 * half of it, and the device waits while the host copies. Host only. */
static inline void gp_copy_slots(uint8_t *dst, const uint8_t *src, uint32_t n) {
    uint32_t i;
    for (i = 0; i < n; i++) {
        const uint8_t *s = src + (size_t)i * GP_REC_STRIDE;
        uint32_t size = s[20]; /* gp_rec_hdr.size */
        size_t used = sizeof(gp_rec_hdr);
        if (size > 0 && size <= 16) used = GP_REC_VAL_OFF + (size_t)GP_WARP * size;
        memcpy(dst + (size_t)i * GP_REC_STRIDE, s, used);
    }
}
#endif

#endif
