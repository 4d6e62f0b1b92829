#pragma once
// Checked CUDA, NCCL and cuBLAS calls for the CUDA build. A failure there leaves the device or the
// communicator unusable, so it ends the job (bmt::fatal) rather than throwing.
#include "bmtrain/runtime/error.hpp"

#ifdef BMT_ENABLE_CUDA
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define BMT_CUDA_CHECK(call)                                                              \
  do {                                                                                    \
    cudaError_t bmt_cuda_rc_ = (call);                                                    \
    if (bmt_cuda_rc_ != cudaSuccess)                                                      \
      BMT_FATAL(#call << " failed: " << cudaGetErrorString(bmt_cuda_rc_));                \
  } while (0)

#define BMT_NCCL_CHECK(call)                                                              \
  do {                                                                                    \
    ncclResult_t bmt_nccl_rc_ = (call);                                                   \
    if (bmt_nccl_rc_ != ncclSuccess)                                                      \
      BMT_FATAL(#call << " failed: " << ncclGetErrorString(bmt_nccl_rc_));                \
  } while (0)

#define BMT_CUBLAS_CHECK(call)                                                            \
  do {                                                                                    \
    cublasStatus_t bmt_cublas_rc_ = (call);                                               \
    if (bmt_cublas_rc_ != CUBLAS_STATUS_SUCCESS)                                          \
      BMT_FATAL(#call << " failed: cublas status " << static_cast<int>(bmt_cublas_rc_));  \
  } while (0)
#endif
