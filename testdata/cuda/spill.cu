// spill: 40 live accumulators per thread under __launch_bounds__(256, 8), i.e.
// at most 32 registers: the compiler spills to local memory (STL/LDL inside the
// loop). Fix: __launch_bounds__(256, 2) gives the registers back, no spills.
#include "common.cuh"

#define NACC 40

__device__ __forceinline__ float run_accumulators(float v, int iters) {
    float acc[NACC];
#pragma unroll
    for (int j = 0; j < NACC; j++) acc[j] = v + (float)j;
    for (int k = 0; k < iters; k++) {
#pragma unroll
        for (int j = 0; j < NACC; j++) acc[j] = acc[j] * 0.999f + acc[(j + 7) % NACC] * 0.001f;
    }
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < NACC; j++) s += acc[j];
    return s;
}

__global__ void __launch_bounds__(256, 8) accumulators_spilled(const float *x, float *y, int n, int iters) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = run_accumulators(x[i], iters); // register-limited: local memory spills
}

__global__ void __launch_bounds__(256, 2) accumulators_in_registers(const float *x, float *y, int n, int iters) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = run_accumulators(x[i], iters);
}

int main(int argc, char **argv) {
    Args a = parse_args(argc, argv, 1L << 20, 20);
    int iters = argc > 4 ? atoi(argv[4]) : 64;
    int n = (int)a.n;
    std::vector<float> hx(n), hy(n), ref(n);
    for (int i = 0; i < n; i++) hx[i] = (float)(i % 97) * 0.01f;
    float *x, *y;
    CK(cudaMalloc(&x, n * sizeof(float)));
    CK(cudaMalloc(&y, n * sizeof(float)));
    CK(cudaMemcpy(x, hx.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    unsigned g = grid_for(n, 256);
    bool all = true;
    for (int variant = 1; variant <= 2; variant++) {
        if (!want(a, variant)) continue;
        CK(cudaMemset(y, 0xff, n * sizeof(float)));
        float ms = time_median([&] {
            if (variant == 1)
                accumulators_spilled<<<g, 256>>>(x, y, n, iters);
            else
                accumulators_in_registers<<<g, 256>>>(x, y, n, iters);
        }, a.reps);
        CK(cudaMemcpy(hy.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost));
        bool ok = true;
        for (int i = 0; i < n && ok; i += 97) {
            // host reference (no FMA contraction guarantees: compare loosely)
            float acc[NACC];
            for (int j = 0; j < NACC; j++) acc[j] = hx[i] + (float)j;
            for (int k = 0; k < iters; k++)
                for (int j = 0; j < NACC; j++) acc[j] = acc[j] * 0.999f + acc[(j + 7) % NACC] * 0.001f;
            float s = 0.0f;
            for (int j = 0; j < NACC; j++) s += acc[j];
            ok = close_enough(hy[i], s, 1e-4f);
        }
        report("spill", variant == 1 ? "bad" : "fixed", a, ms, ok);
        all &= ok;
    }
    return all ? 0 : 1;
}
