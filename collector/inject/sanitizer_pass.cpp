/*
 * sanitizer_pass.cpp - redundancy mode: Compute Sanitizer patching API.
 *
 * Module load: MODULE frame, function symbols, patches for global, shared and
 * local memory accesses and block enter/exit (gpuprof_patch.fatbin).
 * Launch begin: FUNCTION frames still missing, kernel sampling decision, a
 * trace buffer bound to the launch with sanitizerSetLaunchCallbackData, LAUNCH.
 * While the kernel runs, the drain thread empties full trace buffers.
 * Launch end: wait for the kernel, drain the rest, KERNEL_END.
 * Allocations: ALLOC/FREE with host calling contexts.
 *
 * Only this file includes sanitizer.h (cupti.h cannot share a translation unit).
 */
#include <sanitizer.h>
#include <time.h>

#include <cuda.h>
#include <generated_cuda_meta.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common.h"
#include "passes.h"
#include "patch_abi.h"

namespace gp {
namespace {

bool san_ok(SanitizerResult r, const char *what) {
    if (r == SANITIZER_SUCCESS) return true;
    const char *s = nullptr;
    sanitizerGetResultString(r, &s);
    log("%s failed: %s (%d)", what, s ? s : "?", (int)r);
    return false;
}
#define SAN(call) san_ok((call), #call)

struct SFunc {
    uint32_t id = 0;
    uint64_t elf_size = 0;
    bool emitted = false;
};

struct SMod {
    uint64_t id = 0;
    CUcontext ctx = nullptr;
    std::unordered_map<std::string, SFunc> funcs;
    bool instrumentable = false; // patched successfully at load
    bool patched = false;        // current state (GPUPROF_SKIP=unpatch toggles it)
    bool keep_patched = false;   // launched on a created stream: never unpatched again
};

struct Buf {
    CUcontext ctx = nullptr;
    gp_ctl *dev = nullptr;       // device memory
    void *host = nullptr;        // pinned host memory: mailbox + records
    gp_mailbox *mbox = nullptr;
    uint8_t *recs = nullptr;     // two halves of cap bytes
    uint32_t cap = 0;            // bytes per half
    gp_ctl cfg;                  // host image copied to dev at launch begin
    std::mutex mu;               // guards draining
    uint64_t launch_id = 0;
    uint64_t delivered = 0;
    uint64_t written = 0;        // records the device handed over (its own count)
};

struct CtxState {
    bool patches_tried = false;
    bool patches_ok = false;
    gp_ctl *disabled = nullptr; // all-zero gp_ctl: period 0, patches return at once
    std::unordered_set<Sanitizer_StreamHandle> disabled_zeroed; // streams that zeroed it before their kernels
    std::vector<Buf *> free_bufs;
    std::vector<Buf *> all_bufs;
};

struct LaunchState {
    bool valid = false;
    uint64_t launch_id = 0;
    Buf *buf = nullptr;
    uint64_t t0 = 0;
    uint32_t blocks_total = 0;
    uint32_t blocks_sampled = 0;
};

Sanitizer_SubscriberHandle g_sub;
std::mutex g_mu; // modules, contexts
std::unordered_map<CUmodule, SMod> g_mods;
std::unordered_map<CUcontext, CtxState> g_ctxs;
std::atomic<uint64_t> g_next_launch{1};
int g_loading_eager = -1; // -1 unknown, 0 lazy, 1 eager

std::mutex g_act_mu;
std::condition_variable g_act_cv;
std::vector<Buf *> g_active;
bool g_stop = false;
std::thread g_drainer;

thread_local LaunchState t_launch;
thread_local bool t_captured = false; // the launch in flight is being captured into a graph
thread_local uint32_t t_shared_bytes = 0;

const uint32_t kFrameRecords = 32768; // records per ACCESS frame (< 26 MB)

/* A converted ACCESS frame not yet queued, and its records. */
struct Converted {
    gpw_buf f;
    uint32_t records;
};

/* Convert nbytes of device records (patch_abi.h) of launch launch_id
 * into ACCESS frames, queued at once or, with held, appended to it for the
 * caller to queue; returns the records delivered. The device wrote each
 * record in its wire encoding already, so this is mostly copying: plain
 * records get their addresses and values interleaved (gp_dev_to_wire). A
 * record whose header does not fit its length ends the array with a
 * message: the bytes after it cannot be framed. */
uint64_t emit_array(const uint8_t *recs, uint32_t nbytes, uint64_t launch_id, std::vector<Converted> *held = nullptr) {
    uint64_t delivered = 0;
    uint32_t at = 0;
    while (at < nbytes) {
        gpw_buf f;
        gpw_buf_init(&f);
        size_t off = gpw_access_begin(&f, launch_id);
        const size_t worst = std::min<size_t>(nbytes - at, (size_t)kFrameRecords * GP_REC_MAX);
        if (!gpw_reserve(&f, worst)) {
            gpw_buf_free(&f);
            log("out of memory converting %u bytes of trace records", nbytes - at);
            break;
        }
        uint8_t *p = f.data + f.len;
        uint32_t good = 0, len = 0;
        while (at < nbytes && good < kFrameRecords && (len = gp_dev_len(recs + at, nbytes - at)) != 0) {
            p += gp_dev_to_wire(p, recs + at, len);
            at += len;
            good++;
        }
        f.len = (size_t)(p - f.data);
        const bool bad = at < nbytes && good < kFrameRecords;
        if (good > 0 && gpw_access_finish(&f, off, good)) {
            delivered += good;
            if (held)
                held->push_back(Converted{f, good});
            else
                out_push(&f, true, good);
        } else {
            if (good > 0) log("ACCESS frame too large; dropped");
            gpw_buf_free(&f);
        }
        if (bad) {
            log("trace records of launch %llu: the record at byte %u of %u has a header the device does not write; "
                "the rest of the array is dropped",
                (unsigned long long)launch_id, at, nbytes);
            break;
        }
    }
    return delivered;
}

/* Convert nbytes of the half at recs. Caller holds b->mu. */
void emit_records(Buf *b, const uint8_t *recs, uint32_t nbytes) { b->delivered += emit_array(recs, nbytes, b->launch_id); }

static_assert(sizeof(gp_mailbox) <= 256, "the mailbox sits in the first 256 bytes of the pinned buffer");

/* Staged conversion. A full half is copied out of pinned memory and handed
 * back to the device at once; converter threads turn the copies into
 * frames while the GPU fills the halves again, so the kernel waits for a
 * copy, not for the conversion (measured on the H100: the conversion was
 * most of the GPU's waiting). At most max_staged() copies wait: slow
 * converters (or a full output queue behind them) hold the device back as
 * before. Frames keep their order: each copy has a number in staging order,
 * its converter queues its frames when every copy before it has queued
 * (g_conv_next), and a launch's end waits for its copies (conv_flush)
 * before its own frames. GPUPROF_CONVERTERS threads (default 4). */
struct Staged {
    Buf *b;
    uint8_t *data;
    uint32_t n; // bytes
    uint64_t launch_id;
    uint64_t seq;
};
std::mutex g_conv_mu;
std::condition_variable g_conv_cv;   // work for the converters
std::condition_variable g_conv_done; // a copy converted and queued: room, or flushed
std::condition_variable g_conv_turn; // g_conv_next moved
std::deque<Staged> g_conv_q;
std::vector<uint8_t *> g_conv_free; // copies' buffers for reuse (a half's bytes each)
uint32_t g_conv_inflight = 0;       // staged and not yet queued
uint64_t g_conv_seq = 0;            // the next copy's number
uint64_t g_conv_next = 0;           // the copy whose frames go out next
bool g_conv_stop = false;
std::vector<std::thread> g_converters;
// Time accounts (GPUPROF_STATS): the drainer's copies out of pinned memory,
// its waits for room among the staged copies, and the converters' work.
std::atomic<uint64_t> g_st_copy_ns{0}, g_st_room_ns{0}, g_st_convert_ns{0};

uint32_t max_staged() { return std::max<uint32_t>(4, 2 * (uint32_t)g_converters.size()); }

/* Copies out of pinned memory, split over the caller and helper threads
 * (GPUPROF_COPY_THREADS in all, default 4): one thread read the pinned
 * array at about 3 GB/s on the H100's host (2.3 s of loop_reload's 7.6 GB
 * with 4 converters, when records took fixed slots), and the half cannot
 * be refilled before its copy ends. One copy at a time (call_mu): the
 * drainer and a launch's end may both drain. */
struct CopyPool {
    std::mutex call_mu;
    std::mutex mu;
    std::condition_variable go, done;
    uint64_t gen = 0;
    uint32_t pending = 0;
    bool stop = false;
    uint8_t *dst = nullptr;
    const uint8_t *src = nullptr;
    uint32_t n = 0;
    std::vector<std::thread> helpers;
};
CopyPool g_copy;

void copy_part(uint32_t k, uint32_t parts) {
    // parts on 64-byte boundaries: no two threads write one cache line
    const uint32_t lo = (uint32_t)((uint64_t)g_copy.n * k / parts) & ~63u;
    const uint32_t hi = k + 1 == parts ? g_copy.n : (uint32_t)((uint64_t)g_copy.n * (k + 1) / parts) & ~63u;
    if (hi > lo) memcpy(g_copy.dst + lo, g_copy.src + lo, hi - lo);
}

void copy_helper(uint32_t k) {
    uint64_t seen = 0;
    for (;;) {
        {
            std::unique_lock<std::mutex> lk(g_copy.mu);
            g_copy.go.wait(lk, [&] { return g_copy.stop || g_copy.gen != seen; });
            if (g_copy.stop) return;
            seen = g_copy.gen;
        }
        copy_part(k, (uint32_t)g_copy.helpers.size() + 1);
        std::lock_guard<std::mutex> lk(g_copy.mu);
        if (--g_copy.pending == 0) g_copy.done.notify_one();
    }
}

void copy_bytes(uint8_t *dst, const uint8_t *src, uint32_t n) {
    if (g_copy.helpers.empty() || n < (1u << 20)) {
        memcpy(dst, src, n);
        return;
    }
    std::lock_guard<std::mutex> call(g_copy.call_mu);
    {
        std::lock_guard<std::mutex> lk(g_copy.mu);
        g_copy.dst = dst, g_copy.src = src, g_copy.n = n;
        g_copy.pending = (uint32_t)g_copy.helpers.size();
        g_copy.gen++;
    }
    g_copy.go.notify_all();
    copy_part(0, (uint32_t)g_copy.helpers.size() + 1);
    std::unique_lock<std::mutex> lk(g_copy.mu);
    g_copy.done.wait(lk, [] { return g_copy.pending == 0; });
}

void converter_main() {
    std::vector<Converted> held;
    for (;;) {
        Staged st;
        {
            std::unique_lock<std::mutex> lk(g_conv_mu);
            g_conv_cv.wait(lk, [] { return g_conv_stop || !g_conv_q.empty(); });
            if (g_conv_q.empty()) return; // stopping, nothing left
            st = g_conv_q.front();
            g_conv_q.pop_front();
        }
        const uint64_t t0 = stat_clock();
        held.clear();
        uint64_t good = emit_array(st.data, st.n, st.launch_id, &held);
        g_st_convert_ns += stat_clock() - t0;
        {
            std::unique_lock<std::mutex> lk(g_conv_mu);
            g_conv_turn.wait(lk, [&] { return g_conv_next == st.seq; });
        }
        for (Converted &c : held) out_push(&c.f, true, c.records);
        {
            std::lock_guard<std::mutex> lk(g_conv_mu);
            g_conv_next++;
            st.b->delivered += good; // read by finish_launch after conv_flush
            g_conv_free.push_back(st.data);
            g_conv_inflight--;
        }
        g_conv_turn.notify_all();
        g_conv_done.notify_all();
    }
}

/* Stage n bytes of records at src, a full half of b (caller holds b->mu).
 * Returns false when no copy could be made: the caller converts in place. */
bool conv_stage(Buf *b, const uint8_t *src, uint32_t n) {
    std::unique_lock<std::mutex> lk(g_conv_mu);
    if (g_converters.empty() || g_conv_stop) return false;
    const uint64_t w0 = stat_clock();
    g_conv_done.wait(lk, [] { return g_conv_inflight < max_staged(); });
    g_st_room_ns += stat_clock() - w0;
    uint8_t *data = nullptr;
    if (!g_conv_free.empty()) {
        data = g_conv_free.back();
        g_conv_free.pop_back();
    }
    lk.unlock();
    if (!data) data = (uint8_t *)malloc(b->cap);
    if (!data) return false;
    const uint64_t c0 = stat_clock();
    copy_bytes(data, src, n);
    g_st_copy_ns += stat_clock() - c0;
    lk.lock();
    g_conv_q.push_back(Staged{b, data, n, b->launch_id, g_conv_seq++});
    g_conv_inflight++;
    lk.unlock();
    g_conv_cv.notify_one();
    return true;
}

/* Wait until every staged copy is converted. */
void conv_flush() {
    std::unique_lock<std::mutex> lk(g_conv_mu);
    g_conv_done.wait(lk, [] { return g_conv_inflight == 0; });
}

/* Drain the halves the device handed over, the older fill first. Caller
 * holds b->mu. */
bool drain_if_full(Buf *b) {
    bool any = false;
    for (;;) {
        gp_half *h0 = &b->mbox->half[0], *h1 = &b->mbox->half[1], *h = nullptr;
        if (h0->full && h1->full)
            h = (int32_t)(h0->fill - h1->fill) < 0 ? h0 : h1;
        else if (h0->full)
            h = h0;
        else if (h1->full)
            h = h1;
        if (!h) return any;
        std::atomic_thread_fence(std::memory_order_acquire);
        uint32_t n = h->bytes;
        if (n > b->cap) n = b->cap;
        const uint8_t *src = b->recs + (size_t)(h == h1) * b->cap;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (!g_cfg.staged || !conv_stage(b, src, n)) emit_records(b, src, n);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        stat_drain((uint64_t)(t1.tv_sec - t0.tv_sec) * 1000000000ull + (uint64_t)t1.tv_nsec - (uint64_t)t0.tv_nsec,
                   h->records);
        b->written += h->records;
        vlog("drained a full trace buffer half: %u records, %u bytes of launch %llu", h->records, n,
             (unsigned long long)b->launch_id);
        std::atomic_thread_fence(std::memory_order_release);
        h->full = 0;
        any = true;
    }
}

/* Does the device wait for b to be drained? */
bool has_full(const Buf *b) { return b->mbox->half[0].full != 0 || b->mbox->half[1].full != 0; }

void drainer_main() {
    for (;;) {
        std::vector<Buf *> act;
        {
            std::unique_lock<std::mutex> lk(g_act_mu);
            g_act_cv.wait(lk, [] { return g_stop || !g_active.empty(); });
            if (g_stop) return;
            act = g_active;
        }
        bool any = false;
        for (Buf *b : act) {
            if (!has_full(b)) continue;
            std::lock_guard<std::mutex> lk(b->mu);
            any |= drain_if_full(b);
        }
        if (!any) std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
}

void activate(Buf *b) {
    {
        std::lock_guard<std::mutex> lk(g_act_mu);
        g_active.push_back(b);
    }
    g_act_cv.notify_one();
}

void deactivate(Buf *b) {
    std::lock_guard<std::mutex> lk(g_act_mu);
    for (size_t i = 0; i < g_active.size(); i++)
        if (g_active[i] == b) {
            g_active[i] = g_active.back();
            g_active.pop_back();
            break;
        }
}

/* A trace buffer for a launch in ctx (g_mu held). */
Buf *acquire_buf(CtxState &cs, CUcontext ctx) {
    if (!cs.free_bufs.empty()) {
        Buf *b = cs.free_bufs.back();
        cs.free_bufs.pop_back();
        return b;
    }
    Buf *b = new Buf();
    b->ctx = ctx;
    // Two halves; GPUPROF_DEVICE_RECORDS counts records of up to 800 bytes
    // (the fixed slots of before), so the pinned memory is as large as it was.
    b->cap = g_cfg.device_records * 400u;
    size_t host_bytes = 256 + 2 * (size_t)b->cap;
    void *dev = nullptr;
    if (!SAN(sanitizerAlloc(ctx, &dev, sizeof(gp_ctl)))) {
        delete b;
        return nullptr;
    }
    if (!SAN(sanitizerAllocHost(ctx, &b->host, host_bytes))) {
        sanitizerFree(ctx, dev);
        delete b;
        return nullptr;
    }
    b->dev = (gp_ctl *)dev;
    memset(b->host, 0, 256);
    b->mbox = (gp_mailbox *)b->host;
    b->recs = (uint8_t *)b->host + 256;
    cs.all_bufs.push_back(b);
    vlog("trace buffer: two halves of %u bytes, %zu bytes of pinned host memory", b->cap, host_bytes);
    return b;
}

/* Whether a stream is one the program created (cudaStreamCreate, with or
 * without cudaStreamNonBlocking), not the legacy or per-thread default. */
bool stream_created(CUstream s) {
    return s != nullptr && s != CU_STREAM_LEGACY && s != CU_STREAM_PER_THREAD;
}

// Launches sampled for tracing but left untraced: their module was
// unpatched and they ran on a created stream (stream_created).
std::atomic<uint64_t> g_unpatched_created{0};

/* The context's disabled control block, zeroed in stream order before
 * the first kernel of each stream that uses it, by an asynchronous copy as
 * the traced launches' control blocks are: no synchronisation inside a
 * launch callback (it was a memset and a stream synchronisation). Copied
 * per stream because a kernel on another stream is not ordered after this
 * one's copy. */
gp_ctl *disabled_ctl(CtxState &cs, CUcontext ctx, Sanitizer_StreamHandle hs) {
    static const gp_ctl zero = {};
    if (!cs.disabled) {
        void *p = nullptr;
        if (!SAN(sanitizerAlloc(ctx, &p, sizeof(gp_ctl)))) return nullptr;
        cs.disabled = (gp_ctl *)p;
    }
    if (!cs.disabled_zeroed.count(hs)) {
        if (!SAN(sanitizerMemcpyHostToDeviceAsync(cs.disabled, (void *)&zero, sizeof zero, hs))) return nullptr;
        cs.disabled_zeroed.insert(hs);
    }
    return cs.disabled;
}

bool patch_module(CUmodule mod) {
    struct P {
        Sanitizer_InstructionId id;
        const char *fn;
        uint32_t bit;
    } ps[] = {
        {SANITIZER_INSTRUCTION_GLOBAL_MEMORY_ACCESS, "gpuprof_global_access", GP_SPACE_GLOBAL_BIT},
        {SANITIZER_INSTRUCTION_SHARED_MEMORY_ACCESS, "gpuprof_shared_access", GP_SPACE_SHARED_BIT},
        {SANITIZER_INSTRUCTION_LOCAL_MEMORY_ACCESS, "gpuprof_local_access", GP_SPACE_LOCAL_BIT},
        {SANITIZER_INSTRUCTION_BLOCK_ENTER, "gpuprof_block_enter", GP_SPACE_BLOCK_BIT},
        {SANITIZER_INSTRUCTION_BLOCK_EXIT, "gpuprof_block_exit", GP_SPACE_BLOCK_BIT},
    };
    bool ok = true;
    for (const P &p : ps) {
        if (!(g_cfg.spaces & p.bit)) continue;
        ok &= SAN(sanitizerPatchInstructions(p.id, mod, p.fn));
    }
    ok &= SAN(sanitizerPatchModule(mod));
    return ok;
}

bool module_loading_eager() {
    if (g_loading_eager < 0) {
        CUmoduleLoadingMode m;
        if (cuModuleGetLoadingMode(&m) == CUDA_SUCCESS)
            g_loading_eager = m == CU_MODULE_EAGER_LOADING ? 1 : 0;
        else
            g_loading_eager = 0;
        vlog("module loading mode: %s", g_loading_eager ? "eager" : "lazy");
    }
    return g_loading_eager == 1;
}

/* Emit FUNCTION for f if its PC is known now (g_mu held). */
void try_emit_function(SMod &m, CUmodule mod, const std::string &name, SFunc &f) {
    if (f.emitted) return;
    uint64_t pc = 0, size = 0;
    if (sanitizerGetFunctionPcAndSize(mod, name.c_str(), &pc, &size) != SANITIZER_SUCCESS || pc == 0) return;
    emit_function(f.id, m.id, pc, size ? size : f.elf_size, name);
    f.emitted = true;
}

void on_module_loaded(const Sanitizer_ResourceModuleData *md) {
    if (!md->pCubin || md->cubinSize == 0) return;
    uint64_t mid = emit_module(md->pCubin, md->cubinSize);
    std::vector<ElfFunc> fns;
    if (!cubin_functions(md->pCubin, md->cubinSize, fns))
        log("module %llu: not an ELF cubin; functions are reported at their first launch", (unsigned long long)mid);
    bool eager = module_loading_eager();
    std::lock_guard<std::mutex> lk(g_mu);
    CtxState &cs = g_ctxs[md->context];
    if (!cs.patches_tried) {
        cs.patches_tried = true;
        cs.patches_ok = SAN(sanitizerAddPatchesFromFile(g_cfg.patch_fatbin.c_str(), md->context));
        if (!cs.patches_ok) log("cannot load the patch fatbin %s: kernels run unpatched", g_cfg.patch_fatbin.c_str());
    }
    SMod &m = g_mods[md->module];
    m = SMod();
    m.id = mid;
    m.ctx = md->context;
    for (const ElfFunc &f : fns) {
        SFunc &sf = m.funcs[f.name];
        if (sf.id == 0) sf.id = new_function_id();
        sf.elf_size = f.size;
    }
    if (cs.patches_ok && out_alive()) {
        m.instrumentable = patch_module(md->module);
        m.patched = m.instrumentable;
    }
    if (eager)
        for (auto &kv : m.funcs) try_emit_function(m, md->module, kv.first, kv.second);
    vlog("module %llu: %zu bytes, %zu functions, %s", (unsigned long long)mid, md->cubinSize, fns.size(),
         m.instrumentable ? "patched" : "not patched");
}

void on_functions_lazy_loaded(const Sanitizer_ResourceFunctionsLazyLoadedData *d) {
    std::lock_guard<std::mutex> lk(g_mu);
    auto it = g_mods.find(d->module);
    if (it == g_mods.end()) return;
    for (uint32_t i = 0; i < d->numFunctions; i++) {
        const char *name = nullptr;
        if (cuFuncGetName(&name, d->functions[i]) != CUDA_SUCCESS || !name) continue;
        auto f = it->second.funcs.find(name);
        if (f != it->second.funcs.end()) try_emit_function(it->second, d->module, f->first, f->second);
    }
}

uint32_t blocks_sampled(uint32_t total, uint32_t P, uint32_t r) {
    // blocks b in [0, total) with (b + r) % P == 0
    uint32_t b0 = (P - (r % P)) % P;
    return b0 < total ? (total - 1 - b0) / P + 1 : 0;
}

void finish_launch(LaunchState &st, Sanitizer_StreamHandle hs) {
    uint64_t t1 = 0, records = 0, dropped = 0;
    if (st.buf || g_cfg.sync_all) {
        uint64_t s0 = stat_clock();
        SAN(sanitizerStreamSynchronize(hs));
        stat_time(st.buf ? ST_SYNC_TRACED : ST_SYNC_UNTRACED, stat_clock() - s0);
        t1 = now_ns();
    }
    if (st.buf) {
        Buf *b = st.buf;
        gp_ctl h;
        memset(&h, 0, sizeof h);
        SAN(sanitizerMemcpyDeviceToHost(&h, b->dev, sizeof h, hs));
        {
            std::lock_guard<std::mutex> lk(b->mu);
            drain_if_full(b);
            conv_flush(); // this launch's staged copies go out first
            // the last fill, never handed over: its half and its bytes
            const uint32_t fill = (uint32_t)(h.tail >> 32), used = (uint32_t)h.tail;
            emit_records(b, b->recs + (size_t)(fill & 1u) * b->cap, used < b->cap ? used : b->cap);
            records = b->delivered;
            // What the device wrote and the conversion could not frame
            // (a damaged header, no memory) is counted as dropped, so the
            // report does not look complete without it.
            const uint64_t written = b->written + (h.done >> 32);
            if (written > records) {
                log("launch %llu: %llu of the device's %llu records could not be converted; counted as dropped",
                    (unsigned long long)st.launch_id, (unsigned long long)(written - records),
                    (unsigned long long)written);
                out_records_dropped(written - records);
            }
        }
        dropped = h.dropped;
        stat_device_wait(h.waited_ns);
        deactivate(b);
        std::lock_guard<std::mutex> lk(g_mu);
        g_ctxs[b->ctx].free_bufs.push_back(b);
    }
    vlog("launch %llu end: %llu records, %llu dropped on the device", (unsigned long long)st.launch_id,
         (unsigned long long)records, (unsigned long long)dropped);
    gpw_buf f;
    gpw_buf_init(&f);
    gpw_kernel_end(&f, st.launch_id, t1 ? st.t0 : 0, t1, st.blocks_total, st.buf ? st.blocks_sampled : 0, records,
                   dropped);
    out_push(&f, false, 0);
    st = LaunchState();
}

void on_launch_begin(const Sanitizer_LaunchData *ld) {
    uint32_t shared = t_shared_bytes;
    t_shared_bytes = 0;
    t_captured = stream_capturing(ld->stream);
    if (t_captured) return; // listed when the graph runs its node (on_graph)
    if (t_launch.valid) {
        vlog("launch begin without end; closing the previous launch");
        finish_launch(t_launch, ld->hStream);
    }
    uint64_t frames[kMaxHostFrames];
    size_t nf = host_backtrace(frames, kMaxHostFrames);
    const std::string name = ld->functionName ? ld->functionName : "";
    uint64_t lid = g_next_launch.fetch_add(1);
    uint32_t fid = 0;
    bool instrumentable = false;
    Buf *buf = nullptr;
    gp_ctl *disabled = nullptr;
    uint32_t blocks = ld->gridDim_x * ld->gridDim_y * ld->gridDim_z;
    {
        std::lock_guard<std::mutex> lk(g_mu);
        auto mit = g_mods.find(ld->module);
        SMod *m = mit == g_mods.end() ? nullptr : &mit->second;
        if (m) {
            SFunc &f = m->funcs[name];
            if (f.id == 0) f.id = new_function_id();
            fid = f.id;
            try_emit_function(*m, ld->module, name, f);
            if (!f.emitted) {
                emit_function(f.id, m->id, 0, f.elf_size, name);
                f.emitted = true;
            }
            instrumentable = m->instrumentable;
        } else {
            static std::unordered_map<std::string, uint32_t> orphans; // module never seen
            uint32_t &id = orphans[name];
            if (id == 0) {
                id = new_function_id();
                emit_function(id, 0, 0, 0, name);
            }
            fid = id;
        }
        bool sampled = kernel_sample(hash_frames(frames, nf) ^ ((uint64_t)fid * 0x9e3779b97f4a7c15ull));
        bool instr = sampled && instrumentable && !comm_kernel(ld->functionName) && out_alive();
        CtxState &cs = g_ctxs[ld->context];
        if (instr) buf = acquire_buf(cs, ld->context);
        if (m && g_cfg.skip_unpatch && m->instrumentable) {
            // Unpatching a module inside the launch callback of a stream
            // the program created never returned: with cudaStreamNonBlocking
            // (NVIDIA's matrixMul and jacobiCudaGraphs samples hung at their
            // first launch left out by kernel sampling, on the H100), and
            // with plain cudaStreamCreate too (HeCBench's lfib4 hung at its
            // fifth launch, the first left out, on such a stream). A module
            // launched on a created stream keeps its patches from then on:
            // the launches left out run the patched code against the
            // disabled control block, as GPUPROF_SKIP=data does (slower, not
            // wrong). One unpatched by an earlier launch elsewhere is not
            // re-patched there either: that launch goes untraced, and is
            // counted.
            const bool created = stream_created(ld->stream);
            if (created && !m->keep_patched) {
                m->keep_patched = true;
                log("module %llu: launched on a stream the program created; it keeps its patches from now on",
                    (unsigned long long)m->id);
            }
            uint64_t t0 = stat_clock();
            if (!buf && m->patched && !m->keep_patched) {
                if (SAN(sanitizerUnpatchModule(ld->module))) m->patched = false;
                stat_time(ST_UNPATCH, stat_clock() - t0);
            } else if (buf && !m->patched && created) {
                cs.free_bufs.push_back(buf);
                buf = nullptr;
                g_unpatched_created++;
            } else if (buf && !m->patched) {
                m->patched = patch_module(ld->module);
                stat_time(ST_PATCH, stat_clock() - t0);
            }
        }
        if (!buf) disabled = disabled_ctl(cs, ld->context, ld->hStream);
    }
    uint32_t P = g_cfg.block_sampling;
    // Block b is traced iff (b + r) % P == 0. A grid of fewer than P blocks
    // would often have none traced (a 32-block grid at P=50: 36% of its
    // traced launches), so there the traced block is drawn among the
    // grid's blocks; larger grids keep r uniform in [0, P).
    uint32_t r = 0;
    if (buf && P > 1) {
        const uint32_t b0 = (uint32_t)(rng_next() % (blocks > 0 && blocks < P ? blocks : P));
        r = (P - b0) % P;
    }
    if (buf) {
        {
            std::lock_guard<std::mutex> lk(buf->mu);
            buf->launch_id = lid;
            buf->delivered = 0;
            buf->written = 0;
            memset((void *)buf->mbox, 0, sizeof(gp_mailbox));
        }
        gp_ctl &c = buf->cfg;
        memset(&c, 0, sizeof c);
        c.capacity = buf->cap;
        c.period = P;
        c.block_magic = P > 1 ? UINT64_MAX / P + 1 : 0; // P = 1: n * 0 <= 2^64 - 1, every block
        c.offset = r;
        c.spaces = g_cfg.spaces;
        c.timeout_ns = g_cfg.device_timeout_ns;
        c.mbox = buf->mbox;
        c.records = buf->recs;
        c.encode = g_cfg.compact ? 1u : 0u;
        bool ok = SAN(sanitizerMemcpyHostToDeviceAsync(buf->dev, &c, sizeof c, ld->hStream)) &&
                  SAN(sanitizerSetLaunchCallbackData(ld->hLaunch, ld->function, ld->hStream, buf->dev));
        if (!ok) {
            std::lock_guard<std::mutex> lk(g_mu);
            g_ctxs[ld->context].free_bufs.push_back(buf);
            buf = nullptr;
        }
    }
    if (!buf && disabled) sanitizerSetLaunchCallbackData(ld->hLaunch, ld->function, ld->hStream, disabled);

    gpw_launch_t L = {};
    L.launch_id = lid;
    L.function_id = fid;
    L.grid[0] = ld->gridDim_x;
    L.grid[1] = ld->gridDim_y;
    L.grid[2] = ld->gridDim_z;
    L.block[0] = ld->blockDim_x;
    L.block[1] = ld->blockDim_y;
    L.block[2] = ld->blockDim_z;
    L.shared_bytes = shared;
    L.stream = (uint64_t)(uintptr_t)ld->stream;
    L.flags = buf ? GPW_LAUNCH_TRACED : 0;
    L.block_offset = buf ? r : 0;
    gpw_buf f;
    gpw_buf_init(&f);
    gpw_launch(&f, &L, frames, nf);
    out_push(&f, false, 0);
    if (buf) activate(buf);
    vlog("launch %llu %s grid %u traced=%d r=%u", (unsigned long long)lid, name.c_str(), blocks, buf ? 1 : 0, r);

    t_launch.valid = true;
    t_launch.launch_id = lid;
    t_launch.buf = buf;
    t_launch.blocks_total = blocks;
    t_launch.blocks_sampled = buf ? blocks_sampled(blocks, P, r) : 0;
    t_launch.t0 = now_ns();
}

/* CUDA graphs: a graph launch's kernel nodes come as node launches, not
 * launch callbacks. They are not traced (their launch data is the disabled
 * control block); each gets a LAUNCH frame with the
 * graph flag and the graph launch's host stack, and a KERNEL_END without
 * times, so that the profile lists them as launched from a graph, not
 * measured (docs/inject.md). */
thread_local std::vector<uint64_t> t_graph_frames;

void on_graph(Sanitizer_CallbackId cbid, const void *cbdata) {
    if (cbid == SANITIZER_CBID_GRAPHS_LAUNCH_BEGIN) {
        const Sanitizer_GraphLaunchData *g = (const Sanitizer_GraphLaunchData *)cbdata;
        if (g->isGraphUpload) return;
        uint64_t frames[kMaxHostFrames];
        size_t nf = host_backtrace(frames, kMaxHostFrames);
        t_graph_frames.assign(frames, frames + nf);
        return;
    }
    if (cbid != SANITIZER_CBID_GRAPHS_NODE_LAUNCH_BEGIN) return;
    const Sanitizer_GraphNodeLaunchData *n = (const Sanitizer_GraphNodeLaunchData *)cbdata;
    if (n->nodeType != CU_GRAPH_NODE_TYPE_KERNEL || n->isGraphUpload) return;
    const Sanitizer_LaunchData *ld = &n->launchData;
    const std::string name = ld->functionName ? ld->functionName : "";
    uint64_t lid = g_next_launch.fetch_add(1);
    uint32_t fid = 0;
    gp_ctl *disabled = nullptr;
    {
        std::lock_guard<std::mutex> lk(g_mu);
        disabled = disabled_ctl(g_ctxs[ld->context], ld->context, ld->hStream);
        auto mit = g_mods.find(ld->module);
        if (mit != g_mods.end()) {
            SFunc &f = mit->second.funcs[name];
            if (f.id == 0) f.id = new_function_id();
            fid = f.id;
            try_emit_function(mit->second, ld->module, name, f);
            if (!f.emitted) {
                emit_function(f.id, mit->second.id, 0, f.elf_size, name);
                f.emitted = true;
            }
        }
    }
    // The patched code must see a disabled control block, as untraced
    // launches do: without launch data it read stale data (a misaligned
    // address in PyTorch's graph replay on the H100).
    if (disabled) sanitizerSetLaunchCallbackData(ld->hLaunch, ld->function, ld->hStream, disabled);
    if (fid == 0) return; // a module we never saw: nothing to name it by
    gpw_launch_t L = {};
    L.launch_id = lid;
    L.function_id = fid;
    L.grid[0] = ld->gridDim_x, L.grid[1] = ld->gridDim_y, L.grid[2] = ld->gridDim_z;
    L.block[0] = ld->blockDim_x, L.block[1] = ld->blockDim_y, L.block[2] = ld->blockDim_z;
    L.stream = (uint64_t)(uintptr_t)ld->stream;
    L.flags = GPW_LAUNCH_GRAPH;
    gpw_buf f;
    gpw_buf_init(&f);
    gpw_launch(&f, &L, t_graph_frames.data(), t_graph_frames.size());
    uint32_t blocks = ld->gridDim_x * ld->gridDim_y * ld->gridDim_z;
    gpw_kernel_end(&f, lid, 0, 0, blocks, 0, 0, 0);
    out_push(&f, false, 0);
}

void on_launch_end(const Sanitizer_LaunchData *ld) {
    if (t_captured) {
        t_captured = false;
        return;
    }
    if (!t_launch.valid) return;
    finish_launch(t_launch, ld->hStream);
}

void on_memory(Sanitizer_CallbackId cbid, const Sanitizer_ResourceMemoryData *md) {
    gpw_buf f;
    gpw_buf_init(&f);
    switch (cbid) {
    case SANITIZER_CBID_RESOURCE_DEVICE_MEMORY_ALLOC:
    case SANITIZER_CBID_RESOURCE_HOST_MEMORY_ALLOC:
    case SANITIZER_CBID_RESOURCE_MEMORY_ALLOC_ASYNC: {
        uint8_t kind = GPW_ALLOC_DEVICE;
        if (cbid == SANITIZER_CBID_RESOURCE_HOST_MEMORY_ALLOC)
            kind = GPW_ALLOC_HOST_PINNED;
        else if (cbid == SANITIZER_CBID_RESOURCE_MEMORY_ALLOC_ASYNC)
            kind = GPW_ALLOC_ASYNC;
        else if (md->flags & SANITIZER_MEMORY_FLAG_MANAGED)
            kind = GPW_ALLOC_MANAGED;
        uint64_t frames[kMaxHostFrames];
        size_t nf = host_backtrace(frames, kMaxHostFrames);
        gpw_alloc(&f, new_alloc_id(), md->address, md->size, kind, frames, nf);
        break;
    }
    default:
        gpw_free(&f, md->address);
        break;
    }
    out_push(&f, false, 0);
}

void on_driver_api(Sanitizer_CallbackId cbid, const Sanitizer_CallbackData *cd) {
    if (cd->callbackSite != SANITIZER_API_ENTER || !cd->functionParams) return;
    switch (cbid) {
    case SANITIZER_CBID_DRIVER_API_cuLaunchKernel:
    case SANITIZER_CBID_DRIVER_API_cuLaunchKernel_ptsz:
        t_shared_bytes = ((const cuLaunchKernel_params *)cd->functionParams)->sharedMemBytes;
        break;
    case SANITIZER_CBID_DRIVER_API_cuLaunchCooperativeKernel:
    case SANITIZER_CBID_DRIVER_API_cuLaunchCooperativeKernel_ptsz:
        t_shared_bytes = ((const cuLaunchCooperativeKernel_params *)cd->functionParams)->sharedMemBytes;
        break;
    case SANITIZER_CBID_DRIVER_API_cuLaunchKernelEx:
    case SANITIZER_CBID_DRIVER_API_cuLaunchKernelEx_ptsz: {
        const cuLaunchKernelEx_params *p = (const cuLaunchKernelEx_params *)cd->functionParams;
        t_shared_bytes = p->config ? p->config->sharedMemBytes : 0;
        break;
    }
    default: break;
    }
}

void on_context_destroy(CUcontext ctx) {
    std::lock_guard<std::mutex> lk(g_mu);
    auto it = g_ctxs.find(ctx);
    if (it == g_ctxs.end()) return;
    for (Buf *b : it->second.all_bufs) {
        deactivate(b);
        sanitizerFreeHost(ctx, b->host);
        sanitizerFree(ctx, b->dev);
        delete b;
    }
    if (it->second.disabled) sanitizerFree(ctx, it->second.disabled);
    g_ctxs.erase(it);
    for (auto m = g_mods.begin(); m != g_mods.end();) {
        if (m->second.ctx == ctx) {
            for (auto &kv : m->second.funcs)
                if (!kv.second.emitted) {
                    emit_function(kv.second.id, m->second.id, 0, kv.second.elf_size, kv.first);
                    kv.second.emitted = true;
                }
            m = g_mods.erase(m);
        } else {
            ++m;
        }
    }
}

thread_local int t_depth = 0;

void SANITIZERAPI callback(void *, Sanitizer_CallbackDomain domain, Sanitizer_CallbackId cbid, const void *cbdata) {
    if (t_depth > 0) return; // our own CUDA calls
    t_depth++;
    switch (domain) {
    case SANITIZER_CB_DOMAIN_DRIVER_API: on_driver_api(cbid, (const Sanitizer_CallbackData *)cbdata); break;
    case SANITIZER_CB_DOMAIN_RESOURCE:
        switch (cbid) {
        case SANITIZER_CBID_RESOURCE_CONTEXT_CREATION_FINISHED:
            hello_from_device(((const Sanitizer_ResourceContextData *)cbdata)->device);
            break;
        case SANITIZER_CBID_RESOURCE_CONTEXT_DESTROY_STARTING:
            on_context_destroy(((const Sanitizer_ResourceContextData *)cbdata)->context);
            break;
        case SANITIZER_CBID_RESOURCE_MODULE_LOADED: {
            uint64_t t0 = stat_clock();
            on_module_loaded((const Sanitizer_ResourceModuleData *)cbdata);
            host_modules_scan();
            stat_time(ST_MODULE_LOAD, stat_clock() - t0);
            break;
        }
        case SANITIZER_CBID_RESOURCE_FUNCTIONS_LAZY_LOADED:
            on_functions_lazy_loaded((const Sanitizer_ResourceFunctionsLazyLoadedData *)cbdata);
            break;
        case SANITIZER_CBID_RESOURCE_DEVICE_MEMORY_ALLOC:
        case SANITIZER_CBID_RESOURCE_HOST_MEMORY_ALLOC:
        case SANITIZER_CBID_RESOURCE_MEMORY_ALLOC_ASYNC:
        case SANITIZER_CBID_RESOURCE_DEVICE_MEMORY_FREE:
        case SANITIZER_CBID_RESOURCE_HOST_MEMORY_FREE:
        case SANITIZER_CBID_RESOURCE_MEMORY_FREE_ASYNC:
            on_memory(cbid, (const Sanitizer_ResourceMemoryData *)cbdata);
            break;
        default: break;
        }
        break;
    case SANITIZER_CB_DOMAIN_LAUNCH:
        if (cbid == SANITIZER_CBID_LAUNCH_BEGIN) {
            uint64_t t0 = stat_clock();
            on_launch_begin((const Sanitizer_LaunchData *)cbdata);
            stat_time(ST_LAUNCH_BEGIN, stat_clock() - t0);
        }
        else if (cbid == SANITIZER_CBID_LAUNCH_END)
            on_launch_end((const Sanitizer_LaunchData *)cbdata);
        break;
    case SANITIZER_CB_DOMAIN_GRAPHS: on_graph(cbid, cbdata); break;
    default: break;
    }
    t_depth--;
}

} // namespace

bool sanitizer_init() {
    if (!SAN(sanitizerSubscribe(&g_sub, callback, nullptr))) return false;
    bool ok = SAN(sanitizerEnableDomain(1, g_sub, SANITIZER_CB_DOMAIN_RESOURCE)) &&
              SAN(sanitizerEnableDomain(1, g_sub, SANITIZER_CB_DOMAIN_LAUNCH));
    // Graph launches are listed (not traced); a driver without the domain
    // only loses that.
    SAN(sanitizerEnableDomain(1, g_sub, SANITIZER_CB_DOMAIN_GRAPHS));
    const Sanitizer_CallbackId launch_cbids[] = {
        SANITIZER_CBID_DRIVER_API_cuLaunchKernel,           SANITIZER_CBID_DRIVER_API_cuLaunchKernel_ptsz,
        SANITIZER_CBID_DRIVER_API_cuLaunchKernelEx,         SANITIZER_CBID_DRIVER_API_cuLaunchKernelEx_ptsz,
        SANITIZER_CBID_DRIVER_API_cuLaunchCooperativeKernel, SANITIZER_CBID_DRIVER_API_cuLaunchCooperativeKernel_ptsz,
    };
    for (Sanitizer_CallbackId id : launch_cbids) sanitizerEnableCallback(1, g_sub, SANITIZER_CB_DOMAIN_DRIVER_API, id);
    g_drainer = std::thread(drainer_main);
    if (g_cfg.staged) {
        for (uint32_t i = 0; i < g_cfg.converters; i++) g_converters.emplace_back(converter_main);
        for (uint32_t k = 1; k < g_cfg.copy_threads; k++) g_copy.helpers.emplace_back(copy_helper, k);
    }
    vlog("redundancy mode: P=%u K=%u, %u record slots per trace buffer, patches from %s", g_cfg.block_sampling,
         g_cfg.kernel_sampling, g_cfg.device_records, g_cfg.patch_fatbin.c_str());
    return ok;
}

void sanitizer_atexit() {
    if (uint64_t n = g_unpatched_created.load())
        log("%llu launches sampled for tracing ran untraced: their module had been unpatched and they ran on a "
            "stream the program created",
            (unsigned long long)n);
    {
        std::lock_guard<std::mutex> lk(g_act_mu);
        g_stop = true;
    }
    g_act_cv.notify_all();
    if (g_drainer.joinable()) g_drainer.join();
    {
        std::lock_guard<std::mutex> lk(g_copy.mu);
        g_copy.stop = true;
    }
    g_copy.go.notify_all();
    for (std::thread &t : g_copy.helpers) t.join();
    g_copy.helpers.clear();
    {
        std::lock_guard<std::mutex> lk(g_conv_mu);
        g_conv_stop = true;
    }
    g_conv_cv.notify_all();
    for (std::thread &t : g_converters) t.join(); // they convert what is left first
    g_converters.clear();
    if (g_cfg.verbose || g_cfg.stats)
        log("drains: copies out of pinned memory %.3f s (%u threads), waits for room among the staged copies %.3f s; "
            "%u converters busy %.3f s",
            g_st_copy_ns.load() / 1e9, g_cfg.copy_threads, g_st_room_ns.load() / 1e9, g_cfg.converters,
            g_st_convert_ns.load() / 1e9);
    for (uint8_t *d : g_conv_free) free(d);
    g_conv_free.clear();
    std::lock_guard<std::mutex> lk(g_mu);
    for (auto &m : g_mods)
        for (auto &kv : m.second.funcs)
            if (!kv.second.emitted) {
                emit_function(kv.second.id, m.second.id, 0, kv.second.elf_size, kv.first);
                kv.second.emitted = true;
            }
}

} // namespace gp
