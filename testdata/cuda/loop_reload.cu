// loop_reload: s[0] is loaded again in every iteration because the stores to
// y[i] may alias it (temporal load redundancy: same thread, same address, same
// value), and y[i] is stored in every iteration. Fix: scalar replacement, s[0]
// and the running value live in registers and y[i] is stored once.
#include "common.cuh"

__global__ void accumulate_reload(const float *x, const float *s, float *y, int n, int iters) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    y[i] = x[i];
    for (int k = 0; k < iters; k++) y[i] = y[i] * s[0] + 1.0f; // reloads s[0], stores y[i]
}

__global__ void accumulate_registers(const float *x, const float *s, float *y, int n, int iters) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float sv = s[0], v = x[i];
    for (int k = 0; k < iters; k++) v = v * sv + 1.0f;
    y[i] = v;
}

int main(int argc, char **argv) {
    Args a = parse_args(argc, argv, 1L << 22, 50);
    int iters = argc > 4 ? atoi(argv[4]) : 64;
    int n = (int)a.n;
    std::vector<float> hx(n), hy(n);
    for (int i = 0; i < n; i++) hx[i] = (float)(i % 100);
    float one = 1.0f, *x, *s, *y;
    CK(cudaMalloc(&x, n * sizeof(float)));
    CK(cudaMalloc(&s, sizeof(float)));
    CK(cudaMalloc(&y, n * sizeof(float)));
    CK(cudaMemcpy(x, hx.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(s, &one, sizeof(float), cudaMemcpyHostToDevice));
    unsigned g = grid_for(n, 256);
    bool all = true;
    for (int variant = 1; variant <= 2; variant++) {
        if (!want(a, variant)) continue;
        CK(cudaMemset(y, 0xff, n * sizeof(float)));
        float ms = time_median([&] {
            if (variant == 1)
                accumulate_reload<<<g, 256>>>(x, s, y, n, iters);
            else
                accumulate_registers<<<g, 256>>>(x, s, y, n, iters);
        }, a.reps);
        CK(cudaMemcpy(hy.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost));
        bool ok = true;
        for (int i = 0; i < n && ok; i++) ok = hy[i] == hx[i] + (float)iters;
        report("loop_reload", variant == 1 ? "bad" : "fixed", a, ms, ok);
        all &= ok;
    }
    return all ? 0 : 1;
}
