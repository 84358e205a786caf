// wide_type: class labels take 4 distinct values (0..3) but are stored and
// loaded as 64-bit integers (GVProf "type overuse" / few distinct values in a
// wide type). Fix: a narrower type, uint8_t labels move 8x fewer label bytes.
#include "common.cuh"

template <typename L>
__global__ void classify(const float *x, L *label, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        label[i] = (L)((v > 0.25f) + (v > 0.5f) + (v > 0.75f)); // 4 distinct values
    }
}

template <typename L>
__global__ void apply_class_weight(const L *label, const float *x, const float *table, float *y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * table[label[i]];
}

int main(int argc, char **argv) {
    Args a = parse_args(argc, argv, 1L << 26, 30);
    std::vector<float> hx(a.n), hy(a.n);
    const float ht[4] = {0.5f, 1.5f, 2.5f, 3.5f};
    for (long i = 0; i < a.n; i++) hx[i] = (float)(hash32((uint32_t)i) % 1024) / 1024.0f;
    float *x, *y, *table;
    long long *l64;
    uint8_t *l8;
    CK(cudaMalloc(&x, a.n * sizeof(float)));
    CK(cudaMalloc(&y, a.n * sizeof(float)));
    CK(cudaMalloc(&table, sizeof ht));
    CK(cudaMalloc(&l64, a.n * sizeof(long long)));
    CK(cudaMalloc(&l8, a.n));
    CK(cudaMemcpy(x, hx.data(), a.n * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(table, ht, sizeof ht, cudaMemcpyHostToDevice));
    unsigned g = grid_for(a.n, 256);
    bool all = true;
    for (int variant = 1; variant <= 2; variant++) {
        if (!want(a, variant)) continue;
        CK(cudaMemset(y, 0xff, a.n * sizeof(float)));
        float ms = time_median([&] {
            if (variant == 1) {
                classify<long long><<<g, 256>>>(x, l64, a.n);
                apply_class_weight<long long><<<g, 256>>>(l64, x, table, y, a.n);
            } else {
                classify<uint8_t><<<g, 256>>>(x, l8, a.n);
                apply_class_weight<uint8_t><<<g, 256>>>(l8, x, table, y, a.n);
            }
        }, a.reps);
        CK(cudaMemcpy(hy.data(), y, a.n * sizeof(float), cudaMemcpyDeviceToHost));
        bool ok = true;
        for (long i = 0; i < a.n && ok; i++) {
            float v = hx[i];
            ok = hy[i] == v * ht[(v > 0.25f) + (v > 0.5f) + (v > 0.75f)];
        }
        report("wide_type", variant == 1 ? "bad" : "fixed", a, ms, ok);
        all &= ok;
    }
    return all ? 0 : 1;
}
