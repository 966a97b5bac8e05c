# Sanitizer and fuzzing builds (docs/design.md "CI matrix and fuzzing"). Included from the
# top-level CMakeLists.txt before any target, so the flags reach every llmplan target (the
# dependencies are Debian's prebuilt libraries and are never recompiled).
#
#   LLMPLAN_SANITIZE=address,undefined  ASan + UBSan; any UB aborts (-fno-sanitize-recover)
#   LLMPLAN_SANITIZE=thread             TSan
#   LLMPLAN_FUZZ=ON                     Clang only: the libFuzzer targets under fuzz/, with
#                                       ASan + UBSan and coverage on the libraries they link
#
# Under a sanitizer the CUDA backend is turned off (nvcc's host objects would be built
# without the runtime's instrumentation, and the GPU paths need a GPU to run anyway).
set(LLMPLAN_SANITIZE "" CACHE STRING "Sanitizers for llmplan's targets: empty, address,undefined, address, undefined or thread")
set_property(CACHE LLMPLAN_SANITIZE PROPERTY STRINGS "" "address,undefined" "address" "undefined" "thread")
option(LLMPLAN_FUZZ "Build the libFuzzer targets under fuzz/ (Clang only; implies address,undefined)" OFF)

if(LLMPLAN_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "llmplan: LLMPLAN_FUZZ=ON needs Clang (libFuzzer), got ${CMAKE_CXX_COMPILER_ID}; "
                        "configure with -DCMAKE_CXX_COMPILER=clang++ (scripts/fuzz does)")
  endif()
  if(LLMPLAN_SANITIZE STREQUAL "")
    set(LLMPLAN_SANITIZE "address,undefined")
  elseif(LLMPLAN_SANITIZE STREQUAL "thread")
    message(FATAL_ERROR "llmplan: LLMPLAN_FUZZ=ON runs under address,undefined, not LLMPLAN_SANITIZE=thread")
  endif()
endif()

set(_llmplan_sanitizers "address,undefined" "address" "undefined" "thread")
if(NOT LLMPLAN_SANITIZE STREQUAL "" AND NOT LLMPLAN_SANITIZE IN_LIST _llmplan_sanitizers)
  message(FATAL_ERROR "llmplan: LLMPLAN_SANITIZE='${LLMPLAN_SANITIZE}': expected one of address,undefined, address, undefined, thread")
endif()

if(NOT LLMPLAN_SANITIZE STREQUAL "")
  set(_llmplan_san_flags -fsanitize=${LLMPLAN_SANITIZE} -fno-omit-frame-pointer)
  if(LLMPLAN_SANITIZE MATCHES "undefined")
    list(APPEND _llmplan_san_flags -fno-sanitize-recover=undefined)
  endif()
  if(LLMPLAN_FUZZ)
    # Coverage feedback for libFuzzer in every object; only fuzz/'s executables link its main.
    list(APPEND _llmplan_san_flags -fsanitize=fuzzer-no-link)
  endif()
  foreach(flag IN LISTS _llmplan_san_flags)
    add_compile_options($<$<COMPILE_LANGUAGE:CXX>:${flag}>)
  endforeach()
  add_link_options(-fsanitize=${LLMPLAN_SANITIZE})
  if(LLMPLAN_WITH_CUDA)
    message(STATUS "llmplan: LLMPLAN_SANITIZE=${LLMPLAN_SANITIZE} -- CUDA backend turned OFF")
    set(LLMPLAN_WITH_CUDA OFF)
  endif()
  message(STATUS "llmplan: sanitizers ${LLMPLAN_SANITIZE} on every llmplan target")
endif()
