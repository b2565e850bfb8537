# System dependencies, all Debian 12 packages (see .ci/run for the package names).
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
pkg_check_modules(LMDB REQUIRED IMPORTED_TARGET lmdb)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
find_library(MATH_LIB m REQUIRED)
