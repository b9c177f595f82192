/*
 * jinja_eval.c — renders an AST: statements (output, if, for with loop.* and else, set and
 * namespace attribute set, block set, macro, call, filter blocks, break/continue), expressions
 * with Python's operator semantics, Jinja's scoping (a for body and a macro call get their own
 * frame; if does not), and the limits: steps, depth, output bytes, working memory.
 * Errors longjmp to nx_jinja_render, which drops the render's arena whole.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "chat/jinja_impl.h"

_Noreturn void jx_fail(jctx *x, const jnode *at, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (at) nx_fail(x->err, NX_ERR_INVALID_ARG, "line %d col %d: %s", at->line, at->col, msg);
    else nx_fail(x->err, NX_ERR_INVALID_ARG, "%s", msg);
    longjmp(x->fail, 1);
}

_Noreturn void jx_oom(jctx *x, const jnode *at) {
    nx_fail(x->err, NX_ERR_RANGE, "line %d col %d: template render exceeded its memory limit (%zu bytes)",
            at ? at->line : 0, at ? at->col : 0, x->a->limit);
    longjmp(x->fail, 1);
}

void jx_step(jctx *x, const jnode *at) {
    if (++x->steps > x->max_steps) {
        nx_fail(x->err, NX_ERR_RANGE, "line %d col %d: template render exceeded %llu steps",
                at ? at->line : 0, at ? at->col : 0, (unsigned long long)x->max_steps);
        longjmp(x->fail, 1);
    }
}

static void emit(jctx *x, const jnode *at, const char *p, size_t n) {
    if (!jb_put(x->out, p, n)) {
        nx_fail(x->err, NX_ERR_RANGE, "line %d col %d: template output exceeded %zu bytes", at->line, at->col, x->max_output);
        longjmp(x->fail, 1);
    }
}

/* ===== Frames ===== */

static jv *lookup(jframe *f, jv name) {
    for (; f; f = f->parent) {
        jv *v = jd_get(&f->vars, name);
        if (v) return v;
    }
    return NULL;
}

static void fset(jctx *x, const jnode *at, jframe *f, jv name, jv v) {
    if (!jd_set(x->a, &f->vars, name, v)) jx_oom(x, at);
}

static jframe *new_frame(jctx *x, const jnode *at, jframe *parent) {
    jframe *f = ja_alloc(x->a, sizeof *f);
    if (!f) jx_oom(x, at);
    f->parent = parent;
    return f;
}

/* ===== Expressions ===== */
static jv eval(jctx *x, jframe *f, const jnode *n);
static void exec_body(jctx *x, jframe *f, const jnode *body);

jv jx_str(jctx *x, const jnode *at, jv v) {
    jv s = jv_stringify(x->a, v);
    if (s.t != JV_STR) jx_oom(x, at);
    return s;
}

jv jx_list_of(jctx *x, const jnode *at, jv v) {
    if (v.t == JV_LIST) return v;
    jv l = jv_list(x->a);
    if (l.t != JV_LIST) jx_oom(x, at);
    switch (v.t) {
    case JV_UNDEF: return l;
    case JV_DICT: case JV_NS:
        for (size_t i = 0; i < v.u.d->n; i++) if (!jl_push(x->a, l.u.l, v.u.d->k[i])) jx_oom(x, at);
        return l;
    case JV_STR: {
        const char *p = v.u.s->p;
        size_t n = v.u.s->len;
        for (size_t i = 0; i < n;) {
            size_t j = i + 1;
            while (j < n && ((unsigned char)p[j] & 0xC0) == 0x80) j++;
            jv c = jv_str(x->a, p + i, j - i);
            if (c.t != JV_STR || !jl_push(x->a, l.u.l, c)) jx_oom(x, at);
            i = j;
        }
        return l;
    }
    default: jx_fail(x, at, "'%s' object is not iterable", jv_type_name(v));
    }
}

static jv loop_attr(jctx *x, const jnode *at, const jloop *lp, const char *name) {
    size_t n = lp->items->n, i = lp->i;
    if (!strcmp(name, "index")) return jv_int((int64_t)i + 1);
    if (!strcmp(name, "index0")) return jv_int((int64_t)i);
    if (!strcmp(name, "revindex")) return jv_int((int64_t)(n - i));
    if (!strcmp(name, "revindex0")) return jv_int((int64_t)(n - i - 1));
    if (!strcmp(name, "first")) return jv_bool(i == 0);
    if (!strcmp(name, "last")) return jv_bool(i + 1 == n);
    if (!strcmp(name, "length")) return jv_int((int64_t)n);
    if (!strcmp(name, "depth")) return jv_int(lp->depth);
    if (!strcmp(name, "depth0")) return jv_int(lp->depth - 1);
    if (!strcmp(name, "previtem")) return i > 0 ? lp->items->v[i - 1] : jv_undef();
    if (!strcmp(name, "nextitem")) return i + 1 < n ? lp->items->v[i + 1] : jv_undef();
    if (!strcmp(name, "cycle")) {
        jmethod *m = ja_alloc(x->a, sizeof *m);
        if (!m) jx_oom(x, at);
        m->self.t = JV_LOOP; m->self.u.loop = (jloop *)lp; m->name = "cycle";
        jv v = {0}; v.t = JV_METHOD; v.u.bm = m;
        return v;
    }
    return jv_undef();
}

static int64_t norm_index(int64_t i, size_t n) { return i < 0 ? i + (int64_t)n : i; }

jv jx_getattr(jctx *x, const jnode *at, jv obj, jv key, bool subscript) {
    bool kstr = key.t == JV_STR;
    switch (obj.t) {
    case JV_UNDEF:
        if (obj.u.undef_name) jx_fail(x, at, "'%s' is undefined", obj.u.undef_name);
        jx_fail(x, at, "undefined value has no attribute '%s'", kstr ? key.u.s->p : "?");
    case JV_DICT:
        if (!subscript && kstr && jx_has_method(obj, key.u.s->p)) break;
        { jv *v = jd_get(obj.u.d, key); if (v) return *v; }
        break;
    case JV_NS: { jv *v = jd_get(obj.u.d, key); if (v) return *v; return jv_undef(); }
    case JV_LOOP: if (kstr) return loop_attr(x, at, obj.u.loop, key.u.s->p); return jv_undef();
    case JV_LIST:
        if (key.t == JV_INT || key.t == JV_BOOL) {
            int64_t i = norm_index(key.t == JV_INT ? key.u.i : key.u.b, obj.u.l->n);
            return i >= 0 && (size_t)i < obj.u.l->n ? obj.u.l->v[i] : jv_undef();
        }
        break;
    case JV_STR:
        if (key.t == JV_INT) {
            size_t cps = u8_len(obj.u.s->p, obj.u.s->len);
            int64_t i = norm_index(key.u.i, cps);
            if (i < 0 || (size_t)i >= cps) return jv_undef();
            size_t o = u8_off(obj.u.s->p, obj.u.s->len, (size_t)i), e = u8_off(obj.u.s->p, obj.u.s->len, (size_t)i + 1);
            jv s = jv_str(x->a, obj.u.s->p + o, e - o);
            if (s.t != JV_STR) jx_oom(x, at);
            return s;
        }
        break;
    default: break;
    }
    if (kstr && jx_has_method(obj, key.u.s->p)) {
        jmethod *m = ja_alloc(x->a, sizeof *m);
        if (!m) jx_oom(x, at);
        m->self = obj; m->name = key.u.s->p;
        jv v = {0}; v.t = JV_METHOD; v.u.bm = m;
        return v;
    }
    return jv_undef();
}

static jv do_slice(jctx *x, const jnode *n, jv obj, jv s0, jv s1, jv s2) {
    int64_t step = s2.t == JV_INT ? s2.u.i : 1;
    if (s2.t != JV_INT && s2.t != JV_UNDEF && s2.t != JV_NONE) jx_fail(x, n, "slice indices must be integers");
    if (step == 0) jx_fail(x, n, "slice step cannot be zero");
    bool is_str = obj.t == JV_STR;
    if (!is_str && obj.t != JV_LIST) jx_fail(x, n, "'%s' object is not subscriptable", jv_type_name(obj));
    int64_t len = is_str ? (int64_t)u8_len(obj.u.s->p, obj.u.s->len) : (int64_t)obj.u.l->n;
    int64_t lo, hi;
    /* Python's PySlice_AdjustIndices */
    jv b[2] = { s0, s1 };
    int64_t r[2];
    for (int k = 0; k < 2; k++) {
        if (b[k].t == JV_UNDEF || b[k].t == JV_NONE) r[k] = k == 0 ? (step < 0 ? len - 1 : 0) : (step < 0 ? -1 : len);
        else {
            if (b[k].t != JV_INT) jx_fail(x, n, "slice indices must be integers");
            int64_t v = b[k].u.i;
            if (v < 0) { v += len; if (v < 0) v = step < 0 ? -1 : 0; }
            else if (v >= len) v = step < 0 ? len - 1 : len;
            r[k] = v;
        }
    }
    lo = r[0]; hi = r[1];
    jv out = jv_list(x->a);
    if (out.t != JV_LIST) jx_oom(x, n);
    jbuf sb = { .limit = x->a->limit, .a = x->a };
    for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) {
        jx_step(x, n);
        if (is_str) {
            size_t o = u8_off(obj.u.s->p, obj.u.s->len, (size_t)i), e = u8_off(obj.u.s->p, obj.u.s->len, (size_t)i + 1);
            if (!jb_put(&sb, obj.u.s->p + o, e - o)) { jb_free(&sb); jx_oom(x, n); }
        } else if (!jl_push(x->a, out.u.l, obj.u.l->v[i])) jx_oom(x, n);
    }
    if (is_str) {
        jv s = jv_str(x->a, sb.p ? sb.p : "", sb.n);
        jb_free(&sb);
        if (s.t != JV_STR) jx_oom(x, n);
        return s;
    }
    return out;
}

static jv arith(jctx *x, const jnode *n, int op, jv a, jv b) {
    static const char *const names[] = { "", "+", "-", "*", "/", "//", "%", "**" };
    if (op == OP_CONCAT) {
        jv sa = jx_str(x, n, a), sb = jx_str(x, n, b);
        jstr *s = ja_alloc(x->a, sizeof *s + sa.u.s->len + sb.u.s->len + 1);
        if (!s) jx_oom(x, n);
        memcpy(s->p, sa.u.s->p, sa.u.s->len);
        memcpy(s->p + sa.u.s->len, sb.u.s->p, sb.u.s->len);
        s->len = sa.u.s->len + sb.u.s->len;
        jv v = {0}; v.t = JV_STR; v.u.s = s;
        return v;
    }
    if (jv_is_num(a) && jv_is_num(b)) {
        bool ints = a.t != JV_FLOAT && b.t != JV_FLOAT;
        int64_t ia = a.t == JV_BOOL ? a.u.b : a.u.i, ib = b.t == JV_BOOL ? b.u.b : b.u.i, r;
        double fa = jv_num(a), fb = jv_num(b);
        switch (op) {
        case OP_ADD: if (ints) { if (__builtin_add_overflow(ia, ib, &r)) jx_fail(x, n, "integer overflow"); return jv_int(r); } return jv_float(fa + fb);
        case OP_SUB: if (ints) { if (__builtin_sub_overflow(ia, ib, &r)) jx_fail(x, n, "integer overflow"); return jv_int(r); } return jv_float(fa - fb);
        case OP_MUL: if (ints) { if (__builtin_mul_overflow(ia, ib, &r)) jx_fail(x, n, "integer overflow"); return jv_int(r); } return jv_float(fa * fb);
        case OP_DIV: if (fb == 0) jx_fail(x, n, "division by zero"); return jv_float(fa / fb);
        case OP_FLOORDIV: case OP_MOD:
            if (ints) {
                if (ib == 0) jx_fail(x, n, "integer division or modulo by zero");
                if (ia == INT64_MIN && ib == -1) jx_fail(x, n, "integer overflow");
                int64_t q = ia / ib, m = ia % ib;
                if (m != 0 && ((m < 0) != (ib < 0))) { q--; m += ib; }
                return jv_int(op == OP_MOD ? m : q);
            } else {
                if (fb == 0) jx_fail(x, n, "float division by zero");
                double m = fmod(fa, fb);
                if (m != 0 && ((m < 0) != (fb < 0))) m += fb;
                return op == OP_MOD ? jv_float(m) : jv_float(floor(fa / fb));
            }
        case OP_POW:
            if (ints && ib >= 0) {
                int64_t res = 1;
                for (int64_t k = 0; k < ib; k++) {
                    jx_step(x, n);
                    if (__builtin_mul_overflow(res, ia, &res)) jx_fail(x, n, "integer overflow");
                    if (res == 0 || res == 1) break;
                }
                return jv_int(res);
            }
            return jv_float(pow(fa, fb));
        }
    }
    if (op == OP_MOD && a.t == JV_STR) return jx_percent(x, n, a, b);
    if (op == OP_ADD && a.t == JV_STR && b.t == JV_STR) return arith(x, n, OP_CONCAT, a, b);
    if (op == OP_ADD && a.t == JV_LIST && b.t == JV_LIST) {
        jv l = jv_list(x->a);
        if (l.t != JV_LIST) jx_oom(x, n);
        for (size_t i = 0; i < a.u.l->n; i++) if (!jl_push(x->a, l.u.l, a.u.l->v[i])) jx_oom(x, n);
        for (size_t i = 0; i < b.u.l->n; i++) if (!jl_push(x->a, l.u.l, b.u.l->v[i])) jx_oom(x, n);
        return l;
    }
    if (op == OP_MUL && (a.t == JV_STR || a.t == JV_LIST) && b.t == JV_INT) {
        jv l = a.t == JV_STR ? jv_strz(x->a, "") : jv_list(x->a);
        int64_t k = b.u.i;
        for (int64_t j = 0; j < k; j++) {
            jx_step(x, n);
            l = arith(x, n, OP_ADD, l, a);
        }
        return l;
    }
    if (op == OP_ADD && a.t == JV_STR)
        jx_fail(x, n, "can only concatenate str (not \"%s\") to str", jv_type_name(b));
    jx_fail(x, n, "unsupported operand type(s) for %s: '%s' and '%s'", names[op], jv_type_name(a), jv_type_name(b));
}

static bool contains(jctx *x, const jnode *n, jv item, jv cont) {
    switch (cont.t) {
    case JV_STR:
        if (item.t != JV_STR) jx_fail(x, n, "'in <string>' requires string as left operand, not %s", jv_type_name(item));
        if (!item.u.s->len) return true;
        if (item.u.s->len > cont.u.s->len) return false;
        return jmemmem(cont.u.s->p, cont.u.s->len, item.u.s->p, item.u.s->len) != NULL;
    case JV_LIST:
        for (size_t i = 0; i < cont.u.l->n; i++) if (jv_equal(cont.u.l->v[i], item)) return true;
        return false;
    case JV_DICT: case JV_NS: return jd_get(cont.u.d, item) != NULL;
    case JV_UNDEF: return false;
    default: jx_fail(x, n, "argument of type '%s' is not iterable", jv_type_name(cont));
    }
}

static jv compare(jctx *x, const jnode *n, int op, jv a, jv b) {
    switch (op) {
    case OP_EQ: return jv_bool(jv_equal(a, b));
    case OP_NE: return jv_bool(!jv_equal(a, b));
    case OP_IN: return jv_bool(contains(x, n, a, b));
    case OP_NOTIN: return jv_bool(!contains(x, n, a, b));
    default: {
        bool ok;
        int c = jv_compare(a, b, &ok);
        static const char *const nm[] = { [OP_LT] = "<", [OP_LE] = "<=", [OP_GT] = ">", [OP_GE] = ">=" };
        if (!ok) jx_fail(x, n, "'%s' not supported between instances of '%s' and '%s'", nm[op], jv_type_name(a), jv_type_name(b));
        return jv_bool(op == OP_LT ? c < 0 : op == OP_LE ? c <= 0 : op == OP_GT ? c > 0 : c >= 0);
    }
    }
}

/* Evaluate a call's arguments (kids: expressions and KWARGs). */
static void eval_args(jctx *x, jframe *f, const jnode *n, jargs *g) {
    int np = 0, nk = 0;
    for (int i = 0; i < n->nkids; i++) { if (n->kids[i]->kind == JN_KWARG) nk++; else np++; }
    g->pos = np ? ja_alloc(x->a, (size_t)np * sizeof *g->pos) : NULL;
    g->kwv = nk ? ja_alloc(x->a, (size_t)nk * sizeof *g->kwv) : NULL;
    g->kwn = nk ? ja_alloc(x->a, (size_t)nk * sizeof *g->kwn) : NULL;
    if ((np && !g->pos) || (nk && (!g->kwv || !g->kwn))) jx_oom(x, n);
    g->npos = g->nkw = 0;
    for (int i = 0; i < n->nkids; i++) {
        const jnode *k = n->kids[i];
        if (k->kind == JN_KWARG) { g->kwn[g->nkw] = k->lit.u.s->p; g->kwv[g->nkw++] = eval(x, f, k->a); }
        else g->pos[g->npos++] = eval(x, f, k);
    }
}

static jv make_macro(jctx *x, const jnode *def, jframe *closure) {
    jmacro *m = ja_alloc(x->a, sizeof *m);
    if (!m) jx_oom(x, def);
    m->def = def; m->closure = closure;
    jv v = {0}; v.t = JV_MACRO; v.u.m = m;
    return v;
}

static jv render_to_string(jctx *x, jframe *f, const jnode *body, const jnode *at) {
    jbuf *saved = x->out;
    jbuf b = { .limit = x->max_output, .a = x->a };
    x->out = &b;
    int saved_ctl = x->loopctl;
    exec_body(x, f, body);
    x->loopctl = saved_ctl;
    x->out = saved;
    if (b.failed) { jb_free(&b); emit(x, at, "", (size_t)-1); }
    jv s = jv_str(x->a, b.p ? b.p : "", b.n);
    jb_free(&b);
    if (s.t != JV_STR) jx_oom(x, at);
    return s;
}

jv jx_call_macro(jctx *x, const jnode *at, const jmacro *m, const jargs *g) {
    if (++x->depth > x->max_depth) jx_fail(x, at, "maximum call depth (%d) exceeded", x->max_depth);
    const jnode *def = m->def;
    jframe *f = new_frame(x, at, m->closure);
    jv varargs = jv_list(x->a), kwargs = jv_dict(x->a);
    if (varargs.t != JV_LIST || kwargs.t != JV_DICT) jx_oom(x, at);
    for (int i = 0; i < g->npos; i++) {
        if (i < def->nkids) fset(x, at, f, def->kids[i]->lit, g->pos[i]);
        else if (!jl_push(x->a, varargs.u.l, g->pos[i])) jx_oom(x, at);
    }
    for (int k = 0; k < g->nkw; k++) {
        int i = 0;
        for (; i < def->nkids; i++) if (!strcmp(def->kids[i]->lit.u.s->p, g->kwn[k])) break;
        if (i < def->nkids) fset(x, at, f, def->kids[i]->lit, g->kwv[k]);
        else if (!jd_set(x->a, kwargs.u.d, jv_strz(x->a, g->kwn[k]), g->kwv[k])) jx_oom(x, at);
    }
    for (int i = 0; i < def->nkids; i++) {
        const jnode *p = def->kids[i];
        if (jd_get(&f->vars, p->lit)) continue;
        jv v = p->a ? eval(x, f, p->a) : jv_undef();
        if (v.t == JV_UNDEF) v.u.undef_name = p->lit.u.s->p;
        fset(x, at, f, p->lit, v);
    }
    fset(x, at, f, jv_strz(x->a, "varargs"), varargs);
    fset(x, at, f, jv_strz(x->a, "kwargs"), kwargs);
    if (m->caller.t == JV_MACRO) fset(x, at, f, jv_strz(x->a, "caller"), m->caller);
    jv s = render_to_string(x, f, def->d, at);
    x->depth--;
    return s;
}

jv jx_call_value(jctx *x, const jnode *at, jv callee, const jargs *g) {
    switch (callee.t) {
    case JV_MACRO: return jx_call_macro(x, at, callee.u.m, g);
    case JV_BUILTIN: return jx_call_builtin(x, at, callee.u.fn, g);
    case JV_METHOD: return jx_method(x, at, callee.u.bm->self, callee.u.bm->name, g);
    case JV_UNDEF:
        if (callee.u.undef_name) jx_fail(x, at, "'%s' is undefined", callee.u.undef_name);
        jx_fail(x, at, "undefined value is not callable");
    default: jx_fail(x, at, "'%s' object is not callable", jv_type_name(callee));
    }
}

static jv eval(jctx *x, jframe *f, const jnode *n) {
    jx_step(x, n);
    if (++x->depth > x->max_depth + 256) jx_fail(x, n, "expression nested too deeply");
    jv r;
    switch (n->kind) {
    case JN_LIT: r = n->lit; break;
    case JN_NAME: {
        jv *v = lookup(f, n->lit);
        if (v) r = *v;
        else { r = jv_undef(); r.u.undef_name = n->lit.u.s->p; }
        break;
    }
    case JN_ATTR: r = jx_getattr(x, n, eval(x, f, n->a), n->lit, false); break;
    case JN_ITEM: { jv o = eval(x, f, n->a); r = jx_getattr(x, n, o, eval(x, f, n->b), true); break; }
    case JN_SLICE: {
        jv o = eval(x, f, n->a);
        jv s0 = n->b ? eval(x, f, n->b) : jv_undef(), s1 = n->c ? eval(x, f, n->c) : jv_undef(), s2 = n->d ? eval(x, f, n->d) : jv_undef();
        r = do_slice(x, n, o, s0, s1, s2);
        break;
    }
    case JN_CALL: {
        jv callee;
        if (n->a->kind == JN_ATTR) {   /* obj.method(...): name the object's type when it has none */
            jv obj = eval(x, f, n->a->a);
            callee = jx_getattr(x, n->a, obj, n->a->lit, false);
            if (callee.t == JV_UNDEF) jx_fail(x, n->a, "'%s' object has no attribute '%s'", jv_type_name(obj), n->a->lit.u.s->p);
        } else callee = eval(x, f, n->a);
        jargs g;
        eval_args(x, f, n, &g);
        r = jx_call_value(x, n, callee, &g);
        break;
    }
    case JN_FILTER: {
        jv subj = eval(x, f, n->a);
        jargs g;
        eval_args(x, f, n, &g);
        r = jx_filter(x, n, n->lit.u.s->p, subj, &g);
        break;
    }
    case JN_TEST: {
        jv subj = eval(x, f, n->a);
        jargs g;
        eval_args(x, f, n, &g);
        bool t = jx_test(x, n, n->lit.u.s->p, subj, &g);
        r = jv_bool(n->neg ? !t : t);
        break;
    }
    case JN_NOT: r = jv_bool(!jv_truthy(eval(x, f, n->a))); break;
    case JN_NEG: case JN_POS: {
        jv v = eval(x, f, n->a);
        if (!jv_is_num(v)) jx_fail(x, n, "bad operand type for unary %c: '%s'", n->kind == JN_NEG ? '-' : '+', jv_type_name(v));
        if (n->kind == JN_POS) r = v.t == JV_BOOL ? jv_int(v.u.b) : v;
        else if (v.t == JV_FLOAT) r = jv_float(-v.u.f);
        else { int64_t i = v.t == JV_BOOL ? v.u.b : v.u.i; if (i == INT64_MIN) jx_fail(x, n, "integer overflow"); r = jv_int(-i); }
        break;
    }
    case JN_BIN: { jv a = eval(x, f, n->a); r = arith(x, n, n->op, a, eval(x, f, n->b)); break; }
    case JN_CMP: { jv a = eval(x, f, n->a); r = compare(x, n, n->op, a, eval(x, f, n->b)); break; }
    case JN_AND: { jv a = eval(x, f, n->a); r = jv_truthy(a) ? eval(x, f, n->b) : a; break; }
    case JN_OR: { jv a = eval(x, f, n->a); r = jv_truthy(a) ? a : eval(x, f, n->b); break; }
    case JN_COND: r = jv_truthy(eval(x, f, n->b)) ? eval(x, f, n->a) : n->c ? eval(x, f, n->c) : jv_undef(); break;
    case JN_LISTLIT: case JN_TUPLE: {
        r = jv_list(x->a);
        if (r.t != JV_LIST) jx_oom(x, n);
        r.tuple = n->kind == JN_TUPLE;
        for (int i = 0; i < n->nkids; i++) if (!jl_push(x->a, r.u.l, eval(x, f, n->kids[i]))) jx_oom(x, n);
        break;
    }
    case JN_DICTLIT: {
        r = jv_dict(x->a);
        if (r.t != JV_DICT) jx_oom(x, n);
        for (int i = 0; i + 1 < n->nkids; i += 2) {
            jv k = eval(x, f, n->kids[i]);
            if (!jd_set(x->a, r.u.d, k, eval(x, f, n->kids[i + 1]))) jx_oom(x, n);
        }
        break;
    }
    default: jx_fail(x, n, "internal: not an expression (%d)", n->kind);
    }
    x->depth--;
    return r;
}

jv jx_eval(jctx *x, const jnode *n) { return eval(x, x->root, n); }

/* ===== Statements ===== */
static void assign(jctx *x, jframe *f, const jnode *target, jv v) {
    if (target->kind == JN_NAME) { fset(x, target, f, target->lit, v); return; }
    if (target->kind == JN_ATTR) {
        jv *ns = lookup(f, target->a->lit);
        if (!ns || ns->t != JV_NS) jx_fail(x, target, "cannot assign attribute on non-namespace object");
        if (!jd_set(x->a, ns->u.d, target->lit, v)) jx_oom(x, target);
        return;
    }
    /* tuple unpacking */
    if (v.t == JV_DICT) v = jx_list_of(x, target, v);
    if (v.t != JV_LIST) v = jx_list_of(x, target, v);
    if (v.u.l->n != (size_t)target->nkids)
        jx_fail(x, target, "%s values to unpack (expected %d, got %zu)", v.u.l->n > (size_t)target->nkids ? "too many" : "not enough", target->nkids, v.u.l->n);
    for (int i = 0; i < target->nkids; i++) assign(x, f, target->kids[i], v.u.l->v[i]);
}

static jv apply_filters(jctx *x, jframe *f, const jnode *chain_owner, jv v) {
    for (int i = 0; i < chain_owner->nkids; i++) {
        const jnode *fl = chain_owner->kids[i];
        jargs g;
        eval_args(x, f, fl, &g);
        v = jx_filter(x, fl, fl->lit.u.s->p, v, &g);
    }
    return v;
}

static void exec_for(jctx *x, jframe *f, const jnode *n) {
    jv it = eval(x, f, n->b);
    if (it.t == JV_NONE) jx_fail(x, n->b, "'NoneType' object is not iterable");
    jv items = jx_list_of(x, n, it);
    jframe *lf = new_frame(x, n, f);
    if (n->c) {
        jv fl = jv_list(x->a);
        if (fl.t != JV_LIST) jx_oom(x, n);
        for (size_t i = 0; i < items.u.l->n; i++) {
            jx_step(x, n);
            assign(x, lf, n->a, items.u.l->v[i]);
            if (jv_truthy(eval(x, lf, n->c)) && !jl_push(x->a, fl.u.l, items.u.l->v[i])) jx_oom(x, n);
        }
        items = fl;
    }
    if (!items.u.l->n) { if (n->e) exec_body(x, f, n->e); return; }
    jloop *lp = ja_alloc(x->a, sizeof *lp);
    if (!lp) jx_oom(x, n);
    lp->items = items.u.l;
    jv *outer = lookup(f, jv_strz(x->a, "loop"));
    lp->depth = outer && outer->t == JV_LOOP ? outer->u.loop->depth + 1 : 1;
    jv lv = {0};
    lv.t = JV_LOOP; lv.u.loop = lp;
    jv loopname = jv_strz(x->a, "loop");
    for (size_t i = 0; i < items.u.l->n; i++) {
        jx_step(x, n);
        lp->i = i;
        /* each iteration starts from the enclosing scope: a `set` in the body does not carry over */
        lf = new_frame(x, n, f);
        assign(x, lf, n->a, items.u.l->v[i]);
        fset(x, n, lf, loopname, lv);
        exec_body(x, lf, n->d);
        if (x->loopctl == 1) { x->loopctl = 0; break; }
        x->loopctl = 0;
    }
}

static void exec_node(jctx *x, jframe *f, const jnode *n) {
    jx_step(x, n);
    switch (n->kind) {
    case JN_BODY: exec_body(x, f, n); break;
    case JN_TEXT: emit(x, n, n->lit.u.s->p, n->lit.u.s->len); break;
    case JN_OUTPUT: {
        jv v = eval(x, f, n->a);
        if (v.t == JV_STR) emit(x, n, v.u.s->p, v.u.s->len);
        else {
            jbuf b = { .limit = x->max_output, .a = x->a };
            bool ok = jv_to_text(&b, v);
            if (ok) emit(x, n, b.p ? b.p : "", b.n);
            jb_free(&b);
            if (!ok) emit(x, n, "", (size_t)-1);
        }
        break;
    }
    case JN_IF:
        for (int i = 0; i < n->nkids; i++) {
            const jnode *b = n->kids[i];
            if (!b->a || jv_truthy(eval(x, f, b->a))) { exec_body(x, f, b->d); break; }
        }
        break;
    case JN_FOR: exec_for(x, f, n); break;
    case JN_SET: assign(x, f, n->a, eval(x, f, n->b)); break;
    case JN_SETBLOCK: {
        jv s = render_to_string(x, f, n->d, n);
        assign(x, f, n->a, apply_filters(x, f, n, s));
        break;
    }
    case JN_MACRO: fset(x, n, f, n->lit, make_macro(x, n, f)); break;
    case JN_CALLBLOCK: {
        const jnode *call = n->a;
        jv callee = eval(x, f, call->a);
        if (callee.t != JV_MACRO) jx_fail(x, call, "a call block needs a macro, not '%s'", jv_type_name(callee));
        jargs g;
        eval_args(x, f, call, &g);
        jmacro m = *callee.u.m;
        m.caller = make_macro(x, n, f);
        jv s = jx_call_macro(x, call, &m, &g);
        emit(x, n, s.u.s->p, s.u.s->len);
        break;
    }
    case JN_FILTERBLOCK: {
        jv s = render_to_string(x, f, n->d, n);
        jv r = jx_str(x, n, apply_filters(x, f, n, s));
        emit(x, n, r.u.s->p, r.u.s->len);
        break;
    }
    case JN_BREAK: x->loopctl = 1; break;
    case JN_CONTINUE: x->loopctl = 2; break;
    default: jx_fail(x, n, "internal: not a statement (%d)", n->kind);
    }
}

static void exec_body(jctx *x, jframe *f, const jnode *body) {
    for (int i = 0; i < body->nkids && !x->loopctl; i++) exec_node(x, f, body->kids[i]);
}

/* ===== Public API ===== */
nx_jinja_template *nx_jinja_parse(const char *src, size_t len, nx_error *err) {
    nx_jinja_template *t = calloc(1, sizeof *t);
    if (!t) { nx_fail(err, NX_ERR_NOMEM, "out of memory"); return NULL; }
    t->arena.limit = (size_t)64 << 20;
    /* Jinja normalizes \r\n and \r to \n (newline_sequence); tokens point into this copy */
    char *norm = ja_alloc(&t->arena, len + 1);
    if (!norm) { nx_jinja_free(t); nx_fail(err, NX_ERR_NOMEM, "template too large"); return NULL; }
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') { norm[k++] = '\n'; if (i + 1 < len && src[i + 1] == '\n') i++; }
        else norm[k++] = src[i];
    }
    jtoks toks = {0};
    if (jinja_lex(norm, k, &t->arena, &toks, err) != NX_OK || jinja_parse_tokens(&toks, &t->arena, &t->root, err) != NX_OK) {
        nx_jinja_free(t);
        return NULL;
    }
    return t;
}

void nx_jinja_free(nx_jinja_template *t) {
    if (!t) return;
    ja_free_all(&t->arena);
    free(t);
}

/* The render proper; an error longjmps back here. Returns the status (x->err filled). */
static nx_status run(jctx *x, const nx_jinja_template *t, const cJSON *vars) {
    if (setjmp(x->fail)) return x->err->code ? x->err->code : NX_ERR_INTERNAL;
    jframe *globals = new_frame(x, NULL, NULL);
    static const char *const builtins[] = { "raise_exception", "strftime_now", "namespace", "range", "dict", "joiner", "cycler" };
    for (int i = 0; i < JB_COUNT; i++) {
        jv fn = {0};
        fn.t = JV_BUILTIN; fn.u.fn = i;
        fset(x, NULL, globals, jv_strz(x->a, builtins[i]), fn);
    }
    x->root = new_frame(x, NULL, globals);
    if (vars && cJSON_IsObject(vars))
        for (const cJSON *c = vars->child; c; c = c->next) {
            jv v = jv_from_cjson(x->a, c, 0);
            if (x->a->failed) jx_oom(x, NULL);
            fset(x, NULL, x->root, jv_strz(x->a, c->string ? c->string : ""), v);
        }
    exec_body(x, x->root, t->root);
    return NX_OK;
}

nx_status nx_jinja_render(const nx_jinja_template *t, const cJSON *vars, const nx_jinja_limits *limits,
                          char **out, size_t *out_len, bool *raised, nx_error *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    if (raised) *raised = false;
    nx_jinja_limits L = limits ? *limits : (nx_jinja_limits){0};
    jarena arena = { .limit = L.max_memory ? L.max_memory : (size_t)256 << 20 };
    jbuf ob = { .limit = L.max_output ? L.max_output : (size_t)16 << 20 };
    jctx *x = calloc(1, sizeof *x);
    if (!x) return nx_fail(err, NX_ERR_NOMEM, "out of memory");
    nx_error local = {0};
    x->a = &arena;
    x->out = &ob;
    x->max_steps = L.max_steps ? L.max_steps : 20000000ull;
    x->max_depth = L.max_depth ? L.max_depth : 200;
    x->max_output = ob.limit;
    x->now = L.now ? L.now : time(NULL);
    x->err = err ? err : &local;
    nx_status st = run(x, t, vars);
    if (st == NX_OK) {
        *out = ob.p ? ob.p : calloc(1, 1);
        if (!*out) st = nx_fail(err, NX_ERR_NOMEM, "out of memory");
        else if (out_len) *out_len = ob.n;
    } else {
        if (raised) *raised = x->raised;
        free(ob.p);
    }
    ja_free_all(&arena);
    free(x);
    return st;
}
