// machine: measures the GPU's memory system for gpuprof's estimators. It is
// not a test program with a twin: its kernels are generic probes, unlike any
// program the validation pairs, so that a machine constant taken from here is
// not fitted to a pair. Every measurement prints one line
//   MACHINE probe=<name> <key>=<value> ...
// Times are per launch, averaged over `reps` launches issued back to back
// between two CUDA events (time_avg_ms in common.cuh).
//
// Probes:
//   device      SMs, clocks, L2 size.
//   latency     one thread chasing a random cycle through a table larger
//               than L2: unloaded DRAM latency per dependent load.
//   loaded      every warp walks its own coalesced stream, its next address
//               waiting on its last load (one 128-byte line in flight per
//               warp, `u` lines with u independent streams): time per step
//               is the loaded latency at the bandwidth it achieves; warps
//               per SM from 1 to 64 trace the latency-bandwidth curve.
//   gather      every thread loads `u` random words at a time from a table
//               larger than L2, the next addresses waiting on them: random
//               accesses per ns against the accesses in flight; the highest
//               is the DRAM's random-access ceiling.
//   stream      grid-stride float4 read, write and copy over 1 GiB at full
//               occupancy: the streaming bandwidth ceilings.
//   dispatch    a grid of 2^18 blocks of 256 threads that do nothing: the
//               block dispatch floor.
//   oneshot     one element per thread over 2^26 threads (blocks of 256), a
//               load of `lb` bytes and, where sb > 0, a store of `sb` bytes
//               whose value depends on the load: how short-lived blocks use
//               the bandwidth.
#include "common.cuh"

static int g_sms;

__global__ void chase(const unsigned *next, unsigned start, long hops, unsigned *out) {
    unsigned j = start;
    for (long h = 0; h < hops; h++) j = next[j];
    *out = j;
}

// x is all zeros: adding a loaded value to the next index makes the next
// load wait for this one without changing where it goes.
template <int U>
__global__ void loaded(const float *x, long n, int steps, float *out) {
    long w = (blockIdx.x * (long)blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
    long warps = gridDim.x * (long)blockDim.x / 32;
    long i = w * 32 + lane;
    float s = 0;
#pragma unroll 1
    for (int k = 0; k < steps; k++) {
        float v[U];
#pragma unroll
        for (int u = 0; u < U; u++) v[u] = x[i + u * (n / U)]; // i < n / U
        float t = 0;
#pragma unroll
        for (int u = 0; u < U; u++) t += v[u];
        s += t;
        i += warps * 32 + (long)t;
        if (i >= n / U) i -= n / U;
    }
    if (s != 0) out[0] = s;
}

template <int U>
__global__ void gather(const unsigned *t, unsigned mask, int steps, unsigned *out) {
    unsigned id = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned h = hash32(id * 0x9e3779b9u + 1u), s = 0;
#pragma unroll 1
    for (int k = 0; k < steps; k++) {
        unsigned v = 0;
#pragma unroll
        for (int u = 0; u < U; u++) v += t[hash32(h + u) & mask];
        s += v;
        h = hash32(h + v + (unsigned)k); // the table is zero: v only orders the loads
    }
    if (s != 0) out[id] = s;
}

__global__ void stream_read(const float4 *x, long n4, float *out) {
    float s = 0;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n4; i += gridDim.x * (long)blockDim.x) {
        float4 v = x[i];
        s += v.x + v.y + v.z + v.w;
    }
    if (s != 0) out[0] = s;
}

__global__ void stream_write(float4 *y, long n4) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n4; i += gridDim.x * (long)blockDim.x)
        y[i] = make_float4(1, 2, 3, (float)i);
}

__global__ void stream_copy(const float4 *x, float4 *y, long n4) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n4; i += gridDim.x * (long)blockDim.x)
        y[i] = x[i];
}

__global__ void nothing(int *out) {
    if (threadIdx.x == 1024) out[0] = 1; // never: blockDim is 256
}

template <class S>
__device__ __forceinline__ S widen(unsigned char b) {
    S s;
    memset(&s, 0, sizeof s);
    *(unsigned char *)&s = b;
    return s;
}

template <class L, class S>
__global__ void oneshot(const L *x, S *y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) {
        L v = x[i];
        y[i] = widen<S>(*(const unsigned char *)&v + 1);
    }
}

template <class S>
__global__ void oneshot_store(S *y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = widen<S>((unsigned char)i);
}

template <class L>
__global__ void oneshot_load(const L *x, int *flag, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) {
        L v = x[i];
        if (*(const unsigned char *)&v == 7) flag[0] = 1; // never: x is zero
    }
}

static void device() {
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    int clk = 0, mclk = 0;
    cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, 0);
    cudaDeviceGetAttribute(&mclk, cudaDevAttrMemoryClockRate, 0);
    g_sms = p.multiProcessorCount;
    printf("MACHINE probe=device sms=%d sm_clock_khz=%d mem_clock_khz=%d bus_bits=%d l2_bytes=%d "
           "max_threads_per_sm=%d\n",
           p.multiProcessorCount, clk, mclk, p.memoryBusWidth, p.l2CacheSize, p.maxThreadsPerMultiProcessor);
    printf("MACHINE probe=device_name value=\"%s\"\n", p.name);
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 5;
    device();
    const long N = 1L << 28; // 1 GiB of 4-byte words, 20x the H100's L2
    void *buf, *buf2;
    CK(cudaMalloc(&buf, N * 4));
    CK(cudaMalloc(&buf2, N * 4));
    unsigned *out;
    CK(cudaMalloc(&out, 64L << 20));

    { // latency: a random cycle through 2^26 words (256 MiB)
        const long M = 1L << 26;
        std::vector<unsigned> next(M);
        for (long i = 0; i < M; i++) next[i] = (unsigned)i;
        for (long i = M - 1; i > 0; i--) std::swap(next[i], next[hash32((uint32_t)i * 2654435761u) % (uint32_t)i]);
        CK(cudaMemcpy(buf, next.data(), M * 4, cudaMemcpyHostToDevice));
        const long hops = 100000;
        // Each call starts elsewhere in the cycle: a walk it repeated would
        // find its 100000 lines in L2.
        unsigned call = 0;
        double ms = time_avg_ms([&] { chase<<<1, 1>>>((const unsigned *)buf, hash32(++call) % (uint32_t)M, hops, out); }, 3);
        printf("MACHINE probe=latency hops=%ld ns_per_load=%.1f\n", hops, ms * 1e6 / hops);
    }
    CK(cudaMemset(buf, 0, N * 4));
    CK(cudaMemset(buf2, 0, N * 4));

    // loaded: warps per SM from 1 to 64 (blocks of up to 1024 threads, a
    // block per SM or two), U lines in flight per warp.
    auto loaded_run = [&](auto kern, int U) {
        for (int wps : {1, 2, 4, 8, 16, 32, 48, 64}) {
            int bpsm = wps > 32 ? 2 : 1, threads = wps * 32 / bpsm;
            const int steps = 2000;
            double ms = time_avg_ms([&] { kern<<<g_sms * bpsm, threads>>>((const float *)buf, N, steps, (float *)out); }, reps);
            double ns_step = ms * 1e6 / steps;
            double gbs = (double)g_sms * wps * 128 * U * steps / (ms * 1e6);
            printf("MACHINE probe=loaded lines_per_warp=%d warps_per_sm=%d ns_per_step=%.1f gb_per_s=%.1f\n", U, wps,
                   ns_step, gbs);
        }
    };
    loaded_run(loaded<1>, 1);
    loaded_run(loaded<4>, 4);

    // gather: random 4-byte words from 1 GiB.
    auto gather_run = [&](auto kern, int U) {
        for (int tps : {256, 1024, 2048}) {
            const int steps = 256;
            int blocks = g_sms * tps / 256;
            double ms = time_avg_ms([&] { kern<<<blocks, 256>>>((const unsigned *)buf, (unsigned)(N - 1), steps, out); }, reps);
            double loads = (double)blocks * 256 * steps * U;
            printf("MACHINE probe=gather loads_per_thread=%d threads_per_sm=%d in_flight=%.0f loads_per_ns=%.2f ns_per_step=%.1f\n",
                   U, tps, (double)blocks * 256 * U, loads / (ms * 1e6), ms * 1e6 / steps);
        }
    };
    gather_run(gather<1>, 1);
    gather_run(gather<2>, 2);
    gather_run(gather<4>, 4);
    gather_run(gather<8>, 8);

    { // stream ceilings
        long n4 = N / 4;
        int blocks = g_sms * 8;
        double r = time_avg_ms([&] { stream_read<<<blocks, 256>>>((const float4 *)buf, n4, (float *)out); }, reps);
        double w = time_avg_ms([&] { stream_write<<<blocks, 256>>>((float4 *)buf2, n4); }, reps);
        double c = time_avg_ms([&] { stream_copy<<<blocks, 256>>>((const float4 *)buf, (float4 *)buf2, n4 / 2); }, reps);
        CK(cudaMemset(buf2, 0, N * 4));
        printf("MACHINE probe=stream kind=read gb_per_s=%.1f\n", N * 4.0 / (r * 1e6));
        printf("MACHINE probe=stream kind=write gb_per_s=%.1f\n", N * 4.0 / (w * 1e6));
        printf("MACHINE probe=stream kind=copy gb_per_s=%.1f\n", N * 4.0 / (c * 1e6));
    }
    const long n = 1L << 26;
    unsigned g = grid_for(n, 256);
    {
        double ms = time_avg_ms([&] { nothing<<<g, 256>>>((int *)out); }, reps);
        printf("MACHINE probe=dispatch blocks=%u block_threads=256 us=%.2f ns_per_block_per_sm=%.2f\n", g, ms * 1e3,
               ms * 1e6 * g_sms / g);
    }
    { // one-shot kernels over 2^26 elements: blocks of 256, as many waves as that makes
        auto one = [&](const char *name, int lb, int sb, auto launch) {
            double ms = time_avg_ms(launch, reps);
            double bytes = (double)n * (lb + sb);
            printf("MACHINE probe=oneshot load_bytes=%d store_bytes=%d us=%.2f gb_per_s=%.1f kernel=%s\n", lb, sb, ms * 1e3,
                   bytes / (ms * 1e6), name);
        };
        one("load1", 1, 0, [&] { oneshot_load<unsigned char><<<g, 256>>>((const unsigned char *)buf, (int *)out, n); });
        one("load4", 4, 0, [&] { oneshot_load<float><<<g, 256>>>((const float *)buf, (int *)out, n); });
        one("load8", 8, 0, [&] { oneshot_load<double><<<g, 256>>>((const double *)buf, (int *)out, n); });
        one("load16", 16, 0, [&] { oneshot_load<float4><<<g, 256>>>((const float4 *)buf, (int *)out, n); });
        one("store1", 0, 1, [&] { oneshot_store<unsigned char><<<g, 256>>>((unsigned char *)buf2, n); });
        one("store4", 0, 4, [&] { oneshot_store<float><<<g, 256>>>((float *)buf2, n); });
        one("store16", 0, 16, [&] { oneshot_store<float4><<<g, 256>>>((float4 *)buf2, n); });
        one("load2store2", 2, 2, [&] { oneshot<short, short><<<g, 256>>>((const short *)buf, (short *)buf2, n); });
        one("load8store8", 8, 8, [&] { oneshot<double, double><<<g, 256>>>((const double *)buf, (double *)buf2, n); });
        one("load16store16", 16, 16, [&] { oneshot<float4, float4><<<g, 256>>>((const float4 *)buf, (float4 *)buf2, n); });
        one("load2store8", 2, 8, [&] { oneshot<short, double><<<g, 256>>>((const short *)buf, (double *)buf2, n); });
        one("load8store2", 8, 2, [&] { oneshot<double, short><<<g, 256>>>((const double *)buf, (short *)buf2, n); });
    }
    return 0;
}
