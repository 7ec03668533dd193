/* adamw.cu: the fused AdamW step on a CUDA device, one launch for a whole
 * tensor list (multi-tensor apply).
 *
 * Each tensor is cut into chunks of ADAMW_CHUNK elements; block b handles
 * chunks b, b + gridDim.x, ... and finds each chunk's tensor by binary search
 * in a prefix table. A list of up to ADAMW_PARAM_TENSORS tensors travels in
 * the launch's own parameters (__grid_constant__: read in place, no copy), so
 * a short call costs one launch; a longer table is copied to the device once
 * per call (stream-ordered, from a host buffer freed by a host callback once
 * copied).
 * Where all five arrays of a tensor are 16-byte (floats) and 8-byte (BF16)
 * aligned, a thread moves 4 elements per access; otherwise one.
 *
 * The arithmetic is adamw_update_element() from adamw_internal.h, the very
 * function the CPU reference runs. Built with --fmad=false and IEEE division
 * and square root, the kernel matches the CPU reference bit for bit. */
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/adamw_internal.h"
extern "C" {
#include "core/util.h"
}

#define ADAMW_THREADS 256
#define ADAMW_VECTOR 4
/* 4 vector iterations per thread per chunk: 4096 elements. */
#define ADAMW_CHUNK (ADAMW_THREADS * ADAMW_VECTOR * 4)
#define ADAMW_MAX_BLOCKS (1u << 20)
/* Tensors whose table fits the launch parameters: 32 x 72 bytes, well inside
 * the 4 KiB every CUDA version takes. */
#define ADAMW_PARAM_TENSORS 32

struct adamw_device_tensor {
  uint16_t *weight;
  const uint16_t *grad;
  float *master, *exp_avg, *exp_avg_sq;
  uint64_t count;
  uint64_t key;  /* adamw_tensor_key(stochastic_key, position) */
  int decay;
  int vectorized; /* all arrays aligned for 4-element accesses */
};

/* Four elements through the shared element function. */
__device__ __forceinline__ void update4(const adamw_scalars &s, const adamw_device_tensor &t, uint64_t i) {
  uint2 g_raw = *reinterpret_cast<const uint2 *>(t.grad + i);
  float4 w = *reinterpret_cast<const float4 *>(t.master + i);
  float4 m = *reinterpret_cast<const float4 *>(t.exp_avg + i);
  float4 v = *reinterpret_cast<const float4 *>(t.exp_avg_sq + i);
  uint16_t g[4] = {(uint16_t)(g_raw.x & 0xFFFF), (uint16_t)(g_raw.x >> 16), (uint16_t)(g_raw.y & 0xFFFF),
                   (uint16_t)(g_raw.y >> 16)};
  uint16_t out[4];
  out[0] = adamw_update_element(&s, t.decay, t.key, i + 0, g[0], &w.x, &m.x, &v.x);
  out[1] = adamw_update_element(&s, t.decay, t.key, i + 1, g[1], &w.y, &m.y, &v.y);
  out[2] = adamw_update_element(&s, t.decay, t.key, i + 2, g[2], &w.z, &m.z, &v.z);
  out[3] = adamw_update_element(&s, t.decay, t.key, i + 3, g[3], &w.w, &m.w, &v.w);
  *reinterpret_cast<float4 *>(t.master + i) = w;
  *reinterpret_cast<float4 *>(t.exp_avg + i) = m;
  *reinterpret_cast<float4 *>(t.exp_avg_sq + i) = v;
  *reinterpret_cast<uint2 *>(t.weight + i) =
      make_uint2((uint32_t)out[0] | ((uint32_t)out[1] << 16), (uint32_t)out[2] | ((uint32_t)out[3] << 16));
}

__device__ __forceinline__ void update1(const adamw_scalars &s, const adamw_device_tensor &t, uint64_t i) {
  t.weight[i] = adamw_update_element(&s, t.decay, t.key, i, t.grad[i], &t.master[i], &t.exp_avg[i],
                                     &t.exp_avg_sq[i]);
}

struct adamw_param_table {
  adamw_device_tensor tensors[ADAMW_PARAM_TENSORS];
  uint64_t chunk_start[ADAMW_PARAM_TENSORS + 1];
};
static_assert(sizeof(adamw_param_table) + sizeof(adamw_scalars) + 16 <= 4096, "launch parameters over 4 KiB");

/* The chunks of this block, whichever memory the tables are in. */
__device__ __forceinline__ void adamw_chunks(const adamw_device_tensor *__restrict__ tensors,
                                             const uint64_t *__restrict__ chunk_start, int ntensors,
                                             uint64_t total_chunks, const adamw_scalars &s) {
  __shared__ int tensor_of_chunk;
  for (uint64_t chunk = blockIdx.x; chunk < total_chunks; chunk += gridDim.x) {
    if (threadIdx.x == 0) {
      int lo = 0, hi = ntensors; /* the last k with chunk_start[k] <= chunk */
      while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (chunk_start[mid] <= chunk) lo = mid;
        else hi = mid;
      }
      tensor_of_chunk = lo;
    }
    __syncthreads();
    const adamw_device_tensor t = tensors[tensor_of_chunk];
    uint64_t begin = (chunk - chunk_start[tensor_of_chunk]) * ADAMW_CHUNK;
    uint64_t end = begin + ADAMW_CHUNK < t.count ? begin + ADAMW_CHUNK : t.count;
    __syncthreads(); /* everyone has read tensor_of_chunk before thread 0 rewrites it */
    if (t.vectorized) {
      uint64_t vector_end = begin + (end - begin) / ADAMW_VECTOR * ADAMW_VECTOR;
      for (uint64_t i = begin + (uint64_t)threadIdx.x * ADAMW_VECTOR; i < vector_end;
           i += (uint64_t)ADAMW_THREADS * ADAMW_VECTOR)
        update4(s, t, i);
      for (uint64_t i = vector_end + threadIdx.x; i < end; i += ADAMW_THREADS) update1(s, t, i);
    } else {
      for (uint64_t i = begin + threadIdx.x; i < end; i += ADAMW_THREADS) update1(s, t, i);
    }
  }
}

/* The kernels are static: libhbm_cuda defines no global name but
 * hbm_adamw_step_cuda, so none can clash with a program's own. */
static __global__ void __launch_bounds__(ADAMW_THREADS)
    adamw_kernel(const adamw_device_tensor *__restrict__ tensors, const uint64_t *__restrict__ chunk_start,
                 int ntensors, uint64_t total_chunks, adamw_scalars s) {
  adamw_chunks(tensors, chunk_start, ntensors, total_chunks, s);
}

static __global__ void __launch_bounds__(ADAMW_THREADS)
    adamw_kernel_params(const __grid_constant__ adamw_param_table table, int ntensors, uint64_t total_chunks,
                        adamw_scalars s) {
  adamw_chunks(table.tensors, table.chunk_start, ntensors, total_chunks, s);
}

/* Maps a CUDA error to an hbm error and reports it. */
static int cuda_failed(cudaError_t err, const char *what) {
  int code = err == cudaErrorMemoryAllocation ? HBM_ENOMEM : HBM_EUNSUPPORTED;
  return hbm_report_error(code, "adamw (cuda): %s: %s (%s)", what, cudaGetErrorString(err), cudaGetErrorName(err));
}

static void CUDART_CB free_host_table(void *table) { free(table); }

/* The tensor table and the chunk prefix table (chunk_start[n] = all chunks);
 * returns the number of chunks. */
static uint64_t fill_tables(const hbm_adamw_tensor *tensors, size_t ntensors, const adamw_scalars *s,
                            adamw_device_tensor *table, uint64_t *chunk_start) {
  uint64_t chunks = 0;
  for (size_t k = 0; k < ntensors; k++) {
    const hbm_adamw_tensor *t = &tensors[k];
    adamw_device_tensor *d = &table[k];
    d->weight = t->weight;
    d->grad = t->grad;
    d->master = t->master;
    d->exp_avg = t->exp_avg;
    d->exp_avg_sq = t->exp_avg_sq;
    d->count = t->count;
    d->key = adamw_tensor_key(s->stochastic_key, k);
    d->decay = t->weight_decay != 0;
    d->vectorized = ((uintptr_t)t->master | (uintptr_t)t->exp_avg | (uintptr_t)t->exp_avg_sq) % 16 == 0 &&
                    ((uintptr_t)t->weight | (uintptr_t)t->grad) % 8 == 0;
    chunk_start[k] = chunks;
    chunks += (t->count + ADAMW_CHUNK - 1) / ADAMW_CHUNK;
  }
  chunk_start[ntensors] = chunks;
  return chunks;
}

extern "C" int hbm_adamw_step_cuda(const hbm_adamw_tensor *tensors, size_t ntensors,
                                   const hbm_adamw_options *options, void *cuda_stream) {
  int rc = hbm_adamw_validate(tensors, ntensors, options);
  if (rc != HBM_OK) return rc;
  if (ntensors > (size_t)INT32_MAX)
    return hbm_report_error(HBM_EINVAL, "adamw (cuda): %zu tensors is more than one launch takes", ntensors);
  cudaStream_t stream = (cudaStream_t)cuda_stream;
  adamw_scalars s;
  hbm_adamw_scalars_init(&s, options);

  /* A short list: the tables go in the launch parameters. */
  if (ntensors <= ADAMW_PARAM_TENSORS) {
    adamw_param_table params;
    memset(&params, 0, sizeof params);
    uint64_t chunks = fill_tables(tensors, ntensors, &s, params.tensors, params.chunk_start);
    unsigned blocks = chunks < ADAMW_MAX_BLOCKS ? (unsigned)chunks : ADAMW_MAX_BLOCKS;
    adamw_kernel_params<<<blocks, ADAMW_THREADS, 0, stream>>>(params, (int)ntensors, chunks, s);
    cudaError_t err = cudaGetLastError();
    return err == cudaSuccess ? HBM_OK : cuda_failed(err, "launching the kernel");
  }

  /* One host buffer: the tensor table, then the chunk prefix table. */
  size_t table_bytes = ntensors * sizeof(adamw_device_tensor);
  size_t bytes = table_bytes + (ntensors + 1) * sizeof(uint64_t);
  char *host = (char *)malloc(bytes);
  if (!host) return hbm_report_error(HBM_EHOSTMEM, "adamw (cuda): no host memory for %zu tensors", ntensors);
  uint64_t chunks = fill_tables(tensors, ntensors, &s, (adamw_device_tensor *)host, (uint64_t *)(host + table_bytes));

  void *device = NULL;
  cudaError_t err = cudaMallocAsync(&device, bytes, stream);
  if (err != cudaSuccess) {
    free(host);
    return cuda_failed(err, "allocating the tensor table");
  }
  err = cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream);
  /* The host buffer lives until the stream has copied it. */
  if (err == cudaSuccess) err = cudaLaunchHostFunc(stream, free_host_table, host);
  if (err != cudaSuccess) {
    cudaStreamSynchronize(stream);
    free(host);
    cudaFreeAsync(device, stream);
    return cuda_failed(err, "copying the tensor table");
  }
  unsigned blocks = chunks < ADAMW_MAX_BLOCKS ? (unsigned)chunks : ADAMW_MAX_BLOCKS;
  adamw_kernel<<<blocks, ADAMW_THREADS, 0, stream>>>(
      (const adamw_device_tensor *)device, (const uint64_t *)((char *)device + table_bytes), (int)ntensors, chunks, s);
  err = cudaGetLastError();
  cudaError_t free_err = cudaFreeAsync(device, stream);
  if (err != cudaSuccess) return cuda_failed(err, "launching the kernel");
  if (free_err != cudaSuccess) return cuda_failed(free_err, "freeing the tensor table");
  return HBM_OK;
}
