# Install rules and the generated packaging files (DESIGN §7; packaging/README.md says
# what goes where and why). Included last from the root CMakeLists.txt, so every module's
# targets exist by now; targets that have not landed yet are skipped (if(TARGET ...)).
#
# Files that name installed paths are written when they are installed, for the prefix of
# that installation (cmake/install-paths.cmake): `cmake --install BUILD --prefix P` gives
# units and a warm.pc that point at P. The build tree's copies in BUILD/packaging/ are
# for the configured CMAKE_INSTALL_PREFIX.
include(GNUInstallDirs)
include(${CMAKE_CURRENT_LIST_DIR}/install-paths.cmake)

set(_src ${CMAKE_SOURCE_DIR}/packaging)
set(_pkg ${CMAKE_BINARY_DIR}/packaging)

# ---- what the install-time scripts need: BUILD/install-vars.cmake ----------------------
# systemd.pc's directories are read now (the install-time scripts cannot run pkg-config);
# -DWARM_SYSTEMD_UNITDIR=... (WARM_SYSUSERSDIR, WARM_TMPFILESDIR) overrides them.
pkg_get_variable(_pc_unitdir systemd systemdsystemunitdir)
pkg_get_variable(_pc_sysusersdir systemd sysusersdir)
pkg_get_variable(_pc_tmpfilesdir systemd tmpfilesdir)
# libwarm.a's link line for `pkg-config --static --libs warm` (warm.pc.in says why it is
# not Requires.private); preprocessor flags are no link flags, whatever a .pc says.
set(_static ${GRPC_STATIC_LDFLAGS} ${PROTOBUFC_STATIC_LDFLAGS})
list(FILTER _static EXCLUDE REGEX "^-[DI]")
foreach(dir IN LISTS CMAKE_C_IMPLICIT_LINK_DIRECTORIES)  # -L/usr/lib: the linker's own
  list(REMOVE_ITEM _static "-L${dir}")
endforeach()
list(REMOVE_DUPLICATES _static)
list(JOIN _static " " _static)
set(_vars "# Written by cmake/install.cmake at configure time; read by the install scripts.\n")
foreach(v IN ITEMS
    "WARM_SOURCE_DIR;${CMAKE_SOURCE_DIR}" "WARM_BINARY_DIR;${CMAKE_BINARY_DIR}"
    "WARM_CONFIGURED_PREFIX;${CMAKE_INSTALL_PREFIX}" "WARM_VERSION;${PROJECT_VERSION}"
    "CMAKE_INSTALL_BINDIR;${CMAKE_INSTALL_BINDIR}" "CMAKE_INSTALL_LIBDIR;${CMAKE_INSTALL_LIBDIR}"
    "CMAKE_INSTALL_INCLUDEDIR;${CMAKE_INSTALL_INCLUDEDIR}"
    "CMAKE_INSTALL_DATADIR;${CMAKE_INSTALL_DATADIR}" "CMAKE_INSTALL_DOCDIR;${CMAKE_INSTALL_DOCDIR}"
    "CMAKE_INSTALL_MANDIR;${CMAKE_INSTALL_MANDIR}"
    "CMAKE_INSTALL_SYSCONFDIR;${CMAKE_INSTALL_SYSCONFDIR}"
    "WARM_SYSTEMD_PC_UNITDIR;${_pc_unitdir}" "WARM_SYSTEMD_PC_SYSUSERSDIR;${_pc_sysusersdir}"
    "WARM_SYSTEMD_PC_TMPFILESDIR;${_pc_tmpfilesdir}"
    "WARM_GIVEN_UNITDIR;${WARM_SYSTEMD_UNITDIR}" "WARM_GIVEN_SYSUSERSDIR;${WARM_SYSUSERSDIR}"
    "WARM_GIVEN_TMPFILESDIR;${WARM_TMPFILESDIR}"
    "WARM_PC_LIBS_PRIVATE;${_static}")
  list(GET v 0 name)
  list(SUBLIST v 1 -1 value)
  string(APPEND _vars "set(${name} [==[${value}]==])\n")
endforeach()
if(TARGET warmd)
  string(APPEND _vars "set(WARM_HAVE_WARMD ON)\n")
endif()
string(APPEND _vars "include([==[${CMAKE_CURRENT_LIST_DIR}/install-paths.cmake]==])\n")
file(CONFIGURE OUTPUT ${CMAKE_BINARY_DIR}/install-vars.cmake CONTENT "${_vars}" @ONLY)

# The build tree's copies, for the configured prefix (and the variables in this scope).
include(${CMAKE_BINARY_DIR}/install-vars.cmake)
warm_packaging_render("${CMAKE_INSTALL_PREFIX}" "${_pkg}")
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
  ${_src}/gpu.conf ${_src}/warmd.service.in ${_src}/warmd.socket
  ${CMAKE_SOURCE_DIR}/client/warm.pc.in ${CMAKE_CURRENT_LIST_DIR}/install-paths.cmake)

# ---- the default config, generated from the daemon's schema table ----------------------
# Every key commented out with its help and default, so the conffile changes nothing and
# new defaults reach admins who never edited it.
if(TARGET warmd)
  add_custom_command(
    OUTPUT ${_pkg}/warmd.conf
    COMMAND sh -c "\"$1\" --print-default-config > \"$2.tmp\" && mv \"$2.tmp\" \"$2\""
            sh $<TARGET_FILE:warmd> ${_pkg}/warmd.conf
    DEPENDS warmd
    COMMENT "warmd --print-default-config > packaging/warmd.conf"
    VERBATIM)
  # warmd(8): the SETTINGS section is the same schema output.
  configure_file(${_src}/warmd.8.in ${_pkg}/warmd.8.in @ONLY)
  add_custom_command(
    OUTPUT ${_pkg}/warmd.8
    COMMAND sh ${_src}/gen-man.sh $<TARGET_FILE:warmd> ${_pkg}/warmd.8.in ${_pkg}/warmd.8
    DEPENDS warmd ${_src}/gen-man.sh ${_pkg}/warmd.8.in
    COMMENT "warmd(8) with the settings of warmd --print-default-config"
    VERBATIM)
  add_custom_target(warm_packaging ALL DEPENDS ${_pkg}/warmd.conf ${_pkg}/warmd.8)
endif()

# ---- install ----------------------------------------------------------------------------
# client/CMakeLists.txt installs libwarm, warm.h, warm.pc and warmctl itself.
if(TARGET warmd)
  install(TARGETS warmd RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  install(FILES ${_pkg}/warmd.8 DESTINATION ${CMAKE_INSTALL_MANDIR}/man8)
endif()
if(TARGET warmctl)
  install(FILES ${_src}/warmctl.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
endif()
# Units, sysusers.d, tmpfiles.d, gpu.conf, the conffile: for the prefix of the install.
install(CODE "include([==[${CMAKE_BINARY_DIR}/install-vars.cmake]==])
warm_packaging_install(service)")
# The installed README is for admins and users of the installed files.
install(FILES ${_src}/README.installed.md DESTINATION ${CMAKE_INSTALL_DOCDIR} RENAME README.md)
# Tools an admin needs when a model does not load or runs slowly.
foreach(tool warm-gguf warm-bench)
  if(TARGET ${tool})
    install(TARGETS ${tool} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
    install(FILES ${_src}/${tool}.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
  endif()
endforeach()
# The Python client, with the stubs generated from proto/ at build time, for Debian's
# python3 (its own packages live in PREFIX/lib/python3/dist-packages).
set(WARM_PYTHON_INSTALL_DIR lib/python3/dist-packages CACHE STRING
  "where the Python client is installed, below the prefix unless absolute")
if(TARGET warm_proto_python)
  install(DIRECTORY ${CMAKE_SOURCE_DIR}/client/python/warm_client
    DESTINATION ${WARM_PYTHON_INSTALL_DIR} FILES_MATCHING PATTERN "*.py"
    PATTERN __pycache__ EXCLUDE)
  install(FILES ${WARM_PYTHON_DIR}/warm/v1/warm_pb2.py ${WARM_PYTHON_DIR}/warm/v1/warm_pb2_grpc.py
    DESTINATION ${WARM_PYTHON_INSTALL_DIR}/warm/v1)
endif()

# ---- checks that need no installation (tests/packaging/check-units.sh) -----------------
if(TARGET warmd)
  add_test(NAME packaging-units
    COMMAND sh ${CMAKE_SOURCE_DIR}/tests/packaging/check-units.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(packaging-units PROPERTIES LABELS unit TIMEOUT 120 SKIP_RETURN_CODE 77)
endif()
# `cmake --install --prefix P` writes units and warm.pc that point at P.
add_test(NAME packaging-install-prefix
  COMMAND sh ${CMAKE_SOURCE_DIR}/tests/packaging/check-install-prefix.sh ${CMAKE_BINARY_DIR})
set_tests_properties(packaging-install-prefix PROPERTIES LABELS unit TIMEOUT 300)
