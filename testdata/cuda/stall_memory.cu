// stall_memory: each thread follows 4 pointer chains one after the other; every
// load depends on the previous one and the table is larger than L2, so warps
// wait on global memory (long scoreboard stalls) with one load in flight. Fix:
// walk the 4 independent chains together, 4 loads in flight per thread.
#include "common.cuh"

#define CHAINS 4

__global__ void chase_sequential(const int *next, const int *start, int *out, int steps) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int sum = 0;
    for (int c = 0; c < CHAINS; c++) {
        int j = start[t * CHAINS + c];
        for (int s = 0; s < steps; s++) j = next[j]; // dependent global load
        sum += j;
    }
    out[t] = sum;
}

__global__ void chase_interleaved(const int *next, const int *start, int *out, int steps) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int j0 = start[t * CHAINS], j1 = start[t * CHAINS + 1], j2 = start[t * CHAINS + 2], j3 = start[t * CHAINS + 3];
    for (int s = 0; s < steps; s++) {
        j0 = next[j0];
        j1 = next[j1];
        j2 = next[j2];
        j3 = next[j3];
    }
    out[t] = j0 + j1 + j2 + j3;
}

int main(int argc, char **argv) {
    Args a = parse_args(argc, argv, 1L << 24, 20); // n = table entries
    int steps = argc > 4 ? atoi(argv[4]) : 256;
    int n = (int)a.n;
    // threads: 2 blocks of 128 per SM on an H100 (132 SMs), fewer for small tables
    int threads = std::min(132 * 256, std::max(128, n / 512 / 128 * 128));
    std::vector<int> next(n), start((size_t)threads * CHAINS), out(threads);
    for (int i = 0; i < n; i++) next[i] = i;
    for (int i = n - 1; i > 0; i--) { // Sattolo: one random cycle through the table
        int j = (int)(hash32((uint32_t)i * 2654435761u) % (uint32_t)i);
        std::swap(next[i], next[j]);
    }
    for (size_t k = 0; k < start.size(); k++) start[k] = (int)(hash32((uint32_t)k + 12345u) % (uint32_t)n);
    int *dnext, *dstart, *dout;
    CK(cudaMalloc(&dnext, (size_t)n * sizeof(int)));
    CK(cudaMalloc(&dstart, start.size() * sizeof(int)));
    CK(cudaMalloc(&dout, threads * sizeof(int)));
    CK(cudaMemcpy(dnext, next.data(), (size_t)n * sizeof(int), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dstart, start.data(), start.size() * sizeof(int), cudaMemcpyHostToDevice));
    bool all = true;
    for (int variant = 1; variant <= 2; variant++) {
        if (!want(a, variant)) continue;
        CK(cudaMemset(dout, 0xff, threads * sizeof(int)));
        float ms = time_median([&] {
            if (variant == 1)
                chase_sequential<<<threads / 128, 128>>>(dnext, dstart, dout, steps);
            else
                chase_interleaved<<<threads / 128, 128>>>(dnext, dstart, dout, steps);
        }, a.reps);
        CK(cudaMemcpy(out.data(), dout, threads * sizeof(int), cudaMemcpyDeviceToHost));
        bool ok = true;
        for (int t = 0; t < threads && ok; t += 61) {
            int sum = 0;
            for (int c = 0; c < CHAINS; c++) {
                int j = start[(size_t)t * CHAINS + c];
                for (int s = 0; s < steps; s++) j = next[j];
                sum += j;
            }
            ok = out[t] == sum;
        }
        report("stall_memory", variant == 1 ? "bad" : "fixed", a, ms, ok);
        all &= ok;
    }
    return all ? 0 : 1;
}
