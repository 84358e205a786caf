// bank_conflict: a 32x32 shared-memory tile read by columns; with a row of 32
// floats every lane of a warp hits the same bank (32-way conflict). Fix: pad
// each row to 33 floats.
#include "common.cuh"

template <int PAD>
__global__ void transpose_tile(const float *in, float *out, int w) {
    __shared__ float tile[32][32 + PAD];
    int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 32 + threadIdx.y;
    for (int j = 0; j < 32; j += 8) tile[threadIdx.y + j][threadIdx.x] = in[(size_t)(y + j) * w + x];
    __syncthreads();
    x = blockIdx.y * 32 + threadIdx.x;
    y = blockIdx.x * 32 + threadIdx.y;
    for (int j = 0; j < 32; j += 8)
        out[(size_t)(y + j) * w + x] = tile[threadIdx.x][threadIdx.y + j]; // column read: bank conflicts if PAD == 0
}

int main(int argc, char **argv) {
    Args a = parse_args(argc, argv, 8192, 50); // n = matrix width
    int w = (int)(a.n / 32 * 32);
    if (w == 0) w = 32;
    size_t nn = (size_t)w * w;
    std::vector<float> hin(nn), hout(nn);
    for (size_t i = 0; i < nn; i++) hin[i] = (float)(hash32((uint32_t)i) % 4096);
    float *in, *out;
    CK(cudaMalloc(&in, nn * sizeof(float)));
    CK(cudaMalloc(&out, nn * sizeof(float)));
    CK(cudaMemcpy(in, hin.data(), nn * sizeof(float), cudaMemcpyHostToDevice));
    dim3 grid(w / 32, w / 32), block(32, 8);
    bool all = true;
    for (int variant = 1; variant <= 2; variant++) {
        if (!want(a, variant)) continue;
        CK(cudaMemset(out, 0xff, nn * sizeof(float)));
        float ms = time_median([&] {
            if (variant == 1)
                transpose_tile<0><<<grid, block>>>(in, out, w);
            else
                transpose_tile<1><<<grid, block>>>(in, out, w);
        }, a.reps);
        CK(cudaMemcpy(hout.data(), out, nn * sizeof(float), cudaMemcpyDeviceToHost));
        bool ok = true;
        for (int r = 0; r < w && ok; r++)
            for (int c = 0; c < w && ok; c++) ok = hout[(size_t)c * w + r] == hin[(size_t)r * w + c];
        report("bank_conflict", variant == 1 ? "bad" : "fixed", a, ms, ok);
        all &= ok;
    }
    return all ? 0 : 1;
}
