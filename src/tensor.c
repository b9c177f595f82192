/* tensor.c — the type table (block sizes and byte sizes of every ggml type id) and tensor views. */
#include "tensor.h"
#include <ctype.h>
#include <string.h>

/* supported/quantizable flags are switched on here as kernels and quantizers land. */
static const nx_type_traits g_types[NX_TYPE_COUNT] = {
    [NX_TYPE_F32]     = {"f32", 1, 4, true, true},
    [NX_TYPE_F16]     = {"f16", 1, 2, true, true},
    [NX_TYPE_Q4_0]    = {"q4_0", 32, 18, true, true},
    [NX_TYPE_Q4_1]    = {"q4_1", 32, 20, true, true},
    [NX_TYPE_Q5_0]    = {"q5_0", 32, 22, true, true},
    [NX_TYPE_Q5_1]    = {"q5_1", 32, 24, true, true},
    [NX_TYPE_Q8_0]    = {"q8_0", 32, 34, true, true},
    [NX_TYPE_Q8_1]    = {"q8_1", 32, 36, false, true},
    [NX_TYPE_Q2_K]    = {"q2_K", 256, 84, true, true},
    [NX_TYPE_Q3_K]    = {"q3_K", 256, 110, true, true},
    [NX_TYPE_Q4_K]    = {"q4_K", 256, 144, true, true},
    [NX_TYPE_Q5_K]    = {"q5_K", 256, 176, true, true},
    [NX_TYPE_Q6_K]    = {"q6_K", 256, 210, true, true},
    [NX_TYPE_Q8_K]    = {"q8_K", 256, 292, false, true},
    [NX_TYPE_IQ2_XXS] = {"iq2_xxs", 256, 66, false, false},
    [NX_TYPE_IQ2_XS]  = {"iq2_xs", 256, 74, false, false},
    [NX_TYPE_IQ3_XXS] = {"iq3_xxs", 256, 98, false, false},
    [NX_TYPE_IQ1_S]   = {"iq1_s", 256, 50, false, false},
    [NX_TYPE_IQ4_NL]  = {"iq4_nl", 32, 18, true, true},
    [NX_TYPE_IQ3_S]   = {"iq3_s", 256, 110, false, false},
    [NX_TYPE_IQ2_S]   = {"iq2_s", 256, 82, false, false},
    [NX_TYPE_IQ4_XS]  = {"iq4_xs", 256, 136, true, true},
    [NX_TYPE_I8]      = {"i8", 1, 1, false, false},
    [NX_TYPE_I16]     = {"i16", 1, 2, false, false},
    [NX_TYPE_I32]     = {"i32", 1, 4, false, false},
    [NX_TYPE_I64]     = {"i64", 1, 8, false, false},
    [NX_TYPE_F64]     = {"f64", 1, 8, false, false},
    [NX_TYPE_IQ1_M]   = {"iq1_m", 256, 56, false, false},
    [NX_TYPE_BF16]    = {"bf16", 1, 2, true, true},
    [NX_TYPE_TQ1_0]   = {"tq1_0", 256, 54, false, false},
    [NX_TYPE_TQ2_0]   = {"tq2_0", 256, 66, false, false},
    [NX_TYPE_MXFP4]   = {"mxfp4", 32, 17, false, false},
};

const nx_type_traits *nx_type_info(uint32_t type) {
    if (type >= NX_TYPE_COUNT || g_types[type].name == NULL) return NULL;
    return &g_types[type];
}

const char *nx_type_name(uint32_t type) {
    const nx_type_traits *t = nx_type_info(type);
    return t ? t->name : "?";
}

bool nx_type_from_name(const char *name, nx_type *out) {
    for (uint32_t i = 0; i < NX_TYPE_COUNT; i++) {
        if (!g_types[i].name) continue;
        const char *a = g_types[i].name, *b = name;
        while (*a && *b && tolower((unsigned char)*a) == tolower((unsigned char)*b)) a++, b++;
        if (!*a && !*b) { *out = (nx_type)i; return true; }
    }
    return false;
}

size_t nx_row_size(nx_type type, int64_t n) {
    const nx_type_traits *t = nx_type_info(type);
    if (!t || n < 0 || n % t->blck_size != 0) return 0;
    uint64_t bytes;
    if (__builtin_mul_overflow((uint64_t)(n / t->blck_size), (uint64_t)t->type_size, &bytes) || bytes > (uint64_t)SIZE_MAX / 2)
        return 0;   /* overflow: callers treat 0 for n > 0 as an error */
    return (size_t)bytes;
}

bool nx_tensor_init(nx_tensor *t, const char *name, nx_type type, int n_dims, const int64_t *ne, void *data) {
    const nx_type_traits *tr = nx_type_info(type);
    if (!tr || n_dims < 1 || n_dims > NX_MAX_DIMS) return false;
    memset(t, 0, sizeof *t);
    t->name = name;
    t->type = type;
    t->n_dims = n_dims;
    for (int i = 0; i < NX_MAX_DIMS; i++) t->ne[i] = i < n_dims ? ne[i] : 1;
    for (int i = 0; i < NX_MAX_DIMS; i++)
        if (t->ne[i] < 0) return false;
    if (t->ne[0] % tr->blck_size != 0) return false;
    t->nb[0] = tr->type_size;
    t->nb[1] = nx_row_size(type, t->ne[0]);
    if (t->nb[1] == 0 && t->ne[0] > 0) return false;
    size_t total = t->nb[1];
    for (int i = 2; i <= NX_MAX_DIMS; i++) {
        uint64_t r;
        if (__builtin_mul_overflow((uint64_t)total, (uint64_t)t->ne[i - 1], &r) || r > (uint64_t)SIZE_MAX) return false;
        if (i < NX_MAX_DIMS) t->nb[i] = (size_t)r;
        total = (size_t)r;
    }
    t->nbytes = total;
    t->data = data;
    return true;
}

int64_t nx_tensor_nelements(const nx_tensor *t) { return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]; }
int64_t nx_tensor_nrows(const nx_tensor *t) { return t->ne[1] * t->ne[2] * t->ne[3]; }
