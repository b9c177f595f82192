# Cross build for aarch64 Linux with Debian's gcc-aarch64-linux-gnu (scripts/deps-aarch64.sh
# installs it and the arm64 -dev packages). Tests run through qemu-aarch64 with the multiarch
# loader and libraries (/lib/aarch64-linux-gnu), so ctest works from the x86 host: .ci/aarch64.sh.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
# Libraries and pkg-config files of the arm64 multiarch packages, never the host's.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")
# ctest (and add_test commands) run the test executables through qemu. No -L: the programs'
# loader is then /lib/ld-linux-aarch64.so.1 of the multiarch libc6:arm64 (a dependency of the
# arm64 -dev packages), the same build as the libc.so.6 it loads. With -L /usr/aarch64-linux-gnu
# the cross package's older loader meets the multiarch libc and pthread_create hangs.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
