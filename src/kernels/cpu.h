/*
 * cpu.h — run-time CPU feature detection and the SIMD level the kernels use.
 *
 * The level is detected once (x86: CPUID; aarch64: the kernel's HWCAP bits) and capped by the
 * env var NEXTN_CPU=scalar|avx2|avx2_vnni|avx512 (x86) or scalar|neon|neon_dot|neon_i8mm (aarch64; a name of the
 * other architecture is ignored). Tests force each level with nx_cpu_set_level() to cover
 * every path. This table is the one global besides the logger.
 *
 * The levels of one architecture are ordered (each includes the one below, except that
 * avx2_vnni is absent on CPUs with AVX-512 but no AVX-VNNI, e.g. Zen 4: asking for it there gives
 * avx2); the levels of the other architecture never take effect: asking for one gives the best
 * level the machine has, so `nx_cpu_set_level(l) == l` tells whether level l runs here. AMX is a switch on top of the
 * AVX-512 level (NEXTN_AMX=0 turns it off), not a level: its kernels give the AVX-512 bits.
 */
#ifndef NX_KERNELS_CPU_H
#define NX_KERNELS_CPU_H

typedef enum nx_cpu_level {
    NX_CPU_SCALAR = 0,
    NX_CPU_AVX2   = 1,   /* AVX2 + FMA + F16C */
    NX_CPU_AVX2_VNNI = 2, /* + AVX-VNNI (VEX vpdpbusd on ymm: Alder Lake and later Intel cores,
                             Sapphire Rapids, Zen 5): the AVX2 kernels with the u8 x s8 dot */
    NX_CPU_AVX512 = 3,   /* AVX-512 F/BW/VL/DQ + VNNI (+ BF16 where present) */
    NX_CPU_NEON   = 4,   /* aarch64 Advanced SIMD (every aarch64 CPU) */
    NX_CPU_NEON_DOT = 5, /* + the int8 dot product (SDOT/UDOT, FEAT_DotProd; armv8.2-a and later) */
    NX_CPU_NEON_I8MM = 6, /* + the int8 matrix multiply (SMMLA, FEAT_I8MM; armv8.6-a, Neoverse V1/N2 and later) */
} nx_cpu_level;

#define NX_CPU_MAX_LEVELS 4   /* levels of one architecture, scalar included */

nx_cpu_level nx_cpu_level_get(void);          /* current level (detected, capped by NEXTN_CPU) */
nx_cpu_level nx_cpu_level_detected(void);     /* best the hardware supports */
/* Force a level (clamped to what the hardware supports); returns the level now in effect. */
nx_cpu_level nx_cpu_set_level(nx_cpu_level level);
const char  *nx_cpu_level_name(nx_cpu_level level);
/* The levels this machine runs, ascending from NX_CPU_SCALAR (at most NX_CPU_MAX_LEVELS);
 * returns how many. */
int          nx_cpu_levels(nx_cpu_level *out);
int          nx_cpu_has_avx512bf16(void);
int          nx_cpu_has_avxvnni(void);       /* the hardware has AVX-VNNI (CPUID 7.1 EAX bit 4) */
/* AMX-INT8 (Sapphire Rapids and later), used by the AVX-512 level's prefill matmuls: the CPU
 * has AMX-TILE and AMX-INT8, the OS saves tile state and grants it to this process (Linux:
 * arch_prctl ARCH_REQ_XCOMP_PERM, asked once here, before any tile instruction). In effect only
 * at NX_CPU_AVX512 and unless NEXTN_AMX=0 (or nx_cpu_set_amx(0)). */
int          nx_cpu_amx_detected(void);
int          nx_cpu_amx(void);               /* in effect now */
/* Allow (where detected) or forbid AMX; returns whether it is allowed now (tests cover both). */
int          nx_cpu_set_amx(int on);
/* BF16 weights through VDPBF16PS (AVX512_BF16: Zen 4, Sapphire Rapids and later): the
 * activations rounded to bf16, as llama.cpp does for BF16 weights, for twice the products per
 * instruction of the f32 fmas. In effect only at NX_CPU_AVX512 where the CPU has AVX512_BF16,
 * and unless NEXTN_BF16DOT=0 (or nx_cpu_set_bf16dot(0)); the kernels' contract is in
 * matmul_impl.h. Returns as nx_cpu_amx / nx_cpu_set_amx. */
int          nx_cpu_bf16dot(void);
int          nx_cpu_set_bf16dot(int on);

#endif
