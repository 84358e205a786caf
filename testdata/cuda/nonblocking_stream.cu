// nonblocking_stream: launches on a stream created with
// cudaStreamNonBlocking, timed by events on that stream, as NVIDIA's
// matrixMul sample does. Under value tracing with kernel sampling the
// first launch left out used to hang the program: the library synchronised
// that stream inside the launch callback (docs/inject.md). No twin: the
// program is the self-test's.
//
// Each launch adds 1 to every element: after the warm-up and reps timed
// launches every element is reps + 1, exactly in float.
//
// With a third argument "blocking" the stream is a plain cudaStreamCreate
// one: the first launch left out hung there too (HeCBench's lfib4).
//
// Usage: nonblocking_stream [n] [reps] [blocking]  (default 65536 elements, 30 launches)
#include "common.cuh"

__global__ void add_one(float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += 1.0f;
}

int main(int argc, char **argv) {
    const bool blocking = argc > 3 && !strcmp(argv[3], "blocking");
    if (blocking) argc = 3; // not a variant name for parse_args
    Args a = parse_args(argc, argv, 1L << 16, 30);
    int n = (int)a.n;
    float *y;
    CK(cudaMalloc(&y, n * sizeof(float)));
    CK(cudaMemset(y, 0, n * sizeof(float)));
    CK(cudaDeviceSynchronize());
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, blocking ? cudaStreamDefault : cudaStreamNonBlocking));
    unsigned g = grid_for(n, 256);
    add_one<<<g, 256, 0, s>>>(y, n); // warm-up
    CK(cudaStreamSynchronize(s));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaEventRecord(e0, s));
    for (int i = 0; i < a.reps; i++) add_one<<<g, 256, 0, s>>>(y, n);
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    std::vector<float> hy(n);
    CK(cudaMemcpy(hy.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost));
    bool ok = true;
    for (int i = 0; i < n && ok; i++) ok = hy[i] == (float)(a.reps + 1);
    report("nonblocking_stream", "only", a, ms / a.reps, ok);
    return ok ? 0 : 1;
}
