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
 *   - the lanes of a warp that run the same instruction form one record; the
 *     first of them reserves a slot (one atomic per warp access), every lane
 *     writes its address and value, the leader writes the header, then counts
 *     the record as done.
 *   - the warp that reserves slot == capacity waits until all earlier records
 *     are done, raises mbox->full and spins until the host drained the array
 *     and cleared the flag, then resets the counters; warps that got a slot
 *     past capacity wait for the reset and retry. If the host does not answer
 *     within timeout_ns the records are counted as dropped and overwritten,
 *     so a dead host thread cannot hang the application.
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

/* Is this launch traced, this block sampled and this kind of event wanted? */
static __device__ __forceinline__ bool gp_traced(const gp_ctl *c, uint32_t space_bit) {
    if (c == nullptr) return false;
    uint32_t period = __ldg(&c->period);
    if (period == 0) return false;
    if ((__ldg(&c->spaces) & space_bit) == 0) return false;
    return ((gp_flat_block() + __ldg(&c->offset)) % period) == 0;
}

static __device__ __forceinline__ uint32_t gp_vload_u32(const uint32_t *p) { return *(const volatile uint32_t *)p; }

/* Reserve one record slot; called by one lane per warp access. */
static __device__ uint32_t gp_reserve(gp_ctl *c) {
    const uint32_t cap = __ldg(&c->capacity);
    const uint64_t timeout = __ldg((const unsigned long long *)&c->timeout_ns);
    for (;;) {
        uint32_t slot = atomicAdd(&c->tail, 1u);
        if (slot < cap) return slot;
        if (slot == cap) {
            /* This warp drains: wait for every earlier writer of this fill. */
            uint64_t t0 = gp_now();
            bool lost = false;
            while (gp_vload_u32(&c->done) < cap) {
                if (gp_now() - t0 > timeout) {
                    lost = true;
                    break;
                }
                __nanosleep(64);
            }
            gp_mailbox *m = c->mbox;
            if (!lost) {
                __threadfence_system();
                m->count = cap;
                __threadfence_system();
                m->full = 1u;
                __threadfence_system();
                t0 = gp_now();
                while (m->full != 0u) {
                    if (gp_now() - t0 > timeout) {
                        lost = true;
                        break;
                    }
                    __nanosleep(256);
                }
            }
            if (lost) {
                /* The host did not answer: give the records up. */
                atomicAdd((unsigned long long *)&c->dropped, (unsigned long long)cap);
                m->full = 0u;
            }
            m->fills = m->fills + 1u;
            __threadfence_system();
            atomicExch(&c->done, 0u);
            __threadfence();
            atomicExch(&c->tail, 0u);
            continue; /* retry: slot 0.. of the next fill */
        }
        /* Past capacity: wait until the draining warp reset the counters. */
        while (gp_vload_u32(&c->tail) >= cap) __nanosleep(128);
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
 * together. */
static __device__ __forceinline__ void gp_emit(gp_ctl *c, uint64_t pc, uint32_t space, uint32_t flags, uint32_t size,
                                               uint64_t addr, const uint64_t v[2]) {
    const uint32_t active = __activemask();
    const uint32_t group = __match_any_sync(active, pc);
    const uint32_t lane = gp_laneid();
    const uint32_t leader = __ffs(group) - 1;
    uint32_t slot = 0;
    if (lane == leader) slot = gp_reserve(c);
    slot = __shfl_sync(group, slot, leader);

    uint8_t *rec = c->records + (size_t)slot * GP_REC_STRIDE;
    if (size != 0) {
        ((uint64_t *)(rec + GP_REC_ADDR_OFF))[lane] = addr;
        gp_store_value(rec + GP_REC_VAL_OFF + lane * size, size, v);
    }
    if (lane == leader) {
        uint64_t *h = (uint64_t *)rec;
        const uint32_t warp = gp_flat_thread() / GP_WARP;
        h[0] = pc;
        h[1] = (uint64_t)gp_flat_block() | ((uint64_t)(warp & 0xffffu) << 32) | ((uint64_t)(space & 0xffu) << 48) |
               ((uint64_t)(flags & 0xffu) << 56);
        h[2] = (uint64_t)group | ((uint64_t)(size & 0xffu) << 32);
        h[3] = 0;
    }
    __threadfence();
    __syncwarp(group);
    if (lane == leader) atomicAdd(&c->done, 1u);
}

static __device__ __forceinline__ SanitizerPatchResult gp_access(void *userdata, uint64_t pc, void *ptr, uint32_t size,
                                                                 uint32_t flags, const void *pData, uint32_t space,
                                                                 uint32_t space_bit) {
    gp_ctl *c = (gp_ctl *)userdata;
    if (!gp_traced(c, space_bit)) return SANITIZER_PATCH_SUCCESS;
    if (flags & SAN_PREFETCH) return SANITIZER_PATCH_SUCCESS;
    if (size == 0 || size > 16 || (size & (size - 1)) != 0) return SANITIZER_PATCH_SUCCESS;

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
    return SANITIZER_PATCH_SUCCESS;
}

extern "C" __device__ __noinline__ SanitizerPatchResult gpuprof_global_access(void *userdata, uint64_t pc, void *ptr,
                                                                              uint32_t accessSize, uint32_t flags,
                                                                              const void *pData) {
    return gp_access(userdata, pc, ptr, accessSize, flags, pData, GP_SP_GLOBAL, GP_SPACE_GLOBAL_BIT);
}

extern "C" __device__ __noinline__ SanitizerPatchResult gpuprof_shared_access(void *userdata, uint64_t pc, void *ptr,
                                                                              uint32_t accessSize, uint32_t flags,
                                                                              const void *pData) {
    return gp_access(userdata, pc, ptr, accessSize, flags, pData, GP_SP_SHARED, GP_SPACE_SHARED_BIT);
}

extern "C" __device__ __noinline__ SanitizerPatchResult gpuprof_local_access(void *userdata, uint64_t pc, void *ptr,
                                                                             uint32_t accessSize, uint32_t flags,
                                                                             const void *pData) {
    return gp_access(userdata, pc, ptr, accessSize, flags, pData, GP_SP_LOCAL, GP_SPACE_LOCAL_BIT);
}

extern "C" __device__ __noinline__ SanitizerPatchResult gpuprof_block_enter(void *userdata, uint64_t pc) {
    gp_ctl *c = (gp_ctl *)userdata;
    if (!gp_traced(c, GP_SPACE_BLOCK_BIT)) return SANITIZER_PATCH_SUCCESS;
    const uint64_t v[2] = {0, 0};
    gp_emit(c, pc, GP_SP_NONE, GP_F_ENTER, 0, 0, v);
    return SANITIZER_PATCH_SUCCESS;
}

extern "C" __device__ __noinline__ SanitizerPatchResult gpuprof_block_exit(void *userdata, uint64_t pc) {
    gp_ctl *c = (gp_ctl *)userdata;
    if (!gp_traced(c, GP_SPACE_BLOCK_BIT)) return SANITIZER_PATCH_SUCCESS;
    const uint64_t v[2] = {0, 0};
    gp_emit(c, pc, GP_SP_NONE, GP_F_EXIT, 0, 0, v);
    return SANITIZER_PATCH_SUCCESS;
}
