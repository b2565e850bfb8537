# Install rules and the generated packaging files (DESIGN §7; packaging/README.md says
# what goes where and why). Included last from the root CMakeLists.txt, so every module's
# targets exist by now; targets that have not landed yet are skipped (if(TARGET ...)).
include(GNUInstallDirs)

# Where systemd looks for units, sysusers.d and tmpfiles.d: systemd.pc's variables when we
# install into /usr (Debian 12: /lib/systemd/system, /usr/lib/sysusers.d,
# /usr/lib/tmpfiles.d; debhelper 13.11 finds units only under lib/systemd/system), else
# PREFIX/lib/..., which systemd also searches (/usr/local/lib/systemd/system, ...).
# Paths that depend on the prefix (ExecStart=, the config) are fixed at configure time:
# configure with -DCMAKE_INSTALL_PREFIX=/usr rather than `cmake --install --prefix`.
# -DWARM_SYSTEMD_UNITDIR=... (and WARM_SYSUSERSDIR, WARM_TMPFILESDIR) override.
function(warm_systemd_dir var pcvar fallback)
  if(NOT DEFINED ${var})
    set(dir ${fallback})
    if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
      pkg_get_variable(pcdir systemd ${pcvar})
      if(pcdir)
        set(dir ${pcdir})
      endif()
    endif()
    set(${var} ${dir} PARENT_SCOPE)  # not cached: it follows CMAKE_INSTALL_PREFIX
  endif()
endfunction()
warm_systemd_dir(WARM_SYSTEMD_UNITDIR systemdsystemunitdir lib/systemd/system)
warm_systemd_dir(WARM_SYSUSERSDIR sysusersdir lib/sysusers.d)
warm_systemd_dir(WARM_TMPFILESDIR tmpfilesdir lib/tmpfiles.d)

set(_src ${CMAKE_SOURCE_DIR}/packaging)
set(_pkg ${CMAKE_BINARY_DIR}/packaging)

# ---- units: warmd.service (CPU) and warmd-gpu.service from one template ----------------
# The GPU lines come from packaging/gpu.conf, the drop-in admins install to switch
# variants, so the drop-in and the full GPU unit cannot drift apart. warmd-gpu.service is
# not installed: it exists so `systemd-analyze` can score the GPU variant as one file.
set(WARMD_BINDIR ${CMAKE_INSTALL_FULL_BINDIR})
# warmd reads /etc/warmd/warmd.conf; an install elsewhere (/usr/local/etc) names its file.
set(WARMD_CONFIG ${CMAKE_INSTALL_FULL_SYSCONFDIR}/warmd/warmd.conf)
set(WARMD_ARGS "")
if(NOT WARMD_CONFIG STREQUAL "/etc/warmd/warmd.conf")
  set(WARMD_ARGS " --config=${WARMD_CONFIG}")
endif()
set(WARMD_DATADIR ${CMAKE_INSTALL_FULL_DATADIR}/warmd)
set(WARMD_DOCDIR ${CMAKE_INSTALL_FULL_DOCDIR})
set(WARMD_STATE_DIR /var/lib/warmd)          # StateDirectory=warmd; config.c's default
set(WARMD_MODELS_DIR /var/lib/warmd/models)  # config.c's default models_dir
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_src}/gpu.conf)
file(STRINGS ${_src}/gpu.conf _gpu_lines)
set(_gpu_devices "")
foreach(line IN LISTS _gpu_lines)
  if(NOT line MATCHES "^(#|\\[|$)")
    string(APPEND _gpu_devices "${line}\n")
  endif()
endforeach()
string(STRIP "${_gpu_devices}" _gpu_devices)

set(WARMD_VARIANT_NOTE "CPU variant (no device access). The GPU variant is this unit plus the drop-in
# ${WARMD_DATADIR}/gpu.conf in /etc/systemd/system/warmd.service.d/ (see that file).")
set(WARMD_DEVICES "PrivateDevices=yes")
configure_file(${_src}/warmd.service.in ${_pkg}/warmd.service @ONLY)
set(WARMD_VARIANT_NOTE "GPU variant, as one file for systemd-analyze: warmd.service plus the drop-in
# gpu.conf. Not installed; install the drop-in instead.")
set(WARMD_DEVICES "# GPU: the lines of packaging/gpu.conf\n${_gpu_devices}")
configure_file(${_src}/warmd.service.in ${_pkg}/warmd-gpu.service @ONLY)
configure_file(${_src}/gpu.conf ${_pkg}/gpu.conf @ONLY)
configure_file(${_src}/warmd.socket ${_pkg}/warmd.socket COPYONLY)

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
  install(FILES ${_pkg}/warmd.conf DESTINATION ${CMAKE_INSTALL_FULL_SYSCONFDIR}/warmd)
  install(FILES ${_pkg}/warmd.8 DESTINATION ${CMAKE_INSTALL_MANDIR}/man8)
endif()
if(TARGET warmctl)
  install(FILES ${_src}/warmctl.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
endif()
install(FILES ${_pkg}/warmd.service ${_pkg}/warmd.socket DESTINATION ${WARM_SYSTEMD_UNITDIR})
install(FILES ${_src}/sysusers.conf DESTINATION ${WARM_SYSUSERSDIR} RENAME warmd.conf)
install(FILES ${_src}/tmpfiles.conf DESTINATION ${WARM_TMPFILESDIR} RENAME warmd.conf)
install(FILES ${_pkg}/gpu.conf DESTINATION ${CMAKE_INSTALL_DATADIR}/warmd)
install(FILES ${_src}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})

# ---- checks that need no installation (tests/packaging/check-units.sh) -----------------
if(TARGET warmd)
  add_test(NAME packaging-units
    COMMAND sh ${CMAKE_SOURCE_DIR}/tests/packaging/check-units.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(packaging-units PROPERTIES LABELS unit TIMEOUT 120 SKIP_RETURN_CODE 77)
endif()
