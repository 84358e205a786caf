// mpi_imbalance: an MPI-style job in which rank 1 gets twice the elements of
// every other rank, so its kernel runs about twice as long and the others wait
// for it (cross-rank load imbalance). Built with MPI (-DUSE_MPI) when mpicc and
// mpi.h exist; otherwise it reads its rank from the launcher's environment
// (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK, SLURM_PROCID) and makes no MPI
// calls.
#ifdef USE_MPI
#include <mpi.h>
#endif
#include "common.cuh"

__global__ void relax(float *x, long n, int iters) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    for (int k = 0; k < iters; k++) v = v * 0.999f + 0.001f * sinf(v);
    x[i] = v;
}

static int env_int(const char *a, const char *b, const char *c, const char *d, int def) {
    const char *names[] = {a, b, c, d};
    for (const char *nm : names) {
        const char *v = nm ? getenv(nm) : nullptr;
        if (v && *v) return atoi(v);
    }
    return def;
}

int main(int argc, char **argv) {
    int rank = 0, size = 1;
#ifdef USE_MPI
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
#else
    rank = env_int("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID", 0);
    size = env_int("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", nullptr, 1);
#endif
    Args a = parse_args(argc, argv, 1L << 21, 5);
    // Each rank uses GPU (local rank mod GPUs), the usual binding of MPI
    // codes; MPI_IMBALANCE_HEAVY=1,2 names the heavy ranks instead of rank 1
    // (one per GPU when ranks are spread over two).
    int local = env_int("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK", 0);
    int ngpus = 1;
    CK(cudaGetDeviceCount(&ngpus));
    int gpu = ngpus > 0 ? local % ngpus : 0;
    CK(cudaSetDevice(gpu));
    bool heavy = rank == 1;
    if (const char *h = getenv("MPI_IMBALANCE_HEAVY")) {
        heavy = false;
        for (const char *p = h; *p;) {
            char *end;
            long r = strtol(p, &end, 10);
            if (end == p) break;
            heavy = heavy || r == rank;
            p = *end ? end + 1 : end;
        }
    }
    int iters = 64;
    long n = a.n * (heavy ? 2 : 1); // the imbalance
    std::vector<float> hx(n), hy(n);
    for (long i = 0; i < n; i++) hx[i] = (float)(i % 100) * 0.01f;
    float *x;
    CK(cudaMalloc(&x, n * sizeof(float)));
    CK(cudaMemcpy(x, hx.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    unsigned g = grid_for(n, 256);
    float ms = time_median([&] { relax<<<g, 256>>>(x, n, iters); }, a.reps);
    CK(cudaMemcpy(hy.data(), x, n * sizeof(float), cudaMemcpyDeviceToHost));
    bool ok = true;
    int runs = a.reps + 1;
    for (long i = 0; i < n && ok; i += 997) {
        float v = hx[i];
        for (int r = 0; r < runs; r++)
            for (int k = 0; k < iters; k++) v = v * 0.999f + 0.001f * sinf(v);
        ok = close_enough(hy[i], v, 1e-3f);
    }
    float max_ms = ms;
#ifdef USE_MPI
    MPI_Allreduce(&ms, &max_ms, 1, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
#endif
    printf("RESULT name=mpi_imbalance variant=rank%d rank=%d ranks=%d gpu=%d mpi=%d n=%ld reps=%d kernel_ms=%.4f max_kernel_ms=%.4f ok=%d\n",
           rank, rank, size, gpu,
#ifdef USE_MPI
           1,
#else
           0,
#endif
           n, a.reps, ms, max_ms, ok ? 1 : 0);
#ifdef USE_MPI
    MPI_Finalize();
#endif
    return ok ? 0 : 1;
}
