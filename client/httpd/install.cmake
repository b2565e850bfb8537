# warm-httpd's units, written for the prefix of the installation that installs them, as
# warmd's are (cmake/install-paths.cmake: warm_install_dirs). Used at configure time for
# the build tree's copy (BUILD/packaging/warm-httpd.service, which systemd-analyze scores)
# and at install time from client/httpd/CMakeLists.txt's install(CODE).

# warm_httpd_render(PREFIX OUTDIR): warm-httpd.service and warm-httpd.socket into OUTDIR.
function(warm_httpd_render prefix outdir)
  warm_install_dirs("${prefix}")
  set(WARMD_BINDIR "${WARM_BINDIR}")
  # warm-httpd reads /etc/warmd/warm-httpd.conf; an install elsewhere names its own file.
  set(WARM_HTTPD_ARGS "")
  if(NOT WARM_SYSCONFDIR STREQUAL "/etc")
    set(WARM_HTTPD_ARGS " --config=${WARM_SYSCONFDIR}/warmd/warm-httpd.conf")
  endif()
  set(WARMD_DOCDIR "${WARM_DOCDIR}")
  set(WARMD_SYSCONFDIR "${WARM_SYSCONFDIR}/warmd")
  file(READ "${WARM_SOURCE_DIR}/packaging/warm-httpd.service.in" unit)
  file(CONFIGURE OUTPUT "${outdir}/warm-httpd.service" CONTENT "${unit}" @ONLY)
  file(READ "${WARM_SOURCE_DIR}/packaging/warm-httpd.socket" text)
  file(CONFIGURE OUTPUT "${outdir}/warm-httpd.socket" CONTENT "${text}" @ONLY)
endfunction()

# warm_httpd_install(): at install time (BUILD/install-vars.cmake included first).
function(warm_httpd_install)
  string(RANDOM LENGTH 12 tag)
  set(tmp "${WARM_BINARY_DIR}/packaging/.install-httpd-${tag}")
  warm_httpd_render("${CMAKE_INSTALL_PREFIX}" "${tmp}")
  warm_install_dirs("${CMAKE_INSTALL_PREFIX}")
  file(INSTALL DESTINATION "${WARM_UNITDIR}" TYPE FILE
       FILES "${tmp}/warm-httpd.service" "${tmp}/warm-httpd.socket")
  # warmd trusts warm-httpd's user as a proxy (trusted_proxy_uids) through a drop-in of
  # its config, so the bridge works once installed and the admin's warmd.conf is not edited.
  file(INSTALL DESTINATION "${WARM_SYSCONFDIR}/warmd/warmd.conf.d" TYPE FILE
       FILES "${WARM_SOURCE_DIR}/packaging/warmd.conf.d/10-warm-httpd.conf")
  # Its own settings, every key commented out (built by the warm_httpd_conf target).
  file(INSTALL DESTINATION "${WARM_SYSCONFDIR}/warmd" TYPE FILE
       FILES "${WARM_BINARY_DIR}/packaging/warm-httpd.conf")
  file(REMOVE_RECURSE "${tmp}")
  set(CMAKE_INSTALL_MANIFEST_FILES "${CMAKE_INSTALL_MANIFEST_FILES}" PARENT_SCOPE)
endfunction()
