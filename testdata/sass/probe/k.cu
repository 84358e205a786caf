#include <cstdio>
__device__ __forceinline__ float sq(float x){ return x*x; }
__device__ __noinline__ float helper(const float* a, int i){ return a[i]*2.0f + 1.0f; }
__global__ void reload(const float* __restrict__ a, float* b, int n, int iters){
  int i = blockIdx.x*blockDim.x + threadIdx.x;
  if (i >= n) return;
  float s = 0;
  for (int k = 0; k < iters; k++) { s += a[0] * sq(b[i]); if (s > 1e9f) s = helper(a, k); }
  b[i] = s;
}
__global__ void fill(double* d, int n){ int i = blockIdx.x*blockDim.x+threadIdx.x; if(i<n) d[i]=3.0; }
__global__ void vec4(const float4* a, float4* b, int n, short* s){ int i = blockIdx.x*blockDim.x+threadIdx.x; if(i<n){ float4 v=a[i]; b[i]=make_float4(v.x+1,v.y,v.z,v.w); s[i]=(short)i; atomicAdd((int*)&b[0], 1);} }
__global__ void shm(int* out){ __shared__ int t[256]; t[threadIdx.x*2 % 256]=threadIdx.x; __syncthreads(); out[threadIdx.x]=t[(threadIdx.x+1)%256]; }
int main(){ float *a,*b; cudaMalloc(&a,4096*4); cudaMalloc(&b,4096*4); cudaMemset(a,0,4096*4); cudaMemset(b,0,4096*4);
 reload<<<16,256>>>(a,b,4096,10); double* d; cudaMalloc(&d, 4096*8); fill<<<16,256>>>(d,4096);
 short* s; cudaMalloc(&s, 8192); vec4<<<4,256>>>((float4*)a,(float4*)b,1024,s); int* o; cudaMalloc(&o,1024); shm<<<1,256>>>(o);
 printf("%d\n", (int)cudaDeviceSynchronize()); return 0; }
