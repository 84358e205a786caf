// stall_exec: 4 dependent multiply-add chains computed one after the other;
// each instruction waits for the previous result (execution dependency stalls,
// "wait"/short latency), and one warp per scheduler cannot hide it. Fix:
// interleave the 4 independent chains (instruction-level parallelism).
#include "common.cuh"

#define CHAINS 4

__global__ void chains_sequential(const float *x, float *y, int iters) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    float sum = 0.0f;
    for (int c = 0; c < CHAINS; c++) {
        float v = x[t] + (float)c;
        for (int k = 0; k < iters; k++) v = v * 0.99995f + 0.25f; // depends on the previous v
        sum += v;
    }
    y[t] = sum;
}

__global__ void chains_interleaved(const float *x, float *y, int iters) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    float v0 = x[t], v1 = x[t] + 1.0f, v2 = x[t] + 2.0f, v3 = x[t] + 3.0f;
    for (int k = 0; k < iters; k++) {
        v0 = v0 * 0.99995f + 0.25f;
        v1 = v1 * 0.99995f + 0.25f;
        v2 = v2 * 0.99995f + 0.25f;
        v3 = v3 * 0.99995f + 0.25f;
    }
    y[t] = ((v0 + v1) + v2) + v3;
}

int main(int argc, char **argv) {
    Args a = parse_args(argc, argv, 132 * 128, 100); // n = threads (one warp per scheduler on an H100)
    int iters = argc > 4 ? atoi(argv[4]) : 16384;
    int n = (int)(a.n / 128 * 128);
    if (n == 0) n = 128;
    std::vector<float> hx(n), hy(n);
    for (int i = 0; i < n; i++) hx[i] = (float)(i % 17);
    float *x, *y;
    CK(cudaMalloc(&x, n * sizeof(float)));
    CK(cudaMalloc(&y, n * sizeof(float)));
    CK(cudaMemcpy(x, hx.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    bool all = true;
    for (int variant = 1; variant <= 2; variant++) {
        if (!want(a, variant)) continue;
        CK(cudaMemset(y, 0xff, n * sizeof(float)));
        float ms = time_median([&] {
            if (variant == 1)
                chains_sequential<<<n / 128, 128>>>(x, y, iters);
            else
                chains_interleaved<<<n / 128, 128>>>(x, y, iters);
        }, a.reps);
        CK(cudaMemcpy(hy.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost));
        bool ok = true;
        const int probe[3] = {0, n / 2 + 5, n - 1}; // a few threads: the host is slow at long chains
        for (int q = 0; q < 3 && ok; q++) {
            int t = probe[q];
            float sum = 0.0f;
            for (int c = 0; c < CHAINS; c++) {
                float v = hx[t] + (float)c;
                for (int k = 0; k < iters; k++) v = v * 0.99995f + 0.25f;
                sum += v;
            }
            ok = close_enough(hy[t], sum, 1e-3f);
        }
        report("stall_exec", variant == 1 ? "bad" : "fixed", a, ms, ok);
        all &= ok;
    }
    return all ? 0 : 1;
}
