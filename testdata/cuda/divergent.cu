// divergent: even and odd elements take different code paths, so every warp
// runs both paths one after the other (branch divergence). Fix: remap threads
// to elements so that the 32 lanes of a warp all take the same path.
#include "common.cuh"

__device__ __forceinline__ float path_even(float v, int iters) {
    for (int k = 0; k < iters; k++) v = v * 0.9999f + 0.5f;
    return v;
}

__device__ __forceinline__ float path_odd(float v, int iters) {
    for (int k = 0; k < iters; k++) v = v * 1.0001f - 0.25f;
    return v;
}

__global__ void transform_divergent(const float *x, float *y, int n, int iters) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (i & 1) // lanes of one warp disagree
        y[i] = path_odd(x[i], iters);
    else
        y[i] = path_even(x[i], iters);
}

__global__ void transform_uniform(const float *x, float *y, int n, int iters) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int warp = t >> 5, lane = t & 31;
    int i = 2 * ((warp >> 1) * 32 + lane) + (warp & 1); // even warps: even elements
    if (i >= n) return;
    if (i & 1) // uniform within a warp
        y[i] = path_odd(x[i], iters);
    else
        y[i] = path_even(x[i], iters);
}

int main(int argc, char **argv) {
    Args a = parse_args(argc, argv, 1L << 22, 100);
    int iters = argc > 4 ? atoi(argv[4]) : 256;
    int n = (int)(a.n / 64 * 64);
    if (n == 0) n = 64;
    std::vector<float> hx(n), hy(n);
    for (int i = 0; i < n; i++) hx[i] = (float)(i % 113) * 0.125f;
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
                transform_divergent<<<g, 256>>>(x, y, n, iters);
            else
                transform_uniform<<<g, 256>>>(x, y, n, iters);
        }, a.reps);
        CK(cudaMemcpy(hy.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost));
        bool ok = true;
        for (int i = 0; i < n && ok; i += 31) {
            float v = hx[i];
            for (int k = 0; k < iters; k++) v = (i & 1) ? v * 1.0001f - 0.25f : v * 0.9999f + 0.5f;
            ok = close_enough(hy[i], v, 1e-4f);
        }
        report("divergent", variant == 1 ? "bad" : "fixed", a, ms, ok);
        all &= ok;
    }
    return all ? 0 : 1;
}
