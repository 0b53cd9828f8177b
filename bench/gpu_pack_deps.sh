#!/usr/bin/env bash
# Copies the build dependencies a bare GPU machine may lack (toml++, nlohmann/json and CLI11 with
# their CMake configs, zlib.h, and GoogleTest's headers, static libraries and CMake config for the gpu test
# suite) from this machine into bench/.deps (git-ignored), for a machine without them and without
# network: carry bench/.deps along and bench/gpu_gpt2.sh adds it to CMAKE_PREFIX_PATH when needed.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
D="$HERE/.deps/usr"
rm -rf "$HERE/.deps"
mkdir -p "$D/include" "$D/lib/x86_64-linux-gnu/cmake" "$D/share/cmake"
cp -r /usr/include/toml++ /usr/include/nlohmann "$D/include/"
cp /usr/include/zlib.h /usr/include/zconf.h "$D/include/" 2>/dev/null || true
# Debian builds toml++ as a shared library; the copy is used header-only (no library to carry).
mkdir -p "$D/lib/x86_64-linux-gnu/cmake/tomlplusplus"
cat >"$D/lib/x86_64-linux-gnu/cmake/tomlplusplus/tomlplusplusConfig.cmake" <<'CMAKE'
# toml++ header-only, from bench/gpu_pack_deps.sh.
if(NOT TARGET tomlplusplus::tomlplusplus)
  add_library(tomlplusplus::tomlplusplus INTERFACE IMPORTED)
  get_filename_component(_tomlpp_prefix "${CMAKE_CURRENT_LIST_DIR}/../../../.." ABSOLUTE)
  set_target_properties(tomlplusplus::tomlplusplus PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${_tomlpp_prefix}/include" INTERFACE_COMPILE_DEFINITIONS "TOML_HEADER_ONLY=1")
endif()
set(tomlplusplus_FOUND TRUE)
CMAKE
cp -r /usr/share/cmake/nlohmann_json "$D/share/cmake/"
# CLI11 (header-only; the gtrain executables include it): its CMake config finds the headers
# relative to itself.
cp -r /usr/include/CLI "$D/include/"
cp -r /usr/share/cmake/CLI11 "$D/share/cmake/"
# GoogleTest (Debian's libgtest-dev: static libraries built with the C++11 ABI, as pip's LibTorch is;
# its CMake config locates them relative to itself).
cp -r /usr/include/gtest /usr/include/gmock "$D/include/"
cp /usr/lib/x86_64-linux-gnu/libgtest*.a /usr/lib/x86_64-linux-gnu/libgmock*.a "$D/lib/x86_64-linux-gnu/"
cp -r /usr/lib/x86_64-linux-gnu/cmake/GTest "$D/lib/x86_64-linux-gnu/cmake/"
du -sh "$HERE/.deps"
