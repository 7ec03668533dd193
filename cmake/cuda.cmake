# cmake/cuda.cmake: build rules of the kernels layer (src/kernels/), included
# by the top-level CMakeLists.txt after the library targets exist.
#
# 1. The C kernels are built without floating-point contraction: the scalar
#    reference, the SIMD paths and the CUDA kernel must perform the same
#    IEEE-754 operations to agree bit for bit (docs/adamw.md).
# 2. Where nvcc is found (PATH, CUDACXX or /usr/local/cuda), adamw.cu becomes
#    libhbm_cuda; tools/adamw_gpu_check.c becomes hbm_adamw_gpu_check (what
#    tools/gpu_check_adamw.sh runs on a machine with a GPU); and
#    tests/cuda/test_adamw_cuda.c a CI test that skips (77) without a GPU.
#    Without nvcc nothing here is needed and the build is unchanged.
#    -DHBM_CUDA=OFF skips it; sanitizer builds skip it too.

file(GLOB HBM_KERNEL_C_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/kernels/*.c)
set_source_files_properties(${HBM_KERNEL_C_SOURCES} PROPERTIES COMPILE_OPTIONS "-ffp-contract=off;-fno-math-errno")
# The benchmark's unfused passes must vectorize (sqrt without errno) and keep
# the reference's arithmetic.
set_source_files_properties(${CMAKE_SOURCE_DIR}/bench/bench_adamw.c PROPERTIES COMPILE_OPTIONS "-ffp-contract=off;-fno-math-errno")

option(HBM_CUDA "build the CUDA kernels where nvcc is found" ON)
if(NOT HBM_CUDA)
  return()
endif()
if(HBM_SANITIZE)
  message(STATUS "hbm: CUDA kernels skipped in sanitizer builds")
  return()
endif()

if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
  find_program(HBM_NVCC nvcc)
  if(NOT HBM_NVCC)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
endif()
include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  message(STATUS "hbm: nvcc not found; CUDA kernels not built")
  return()
endif()

# Ampere (A100) and Hopper (H100, H200) machine code, plus PTX for later GPUs.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 80-real 90)
endif()
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
message(STATUS "hbm: CUDA kernels built with nvcc ${CMAKE_CUDA_COMPILER_VERSION} for ${CMAKE_CUDA_ARCHITECTURES}")

add_library(hbm_cuda STATIC ${CMAKE_SOURCE_DIR}/src/kernels/adamw.cu)
set_target_properties(hbm_cuda PROPERTIES OUTPUT_NAME hbm_cuda CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON)
# The directory's C warning flags mean nothing to nvcc: replace them.
set_property(TARGET hbm_cuda PROPERTY COMPILE_OPTIONS "")
# --fmad=false: no contraction into FMA, so the kernel matches the CPU reference
# bit for bit. IEEE division and square root are nvcc's defaults (no fast math).
target_compile_options(hbm_cuda PRIVATE
  --fmad=false -prec-div=true -prec-sqrt=true
  --Werror all-warnings
  -Xcompiler=-Wall,-Wextra,-Werror,-Wno-unused-parameter)
target_include_directories(hbm_cuda PUBLIC ${CMAKE_SOURCE_DIR}/include PRIVATE ${CMAKE_SOURCE_DIR}/src)
target_link_libraries(hbm_cuda PUBLIC hbm_static CUDA::cudart_static)

add_executable(hbm_adamw_gpu_check ${CMAKE_SOURCE_DIR}/tools/adamw_gpu_check.c)
set_target_properties(hbm_adamw_gpu_check PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tools)
target_include_directories(hbm_adamw_gpu_check PRIVATE ${CMAKE_SOURCE_DIR}/src)
target_link_libraries(hbm_adamw_gpu_check PRIVATE hbm_cuda)
install(TARGETS hbm_cuda ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})

# A CI test of the CUDA entry point: argument checks and the no-device error
# everywhere, agreement with the CPU reference where a GPU is (exit 77 without).
add_executable(test_adamw_cuda ${CMAKE_SOURCE_DIR}/tests/cuda/test_adamw_cuda.c)
set_target_properties(test_adamw_cuda PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
target_include_directories(test_adamw_cuda PRIVATE ${CMAKE_SOURCE_DIR}/tests)
target_link_libraries(test_adamw_cuda PRIVATE hbm_cuda)
