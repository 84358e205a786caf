// Control-flow and access-kind probe for the sass package's tests.
// Each kernel is built to make ptxas emit one feature the parser, the CFG
// builder or the access-kind slicer must handle; the comment says which.
#include <cstdio>
#include <cuda_fp16.h>
#include <cuda_pipeline.h>

// three levels of inlining: "inlined at ... inlined at ..." chains
__device__ __forceinline__ float leaf(float x) { return x * x + 1.0f; }
__device__ __forceinline__ float mid(float x) { return leaf(x) * 0.5f; }
__device__ __forceinline__ float top(float x) { return mid(x) - leaf(x + 1.0f); }

// recursion: CALL/RET, a call-graph cycle
__device__ __noinline__ int fact(int n) { return n <= 1 ? 1 : n * fact(n - 1); }

// switch with many unlike cases: a jump table (BRX)
__global__ void sw(const int* __restrict__ k, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v;
  switch (k[i] & 15) {
  case 0: v = 1.5f; break;
  case 1: v = sinf(out[i]); break;
  case 2: v = out[i] * out[i + 1]; break;
  case 3: v = __expf(out[i]); break;
  case 4: v = (float)fact(k[i]); break;
  case 5: v = top(out[i]); break;
  case 6: v = sqrtf(out[i]); break;
  case 7: v = out[i] / 3.0f; break;
  case 8: v = logf(out[i]); break;
  case 9: v = cosf(out[i]); break;
  default: v = 0;
  }
  out[i] = v;
}

// nested loops with break/continue and a goto out of both: loop nest depth 2, BREAK/BSSY
__global__ void nest(const double* a, double* b, int n, int m) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  double s = 0;
  for (int x = 0; x < n; x++) {
    for (int y = 0; y < m; y++) {
      double t = a[(x * m + y) & 1023];
      if (t < 0) break;
      if (t > 100) continue;
      s += t * (double)i;
    }
    if (s > 1e30) goto out;
  }
out:
  b[i] = s;
}

// goto into the middle of a cycle: irreducible control flow if ptxas keeps it
__global__ void irr(const int* a, int* b, int n) {
  int i = threadIdx.x;
  int s = a[i];
  if (s & 1) goto L2;
L1:
  s = s * 3 + 1;
  if (s > n) goto done;
L2:
  s = s / 2 + a[s & 255];
  if (s & 4) goto L1;
  if (s < n * 2) goto L2;
done:
  b[i] = s;
}

// access kinds of many widths and types, shared and global, conversions, atomics
__global__ void types(const unsigned char* u8, const short* s16, const __half* h, const double* d,
                      float* f, int* iout, long long* l, int n) {
  __shared__ double sd[128];
  __shared__ signed char sc[128];
  __shared__ int cnt;
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (threadIdx.x == 0) cnt = 0;
  if (i >= n) return;
  sd[threadIdx.x % 128] = d[i] * 2.0;            // LDG.E.64 / DMUL / STS.64: 64-bit float
  sc[threadIdx.x % 128] = (signed char)(u8[i] + 1); // LDG.E.U8 / STS.U8: 8-bit int
  __syncthreads();
  f[i] = (float)sd[(threadIdx.x + 1) % 128] + __half2float(h[i]); // LDS.64 F2F, LDG.E.U16 half
  iout[i] = (int)s16[i] + sc[(threadIdx.x + 3) % 128];             // LDG.E.S16, LDS.S8
  l[i] = (long long)(f[i] * 3.0f);                                 // F2I.S64, STG.E.64 int
  atomicAdd(&f[0], 1.0f);                                          // RED.E.ADD.F32
  atomicCAS(&iout[1], 0, i);                                       // ATOMG.E.CAS
  atomicAdd(&cnt, 1);                                              // ATOMS
  __syncthreads();
  if (threadIdx.x == 0) iout[2] = cnt;
}

// local memory: a dynamically indexed private array (STL/LDL)
__global__ void loc(const int* idx, float* out) {
  float arr[64];
  for (int k = 0; k < 64; k++) arr[k] = out[k] * k;
  out[threadIdx.x] = arr[idx[threadIdx.x] & 63];
}

// generic address space: a pointer that may be shared or global (LD.E)
__device__ __noinline__ float gen(const float* p) { return p[1]; }
__global__ void generic(float* out, int sel) {
  __shared__ float s[64];
  s[threadIdx.x % 64] = threadIdx.x;
  __syncthreads();
  const float* p = sel ? s : out;
  out[threadIdx.x] = gen(p + threadIdx.x % 32);
}

// warp primitives in divergent code: WARPSYNC, SHFL, VOTE
__global__ void warp(int* out, int n) {
  int v = threadIdx.x;
  unsigned m = __ballot_sync(0xffffffffu, v < n);
  if (v < n) {
    v += __shfl_down_sync(m, v, 1);
    __syncwarp(m);
  }
  out[threadIdx.x] = v + __popc(m);
}

// indirect calls through a table of device functions
typedef float (*fp_t)(float);
__device__ float f_a(float x) { return x + 1.0f; }
__device__ float f_b(float x) { return x * 2.0f; }
__device__ fp_t tbl[2] = {f_a, f_b};
__global__ void indirect(float* out) { out[threadIdx.x] = tbl[threadIdx.x & 1](out[threadIdx.x]); }

// cp.async: LDGSTS and LDGDEPBAR / DEPBAR (scoreboard-only dependencies)
__global__ void async(const float4* g, float4* out) {
  __shared__ float4 s[128];
  __pipeline_memcpy_async(&s[threadIdx.x], &g[threadIdx.x + blockIdx.x * 128], sizeof(float4));
  __pipeline_commit();
  __pipeline_wait_prior(0);
  __syncthreads();
  out[threadIdx.x + blockIdx.x * 128] = s[127 - threadIdx.x];
}
