/* cpu.c — CPUID detection and the SIMD level in effect (capped by NEXTN_CPU). */
#include "kernels/cpu.h"
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static atomic_int g_level = -1;     /* the CPU feature table: level in effect, -1 = not yet set */

nx_cpu_level nx_cpu_level_detected(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vbmi"))
        return NX_CPU_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c") &&
        __builtin_cpu_supports("bmi2"))
        return NX_CPU_AVX2;
#endif
    return NX_CPU_SCALAR;
}

int nx_cpu_has_avx512bf16(void) {
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__) && __GNUC__ >= 12
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16");
#else
    return 0;
#endif
}

nx_cpu_level nx_cpu_set_level(nx_cpu_level level) {
    nx_cpu_level hw = nx_cpu_level_detected();
    if (level > hw) level = hw;
    if (level < NX_CPU_SCALAR) level = NX_CPU_SCALAR;
    atomic_store(&g_level, (int)level);
    return level;
}

nx_cpu_level nx_cpu_level_get(void) {
    int l = atomic_load(&g_level);
    if (l >= 0) return (nx_cpu_level)l;
    nx_cpu_level want = NX_CPU_AVX512;
    const char *env = getenv("NEXTN_CPU");
    if (env) {
        if (!strcmp(env, "scalar")) want = NX_CPU_SCALAR;
        else if (!strcmp(env, "avx2")) want = NX_CPU_AVX2;
    }
    return nx_cpu_set_level(want);
}

const char *nx_cpu_level_name(nx_cpu_level level) {
    switch (level) {
    case NX_CPU_SCALAR: return "scalar";
    case NX_CPU_AVX2: return "avx2";
    case NX_CPU_AVX512: return "avx512";
    }
    return "?";
}
