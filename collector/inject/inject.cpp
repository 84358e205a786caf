/*
 * inject.cpp - entry points of libgpuprof_inject.so.
 *
 * Loaded by the CUDA driver through CUDA_INJECTION64_PATH, which calls
 * InitializeInjection during cuInit; or preloaded with LD_PRELOAD, where a
 * constructor calls it before main. Either way the mode chosen by
 * GPUPROF_MODE subscribes one measurement pass: the Sanitizer API for
 * redundancy, CUPTI for pcsampling and hybrid.
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include <mutex>

#include "common.h"
#include "passes.h"

namespace {

std::mutex g_init_mu;
bool g_initialized = false;
bool g_pass_ok = false;

void exit_handler(int status, void *) {
    using namespace gp;
    if (g_pass_ok) {
        if (g_cfg.mode == GPW_MODE_REDUNDANCY)
            sanitizer_atexit();
        else
            cupti_atexit();
    }
    host_modules_scan();
    out_finish(status);
}

} // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
    using namespace gp;
    std::lock_guard<std::mutex> lk(g_init_mu);
    if (g_initialized) return 1;
    g_initialized = true;
    load_config();
    if (!out_start()) return 1; // nowhere to write: stay out of the way
    host_modules_scan();
    uint64_t warm[4];
    host_backtrace(warm, 4); // loads the unwinder now, not inside a CUDA callback
    g_pass_ok = g_cfg.mode == GPW_MODE_REDUNDANCY ? sanitizer_init() : cupti_init();
    if (!g_pass_ok) log("measurement pass could not start; the stream will hold no GPU data");
    on_exit(exit_handler, nullptr);
    return 1;
}

// LD_PRELOAD use: the library is loaded before main. Subscribing to the
// Sanitizer or CUPTI from a constructor (before the driver is loaded, under the
// loader's lock) can deadlock, so the constructor only points the driver's own
// injection hook at this library (unless the user set one) and asks for eager
// module loading; the driver then calls InitializeInjection at cuInit, exactly
// as with CUDA_INJECTION64_PATH. An explicit setting in the environment wins.
__attribute__((constructor)) static void gpuprof_preload_ctor(void) {
    const char *pre = getenv("LD_PRELOAD");
    if (!pre || !strstr(pre, "libgpuprof_inject")) return;
    setenv("CUDA_MODULE_LOADING", "EAGER", 0);
    Dl_info info;
    if (!getenv("CUDA_INJECTION64_PATH") && dladdr((void *)&InitializeInjection, &info) && info.dli_fname)
        setenv("CUDA_INJECTION64_PATH", info.dli_fname, 0);
}
