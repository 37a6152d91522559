// Adds two vectors on GPU 0 and checks the sum on the CPU: hack/gpu-check.sh compiles it with
// the node's nvcc and runs it in a pod that was given one nvidia.com/gpu.
#include <cmath>
#include <cstdio>
#include <vector>

__global__ void add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

#define CHECK(call)                                                     \
  do {                                                                  \
    cudaError_t e = (call);                                             \
    if (e != cudaSuccess) {                                             \
      std::printf("%s: %s\n", #call, cudaGetErrorString(e));            \
      return 1;                                                         \
    }                                                                   \
  } while (0)

int main() {
  int count = 0;
  CHECK(cudaGetDeviceCount(&count));
  cudaDeviceProp p;
  CHECK(cudaGetDeviceProperties(&p, 0));
  std::printf("vector_add: %d device(s) visible; device 0: %s, sm_%d%d, %.1f GiB\n", count,
              p.name, p.major, p.minor, p.totalGlobalMem / 1073741824.0);
  const int n = 1 << 24;
  std::vector<float> a(n), b(n), c(n);
  for (int i = 0; i < n; i++) {
    a[i] = i * 0.5f;
    b[i] = 2.0f;
  }
  float *da, *db, *dc;
  size_t bytes = n * sizeof(float);
  CHECK(cudaMalloc(&da, bytes));
  CHECK(cudaMalloc(&db, bytes));
  CHECK(cudaMalloc(&dc, bytes));
  CHECK(cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), bytes, cudaMemcpyHostToDevice));
  add<<<(n + 255) / 256, 256>>>(da, db, dc, n);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(c.data(), dc, bytes, cudaMemcpyDeviceToHost));
  double worst = 0;
  for (int i = 0; i < n; i++) worst = std::fmax(worst, std::fabs(c[i] - (a[i] + b[i])));
  std::printf("vector_add: %d elements, max error %g: %s\n", n, worst, worst == 0 ? "PASS" : "FAIL");
  return worst == 0 ? 0 : 1;
}
