# Optional CUDA backend (kernels/cuda/, DESIGN.md §1): WARM_CUDA=AUTO builds it when a CUDA
# compiler is found (on PATH, $CUDACXX, or /usr/local/cuda/bin/nvcc), ON requires it, OFF
# skips it. AUTO means OFF in sanitizer builds (nvcc objects are not instrumented and the
# CUDA runtime's allocations read as leaks). Sets WARM_HAVE_CUDA.
set(WARM_CUDA AUTO CACHE STRING "Build the CUDA backend: AUTO, ON or OFF")
set_property(CACHE WARM_CUDA PROPERTY STRINGS AUTO ON OFF)
set(WARM_HAVE_CUDA OFF)
set(want_cuda ${WARM_CUDA})
if(want_cuda STREQUAL "AUTO" AND WARM_SANITIZE)
  set(want_cuda OFF)
endif()
if(want_cuda)
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(ENV{CUDACXX} /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # sm_90 machine code (H100/H200) plus compute_75 PTX that the driver JIT-compiles
    # for every other GPU CUDA 13 supports (Turing and newer).
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES "90-real;75-virtual")
    endif()
    # Static cudart: binaries start (and report no device) on machines without the driver.
    set(CMAKE_CUDA_RUNTIME_LIBRARY Static)
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(WARM_HAVE_CUDA ON)
  elseif(want_cuda STREQUAL "ON")
    message(FATAL_ERROR "WARM_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
message(STATUS "CUDA backend: ${WARM_HAVE_CUDA}")
