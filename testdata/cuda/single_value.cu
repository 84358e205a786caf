// single_value: every element of `w` is set to one value (GVProf "single value"
// pattern) and then loaded back. Fix: constant replacement, the value becomes a
// kernel argument and `w` disappears.
#include "common.cuh"

__global__ void fill_weights(float *w, long n, float v) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) w[i] = v; // single-value store
}

__global__ void scale_by_weights(const float *x, const float *w, float *y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * w[i]; // single-value load of w[i]
}

__global__ void scale_by_constant(const float *x, float v, float *y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * v;
}

int main(int argc, char **argv) {
    Args a = parse_args(argc, argv, 1L << 26, 50);
    const float v = 0.5f;
    std::vector<float> hx(a.n), hy(a.n);
    for (long i = 0; i < a.n; i++) hx[i] = (float)(hash32((uint32_t)i) % 1000) * 0.25f;
    float *x, *w, *y;
    CK(cudaMalloc(&x, a.n * sizeof(float)));
    CK(cudaMalloc(&w, a.n * sizeof(float)));
    CK(cudaMalloc(&y, a.n * sizeof(float)));
    CK(cudaMemcpy(x, hx.data(), a.n * sizeof(float), cudaMemcpyHostToDevice));
    unsigned g = grid_for(a.n, 256);
    bool all = true;
    for (int variant = 1; variant <= 2; variant++) {
        if (!want(a, variant)) continue;
        CK(cudaMemset(y, 0xff, a.n * sizeof(float)));
        float ms = time_median([&] {
            if (variant == 1) {
                fill_weights<<<g, 256>>>(w, a.n, v);
                scale_by_weights<<<g, 256>>>(x, w, y, a.n);
            } else {
                scale_by_constant<<<g, 256>>>(x, v, y, a.n);
            }
        }, a.reps);
        CK(cudaMemcpy(hy.data(), y, a.n * sizeof(float), cudaMemcpyDeviceToHost));
        bool ok = true;
        for (long i = 0; i < a.n && ok; i++) ok = hy[i] == hx[i] * v;
        report("single_value", variant == 1 ? "bad" : "fixed", a, ms, ok);
        all &= ok;
    }
    return all ? 0 : 1;
}
