# warm_warnings: every target of the project links this INTERFACE target.
add_library(warm_warnings INTERFACE)
target_compile_options(warm_warnings INTERFACE
  -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes
  -Wno-unused-parameter -Wvla -Wformat=2)
target_compile_definitions(warm_warnings INTERFACE _GNU_SOURCE)
if(WARM_WERROR)
  target_compile_options(warm_warnings INTERFACE -Werror)
endif()
if(WARM_SANITIZE)
  target_compile_options(warm_warnings INTERFACE
    -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
  target_link_options(warm_warnings INTERFACE -fsanitize=address,undefined)
endif()
if(WARM_NATIVE)
  target_compile_options(warm_warnings INTERFACE -march=native)
endif()
