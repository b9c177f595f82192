/*
 * test_chat_template.c — the Jinja engine (src/chat/jinja*.c).
 *
 * 1. Every case of tests/data/chat/cases.json (real chat templates x conversations) rendered
 *    with Hugging Face's variables must equal expected.json (python3-jinja2's rendering) byte
 *    for byte; an `ok: false` case must fail.
 * 2. The language feature by feature: tiny inline templates with their expected output.
 * 3. Errors: positions, raise_exception's message, and the limits (steps, depth, output).
 */
#include <time.h>
#include "test.h"
#include "chat/jinja.h"
#include "core/io.h"
#include "chat/chat_template.h"
#include "chat/tool_parse.h"
#include "chat/tool_stream.h"
#include "server/request.h"
#include "server/chat.h"

#define DATA NX_SOURCE_DIR "/tests/data/chat"

/* 2026-01-02 03:04:05 UTC: the reference renderer's fixed clock */
static const time_t FIXED_NOW = 1767323045;

static char *render(const char *tpl, const char *vars_json, nx_status *st, bool *raised, char *errbuf) {
    nx_error err = {0};
    cJSON *vars = vars_json ? cJSON_Parse(vars_json) : NULL;
    nx_jinja_template *t = nx_jinja_parse(tpl, strlen(tpl), &err);
    char *out = NULL;
    size_t n = 0;
    *st = err.code;
    if (t) {
        nx_jinja_limits lim = { .now = FIXED_NOW };
        *st = nx_jinja_render(t, vars, &lim, &out, &n, raised, &err);
    }
    if (errbuf) snprintf(errbuf, NX_ERROR_MSG_MAX, "%s", err.msg);
    nx_jinja_free(t);
    cJSON_Delete(vars);
    return out;
}

static void check_render(const char *tpl, const char *vars, const char *want, int line) {
    nx_status st;
    bool raised = false;
    char msg[NX_ERROR_MSG_MAX];
    char *got = render(tpl, vars, &st, &raised, msg);
    if (!got || strcmp(got, want) != 0) {
        fprintf(stderr, "  FAIL line %d: template %s\n    want [%s]\n    got  [%s] %s\n", line, tpl, want, got ? got : "(error)", got ? "" : msg);
        t_cur_failed++;
    }
    free(got);
}
#define R(tpl, vars, want) check_render(tpl, vars, want, __LINE__)

static void check_error(const char *tpl, const char *vars, const char *want_sub, int line) {
    nx_status st;
    bool raised = false;
    char msg[NX_ERROR_MSG_MAX];
    char *got = render(tpl, vars, &st, &raised, msg);
    if (got || !strstr(msg, want_sub)) {
        fprintf(stderr, "  FAIL line %d: template %s\n    want error with [%s]\n    got  [%s] [%s]\n", line, tpl, want_sub, got ? got : "(error)", msg);
        t_cur_failed++;
    }
    free(got);
}
#define E(tpl, vars, want) check_error(tpl, vars, want, __LINE__)

/* ===== 1. the real templates ===== */
static void test_real_templates(void) {
    char *cbuf = NULL, *ebuf = NULL;
    size_t cn, en;
    nx_error err = {0};
    REQUIRE_MSG(nx_read_file(DATA "/cases.json", 1 << 24, &cbuf, &cn, &err) == NX_OK, "%s", err.msg);
    REQUIRE_MSG(nx_read_file(DATA "/expected.json", 1 << 24, &ebuf, &en, &err) == NX_OK, "%s", err.msg);
    cJSON *cases = cJSON_Parse(cbuf), *exp = cJSON_Parse(ebuf);
    free(cbuf); free(ebuf);
    REQUIRE_MSG(cJSON_IsArray(cases) && cJSON_IsArray(exp), "bad json");
    int n = cJSON_GetArraySize(cases), pass = 0;
    CHECK_EQ_INT(n, cJSON_GetArraySize(exp));
    for (int i = 0; i < n; i++) {
        cJSON *c = cJSON_GetArrayItem(cases, i), *e = cJSON_GetArrayItem(exp, i);
        const char *tname = cJSON_GetObjectItem(c, "template")->valuestring;
        char path[1024];
        snprintf(path, sizeof path, DATA "/%s", tname);
        char *src = NULL;
        size_t sn;
        if (nx_read_file(path, 1 << 22, &src, &sn, &err) != NX_OK) { CHECK_MSG(0, "%s", err.msg); continue; }
        /* the variables apply_chat_template passes */
        cJSON *vars = cJSON_CreateObject();
        cJSON_AddItemToObject(vars, "messages", cJSON_Duplicate(cJSON_GetObjectItem(c, "messages"), 1));
        cJSON *agp = cJSON_GetObjectItem(c, "add_generation_prompt");
        cJSON_AddBoolToObject(vars, "add_generation_prompt", agp ? cJSON_IsTrue(agp) : 1);
        cJSON *bos = cJSON_GetObjectItem(c, "bos_token"), *eos = cJSON_GetObjectItem(c, "eos_token");
        cJSON_AddStringToObject(vars, "bos_token", bos ? bos->valuestring : "");
        cJSON_AddStringToObject(vars, "eos_token", eos ? eos->valuestring : "");
        cJSON *kw = cJSON_GetObjectItem(c, "kwargs");
        for (cJSON *k = kw ? kw->child : NULL; k; k = k->next) cJSON_AddItemToObject(vars, k->string, cJSON_Duplicate(k, 1));
        cJSON *tools = cJSON_GetObjectItem(c, "tools");
        if (tools && !cJSON_IsNull(tools)) cJSON_AddItemToObject(vars, "tools", cJSON_Duplicate(tools, 1));

        nx_jinja_template *t = nx_jinja_parse(src, sn, &err);
        free(src);
        char *out = NULL;
        size_t on = 0;
        nx_status st = err.code;
        if (t) {
            nx_jinja_limits lim = { .now = FIXED_NOW };
            st = nx_jinja_render(t, vars, &lim, &out, &on, NULL, &err);
        }
        bool want_ok = cJSON_IsTrue(cJSON_GetObjectItem(e, "ok"));
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        if (want_ok) {
            const char *want = cJSON_GetObjectItem(e, "text")->valuestring;
            if (st == NX_OK && on == strlen(want) && memcmp(out, want, on) == 0) pass++;
            else if (st != NX_OK) fprintf(stderr, "  case %d %s/%s: error %s\n", i, tname, name, err.msg);
            else {
                size_t k = 0;
                while (k < on && want[k] && out[k] == want[k]) k++;
                fprintf(stderr, "  case %d %s/%s: differs at byte %zu:\n    want ...%.80s\n    got  ...%.80s\n", i, tname, name, k,
                        want + (k > 20 ? k - 20 : 0), out + (k > 20 ? k - 20 : 0));
            }
        } else {
            if (st != NX_OK) pass++;
            else fprintf(stderr, "  case %d %s/%s: rendered, expected error %s\n", i, tname, name,
                         cJSON_GetObjectItem(e, "error")->valuestring);
        }
        free(out);
        nx_jinja_free(t);
        cJSON_Delete(vars);
        nx_error_clear(&err);
    }
    fprintf(stderr, "  %d of %d cases match expected.json\n", pass, n);
    CHECK_EQ_INT(pass, n);
    cJSON_Delete(cases);
    cJSON_Delete(exp);
}


/* ===== 2. the language, feature by feature (expected outputs from python3-jinja2 with HF's settings) ===== */
static void test_language(void) {
    R("Hello {{ name }}!", "{\"name\": \"world\"}", "Hello world!");
    R("{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ 1 / 3 }} {{ 4 / 2 }}", "{}", "7 3 -4 1 2 1024 3.5 0.3333333333333333 2.0");
    R("{{ 'a' ~ 1 ~ none ~ true }} {{ 'ab' + 'cd' }} {{ [1, 2] + [3] }} {{ 'x' * 3 }}", "{}", "a1NoneTrue abcd [1, 2, 3] xxx");
    R("{{ 1.5 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1.0 }} {{ 3.14159 }} {{ 1e-5 }} {{ 2.5e-3 }} {{ 123456789012345678.0 }}", "{}", "1.5 0.30000000000000004 1e+20 1.0 3.14159 1e-05 0.0025 1.2345678901234568e+17");
    R("{{ x }} {{ x.y is defined }} {{ y is defined }} {{ none is none }} {{ x is none }}", "{\"x\": null}", "None False False True True");
    R("{% if a %}A{% elif b %}B{% else %}C{% endif %}|{% if not a and b %}nb{% endif %}|{% if a or b %}or{% endif %}", "{\"a\": false, \"b\": 1}", "B|nb|or");
    R("{% for i in items %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.length }}{{ '!' if loop.first }}{{ '$' if loop.last }} {% endfor %}", "{\"items\": [\"a\", \"b\", \"c\"]}", "1/0/3/3! 2/1/2/3 3/2/1/3$ ");
    R("{% for i in items %}{{ loop.previtem }}<{{ i }}>{{ loop.nextitem }};{% endfor %}", "{\"items\": [1, 2, 3]}", "<1>2;1<2>3;2<3>;");
    R("{% for i in [] %}x{% else %}empty{% endfor %}", "{}", "empty");
    R("{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}", "{}", "0134");
    R("{% for i in range(6) if i is odd %}{{ i }}:{{ loop.length }} {% endfor %}", "{}", "1:3 3:3 5:3 ");
    R("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{% for k, v in d | items %}{{ k }}{% endfor %}|{% for k in d %}{{ k }}{% endfor %}", "{\"d\": {\"b\": 1, \"a\": 2}}", "b=1;a=2;|ba|ba");
    R("{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}|{{ x }}", "{}", "23|1");
    R("{% set ns = namespace(total=0, s='') %}{% for i in [1, 2, 3] %}{% set ns.total = ns.total + i %}{% endfor %}{{ ns.total }}", "{}", "6");
    R("{% set block %}  inner {{ 1 + 1 }}  {% endset %}[{{ block }}]{% set up | upper %}shout{% endset %}{{ up }}", "{}", "[  inner 2  ]SHOUT");
    R("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} {{ greet('b', '?') }} {{ greet(punct='.', name='c') }}", "{}", "Hi a! Hi b? Hi c.");
    R("{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ 1 }}{% endcall %}", "{}", "<b>bold 1</b>");
    R("{% macro row(x) %}[{{ caller(x * 2) }}]{% endmacro %}{% call(v) row(3) %}v={{ v }}{% endcall %}", "{}", "[v=6]");
    R("{% filter upper %}hello {{ 'world' }}{% endfilter %}", "{}", "HELLO WORLD");
    R("  {%- if true -%}  trimmed  {%- endif -%}  |\n{{- '  x  ' -}}  |", "{}", "trimmed|  x  |");
    R("<ul>\n  {% for i in [1, 2] %}\n    <li>{{ i }}</li>\n  {% endfor %}\n</ul>", "{}", "<ul>\n    <li>1</li>\n    <li>2</li>\n</ul>");
    R("a  {#- comment -#}  b {# keep #} c\n  {# own line #}\nd", "{}", "ab  c\nd");
    R("{% raw %}{{ not parsed }}{% endraw %}", "{}", "{{ not parsed }}");
    R("{{ s[1:] }} {{ s[:2] }} {{ s[::-1] }} {{ s[-2:] }} {{ l[1:3] }} {{ l[::2] }} {{ l[-1] }} {{ s[0] }}", "{\"s\": \"h\303\251llo\", \"l\": [1, 2, 3, 4, 5]}", "\303\251llo h\303\251 oll\303\251h lo [2, 3] [1, 3, 5] 5 h");
    R("{{ 'a' in 'cat' }} {{ 2 in [1, 2] }} {{ 'k' in d }} {{ 'z' not in d }} {{ 1 < 2 < 3 }} {{ 3 > 2 >= 2 }} {{ 'a' != 'b' }}", "{\"d\": {\"k\": 1}}", "True True True True True True True");
    R("{{ 'yes' if x else 'no' }} {{ 'y2' if not x }}|", "{\"x\": 0}", "no y2|");
    R("{{ x is string }} {{ x is mapping }} {{ l is iterable }} {{ l is sequence }} {{ d is mapping }} {{ 1 is number }} {{ true is boolean }} {{ 1 is boolean }} {{ true is true }} {{ 0 is false }} {{ 3 is divisibleby 3 }} {{ 'a' is in 'abc' }} {{ 4 is even }}", "{\"x\": \"s\", \"l\": [1], \"d\": {}}", "True False True True True True True False True False True True True");
    R("{{ 'abc' | length }} {{ [1,2] | length }} {{ '  pad  ' | trim }} {{ 'xxhixx' | trim('x') }} {{ 'Hi' | upper }} {{ 'Hi' | lower }} {{ 'hello world' | capitalize }} {{ 'hello wORLD' | title }}", "{}", "3 2 pad hi HI hi Hello world Hello World");
    R("{{ 'a-b-c' | replace('-', '+') }} {{ ['a', 'b'] | join(', ') }} {{ [1, 2] | join }} {{ [3, 4] | first }} {{ [3, 4] | last }} {{ 'abc' | list }} {{ none | default('d') }} {{ undefined_var | default('u') }} {{ '' | default('e', true) }}", "{}", "a+b+c a, b 12 3 4 ['a', 'b', 'c'] None u e");
    R("{{ users | selectattr('active') | map(attribute='name') | join(',') }} {{ users | rejectattr('active') | map(attribute='name') | list }} {{ users | selectattr('name', 'equalto', 'b') | list | length }}", "{\"users\": [{\"name\": \"a\", \"active\": true}, {\"name\": \"b\", \"active\": false}, {\"name\": \"c\", \"active\": true}]}", "a,c ['b'] 1");
    R("{{ [3, 1, 2] | sort }} {{ ['b', 'A', 'c'] | sort }} {{ [3, 1, 2] | sort(reverse=true) }} {{ [1, 2, 1, 3] | unique | list }} {{ [1, 2, 3] | reverse | list }} {{ d | dictsort }}", "{\"d\": {\"b\": 1, \"a\": 2, \"C\": 3}}", "[1, 2, 3] ['A', 'b', 'c'] [3, 2, 1] [1, 2, 3] [3, 2, 1] [('a', 2), ('b', 1), ('C', 3)]");
    R("{{ -3 | abs }} {{ 2.567 | round(2) }} {{ 2.5 | round }} {{ '42' | int }} {{ 'x' | int }} {{ 3.9 | int }} {{ 1 | string }} {{ [1,2,3,4,5] | batch(2) | list }} {{ [1, 2, 3] | sum }} {{ [3, 1] | min }} {{ [3, 1] | max }}", "{}", "3 2.57 2.0 42 0 3 1 [[1, 2], [3, 4], [5]] 6 1 3");
    R("{{ d | tojson }} {{ d | tojson(indent=2) }} {{ d | tojson(sort_keys=true) }} {{ d | tojson(separators=(',', ':')) }}", "{\"d\": {\"b\": [1, 2.5, \"\303\251\\\"\\n\"], \"a\": null, \"t\": true}}", "{\"b\": [1, 2.5, \"\303\251\\\"\\n\"], \"a\": null, \"t\": true} {\n  \"b\": [\n    1,\n    2.5,\n    \"\303\251\\\"\\n\"\n  ],\n  \"a\": null,\n  \"t\": true\n} {\"a\": null, \"b\": [1, 2.5, \"\303\251\\\"\\n\"], \"t\": true} {\"b\":[1,2.5,\"\303\251\\\"\\n\"],\"a\":null,\"t\":true}");
    R("{{ text | indent(2) }}|{{ text | indent(2, first=true) }}|{{ text | indent(2, blank=true) }}", "{\"text\": \"a\\n\\nb\\n\"}", "a\n\n  b\n|  a\n\n  b\n|a\n  \n  b\n  ");
    R("{{ s.startswith('he') }} {{ s.endswith('lo') }} {{ '  x  '.strip() }} {{ 'xxaxx'.lstrip('x') }} {{ 'xxaxx'.rstrip('x') }} {{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a,b,c'.rsplit(',', 1) }} {{ 'a,b,c'.split(',', 1) }}", "{\"s\": \"hello\"}", "True True x axx xxa ['a', 'b', '', 'c'] ['a', 'b'] ['a,b', 'c'] ['a', 'b,c']");
    R("{{ s.replace('l', 'L') }} {{ s.upper() }} {{ 'ABC'.lower() }} {{ 'ab cd'.title() }} {{ s.find('l') }} {{ s.find('z') }} {{ s.count('l') }} {{ '{} and {}'.format(1, 'b') }} {{ '-'.join(['a', 'b']) }}", "{\"s\": \"hello\"}", "heLLo HELLO abc Ab Cd 2 -1 2 1 and b a-b");
    R("{{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 'dflt') }} {{ d.keys() | list }} {{ d.values() | list }} {{ d['a'] }} {{ d.a }}", "{\"d\": {\"a\": 1, \"b\": 2}}", "1 None dflt ['a', 'b'] [1, 2] 1 1");
    R("{{ [1, 'a', none, true, 1.5] }} {{ {'k': 'v', 'n': [1]} }} {{ ('a', 1) }} {{ \"it's\" }} {{ ['it\\'s'] }}", "{}", "[1, 'a', None, True, 1.5] {'k': 'v', 'n': [1]} ('a', 1) it's [\"it's\"]");
    R("{{ \"a\\tb\\\\n\" }} {{ 'unicode: \\u00e9' }} {{ 'x' 'y' }}", "{}", "a\tb\\n unicode: \303\251 xy");
    R("{{ strftime_now('%Y-%m-%d %H:%M:%S') }} {{ strftime_now('%d %B %Y') }}", "{}", "2026-01-02 03:04:05 02 January 2026");
    R("{% set a, b = 1, 2 %}{{ a }}{{ b }} {% set t = (1, 2) %}{{ t[0] }}", "{}", "12 1");
    R("{%- set x = [1, 2, 3] -%}\n{%- for i in x %}\n  {{- i -}}\n{% endfor %}\nend", "{}", "123end");
    R("{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1) | int }}{% endif %}{% endmacro %}{{ fact(5) }}", "{}", "120");
    R("{{ messages[0]['content'] }}{% for m in messages[1:] %},{{ m.role }}{% endfor %}", "{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"U\"}, {\"role\": \"assistant\", \"content\": \"A\"}]}", "S,user,assistant");
    R("{% if x is not none and x is not string %}obj{% endif %}{{ x.a is defined }}", "{\"x\": {\"a\": 1}}", "objTrue");
    R("{{ '%s-%d' | format('a', 3) }} {{ 'abc' | center(7) }}| {{ 'a b c' | wordcount }}", "{}", "a-3   abc  | 3");
    R("{% for a in [[1, 2], [3]] %}{% for b in a %}{{ loop.index }}.{% endfor %}{{ loop.index }};{% endfor %}", "{}", "1.2.1;1.2;");
    R("{{ loop_var | default(5) }} {{ true and 'x' }} {{ false or 'y' }} {{ 0 or '' }}|", "{}", "5 x y |");
    R("{{ x | selectattr('type', 'equalto', 'text') | map(attribute='text') | join }}", "{\"x\": [{\"type\": \"text\", \"text\": \"A\"}, {\"type\": \"image\"}, {\"type\": \"text\", \"text\": \"B\"}]}", "AB");
    R("{{ [1, 2, 3] | select('odd') | list }} {{ [1, 2, 3] | reject('odd') | list }} {{ ['a', 'b'] | map('upper') | list }}", "{}", "[1, 3] [2] ['A', 'B']");
    R("{{ 'a\\nb' }} {{ ['a\\nb'] }} {{ [1.0, -0.5] }} {{ {'a': none} | tojson }}\n", "{}", "a\nb ['a\\nb'] [1.0, -0.5] {\"a\": null}");
    R("{% for i in [1, 2, 3] %}{{ loop.cycle('odd', 'even') }} {% endfor %}", "{}", "odd even odd ");
    R("a\n    {%+ if true %}x{% endif %}\nb", "{}", "a\n    xb");
    R("{% if true +%}\nkept newline{% endif %}", "{}", "\nkept newline");
    R("{{ '%s is %d' % ('x', 3) }} {{ 'n=%s' % 5 }}", "{}", "x is 3 n=5");
    R("{{ {'a': {'b': [1, {'c': none}]}} }}", "{}", "{'a': {'b': [1, {'c': None}]}}");
    R("{{ 'a b c d'.split(' ', 2) }} {{ 'a-b-c'.rsplit('-') }} {{ '  a  '.lstrip() }}|{{ 'x'.center(5) if false else 'y' }}", "{}", "['a', 'b', 'c d'] ['a', 'b', 'c'] a  |y");
    R("{{ d | dictsort(by='value') }} {{ d | dictsort(reverse=true) }}", "{\"d\": {\"a\": 3, \"b\": 1, \"c\": 2}}", "[('b', 1), ('c', 2), ('a', 3)] [('c', 2), ('b', 1), ('a', 3)]");
    R("{{ \"\\x41\\u00e9\\t|\" }} {{ 'it\\'s' }} {{ \"say \\\"hi\\\"\" }}", "{}", "A\303\251\t| it's say \"hi\"");
    R("{% filter replace('a', 'o') %}banana{% endfilter %} {% filter trim | upper %}  x  {% endfilter %}", "{}", "bonono X");
    R("{% macro m() %}{{ varargs | length }}:{{ kwargs | dictsort }}{% endmacro %}{{ m(1, 2, k=3) }}", "{}", "2:[('k', 3)]");
    R("{% set ns = namespace(items=[]) %}{% for i in [1, 2] %}{% set ns.items = ns.items + [i * 10] %}{% endfor %}{{ ns.items }}", "{}", "[10, 20]");
    R("{{ [1, 2, 3][1:] | join('-') }} {{ 'abc'[::-1] | upper }} {{ (1, 2) | list }} {{ range(3) | list }} {{ range(1, 10, 3) | list }}", "{}", "2-3 CBA [1, 2] [0, 1, 2] [1, 4, 7]");
    R("{{ 10 / 4 }} {{ 10 // 4 }} {{ 2 ** -1 }} {{ -2 ** 2 }} {{ 7 % -3 }} {{ 1.5 // 1 }} {{ true + 1 }}", "{}", "2.5 2 0.5 4 -2 1.0 2");
    R("{% if 1 in [1.0] and 'ab' < 'b' and [1, 2] < [1, 3] %}yes{% endif %}", "{}", "yes");
    R("{{ x is defined and x.y is undefined }} {{ (x.y | default('dflt')) }} {{ x['missing'] is none }}", "{\"x\": {}}", "True dflt False");
    R("{%- for m in messages -%}\n{%- if m.role == 'user' -%}\nU:{{ m.content }}\n{% elif m.role == 'assistant' %}\nA:{{ m.content | trim }}\n{% endif -%}\n{%- endfor -%}", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"  yo  \"}]}\n", "U:hi\nA:yo\n");
    /* \r\n line ends read as \n (Jinja's newline normalization) */
    R("{% if true %}\r\n  a\r\n{% endif %}\r\nb\r\n", NULL, "  a\nb");
}

/* ===== 3. errors and limits ===== */
static void test_errors(void) {
    /* syntax errors carry line and column */
    E("line one\n{% if x %}unclosed", NULL, "line 2 col 19: unexpected end of template");
    E("{{ 1 + }}", NULL, "line 1 col 8: unexpected");
    E("a\n  {% frobnicate %}", NULL, "line 2 col 6: unknown tag 'frobnicate'");
    E("{{ 'abc }}", NULL, "line 1 col 4: unterminated string");
    E("{% for x in y %}{% endif %}", NULL, "unexpected 'endif'");
    E("{{ x | nosuchfilter }}", NULL, "line 1 col 8: no filter named 'nosuchfilter'");
    E("{{ x is nosuchtest }}", NULL, "no test named 'nosuchtest'");
    /* runtime errors */
    E("{{ 'a' + 1 }}", NULL, "can only concatenate str");
    E("{{ x.y.z }}", NULL, "'x' is undefined");
    E("{{ 1 // 0 }}", NULL, "division");
    E("{{ [1].append(2) }}", NULL, "unsafe");
    E("{% set d = {} %}{% set d.x = 1 %}", NULL, "non-namespace");
    /* raise_exception: the message exactly, and the raised flag */
    nx_status st;
    bool raised = false;
    char msg[NX_ERROR_MSG_MAX];
    char *out = render("ok{{ raise_exception('Only user and assistant roles are supported!') }}", NULL, &st, &raised, msg);
    CHECK(out == NULL);
    CHECK(raised);
    CHECK_STR(msg, "Only user and assistant roles are supported!");
    CHECK(st == NX_ERR_INVALID_ARG);
    raised = true;
    out = render("{{ 1 + 'a' }}", NULL, &st, &raised, msg);
    CHECK(!out && !raised);
}

static void test_limits(void) {
    nx_error err = {0};
    char *out = NULL;
    bool raised;
    /* unbounded recursion -> depth error, not a stack overflow */
    const char *rec = "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}";
    nx_jinja_template *t = nx_jinja_parse(rec, strlen(rec), &err);
    REQUIRE_MSG(t, "%s", err.msg);
    CHECK(nx_jinja_render(t, NULL, NULL, &out, NULL, &raised, &err) != NX_OK);
    CHECK_MSG(strstr(err.msg, "depth") != NULL, "%s", err.msg);
    nx_jinja_free(t);
    /* a huge loop -> step limit */
    const char *loop = "{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}";
    t = nx_jinja_parse(loop, strlen(loop), &err);
    REQUIRE_MSG(t, "%s", err.msg);
    nx_jinja_limits lim = { .max_steps = 100000 };
    CHECK(nx_jinja_render(t, NULL, &lim, &out, NULL, &raised, &err) == NX_ERR_RANGE);
    CHECK_MSG(strstr(err.msg, "steps") != NULL, "%s", err.msg);
    nx_jinja_free(t);
    /* output growth -> output limit */
    const char *big = "{% for i in range(100000) %}xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx{% endfor %}";
    t = nx_jinja_parse(big, strlen(big), &err);
    REQUIRE_MSG(t, "%s", err.msg);
    nx_jinja_limits lim2 = { .max_output = 10000 };
    CHECK(nx_jinja_render(t, NULL, &lim2, &out, NULL, &raised, &err) == NX_ERR_RANGE);
    CHECK_MSG(strstr(err.msg, "output") != NULL, "%s", err.msg);
    nx_jinja_free(t);
    /* memory growth (a string doubling) -> memory or output limit */
    const char *dbl = "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}";
    t = nx_jinja_parse(dbl, strlen(dbl), &err);
    REQUIRE_MSG(t, "%s", err.msg);
    nx_jinja_limits lim3 = { .max_memory = 1 << 20 };
    CHECK(nx_jinja_render(t, NULL, &lim3, &out, NULL, &raised, &err) == NX_ERR_RANGE);
    nx_jinja_free(t);
    /* deep nesting in the source -> a parse error, not a stack overflow */
    char deep[4096];
    size_t k = 0;
    k += (size_t)snprintf(deep, sizeof deep, "{{ ");
    for (int i = 0; i < 1000; i++) deep[k++] = '-';
    k += (size_t)snprintf(deep + k, sizeof deep - k, "1 }}");
    CHECK(nx_jinja_parse(deep, k, &err) == NULL);
    CHECK_MSG(strstr(err.msg, "nested too deeply") != NULL, "%s", err.msg);
    /* a template renders many times */
    const char *simple = "{{ a }}";
    t = nx_jinja_parse(simple, strlen(simple), &err);
    cJSON *v = cJSON_Parse("{\"a\": 7}");
    for (int i = 0; i < 3; i++) {
        size_t n;
        CHECK(nx_jinja_render(t, v, NULL, &out, &n, &raised, &err) == NX_OK);
        CHECK_STR(out, "7");
        free(out);
    }
    cJSON_Delete(v);
    nx_jinja_free(t);
}

/* ===== 4. the chat adapter and the server's request path ===== */
static char *read_data(const char *rel, size_t *n) {
    char path[1024], *buf = NULL;
    nx_error err = {0};
    snprintf(path, sizeof path, DATA "/%s", rel);
    if (nx_read_file(path, 1 << 22, &buf, n, &err) != NX_OK) return NULL;
    return buf;
}

static void test_chat_adapter(void) {
    size_t n;
    char *src = read_data("templates/Qwen3.5-4B.jinja", &n);
    REQUIRE_MSG(src, "template");
    nx_chat_template *ct = NULL;
    nx_error err = {0};
    REQUIRE_MSG(nx_chat_template_create(src, n, "", "<|im_end|>", &ct, &err) == NX_OK, "%s", err.msg);
    free(src);
    /* text parts are joined, string arguments decoded, kwargs become variables */
    cJSON *msgs = cJSON_Parse("[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hel\"},{\"type\":\"text\",\"text\":\"lo\"}]},"
                              "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"a\",\"type\":\"function\","
                              "\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"x\\\": 1}\"}}]},"
                              "{\"role\":\"tool\",\"tool_call_id\":\"a\",\"content\":\"ok\"}]");
    cJSON *kw = cJSON_Parse("{\"enable_thinking\": false}");
    char *out = NULL;
    size_t on;
    bool raised;
    CHECK(nx_chat_template_render(ct, msgs, NULL, kw, true, &out, &on, &raised, &err) == NX_OK);
    CHECK_MSG(out && strstr(out, "<|im_start|>user\nHello<|im_end|>"), "%s", out ? out : err.msg);
    CHECK_MSG(out && strstr(out, "<parameter=x>\n1\n</parameter>"), "%s", out ? out : err.msg);
    CHECK_MSG(out && strstr(out, "<think>\n\n</think>") , "%s", out ? out : err.msg);
    free(out);
    /* the server's request parser renders with the template; raise_exception -> 400 with its message */
    nx_gen_info info;
    memset(&info, 0, sizeof info);
    info.n_vocab = 1000;
    info.n_slots = 1;
    info.n_ctx_slot = 4096;
    info.chat_template = ct;
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"chat_template_kwargs\":{\"enable_thinking\":false}}";
    nx_api_request r;
    nx_api_error e;
    memset(&r, 0, sizeof r);
    memset(&e, 0, sizeof e);
    CHECK(nx_api_parse(NX_API_CHAT, body, strlen(body), &info, &r, &e) == NX_OK);
    CHECK_STR(r.prompt_text, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    nx_api_request_free(&r);
    const char *bad = "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"system\",\"content\":\"b\"}]}";
    memset(&e, 0, sizeof e);
    CHECK(nx_api_parse(NX_API_CHAT, bad, strlen(bad), &info, &r, &e) != NX_OK);
    CHECK_EQ_INT(e.http, 400);
    CHECK_STR(e.msg, "System message must be at the beginning.");
    nx_api_request_free(&r);
    cJSON_Delete(msgs);
    cJSON_Delete(kw);
    nx_chat_template_free(ct);
}

/* ===== 5. tool calls parsed back from what the templates write (tool_segments.json) ===== */
static void test_tool_segments(void) {
    size_t n;
    char *sb = read_data("tool_segments.json", &n), *cb = read_data("cases.json", &n);
    REQUIRE_MSG(sb && cb, "data");
    cJSON *segs = cJSON_Parse(sb), *cases = cJSON_Parse(cb);
    free(sb); free(cb);
    int total = 0, pass = 0;
    const cJSON *s;
    cJSON_ArrayForEach(s, segs) {
        const char *tname = cJSON_GetObjectItem(s, "template")->valuestring, *name = cJSON_GetObjectItem(s, "name")->valuestring;
        const char *seg = cJSON_GetObjectItem(s, "segment")->valuestring;
        const cJSON *msg = cJSON_GetObjectItem(s, "message"), *want_calls = cJSON_GetObjectItem(msg, "tool_calls");
        const cJSON *tools = NULL, *c;
        cJSON_ArrayForEach(c, cases)
            if (!strcmp(cJSON_GetObjectItem(c, "template")->valuestring, tname) && !strcmp(cJSON_GetObjectItem(c, "name")->valuestring, name))
                tools = cJSON_GetObjectItem(c, "tools");
        /* templates that do not write the calls have nothing to parse back */
        const cJSON *w0 = cJSON_GetArrayItem(want_calls, 0);
        if (!w0 || !strstr(seg, cJSON_GetObjectItem(cJSON_GetObjectItem(w0, "function"), "name")->valuestring)) continue;
        total++;
        nx_chat_parsed p;
        nx_error err = {0};
        if (nx_chat_parse_output(seg, strlen(seg), tools, &p, &err) != NX_OK) { CHECK_MSG(0, "%s", err.msg); continue; }
        bool ok = cJSON_GetArraySize(p.tool_calls) == cJSON_GetArraySize(want_calls);
        const cJSON *want_content = cJSON_GetObjectItem(msg, "content");
        const char *wc = cJSON_IsString(want_content) ? want_content->valuestring : "";
        /* content a template does not write (Hermes drops it beside calls) cannot come back */
        if (strstr(seg, wc) && strcmp(p.content, wc) != 0) ok = false;
        for (int i = 0; ok && i < cJSON_GetArraySize(want_calls); i++) {
            const cJSON *wf = cJSON_GetObjectItem(cJSON_GetArrayItem(want_calls, i), "function");
            const cJSON *gf = cJSON_GetObjectItem(cJSON_GetArrayItem(p.tool_calls, i), "function");
            cJSON *ga = cJSON_Parse(cJSON_GetObjectItem(gf, "arguments")->valuestring);
            ok = !strcmp(cJSON_GetObjectItem(wf, "name")->valuestring, cJSON_GetObjectItem(gf, "name")->valuestring) &&
                 cJSON_Compare(ga, cJSON_GetObjectItem(wf, "arguments"), 1);
            cJSON_Delete(ga);
        }
        if (ok) pass++;
        else {
            char *got = cJSON_PrintUnformatted(p.tool_calls);
            fprintf(stderr, "  %s/%s: content [%s] calls %s\n", tname, name, p.content, got ? got : "null");
            free(got);
        }
        nx_chat_parsed_free(&p);
    }
    fprintf(stderr, "  %d of %d tool segments parsed back\n", pass, total);
    CHECK(total > 0);
    CHECK_EQ_INT(pass, total);
    cJSON_Delete(segs);
    cJSON_Delete(cases);
}

/* tool_choice required / named: the answer is begun in the prompt with the template's own call
 * text (request.c force_call); prefill + the rest of what the template writes is the turn */
static void test_forced_calls(void) {
    char *sb = read_data("tool_segments.json", &(size_t){0}), *cb = read_data("cases.json", &(size_t){0});
    REQUIRE_MSG(sb && cb, "data");
    cJSON *segs = cJSON_Parse(sb), *cases = cJSON_Parse(cb);
    free(sb); free(cb);
    int forced = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        if (strcmp(cJSON_GetObjectItem(c, "name")->valuestring, "tool_roundtrip")) continue;
        const char *tname = cJSON_GetObjectItem(c, "template")->valuestring;
        const char *seg = NULL;
        const cJSON *s;
        cJSON_ArrayForEach(s, segs)
            if (!strcmp(cJSON_GetObjectItem(s, "template")->valuestring, tname) && !strcmp(cJSON_GetObjectItem(s, "name")->valuestring, "tool_roundtrip"))
                seg = cJSON_GetObjectItem(s, "segment")->valuestring;
        size_t n;
        char *src = read_data(tname, &n);
        nx_chat_template *ct = NULL;
        nx_error err = {0};
        REQUIRE_MSG(src && seg && nx_chat_template_create(src, n, cJSON_GetObjectItem(c, "bos_token")->valuestring, "", &ct, &err) == NX_OK, "%s", tname);
        free(src);
        nx_gen_info info;
        memset(&info, 0, sizeof info);
        info.n_vocab = 1000; info.n_slots = 1; info.n_ctx_slot = 1 << 16;
        info.chat_template = ct;
        cJSON *body = cJSON_CreateObject(), *msgs = cJSON_AddArrayToObject(body, "messages");
        cJSON_AddItemToArray(msgs, cJSON_Duplicate(cJSON_GetArrayItem(cJSON_GetObjectItem(c, "messages"), 0), 1));   /* the user turn */
        cJSON_AddItemToObject(body, "tools", cJSON_Duplicate(cJSON_GetObjectItem(c, "tools"), 1));
        for (int named = 0; named < 2; named++) {
            cJSON_DeleteItemFromObject(body, "tool_choice");
            if (named) cJSON_AddItemToObject(body, "tool_choice", cJSON_Parse("{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}"));
            else cJSON_AddStringToObject(body, "tool_choice", "required");
            char *bs = cJSON_PrintUnformatted(body);
            nx_api_request r;
            nx_api_error e;
            memset(&r, 0, sizeof r); memset(&e, 0, sizeof e);
            CHECK_MSG(nx_api_parse(NX_API_CHAT, bs, strlen(bs), &info, &r, &e) == NX_OK, "%s: %s", tname, e.msg);
            free(bs);
            if (r.prefill) {
                /* the prefill ends with the segment's start, up to the name's start (required) or
                 * end (named); Gemma's begins with the "<|" its segment leaves in the prompt */
                const char *nm = strstr(seg, "get_weather");
                size_t want = nm ? (size_t)(nm - seg) + (named ? 11 : 0) : 0;
                CHECK_MSG(nm && r.prefill_len >= want && r.prefill_len <= want + 2 && !memcmp(r.prefill + r.prefill_len - want, seg, want),
                          "%s: prefill [%s]", tname, r.prefill);
                CHECK(r.prompt_len >= r.prefill_len && !strcmp(r.prompt_text + r.prompt_len - r.prefill_len, r.prefill));
                /* what the model then writes completes the template's turn: the call parses back */
                cJSON *tools = r.tools;
                nx_chat_parsed p;
                CHECK(nx_chat_parse_output(seg, strlen(seg), tools, &p, NULL) == NX_OK && cJSON_GetArraySize(p.tool_calls) == 1);
                nx_chat_parsed_free(&p);
                forced++;
            } else {
                fprintf(stderr, "  %s: not forced (the call turn does not extend the prompt)\n", tname);
            }
            nx_api_request_free(&r);
        }
        cJSON_Delete(body);
        nx_chat_template_free(ct);
    }
    fprintf(stderr, "  forced calls: %d of 12 (template x required/named)\n", forced);
    CHECK(forced >= 12);
    cJSON_Delete(segs);
    cJSON_Delete(cases);
}

static void parse_one(const char *text, const char *tools_json, const char *want_content, const char *want_reasoning,
                      const char *want_calls, int line) {
    cJSON *tools = tools_json ? cJSON_Parse(tools_json) : NULL;
    nx_chat_parsed p;
    nx_error err = {0};
    if (nx_chat_parse_output(text, strlen(text), tools, &p, &err) != NX_OK) { t_cur_failed++; cJSON_Delete(tools); return; }
    char *calls = p.tool_calls ? cJSON_PrintUnformatted(p.tool_calls) : NULL;
    bool ok = !strcmp(p.content, want_content) && (want_reasoning ? p.reasoning && !strcmp(p.reasoning, want_reasoning) : !p.reasoning) &&
              (want_calls ? calls && !strcmp(calls, want_calls) : !calls);
    if (!ok) {
        fprintf(stderr, "  FAIL line %d: [%s] -> content [%s] reasoning [%s] calls %s\n", line, text, p.content,
                p.reasoning ? p.reasoning : "(null)", calls ? calls : "null");
        t_cur_failed++;
    }
    free(calls);
    nx_chat_parsed_free(&p);
    cJSON_Delete(tools);
}
#define P(text, tools, content, reasoning, calls) parse_one(text, tools, content, reasoning, calls, __LINE__)

static void test_tool_parse(void) {
    const char *tools = "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":"
                        "{\"n\":{\"type\":\"integer\"},\"s\":{\"type\":\"string\"},\"o\":{\"type\":\"object\"}}}}}]";
    /* schema types restored for XML values; strings stay strings even when they look like numbers */
    P("<tool_call>\n<function=f>\n<parameter=n>\n42\n</parameter>\n<parameter=s>\n007\n</parameter>\n<parameter=o>\n{\"a\": [1]}\n</parameter>\n</function>\n</tool_call>",
      tools, "", NULL, "[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"n\\\":42,\\\"s\\\":\\\"007\\\",\\\"o\\\":{\\\"a\\\":[1]}}\"}}]");
    /* reasoning, then a duplicate call dropped */
    P("<think>\nplan\n</think>\n\nOK <tool_call>\n{\"name\": \"f\", \"arguments\": {\"n\": 1}}\n</tool_call>\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"n\": 1}}\n</tool_call>",
      tools, "OK", "plan", "[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"n\\\":1}\"}}]");
    /* the turn starts inside <think> (the opening tag was in the prompt) */
    P("thinking\n</think>\n\nHello<|im_end|>", NULL, "Hello", "thinking", NULL);
    /* unparseable call text stays content */
    P("<tool_call>\n{\"name\": broken\n</tool_call>", tools, "<tool_call>\n{\"name\": broken\n</tool_call>", NULL, NULL);
    /* Gemma 4 nested values */
    P("<|tool_call>call:f{o:{k:[1,<|\"|>x,y<|\"|>]},n:3}<tool_call|>", tools, "", NULL,
      "[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"o\\\":{\\\"k\\\":[1,\\\"x,y\\\"]},\\\"n\\\":3}\"}}]");
    /* plain JSON is a call only for a known tool */
    P("{\"name\": \"g\", \"parameters\": {}}", tools, "{\"name\": \"g\", \"parameters\": {}}", NULL, NULL);
    P("<|python_tag|>{\"name\": \"f\", \"parameters\": {\"n\": 2}}", tools, "", NULL,
      "[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"n\\\":2}\"}}]");
    P("just text", NULL, "just text", NULL, NULL);
}

/* ===== 6. tool calls in the server: request parsing and response shapes ===== */
static void test_server_tools(void) {
    size_t n;
    char *src = read_data("templates/Qwen3.5-4B.jinja", &n);
    REQUIRE_MSG(src, "template");
    nx_chat_template *ct = NULL;
    nx_error err = {0};
    REQUIRE_MSG(nx_chat_template_create(src, n, "", "<|im_end|>", &ct, &err) == NX_OK, "%s", err.msg);
    free(src);
    nx_gen_info info;
    memset(&info, 0, sizeof info);
    info.n_vocab = 1000; info.n_slots = 1; info.n_ctx_slot = 4096;
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"}],\"parallel_tool_calls\":false,"
                       "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
                       "\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"}}}}}]}";
    nx_api_request r;
    nx_api_error e;
    memset(&r, 0, sizeof r); memset(&e, 0, sizeof e);
    /* no template: tools are refused */
    CHECK(nx_api_parse(NX_API_CHAT, body, strlen(body), &info, &r, &e) != NX_OK);
    CHECK_EQ_INT(e.http, 400);
    nx_api_request_free(&r);
    info.chat_template = ct;
    CHECK(nx_api_parse(NX_API_CHAT, body, strlen(body), &info, &r, &e) == NX_OK);
    CHECK(r.tools != NULL && !r.parallel_tools);
    CHECK_MSG(r.prompt_text && strstr(r.prompt_text, "<tools>") && strstr(r.prompt_text, "get_weather"), "%s", r.prompt_text ? r.prompt_text : e.msg);
    /* the answer -> message with tool_calls, types from the schema, the second call dropped (parallel false) */
    const char *answer = "<think>\nuse the tool\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                         "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n"
                         "<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>";
    /* the server's parser with the request's tools and parallel_tool_calls (as http_gen.c runs it) */
    nx_tool_stream_opts o = { .tools = r.tools, .calls = true, .reasoning = true, .parallel = r.parallel_tools,
                              .in_reasoning = nx_tool_reasoning_open_at(r.prompt_text, r.prompt_len) };
    CHECK_EQ_INT(o.in_reasoning, NX_TOOL_REASONING_THINK);   /* Qwen3.5's generation prompt opens <think> */
    o.in_reasoning = NX_TOOL_REASONING_CLOSED;               /* this answer writes its own */
    nx_tool_stream *ts = nx_tool_stream_new(&o);
    nx_tool_deltas d = {0};
    CHECK(nx_tool_stream_feed(ts, answer, strlen(answer), &d, NULL) == NX_OK && nx_tool_stream_finish(ts, &d, NULL) == NX_OK);
    CHECK_EQ_INT(d.n, 2);
    CHECK(d.n == 2 && d.v[0].kind == NX_TOOL_DELTA_REASONING && !strcmp(d.v[0].text, "use the tool") && d.v[1].kind == NX_TOOL_DELTA_CALL);
    char *cs = d.n == 2 && d.v[1].call ? cJSON_PrintUnformatted(d.v[1].call) : NULL;
    CHECK_STR(cs, "{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\",\\\"days\\\":3}\"}}");
    free(cs);
    nx_tool_deltas_clear(&d);
    nx_tool_stream_free(ts);
    nx_api_request_free(&r);
    /* tool_choice none: no tools reach the template */
    const char *none = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"none\",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}";
    CHECK(nx_api_parse(NX_API_CHAT, none, strlen(none), &info, &r, &e) == NX_OK);
    CHECK(r.tools == NULL && r.prompt_text && !strstr(r.prompt_text, "<tools>"));
    nx_api_request_free(&r);
    /* a tool_use variant (tokenizer.chat_template.tool_use) serves the requests with tools */
    nx_chat_template *tu = NULL;
    const char *tus = "TOOLS {{ tools | map(attribute='function.name') | join(',') }}";
    REQUIRE_MSG(nx_chat_template_create(tus, strlen(tus), "", "", &tu, &err) == NX_OK, "%s", err.msg);
    info.chat_template_tools = tu;
    CHECK(nx_api_parse(NX_API_CHAT, body, strlen(body), &info, &r, &e) == NX_OK);
    CHECK_STR(r.prompt_text, "TOOLS get_weather");
    nx_api_request_free(&r);
    CHECK(nx_api_parse(NX_API_CHAT, none, strlen(none), &info, &r, &e) == NX_OK);
    CHECK(r.prompt_text && strncmp(r.prompt_text, "TOOLS", 5) != 0);
    nx_api_request_free(&r);
    info.chat_template_tools = NULL;
    nx_chat_template_free(tu);
    /* reasoning_format: deepseek / auto / none, else 400 naming the field */
    const char *rfs[] = { "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"reasoning_format\":\"none\"}",
                          "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"reasoning_format\":\"auto\"}",
                          "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"reasoning_format\":\"fancy\"}" };
    CHECK(nx_api_parse(NX_API_CHAT, rfs[0], strlen(rfs[0]), &info, &r, &e) == NX_OK && r.reasoning_format == NX_REASONING_NONE);
    nx_api_request_free(&r);
    CHECK(nx_api_parse(NX_API_CHAT, rfs[1], strlen(rfs[1]), &info, &r, &e) == NX_OK && r.reasoning_format == NX_REASONING_DEEPSEEK);
    nx_api_request_free(&r);
    CHECK(nx_api_parse(NX_API_CHAT, rfs[2], strlen(rfs[2]), &info, &r, &e) != NX_OK && e.http == 400 && !strcmp(e.param, "reasoning_format"));
    nx_api_request_free(&r);
    const char *badc = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"sometimes\"}";
    CHECK(nx_api_parse(NX_API_CHAT, badc, strlen(badc), &info, &r, &e) != NX_OK);
    nx_api_request_free(&r);
    nx_chat_template_free(ct);
}

int main(void) {
    RUN(test_server_tools);
    RUN(test_tool_segments);
    RUN(test_tool_parse);
    RUN(test_forced_calls);
    RUN(test_chat_adapter);
    RUN(test_language);
    RUN(test_errors);
    RUN(test_limits);
    RUN(test_real_templates);
    return test_summary();
}
