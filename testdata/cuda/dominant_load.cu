// dominant_load: 95% of `a` is zero (whole 1024-element chunks), yet every
// thread also loads b[i]. GVProf sees a dominant value (0) at the load of a[i].
// Fix: conditional load, b[i] is read only where a[i] != 0.
#include "common.cuh"

__global__ void sparse_mul(const float *a, const float *b, float *y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = a[i] * b[i]; // a[i] is 0 for 95% of i
}

__global__ void sparse_mul_conditional(const float *a, const float *b, float *y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) {
        float av = a[i];
        y[i] = av != 0.0f ? av * b[i] : 0.0f;
    }
}

int main(int argc, char **argv) {
    Args a = parse_args(argc, argv, 1L << 26, 50);
    std::vector<float> ha(a.n), hb(a.n), hy(a.n);
    for (long i = 0; i < a.n; i++) {
        bool nonzero = ((i >> 10) % 20) == 3; // 1 chunk of 1024 elements in 20 (5%)
        ha[i] = nonzero ? 1.0f + (float)(hash32((uint32_t)i) % 100) : 0.0f;
        hb[i] = (float)(hash32((uint32_t)i * 7u + 1u) % 1000) * 0.5f;
    }
    float *da, *db, *dy;
    CK(cudaMalloc(&da, a.n * sizeof(float)));
    CK(cudaMalloc(&db, a.n * sizeof(float)));
    CK(cudaMalloc(&dy, a.n * sizeof(float)));
    CK(cudaMemcpy(da, ha.data(), a.n * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db, hb.data(), a.n * sizeof(float), cudaMemcpyHostToDevice));
    unsigned g = grid_for(a.n, 256);
    bool all = true;
    for (int variant = 1; variant <= 2; variant++) {
        if (!want(a, variant)) continue;
        CK(cudaMemset(dy, 0xff, a.n * sizeof(float)));
        float ms = time_median([&] {
            if (variant == 1)
                sparse_mul<<<g, 256>>>(da, db, dy, a.n);
            else
                sparse_mul_conditional<<<g, 256>>>(da, db, dy, a.n);
        }, a.reps);
        CK(cudaMemcpy(hy.data(), dy, a.n * sizeof(float), cudaMemcpyDeviceToHost));
        bool ok = true;
        for (long i = 0; i < a.n && ok; i++) ok = hy[i] == ha[i] * hb[i];
        report("dominant_load", variant == 1 ? "bad" : "fixed", a, ms, ok);
        all &= ok;
    }
    return all ? 0 : 1;
}
