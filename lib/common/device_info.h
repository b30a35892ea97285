// What the implicit GEMMs' host code asks of the current device on every
// call, queried once per device and then read from a cache.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <utility>

namespace im2col::cuda {

struct DeviceInfo {
  int multiprocessors = 0, major = 0, minor = 0;
  int shared_optin = 0;  // the most dynamic shared memory a block may opt in to
};

inline cudaError_t current_device_info(DeviceInfo* info) {
  int device = 0;
  if (auto e = cudaGetDevice(&device); e != cudaSuccess) return e;
  static std::mutex mutex;
  static std::map<int, DeviceInfo> cache;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = cache.find(device); it != cache.end()) {
      *info = it->second;
      return cudaSuccess;
    }
  }
  DeviceInfo found;
  if (auto e = cudaDeviceGetAttribute(&found.multiprocessors, cudaDevAttrMultiProcessorCount, device);
      e != cudaSuccess)
    return e;
  if (auto e = cudaDeviceGetAttribute(&found.major, cudaDevAttrComputeCapabilityMajor, device);
      e != cudaSuccess)
    return e;
  if (auto e = cudaDeviceGetAttribute(&found.minor, cudaDevAttrComputeCapabilityMinor, device);
      e != cudaSuccess)
    return e;
  if (auto e = cudaDeviceGetAttribute(&found.shared_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                      device);
      e != cudaSuccess)
    return e;
  std::lock_guard<std::mutex> lock(mutex);
  cache[device] = found;
  *info = found;
  return cudaSuccess;
}

// Raises `kernel`'s dynamic shared-memory limit to `bytes` once per device
// (and again only for a larger request).
inline cudaError_t allow_shared_bytes(const void* kernel, int bytes) {
  int device = 0;
  if (auto e = cudaGetDevice(&device); e != cudaSuccess) return e;
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, int> allowed;
  const auto key = std::make_pair(kernel, device);
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = allowed.find(key); it != allowed.end() && it->second >= bytes) return cudaSuccess;
  }
  if (auto e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
      e != cudaSuccess)
    return e;
  std::lock_guard<std::mutex> lock(mutex);
  int& at = allowed[key];
  if (at < bytes) at = bytes;
  return cudaSuccess;
}

// Blocks of `kernel` (threads each, `bytes` of dynamic shared memory) that
// fit on one multiprocessor at once, after allow_shared_bytes; asked of the
// runtime once per device, kernel and size.
inline cudaError_t resident_blocks(const void* kernel, int threads, int bytes, int* blocks) {
  int device = 0;
  if (auto e = cudaGetDevice(&device); e != cudaSuccess) return e;
  static std::mutex mutex;
  static std::map<std::tuple<const void*, int, int, int>, int> cache;
  const auto key = std::make_tuple(kernel, device, threads, bytes);
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = cache.find(key); it != cache.end()) {
      *blocks = it->second;
      return cudaSuccess;
    }
  }
  if (auto e = allow_shared_bytes(kernel, bytes); e != cudaSuccess) return e;
  int found = 0;
  if (auto e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&found, kernel, threads, bytes);
      e != cudaSuccess)
    return e;
  std::lock_guard<std::mutex> lock(mutex);
  cache[key] = found;
  *blocks = found;
  return cudaSuccess;
}

}  // namespace im2col::cuda
