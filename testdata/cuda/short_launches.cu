// short_launches: the overhead shape of a short program, hundreds of
// launches of several small kernels in a fraction of a second. Each round
// launches five kernels over n elements (an add, a scale, a subtraction, a
// three-point stencil and a copy); `rounds` rounds (default 100: 500
// launches). No twin: the program is for docs/overhead.md's table.
//
// Each round leaves y one larger (y += 1; z = 2y; y = z - y), v a copy of
// y, and w a ramp the stencil keeps (the average of a ramp's neighbours is
// the ramp): after R rounds y = v = R and w = i, exactly in float.
//
// Usage: short_launches [n] [rounds]  (default 65536 elements, 100 rounds)
#include "common.cuh"

__global__ void add_one(float *y, const float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i];
}

__global__ void twice(const float *y, float *z, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) z[i] = 2.0f * y[i];
}

__global__ void subtract(float *y, const float *z, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = z[i] - y[i];
}

__global__ void ramp_stencil(const float *w, float *t, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    t[i] = (i == 0 || i == n - 1) ? w[i] : 0.5f * (w[i - 1] + w[i + 1]);
}

__global__ void copy(const float *y, float *v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) v[i] = y[i];
}

int main(int argc, char **argv) {
    Args a = parse_args(argc, argv, 1L << 16, 100);
    int n = (int)a.n;
    std::vector<float> ones(n, 1.0f), zeros(n, 0.0f), ramp(n);
    for (int i = 0; i < n; i++) ramp[i] = (float)i;
    float *x, *y, *z, *v, *w, *t;
    for (float **p : {&x, &y, &z, &v, &w, &t}) CK(cudaMalloc(p, n * sizeof(float)));
    CK(cudaMemcpy(x, ones.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(y, zeros.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(w, ramp.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    unsigned g = grid_for(n, 256);
    // One round of five launches per call, back to back: the mean time of
    // a round. time_avg_ms runs one warm-up round before the timed ones.
    double ms = time_avg_ms([&] {
        add_one<<<g, 256>>>(y, x, n);
        twice<<<g, 256>>>(y, z, n);
        subtract<<<g, 256>>>(y, z, n);
        ramp_stencil<<<g, 256>>>(w, t, n);
        std::swap(w, t);
        copy<<<g, 256>>>(y, v, n);
    }, a.reps);
    std::vector<float> hy(n), hv(n), hw(n);
    CK(cudaMemcpy(hy.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hv.data(), v, n * sizeof(float), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hw.data(), w, n * sizeof(float), cudaMemcpyDeviceToHost));
    float rounds = (float)(a.reps + 1);
    bool ok = true;
    for (int i = 0; i < n && ok; i++) ok = hy[i] == rounds && hv[i] == rounds && hw[i] == (float)i;
    report("short_launches", "only", a, (float)ms, ok);
    return ok ? 0 : 1;
}
