/*
 * common.h - parts of the injection library that are neither Sanitizer nor
 * CUPTI: configuration, the output queue and its writer thread, host calling
 * contexts, host modules, cubin symbol tables, the HELLO frame.
 *
 * This header must not include sanitizer.h or cupti.h (they cannot share a
 * translation unit); cuda.h is fine.
 */
#ifndef GPUPROF_COMMON_H
#define GPUPROF_COMMON_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#include <string>
#include <vector>

#include "gpuprof_wire.h"

namespace gp {

struct Config {
    int mode = GPW_MODE_REDUNDANCY;      // GPUPROF_MODE
    uint32_t block_sampling = 50;        // GPUPROF_BLOCK_SAMPLING (P)
    uint32_t kernel_sampling = 1;        // GPUPROF_KERNEL_SAMPLING (K)
    int32_t rank = -1;                   // GPUPROF_RANK, OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK, SLURM_PROCID
    std::string socket_path;             // GPUPROF_SOCKET
    std::string record_path;             // GPUPROF_RECORD (%r rank, %p pid)
    std::string patch_fatbin;            // GPUPROF_PATCH_FATBIN (default: next to the library)
    size_t queue_bytes = 256u << 20;     // GPUPROF_QUEUE_MB
    uint32_t queue_wait_ms = 2000;       // GPUPROF_QUEUE_WAIT_MS: bounded wait on a full queue before dropping
    uint32_t device_records = 16384;     // GPUPROF_DEVICE_RECORDS (record slots per trace buffer)
    uint64_t device_timeout_ns = 5000000000ull; // GPUPROF_DEVICE_TIMEOUT_MS
    bool sync_all = true;                // GPUPROF_SYNC (1: wait for every launch, gives host-timed durations)
    bool skip_unpatch = true;            // GPUPROF_SKIP=unpatch|data (how launches left out by kernel sampling run)
    uint32_t spaces = 0xf;               // GPUPROF_SPACES (letters g s l b)
    int pc_period = 15;                  // GPUPROF_PC_PERIOD (log2 cycles, 5..31; 0 = CUPTI default, 2^11)
    bool pc_serialized = false;          // GPUPROF_PC_COLLECTION=continuous|serialized
    uint32_t pc_get_ms = 10;             // GPUPROF_PC_GET_MS: continuous mode reads CUPTI's samples at a launch at most this often
    uint32_t pc_buffer_pcs = 10000;      // PCs per CUPTI PC sampling buffer
    uint32_t pc_hwbuf_mb = 32;           // GPUPROF_PC_HWBUF_MB (CUPTI's hardware buffer; 0 = CUPTI's 512 MB)
    uint32_t pc_sleep_ms = 0;            // GPUPROF_PC_SLEEP_MS (CUPTI's worker wake-up; 0 = CUPTI's 100 ms)
    uint64_t seed = 0;                   // GPUPROF_SEED (0: from time and pid)
    uint32_t exit_timeout_s = 60;        // GPUPROF_EXIT_TIMEOUT_S
    bool verbose = false;                // GPUPROF_VERBOSE
    bool compact = true;                 // GPUPROF_COMPACT=0: plain lane entries only
    bool staged = true;                  // GPUPROF_STAGED=0: convert full trace arrays while the GPU waits
    uint32_t converters = 4;             // GPUPROF_CONVERTERS: threads converting staged trace arrays
    uint32_t copy_threads = 4;           // GPUPROF_COPY_THREADS: threads copying a full trace array out of pinned memory
    bool stats = false;                  // GPUPROF_STATS: the time account at exit (also with verbose)
    bool trace_comm = false;             // GPUPROF_TRACE_COMM=1: value-trace communication kernels too
};

extern Config g_cfg;

void load_config();
void log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void vlog(const char *fmt, ...) __attribute__((format(printf, 1, 2))); // only with GPUPROF_VERBOSE
uint64_t now_ns();  // CLOCK_REALTIME, Unix ns
uint64_t rng_next(); // per-process PRNG (seeded from GPUPROF_SEED)

/* ---- output ---- */
// Opens the socket or file named by the configuration and starts the writer
// thread. Returns false if there is nowhere to write (the library then stays
// passive).
bool out_start();
bool out_alive();
// Queue one finished frame (the buffer's bytes; ownership moves to the queue).
// A droppable frame (ACCESS, PC_SAMPLES, INSTR_COUNTS) is dropped and counted
// when the queue is over its byte bound; other frames always go in.
void out_push(gpw_buf *frame, bool droppable, uint64_t records);
// The writer holds everything back until the HELLO is known.
void out_set_hello(const gpw_hello_t &h);
bool out_hello_set();
// Counts PC samples the sampling hardware dropped; they go out in the next
// DROPPED frame.
void out_pc_samples_dropped(uint64_t n);
// Counts access records the library lost after the device wrote them (a
// record it could not convert); they go out in the next DROPPED frame.
void out_records_dropped(uint64_t n);
// Writes pending frames, DROPPED if needed and END, then stops the writer.
void out_finish(int exit_code);
/* Where the library's own time goes:
 * host time spent on full trace buffers (converting them, or copying them
 * out to convert later) while the GPU waits. GPUPROF_STATS or
 * GPUPROF_VERBOSE prints the account at exit. */
void stat_drain(uint64_t ns, uint64_t records);
void stat_device_wait(uint64_t ns); // time the device's trace buffers stood full (gp_ctl.waited_ns)
/* Time the callbacks spend in the application's threads, by what they do,
 * for the same account: where a run's wall time goes beyond the kernels. */
enum StatKind {
    ST_MODULE_LOAD,     // a module's load callback (its patching included)
    ST_PATCH,           // re-patching a module before a traced launch
    ST_UNPATCH,         // unpatching it before an untraced one
    ST_LAUNCH_BEGIN,    // the launch-begin callback (backtrace, sampling, set-up)
    ST_SYNC_TRACED,     // waiting at a traced launch's end (the kernel's run included)
    ST_SYNC_UNTRACED,   // waiting at an untraced launch's end (GPUPROF_SYNC=1)
    ST_N
};
uint64_t stat_clock();  // CLOCK_MONOTONIC ns
void stat_time(StatKind k, uint64_t ns);

/* ---- HELLO ---- */
// Fills and sets the HELLO from a device (called at context creation).
void hello_from_device(CUdevice dev);
// pcs_claim says whether this process may PC-sample the device (one
// process per GPU can; the first to claim it does).
bool pcs_claim(CUdevice dev);
// stream_capturing says whether s is being captured into a CUDA graph: a
// launch there does not run now (its kernel runs at the graph's launches),
// and copies or waits on the stream would break the capture.
bool stream_capturing(CUstream s);

/* ---- host side ---- */
void host_modules_scan();                             // emits HOST_MODULE for new mappings
// The most host frames a launch or allocation keeps (Python code under
// PYTHONPERFSUPPORT=1 adds several native frames per Python call).
constexpr size_t kMaxHostFrames = 128;
size_t host_backtrace(uint64_t *pcs, size_t max);     // calling context, tool frames removed
uint64_t hash_frames(const uint64_t *pcs, size_t n);  // for kernel-sampling contexts
bool kernel_sample(uint64_t context_hash);            // instance 1 of a context and every K-th after
bool comm_kernel(const char *name);                   // NCCL's or NVSHMEM's kernel: timed, never traced
uint32_t hello_kernel_sampling();                     // the K that the stream's launches were chosen by

/* ---- GPU modules ---- */
struct ElfFunc {
    std::string name;
    uint64_t size;
};
// Function symbols (STT_FUNC, defined) of a cubin; false if not an ELF cubin.
bool cubin_functions(const void *data, size_t size, std::vector<ElfFunc> &out);
// Assigns a module id and queues MODULE (bytes only once per content).
uint64_t emit_module(const void *cubin, size_t size);
uint32_t new_function_id();
uint64_t new_alloc_id();
void emit_function(uint32_t fid, uint64_t module_id, uint64_t pc, uint64_t size, const std::string &name);

// Library directory (for the default patch fatbin path).
std::string library_dir();

} // namespace gp

#endif
