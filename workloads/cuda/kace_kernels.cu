// Example CUDA C workloads that span the kernel space, each reporting
// progress through kace_progress.h (one "sample" = one kernel launch
// iteration, see below).
//
//   kace_kernels gemm    [N=2048]          compute-bound: tiled SGEMM N x N x N (shared memory, registers)
//   kace_kernels stream  [MB=1024]         memory-bound: a = b + s * c over MB megabytes per array
//   kace_kernels latency [BLOCKS=4] [K=64] latency-bound: K tiny dependent kernels of BLOCKS blocks per sample
//   ... [SECONDS=0]                        last argument: stop after SECONDS (0: until kace stops it)
//
// Build: make -C workloads (needs nvcc; not part of the CI build).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "../kace_progress.h"

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));   \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define TILE 32

__global__ void sgemm_tiled(int n, const float *a, const float *b, float *c)
{
    __shared__ float as[TILE][TILE], bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.f;
    for (int t = 0; t < n; t += TILE) {
        as[threadIdx.y][threadIdx.x] = a[row * n + t + threadIdx.x];
        bs[threadIdx.y][threadIdx.x] = b[(t + threadIdx.y) * n + col];
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; k++)
            acc = fmaf(as[threadIdx.y][k], bs[k][threadIdx.x], acc);
        __syncthreads();
    }
    c[row * n + col] = acc;
}

__global__ void triad(size_t n, float *a, const float *b, const float *c, float s)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        a[i] = b[i] + s * c[i];
}

__global__ void tiny(float *x)
{
    x[blockIdx.x * blockDim.x + threadIdx.x] += 1.f;
}

static double now_s()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s gemm [N] | stream [MB] | latency [BLOCKS] [K]  [SECONDS]\n", argv[0]);
        return 2;
    }
    const char *mode = argv[1];
    double seconds = 0;
    double t0 = now_s();
    unsigned long long done = 0;
    kace_progress_report(0);
    if (strcmp(mode, "gemm") == 0) {
        int n = argc > 2 ? atoi(argv[2]) : 2048;
        n = (n + TILE - 1) / TILE * TILE;
        seconds = argc > 3 ? atof(argv[3]) : 0;
        float *a, *b, *c;
        CHECK(cudaMalloc(&a, sizeof(float) * n * n));
        CHECK(cudaMalloc(&b, sizeof(float) * n * n));
        CHECK(cudaMalloc(&c, sizeof(float) * n * n));
        CHECK(cudaMemset(a, 0, sizeof(float) * n * n));
        CHECK(cudaMemset(b, 0, sizeof(float) * n * n));
        dim3 grid(n / TILE, n / TILE), block(TILE, TILE);
        while (seconds <= 0 || now_s() - t0 < seconds) { // one sample = one GEMM
            sgemm_tiled<<<grid, block>>>(n, a, b, c);
            CHECK(cudaDeviceSynchronize());
            kace_progress_report(++done);
        }
    } else if (strcmp(mode, "stream") == 0) {
        size_t mb = argc > 2 ? strtoull(argv[2], NULL, 10) : 1024;
        seconds = argc > 3 ? atof(argv[3]) : 0;
        size_t n = mb * (1u << 20) / sizeof(float);
        float *a, *b, *c;
        CHECK(cudaMalloc(&a, n * sizeof(float)));
        CHECK(cudaMalloc(&b, n * sizeof(float)));
        CHECK(cudaMalloc(&c, n * sizeof(float)));
        CHECK(cudaMemset(b, 0, n * sizeof(float)));
        CHECK(cudaMemset(c, 0, n * sizeof(float)));
        int sms = 0;
        CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
        while (seconds <= 0 || now_s() - t0 < seconds) { // one sample = one pass over the arrays
            triad<<<sms * 8, 256>>>(n, a, b, c, 3.f);
            CHECK(cudaDeviceSynchronize());
            kace_progress_report(++done);
        }
    } else if (strcmp(mode, "latency") == 0) {
        int blocks = argc > 2 ? atoi(argv[2]) : 4;
        int k = argc > 3 ? atoi(argv[3]) : 64;
        seconds = argc > 4 ? atof(argv[4]) : 0;
        float *x;
        CHECK(cudaMalloc(&x, sizeof(float) * blocks * 64));
        CHECK(cudaMemset(x, 0, sizeof(float) * blocks * 64));
        while (seconds <= 0 || now_s() - t0 < seconds) { // one sample = K dependent tiny kernels
            for (int i = 0; i < k; i++)
                tiny<<<blocks, 64>>>(x);
            CHECK(cudaDeviceSynchronize());
            kace_progress_report(++done);
        }
    } else {
        fprintf(stderr, "%s: unknown workload %s\n", argv[0], mode);
        return 2;
    }
    return 0;
}
