// reload_compute: a compute-bound loop reloads its 8 coefficients from global
// memory in every iteration (temporal load redundancy that GVProf reports), but
// the loads hit L1 and hide under the sin/cos work. Fix: keep the coefficients
// in registers. Expected gain: small ("nothing big to gain").
#include "common.cuh"

__global__ void evolve_reload(const float *x, const float *coef, float *y, int n, int iters) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    for (int k = 0; k < iters; k++) {
        float c = coef[k & 7]; // reloaded every iteration: y may alias coef
        v = 0.3f * (sinf(v) * c + cosf(v * c));
        y[i] = v;
    }
}

__global__ void evolve_registers(const float *x, const float *coef, float *y, int n, int iters) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float c[8];
#pragma unroll
    for (int j = 0; j < 8; j++) c[j] = coef[j];
    float v = x[i];
    for (int k = 0; k < iters; k += 8) {
#pragma unroll
        for (int j = 0; j < 8; j++) {
            v = 0.3f * (sinf(v) * c[j] + cosf(v * c[j]));
            y[i] = v;
        }
    }
}

int main(int argc, char **argv) {
    Args a = parse_args(argc, argv, 1L << 20, 100);
    int iters = argc > 4 ? atoi(argv[4]) / 8 * 8 : 64;
    if (iters <= 0) iters = 8;
    int n = (int)a.n;
    std::vector<float> hx(n), hy(n);
    const float hc[8] = {0.9f, 1.1f, 0.7f, 1.3f, 0.8f, 1.2f, 1.0f, 0.95f};
    for (int i = 0; i < n; i++) hx[i] = (float)(i % 1000) * 0.001f;
    float *x, *coef, *y;
    CK(cudaMalloc(&x, n * sizeof(float)));
    CK(cudaMalloc(&coef, sizeof hc));
    CK(cudaMalloc(&y, n * sizeof(float)));
    CK(cudaMemcpy(x, hx.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(coef, hc, sizeof hc, cudaMemcpyHostToDevice));
    unsigned g = grid_for(n, 256);
    bool all = true;
    for (int variant = 1; variant <= 2; variant++) {
        if (!want(a, variant)) continue;
        CK(cudaMemset(y, 0xff, n * sizeof(float)));
        float ms = time_median([&] {
            if (variant == 1)
                evolve_reload<<<g, 256>>>(x, coef, y, n, iters);
            else
                evolve_registers<<<g, 256>>>(x, coef, y, n, iters);
        }, a.reps);
        CK(cudaMemcpy(hy.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost));
        bool ok = true;
        for (int i = 0; i < n && ok; i += 101) {
            float v = hx[i];
            for (int k = 0; k < iters; k++) v = 0.3f * (sinf(v) * hc[k & 7] + cosf(v * hc[k & 7]));
            ok = close_enough(hy[i], v, 1e-3f);
        }
        report("reload_compute", variant == 1 ? "bad" : "fixed", a, ms, ok);
        all &= ok;
    }
    return all ? 0 : 1;
}
