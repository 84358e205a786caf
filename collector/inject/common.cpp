/*
 * common.cpp - configuration, output queue and writer thread, host contexts,
 * host modules, cubin symbols and HELLO for the injection library.
 */
#include "common.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <unwind.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>

namespace gp {

Config g_cfg;
static std::string driver_version();

/* ------------------------------------------------------------------ */
/* Logging, time, random                                              */
/* ------------------------------------------------------------------ */

static void vlogf(const char *fmt, va_list ap) {
    char buf[1024];
    int n = snprintf(buf, sizeof buf, "[gpuprof %d] ", (int)getpid());
    vsnprintf(buf + n, sizeof buf - n, fmt, ap);
    size_t len = strlen(buf);
    if (len + 1 < sizeof buf && (len == 0 || buf[len - 1] != '\n')) {
        buf[len++] = '\n';
        buf[len] = 0;
    }
    ssize_t w = write(2, buf, len);
    (void)w;
}

void log(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vlogf(fmt, ap);
    va_end(ap);
}

void vlog(const char *fmt, ...) {
    if (!g_cfg.verbose) return;
    va_list ap;
    va_start(ap, fmt);
    vlogf(fmt, ap);
    va_end(ap);
}

uint64_t now_ns() {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static std::atomic<uint64_t> g_rng_state{0};

uint64_t rng_next() {
    // splitmix64
    uint64_t z = g_rng_state.fetch_add(0x9e3779b97f4a7c15ull) + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ------------------------------------------------------------------ */
/* Configuration                                                      */
/* ------------------------------------------------------------------ */

static const char *env(const char *name) {
    const char *v = getenv(name);
    return (v && *v) ? v : nullptr;
}

static uint64_t env_u64(const char *name, uint64_t def, uint64_t lo, uint64_t hi) {
    const char *v = env(name);
    if (!v) return def;
    char *end = nullptr;
    unsigned long long x = strtoull(v, &end, 10);
    if (end == v || *end != 0 || x < lo || x > hi) {
        log("ignoring %s=%s (want an integer in %llu..%llu)", name, v, (unsigned long long)lo,
            (unsigned long long)hi);
        return def;
    }
    return x;
}

void load_config() {
    Config &c = g_cfg;
    c.verbose = env_u64("GPUPROF_VERBOSE", 0, 0, 9) != 0;
    c.trace_comm = env_u64("GPUPROF_TRACE_COMM", 0, 0, 1) != 0;
    c.stats = env_u64("GPUPROF_STATS", 0, 0, 1) != 0;
    c.compact = env_u64("GPUPROF_COMPACT", 1, 0, 1) != 0;
    c.staged = env_u64("GPUPROF_STAGED", 1, 0, 1) != 0;
    c.converters = (uint32_t)env_u64("GPUPROF_CONVERTERS", 4, 1, 64);
    c.copy_threads = (uint32_t)env_u64("GPUPROF_COPY_THREADS", 4, 1, 64);
    if (const char *m = env("GPUPROF_MODE")) {
        if (!strcmp(m, "redundancy"))
            c.mode = GPW_MODE_REDUNDANCY;
        else if (!strcmp(m, "pcsampling"))
            c.mode = GPW_MODE_PCSAMPLING;
        else if (!strcmp(m, "hybrid"))
            c.mode = GPW_MODE_HYBRID;
        else
            log("unknown GPUPROF_MODE=%s; using redundancy", m);
    }
    c.block_sampling = (uint32_t)env_u64("GPUPROF_BLOCK_SAMPLING", 50, 1, 1u << 30);
    c.kernel_sampling = (uint32_t)env_u64("GPUPROF_KERNEL_SAMPLING", 1, 1, 1u << 30);
    c.rank = -1;
    const char *rank_vars[] = {"GPUPROF_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"};
    for (const char *rv : rank_vars) {
        if (const char *v = env(rv)) {
            char *end = nullptr;
            long r = strtol(v, &end, 10);
            if (end != v && *end == 0 && r >= 0 && r < (1L << 30)) {
                c.rank = (int32_t)r;
                break;
            }
        }
    }
    if (const char *v = env("GPUPROF_SOCKET")) c.socket_path = v;
    if (const char *v = env("GPUPROF_RECORD")) c.record_path = v;
    if (const char *v = env("GPUPROF_PATCH_FATBIN"))
        c.patch_fatbin = v;
    else
        c.patch_fatbin = library_dir() + "/gpuprof_patch.fatbin";
    c.queue_bytes = (size_t)env_u64("GPUPROF_QUEUE_MB", 256, 1, 1u << 20) << 20;
    c.queue_wait_ms = (uint32_t)env_u64("GPUPROF_QUEUE_WAIT_MS", 2000, 0, 3600000);
    c.device_records = (uint32_t)env_u64("GPUPROF_DEVICE_RECORDS", 16384, 64, 1u << 22);
    c.device_timeout_ns = env_u64("GPUPROF_DEVICE_TIMEOUT_MS", 5000, 10, 3600000) * 1000000ull;
    c.sync_all = env_u64("GPUPROF_SYNC", 1, 0, 1) != 0;
    // Launches left out by kernel sampling run from an unpatched module by
    // default (measured on the H100 to cost ~1.2x instead of ~100x for the
    // patched code with a disabled trace buffer); unpatching needs launches
    // serialized, so GPUPROF_SYNC=0 falls back to the disabled buffer.
    c.skip_unpatch = true;
    if (const char *v = env("GPUPROF_SKIP")) c.skip_unpatch = strcmp(v, "data") != 0;
    if (!c.sync_all) c.skip_unpatch = false;
    if (const char *v = env("GPUPROF_SPACES")) {
        uint32_t s = 0;
        for (const char *p = v; *p; p++) {
            if (*p == 'g') s |= 1;
            if (*p == 's') s |= 2;
            if (*p == 'l') s |= 4;
            if (*p == 'b') s |= 8;
        }
        c.spaces = s;
    }
    c.pc_period = (int)env_u64("GPUPROF_PC_PERIOD", 15, 0, 31);
    // Continuous collection by default: serialized collection made every
    // launch synchronous (0.96 ms a launch on the H100, docs/overhead.md);
    // the collector splits a function's samples over its calling contexts.
    if (const char *v = env("GPUPROF_PC_COLLECTION")) {
        if (!strcmp(v, "serialized"))
            c.pc_serialized = true;
        else if (strcmp(v, "continuous") != 0)
            log("ignoring GPUPROF_PC_COLLECTION=%s (want continuous or serialized)", v);
    }
    c.pc_get_ms = (uint32_t)env_u64("GPUPROF_PC_GET_MS", 10, 0, 60000);
    c.pc_buffer_pcs = (uint32_t)env_u64("GPUPROF_PC_BUFFER_PCS", 10000, 16, 1u << 22);
    // 32 MB instead of CUPTI's 512 MB: measured on the H100 (gpu-check pcsweep) to
    // cut the serialized collection's cost by 11-23% of the wall time with no
    // sample dropped, stall_exec's 13.7 M samples of 100 ms kernels included.
    c.pc_hwbuf_mb = (uint32_t)env_u64("GPUPROF_PC_HWBUF_MB", 32, 0, 1u << 16);
    c.pc_sleep_ms = (uint32_t)env_u64("GPUPROF_PC_SLEEP_MS", 0, 0, 60000);
    c.exit_timeout_s = (uint32_t)env_u64("GPUPROF_EXIT_TIMEOUT_S", 60, 1, 86400);
    c.seed = env_u64("GPUPROF_SEED", 0, 0, UINT64_MAX);
    (void)driver_version(); // read now, not inside a CUDA callback
    uint64_t seed = c.seed ? c.seed : (now_ns() ^ ((uint64_t)getpid() << 32));
    g_rng_state.store(seed);
}

std::string library_dir() {
    Dl_info info;
    if (dladdr((void *)&library_dir, &info) && info.dli_fname) {
        std::string p = info.dli_fname;
        size_t s = p.rfind('/');
        if (s != std::string::npos) return p.substr(0, s);
    }
    return ".";
}

/* ------------------------------------------------------------------ */
/* Output                                                             */
/* ------------------------------------------------------------------ */

namespace {

struct Item {
    uint8_t *data;
    size_t len;
    uint32_t frames; // whole frames in data (a chunked module is several)
};

// count_frames walks the frame headers of a buffer of whole frames.
uint32_t count_frames(const uint8_t *p, size_t n) {
    uint32_t c = 0;
    for (size_t off = 0; off + GPW_FRAME_HEADER_SIZE <= n; c++) off += GPW_FRAME_HEADER_SIZE + gpw_load_u32(p + off + 4);
    return c;
}

struct Output {
    std::mutex mu;
    std::condition_variable cv;
    std::condition_variable space; // the writer took the queue: room again
    bool congested = false;        // a bounded wait timed out: drop until half empty
    std::deque<Item> q;
    size_t qbytes = 0;
    std::vector<uint8_t> hello;
    bool hello_set = false;
    bool finishing = false;
    bool finished = false;
    int exit_code = -1;
    std::atomic<bool> dead{false};
    std::atomic<bool> started{false};
    int fd = -1;
    bool is_socket = false;
    uint64_t frames = 0;           // frames written (writer thread)
    uint64_t drop_records = 0;     // pending DROPPED counts (under mu)
    uint64_t drop_bytes = 0;
    uint64_t drop_pc_samples = 0;  // pending: PC samples the hardware dropped (under mu)
    uint64_t total_drop_records = 0;
    // Time accounts for the exit line (GPUPROF_STATS): producers held
    // back by a full queue, the writer inside write/send, bytes written.
    std::atomic<uint64_t> wait_ns{0}, waits{0};
    uint64_t write_ns = 0, written = 0; // writer thread only
    std::thread th;
    std::mutex done_mu;
    std::condition_variable done_cv;
};

Output &O() {
    static Output *o = new Output(); // never destroyed: used from exit handlers
    return *o;
}

std::atomic<uint64_t> g_drain_ns{0}, g_drains{0}, g_drain_records{0};
// What the device measured (gp_ctl.waited_ns): with two halves the host's
// drain time is no longer time the GPU stood still.
std::atomic<uint64_t> g_device_wait_ns{0};
std::atomic<uint64_t> g_stat_ns[ST_N], g_stat_n[ST_N];
uint64_t g_started_ns = 0; // out_start: the library's lifetime in the account

static uint64_t mono_ns() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

// write_iov writes the n buffers of iov whole, in order: one writev (a
// sendmsg without SIGPIPE on a socket) for many queued items, so the
// writer does not first copy each item into a batch (1.9 GB a run for the
// largest streams), going on after partial writes. iov is consumed.
bool write_iov(int fd, bool sock, struct iovec *iov, int n) {
    Output &o = O();
    uint64_t t0 = mono_ns();
    struct Acc {
        Output &o;
        uint64_t t0;
        ~Acc() { o.write_ns += mono_ns() - t0; }
    } acc{o, t0};
    while (n > 0) {
        ssize_t w;
        if (sock) {
            struct msghdr m;
            memset(&m, 0, sizeof m);
            m.msg_iov = iov;
            m.msg_iovlen = (size_t)n;
            w = sendmsg(fd, &m, MSG_NOSIGNAL);
        } else {
            w = writev(fd, iov, n);
        }
        if (w < 0) {
            if (errno == EINTR) continue;
            return false;
        }
        o.written += (uint64_t)w;
        size_t left = (size_t)w;
        while (n > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (uint8_t *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return true;
}

// write_all writes p[0..n) whole.
bool write_all(int fd, bool sock, const uint8_t *p, size_t n) {
    struct iovec v;
    v.iov_base = (void *)p;
    v.iov_len = n;
    return write_iov(fd, sock, &v, 1);
}

std::string expand_path(const std::string &tmpl) {
    std::string out;
    for (size_t i = 0; i < tmpl.size(); i++) {
        if (tmpl[i] == '%' && i + 1 < tmpl.size()) {
            char c = tmpl[i + 1];
            if (c == 'r') {
                out += g_cfg.rank >= 0 ? std::to_string(g_cfg.rank) : std::string("norank");
                i++;
                continue;
            }
            if (c == 'p') {
                out += std::to_string((long)getpid());
                i++;
                continue;
            }
            if (c == '%') {
                out += '%';
                i++;
                continue;
            }
        }
        out += tmpl[i];
    }
    return out;
}

void writer_main() {
    Output &o = O();
    bool hello_written = false;
    for (;;) {
        std::deque<Item> items;
        bool fin = false;
        int code = -1;
        {
            std::unique_lock<std::mutex> lk(o.mu);
            o.cv.wait(lk, [&] { return o.finishing || (o.hello_set && !o.q.empty()); });
            if (!hello_written && !o.hello_set && o.finishing) {
                // Never learned the GPU: write a HELLO without device fields.
                gpw_hello_t h = {};
                h.rank = g_cfg.rank;
                h.device = -1;
                h.pid = (uint32_t)getpid();
                h.mode = (uint8_t)g_cfg.mode;
                h.block_sampling = g_cfg.mode == GPW_MODE_REDUNDANCY ? g_cfg.block_sampling : 1;
                h.kernel_sampling = hello_kernel_sampling();
                h.start_ns = now_ns();
                char host[256] = {0};
                gethostname(host, sizeof host - 1);
                h.host = host;
                h.gpu = h.gpu_uuid = h.driver = h.cuda = "";
                gpw_buf hb;
                gpw_buf_init(&hb);
                gpw_hello(&hb, &h);
                o.hello.assign(hb.data, hb.data + hb.len);
                gpw_buf_free(&hb);
                o.hello_set = true;
            }
            items.swap(o.q);
            o.qbytes = 0;
            o.space.notify_all();
            fin = o.finishing;
            code = o.exit_code;
        }
        if (!hello_written && !o.dead.load()) {
            if (!write_all(o.fd, o.is_socket, o.hello.data(), o.hello.size())) {
                log("output write failed (%s); profiling data is no longer written", strerror(errno));
                o.dead.store(true);
            } else {
                o.frames++;
            }
            hello_written = true;
        }
        // The queued items go out as they are, up to kIov buffers a call.
        constexpr int kIov = 512;
        struct iovec iov[kIov];
        int niov = 0;
        auto flush = [&] {
            if (niov && !o.dead.load() && !write_iov(o.fd, o.is_socket, iov, niov)) {
                log("output write failed (%s); profiling data is no longer written", strerror(errno));
                o.dead.store(true);
            }
            niov = 0;
        };
        size_t first = 0; // items before this one were written and freed
        for (size_t k = 0; k < items.size(); k++) {
            Item &it = items[k];
            if (o.dead.load()) break;
            o.frames += it.frames;
            iov[niov].iov_base = it.data;
            iov[niov].iov_len = it.len;
            if (++niov == kIov) {
                flush();
                for (; first <= k; first++) free(items[first].data);
            }
        }
        flush();
        for (; first < items.size(); first++) free(items[first].data);
        if (fin) {
            std::unique_lock<std::mutex> lk(o.mu);
            if (!o.q.empty()) continue; // frames queued while we wrote: go round again
            uint64_t dr = o.drop_records, db = o.drop_bytes, dp = o.drop_pc_samples;
            o.drop_records = o.drop_bytes = o.drop_pc_samples = 0;
            lk.unlock();
            if (!o.dead.load()) {
                gpw_buf e;
                gpw_buf_init(&e);
                if (dr || db || dp) {
                    gpw_dropped(&e, dr, db, dp);
                    o.frames++;
                }
                gpw_end(&e, o.frames, code);
                if (!write_all(o.fd, o.is_socket, e.data, e.len)) o.dead.store(true);
                gpw_buf_free(&e);
            }
            if (o.fd >= 0) {
                if (!o.is_socket) fsync(o.fd);
                close(o.fd);
                o.fd = -1;
            }
            break;
        }
    }
    {
        std::lock_guard<std::mutex> lk(o.done_mu);
        o.finished = true;
    }
    o.done_cv.notify_all();
}

} // namespace

uint64_t stat_clock() { return mono_ns(); }

void stat_time(StatKind k, uint64_t ns) {
    g_stat_ns[k] += ns;
    g_stat_n[k]++;
}

void stat_drain(uint64_t ns, uint64_t records) {
    g_drain_ns += ns;
    g_drains++;
    g_drain_records += records;
}

void stat_device_wait(uint64_t ns) { g_device_wait_ns += ns; }

bool out_start() {
    Output &o = O();
    if (o.started.load()) return o.fd >= 0;
    o.started.store(true);
    g_started_ns = mono_ns();
    if (!g_cfg.socket_path.empty()) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un sa;
        memset(&sa, 0, sizeof sa);
        sa.sun_family = AF_UNIX;
        std::string p = expand_path(g_cfg.socket_path);
        if (fd >= 0 && p.size() < sizeof sa.sun_path) {
            memcpy(sa.sun_path, p.c_str(), p.size() + 1);
            if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
                o.fd = fd;
                o.is_socket = true;
            } else {
                log("cannot connect to GPUPROF_SOCKET=%s: %s", p.c_str(), strerror(errno));
                close(fd);
            }
        } else if (fd >= 0) {
            log("GPUPROF_SOCKET path too long: %s", p.c_str());
            close(fd);
        }
    }
    if (o.fd < 0 && !g_cfg.record_path.empty()) {
        std::string p = expand_path(g_cfg.record_path);
        int fd = open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd >= 0) {
            o.fd = fd;
            o.is_socket = false;
        } else {
            log("cannot open GPUPROF_RECORD=%s: %s", p.c_str(), strerror(errno));
        }
    }
    if (o.fd < 0) {
        log("no output (set GPUPROF_SOCKET or GPUPROF_RECORD); the application runs unprofiled");
        o.dead.store(true);
        return false;
    }
    o.th = std::thread(writer_main);
    return true;
}

bool out_alive() {
    Output &o = O();
    return o.fd >= 0 && !o.dead.load() && !o.finishing;
}

void out_push(gpw_buf *frame, bool droppable, uint64_t records) {
    Output &o = O();
    if (frame->oom || frame->len == 0) {
        if (frame->oom) log("out of memory while building a frame; dropped");
        gpw_buf_free(frame);
        return;
    }
    if (o.fd < 0 || o.dead.load()) {
        gpw_buf_free(frame);
        return;
    }
    std::unique_lock<std::mutex> lk(o.mu);
    if (o.finishing) {
        gpw_buf_free(frame);
        return;
    }
    // A full queue first holds the application back for a bounded time (the
    // collector is usually only briefly behind); when that wait times out,
    // frames are dropped, and counted, until the queue is half empty again,
    // so a stuck collector costs one wait, not one per frame.
    if (droppable && o.congested && o.qbytes <= g_cfg.queue_bytes / 2) o.congested = false;
    if (droppable && !o.congested && g_cfg.queue_wait_ms > 0 && o.qbytes + frame->len > g_cfg.queue_bytes) {
        uint64_t t0 = mono_ns();
        bool room = o.space.wait_for(lk, std::chrono::milliseconds(g_cfg.queue_wait_ms), [&] {
            return o.finishing || o.dead.load() || o.qbytes + frame->len <= g_cfg.queue_bytes;
        });
        o.wait_ns += mono_ns() - t0;
        o.waits++;
        if (!room) o.congested = true;
        if (o.finishing || o.dead.load()) {
            gpw_buf_free(frame);
            return;
        }
    }
    if (droppable && o.qbytes + frame->len > g_cfg.queue_bytes) {
        o.drop_records += records;
        o.drop_bytes += frame->len;
        if (o.total_drop_records == 0) log("output queue full: dropping records (counted in DROPPED frames)");
        o.total_drop_records += records;
        gpw_buf_free(frame);
        return;
    }
    if ((o.drop_records || o.drop_bytes || o.drop_pc_samples) && o.qbytes + frame->len <= g_cfg.queue_bytes) {
        gpw_buf d;
        gpw_buf_init(&d);
        gpw_dropped(&d, o.drop_records, o.drop_bytes, o.drop_pc_samples);
        if (!d.oom) {
            o.q.push_back(Item{d.data, d.len, 1});
            o.qbytes += d.len;
            o.drop_records = o.drop_bytes = o.drop_pc_samples = 0;
        } else {
            gpw_buf_free(&d);
        }
    }
    o.q.push_back(Item{frame->data, frame->len, count_frames(frame->data, frame->len)});
    o.qbytes += frame->len;
    gpw_buf_init(frame); // ownership moved
    lk.unlock();
    o.cv.notify_one();
}

void out_set_hello(const gpw_hello_t &h) {
    Output &o = O();
    gpw_buf b;
    gpw_buf_init(&b);
    gpw_hello(&b, &h);
    {
        std::lock_guard<std::mutex> lk(o.mu);
        if (!o.hello_set && !b.oom) {
            o.hello.assign(b.data, b.data + b.len);
            o.hello_set = true;
        }
    }
    gpw_buf_free(&b);
    o.cv.notify_one();
}

bool out_hello_set() {
    Output &o = O();
    std::lock_guard<std::mutex> lk(o.mu);
    return o.hello_set;
}

void out_pc_samples_dropped(uint64_t n) {
    if (n == 0) return;
    Output &o = O();
    std::lock_guard<std::mutex> lk(o.mu);
    o.drop_pc_samples += n;
}

void out_records_dropped(uint64_t n) {
    if (n == 0) return;
    Output &o = O();
    std::lock_guard<std::mutex> lk(o.mu);
    o.drop_records += n;
    o.total_drop_records += n;
}

void out_finish(int exit_code) {
    Output &o = O();
    if (!o.th.joinable()) return;
    size_t queued;
    {
        std::lock_guard<std::mutex> lk(o.mu);
        if (o.finishing) return;
        o.finishing = true;
        o.space.notify_all();
        o.exit_code = exit_code;
        queued = o.qbytes;
    }
    // What the application's exit waits for: the queue still to be written.
    uint64_t t0 = mono_ns();
    o.cv.notify_one();
    std::unique_lock<std::mutex> lk(o.done_mu);
    if (o.done_cv.wait_for(lk, std::chrono::seconds(g_cfg.exit_timeout_s), [&] { return o.finished; })) {
        lk.unlock();
        o.th.join();
        if (g_cfg.verbose || g_cfg.stats)
            log("time: %llu trace buffers drained (%llu records) in %.3f s while the GPU waited; producers waited %.3f s "
                "for queue room (%llu times); writer %.3f s in write for %.1f MB; drains took %.3f s; "
                "exit waited %.3f s for the writer (%.1f MB queued)",
                (unsigned long long)g_drains.load(), (unsigned long long)g_drain_records.load(),
                g_device_wait_ns.load() / 1e9,
                o.wait_ns.load() / 1e9, (unsigned long long)o.waits.load(), o.write_ns / 1e9, o.written / 1e6,
                g_drain_ns.load() / 1e9, (mono_ns() - t0) / 1e9, queued / 1e6);
        if (g_cfg.verbose || g_cfg.stats) {
            static const char *names[ST_N] = {"module loads", "re-patch", "unpatch", "launch begin",
                                              "traced launch end", "untraced launch end"};
            char line[512];
            int n = snprintf(line, sizeof line, "callbacks:");
            for (int k = 0; k < ST_N && n > 0 && (size_t)n < sizeof line; k++)
                n += snprintf(line + n, sizeof line - n, "%s %s %.3f s (%llu)", k ? "," : "", names[k],
                              g_stat_ns[k].load() / 1e9, (unsigned long long)g_stat_n[k].load());
            log("%s; library alive %.3f s", line, (mono_ns() - g_started_ns) / 1e9);
        }
    } else {
        log("writer did not finish within %u s; the stream may be truncated", g_cfg.exit_timeout_s);
        lk.unlock();
        o.th.detach();
    }
}

/* ------------------------------------------------------------------ */
/* HELLO                                                              */
/* ------------------------------------------------------------------ */

static std::string driver_version_uncached() {
    // The kernel module's version file first (no library calls), then NVML.
    FILE *f = fopen("/proc/driver/nvidia/version", "r");
    if (f) {
        char line[512];
        std::string out;
        if (fgets(line, sizeof line, f)) {
            // "NVRM version: NVIDIA UNIX [Open ]Kernel Module [for x86_64]  580.159.04  Release Build ..."
            // The version is the first token that starts with a digit and has a dot.
            for (char *tok = strtok(line, " \t\n"); tok; tok = strtok(nullptr, " \t\n")) {
                if (tok[0] >= '0' && tok[0] <= '9' && strchr(tok, '.')) {
                    out = tok;
                    break;
                }
            }
        }
        fclose(f);
        if (!out.empty()) return out;
    }
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h) {
        typedef int (*init_t)(void);
        typedef int (*ver_t)(char *, unsigned int);
        init_t init = (init_t)dlsym(h, "nvmlInit_v2");
        ver_t ver = (ver_t)dlsym(h, "nvmlSystemGetDriverVersion");
        char buf[96] = {0};
        if (init && ver && init() == 0 && ver(buf, sizeof buf) == 0 && buf[0]) return buf;
    }
    return "";
}

static std::string driver_version() {
    static std::string v = driver_version_uncached();
    return v;
}

bool stream_capturing(CUstream s) {
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    return cuStreamIsCapturing(s, &st) == CUDA_SUCCESS && st != CU_STREAM_CAPTURE_STATUS_NONE;
}

std::string device_uuid(CUdevice dev) {
    CUuuid u;
    if (cuDeviceGetUuid_v2(&u, dev) != CUDA_SUCCESS) return "";
    const unsigned char *b = (const unsigned char *)u.bytes;
    char s[64];
    snprintf(s, sizeof s, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
             b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    return s;
}

// CUPTI's PC sampling serves one process per GPU. Under a job with more
// ranks than GPUs the first process to claim a GPU samples it and the
// others give kernel times only: the claim is an exclusive lock on a file
// named by the user, the job and the GPU, held until the process exits
// (the kernel releases it even on a crash). GPUPROF_PCS_POLICY=all makes
// every process try, as before.
bool pcs_claim(CUdevice dev) {
    static std::mutex mu;
    static std::unordered_map<std::string, bool> claims;
    const char *pol = getenv("GPUPROF_PCS_POLICY");
    if (pol && strcmp(pol, "all") == 0) return true;
    if (pol && strcmp(pol, "none") == 0) return false; // kernel times only: a timing run
    std::string uuid = device_uuid(dev);
    if (uuid.empty()) return true;
    std::lock_guard<std::mutex> lk(mu);
    auto it = claims.find(uuid);
    if (it != claims.end()) return it->second;
    const char *tmp = getenv("TMPDIR");
    const char *job = getenv("GPUPROF_JOB");
    char path[1024];
    snprintf(path, sizeof path, "%s/gpuprof-%u-%s-%s.pcs", tmp && *tmp ? tmp : "/tmp", (unsigned)getuid(),
             job && *job ? job : "local", uuid.c_str());
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    bool mine = fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0; // the fd stays open: the lock lives with the process
    if (fd >= 0 && !mine) close(fd);
    if (fd < 0) mine = true; // no lock file: nothing to coordinate with
    if (!mine) log("PC sampling of %s is left to the process that claimed it first; this one gives kernel times", uuid.c_str());
    claims[uuid] = mine;
    return mine;
}

void hello_from_device(CUdevice dev) {
    if (out_hello_set()) return;
    static std::mutex mu;
    std::lock_guard<std::mutex> lk(mu);
    if (out_hello_set()) return;
    char name[256] = {0};
    cuDeviceGetName(name, sizeof name - 1, dev);
    std::string uuid = device_uuid(dev);
    int major = 0, minor = 0;
    cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    int drv = 0;
    cuDriverGetVersion(&drv);
    // The toolkit the library was built with, and the CUDA version the driver
    // supports, e.g. "13.0" or "13.0 (driver supports 13.1)".
    char cuda[64];
    int tk = CUDA_VERSION;
    if (drv && drv != tk)
        snprintf(cuda, sizeof cuda, "%d.%d (driver supports %d.%d)", tk / 1000, (tk % 1000) / 10, drv / 1000,
                 (drv % 1000) / 10);
    else
        snprintf(cuda, sizeof cuda, "%d.%d", tk / 1000, (tk % 1000) / 10);
    std::string driver = driver_version();
    char host[256] = {0};
    vlog("device: %s, driver %s, CUDA %s, sm %d%d", name, driver.c_str(), cuda, major, minor);
    gethostname(host, sizeof host - 1);
    static uint64_t start = now_ns();
    gpw_hello_t h = {};
    h.flags = 0;
    if (g_cfg.mode == GPW_MODE_PCSAMPLING)
        h.flags = !pcs_claim(dev) ? GPW_HELLO_PCS_ELSEWHERE : g_cfg.pc_serialized ? 0 : GPW_HELLO_PCS_CONTINUOUS;
    h.device = (int32_t)dev;
    // The analysis takes its GPU spec from these, not from the compute
    // capability alone. Attributes by number: CUDA 13 deprecates the clock
    // rates' names, and a driver without one leaves it 0.
    auto attr = [dev](int a) -> uint32_t {
        int v = 0;
        return cuDeviceGetAttribute(&v, (CUdevice_attribute)a, dev) == CUDA_SUCCESS && v > 0 ? (uint32_t)v : 0;
    };
    h.sm_count = attr(16);       // MULTIPROCESSOR_COUNT
    h.clock_khz = attr(13);      // CLOCK_RATE
    h.mem_clock_khz = attr(36);  // MEMORY_CLOCK_RATE
    h.mem_bus_bits = attr(37);   // GLOBAL_MEMORY_BUS_WIDTH
    h.l2_bytes = attr(38);       // L2_CACHE_SIZE
    h.threads_per_sm = attr(39); // MAX_THREADS_PER_MULTIPROCESSOR
    h.smem_per_sm = attr(81);    // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
    h.regs_per_sm = attr(82);    // MAX_REGISTERS_PER_MULTIPROCESSOR
    size_t mem = 0;
    if (cuDeviceTotalMem(&mem, dev) == CUDA_SUCCESS) h.mem_bytes = mem;
    h.rank = g_cfg.rank;
    h.pid = (uint32_t)getpid();
    h.mode = (uint8_t)g_cfg.mode;
    h.block_sampling = g_cfg.mode == GPW_MODE_REDUNDANCY ? g_cfg.block_sampling : 1;
    h.kernel_sampling = hello_kernel_sampling();
    h.start_ns = start;
    h.host = host;
    h.gpu = name;
    h.gpu_uuid = uuid.c_str();
    h.driver = driver.c_str();
    h.cuda = cuda;
    h.sm = (uint16_t)(major * 10 + minor);
    out_set_hello(h);
}

/* ------------------------------------------------------------------ */
/* Host modules and calling contexts                                  */
/* ------------------------------------------------------------------ */

namespace {

struct Range {
    uint64_t lo, hi;
};

std::mutex g_host_mu;
std::set<std::pair<std::string, uint64_t>> g_host_seen;
std::vector<Range> g_tool_ranges; // our library, the Sanitizer, CUPTI, the driver
std::unordered_map<uint64_t, uint64_t> g_ctx_counts;

bool is_tool_library(const std::string &path) {
    size_t s = path.rfind('/');
    std::string base = s == std::string::npos ? path : path.substr(s + 1);
    return base.find("libgpuprof_inject") == 0 || base.find("libsanitizer") == 0 || base.find("libcupti") == 0 ||
           base.find("libcuda.so") == 0 || base.find("libTreeLauncherTargetInjection") == 0;
}

std::string build_id(struct dl_phdr_info *info) {
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) &ph = info->dlpi_phdr[i];
        if (ph.p_type != PT_NOTE) continue;
        const uint8_t *p = (const uint8_t *)(info->dlpi_addr + ph.p_vaddr);
        size_t left = ph.p_memsz;
        while (left >= sizeof(ElfW(Nhdr))) {
            const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
            size_t nsz = (nh->n_namesz + 3) & ~(size_t)3, dsz = (nh->n_descsz + 3) & ~(size_t)3;
            size_t total = sizeof(ElfW(Nhdr)) + nsz + dsz;
            if (total > left) break;
            const char *name = (const char *)(p + sizeof(ElfW(Nhdr)));
            if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && memcmp(name, "GNU", 4) == 0) {
                const uint8_t *d = p + sizeof(ElfW(Nhdr)) + nsz;
                std::string hex;
                char tmp[3];
                for (uint32_t k = 0; k < nh->n_descsz; k++) {
                    snprintf(tmp, sizeof tmp, "%02x", d[k]);
                    hex += tmp;
                }
                return hex;
            }
            p += total;
            left -= total;
        }
    }
    return "";
}

std::string self_exe() {
    char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) return "";
    buf[n] = 0;
    return buf;
}

int phdr_cb(struct dl_phdr_info *info, size_t, void *data) {
    auto *frames = (std::vector<gpw_buf> *)data;
    std::string path = info->dlpi_name ? info->dlpi_name : "";
    if (path.empty()) {
        // The main program comes first with an empty name; the vDSO has none either.
        static bool main_done = false;
        if (main_done) return 0;
        main_done = true;
        path = self_exe();
        if (path.empty()) return 0;
    }
    uint64_t base = (uint64_t)info->dlpi_addr;
    std::vector<uint64_t> segs;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) &ph = info->dlpi_phdr[i];
        if (ph.p_type != PT_LOAD) continue;
        segs.push_back(base + ph.p_vaddr);
        segs.push_back(ph.p_memsz);
    }
    auto key = std::make_pair(path, base);
    if (g_host_seen.count(key)) return 0;
    g_host_seen.insert(key);
    if (is_tool_library(path))
        for (size_t i = 0; i + 1 < segs.size(); i += 2) g_tool_ranges.push_back(Range{segs[i], segs[i] + segs[i + 1]});
    gpw_buf b;
    gpw_buf_init(&b);
    gpw_host_module(&b, base, path.c_str(), build_id(info).c_str(), (uint16_t)(segs.size() / 2), segs.data());
    frames->push_back(b);
    return 0;
}

} // namespace

void host_modules_scan() {
    std::vector<gpw_buf> frames;
    {
        std::lock_guard<std::mutex> lk(g_host_mu);
        dl_iterate_phdr(phdr_cb, &frames);
    }
    for (gpw_buf &b : frames) out_push(&b, false, 0);
}

// unwind_walk collects return addresses with the DWARF unwinder, and keeps
// the frame pointer of the last frame it reached.
struct UnwindWalk {
    void **pcs;
    int n, max;
    uintptr_t last_ip, last_fp;
};

_Unwind_Reason_Code unwind_step(struct _Unwind_Context *ctx, void *arg) {
    UnwindWalk *w = (UnwindWalk *)arg;
    int before = 0;
    uintptr_t ip = _Unwind_GetIPInfo(ctx, &before);
    if (ip == 0 || w->n >= w->max) return _URC_END_OF_STACK;
    w->pcs[w->n++] = (void *)ip;
    w->last_ip = ip;
    w->last_fp = _Unwind_GetGR(ctx, 6); // rbp (x86-64 DWARF register 6)
    return _URC_NO_REASON;
}

thread_local uintptr_t t_stack_lo = 0, t_stack_hi = 0;

// unwind walks the calling thread's stack. The DWARF unwinder stops at code
// without unwind information; JIT code such as CPython's perf trampolines
// (PYTHONPERFSUPPORT=1: one per Python function call, named in
// /tmp/perf-PID.map) has none, but keeps a frame pointer, as the
// interpreter does: from there the walk follows the frame pointers, inside
// the thread's stack and strictly outward, so that the Python frames above
// a launch are kept. Code in a mapped file that merely lacks unwind
// information is not walked this way: its rbp need not be a frame pointer.
int unwind(void **pcs, int max) {
    UnwindWalk w = {pcs, 0, max, 0, 0};
    _Unwind_Backtrace(unwind_step, &w);
    if (w.n == 0 || w.n >= max || w.last_fp == 0) return w.n;
    Dl_info info;
    if (dladdr((void *)w.last_ip, &info) != 0) return w.n; // in a file: a real end
    if (t_stack_hi == 0) {
        pthread_attr_t a;
        void *base = nullptr;
        size_t size = 0;
        if (pthread_getattr_np(pthread_self(), &a) == 0) {
            pthread_attr_getstack(&a, &base, &size);
            pthread_attr_destroy(&a);
        }
        t_stack_lo = (uintptr_t)base;
        t_stack_hi = (uintptr_t)base + size;
    }
    uintptr_t fp = w.last_fp;
    while (w.n < max && fp >= t_stack_lo && fp + 16 <= t_stack_hi && (fp & 7) == 0) {
        uintptr_t next = ((uintptr_t *)fp)[0], ret = ((uintptr_t *)fp)[1];
        if (ret == 0) break;
        pcs[w.n++] = (void *)ret;
        if (next <= fp) break;
        fp = next;
    }
    return w.n;
}

size_t host_backtrace(uint64_t *pcs, size_t max) {
    void *raw[256];
    int n = unwind(raw, 256);
    int i = 0;
    {
        std::lock_guard<std::mutex> lk(g_host_mu);
        // Drop the leading frames inside the tool libraries (this library,
        // the Sanitizer or CUPTI, the driver): the first frame kept is the
        // application's (or the CUDA runtime's, linked into it) call site.
        for (; i < n; i++) {
            uint64_t a = (uint64_t)(uintptr_t)raw[i];
            bool tool = false;
            for (const Range &r : g_tool_ranges)
                if (a >= r.lo && a < r.hi) {
                    tool = true;
                    break;
                }
            if (!tool) break;
        }
    }
    size_t k = 0;
    for (; i < n && k < max; i++) pcs[k++] = (uint64_t)(uintptr_t)raw[i];
    return k;
}

uint64_t hash_frames(const uint64_t *pcs, size_t n) { return gpw_fnv1a64(pcs, n * sizeof(uint64_t)); }

/* Kernel sampling applies to the redundancy pass, and to PC sampling in
 * serialized collection (sampling started and stopped around the chosen
 * launches); the other passes observe every launch. */
uint32_t hello_kernel_sampling() {
    if (g_cfg.mode == GPW_MODE_REDUNDANCY) return g_cfg.kernel_sampling;
    if (g_cfg.mode == GPW_MODE_PCSAMPLING && g_cfg.pc_serialized) return g_cfg.kernel_sampling;
    return 1;
}

/* Communication kernels spin on flags and buffers their peers write. Traced,
 * every poll is a record and the patched code runs the transfer many times
 * slower while the peers wait for it: under DDP over NCCL the training
 * did not finish. They are timed, never value-traced (docs/inject.md). */
bool comm_kernel(const char *name) {
    if (!name || g_cfg.trace_comm) return false;
    if (name[0] == '_' && name[1] == 'Z') { // mangled at top level: _Z31ncclDevKernel_...
        name += 2;
        while (*name >= '0' && *name <= '9') name++;
    }
    return strncmp(name, "nccl", 4) == 0 || strncmp(name, "nvshmem", 7) == 0;
}

bool kernel_sample(uint64_t context_hash) {
    std::lock_guard<std::mutex> lk(g_host_mu);
    uint64_t k = ++g_ctx_counts[context_hash]; // 1-based instance number
    return ((k - 1) % g_cfg.kernel_sampling) == 0;
}

/* ------------------------------------------------------------------ */
/* Cubins                                                             */
/* ------------------------------------------------------------------ */

static bool elf_functions(const uint8_t *d, size_t size, std::vector<ElfFunc> &out) {
    if (size < sizeof(Elf64_Ehdr) || memcmp(d, ELFMAG, SELFMAG) != 0 || d[EI_CLASS] != ELFCLASS64) return false;
    Elf64_Ehdr eh;
    memcpy(&eh, d, sizeof eh);
    if (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shoff == 0 || eh.e_shoff > size ||
        (uint64_t)eh.e_shnum * sizeof(Elf64_Shdr) > size - eh.e_shoff)
        return false;
    std::vector<Elf64_Shdr> sh(eh.e_shnum);
    memcpy(sh.data(), d + eh.e_shoff, eh.e_shnum * sizeof(Elf64_Shdr));
    for (const Elf64_Shdr &s : sh) {
        if (s.sh_type != SHT_SYMTAB || s.sh_entsize != sizeof(Elf64_Sym)) continue;
        if (s.sh_link >= sh.size()) continue;
        const Elf64_Shdr &str = sh[s.sh_link];
        if (s.sh_offset > size || s.sh_size > size - s.sh_offset || str.sh_offset > size ||
            str.sh_size > size - str.sh_offset)
            continue;
        size_t nsym = s.sh_size / sizeof(Elf64_Sym);
        for (size_t i = 0; i < nsym; i++) {
            Elf64_Sym sym;
            memcpy(&sym, d + s.sh_offset + i * sizeof(Elf64_Sym), sizeof sym);
            if (ELF64_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_shndx == SHN_UNDEF) continue;
            if (sym.st_name >= str.sh_size) continue;
            const char *nm = (const char *)(d + str.sh_offset + sym.st_name);
            size_t maxlen = str.sh_size - sym.st_name;
            size_t len = strnlen(nm, maxlen);
            if (len == 0 || len == maxlen) continue;
            out.push_back(ElfFunc{std::string(nm, len), sym.st_size});
        }
        return true;
    }
    return true; // an ELF without a symbol table
}

bool cubin_functions(const void *data, size_t size, std::vector<ElfFunc> &out) {
    const uint8_t *d = (const uint8_t *)data;
    if (elf_functions(d, size, out)) return true;
    // A fatbin: look for an embedded, uncompressed ELF image.
    for (size_t off = 0; off + 4 < size; off += 8) {
        if (memcmp(d + off, ELFMAG, SELFMAG) == 0 && elf_functions(d + off, size - off, out)) return true;
    }
    return false;
}

namespace {
std::mutex g_mod_mu;
std::unordered_set<uint64_t> g_sent_keys;
uint64_t g_next_module = 1;
std::atomic<uint32_t> g_next_function{1};
std::atomic<uint64_t> g_next_alloc{1};
} // namespace

uint64_t emit_module(const void *cubin, size_t size) {
    uint64_t key = gpw_fnv1a64(cubin, size);
    uint64_t id;
    bool send_bytes;
    {
        std::lock_guard<std::mutex> lk(g_mod_mu);
        id = g_next_module++;
        send_bytes = g_sent_keys.insert(key).second;
    }
    // Cubins over a frame go in MODULE_DATA chunks (framework libraries
    // load cubins of over 100 MB); the wire's size field stops at 4 GiB.
    if (size > UINT32_MAX) {
        log("cubin of %zu bytes is over the stream's 4 GiB module limit; sent without bytes", size);
        send_bytes = false;
    }
    gpw_buf b;
    gpw_buf_init(&b);
    gpw_module(&b, id, key, (uint32_t)size, send_bytes, cubin);
    out_push(&b, false, 0);
    return id;
}

uint32_t new_function_id() { return g_next_function.fetch_add(1); }
uint64_t new_alloc_id() { return g_next_alloc.fetch_add(1); }

void emit_function(uint32_t fid, uint64_t module_id, uint64_t pc, uint64_t size, const std::string &name) {
    gpw_buf b;
    gpw_buf_init(&b);
    gpw_function(&b, fid, module_id, pc, (uint32_t)(size > UINT32_MAX ? UINT32_MAX : size), name.c_str());
    out_push(&b, false, 0);
}

} // namespace gp
