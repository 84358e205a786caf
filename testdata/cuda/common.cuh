// common.cuh - shared helpers of gpuprof's CUDA test programs.
//
// Every program takes `[n] [reps] [variant]`: the problem size, the timed
// repetitions (after one warm-up run) and which twin to run (both, bad or
// fixed). It checks its own output against a host reference and prints one
// machine-readable line per twin:
//   RESULT name=<program> variant=<bad|fixed> n=<n> reps=<reps> kernel_ms=<median> ok=<0|1>
// kernel_ms is the median over the repetitions of the twin's GPU time per
// repetition, measured with CUDA events. The exit status is 0 only if every
// twin that ran was correct.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cuda_runtime.h>

#define CK(call)                                                                                         \
    do {                                                                                                 \
        cudaError_t e_ = (call);                                                                         \
        if (e_ != cudaSuccess) {                                                                         \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(2);                                                                                     \
        }                                                                                                \
    } while (0)

struct Args {
    long n;
    int reps;
    int variant; // 0 both, 1 bad, 2 fixed
};

static Args parse_args(int argc, char **argv, long default_n, int default_reps) {
    Args a{default_n, default_reps, 0};
    if (argc > 1) a.n = atol(argv[1]);
    if (argc > 2) a.reps = atoi(argv[2]);
    if (argc > 3) a.variant = !strcmp(argv[3], "bad") ? 1 : (!strcmp(argv[3], "fixed") ? 2 : 0);
    if (a.n <= 0 || a.reps <= 0) {
        fprintf(stderr, "usage: %s [n>0] [reps>0] [both|bad|fixed]\n", argv[0]);
        exit(2);
    }
    return a;
}

static bool want(const Args &a, int v) { return a.variant == 0 || a.variant == v; }

// Creates the two events and runs f once, untimed: the warm-up.
template <class F>
static void warm_up(F &f, cudaEvent_t &e0, cudaEvent_t &e1) {
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    f();
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
}

// The milliseconds from e0 to e1, once e1 has completed.
static float elapsed_ms(cudaEvent_t e0, cudaEvent_t e1) {
    CK(cudaEventSynchronize(e1));
    CK(cudaGetLastError());
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    return ms;
}

// One warm-up call, then `reps` timed calls; returns the median in ms.
template <class F>
static float time_median(F f, int reps) {
    cudaEvent_t e0, e1;
    warm_up(f, e0, e1);
    std::vector<float> t;
    for (int i = 0; i < reps; i++) {
        CK(cudaEventRecord(e0));
        f();
        CK(cudaEventRecord(e1));
        t.push_back(elapsed_ms(e0, e1));
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

// One warm-up call, then `reps` calls back to back between two events;
// returns the mean in ms (launch latency overlaps the previous call, as in
// a kernel duration).
template <class F>
static double time_avg_ms(F f, int reps) {
    cudaEvent_t e0, e1;
    warm_up(f, e0, e1);
    CK(cudaEventRecord(e0));
    for (int i = 0; i < reps; i++) f();
    CK(cudaEventRecord(e1));
    double ms = elapsed_ms(e0, e1);
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return ms / reps;
}

static void report(const char *name, const char *variant, const Args &a, float ms, bool ok) {
    printf("RESULT name=%s variant=%s n=%ld reps=%d kernel_ms=%.4f ok=%d\n", name, variant, a.n, a.reps, ms,
           ok ? 1 : 0);
    fflush(stdout);
}

static unsigned grid_for(long n, int block) { return (unsigned)((n + block - 1) / block); }

// Deterministic pseudo-random numbers for inputs.
static inline __host__ __device__ uint32_t hash32(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

static bool close_enough(float got, float want, float rel = 1e-5f) {
    if (std::isnan(got) || std::isnan(want)) return false;
    return std::fabs(got - want) <= rel * std::max(1.0f, std::fabs(want));
}
