/* cpu.c — CPU feature detection (CPUID / HWCAP) and the SIMD level in effect (capped by NEXTN_CPU);
 * AMX, asked of the OS once per process and switched by NEXTN_AMX. */
#define _GNU_SOURCE   /* syscall() (arch_prctl) */
#include "kernels/cpu.h"
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#if (defined(__x86_64__) || defined(__i386__)) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#ifndef HWCAP2_I8MM
#define HWCAP2_I8MM (1 << 13)
#endif
#endif

static atomic_int g_level = -1;     /* the CPU feature table: level in effect, -1 = not yet set */
static atomic_int g_amx_hw = -1;    /* AMX-INT8 usable by this process: -1 = not yet asked */
static atomic_int g_amx_on = -1;    /* AMX allowed (NEXTN_AMX / nx_cpu_set_amx): -1 = not yet read */
static atomic_int g_bf16dot_on = -1;   /* BF16 dot products allowed (NEXTN_BF16DOT / nx_cpu_set_bf16dot) */

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

/* CPUID leaf 7 bits, read directly: clang's __builtin_cpu_supports lacks some AVX-512 names. */
static void cpuid7(unsigned *ebx, unsigned *ecx, unsigned *edx, unsigned sub) {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_max(0, NULL) >= 7) __cpuid_count(7, sub, a, b, c, d);
    *ebx = b; *ecx = c; *edx = d;
    (void)a;
}

/* The OS must save the AVX (YMM) and AVX-512 (opmask, ZMM) state: XCR0 bits 1,2 and 5,6,7. */
static unsigned long long xcr0(void) {
    unsigned a = 0, b = 0, c = 0, d = 0;
    __cpuid(1, a, b, c, d);
    if (!(c & (1u << 27))) return 0;  /* no OSXSAVE */
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}
#endif

nx_cpu_level nx_cpu_level_detected(void) {
#if defined(__x86_64__) || defined(__i386__)
    unsigned a = 0, b = 0, c1 = 0, d = 0, b7, c7, d7;
    __cpuid(1, a, b, c1, d);
    cpuid7(&b7, &c7, &d7, 0);
    unsigned long long x = xcr0();
    bool ymm = (x & 0x6) == 0x6, zmm = (x & 0xe6) == 0xe6;
    bool fma = c1 & (1u << 12), f16c = c1 & (1u << 29), avx2 = b7 & (1u << 5), bmi2 = b7 & (1u << 8);
    bool f = b7 & (1u << 16), dq = b7 & (1u << 17), bw = b7 & (1u << 30), vl = b7 & (1u << 31);
    bool vbmi = c7 & (1u << 1), vnni = c7 & (1u << 11);
    if (zmm && ymm && avx2 && fma && f16c && bmi2 && f && dq && bw && vl && vbmi && vnni) return NX_CPU_AVX512;
    if (ymm && avx2 && fma && f16c && bmi2) return nx_cpu_has_avxvnni() ? NX_CPU_AVX2_VNNI : NX_CPU_AVX2;
#elif defined(__aarch64__)
#if defined(__linux__)
    if (getauxval(AT_HWCAP) & HWCAP_ASIMDDP)
        return getauxval(AT_HWCAP2) & HWCAP2_I8MM ? NX_CPU_NEON_I8MM : NX_CPU_NEON_DOT;
#elif defined(__APPLE__)
    return NX_CPU_NEON_DOT;   /* every Apple aarch64 core has the dot product */
#endif
    return NX_CPU_NEON;       /* Advanced SIMD is part of the aarch64 base */
#endif
    return NX_CPU_SCALAR;
}

/* The machine's architecture owns a level. */
static bool level_native(nx_cpu_level l) {
#if defined(__aarch64__)
    return l == NX_CPU_SCALAR || l == NX_CPU_NEON || l == NX_CPU_NEON_DOT || l == NX_CPU_NEON_I8MM;
#else
    return l == NX_CPU_SCALAR || l == NX_CPU_AVX2 || l == NX_CPU_AVX2_VNNI || l == NX_CPU_AVX512;
#endif
}

/* Level l runs here: native, at most the best one, and (AVX-VNNI being no part of AVX-512) its
 * own feature where it has one. */
static bool level_runs(nx_cpu_level l) {
    return level_native(l) && l <= nx_cpu_level_detected() && (l != NX_CPU_AVX2_VNNI || nx_cpu_has_avxvnni());
}

int nx_cpu_levels(nx_cpu_level *out) {
    const nx_cpu_level hw = nx_cpu_level_detected();
    int n = 0;
    out[n++] = NX_CPU_SCALAR;
    for (int l = NX_CPU_SCALAR + 1; l <= (int)hw; l++)
        if (level_runs((nx_cpu_level)l)) out[n++] = (nx_cpu_level)l;
    return n;
}

int nx_cpu_has_avxvnni(void) {
#if defined(__x86_64__) || defined(__i386__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_max(0, NULL) < 7) return 0;
    __cpuid_count(7, 1, a, b, c, d);   /* leaf 7 sub-leaf 1: EAX bit 4 = AVX-VNNI */
    return (a & (1u << 4)) != 0 && (xcr0() & 0x6) == 0x6;
#else
    return 0;
#endif
}

int nx_cpu_has_avx512bf16(void) {
#if defined(__x86_64__) || defined(__i386__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_max(0, NULL) < 7) return 0;
    __cpuid_count(7, 1, a, b, c, d);   /* leaf 7 sub-leaf 1: EAX bit 5 = AVX512_BF16 */
    return (a & (1u << 5)) != 0 && nx_cpu_level_detected() == NX_CPU_AVX512;
#else
    return 0;
#endif
}

/* CPUID 7.0 EDX bits 24 (AMX-TILE) and 25 (AMX-INT8); XCR0 bits 17, 18 (XTILECFG, XTILEDATA:
 * the OS saves tile state); then Linux's per-process permission for the large tile data state
 * (ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18): without it the first tile
 * instruction faults. Asked once; the answer holds for every thread of the process. */
static int amx_probe(void) {
#if (defined(__x86_64__) || defined(__i386__)) && defined(__linux__)
    unsigned b7, c7, d7;
    cpuid7(&b7, &c7, &d7, 0);
    if (!(d7 & (1u << 24)) || !(d7 & (1u << 25))) return 0;
    if ((xcr0() & (3ull << 17)) != (3ull << 17)) return 0;
    if (nx_cpu_level_detected() != NX_CPU_AVX512) return 0;
    return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
#else
    return 0;
#endif
}

int nx_cpu_amx_detected(void) {
    int h = atomic_load(&g_amx_hw);
    if (h < 0) {
        h = amx_probe();
        atomic_store(&g_amx_hw, h);
    }
    return h;
}

int nx_cpu_set_amx(int on) {
    const int v = on && nx_cpu_amx_detected();
    atomic_store(&g_amx_on, v);
    return v;
}

/* An AVX-512 extra in effect: allowed (its switch, read from env_name = "0" or not on first
 * use through set) and the AVX-512 level in effect. */
static int avx512_extra(atomic_int *g, const char *env_name, int (*set)(int)) {
    int on = atomic_load(g);
    if (on < 0) {
        const char *env = getenv(env_name);
        on = set(!(env && !strcmp(env, "0")));
    }
    return on && nx_cpu_level_get() == NX_CPU_AVX512;
}

int nx_cpu_amx(void) { return avx512_extra(&g_amx_on, "NEXTN_AMX", nx_cpu_set_amx); }

int nx_cpu_set_bf16dot(int on) {
    const int v = on && nx_cpu_has_avx512bf16();
    atomic_store(&g_bf16dot_on, v);
    return v;
}

int nx_cpu_bf16dot(void) { return avx512_extra(&g_bf16dot_on, "NEXTN_BF16DOT", nx_cpu_set_bf16dot); }

nx_cpu_level nx_cpu_set_level(nx_cpu_level level) {
    nx_cpu_level hw = nx_cpu_level_detected();
    if (!level_native(level) || level > hw) level = hw;   /* the levels of one architecture are ordered */
    if (level == NX_CPU_AVX2_VNNI && !level_runs(level)) level = NX_CPU_AVX2;   /* AVX-512 without AVX-VNNI */
    if (level < NX_CPU_SCALAR) level = NX_CPU_SCALAR;
    atomic_store(&g_level, (int)level);
    return level;
}

nx_cpu_level nx_cpu_level_get(void) {
    int l = atomic_load(&g_level);
    if (l >= 0) return (nx_cpu_level)l;
    nx_cpu_level want = nx_cpu_level_detected();
    const char *env = getenv("NEXTN_CPU");
    if (env) {
        if (!strcmp(env, "scalar")) want = NX_CPU_SCALAR;
        else if (!strcmp(env, "avx2")) want = NX_CPU_AVX2;
        else if (!strcmp(env, "avx2_vnni")) want = NX_CPU_AVX2_VNNI;
        else if (!strcmp(env, "avx512")) want = NX_CPU_AVX512;
        else if (!strcmp(env, "neon")) want = NX_CPU_NEON;
        else if (!strcmp(env, "neon_dot")) want = NX_CPU_NEON_DOT;
        else if (!strcmp(env, "neon_i8mm")) want = NX_CPU_NEON_I8MM;
    }
    return nx_cpu_set_level(want);
}

const char *nx_cpu_level_name(nx_cpu_level level) {
    switch (level) {
    case NX_CPU_SCALAR: return "scalar";
    case NX_CPU_AVX2: return "avx2";
    case NX_CPU_AVX2_VNNI: return "avx2_vnni";
    case NX_CPU_AVX512: return "avx512";
    case NX_CPU_NEON: return "neon";
    case NX_CPU_NEON_DOT: return "neon_dot";
    case NX_CPU_NEON_I8MM: return "neon_i8mm";
    }
    return "?";
}
