// no_gain: every thread loads the same scale factor from global memory
// (single-value load redundancy: GVProf would suggest constant replacement),
// but the kernel spends its time in a long dependent sin/fma loop and the one
// load per thread hits L1/L2 under it. Fix: pass the scale as a kernel
// argument. Expected gain: none ("nothing big to gain"): the advice's
// estimate should be about 1.0x.
#include "common.cuh"

__global__ void polish_loaded(const float *x, const float *scale, float *y, int n, int iters) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float s = scale[0]; // one value, loaded by every thread
    float v = x[i];
    for (int k = 0; k < iters; k++) v = fmaf(sinf(v), 0.5f, s);
    y[i] = v;
}

__global__ void polish_constant(const float *x, float s, float *y, int n, int iters) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    for (int k = 0; k < iters; k++) v = fmaf(sinf(v), 0.5f, s);
    y[i] = v;
}

int main(int argc, char **argv) {
    Args a = parse_args(argc, argv, 1L << 20, 100);
    int iters = argc > 4 ? atoi(argv[4]) : 256;
    if (iters <= 0) iters = 1;
    int n = (int)a.n;
    const float hs = 0.25f;
    std::vector<float> hx(n), hy(n);
    for (int i = 0; i < n; i++) hx[i] = (float)(i % 1000) * 0.001f;
    float *x, *scale, *y;
    CK(cudaMalloc(&x, n * sizeof(float)));
    CK(cudaMalloc(&scale, sizeof(float)));
    CK(cudaMalloc(&y, n * sizeof(float)));
    CK(cudaMemcpy(x, hx.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(scale, &hs, sizeof(float), cudaMemcpyHostToDevice));
    unsigned g = grid_for(n, 256);
    bool all = true;
    for (int variant = 1; variant <= 2; variant++) {
        if (!want(a, variant)) continue;
        CK(cudaMemset(y, 0xff, n * sizeof(float)));
        float ms = time_median([&] {
            if (variant == 1)
                polish_loaded<<<g, 256>>>(x, scale, y, n, iters);
            else
                polish_constant<<<g, 256>>>(x, hs, y, n, iters);
        }, a.reps);
        CK(cudaMemcpy(hy.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost));
        bool ok = true;
        for (int i = 0; i < n && ok; i += 101) {
            float v = hx[i];
            for (int k = 0; k < iters; k++) v = fmaf(sinf(v), 0.5f, hs);
            ok = close_enough(hy[i], v, 1e-3f);
        }
        report("no_gain", variant == 1 ? "bad" : "fixed", a, ms, ok);
        all &= ok;
    }
    return all ? 0 : 1;
}
