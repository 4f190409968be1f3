# CUDA is an add-on: found → the CUDA backend is built next to the CPU reference; not found →
# a CPU-only build that says so. QS_CUDA=ON without nvcc is a hard error (asked for, not given).

set(QS_HAVE_CUDA OFF)
set(QS_CUDA_SUMMARY "CPU-only build")

if(NOT QS_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # Architectures, entry by entry (set before enable_language so CMake does not pick its own):
    #   80: A100 (Ampere datacenter; the oldest with BF16 tensor cores and cp.async)
    #   89: L4 / L40 / RTX 40xx (Ada; FP8 tensor cores)
    #   90: H100 / H200 (Hopper; the device machine)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 89 90)
    endif()
    # CMake 3.25 does not know nvcc 13's flag for C++20; tell it.
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(QS_HAVE_CUDA ON)
    set(QS_CUDA_SUMMARY "CUDA ${CMAKE_CUDA_COMPILER_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES}")
  elseif(QS_CUDA STREQUAL "ON")
    message(FATAL_ERROR "QS_CUDA=ON but no CUDA compiler was found (looked on PATH and in "
                        "/usr/local/cuda/bin). Install the CUDA toolkit or configure with -DQS_CUDA=OFF.")
  endif()
endif()

if(QS_HAVE_CUDA)
  message(STATUS "Quantscope: CUDA backend enabled: ${QS_CUDA_SUMMARY}")
else()
  message(STATUS "Quantscope: no CUDA compiler: CPU-only build (the CUDA backend is not built)")
endif()
