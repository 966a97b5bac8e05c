# CUDA backend detection (DESIGN.md "Executor"; PLATFORM.md "CUDA" for the pitfalls).
# Included from the top-level CMakeLists.txt before add_subdirectory(executor).
#
# Sets, in the including scope:
#   LLMPLAN_CUDA_ENABLED   ON when the CUDA language and the toolkit (cudart, cuBLASLt)
#                          were found; executor/cuda/ builds only then.
#   LLMPLAN_NCCL_LIBRARY   (cache) path of libnccl.so (shared: there is no static NCCL), or
#   LLMPLAN_NCCL_INCLUDE_DIR  NOTFOUND; only looked for when the backend is ON.
# Every way out says why with a message; CPU targets always build.
#
# Rules that keep the binaries portable to a GPU machine built here:
# - CMAKE_CUDA_ARCHITECTURES is set explicitly (default "80;90": A100 and H100/H200); the
#   compiler default is sm_75 and "native" fails on a machine with no GPU.
# - cudart is linked statically (CUDA::cudart_static); cuBLASLt and NCCL shared.
# - Never -lcuda: the toolkit's stub libcuda.so is on LIBRARY_PATH here, and a binary linked
#   to it fails to start without a driver. Only the runtime API is used.
set(LLMPLAN_CUDA_ENABLED OFF)

if(NOT LLMPLAN_WITH_CUDA)
  message(STATUS "llmplan: LLMPLAN_WITH_CUDA=OFF -- CUDA backend turned OFF")
  return()
endif()

# A compiler named on the command line that does not exist would make enable_language()
# fail the whole configure; check_language() skips its test when the variable is set.
if(DEFINED CMAKE_CUDA_COMPILER AND CMAKE_CUDA_COMPILER AND NOT EXISTS "${CMAKE_CUDA_COMPILER}")
  message(STATUS "llmplan: CMAKE_CUDA_COMPILER '${CMAKE_CUDA_COMPILER}' does not exist -- CUDA backend turned OFF")
  return()
endif()

include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  message(STATUS "llmplan: no working CUDA compiler (nvcc) found -- CUDA backend turned OFF")
  return()
endif()

set(CMAKE_CUDA_ARCHITECTURES "80;90" CACHE STRING "CUDA architectures to build for (A100: 80, H100/H200: 90)")
set(CMAKE_CUDA_RUNTIME_LIBRARY Static)
enable_language(CUDA)

find_package(CUDAToolkit)
if(NOT CUDAToolkit_FOUND OR NOT TARGET CUDA::cudart_static OR NOT TARGET CUDA::cublasLt)
  message(STATUS "llmplan: CUDA toolkit (cudart_static, cublasLt) not found -- CUDA backend turned OFF")
  return()
endif()

find_library(LLMPLAN_NCCL_LIBRARY NAMES nccl HINTS ${CUDAToolkit_LIBRARY_DIR} $ENV{NCCL_HOME}/lib)
find_path(LLMPLAN_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} $ENV{NCCL_HOME}/include)

if(CMAKE_CUDA_COMPILER_VERSION VERSION_LESS 12.0)
  message(STATUS "llmplan: nvcc ${CMAKE_CUDA_COMPILER_VERSION} has no C++20 (needs 12.0 or newer) -- CUDA backend turned OFF")
  return()
endif()
# C++20 in CUDA sources, as in the C++ ones (CUDA targets inherit CXX_STANDARD 20). CMake
# 3.25 (Debian 12) knows no C++20 flag for nvcc, although nvcc >= 12 has it: tell it,
# after enable_language() so that the compiler check itself is unaffected.
if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
endif()
set(CMAKE_CUDA_STANDARD 20)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
set(CMAKE_CUDA_EXTENSIONS OFF)
set(LLMPLAN_CUDA_ENABLED ON)
if(LLMPLAN_NCCL_LIBRARY AND LLMPLAN_NCCL_INCLUDE_DIR)
  set(_llmplan_nccl "NCCL ${LLMPLAN_NCCL_LIBRARY}")
else()
  set(_llmplan_nccl "no NCCL (llmplan_executor_nccl turned OFF)")
endif()
message(STATUS "llmplan: CUDA backend ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, toolkit "
               "${CUDAToolkit_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES}, ${_llmplan_nccl})")
