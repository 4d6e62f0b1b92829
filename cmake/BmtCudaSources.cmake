# In the CUDA build every translation unit that includes Kokkos headers must be compiled by nvcc:
# Kokkos built as a CMake CUDA language (Kokkos_ENABLE_COMPILE_AS_CMAKE_LANGUAGE) does not swap the
# C++ compiler for a wrapper. The library's own headers include Kokkos, so every C++ source of a
# target defined in this project (library, tests, benchmarks, examples, apps) is switched to CUDA
# once all targets exist (called at the end of the top-level CMakeLists.txt), so targets added
# anywhere in the tree need nothing extra.
# Targets whose source directory lies outside the project (GoogleTest built from source) keep C++.
function(bmt_compile_project_sources_as_cuda dir)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  foreach(target IN LISTS targets)
    get_target_property(type ${target} TYPE)
    if(NOT type MATCHES "^(EXECUTABLE|STATIC_LIBRARY|SHARED_LIBRARY|MODULE_LIBRARY|OBJECT_LIBRARY)$")
      continue()
    endif()
    get_target_property(sources ${target} SOURCES)
    get_target_property(source_dir ${target} SOURCE_DIR)
    list(FILTER sources INCLUDE REGEX "\\.(cpp|cc|cxx)$")
    foreach(source IN LISTS sources)
      cmake_path(ABSOLUTE_PATH source BASE_DIRECTORY ${source_dir})  # relative to the target's folder
      set_source_files_properties(${source} TARGET_DIRECTORY ${target} PROPERTIES LANGUAGE CUDA)
    endforeach()
  endforeach()
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    cmake_path(IS_PREFIX PROJECT_SOURCE_DIR "${sub}" NORMALIZE inside)
    if(inside)
      bmt_compile_project_sources_as_cuda(${sub})
    endif()
  endforeach()
endfunction()

