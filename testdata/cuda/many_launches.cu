// many_launches: the overhead shape of a time-stepping code, a microsecond
// kernel launched thousands of times. One Jacobi step of a 2-D five-point
// stencil on an nx x ny grid (n points, ny = 256), ping-ponging between two
// buffers: each launch is a few microseconds on an H100, so a profiler's
// per-launch cost, not the GPU work, sets the wall time. No twin: the
// program is for docs/overhead.md's table.
//
// The grid starts as f(x, y) = x + y with fixed borders; the average of a
// linear function's four neighbours is the function itself, exactly in
// float for these integers, so after any number of steps the grid is
// unchanged: the check is exact.
//
// Usage: many_launches [n] [launches]  (default 262144 points, 2500 launches)
#include "common.cuh"

__global__ void jacobi_step(const float *in, float *out, int nx, int ny) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y;
    if (x >= nx || y >= ny) return;
    int i = y * nx + x;
    if (x == 0 || y == 0 || x == nx - 1 || y == ny - 1) {
        out[i] = in[i];
        return;
    }
    out[i] = 0.25f * (in[i - 1] + in[i + 1] + in[i - nx] + in[i + nx]);
}

int main(int argc, char **argv) {
    Args a = parse_args(argc, argv, 1L << 18, 2500);
    const int ny = 256;
    int nx = (int)std::max(4L, a.n / ny);
    long n = (long)nx * ny;
    std::vector<float> h(n);
    for (int y = 0; y < ny; y++)
        for (int x = 0; x < nx; x++) h[(long)y * nx + x] = (float)(x + y);
    float *b0, *b1;
    CK(cudaMalloc(&b0, n * sizeof(float)));
    CK(cudaMalloc(&b1, n * sizeof(float)));
    CK(cudaMemcpy(b0, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b1, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    dim3 grid(grid_for(nx, 256), ny);
    float *in = b0, *out = b1;
    // One launch per call, back to back: the mean time of one step.
    double ms = time_avg_ms([&] {
        jacobi_step<<<grid, 256>>>(in, out, nx, ny);
        std::swap(in, out);
    }, a.reps);
    CK(cudaMemcpy(h.data(), in, n * sizeof(float), cudaMemcpyDeviceToHost));
    bool ok = true;
    for (int y = 0; y < ny && ok; y++)
        for (int x = 0; x < nx && ok; x++) ok = h[(long)y * nx + x] == (float)(x + y);
    report("many_launches", "only", a, (float)ms, ok);
    return ok ? 0 : 1;
}
