# The host code's instruction set. Eigen picks its SIMD width when it is compiled: the x86-64
# baseline (SSE2) runs its float GEMM at about a third of what AVX2 + FMA reach on the same cores
# (measured: 58 vs 182 GFLOP/s on this project's 2-core dev machine, docs/benchmarks.md). So,
# like llama.cpp's GGML_NATIVE, a build made on a machine with AVX2 and FMA uses them:
#   QS_CPU_AVX2=AUTO (default): when the compiler takes -mavx2 -mfma and this machine runs them;
#   ON: always (the binaries then need an x86-64-v3 CPU); OFF: the baseline.
# -ffp-contract=off keeps scalar code bit-for-bit what it was: GCC would otherwise fuse a*b+c
# into FMAs anywhere (the ggml quantizers must round exactly as llama-quantize's). Only Eigen's
# explicit vector code (the GEMM kernels) uses FMA.
set(QS_CPU_AVX2 "AUTO" CACHE STRING "Host code with AVX2+FMA: AUTO (when this machine has them), ON, OFF")
set_property(CACHE QS_CPU_AVX2 PROPERTY STRINGS AUTO ON OFF)
set(QS_CPU_ISA "x86-64 baseline (SSE2)")
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64|amd64" AND NOT QS_CPU_AVX2 STREQUAL "OFF")
  set(_qs_avx2 ${QS_CPU_AVX2})
  if(QS_CPU_AVX2 STREQUAL "AUTO")
    include(CheckCXXSourceRuns)
    set(CMAKE_REQUIRED_FLAGS "-mavx2 -mfma")
    check_cxx_source_runs([=[
      #include <immintrin.h>
      int main() {
        if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return 1;
        volatile float a = 1.5f;
        __m256 v = _mm256_fmadd_ps(_mm256_set1_ps(a), _mm256_set1_ps(2.0f), _mm256_set1_ps(1.0f));
        return _mm256_cvtss_f32(v) == 4.0f ? 0 : 1;
      }]=] QS_HOST_RUNS_AVX2)
    unset(CMAKE_REQUIRED_FLAGS)
    set(_qs_avx2 ${QS_HOST_RUNS_AVX2})
  endif()
  if(_qs_avx2)
    add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-mavx2> $<$<COMPILE_LANGUAGE:CXX>:-mfma>
                        $<$<COMPILE_LANGUAGE:CXX>:-ffp-contract=off>)
    set(QS_CPU_ISA "AVX2+FMA")
  endif()
endif()
# (Only the files that print it get QS_CPU_ISA as a definition: app/CMakeLists.txt.)
message(STATUS "Quantscope: host code for ${QS_CPU_ISA} (QS_CPU_AVX2=${QS_CPU_AVX2})")
