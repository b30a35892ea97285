# The CUDA module. cuBLAS comes from the nvidia-cublas wheel when it is
# installed (the copy JAX's CUDA plugin loads), else from the CUDA toolkit.
if(JAX_IM2COL_CUDA STREQUAL "OFF")
  return()
endif()

# Without CUDA: an error when it was asked for (ON), else the CPU module alone.
# A macro, so that its return() leaves this file.
macro(without_cuda reason)
  if(JAX_IM2COL_CUDA STREQUAL "ON")
    message(FATAL_ERROR "JAX_IM2COL_CUDA=ON but ${reason}")
  endif()
  message(STATUS "jax_im2col: ${reason}; building the CPU module only")
  return()
endmacro()

include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  without_cuda("no CUDA compiler was found (set CUDACXX or put nvcc on PATH)")
endif()

# The wheel's folder in the environment being installed into: sysconfig's
# purelib follows sys.prefix, which pip's isolated build environments share
# with the target environment (their own packages live elsewhere).
execute_process(
  COMMAND "${Python_EXECUTABLE}" -c
    "import os, sysconfig; print(os.path.join(sysconfig.get_paths()['purelib'], 'nvidia', 'cu13'))"
  OUTPUT_STRIP_TRAILING_WHITESPACE OUTPUT_VARIABLE cublas_wheel_dir
  RESULT_VARIABLE cublas_wheel_missing ERROR_QUIET)
set(cublas_include "")
set(cublas_library "")
if(cublas_wheel_missing EQUAL 0 AND EXISTS "${cublas_wheel_dir}/include/cublas_v2.h"
   AND EXISTS "${cublas_wheel_dir}/lib/libcublas.so.13")
  set(cublas_include "${cublas_wheel_dir}/include")
  set(cublas_library "${cublas_wheel_dir}/lib/libcublas.so.13")
  set(cublas_rpath "${cublas_wheel_dir}/lib")
else()
  find_package(CUDAToolkit QUIET)
  if(TARGET CUDA::cublas)
    get_target_property(cublas_library CUDA::cublas IMPORTED_LOCATION)
    set(cublas_include "${CUDAToolkit_INCLUDE_DIRS}")
    get_filename_component(cublas_rpath "${cublas_library}" DIRECTORY)
  endif()
endif()
if(NOT cublas_library)
  without_cuda("cuBLAS was not found: pip install nvidia-cublas, or install the CUDA toolkit's cuBLAS")
endif()
message(STATUS "jax_im2col: CUDA module with cuBLAS ${cublas_library}")

# Ampere and newer (the implicit GEMM uses cp.async, ldmatrix and mma.sync)
# and Hopper's own 90a (its wgmma kernel), unless asked otherwise; set before
# enable_language, which would otherwise pick the compiler's default.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT DEFINED ENV{CUDAARCHS})
  set(CMAKE_CUDA_ARCHITECTURES "80;90a")
endif()
enable_language(CUDA)
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
find_package(CUDAToolkit REQUIRED)

# One list per folder of lib/, as the source tree is laid out by op family.
set(jax_im2col_cuda_common lib/common/relayout.cu)
set(jax_im2col_cuda_columns lib/columns/columns.cu)
set(jax_im2col_cuda_conv
  lib/conv/conv_call.cc
  lib/conv/gemm/blas_handles.cc
  lib/conv/gemm/gemm_conv.cu
  lib/conv/implicit/implicit_conv.cu
  lib/conv/implicit/implicit_gemm.cu
  lib/conv/implicit/implicit_gemm_sm90.cu
  lib/conv/implicit/implicit_halo_sm90.cu
  lib/conv/implicit/implicit_filter_gradient.cu
  lib/conv/direct/direct_conv.cu
  lib/conv/direct/direct_filter.cu
  lib/conv/direct/direct_filter_1d.cu
  lib/conv/direct/direct_filter_2d.cu
  lib/conv/direct/direct_filter_3d.cu
  lib/conv/direct/grouped_conv.cu
  lib/conv/depthwise/depthwise_rows.cu
  lib/conv/depthwise/depthwise_conv.cu
  lib/conv/depthwise/depthwise_forward_cl.cu
  lib/conv/depthwise/depthwise_forward_cf.cu
  lib/conv/depthwise/depthwise_stream.cu
  lib/conv/depthwise/depthwise_mma.cu
  lib/conv/depthwise/depthwise_mma_filter.cu
  lib/conv/depthwise/depthwise_stream_filter.cu
  lib/conv/depthwise/depthwise_filter_cl.cu
  lib/conv/depthwise/depthwise_filter_cf.cu
  lib/conv/conv1d/conv_1d_cf.cu
  lib/conv/conv1d/conv_1d_cf_conv.cc)
set(jax_im2col_cuda_ffi
  lib/ffi/cuda_module.cc
  lib/ffi/columns_handlers.cc
  lib/ffi/conv_handlers.cu)

nanobind_add_module(_cuda NB_STATIC
  ${jax_im2col_cuda_common} ${jax_im2col_cuda_columns} ${jax_im2col_cuda_conv}
  ${jax_im2col_cuda_ffi})
target_include_directories(_cuda SYSTEM PRIVATE ${XLA_FFI_INCLUDE_DIR} ${cublas_include})
target_include_directories(_cuda PRIVATE lib)
target_link_libraries(_cuda PRIVATE CUDA::cudart_static "${cublas_library}")
set_target_properties(_cuda PROPERTIES
  CUDA_SEPARABLE_COMPILATION OFF
  INSTALL_RPATH "$ORIGIN/../nvidia/cu13/lib;${cublas_rpath}"
  BUILD_WITH_INSTALL_RPATH OFF)
# The Hopper kernels exist only in an sm_90a build (conv/implicit/*_sm90.cu).
if("90a" IN_LIST CMAKE_CUDA_ARCHITECTURES OR "90a-real" IN_LIST CMAKE_CUDA_ARCHITECTURES)
  target_compile_definitions(_cuda PRIVATE JAX_IM2COL_SM90A=1)
endif()
target_compile_options(_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -lineinfo>)
install(TARGETS _cuda LIBRARY DESTINATION jax_im2col)
