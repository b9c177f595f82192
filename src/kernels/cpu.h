/*
 * cpu.h — run-time CPU feature detection and the SIMD level the kernels use.
 *
 * The level is detected once (CPUID via __builtin_cpu_supports) and capped by the env var
 * NEXTN_CPU=scalar|avx2|avx512. Tests force each level with nx_cpu_set_level() to cover
 * every path. This table is the one global besides the logger.
 */
#ifndef NX_KERNELS_CPU_H
#define NX_KERNELS_CPU_H

typedef enum nx_cpu_level {
    NX_CPU_SCALAR = 0,
    NX_CPU_AVX2   = 1,   /* AVX2 + FMA + F16C */
    NX_CPU_AVX512 = 2,   /* AVX-512 F/BW/VL/DQ + VNNI (+ BF16 where present) */
} nx_cpu_level;

nx_cpu_level nx_cpu_level_get(void);          /* current level (detected, capped by NEXTN_CPU) */
nx_cpu_level nx_cpu_level_detected(void);     /* best the hardware supports */
/* Force a level (clamped to what the hardware supports); returns the level now in effect. */
nx_cpu_level nx_cpu_set_level(nx_cpu_level level);
const char  *nx_cpu_level_name(nx_cpu_level level);
int          nx_cpu_has_avx512bf16(void);

#endif
