/*
 * jinja_parse.c — tokens -> AST (jinja_impl.h), a recursive-descent parser with Jinja2's
 * grammar and operator precedence: conditional < or < and < not < comparisons < + - < ~ <
 * * / // % < ** < unary - + < postfix (.attr, [item], [a:b:c], call) < filters and tests.
 * Nesting is bounded (no stack overflow on hostile input); every error names its line and
 * column.
 */
#include <stdio.h>
#include <string.h>
#include "chat/jinja_impl.h"

#define MAX_NEST 200

typedef struct parser {
    const jtoks *t;
    size_t i;
    jarena *a;
    nx_error *err;
    int depth;
    jmp_buf fail;
} parser;

static _Noreturn void pfail(parser *P, const jtok *at, const char *fmt, const char *arg) {
    char msg[300];
    snprintf(msg, sizeof msg, fmt, arg ? arg : "");
    nx_fail(P->err, NX_ERR_FORMAT, "line %d col %d: %s", at->line, at->col, msg);
    longjmp(P->fail, 1);
}

static const jtok *cur(parser *P) { return &P->t->v[P->i]; }
static const jtok *peek(parser *P, size_t k) {
    size_t j = P->i + k;
    return j < P->t->n ? &P->t->v[j] : &P->t->v[P->t->n - 1];
}
static const jtok *next(parser *P) {
    const jtok *t = cur(P);
    if (P->i + 1 < P->t->n) P->i++;
    return t;
}

static bool is_op(const jtok *t, const char *op) { return t->type == JT_OP && t->n == strlen(op) && memcmp(t->p, op, t->n) == 0; }
static bool is_name(const jtok *t, const char *nm) { return t->type == JT_NAME && t->n == strlen(nm) && memcmp(t->p, nm, t->n) == 0; }

static const char *tok_desc(const jtok *t) {
    switch (t->type) {
    case JT_EOF: return "end of template";
    case JT_TEXT: return "text";
    case JT_VAR_END: return "'}}'";
    case JT_BLOCK_END: return "'%}'";
    case JT_BLOCK_BEGIN: return "'{%'";
    case JT_VAR_BEGIN: return "'{{'";
    default: return "token";
    }
}

static void expect_op(parser *P, const char *op) {
    if (!is_op(cur(P), op)) {
        char m[64];
        snprintf(m, sizeof m, "expected '%s'", op);
        pfail(P, cur(P), "%s", m);
    }
    next(P);
}

static jnode *nn(parser *P, int kind, const jtok *at) {
    jnode *n = ja_alloc(P->a, sizeof *n);
    if (!n) { nx_fail(P->err, NX_ERR_NOMEM, "template too large"); longjmp(P->fail, 1); }
    n->kind = (uint8_t)kind;
    n->line = at->line; n->col = at->col;
    return n;
}

static jv tok_str(parser *P, const jtok *t) {
    jv v = jv_str(P->a, t->p, t->n);
    if (v.t != JV_STR) { nx_fail(P->err, NX_ERR_NOMEM, "template too large"); longjmp(P->fail, 1); }
    return v;
}

/* A growable node list built in the arena. */
typedef struct nlist { jnode **v; int n, cap; } nlist;
static void nl_push(parser *P, nlist *l, jnode *x) {
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 4;
        jnode **nv = ja_alloc(P->a, (size_t)cap * sizeof *nv);
        if (!nv) { nx_fail(P->err, NX_ERR_NOMEM, "template too large"); longjmp(P->fail, 1); }
        if (l->n) memcpy(nv, l->v, (size_t)l->n * sizeof *nv);
        l->v = nv; l->cap = cap;
    }
    l->v[l->n++] = x;
}
static void set_kids(jnode *n, nlist *l) { n->kids = l->v; n->nkids = l->n; }

static void enter(parser *P) {
    if (++P->depth > MAX_NEST) pfail(P, cur(P), "%s", "nested too deeply");
}

/* ===== Expressions ===== */
static jnode *parse_expr(parser *P, bool condexpr);
static jnode *parse_unary(parser *P, bool with_filter);
static jnode *parse_or(parser *P);

static void parse_args(parser *P, jnode *call) {
    nlist l = {0};
    expect_op(P, "(");
    while (!is_op(cur(P), ")")) {
        if (l.n) { expect_op(P, ","); if (is_op(cur(P), ")")) break; }
        const jtok *t = cur(P);
        if (t->type == JT_NAME && is_op(peek(P, 1), "=")) {
            jnode *kw = nn(P, JN_KWARG, t);
            kw->lit = tok_str(P, t);
            next(P); next(P);
            kw->a = parse_expr(P, true);
            nl_push(P, &l, kw);
        } else {
            nl_push(P, &l, parse_expr(P, true));
        }
    }
    next(P);
    set_kids(call, &l);
}

static jnode *parse_primary(parser *P) {
    enter(P);
    const jtok *t = cur(P);
    jnode *n;
    if (t->type == JT_NAME) {
        next(P);
        n = nn(P, JN_LIT, t);
        if (is_name(t, "true") || is_name(t, "True")) n->lit = jv_bool(true);
        else if (is_name(t, "false") || is_name(t, "False")) n->lit = jv_bool(false);
        else if (is_name(t, "none") || is_name(t, "None")) n->lit = jv_none();
        else { n->kind = JN_NAME; n->lit = tok_str(P, t); }
    } else if (t->type == JT_STRING) {
        /* adjacent literals concatenate */
        size_t total = 0, j = P->i;
        while (P->t->v[j].type == JT_STRING) total += P->t->v[j++].n;
        n = nn(P, JN_LIT, t);
        jstr *s = js_new(P->a, "", 0);
        jstr *big = ja_alloc(P->a, sizeof *big + total + 1);
        if (!s || !big) { nx_fail(P->err, NX_ERR_NOMEM, "template too large"); longjmp(P->fail, 1); }
        while (cur(P)->type == JT_STRING) {
            const jtok *k = next(P);
            memcpy(big->p + big->len, k->p, k->n);
            big->len += k->n;
        }
        n->lit.t = JV_STR; n->lit.u.s = big;
    } else if (t->type == JT_INT) {
        next(P); n = nn(P, JN_LIT, t); n->lit = jv_int(t->i);
    } else if (t->type == JT_FLOAT) {
        next(P); n = nn(P, JN_LIT, t); n->lit = jv_float(t->f);
    } else if (is_op(t, "(")) {
        next(P);
        if (is_op(cur(P), ")")) { next(P); n = nn(P, JN_TUPLE, t); }
        else {
            jnode *e = parse_expr(P, true);
            if (is_op(cur(P), ",")) {
                nlist l = {0};
                nl_push(P, &l, e);
                while (is_op(cur(P), ",")) {
                    next(P);
                    if (is_op(cur(P), ")")) break;
                    nl_push(P, &l, parse_expr(P, true));
                }
                n = nn(P, JN_TUPLE, t);
                set_kids(n, &l);
            } else n = e;
            expect_op(P, ")");
        }
    } else if (is_op(t, "[")) {
        next(P);
        nlist l = {0};
        while (!is_op(cur(P), "]")) {
            if (l.n) { expect_op(P, ","); if (is_op(cur(P), "]")) break; }
            nl_push(P, &l, parse_expr(P, true));
        }
        next(P);
        n = nn(P, JN_LISTLIT, t);
        set_kids(n, &l);
    } else if (is_op(t, "{")) {
        next(P);
        nlist l = {0};
        while (!is_op(cur(P), "}")) {
            if (l.n) { expect_op(P, ","); if (is_op(cur(P), "}")) break; }
            nl_push(P, &l, parse_expr(P, true));
            expect_op(P, ":");
            nl_push(P, &l, parse_expr(P, true));
        }
        next(P);
        n = nn(P, JN_DICTLIT, t);
        set_kids(n, &l);
    } else {
        pfail(P, t, "unexpected %s", t->type == JT_OP ? "operator" : tok_desc(t));
    }
    P->depth--;
    return n;
}

static jnode *parse_postfix(parser *P, jnode *n) {
    for (;;) {
        const jtok *t = cur(P);
        if (is_op(t, ".")) {
            next(P);
            const jtok *k = cur(P);
            jnode *a;
            if (k->type == JT_NAME) { a = nn(P, JN_ATTR, k); a->lit = tok_str(P, k); }
            else if (k->type == JT_INT) { a = nn(P, JN_ITEM, k); a->b = nn(P, JN_LIT, k); a->b->lit = jv_int(k->i); }
            else pfail(P, k, "%s", "expected an attribute name");
            next(P);
            a->a = n;
            n = a;
        } else if (is_op(t, "[")) {
            next(P);
            jnode *s[3] = {0};
            int parts = 0;
            bool slice = false;
            for (;;) {
                if (is_op(cur(P), "]")) break;
                if (is_op(cur(P), ":")) {
                    slice = true;
                    if (++parts > 2) pfail(P, cur(P), "%s", "bad slice");
                    next(P);
                    continue;
                }
                if (s[parts]) pfail(P, cur(P), "%s", "expected ']'");
                s[parts] = parse_expr(P, true);
            }
            next(P);
            jnode *it;
            if (slice) { it = nn(P, JN_SLICE, t); it->b = s[0]; it->c = s[1]; it->d = s[2]; }
            else {
                if (!s[0]) pfail(P, t, "%s", "empty subscript");
                it = nn(P, JN_ITEM, t); it->b = s[0];
            }
            it->a = n;
            n = it;
        } else if (is_op(t, "(")) {
            jnode *c = nn(P, JN_CALL, t);
            c->a = n;
            parse_args(P, c);
            n = c;
        } else return n;
    }
}

static jnode *parse_filter_expr(parser *P, jnode *n) {
    for (;;) {
        const jtok *t = cur(P);
        if (is_op(t, "|")) {
            next(P);
            const jtok *k = cur(P);
            if (k->type != JT_NAME) pfail(P, k, "%s", "expected a filter name");
            next(P);
            jnode *f = nn(P, JN_FILTER, k);
            f->lit = tok_str(P, k);
            f->a = n;
            if (is_op(cur(P), "(")) parse_args(P, f);
            n = f;
        } else if (is_name(t, "is")) {
            next(P);
            bool neg = false;
            if (is_name(cur(P), "not")) { neg = true; next(P); }
            const jtok *k = cur(P);
            if (k->type != JT_NAME) pfail(P, k, "%s", "expected a test name");
            next(P);
            jnode *f = nn(P, JN_TEST, k);
            f->lit = tok_str(P, k);
            f->a = n;
            f->neg = neg;
            const jtok *c = cur(P);
            if (is_op(c, "(")) parse_args(P, f);
            else if ((c->type == JT_NAME || c->type == JT_STRING || c->type == JT_INT || c->type == JT_FLOAT ||
                      is_op(c, "[") || is_op(c, "{")) &&
                     !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
                jnode *arg = parse_postfix(P, parse_primary(P));
                f->kids = ja_alloc(P->a, sizeof *f->kids);
                if (!f->kids) { nx_fail(P->err, NX_ERR_NOMEM, "template too large"); longjmp(P->fail, 1); }
                f->kids[0] = arg; f->nkids = 1;
            }
            n = f;
        } else if (is_op(t, "(")) {
            jnode *c = nn(P, JN_CALL, t);
            c->a = n;
            parse_args(P, c);
            n = c;
        } else return n;
    }
}

static jnode *parse_unary(parser *P, bool with_filter) {
    enter(P);
    const jtok *t = cur(P);
    jnode *n;
    if (is_op(t, "-") || is_op(t, "+")) {
        next(P);
        n = nn(P, is_op(t, "-") ? JN_NEG : JN_POS, t);
        n->a = parse_unary(P, false);
    } else n = parse_primary(P);
    n = parse_postfix(P, n);
    if (with_filter) n = parse_filter_expr(P, n);
    P->depth--;
    return n;
}

static jnode *bin(parser *P, const jtok *t, int op, jnode *a, jnode *b) {
    jnode *n = nn(P, op >= OP_EQ ? JN_CMP : JN_BIN, t);
    n->op = (uint8_t)op; n->a = a; n->b = b;
    return n;
}

static jnode *parse_pow(parser *P) {
    jnode *l = parse_unary(P, true);
    while (is_op(cur(P), "**")) { const jtok *t = next(P); l = bin(P, t, OP_POW, l, parse_unary(P, true)); }
    return l;
}

static jnode *parse_math2(parser *P) {
    jnode *l = parse_pow(P);
    for (;;) {
        const jtok *t = cur(P);
        int op = is_op(t, "*") ? OP_MUL : is_op(t, "/") ? OP_DIV : is_op(t, "//") ? OP_FLOORDIV : is_op(t, "%") ? OP_MOD : 0;
        if (!op) return l;
        next(P);
        l = bin(P, t, op, l, parse_pow(P));
    }
}

static jnode *parse_concat(parser *P) {
    jnode *l = parse_math2(P);
    while (is_op(cur(P), "~")) { const jtok *t = next(P); l = bin(P, t, OP_CONCAT, l, parse_math2(P)); }
    return l;
}

static jnode *parse_math1(parser *P) {
    jnode *l = parse_concat(P);
    for (;;) {
        const jtok *t = cur(P);
        int op = is_op(t, "+") ? OP_ADD : is_op(t, "-") ? OP_SUB : 0;
        if (!op) return l;
        next(P);
        l = bin(P, t, op, l, parse_concat(P));
    }
}

static jnode *parse_compare(parser *P) {
    jnode *l = parse_math1(P), *res = NULL, *prev = l;
    for (;;) {
        const jtok *t = cur(P);
        int op = is_op(t, "==") ? OP_EQ : is_op(t, "!=") ? OP_NE : is_op(t, "<") ? OP_LT : is_op(t, "<=") ? OP_LE
               : is_op(t, ">") ? OP_GT : is_op(t, ">=") ? OP_GE : is_name(t, "in") ? OP_IN : 0;
        if (!op && is_name(t, "not") && is_name(peek(P, 1), "in")) { op = OP_NOTIN; next(P); }
        if (!op) break;
        next(P);
        jnode *r = parse_math1(P);
        jnode *c = bin(P, t, op, prev, r);
        /* a < b < c means (a < b) and (b < c) */
        if (!res) res = c;
        else { jnode *an = nn(P, JN_AND, t); an->a = res; an->b = c; res = an; }
        prev = r;
    }
    return res ? res : l;
}

static jnode *parse_not(parser *P) {
    if (is_name(cur(P), "not")) {
        enter(P);
        const jtok *t = next(P);
        jnode *n = nn(P, JN_NOT, t);
        n->a = parse_not(P);
        P->depth--;
        return n;
    }
    return parse_compare(P);
}

static jnode *parse_and(parser *P) {
    jnode *l = parse_not(P);
    while (is_name(cur(P), "and")) { const jtok *t = next(P); jnode *n = nn(P, JN_AND, t); n->a = l; n->b = parse_not(P); l = n; }
    return l;
}

static jnode *parse_or(parser *P) {
    jnode *l = parse_and(P);
    while (is_name(cur(P), "or")) { const jtok *t = next(P); jnode *n = nn(P, JN_OR, t); n->a = l; n->b = parse_and(P); l = n; }
    return l;
}

static jnode *parse_expr(parser *P, bool condexpr) {
    enter(P);
    jnode *e = parse_or(P);
    while (condexpr && is_name(cur(P), "if")) {
        const jtok *t = next(P);
        jnode *c = nn(P, JN_COND, t);
        c->a = e;
        c->b = parse_or(P);
        if (is_name(cur(P), "else")) { next(P); c->c = parse_expr(P, true); }
        e = c;
    }
    P->depth--;
    return e;
}

/* `a` or `a, b` (for and set targets): names, or attributes of a name (ns.x) */
static jnode *parse_target(parser *P, bool allow_attr) {
    const jtok *t = cur(P);
    nlist l = {0};
    for (;;) {
        const jtok *k = cur(P);
        if (k->type != JT_NAME) pfail(P, k, "%s", "expected a name");
        next(P);
        jnode *n = nn(P, JN_NAME, k);
        n->lit = tok_str(P, k);
        if (allow_attr && is_op(cur(P), ".")) {
            next(P);
            const jtok *an = cur(P);
            if (an->type != JT_NAME) pfail(P, an, "%s", "expected an attribute name");
            next(P);
            jnode *a = nn(P, JN_ATTR, an);
            a->a = n; a->lit = tok_str(P, an);
            n = a;
        }
        nl_push(P, &l, n);
        if (!is_op(cur(P), ",")) break;
        next(P);
    }
    if (l.n == 1) return l.v[0];
    jnode *tu = nn(P, JN_TUPLE, t);
    set_kids(tu, &l);
    return tu;
}

/* ===== Statements ===== */
static void expect_block_end(parser *P) {
    if (cur(P)->type != JT_BLOCK_END) pfail(P, cur(P), "expected '%%}', found %s", cur(P)->type == JT_OP || cur(P)->type == JT_NAME ? "more tokens" : tok_desc(cur(P)));
    next(P);
}

/* Parse statements until `{% NAME` with NAME one of ends (NULL-terminated); the parser stops
 * on that name token. ends == NULL: until end of template. */
static jnode *parse_body(parser *P, const char *const *ends);

static void parse_filter_chain(parser *P, nlist *l) {
    for (;;) {
        const jtok *k = cur(P);
        if (k->type != JT_NAME) pfail(P, k, "%s", "expected a filter name");
        next(P);
        jnode *f = nn(P, JN_FILTER, k);
        f->lit = tok_str(P, k);
        if (is_op(cur(P), "(")) parse_args(P, f);
        nl_push(P, l, f);
        if (!is_op(cur(P), "|")) break;
        next(P);
    }
}

static void parse_params(parser *P, nlist *l) {
    expect_op(P, "(");
    while (!is_op(cur(P), ")")) {
        if (l->n) expect_op(P, ",");
        const jtok *k = cur(P);
        if (k->type != JT_NAME) pfail(P, k, "%s", "expected a parameter name");
        next(P);
        jnode *p = nn(P, JN_PARAM, k);
        p->lit = tok_str(P, k);
        if (is_op(cur(P), "=")) { next(P); p->a = parse_expr(P, true); }
        nl_push(P, l, p);
    }
    next(P);
}

static void end_tag(parser *P, const char *name) {
    /* cur is the end name */
    if (!is_name(cur(P), name)) pfail(P, cur(P), "expected '%s'", name);
    next(P);
    /* Jinja allows `{% endmacro name %}` */
    if (cur(P)->type == JT_NAME && strcmp(name, "endmacro") == 0) next(P);
    expect_block_end(P);
}

static jnode *parse_statement(parser *P) {
    const jtok *t = cur(P);
    if (t->type != JT_NAME) pfail(P, t, "%s", "expected a statement name");
    enter(P);
    jnode *n;
    next(P);
    if (is_name(t, "if")) {
        n = nn(P, JN_IF, t);
        nlist br = {0};
        static const char *const ends[] = { "elif", "else", "endif", NULL };
        jnode *b = nn(P, JN_BRANCH, t);
        b->a = parse_expr(P, true);
        expect_block_end(P);
        b->d = parse_body(P, ends);
        nl_push(P, &br, b);
        for (;;) {
            const jtok *k = cur(P);
            if (is_name(k, "elif")) {
                next(P);
                b = nn(P, JN_BRANCH, k);
                b->a = parse_expr(P, true);
                expect_block_end(P);
                b->d = parse_body(P, ends);
                nl_push(P, &br, b);
            } else if (is_name(k, "else")) {
                next(P);
                expect_block_end(P);
                static const char *const e2[] = { "endif", NULL };
                b = nn(P, JN_BRANCH, k);
                b->d = parse_body(P, e2);
                nl_push(P, &br, b);
            } else { end_tag(P, "endif"); break; }
        }
        set_kids(n, &br);
    } else if (is_name(t, "for")) {
        n = nn(P, JN_FOR, t);
        n->a = parse_target(P, false);
        if (!is_name(cur(P), "in")) pfail(P, cur(P), "%s", "expected 'in'");
        next(P);
        n->b = parse_or(P);
        if (is_op(cur(P), ",")) {       /* for x in a, b */
            nlist l = {0};
            nl_push(P, &l, n->b);
            while (is_op(cur(P), ",")) { next(P); nl_push(P, &l, parse_or(P)); }
            jnode *tu = nn(P, JN_TUPLE, t);
            set_kids(tu, &l);
            n->b = tu;
        }
        if (is_name(cur(P), "if")) { next(P); n->c = parse_expr(P, false); }
        if (is_name(cur(P), "recursive")) pfail(P, cur(P), "%s", "recursive loops are not supported");
        expect_block_end(P);
        static const char *const ends[] = { "else", "endfor", NULL };
        n->d = parse_body(P, ends);
        if (is_name(cur(P), "else")) {
            next(P);
            expect_block_end(P);
            static const char *const e2[] = { "endfor", NULL };
            n->e = parse_body(P, e2);
        }
        end_tag(P, "endfor");
    } else if (is_name(t, "set")) {
        jnode *target = parse_target(P, true);
        if (is_op(cur(P), "=")) {
            next(P);
            n = nn(P, JN_SET, t);
            n->a = target;
            jnode *e = parse_expr(P, true);
            if (is_op(cur(P), ",")) {
                nlist l = {0};
                nl_push(P, &l, e);
                while (is_op(cur(P), ",")) { next(P); nl_push(P, &l, parse_expr(P, true)); }
                e = nn(P, JN_TUPLE, t);
                set_kids(e, &l);
            }
            n->b = e;
            expect_block_end(P);
        } else {
            n = nn(P, JN_SETBLOCK, t);
            n->a = target;
            if (target->kind != JN_NAME) pfail(P, t, "%s", "a block set takes one name");
            nlist l = {0};
            if (is_op(cur(P), "|")) { next(P); parse_filter_chain(P, &l); }
            set_kids(n, &l);
            expect_block_end(P);
            static const char *const ends[] = { "endset", NULL };
            n->d = parse_body(P, ends);
            end_tag(P, "endset");
        }
    } else if (is_name(t, "macro")) {
        n = nn(P, JN_MACRO, t);
        const jtok *k = cur(P);
        if (k->type != JT_NAME) pfail(P, k, "%s", "expected a macro name");
        next(P);
        n->lit = tok_str(P, k);
        nlist l = {0};
        parse_params(P, &l);
        set_kids(n, &l);
        expect_block_end(P);
        static const char *const ends[] = { "endmacro", NULL };
        n->d = parse_body(P, ends);
        end_tag(P, "endmacro");
    } else if (is_name(t, "call")) {
        n = nn(P, JN_CALLBLOCK, t);
        nlist l = {0};
        if (is_op(cur(P), "(")) parse_params(P, &l);
        set_kids(n, &l);
        jnode *c = parse_expr(P, true);
        if (c->kind != JN_CALL) pfail(P, t, "%s", "expected a call");
        n->a = c;
        expect_block_end(P);
        static const char *const ends[] = { "endcall", NULL };
        n->d = parse_body(P, ends);
        end_tag(P, "endcall");
    } else if (is_name(t, "filter")) {
        n = nn(P, JN_FILTERBLOCK, t);
        nlist l = {0};
        parse_filter_chain(P, &l);
        set_kids(n, &l);
        expect_block_end(P);
        static const char *const ends[] = { "endfilter", NULL };
        n->d = parse_body(P, ends);
        end_tag(P, "endfilter");
    } else if (is_name(t, "generation")) {
        /* Hugging Face's assistant-mask marker: renders its body unchanged */
        expect_block_end(P);
        static const char *const ends[] = { "endgeneration", NULL };
        n = parse_body(P, ends);
        end_tag(P, "endgeneration");
    } else if (is_name(t, "break") || is_name(t, "continue")) {
        n = nn(P, is_name(t, "break") ? JN_BREAK : JN_CONTINUE, t);
        expect_block_end(P);
    } else {
        char nm[64];
        snprintf(nm, sizeof nm, "%.*s", (int)(t->n > 60 ? 60 : t->n), t->p);
        pfail(P, t, "unknown tag '%s'", nm);
    }
    P->depth--;
    return n;
}

static jnode *parse_body(parser *P, const char *const *ends) {
    const jtok *start = cur(P);
    jnode *body = nn(P, JN_BODY, start);
    nlist l = {0};
    for (;;) {
        const jtok *t = cur(P);
        if (t->type == JT_EOF) {
            if (ends) pfail(P, t, "unexpected end of template, expected '%s'", ends[0]);
            break;
        }
        if (t->type == JT_TEXT) {
            next(P);
            jnode *x = nn(P, JN_TEXT, t);
            x->lit.t = JV_STR;
            x->lit.u.s = js_new(P->a, t->p, t->n);
            if (!x->lit.u.s) { nx_fail(P->err, NX_ERR_NOMEM, "template too large"); longjmp(P->fail, 1); }
            nl_push(P, &l, x);
        } else if (t->type == JT_VAR_BEGIN) {
            next(P);
            jnode *x = nn(P, JN_OUTPUT, t);
            jnode *e = parse_expr(P, true);
            if (is_op(cur(P), ",")) {
                nlist tl = {0};
                nl_push(P, &tl, e);
                while (is_op(cur(P), ",")) { next(P); if (cur(P)->type == JT_VAR_END) break; nl_push(P, &tl, parse_expr(P, true)); }
                e = nn(P, JN_TUPLE, t);
                set_kids(e, &tl);
            }
            x->a = e;
            if (cur(P)->type != JT_VAR_END) pfail(P, cur(P), "%s", "expected '}}'");
            next(P);
            nl_push(P, &l, x);
        } else if (t->type == JT_BLOCK_BEGIN) {
            const jtok *k = peek(P, 1);
            if (ends && k->type == JT_NAME)
                for (int i = 0; ends[i]; i++)
                    if (is_name(k, ends[i])) { next(P); set_kids(body, &l); return body; }
            if (k->type == JT_NAME && k->n >= 3 && (memcmp(k->p, "end", 3) == 0 || is_name(k, "else") || is_name(k, "elif"))) {
                char nm[64];
                snprintf(nm, sizeof nm, "%.*s", (int)(k->n > 60 ? 60 : k->n), k->p);
                pfail(P, k, "unexpected '%s'", nm);
            }
            next(P);
            nl_push(P, &l, parse_statement(P));
        } else {
            pfail(P, t, "unexpected %s", tok_desc(t));
        }
    }
    set_kids(body, &l);
    return body;
}

nx_status jinja_parse_tokens(const jtoks *toks, jarena *a, jnode **root, nx_error *err) {
    parser P = { .t = toks, .a = a, .err = err };
    if (setjmp(P.fail)) return err ? err->code : NX_ERR_FORMAT;
    *root = parse_body(&P, NULL);
    return NX_OK;
}
