/*
 * gpuprof_wire.h - writer for the gpuprof raw record stream, version 1.
 *
 * The format is specified in docs/wire.md. This header is pure C99 with no
 * CUDA includes, so any host C/C++ compiler can use it: the injection library
 * writes the stream with it, and the Go side's test compiles it with gcc,
 * writes every frame kind and decodes the result.
 *
 * Everything is little-endian and unaligned; values are written byte by byte,
 * so the output does not depend on the host's byte order.
 *
 * Usage:
 *   gpw_buf b; gpw_buf_init(&b);
 *   gpw_hello(&b, &hello);                 // appends one whole frame
 *   ...
 *   fwrite(b.data, 1, b.len, f);           // or send() on a socket
 *   gpw_buf_free(&b);
 * Frames whose record count is only known at the end (ACCESS, PC_SAMPLES,
 * INSTR_COUNTS, STALL_REASONS) use a begin / add / finish triple.
 * On allocation failure b.oom is set and later writes are ignored; check it
 * before using the bytes.
 */
#ifndef GPUPROF_WIRE_H
#define GPUPROF_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GPW_MAGIC 0x57525047u /* "GPRW" read as a little-endian u32 */
#define GPW_VERSION 3u /* 2: record encodings (byte 21); 3: MODULE_DATA chunks, LAUNCH flags; readers take 1 to 3 */
#define GPW_MIN_VERSION 1u
#define GPW_MAX_PAYLOAD (64u * 1024u * 1024u)
#define GPW_FRAME_HEADER_SIZE 8u
#define GPW_ACCESS_RECORD_HEADER_SIZE 24u
#define GPW_MAX_STR 65535u
#define GPW_MAX_FRAMES 65535u

/* Frame kinds. Kinds >= 1024 are extensions and are skipped by decoders. */
enum {
    GPW_HELLO = 1,
    GPW_MODULE = 2,
    GPW_FUNCTION = 3,
    GPW_LAUNCH = 4,
    GPW_ACCESS = 5,
    GPW_KERNEL_END = 6,
    GPW_ALLOC = 7,
    GPW_FREE = 8,
    GPW_STALL_REASONS = 9,
    GPW_PC_SAMPLES = 10,
    GPW_INSTR_COUNTS = 11,
    GPW_HOST_MODULE = 12,
    GPW_DROPPED = 13,
    GPW_END = 14,
    GPW_MODULE_DATA = 15, /* version 3: a chunk of a module too large for one frame */
    GPW_FIRST_EXTENSION = 1024
};

/* MODULE_DATA payload size of the chunks gpw_module writes */
#define GPW_MODULE_CHUNK (16u * 1024u * 1024u)

/* LAUNCH.flags */
#define GPW_LAUNCH_TRACED 0x1u /* kernel sampling chose this launch */
#define GPW_LAUNCH_GRAPH 0x2u  /* ran as a kernel node of a CUDA graph launch */

/* HELLO.flags */
#define GPW_HELLO_SYNTHETIC 0x1u
#define GPW_HELLO_PCS_ELSEWHERE 0x2u /* version 3: another process PC-samples this GPU; this one gives kernel times */
#define GPW_HELLO_PCS_CONTINUOUS 0x4u /* version 3: continuous PC sampling: samples carry no launch (launch id 0) */

/* HELLO.mode */
enum { GPW_MODE_REDUNDANCY = 1, GPW_MODE_PCSAMPLING = 2, GPW_MODE_HYBRID = 3 };

/* ACCESS record: space */
enum { GPW_SPACE_NONE = 0, GPW_SPACE_GLOBAL = 1, GPW_SPACE_SHARED = 2, GPW_SPACE_LOCAL = 3 };

/* ACCESS record: flags */
#define GPW_ACC_READ 0x01u
#define GPW_ACC_WRITE 0x02u
#define GPW_ACC_ATOMIC 0x04u
#define GPW_ACC_PREFETCH 0x08u
#define GPW_ACC_BLOCK_ENTER 0x10u
#define GPW_ACC_BLOCK_EXIT 0x20u

/* ALLOC.kind */
enum { GPW_ALLOC_DEVICE = 1, GPW_ALLOC_MANAGED = 2, GPW_ALLOC_HOST_PINNED = 3, GPW_ALLOC_ASYNC = 4 };

/* ------------------------------------------------------------------ */
/* Growable byte buffer                                               */
/* ------------------------------------------------------------------ */

typedef struct gpw_buf {
    uint8_t *data;
    size_t len;
    size_t cap;
    int oom; /* set once an allocation failed; the buffer is then unusable */
} gpw_buf;

static inline void gpw_buf_init(gpw_buf *b) {
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->oom = 0;
}

static inline void gpw_buf_free(gpw_buf *b) {
    free(b->data);
    gpw_buf_init(b);
}

static inline void gpw_buf_reset(gpw_buf *b) {
    b->len = 0;
    b->oom = 0;
}

/* Ensure room for n more bytes; returns 0 on failure (and sets oom). */
static inline int gpw_reserve(gpw_buf *b, size_t n) {
    size_t need, ncap;
    uint8_t *p;
    if (b->oom) return 0;
    need = b->len + n;
    if (need <= b->cap) return 1;
    ncap = b->cap ? b->cap : 256;
    while (ncap < need) ncap *= 2;
    p = (uint8_t *)realloc(b->data, ncap);
    if (!p) {
        b->oom = 1;
        return 0;
    }
    b->data = p;
    b->cap = ncap;
    return 1;
}

static inline void gpw_put_u8(gpw_buf *b, uint8_t v) {
    if (!gpw_reserve(b, 1)) return;
    b->data[b->len++] = v;
}

static inline void gpw_store_u16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static inline void gpw_store_u32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static inline void gpw_store_u64(uint8_t *p, uint64_t v) {
    gpw_store_u32(p, (uint32_t)v);
    gpw_store_u32(p + 4, (uint32_t)(v >> 32));
}

static inline uint16_t gpw_load_u16(const uint8_t *p) {
    return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t gpw_load_u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline uint64_t gpw_load_u64(const uint8_t *p) {
    return (uint64_t)gpw_load_u32(p) | ((uint64_t)gpw_load_u32(p + 4) << 32);
}

static inline void gpw_put_u16(gpw_buf *b, uint16_t v) {
    if (!gpw_reserve(b, 2)) return;
    gpw_store_u16(b->data + b->len, v);
    b->len += 2;
}

static inline void gpw_put_u32(gpw_buf *b, uint32_t v) {
    if (!gpw_reserve(b, 4)) return;
    gpw_store_u32(b->data + b->len, v);
    b->len += 4;
}

static inline void gpw_put_i32(gpw_buf *b, int32_t v) { gpw_put_u32(b, (uint32_t)v); }

static inline void gpw_put_u64(gpw_buf *b, uint64_t v) {
    if (!gpw_reserve(b, 8)) return;
    gpw_store_u64(b->data + b->len, v);
    b->len += 8;
}

static inline void gpw_put_bytes(gpw_buf *b, const void *p, size_t n) {
    if (n == 0 || !gpw_reserve(b, n)) return;
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

/* str: u16 length + UTF-8 bytes; longer strings are truncated to 65535 bytes. */
static inline void gpw_put_strn(gpw_buf *b, const char *s, size_t n) {
    if (!s) n = 0;
    if (n > GPW_MAX_STR) n = GPW_MAX_STR;
    gpw_put_u16(b, (uint16_t)n);
    gpw_put_bytes(b, s, n);
}

static inline void gpw_put_str(gpw_buf *b, const char *s) { gpw_put_strn(b, s, s ? strlen(s) : 0); }

/* frames: u16 n + n x u64, innermost first; more than 65535 are cut. */
static inline void gpw_put_frames(gpw_buf *b, const uint64_t *pcs, size_t n) {
    size_t i;
    if (!pcs) n = 0;
    if (n > GPW_MAX_FRAMES) n = GPW_MAX_FRAMES;
    gpw_put_u16(b, (uint16_t)n);
    for (i = 0; i < n; i++) gpw_put_u64(b, pcs[i]);
}

/* Start a frame: writes kind and a placeholder length; returns the offset of
 * the frame start, to be passed to gpw_frame_finish. */
static inline size_t gpw_frame_begin(gpw_buf *b, uint32_t kind) {
    size_t off = b->len;
    gpw_put_u32(b, kind);
    gpw_put_u32(b, 0);
    return off;
}

/* Patch the length of the frame that starts at off. Returns 0 if the payload
 * is over the 64 MiB limit (the caller must not send it) or the buffer is oom. */
static inline int gpw_frame_finish(gpw_buf *b, size_t off) {
    size_t payload;
    if (b->oom) return 0;
    payload = b->len - off - GPW_FRAME_HEADER_SIZE;
    if (payload > GPW_MAX_PAYLOAD) return 0;
    gpw_store_u32(b->data + off + 4, (uint32_t)payload);
    return 1;
}

/* Payload bytes written so far in the frame that starts at off. */
static inline size_t gpw_frame_payload(const gpw_buf *b, size_t off) {
    return b->len - off - GPW_FRAME_HEADER_SIZE;
}

/* ------------------------------------------------------------------ */
/* Frames                                                             */
/* ------------------------------------------------------------------ */

typedef struct gpw_hello_t {
    uint16_t flags;
    int32_t rank;
    uint32_t pid;
    uint8_t mode;
    uint32_t block_sampling;
    uint32_t kernel_sampling;
    uint64_t start_ns;
    const char *host;
    const char *gpu;
    const char *gpu_uuid;
    const char *driver;
    const char *cuda;
    uint16_t sm;
    int32_t device; /* version 3: CUDA device ordinal of the process's first context, -1 if unknown */
    /* version 3: the device's properties, read from it (0 if unknown) */
    uint32_t sm_count, clock_khz, mem_clock_khz, mem_bus_bits, l2_bytes, regs_per_sm, smem_per_sm, threads_per_sm;
    uint64_t mem_bytes;
} gpw_hello_t;

static inline int gpw_hello(gpw_buf *b, const gpw_hello_t *h) {
    size_t off = gpw_frame_begin(b, GPW_HELLO);
    gpw_put_u32(b, GPW_MAGIC);
    gpw_put_u16(b, (uint16_t)GPW_VERSION);
    gpw_put_u16(b, h->flags);
    gpw_put_i32(b, h->rank);
    gpw_put_u32(b, h->pid);
    gpw_put_u8(b, h->mode);
    gpw_put_u32(b, h->block_sampling);
    gpw_put_u32(b, h->kernel_sampling);
    gpw_put_u64(b, h->start_ns);
    gpw_put_str(b, h->host);
    gpw_put_str(b, h->gpu);
    gpw_put_str(b, h->gpu_uuid);
    gpw_put_str(b, h->driver);
    gpw_put_str(b, h->cuda);
    gpw_put_u16(b, h->sm);
    gpw_put_i32(b, h->device);
    gpw_put_u32(b, h->sm_count);
    gpw_put_u32(b, h->clock_khz);
    gpw_put_u32(b, h->mem_clock_khz);
    gpw_put_u32(b, h->mem_bus_bits);
    gpw_put_u32(b, h->l2_bytes);
    gpw_put_u32(b, h->regs_per_sm);
    gpw_put_u32(b, h->smem_per_sm);
    gpw_put_u32(b, h->threads_per_sm);
    gpw_put_u64(b, h->mem_bytes);
    return gpw_frame_finish(b, off);
}

/* MODULE: bytes may be NULL when has_bytes is 0. */
/* MODULE, with the cubin's bytes when has_bytes. Bytes that do not fit in
 * one frame follow in MODULE_DATA frames of GPW_MODULE_CHUNK bytes (the
 * MODULE frame then says has_bytes = 2). Returns the number of frames
 * written (0 on failure). */
static inline int gpw_module(gpw_buf *b, uint64_t module_id, uint64_t content_key, uint32_t size,
                             int has_bytes, const void *bytes) {
    size_t off = gpw_frame_begin(b, GPW_MODULE);
    int chunked = has_bytes && (uint64_t)size + 21u > GPW_MAX_PAYLOAD;
    uint32_t done;
    int n = 1;
    gpw_put_u64(b, module_id);
    gpw_put_u64(b, content_key);
    gpw_put_u32(b, size);
    gpw_put_u8(b, chunked ? 2 : (has_bytes ? 1 : 0));
    if (has_bytes && !chunked) gpw_put_bytes(b, bytes, size);
    if (!gpw_frame_finish(b, off)) return 0;
    if (!chunked) return 1;
    for (done = 0; done < size; done += GPW_MODULE_CHUNK) {
        uint32_t len = size - done < GPW_MODULE_CHUNK ? size - done : GPW_MODULE_CHUNK;
        off = gpw_frame_begin(b, GPW_MODULE_DATA);
        gpw_put_u64(b, module_id);
        gpw_put_u64(b, done);
        gpw_put_bytes(b, (const uint8_t *)bytes + done, len);
        if (!gpw_frame_finish(b, off)) return 0;
        n++;
    }
    return n;
}

static inline int gpw_function(gpw_buf *b, uint32_t function_id, uint64_t module_id, uint64_t pc,
                               uint32_t size, const char *name) {
    size_t off = gpw_frame_begin(b, GPW_FUNCTION);
    gpw_put_u32(b, function_id);
    gpw_put_u64(b, module_id);
    gpw_put_u64(b, pc);
    gpw_put_u32(b, size);
    gpw_put_str(b, name);
    return gpw_frame_finish(b, off);
}

typedef struct gpw_launch_t {
    uint64_t launch_id;
    uint32_t function_id;
    uint32_t grid[3];
    uint32_t block[3];
    uint32_t shared_bytes;
    uint64_t stream;
    uint8_t flags; /* GPW_LAUNCH_TRACED, GPW_LAUNCH_GRAPH */
    uint32_t block_offset;
} gpw_launch_t;

static inline int gpw_launch(gpw_buf *b, const gpw_launch_t *l, const uint64_t *frames, size_t nframes) {
    size_t off = gpw_frame_begin(b, GPW_LAUNCH);
    int i;
    gpw_put_u64(b, l->launch_id);
    gpw_put_u32(b, l->function_id);
    for (i = 0; i < 3; i++) gpw_put_u32(b, l->grid[i]);
    for (i = 0; i < 3; i++) gpw_put_u32(b, l->block[i]);
    gpw_put_u32(b, l->shared_bytes);
    gpw_put_u64(b, l->stream);
    gpw_put_u8(b, l->flags);
    gpw_put_u32(b, l->block_offset);
    gpw_put_frames(b, frames, nframes);
    return gpw_frame_finish(b, off);
}

/* ACCESS: gpw_access_begin, then gpw_access_record for each record, then
 * gpw_access_finish with the number of records. */
static inline size_t gpw_access_begin(gpw_buf *b, uint64_t launch_id) {
    size_t off = gpw_frame_begin(b, GPW_ACCESS);
    gpw_put_u64(b, launch_id);
    gpw_put_u32(b, 0); /* count, patched by gpw_access_finish */
    return off;
}

/* One warp-level record. addrs[lane] and values + lane*size are read for each
 * set bit of active (lanes 0..31), only when size > 0. values holds 32 slots
 * of size bytes each (little-endian as in memory). */
static inline void gpw_access_record(gpw_buf *b, uint64_t pc, uint32_t block, uint16_t warp, uint8_t space,
                                     uint8_t flags, uint32_t active, uint8_t size, const uint64_t *addrs,
                                     const uint8_t *values) {
    uint32_t lane;
    gpw_put_u64(b, pc);
    gpw_put_u32(b, block);
    gpw_put_u16(b, warp);
    gpw_put_u8(b, space);
    gpw_put_u8(b, flags);
    gpw_put_u32(b, active);
    gpw_put_u8(b, size);
    gpw_put_u8(b, 0);
    gpw_put_u8(b, 0);
    gpw_put_u8(b, 0);
    if (size == 0) return;
    for (lane = 0; lane < 32; lane++) {
        if (!(active & (1u << lane))) continue;
        gpw_put_u64(b, addrs[lane]);
        gpw_put_bytes(b, values + (size_t)lane * size, size);
    }
}

/* Record encodings (header byte 21; 0 = plain lane entries). A coalesced
 * warp access has addresses base + stride x lane, and many accesses carry
 * one value in every lane: stored once, they cut a 4-byte access of a full
 * warp from 408 bytes to 168 (affine) or 44 (both). docs/wire.md. */
#define GPW_ENC_AFFINE 0x1u  /* u64 base, u64 stride replace the addresses */
#define GPW_ENC_UNIFORM 0x2u /* one value, carried by every active lane */

/* gpw_value_eq compares two lane values of size bytes (without a memcmp
 * call for the common sizes: this runs for every lane the GPU traces). */
static inline int gpw_value_eq(const uint8_t *a, const uint8_t *b, uint32_t size) {
    switch (size) {
    case 4: return gpw_load_u32(a) == gpw_load_u32(b);
    case 8: return gpw_load_u64(a) == gpw_load_u64(b);
    case 1: return a[0] == b[0];
    case 2: return gpw_load_u16(a) == gpw_load_u16(b);
    default: return memcmp(a, b, size) == 0;
    }
}

/* gpw_lanes_compact writes the lane entries of a record (active != 0,
 * size > 0; addrs[lane], values + lane*size as in gpw_access_record) at p
 * in the most compact encoding that holds them exactly, and returns the
 * bytes written (at most popcount(active) * (8 + size)); *enc receives the
 * encoding. */
static inline size_t gpw_lanes_compact(uint8_t *p, uint32_t active, uint32_t size, const uint64_t *addrs,
                                       const uint8_t *values, uint8_t *enc) {
    uint8_t *start = p;
    uint32_t l0 = (uint32_t)__builtin_ctz(active), rest = active & (active - 1), m;
    uint64_t step = 0, base;
    const uint8_t *v0 = values + (size_t)l0 * size;
    int affine = 1, uniform = 1;
    if (rest) {
        int64_t dl = (int64_t)__builtin_ctz(rest) - (int64_t)l0;
        int64_t d = (int64_t)(addrs[__builtin_ctz(rest)] - addrs[l0]);
        affine = d % dl == 0;
        step = (uint64_t)(d / dl);
    }
    base = addrs[l0] - step * (uint64_t)l0;
    for (m = active; m; m &= m - 1) {
        uint32_t lane = (uint32_t)__builtin_ctz(m);
        if (affine && addrs[lane] != base + step * (uint64_t)lane) affine = 0;
        if (uniform && !gpw_value_eq(values + (size_t)lane * size, v0, size)) uniform = 0;
    }
    *enc = (uint8_t)((affine ? GPW_ENC_AFFINE : 0u) | (uniform ? GPW_ENC_UNIFORM : 0u));
    if (affine) {
        gpw_store_u64(p, base);
        gpw_store_u64(p + 8, step);
        p += 16;
    }
    if (!affine || !uniform) {
        for (m = active; m; m &= m - 1) {
            uint32_t lane = (uint32_t)__builtin_ctz(m);
            if (!affine) {
                gpw_store_u64(p, addrs[lane]);
                p += 8;
            }
            if (!uniform) {
                memcpy(p, values + (size_t)lane * size, size);
                p += size;
            }
        }
    }
    if (uniform) {
        memcpy(p, v0, size);
        p += size;
    }
    return (size_t)(p - start);
}

/* gpw_access_record_compact is gpw_access_record with the lanes in the
 * most compact encoding. */
static inline void gpw_access_record_compact(gpw_buf *b, uint64_t pc, uint32_t block, uint16_t warp, uint8_t space,
                                             uint8_t flags, uint32_t active, uint8_t size, const uint64_t *addrs,
                                             const uint8_t *values) {
    uint8_t enc = 0;
    size_t at;
    if (size == 0 || active == 0) {
        gpw_access_record(b, pc, block, warp, space, flags, active, size, addrs, values);
        return;
    }
    gpw_access_record(b, pc, block, warp, space, flags, active, 0, addrs, values);
    if (b->oom) return;
    at = b->len - GPW_ACCESS_RECORD_HEADER_SIZE;
    if (!gpw_reserve(b, (size_t)__builtin_popcount(active) * (8u + size))) return;
    b->data[at + 20] = size;
    b->len += gpw_lanes_compact(b->data + b->len, active, size, addrs, values, &enc);
    b->data[at + 21] = enc;
}

static inline int gpw_access_finish(gpw_buf *b, size_t off, uint32_t count) {
    if (!b->oom) gpw_store_u32(b->data + off + GPW_FRAME_HEADER_SIZE + 8, count);
    return gpw_frame_finish(b, off);
}

static inline int gpw_kernel_end(gpw_buf *b, uint64_t launch_id, uint64_t start_ns, uint64_t end_ns,
                                 uint32_t blocks_total, uint32_t blocks_sampled, uint64_t records,
                                 uint64_t dropped) {
    size_t off = gpw_frame_begin(b, GPW_KERNEL_END);
    gpw_put_u64(b, launch_id);
    gpw_put_u64(b, start_ns);
    gpw_put_u64(b, end_ns);
    gpw_put_u32(b, blocks_total);
    gpw_put_u32(b, blocks_sampled);
    gpw_put_u64(b, records);
    gpw_put_u64(b, dropped);
    return gpw_frame_finish(b, off);
}

static inline int gpw_alloc(gpw_buf *b, uint64_t alloc_id, uint64_t address, uint64_t size, uint8_t kind,
                            const uint64_t *frames, size_t nframes) {
    size_t off = gpw_frame_begin(b, GPW_ALLOC);
    gpw_put_u64(b, alloc_id);
    gpw_put_u64(b, address);
    gpw_put_u64(b, size);
    gpw_put_u8(b, kind);
    gpw_put_frames(b, frames, nframes);
    return gpw_frame_finish(b, off);
}

static inline int gpw_free(gpw_buf *b, uint64_t address) {
    size_t off = gpw_frame_begin(b, GPW_FREE);
    gpw_put_u64(b, address);
    return gpw_frame_finish(b, off);
}

/* STALL_REASONS: begin, add (index, name) pairs, finish with the count. */
static inline size_t gpw_stall_reasons_begin(gpw_buf *b) {
    size_t off = gpw_frame_begin(b, GPW_STALL_REASONS);
    gpw_put_u32(b, 0);
    return off;
}

static inline void gpw_stall_reason(gpw_buf *b, uint32_t index, const char *name) {
    gpw_put_u32(b, index);
    gpw_put_str(b, name);
}

static inline int gpw_stall_reasons_finish(gpw_buf *b, size_t off, uint32_t count) {
    if (!b->oom) gpw_store_u32(b->data + off + GPW_FRAME_HEADER_SIZE, count);
    return gpw_frame_finish(b, off);
}

/* PC_SAMPLES: begin, then per PC gpw_pc_sample_pc followed by n x
 * gpw_pc_sample_reason, then finish with the number of PCs. */
static inline size_t gpw_pc_samples_begin(gpw_buf *b, uint64_t launch_id) {
    size_t off = gpw_frame_begin(b, GPW_PC_SAMPLES);
    gpw_put_u64(b, launch_id);
    gpw_put_u32(b, 0);
    return off;
}

static inline void gpw_pc_sample_pc(gpw_buf *b, uint32_t function_id, uint32_t pc_offset, uint16_t nreasons) {
    gpw_put_u32(b, function_id);
    gpw_put_u32(b, pc_offset);
    gpw_put_u16(b, nreasons);
}

static inline void gpw_pc_sample_reason(gpw_buf *b, uint32_t reason_index, uint32_t samples) {
    gpw_put_u32(b, reason_index);
    gpw_put_u32(b, samples);
}

static inline int gpw_pc_samples_finish(gpw_buf *b, size_t off, uint32_t count) {
    if (!b->oom) gpw_store_u32(b->data + off + GPW_FRAME_HEADER_SIZE + 8, count);
    return gpw_frame_finish(b, off);
}

/* INSTR_COUNTS: begin, entries, finish with the count. */
static inline size_t gpw_instr_counts_begin(gpw_buf *b, uint64_t launch_id) {
    size_t off = gpw_frame_begin(b, GPW_INSTR_COUNTS);
    gpw_put_u64(b, launch_id);
    gpw_put_u32(b, 0);
    return off;
}

static inline void gpw_instr_count(gpw_buf *b, uint32_t function_id, uint32_t pc_offset, uint64_t inst_executed,
                                   uint64_t thread_inst_executed) {
    gpw_put_u32(b, function_id);
    gpw_put_u32(b, pc_offset);
    gpw_put_u64(b, inst_executed);
    gpw_put_u64(b, thread_inst_executed);
}

static inline int gpw_instr_counts_finish(gpw_buf *b, size_t off, uint32_t count) {
    if (!b->oom) gpw_store_u32(b->data + off + GPW_FRAME_HEADER_SIZE + 8, count);
    return gpw_frame_finish(b, off);
}

/* HOST_MODULE: segs holds nseg (start, size) pairs. */
static inline int gpw_host_module(gpw_buf *b, uint64_t base, const char *path, const char *build_id,
                                  uint16_t nseg, const uint64_t *segs) {
    size_t off = gpw_frame_begin(b, GPW_HOST_MODULE);
    uint16_t i;
    gpw_put_u64(b, base);
    gpw_put_str(b, path);
    gpw_put_str(b, build_id);
    gpw_put_u16(b, nseg);
    for (i = 0; i < nseg; i++) {
        gpw_put_u64(b, segs[2 * i]);
        gpw_put_u64(b, segs[2 * i + 1]);
    }
    return gpw_frame_finish(b, off);
}

/* pc_samples (PC samples the sampling hardware dropped) is an optional
 * trailing field, written only when not zero. */
static inline int gpw_dropped(gpw_buf *b, uint64_t records, uint64_t bytes, uint64_t pc_samples) {
    size_t off = gpw_frame_begin(b, GPW_DROPPED);
    gpw_put_u64(b, records);
    gpw_put_u64(b, bytes);
    if (pc_samples) gpw_put_u64(b, pc_samples);
    return gpw_frame_finish(b, off);
}

static inline int gpw_end(gpw_buf *b, uint64_t frames, int32_t exit_code) {
    size_t off = gpw_frame_begin(b, GPW_END);
    gpw_put_u64(b, frames);
    gpw_put_i32(b, exit_code);
    return gpw_frame_finish(b, off);
}

/* FNV-1a 64, the library's cubin dedup key (MODULE.content_key). */
static inline uint64_t gpw_fnv1a64(const void *data, size_t n) {
    const uint8_t *p = (const uint8_t *)data;
    uint64_t h = 0xcbf29ce484222325ull;
    size_t i;
    for (i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

#ifdef __cplusplus
}
#endif

#endif /* GPUPROF_WIRE_H */
