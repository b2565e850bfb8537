# The files that name installed paths (warmd.service's ExecStart= and Documentation=,
# gpu.conf's comment, warm.pc's prefix) are written for the prefix of the installation
# that installs them: `cmake --install BUILD --prefix P` writes units and warm.pc that
# point at P even when BUILD was configured with another CMAKE_INSTALL_PREFIX. The
# functions here run at configure time (the build tree's copies in BUILD/packaging/, which
# tests/packaging/check-units.sh checks) and at install time (install(CODE) blocks that
# include BUILD/install-vars.cmake, which includes this file). They use only what script
# mode allows.

# warm_install_dirs(PREFIX): sets WARM_<DIR> (absolute) for an installation into PREFIX.
# GNUInstallDirs' rules: a relative CMAKE_INSTALL_<DIR> lies below PREFIX, except that
# SYSCONFDIR is /etc for the prefixes / and /usr and /etc/opt/NAME for /opt/NAME; an
# absolute one stays, but for /etc in a build configured for /usr (as debhelper
# configures) that is etc below another prefix. systemd's
# directories: -DWARM_SYSTEMD_UNITDIR=... (WARM_SYSUSERSDIR, WARM_TMPFILESDIR) when given,
# else systemd.pc's for PREFIX /usr (Debian 12: /lib/systemd/system, /usr/lib/sysusers.d,
# /usr/lib/tmpfiles.d; debhelper 13.11 finds units only under lib/systemd/system), else
# PREFIX/lib/systemd/system etc., which systemd also searches.
function(warm_install_dirs prefix)
  string(REGEX REPLACE "/+$" "" p "${prefix}")  # "/" -> ""
  string(REGEX REPLACE "/+$" "" configured "${WARM_CONFIGURED_PREFIX}")
  foreach(d BINDIR LIBDIR INCLUDEDIR DATADIR DOCDIR MANDIR SYSCONFDIR)
    set(rel "${CMAKE_INSTALL_${d}}")
    # /etc given for a /usr build is the usual sysconfdir of that prefix, not a choice of
    # its own: installed elsewhere (--prefix P), the conffile goes to P/etc, not /etc.
    if(d STREQUAL "SYSCONFDIR" AND rel STREQUAL "/etc" AND
       (configured STREQUAL "" OR configured STREQUAL "/usr"))
      set(rel etc)
    endif()
    if(IS_ABSOLUTE "${rel}")
      set(full "${rel}")
    elseif(d STREQUAL "SYSCONFDIR" AND (p STREQUAL "" OR p STREQUAL "/usr"))
      set(full "/${rel}")
    elseif(d STREQUAL "SYSCONFDIR" AND p MATCHES "^/opt/")
      set(full "/${rel}${p}")
    else()
      set(full "${p}/${rel}")
    endif()
    set(WARM_${d} "${full}" PARENT_SCOPE)
  endforeach()
  set(fallback_UNITDIR lib/systemd/system)
  set(fallback_SYSUSERSDIR lib/sysusers.d)
  set(fallback_TMPFILESDIR lib/tmpfiles.d)
  foreach(d UNITDIR SYSUSERSDIR TMPFILESDIR)
    if(WARM_GIVEN_${d})
      set(full "${WARM_GIVEN_${d}}")
    elseif(p STREQUAL "/usr" AND WARM_SYSTEMD_PC_${d})
      set(full "${WARM_SYSTEMD_PC_${d}}")
    else()
      set(full "${fallback_${d}}")
    endif()
    if(NOT IS_ABSOLUTE "${full}")
      set(full "${p}/${full}")
    endif()
    set(WARM_${d} "${full}" PARENT_SCOPE)
  endforeach()
endfunction()

# warm_packaging_render(PREFIX OUTDIR): writes warmd.service (CPU), warmd-gpu.service (the
# GPU variant as one file, for systemd-analyze; not installed), gpu.conf, warmd.socket and
# warm.pc into OUTDIR for an installation into PREFIX. A file is rewritten only when its
# text changes.
function(warm_packaging_render prefix outdir)
  warm_install_dirs("${prefix}")
  string(REGEX REPLACE "/+$" "" p "${prefix}")  # "/" -> ""
  set(src "${WARM_SOURCE_DIR}/packaging")
  set(PROJECT_VERSION "${WARM_VERSION}")

  # ---- units: warmd.service and warmd-gpu.service from one template ----
  # The GPU lines come from packaging/gpu.conf, the drop-in admins install to switch
  # variants, so the drop-in and the full GPU unit cannot drift apart.
  set(WARMD_BINDIR "${WARM_BINDIR}")
  # warmd reads /etc/warmd/warmd.conf; an install elsewhere (/usr/local/etc) names its file.
  set(WARMD_ARGS "")
  if(NOT WARM_SYSCONFDIR STREQUAL "/etc")
    set(WARMD_ARGS " --config=${WARM_SYSCONFDIR}/warmd/warmd.conf")
  endif()
  set(WARMD_DATADIR "${WARM_DATADIR}/warmd")
  set(WARMD_DOCDIR "${WARM_DOCDIR}")
  set(WARMD_SYSCONFDIR "${WARM_SYSCONFDIR}/warmd")
  set(WARMD_STATE_DIR /var/lib/warmd)          # StateDirectory=warmd; config.c's default
  set(WARMD_MODELS_DIR /var/lib/warmd/models)  # config.c's default models_dir
  file(STRINGS "${src}/gpu.conf" gpu_lines)
  set(gpu_devices "")
  foreach(line IN LISTS gpu_lines)
    if(NOT line MATCHES "^(#|\\[|$)")
      string(APPEND gpu_devices "${line}\n")
    endif()
  endforeach()
  string(STRIP "${gpu_devices}" gpu_devices)

  file(READ "${src}/warmd.service.in" unit)
  set(WARMD_VARIANT_NOTE "CPU variant: no access to devices. For an NVIDIA GPU, add the drop-in
# ${WARMD_DATADIR}/gpu.conf as /etc/systemd/system/warmd.service.d/gpu.conf (see that file).")
  set(WARMD_DEVICES "PrivateDevices=yes")
  file(CONFIGURE OUTPUT "${outdir}/warmd.service" CONTENT "${unit}" @ONLY)
  set(WARMD_VARIANT_NOTE "GPU variant, as one file for systemd-analyze: warmd.service plus the drop-in
# gpu.conf. Not installed; install the drop-in instead.")
  set(WARMD_DEVICES "# GPU: the lines of gpu.conf\n${gpu_devices}")
  file(CONFIGURE OUTPUT "${outdir}/warmd-gpu.service" CONTENT "${unit}" @ONLY)
  file(READ "${src}/gpu.conf" text)
  file(CONFIGURE OUTPUT "${outdir}/gpu.conf" CONTENT "${text}" @ONLY)
  file(READ "${src}/warmd.socket" text)
  file(CONFIGURE OUTPUT "${outdir}/warmd.socket" CONTENT "${text}" @ONLY)

  # ---- warm.pc: prefix=PREFIX, as distributions write it ----
  # Requires.private would pull grpc's Cflags into every `pkg-config --cflags warm` (and
  # with them abseil's -DNOMINMAX, meant for Windows); warm.h needs none of them, so
  # the static link line is spelled out in Libs.private instead.
  set(WARM_PC_PREFIX "${p}")
  if(p STREQUAL "")
    set(WARM_PC_PREFIX "/")
  endif()
  foreach(d LIBDIR INCLUDEDIR)
    string(LENGTH "${p}/" n)
    string(SUBSTRING "${WARM_${d}}/" 0 ${n} head)
    if(head STREQUAL "${p}/")
      string(SUBSTRING "${WARM_${d}}" ${n} -1 tail)
      set(WARM_PC_${d} "\${prefix}/${tail}")
    else()
      set(WARM_PC_${d} "${WARM_${d}}")
    endif()
  endforeach()
  file(READ "${WARM_SOURCE_DIR}/client/warm.pc.in" text)
  file(CONFIGURE OUTPUT "${outdir}/warm.pc" CONTENT "${text}" @ONLY)
endfunction()

# warm_packaging_install(PART): at install time, renders the files for the prefix of this
# installation into a scratch directory and installs them (DESTDIR and the install
# manifest work as for install(FILES)). PART "client": warm.pc; PART "service": the units,
# sysusers.d, tmpfiles.d, gpu.conf and the conffile warmd.conf (built by warmd itself).
function(warm_packaging_install part)
  set(prefix "${CMAKE_INSTALL_PREFIX}")
  if(NOT prefix STREQUAL WARM_CONFIGURED_PREFIX)
    message(STATUS "warmd: ${part} files for the prefix ${prefix} "
                   "(the build was configured for ${WARM_CONFIGURED_PREFIX})")
  endif()
  string(RANDOM LENGTH 12 tag)
  set(tmp "${WARM_BINARY_DIR}/packaging/.install-${tag}")
  warm_packaging_render("${prefix}" "${tmp}")
  warm_install_dirs("${prefix}")
  if(part STREQUAL "client")
    file(INSTALL DESTINATION "${WARM_LIBDIR}/pkgconfig" TYPE FILE FILES "${tmp}/warm.pc")
  else()
    file(INSTALL DESTINATION "${WARM_UNITDIR}" TYPE FILE
         FILES "${tmp}/warmd.service" "${tmp}/warmd.socket")
    file(INSTALL DESTINATION "${WARM_SYSUSERSDIR}" TYPE FILE RENAME warmd.conf
         FILES "${WARM_SOURCE_DIR}/packaging/sysusers.conf")
    file(INSTALL DESTINATION "${WARM_TMPFILESDIR}" TYPE FILE RENAME warmd.conf
         FILES "${WARM_SOURCE_DIR}/packaging/tmpfiles.conf")
    file(INSTALL DESTINATION "${WARM_DATADIR}/warmd" TYPE FILE FILES "${tmp}/gpu.conf")
    if(WARM_HAVE_WARMD)
      file(INSTALL DESTINATION "${WARM_SYSCONFDIR}/warmd" TYPE FILE
           FILES "${WARM_BINARY_DIR}/packaging/warmd.conf")
    endif()
  endif()
  file(REMOVE_RECURSE "${tmp}")
  set(CMAKE_INSTALL_MANIFEST_FILES "${CMAKE_INSTALL_MANIFEST_FILES}" PARENT_SCOPE)
endfunction()
