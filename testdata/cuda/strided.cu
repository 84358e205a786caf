// strided: particles stored as an array of structures; each warp access to
// p[i].x touches 32 different 32-byte sectors for 128 useful bytes (memory
// divergence, uncoalesced access). Fix: structure of arrays, coalesced.
#include "common.cuh"

struct Particle {
    float x, y, z, vx, vy, vz, mass, charge; // 32 bytes
};

__global__ void push_aos(Particle *p, long n, float dt) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) p[i].x += p[i].vx * dt; // stride of 32 bytes between lanes
}

__global__ void push_soa(float *px, const float *pvx, long n, float dt) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) px[i] += pvx[i] * dt;
}

int main(int argc, char **argv) {
    Args a = parse_args(argc, argv, 1L << 24, 50);
    const float dt = 0.5f;
    std::vector<Particle> hp(a.n);
    std::vector<float> hx(a.n), hvx(a.n), out(a.n);
    for (long i = 0; i < a.n; i++) {
        hp[i] = Particle{(float)(i % 1000), 0, 0, (float)(i % 7), 0, 0, 1, 1};
        hx[i] = hp[i].x;
        hvx[i] = hp[i].vx;
    }
    Particle *p;
    float *px, *pvx;
    CK(cudaMalloc(&p, a.n * sizeof(Particle)));
    CK(cudaMalloc(&px, a.n * sizeof(float)));
    CK(cudaMalloc(&pvx, a.n * sizeof(float)));
    unsigned g = grid_for(a.n, 256);
    bool all = true;
    for (int variant = 1; variant <= 2; variant++) {
        if (!want(a, variant)) continue;
        CK(cudaMemcpy(p, hp.data(), a.n * sizeof(Particle), cudaMemcpyHostToDevice));
        CK(cudaMemcpy(px, hx.data(), a.n * sizeof(float), cudaMemcpyHostToDevice));
        CK(cudaMemcpy(pvx, hvx.data(), a.n * sizeof(float), cudaMemcpyHostToDevice));
        float ms = time_median([&] {
            if (variant == 1)
                push_aos<<<g, 256>>>(p, a.n, dt);
            else
                push_soa<<<g, 256>>>(px, pvx, a.n, dt);
        }, a.reps);
        bool ok = true;
        if (variant == 1) {
            std::vector<Particle> q(a.n);
            CK(cudaMemcpy(q.data(), p, a.n * sizeof(Particle), cudaMemcpyDeviceToHost));
            for (long i = 0; i < a.n; i++) out[i] = q[i].x;
        } else {
            CK(cudaMemcpy(out.data(), px, a.n * sizeof(float), cudaMemcpyDeviceToHost));
        }
        float steps = (float)(a.reps + 1); // warm-up + timed runs
        for (long i = 0; i < a.n && ok; i++) ok = close_enough(out[i], hx[i] + steps * hvx[i] * dt);
        report("strided", variant == 1 ? "bad" : "fixed", a, ms, ok);
        all &= ok;
    }
    return all ? 0 : 1;
}
