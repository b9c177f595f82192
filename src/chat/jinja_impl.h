/*
 * jinja_impl.h — the engine's inner types, shared by its files (not a public header):
 * the arena every value and node lives in, values (jv), tokens, AST nodes, the render context.
 *
 * Ownership: a parsed template owns one arena (its nodes and literal strings); a render owns
 * another (every value it makes), dropped whole at the end, so values carry no reference counts.
 * Values are immutable except namespaces (the sandbox forbids changing lists and dicts).
 */
#ifndef NX_CHAT_JINJA_IMPL_H
#define NX_CHAT_JINJA_IMPL_H

#include <setjmp.h>
#include <string.h>
#include "chat/jinja.h"

/* ===== Arena ===== */
typedef struct jarena_chunk jarena_chunk;
typedef struct jarena {
    jarena_chunk *head;
    size_t used, limit;     /* bytes handed out (all chunks) and the cap */
    bool failed;            /* the cap was hit */
} jarena;

void *ja_alloc(jarena *a, size_t n);    /* zeroed, 16-byte aligned; NULL past the cap */
void  ja_free_all(jarena *a);

/* ===== Values ===== */
typedef enum jv_type {
    JV_UNDEF = 0, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT,
    JV_NS,          /* namespace(): a dict whose attributes `set` may change */
    JV_MACRO,       /* a macro or a call block's caller */
    JV_BUILTIN,     /* a global function (raise_exception, range, namespace...) */
    JV_METHOD,      /* a bound method: self + name (str.split, dict.items...) */
    JV_LOOP,        /* the `loop` variable of a for */
} jv_type;

typedef struct jstr { size_t len; char p[]; } jstr;
typedef struct jv jv;
typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct jmacro jmacro;
typedef struct jmethod jmethod;
typedef struct jloop jloop;

struct jv {
    uint8_t t;              /* jv_type */
    bool tuple;             /* a list made by a tuple literal (printed with parentheses) */
    union {
        bool b; int64_t i; double f;
        jstr *s; jlist *l; jdict *d; jmacro *m; int fn; jmethod *bm; jloop *loop;
        const char *undef_name;   /* for error messages: the name that was undefined */
    } u;
};

struct jlist { size_t n, cap; jv *v; };
struct jdict { size_t n, cap; jv *k, *v; };
struct jmethod { jv self; const char *name; };

typedef struct jframe {
    struct jframe *parent;
    jdict vars;
} jframe;

struct jnode;
struct jmacro {
    const struct jnode *def;    /* MACRO node (or CALLBLOCK for a caller) */
    jframe *closure;            /* scope the body's free names resolve in */
    jv caller;                  /* the caller a call block passes (JV_UNDEF if none) */
};

struct jloop {
    const jlist *items;
    size_t i;
    int depth;
};

static inline jv jv_undef(void) { jv v = {0}; return v; }
static inline jv jv_none(void) { jv v = {0}; v.t = JV_NONE; return v; }
static inline jv jv_bool(bool b) { jv v = {0}; v.t = JV_BOOL; v.u.b = b; return v; }
static inline jv jv_int(int64_t i) { jv v = {0}; v.t = JV_INT; v.u.i = i; return v; }
static inline jv jv_float(double f) { jv v = {0}; v.t = JV_FLOAT; v.u.f = f; return v; }

jstr *js_new(jarena *a, const char *p, size_t n);
jv jv_str(jarena *a, const char *p, size_t n);     /* JV_UNDEF if out of memory (arena marks it) */
jv jv_strz(jarena *a, const char *s);
jv jv_list(jarena *a);
jv jv_dict(jarena *a);
bool jl_push(jarena *a, jlist *l, jv v);
bool jd_set(jarena *a, jdict *d, jv k, jv v);        /* replaces an equal key */
jv  *jd_get(const jdict *d, jv k);                   /* NULL if absent */
jv  *jd_getz(const jdict *d, const char *k);

bool jv_truthy(jv v);
bool jv_equal(jv a, jv b);
/* Python's ordering for sort/min/max/<: numbers with numbers, strings bytewise, lists
 * elementwise; *ok = false when the types do not compare. */
int  jv_compare(jv a, jv b, bool *ok);
bool jv_is_str(jv v);
bool jv_is_num(jv v);       /* int, float or bool (Python's bool is an int) */
double jv_num(jv v);
const char *jv_type_name(jv v);   /* Python's name: str, int, list, dict, NoneType... */

/* Growable byte buffer with a cap: in the arena when `a` is set (temporaries, which an error
 * longjmp must not leak), else malloc'ed (the render's result). */
typedef struct jbuf { char *p; size_t n, cap, limit; bool failed; jarena *a; } jbuf;
void jb_free(jbuf *b);
bool jb_put(jbuf *b, const char *p, size_t n);
bool jb_putc(jbuf *b, char c);
bool jb_puts(jbuf *b, const char *s);

/* str(v) as Jinja prints it (Python's str/repr: None, True, 1.5, ['a', 1], {'k': 'v'}). */
bool jv_to_text(jbuf *b, jv v);
bool jv_repr(jbuf *b, jv v);
/* json.dumps(v, ensure_ascii=False, indent, separators, sort_keys); indent < 0 = none.
 * item_sep/key_sep NULL = Python's defaults. false on a value JSON cannot hold. */
bool jv_to_json(jbuf *b, jv v, int indent, const char *item_sep, const char *key_sep, bool sort_keys, int depth);
jv jv_from_cjson(jarena *a, const cJSON *j, int depth);
jv jv_stringify(jarena *a, jv v);   /* str(v) as a JV_STR (JV_UNDEF on failure) */

/* UTF-8 helpers: number of code points; byte offset of code point i (clamped). */
size_t u8_len(const char *p, size_t n);
size_t u8_off(const char *p, size_t n, size_t i);

/* memmem without _GNU_SOURCE */
static inline const char *jmemmem(const char *h, size_t hn, const char *n, size_t nn) {
    if (!nn) return h;
    for (size_t i = 0; i + nn <= hn; i++)
        if (h[i] == n[0] && memcmp(h + i, n, nn) == 0) return h + i;
    return NULL;
}

/* ===== Tokens ===== */
typedef enum jtok_type {
    JT_EOF = 0, JT_TEXT, JT_VAR_BEGIN, JT_VAR_END, JT_BLOCK_BEGIN, JT_BLOCK_END,
    JT_NAME, JT_STRING, JT_INT, JT_FLOAT, JT_OP,
} jtok_type;

typedef struct jtok {
    uint8_t type;
    int line, col;
    const char *p; size_t n;    /* text / name / op spelling (into the source or the arena) */
    int64_t i; double f;
} jtok;

typedef struct jtoks { jtok *v; size_t n, cap; } jtoks;
/* Tokenize with trim_blocks, lstrip_blocks, whitespace control, comments and raw blocks. */
nx_status jinja_lex(const char *src, size_t len, jarena *a, jtoks *out, nx_error *err);

/* ===== AST ===== */
typedef enum jnode_kind {
    /* statements */
    JN_BODY, JN_TEXT, JN_OUTPUT, JN_IF, JN_BRANCH, JN_FOR, JN_SET, JN_SETBLOCK, JN_MACRO,
    JN_CALLBLOCK, JN_FILTERBLOCK, JN_BREAK, JN_CONTINUE,
    /* expressions */
    JN_LIT, JN_NAME, JN_ATTR, JN_ITEM, JN_SLICE, JN_CALL, JN_FILTER, JN_TEST, JN_KWARG,
    JN_NOT, JN_NEG, JN_POS, JN_BIN, JN_CMP, JN_AND, JN_OR, JN_COND, JN_LISTLIT, JN_TUPLE,
    JN_DICTLIT, JN_PARAM,
} jnode_kind;

typedef enum jop {
    OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT,
    OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN,
} jop;

typedef struct jnode {
    uint8_t kind, op;
    bool neg;                   /* JN_TEST: `is not`; JN_FOR: recursive (unsupported) */
    int line, col;
    jv lit;                     /* literal; name (JN_NAME/ATTR/FILTER/TEST/KWARG/PARAM/MACRO) */
    struct jnode *a, *b, *c, *d, *e;
    struct jnode **kids; int nkids;
} jnode;

/* a, b, c, d, e by kind:
 *   TEXT lit | OUTPUT a | IF kids=BRANCH (a=cond or NULL, d=body) | FOR a=target b=iter c=cond d=body e=else
 *   SET a=target b=value | SETBLOCK a=target kids=FILTERs(a=NULL) d=body | MACRO lit=name kids=PARAMs d=body
 *   CALLBLOCK a=CALL kids=PARAMs d=body | FILTERBLOCK kids=FILTERs d=body | BODY kids=statements
 *   ATTR a=obj lit=name | ITEM a=obj b=index | SLICE a=obj b,c,d=start,stop,step (NULL = none)
 *   CALL a=callee kids=args/KWARGs | FILTER a=subject lit=name kids=args | TEST a=subject lit=name kids=args
 *   BIN/CMP op a b | AND/OR a b | NOT/NEG/POS a | COND a=then b=cond c=else | LIST/TUPLE kids
 *   DICTLIT kids = key, value, key, value... | PARAM lit=name a=default | KWARG lit=name a=value */

struct nx_jinja_template {
    jarena arena;
    jnode *root;
};

nx_status jinja_parse_tokens(const jtoks *toks, jarena *a, jnode **root, nx_error *err);

/* ===== Render ===== */
typedef struct jctx {
    jarena *a;
    jbuf *out;                  /* current output (call/filter/set blocks redirect it) */
    uint64_t steps, max_steps;
    int depth, max_depth;
    size_t max_output;
    time_t now;
    jframe *root;
    int loopctl;                /* 0, 1 = break, 2 = continue (pending) */
    nx_error *err;
    bool raised;
    jmp_buf fail;               /* an error longjmps here; the arena is dropped whole */
} jctx;

_Noreturn void jx_fail(jctx *x, const jnode *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
_Noreturn void jx_oom(jctx *x, const jnode *at);

jv  jx_eval(jctx *x, const jnode *n);
/* Filters, tests, methods, global functions (jinja_builtins.c). args: positional values;
 * kw names/values: keyword arguments. */
typedef struct jargs { jv *pos; int npos; const char **kwn; jv *kwv; int nkw; } jargs;
jv  jx_filter(jctx *x, const jnode *at, const char *name, jv subject, const jargs *args);
bool jx_test(jctx *x, const jnode *at, const char *name, jv subject, const jargs *args);
jv  jx_method(jctx *x, const jnode *at, jv self, const char *name, const jargs *args);
bool jx_has_method(jv self, const char *name);
jv  jx_percent(jctx *x, const jnode *at, jv fmt, jv args);   /* "%s" % args */
jv  jx_call_builtin(jctx *x, const jnode *at, int fn, const jargs *args);
int  jx_builtin_id(const char *name);          /* -1 if none */
jv  jx_call_macro(jctx *x, const jnode *at, const jmacro *m, const jargs *args);
jv  jx_call_value(jctx *x, const jnode *at, jv callee, const jargs *args);
jv  jx_list_of(jctx *x, const jnode *at, jv v);    /* iterate: list, dict keys, string chars */
jv  jx_str(jctx *x, const jnode *at, jv v);        /* str(v) */
jv  jx_getattr(jctx *x, const jnode *at, jv obj, jv key, bool subscript);
void jx_step(jctx *x, const jnode *at);

enum { JB_RAISE = 0, JB_STRFTIME, JB_NAMESPACE, JB_RANGE, JB_DICT, JB_JOINER, JB_CYCLER, JB_COUNT };

#endif
