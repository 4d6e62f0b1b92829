# Debian's Kokkos 3.4 (libtrilinos-kokkos-dev) exports Kokkos::kokkos with the include directory
# /usr/lib/include, which does not exist; Kokkos_INCLUDE_DIRS from the same config is right.
# Included after find_package(Kokkos), by the build and by the installed bmtrainConfig.cmake alike:
# a downstream project hits the same broken target.
if(TARGET Kokkos::kokkos AND Kokkos_INCLUDE_DIRS)
  get_target_property(_bmt_kokkos_inc Kokkos::kokkos INTERFACE_INCLUDE_DIRECTORIES)
  foreach(_dir IN LISTS _bmt_kokkos_inc)
    if(NOT EXISTS "${_dir}")
      set_target_properties(Kokkos::kokkos PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${Kokkos_INCLUDE_DIRS}")
      break()
    endif()
  endforeach()
  unset(_bmt_kokkos_inc)
  unset(_dir)
endif()
