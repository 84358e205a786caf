/*
 * gpuprof_patch.cu - device-side patches for the redundancy (Sanitizer) mode.
 *
 * Built as a tools patch, never linked into an application:
 *   nvcc --fatbin --compile-as-tools-patch -gencode arch=compute_90,code=sm_90 \
 *        -I$CUDA/compute-sanitizer/include -o gpuprof_patch.fatbin gpuprof_patch.cu
 * and loaded per context by sanitizerAddPatchesFromFile. The Sanitizer calls
 * these functions before every patched instruction (memory accesses) and at
 * block entry/exit, in the thread that executes the instruction.
 *
 * Protocol (see docs/inject.md and patch_abi.h):
 *   - userdata is the launch's gp_ctl (device memory). period == 0 means the
 *     launch is not traced and every patch returns at once.
 *   - block b is traced iff (b + offset) % period == 0.
 *   - the lanes of a warp that run the same instruction form one record.
 *     They find together whether their addresses are affine in the lane and
 *     their values uniform, so the record is written in its compact
 *     encoding; the first lane reserves the record's bytes (one 64-bit
 *     atomic per warp access: fill number and offset), every lane writes its
 *     address and value where the encoding puts them, the first lane writes
 *     the header, then counts the record as done.
 *   - the warp whose reservation crosses the end of the current half waits
 *     until all earlier records are done, raises the half's full flag and
 *     opens the next fill in the other half as soon as the host has drained
 *     that one; warps that reserved past the end wait for the next fill and
 *     retry. If the host does not answer within timeout_ns the records are
 *     counted as dropped and overwritten, so a dead host thread cannot hang
 *     the application.
 */
#include <stdint.h>
#include <sanitizer_patching.h>

#include "patch_abi.h"

#define GP_SP_NONE 0
#define GP_SP_GLOBAL 1
#define GP_SP_SHARED 2
#define GP_SP_LOCAL 3

#define GP_F_READ 0x01u
#define GP_F_WRITE 0x02u
#define GP_F_ATOMIC 0x04u
#define GP_F_ENTER 0x10u
#define GP_F_EXIT 0x20u

/* Sanitizer_DeviceMemoryFlags (CUDA 13.0) */
#define SAN_READ 0x1u
#define SAN_WRITE 0x2u
#define SAN_ATOMSYS 0x4u
#define SAN_PREFETCH 0x8u

static __device__ __forceinline__ uint32_t gp_laneid() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(r));
    return r;
}

static __device__ __forceinline__ uint64_t gp_now() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

static __device__ __forceinline__ uint32_t gp_flat_block() {
    return blockIdx.x + blockIdx.y * gridDim.x + blockIdx.z * gridDim.x * gridDim.y;
}

static __device__ __forceinline__ uint32_t gp_flat_thread() {
    return threadIdx.x + threadIdx.y * blockDim.x + threadIdx.z * blockDim.x * blockDim.y;
}

/* Is this launch traced, this block sampled and this kind of event wanted?
 * Every patched instruction of a traced launch runs this, in every block,
 * so it stays small: the sampling test is a multiply and a compare
 * (block_magic = 2^64 / period rounded up: n is a multiple of period iff
 * n * block_magic <= block_magic - 1, for 32-bit n) instead of a modulo,
 * which the GPU does in a sequence with a reciprocal. */
static __device__ __forceinline__ bool gp_traced(const gp_ctl *c, uint32_t space_bit) {
    if (c == nullptr) return false;
    if (__ldg(&c->period) == 0) return false;
    if ((__ldg(&c->spaces) & space_bit) == 0) return false;
    const uint64_t magic = __ldg((const unsigned long long *)&c->block_magic);
    const uint32_t n = gp_flat_block() + __ldg(&c->offset);
    return (uint64_t)n * magic <= magic - 1;
}

static __device__ __forceinline__ unsigned long long gp_vload_u64(const unsigned long long *p) {
    return *(const volatile unsigned long long *)p;
}

/* Hand the full half of fill `fill` (off bytes reserved before the crossing
 * reservation) to the host and open the next fill in the other half. */
static __device__ void gp_handover(gp_ctl *c, uint32_t fill, uint32_t off, uint64_t timeout) {
    gp_mailbox *m = c->mbox;
    gp_half *h = &m->half[fill & 1u];
    gp_half *o = &m->half[(fill + 1u) & 1u];
    unsigned long long d;
    const uint64_t start = gp_now();
    uint64_t t0 = start;
    bool lost = false;
    /* Wait for every earlier writer of this fill. */
    while ((uint32_t)(d = gp_vload_u64(&c->done)) != off) {
        if (gp_now() - t0 > timeout) {
            lost = true;
            break;
        }
        __nanosleep(64);
    }
    if (lost) {
        atomicAdd((unsigned long long *)&c->dropped, d >> 32);
    } else if (off > 0) {
        __threadfence_system();
        h->bytes = off;
        h->records = (uint32_t)(d >> 32);
        h->fill = fill;
        __threadfence_system();
        h->full = 1u;
        __threadfence_system();
    }
    /* The next fill goes to the other half: wait until the host drained it. */
    t0 = gp_now();
    while (o->full != 0u) {
        if (gp_now() - t0 > timeout) {
            /* The host did not answer: give that half's records up. */
            atomicAdd((unsigned long long *)&c->dropped, (unsigned long long)o->records);
            o->full = 0u;
            break;
        }
        __nanosleep(256);
    }
    m->fills = m->fills + 1u;
    atomicAdd((unsigned long long *)&c->waited_ns, (unsigned long long)(gp_now() - start));
    __threadfence_system();
    atomicExch(&c->done, 0ull);
    __threadfence();
    atomicExch(&c->tail, (unsigned long long)(fill + 1u) << 32);
}

/* Reserve len bytes for one record; called by one lane per warp access.
 * Returns where the record goes. */
static __device__ uint8_t *gp_reserve(gp_ctl *c, uint32_t len) {
    const uint32_t cap = __ldg(&c->capacity);
    const uint64_t timeout = __ldg((const unsigned long long *)&c->timeout_ns);
    uint8_t *const recs = (uint8_t *)__ldg((const unsigned long long *)&c->records);
    for (;;) {
        const unsigned long long t = atomicAdd(&c->tail, (unsigned long long)len);
        const uint32_t fill = (uint32_t)(t >> 32), off = (uint32_t)t;
        if ((uint64_t)off + len <= cap) return recs + (size_t)(fill & 1u) * cap + off;
        if (off <= cap) {
            /* This reservation holds the half's last byte: hand it over. */
            gp_handover(c, fill, off, timeout);
            continue;
        }
        /* Past the end: wait until the next fill is open. */
        while ((uint32_t)(gp_vload_u64(&c->tail) >> 32) == fill) __nanosleep(128);
    }
}

/* Read `size` bytes at ptr in the given space into v (little-endian). */
static __device__ __forceinline__ void gp_read_value(uint32_t space, const void *ptr, uint32_t size, uint64_t v[2]) {
    v[0] = 0;
    v[1] = 0;
    const void *p = ptr;
    if (space == GP_SP_SHARED)
        p = __cvta_shared_to_generic((size_t)(uintptr_t)ptr);
    else if (space == GP_SP_LOCAL)
        p = __cvta_local_to_generic((size_t)(uintptr_t)ptr);
    switch (size) {
    case 1: v[0] = *(const volatile uint8_t *)p; break;
    case 2: v[0] = *(const volatile uint16_t *)p; break;
    case 4: v[0] = *(const volatile uint32_t *)p; break;
    case 8: v[0] = *(const volatile uint64_t *)p; break;
    case 16:
        v[0] = ((const volatile uint64_t *)p)[0];
        v[1] = ((const volatile uint64_t *)p)[1];
        break;
    default: break;
    }
}

/* Copy the value being stored from pData (any alignment). */
static __device__ __forceinline__ void gp_copy_value(const void *pData, uint32_t size, uint64_t v[2]) {
    v[0] = 0;
    v[1] = 0;
    const uint8_t *s = (const uint8_t *)pData;
    if (((uintptr_t)s & (size - 1)) == 0) {
        switch (size) {
        case 1: v[0] = *s; return;
        case 2: v[0] = *(const uint16_t *)s; return;
        case 4: v[0] = *(const uint32_t *)s; return;
        case 8: v[0] = *(const uint64_t *)s; return;
        case 16:
            v[0] = ((const uint64_t *)s)[0];
            v[1] = ((const uint64_t *)s)[1];
            return;
        default: break;
        }
    }
    uint8_t *d = (uint8_t *)v;
    for (uint32_t i = 0; i < size && i < 16; i++) d[i] = s[i];
}

static __device__ __forceinline__ void gp_store_value(uint8_t *dst, uint32_t size, const uint64_t v[2]) {
    switch (size) {
    case 1: *dst = (uint8_t)v[0]; break;
    case 2: *(uint16_t *)dst = (uint16_t)v[0]; break;
    case 4: *(uint32_t *)dst = (uint32_t)v[0]; break;
    case 8: *(uint64_t *)dst = v[0]; break;
    case 16:
        ((uint64_t *)dst)[0] = v[0];
        ((uint64_t *)dst)[1] = v[1];
        break;
    default: break;
    }
}

/* Write one warp-level record. Every lane of the calling group passes its own
 * address and value; lanes are grouped by pc because independent thread
 * scheduling may run two different patched instructions through this function
 * together. The encodings are the host's (gpw_lanes_compact), decided
 * together by the lanes, so the wire carries the same bytes as before. */
static __device__ __forceinline__ void gp_emit(gp_ctl *c, uint64_t pc, uint32_t space, uint32_t flags, uint32_t size,
                                               uint64_t addr, const uint64_t v[2]) {
    const uint32_t active = __activemask();
    const uint32_t group = __match_any_sync(active, pc);
    const uint32_t lane = gp_laneid();
    const uint32_t leader = __ffs(group) - 1;
    const uint32_t n = __popc(group);
    const uint32_t rank = __popc(group & ((1u << lane) - 1u));
    uint32_t enc = 0, len = 24;
    uint64_t base = 0, step = 0;
    if (size != 0) {
        if (__ldg(&c->encode)) {
            const uint64_t a0 = __shfl_sync(group, addr, leader);
            const uint32_t rest = group & (group - 1u);
            bool ok = true;
            if (rest) {
                const uint32_t l1 = __ffs(rest) - 1;
                const uint64_t a1 = __shfl_sync(group, addr, l1);
                const int64_t dl = (int64_t)l1 - (int64_t)leader;
                const int64_t d = (int64_t)(a1 - a0);
                ok = d % dl == 0;
                step = (uint64_t)(d / dl);
            }
            base = a0 - step * (uint64_t)leader;
            if (__all_sync(group, ok && addr == base + step * (uint64_t)lane)) enc |= GP_ENC_AFFINE;
            const uint64_t w0 = __shfl_sync(group, v[0], leader), w1 = __shfl_sync(group, v[1], leader);
            if (__all_sync(group, v[0] == w0 && v[1] == w1)) enc |= GP_ENC_UNIFORM;
        }
        len += (enc & GP_ENC_AFFINE) ? 16u : 8u * n;
        len += (enc & GP_ENC_UNIFORM) ? size : n * size;
        len = (len + 7u) & ~7u;
    }
    unsigned long long at = 0;
    if (lane == leader) at = (unsigned long long)(uintptr_t)gp_reserve(c, len);
    uint8_t *rec = (uint8_t *)(uintptr_t)__shfl_sync(group, at, leader);
    if (size != 0) {
        uint8_t *body = rec + 24;
        if (enc & GP_ENC_AFFINE) {
            if (lane == leader) {
                ((uint64_t *)body)[0] = base;
                ((uint64_t *)body)[1] = step;
            }
            body += 16;
        } else {
            ((uint64_t *)body)[rank] = addr;
            body += 8u * n;
        }
        if (!(enc & GP_ENC_UNIFORM))
            gp_store_value(body + rank * size, size, v);
        else if (lane == leader)
            gp_store_value(body, size, v);
    }
    if (lane == leader) {
        uint64_t *h = (uint64_t *)rec;
        const uint32_t warp = gp_flat_thread() / GP_WARP;
        h[0] = pc;
        h[1] = (uint64_t)gp_flat_block() | ((uint64_t)(warp & 0xffffu) << 32) | ((uint64_t)(space & 0xffu) << 48) |
               ((uint64_t)(flags & 0xffu) << 56);
        h[2] = (uint64_t)group | ((uint64_t)(size & 0xffu) << 32) | ((uint64_t)enc << 40) | ((uint64_t)len << 48);
    }
    __threadfence();
    __syncwarp(group);
    if (lane == leader) atomicAdd(&c->done, (1ull << 32) | len);
}

/* The work of a traced block's access, out of line: the patch functions
 * themselves hold only the test above, so that the untraced blocks of a
 * traced launch (49 of 50 at P=50) run as little code as possible. */
static __device__ __noinline__ void gp_access(gp_ctl *c, uint64_t pc, void *ptr, uint32_t size, uint32_t flags,
                                              const void *pData, uint32_t space) {
    if (flags & SAN_PREFETCH) return;
    if (size == 0 || size > 16 || (size & (size - 1)) != 0) return;

    uint32_t f = flags & (SAN_READ | SAN_WRITE);
    const bool atomic = ((flags & SAN_READ) && (flags & SAN_WRITE)) || (flags & SAN_ATOMSYS);
    if (atomic) f |= GP_F_ATOMIC;
    uint64_t v[2];
    if ((flags & SAN_WRITE) && !atomic && pData != nullptr) {
        gp_copy_value(pData, size, v); /* the value being stored */
    } else {
        /* Loads (pData, if set, is a byte-use mask in CUDA 13, not a value)
         * and atomics (old value): the patch runs before the instruction, so
         * this reads what the instruction is about to read. */
        gp_read_value(space, ptr, size, v);
    }
    gp_emit(c, pc, space, f, size, (uint64_t)(uintptr_t)ptr, v);
}

/* A block enter or exit event of a traced block, out of line. */
static __device__ __noinline__ void gp_block_event(gp_ctl *c, uint64_t pc, uint32_t flags) {
    const uint64_t v[2] = {0, 0};
    gp_emit(c, pc, GP_SP_NONE, flags, 0, 0, v);
}

extern "C" __device__ __noinline__ SanitizerPatchResult gpuprof_global_access(void *userdata, uint64_t pc, void *ptr,
                                                                              uint32_t accessSize, uint32_t flags,
                                                                              const void *pData) {
    gp_ctl *c = (gp_ctl *)userdata;
    if (gp_traced(c, GP_SPACE_GLOBAL_BIT)) gp_access(c, pc, ptr, accessSize, flags, pData, GP_SP_GLOBAL);
    return SANITIZER_PATCH_SUCCESS;
}

extern "C" __device__ __noinline__ SanitizerPatchResult gpuprof_shared_access(void *userdata, uint64_t pc, void *ptr,
                                                                              uint32_t accessSize, uint32_t flags,
                                                                              const void *pData) {
    gp_ctl *c = (gp_ctl *)userdata;
    if (gp_traced(c, GP_SPACE_SHARED_BIT)) gp_access(c, pc, ptr, accessSize, flags, pData, GP_SP_SHARED);
    return SANITIZER_PATCH_SUCCESS;
}

extern "C" __device__ __noinline__ SanitizerPatchResult gpuprof_local_access(void *userdata, uint64_t pc, void *ptr,
                                                                             uint32_t accessSize, uint32_t flags,
                                                                             const void *pData) {
    gp_ctl *c = (gp_ctl *)userdata;
    if (gp_traced(c, GP_SPACE_LOCAL_BIT)) gp_access(c, pc, ptr, accessSize, flags, pData, GP_SP_LOCAL);
    return SANITIZER_PATCH_SUCCESS;
}

extern "C" __device__ __noinline__ SanitizerPatchResult gpuprof_block_enter(void *userdata, uint64_t pc) {
    gp_ctl *c = (gp_ctl *)userdata;
    if (gp_traced(c, GP_SPACE_BLOCK_BIT)) gp_block_event(c, pc, GP_F_ENTER);
    return SANITIZER_PATCH_SUCCESS;
}

extern "C" __device__ __noinline__ SanitizerPatchResult gpuprof_block_exit(void *userdata, uint64_t pc) {
    gp_ctl *c = (gp_ctl *)userdata;
    if (gp_traced(c, GP_SPACE_BLOCK_BIT)) gp_block_event(c, pc, GP_F_EXIT);
    return SANITIZER_PATCH_SUCCESS;
}
