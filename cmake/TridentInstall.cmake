# `cmake --install build --prefix P` (docs/install.md): what an HPC site installs, and where.
#
#   P/bin/trident                       the executable
#   P/bin/trident-plot                  tools/plot_run.py: a run's metrics.csv as PNG
#   P/share/trident/input/              example decks                       } TRIDENT_ROOT: the same
#   P/share/trident/jobscripts/         train.sbatch, chain.sh, README.md,  } layout as the source
#                                       scaling/ (study driver, one point)  }
#   P/share/trident/tools/              plots and checkpoint readers        } tree's folders
#   P/share/doc/trident/                README.md, docs/
#   P/share/modulefiles/trident/<version>.lua   Lmod modulefile (PATH, TRIDENT_ROOT, help)
#
# TRIDENT_MODULEFILE_DIR moves the modulefile (relative: under P; absolute: a site's module tree),
# TRIDENT_MODULE_DEPENDS lists modules it loads first (a site's compiler, MPI, HDF5, Kokkos).

include(GNUInstallDirs)
set(TRIDENT_INSTALL_DATADIR ${CMAKE_INSTALL_DATADIR}/trident)
set(TRIDENT_INSTALL_DOCDIR ${CMAKE_INSTALL_DATADIR}/doc/trident)
set(TRIDENT_MODULEFILE_DIR "${CMAKE_INSTALL_DATADIR}/modulefiles" CACHE STRING
  "Where `cmake --install` writes the Lmod modulefile trident/<version>.lua (relative to the prefix, or absolute)")
set(TRIDENT_MODULE_DEPENDS "" CACHE STRING
  "Modules the modulefile loads first, ;-separated (e.g. gcc/12;cray-mpich;cray-hdf5-parallel;kokkos/4.3)")

# Libraries outside the system directories (a site's or Spack's Kokkos, HDF5, MPI) stay found
# from the installed executable, without LD_LIBRARY_PATH. A target property: this file is included
# after apps/ created the target, so the variable CMAKE_INSTALL_RPATH_USE_LINK_PATH would come too
# late (an installed trident once had no RUNPATH at all). -DCMAKE_INSTALL_RPATH_USE_LINK_PATH=OFF
# still turns it off.
if(NOT DEFINED CMAKE_INSTALL_RPATH_USE_LINK_PATH OR CMAKE_INSTALL_RPATH_USE_LINK_PATH)
  set_target_properties(trident PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
endif()

install(TARGETS trident RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(PROGRAMS tools/plot_run.py DESTINATION ${CMAKE_INSTALL_BINDIR} RENAME trident-plot)
install(DIRECTORY input/ DESTINATION ${TRIDENT_INSTALL_DATADIR}/input FILES_MATCHING PATTERN "*.ini")
install(PROGRAMS jobscripts/train.sbatch jobscripts/chain.sh DESTINATION ${TRIDENT_INSTALL_DATADIR}/jobscripts)
install(FILES jobscripts/README.md DESTINATION ${TRIDENT_INSTALL_DATADIR}/jobscripts)
install(PROGRAMS jobscripts/scaling/scaling.sh jobscripts/scaling/point.sbatch
  DESTINATION ${TRIDENT_INSTALL_DATADIR}/jobscripts/scaling)
# The tools a user runs on results (not the build, test and benchmark drivers, which need a source tree).
install(PROGRAMS tools/plot_run.py tools/trident_ckpt.py tools/plot_ckpt.py tools/plot_zero.py tools/scaling_report.py
  DESTINATION ${TRIDENT_INSTALL_DATADIR}/tools)
install(FILES README.md DESTINATION ${TRIDENT_INSTALL_DOCDIR})
install(DIRECTORY docs/ DESTINATION ${TRIDENT_INSTALL_DOCDIR}/docs)

# The modulefile: everything but the prefix is known now; the prefix only at install time
# (`cmake --install --prefix P` overrides CMAKE_INSTALL_PREFIX then), so it is filled in there.
set(PREFIX "@PREFIX@")
set(TRIDENT_MODULE_COMMIT "@COMMIT@")
if(IS_ABSOLUTE "${TRIDENT_MODULEFILE_DIR}")
  set(TRIDENT_MODULE_USE "${TRIDENT_MODULEFILE_DIR}")
else()
  set(TRIDENT_MODULE_USE "@PREFIX@/${TRIDENT_MODULEFILE_DIR}")
endif()
set(TRIDENT_MODULE_MPI "${MPIEXEC_EXECUTABLE}")
set(TRIDENT_MODULE_KOKKOS_DEVICES "${Kokkos_DEVICES}")
list(JOIN TRIDENT_ARCH_FLAGS " " TRIDENT_MODULE_ARCH)
if(NOT TRIDENT_MODULE_ARCH)
  set(TRIDENT_MODULE_ARCH "no -march flag")
endif()
list(JOIN TRIDENT_CPU_FEATURES " " TRIDENT_MODULE_FEATURES)
set(TRIDENT_MODULE_DEPENDS_LUA "")
foreach(_m IN LISTS TRIDENT_MODULE_DEPENDS)
  string(APPEND TRIDENT_MODULE_DEPENDS_LUA "depends_on(\"${_m}\")\n")
endforeach()
set(_stage ${CMAKE_BINARY_DIR}/generated/trident.lua.in)
configure_file(${CMAKE_CURRENT_LIST_DIR}/trident.lua.in ${_stage} @ONLY)
install(CODE "
  set(_prefix \"\${CMAKE_INSTALL_PREFIX}\")
  # `--prefix relprefix` installs under the current directory; the module must name it absolutely
  # (it is loaded from anywhere).
  if(NOT IS_ABSOLUTE \"\${_prefix}\")
    execute_process(COMMAND pwd OUTPUT_VARIABLE _cwd OUTPUT_STRIP_TRAILING_WHITESPACE)
    get_filename_component(_prefix \"\${_cwd}/\${_prefix}\" ABSOLUTE)
  endif()
  set(_dir \"${TRIDENT_MODULEFILE_DIR}\")
  if(NOT IS_ABSOLUTE \"\${_dir}\")
    set(_dir \"\${_prefix}/\${_dir}\")
  endif()
  set(_commit unknown)
  if(EXISTS \"${CMAKE_BINARY_DIR}/generated/trident_version.hpp\")
    file(STRINGS \"${CMAKE_BINARY_DIR}/generated/trident_version.hpp\" _line REGEX \"TRIDENT_GIT_COMMIT\")
    string(REGEX REPLACE \".*TRIDENT_GIT_COMMIT \\\"([^\\\"]*)\\\".*\" \"\\\\1\" _commit \"\${_line}\")
  endif()
  file(READ \"${_stage}\" _m)
  string(REPLACE \"@PREFIX@\" \"\${_prefix}\" _m \"\${_m}\")
  string(REPLACE \"@COMMIT@\" \"\${_commit}\" _m \"\${_m}\")
  set(_file \"\$ENV{DESTDIR}\${_dir}/trident/${PROJECT_VERSION}.lua\")
  message(STATUS \"Installing: \${_file} (Lmod modulefile: module use \${_dir}; module load trident)\")
  file(WRITE \"\${_file}\" \"\${_m}\")
")
