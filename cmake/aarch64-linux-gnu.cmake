# Cross build for aarch64 Linux with Debian's gcc-aarch64-linux-gnu (scripts/deps-aarch64.sh
# installs it and the arm64 -dev packages). Tests run through qemu-aarch64 with the multiarch
# loader and libraries, so ctest works from the x86 host: .ci/aarch64.sh.
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
# ctest (and add_test commands) run the test executables through qemu; -L points the loader
# at the cross sysroot, libraries resolve from /usr/lib/aarch64-linux-gnu via it.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-L;/usr/aarch64-linux-gnu)
