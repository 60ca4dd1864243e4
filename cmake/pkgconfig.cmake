# pkg-config files, for code built without CMake (make, autotools, meson):
#
#   c++ -std=c++20 app.cpp $(pkg-config --cflags --libs mdring-mpi)
#
# mdring.pc gives the headers and threads; one file per component that needs more
# flags (mdring-mpi, mdring-separate, mdring-boost-mpi, mdring-ucx, mdring-cuda,
# mdring-nccl, mdring-cuda-mpi, and mdring-pmpi where the interposer was built),
# each with the flags of the dependency this build found. Installed beside the
# CMake package, in <libdir>/pkgconfig. The prefix is found from where the file
# lies (${pcfiledir}), so `cmake --install --prefix DIR` to any DIR works.
# No -std=c++20 in Cflags (it would override a later standard the user chose);
# config.hpp stops a C++17 compile with that advice.

set(MDRING_PKGCONFIG_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
set(_pc_out ${CMAKE_CURRENT_BINARY_DIR}/pkgconfig)
if(IS_ABSOLUTE "${MDRING_PKGCONFIG_DIR}")
  set(_pc_prefix "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH _pc_up "/p/${MDRING_PKGCONFIG_DIR}" "/p")
  string(REGEX REPLACE "/$" "" _pc_up "${_pc_up}")
  set(_pc_prefix "\${pcfiledir}/${_pc_up}")
endif()
foreach(_d INCLUDEDIR LIBDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${_d}}")
    set(_pc_${_d} "${CMAKE_INSTALL_${_d}}")
  else()
    set(_pc_${_d} "\${prefix}/${CMAKE_INSTALL_${_d}}")
  endif()
endforeach()

# mdring_pc(name description requires cflags libs [extra lines]): writes name.pc.
function(mdring_pc name description requires cflags libs)
  set(text "prefix=${_pc_prefix}\nincludedir=${_pc_INCLUDEDIR}\nlibdir=${_pc_LIBDIR}\n")
  foreach(extra IN LISTS ARGN)
    string(APPEND text "${extra}\n")
  endforeach()
  string(APPEND text "\nName: ${name}\nDescription: ${description}\nVersion: ${PROJECT_VERSION}\n")
  if(requires)
    string(APPEND text "Requires: ${requires}\n")
  endif()
  list(JOIN cflags " " cflags)
  list(JOIN libs " " libs)
  string(APPEND text "Cflags: ${cflags}\nLibs: ${libs}\n")
  file(WRITE ${_pc_out}/${name}.pc "${text}")
endfunction()

# -I/-D/-l flags from CMake's lists (include directories, definitions, libraries as paths).
function(mdring_pc_flags out_cflags out_libs)
  cmake_parse_arguments(F "" "" "INCLUDES;DEFINES;OPTIONS;LIBRARIES;LINK" ${ARGN})
  set(c "")
  foreach(i IN LISTS F_INCLUDES)
    list(APPEND c "-I${i}")
  endforeach()
  foreach(d IN LISTS F_DEFINES)
    list(APPEND c "-D${d}")
  endforeach()
  list(APPEND c ${F_OPTIONS})
  set(l ${F_LINK})
  foreach(lib IN LISTS F_LIBRARIES)
    if(lib MATCHES "^-")
      list(APPEND l "${lib}")
    elseif(IS_ABSOLUTE "${lib}")
      get_filename_component(dir "${lib}" DIRECTORY)
      get_filename_component(base "${lib}" NAME_WE)
      string(REGEX REPLACE "^lib" "" base "${base}")
      list(APPEND l "-L${dir}" "-l${base}")
    else()
      list(APPEND l "-l${lib}")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES l)
  set(${out_cflags} "${c}" PARENT_SCOPE)
  set(${out_libs} "${l}" PARENT_SCOPE)
endfunction()

set(_pc_files mdring)
mdring_pc(mdring "Topology-aware collectives, header-only C++20 (compile with -std=c++20 or later)" ""
          "-I\${includedir};-pthread" "-pthread")

if(MDRING_HAVE_MPI AND NOT MDRING_SMPI)
  mdring_pc_flags(cf lf INCLUDES ${MPI_CXX_INCLUDE_DIRS} DEFINES ${MPI_CXX_COMPILE_DEFINITIONS} OMPI_SKIP_MPICXX=1
                  MPICH_SKIP_MPICXX=1 OPTIONS ${MPI_CXX_COMPILE_OPTIONS} LIBRARIES ${MPI_CXX_LIBRARIES}
                  LINK ${MPI_CXX_LINK_FLAGS})
  mdring_pc(mdring-mpi "mdring over MPI (mdring/mpi.hpp), with the MPI this mdring was built against" mdring "${cf}" "${lf}")
  mdring_pc(mdring-separate
            "mdring over MPI, separate compilation: compile $(pkg-config --variable=source mdring-separate) once into the program"
            mdring-mpi "-DMDRING_SEPARATE_COMPILATION=1" "" "source=\${includedir}/mdring/separate/src.cpp")
  list(APPEND _pc_files mdring-mpi mdring-separate)
  if(MDRING_HAVE_BOOST_MPI)
    set(_boost_libs "")
    foreach(t Boost::mpi Boost::serialization)
      if(TARGET ${t})
        get_target_property(_loc ${t} LOCATION)
        list(APPEND _boost_libs ${_loc})
      endif()
    endforeach()
    get_target_property(_boost_inc Boost::mpi INTERFACE_INCLUDE_DIRECTORIES)
    mdring_pc_flags(cf lf INCLUDES ${_boost_inc} LIBRARIES ${_boost_libs})
    mdring_pc(mdring-boost-mpi "mdring over Boost.MPI (mdring/boost_mpi.hpp)" mdring-mpi "${cf}" "${lf}")
    list(APPEND _pc_files mdring-boost-mpi)
  endif()
endif()
if(MDRING_HAVE_UCX)
  mdring_pc(mdring-ucx "mdring over UCX (mdring/ucx.hpp): processes started by mdring-run or torchrun" "mdring, ucx >= 1.10"
            "" "")
  list(APPEND _pc_files mdring-ucx)
endif()
if(MDRING_HAVE_CUDA)
  mdring_pc_flags(cf lf INCLUDES ${CUDAToolkit_INCLUDE_DIRS} LIBRARIES "-L${CUDAToolkit_LIBRARY_DIR}" -lcudart)
  mdring_pc(mdring-cuda "mdring's GPU path (mdring/cuda/*.cuh; compile with nvcc -std=c++20)" mdring "${cf}" "${lf}")
  list(APPEND _pc_files mdring-cuda)
  if(MDRING_HAVE_NCCL)
    mdring_pc_flags(cf lf INCLUDES ${MDRING_NCCL_INCLUDE_DIR} LIBRARIES ${MDRING_NCCL_LIBRARY})
    mdring_pc(mdring-nccl "mdring's GPU path with NCCL (mdring/cuda/nccl.cuh)" mdring-cuda "${cf}" "${lf}")
    list(APPEND _pc_files mdring-nccl)
  endif()
  if(MDRING_HAVE_CUDA_MPI)
    if(MDRING_HAVE_NCCL)
      mdring_pc(mdring-cuda-mpi "mdring's GPU path over MPI (mdring/cuda/mpi.cuh)" "mdring-mpi, mdring-nccl" "" "")
    else()
      mdring_pc(mdring-cuda-mpi "mdring's GPU path over MPI (mdring/cuda/mpi.cuh)" "mdring-mpi, mdring-cuda"
                "-DMDRING_CUDA_NO_NCCL=1" "")
    endif()
    list(APPEND _pc_files mdring-cuda-mpi)
  endif()
endif()
foreach(f IN LISTS _pc_files)
  install(FILES ${_pc_out}/${f}.pc DESTINATION ${MDRING_PKGCONFIG_DIR})
endforeach()

# The interposer's file only where it was built (installed OPTIONAL, as the library):
# written by the build, after the library.
if(MDRING_HAVE_PMPI)
  mdring_pc(mdring-pmpi "libmdring-pmpi.so, mdring's MPI interposer: preload $(pkg-config --variable=preload mdring-pmpi), or link it before libmpi"
            "" "" "-L\${libdir};-lmdring-pmpi"
            "preload=\${libdir}/${CMAKE_SHARED_LIBRARY_PREFIX}mdring-pmpi${CMAKE_SHARED_LIBRARY_SUFFIX}")
  file(RENAME ${_pc_out}/mdring-pmpi.pc ${_pc_out}/mdring-pmpi.pc.in)
  add_custom_command(OUTPUT ${_pc_out}/built/mdring-pmpi.pc
    COMMAND ${CMAKE_COMMAND} -E copy ${_pc_out}/mdring-pmpi.pc.in ${_pc_out}/built/mdring-pmpi.pc
    DEPENDS mdring_pmpi ${_pc_out}/mdring-pmpi.pc.in VERBATIM)
  add_custom_target(mdring_pmpi_pc ALL DEPENDS ${_pc_out}/built/mdring-pmpi.pc)
  install(FILES ${_pc_out}/built/mdring-pmpi.pc DESTINATION ${MDRING_PKGCONFIG_DIR} OPTIONAL)
endif()
