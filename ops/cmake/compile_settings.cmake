# Compiler settings shared by every native target of kerashvd: the wheel's libraries
# (ops/CMakeLists.txt) and the engine's C++ unit tests (core/tests/CMakeLists.txt), so that
# the tests compile the engine exactly as the wheel does.
set(CMAKE_CXX_STANDARD 17)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
set(CMAKE_POSITION_INDEPENDENT_CODE ON)
if(NOT CMAKE_BUILD_TYPE)
  set(CMAKE_BUILD_TYPE Release)
endif()
# TensorFlow's ABI; everything that shares C++ types with the TF ops must agree on it.
add_compile_definitions(_GLIBCXX_USE_CXX11_ABI=1)
