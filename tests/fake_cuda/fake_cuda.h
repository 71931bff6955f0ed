/* A fake CUDA driver (libcuda.so.1) and a fake CUPTI (libcupti.so.13) for
 * testing libkace_cupti.so without a GPU, built from the real CUDA 13
 * headers so that every struct the injection library reads has the real
 * layout. What they do, as the real ones do:
 *  - cuInit loads $CUDA_INJECTION64_PATH and calls its InitializeInjection;
 *  - a launch calls the subscriber's driver-API callback at API enter and
 *    exit (cuLaunchKernel, cuLaunchKernelEx, cuLaunchCooperativeKernel) with
 *    the real parameter structs; a graph launch calls it once for
 *    cuGraphLaunch and none for the kernels inside;
 *  - kernels run asynchronously: a kernel's activity record is complete only
 *    once its end time has passed;
 *  - activity buffers are asked of the client when needed; the periodic
 *    flush (cuptiActivityFlushPeriod) returns only full buffers,
 *    cuptiActivityFlushAll(0) every buffer whose records are all complete,
 *    FLUSH_FORCED every buffer, in-flight records with end = 0;
 *  - the Range Profiler in kernel replay captures the first kernel run in
 *    its context between Start and Stop, replays it (the launch blocks) and
 *    decodes values into the counter data image; it is configured once
 *    (SetConfig) and its counter data image initialised again before each
 *    Start (FAKE_CUPTI_CONFIG_PER_RANGE=1: Stop forgets the configuration;
 *    FAKE_CUPTI_RECORD_PER_PASS=1: each replay pass gets a kernel record
 *    with the launch's correlation ID);
 *  - a launch into a stream that captures a graph runs nothing (the kernel
 *    runs when the graph is launched); a launch with more than 1024 threads
 *    per block fails (CUDA_ERROR_INVALID_VALUE) and runs nothing; the exit
 *    callback carries the launch's result;
 *  - a replayed launch blocks for its passes' kernel time plus
 *    KACE_FAKE_REPLAY_S (/ KACE_FAKE_TIME_SCALE) seconds, and
 *    FAKE_CUPTI_REPLAY_LOG=FILE gets a line "replay gx gy gz bx by bz name"
 *    per replayed launch (tests count replays, never time);
 *  - FAKE_CUPTI_STOP_FAILS=N: the N-th cuptiRangeProfilerStop fails and
 *    leaves its range started;
 *  - a destroyed context's range profiler objects are stale: any call on
 *    one, or on one that was disabled, is a violation; the next context
 *    made gets the destroyed one's address;
 *  - FAKE_CUDA_MPS=1: contexts are MPS clients (CU_DEVICE_ATTRIBUTE_MPS_ENABLED);
 *    FAKE_CUPTI_UNSUPPORTED=1: cuptiProfilerDeviceSupported says vGPU
 *    profiling is disabled.
 * Misuse that the real CUPTI would refuse or silently get wrong is printed
 * on stderr as "fake-cupti: violation: ..." (tests look for it).
 *
 * Counter values are a function of the kernel, so tests can check them:
 * sm% = grid x % 97 + 0.5, dram% = block x % 89 + 0.25, memory% = the larger;
 * a kernel whose name holds "nan_counters" gets NaN, "negative_counters" -1.
 */
#ifndef KACE_FAKE_CUDA_H
#define KACE_FAKE_CUDA_H

#include <stdint.h>

#include <cuda.h>

#define FAKE_REPLAY_PASSES 12

typedef struct fake_kernel {
    const char *name;
    unsigned grid[3], block[3];
    unsigned regs, static_smem, dynamic_smem;
    uint64_t duration_ns;
} fake_kernel;

enum fake_launch_api { FAKE_LAUNCH, FAKE_LAUNCH_EX, FAKE_LAUNCH_COOPERATIVE };

/* Exported by the fake libcuda.so.1 for the fake application. */
CUcontext fake_ctx_create(int device); /* and makes it current on this thread */
void fake_ctx_set_current(CUcontext ctx);
/* Waits until ctx is idle, destroys it (CUPTI's resource callback first);
 * the next context made gets its address, as a real allocator may give. */
void fake_ctx_destroy(CUcontext ctx);
CUresult fake_launch(const fake_kernel *k, int api);
CUresult fake_launch_on(const fake_kernel *k, int api, CUstream stream);
CUresult fake_graph_launch(const fake_kernel *kernels, int n);
CUstream fake_stream_create(void);
void fake_stream_destroy(CUstream s);
void fake_stream_begin_capture(CUstream s);
/* Ends the capture; *kernels (the stream's, valid until the next capture)
 * are what a graph launch of the capture runs. */
int fake_stream_end_capture(CUstream s, const fake_kernel **kernels);
void fake_synchronize(void); /* waits until this thread's context is idle */

/* The fake CUPTI's entry points into the driver's launches. */
typedef struct fake_cupti_hooks {
    /* site: 0 enter, 1 exit (CUpti_ApiCallbackSite); result: the launch's, at exit */
    void (*api)(CUcontext ctx, uint32_t context_id, int cbid, int site, const char *function, const char *symbol,
                const void *params, uint32_t correlation, CUresult result);
    /* A kernel about to run in ctx over [start, end] (CLOCK_MONOTONIC ns);
     * returns extra time the launch blocks (replay), ns. */
    uint64_t (*kernel)(CUcontext ctx, uint32_t context_id, const fake_kernel *k, uint64_t start, uint64_t end,
                       uint32_t correlation, int in_graph);
    /* cuCtxDestroy of ctx has started (CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING) */
    void (*context_destroy)(CUcontext ctx);
} fake_cupti_hooks;

void fake_cuda_register_cupti(const fake_cupti_hooks *hooks);
uint64_t fake_cuda_now_ns(void);

#endif
