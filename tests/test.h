/*
 * test.h — the tiny test harness every tests/test_*.c uses.
 *
 *   static void test_something(void) { CHECK(x == 1); CHECK_EQ_INT(a, b); }
 *   int main(void) { RUN(test_something); return test_summary(); }
 *
 * A failed CHECK records the failure and continues in the same test. test_summary() prints
 * "N passed, N failed" (the line CI reads) and returns the exit code.
 */
#ifndef NX_TEST_H
#define NX_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int t_passed, t_failed, t_cur_failed;
static const char *t_cur_name;

#define CHECK(cond) do { if (!(cond)) { \
    fprintf(stderr, "  FAIL %s:%d: %s (in %s)\n", __FILE__, __LINE__, #cond, t_cur_name); \
    t_cur_failed++; } } while (0)
#define CHECK_MSG(cond, ...) do { if (!(cond)) { \
    fprintf(stderr, "  FAIL %s:%d: %s (in %s): ", __FILE__, __LINE__, #cond, t_cur_name); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); t_cur_failed++; } } while (0)
#define CHECK_EQ_INT(a, b) do { long long _a = (long long)(a), _b = (long long)(b); if (_a != _b) { \
    fprintf(stderr, "  FAIL %s:%d: %s == %s: %lld != %lld (in %s)\n", __FILE__, __LINE__, #a, #b, _a, _b, t_cur_name); \
    t_cur_failed++; } } while (0)
#define CHECK_NEAR(a, b, tol) do { double _a = (double)(a), _b = (double)(b); if (!(fabs(_a - _b) <= (tol))) { \
    fprintf(stderr, "  FAIL %s:%d: |%s - %s| = |%g - %g| > %g (in %s)\n", __FILE__, __LINE__, #a, #b, _a, _b, (double)(tol), t_cur_name); \
    t_cur_failed++; } } while (0)
#define CHECK_STR(a, b) do { const char *_a = (a), *_b = (b); if (!_a || !_b || strcmp(_a, _b) != 0) { \
    fprintf(stderr, "  FAIL %s:%d: \"%s\" != \"%s\" (in %s)\n", __FILE__, __LINE__, _a ? _a : "(null)", _b ? _b : "(null)", t_cur_name); \
    t_cur_failed++; } } while (0)

#define RUN(fn) do { t_cur_name = #fn; t_cur_failed = 0; fn(); \
    if (t_cur_failed) { t_failed++; fprintf(stderr, "FAIL %s\n", #fn); } \
    else { t_passed++; fprintf(stderr, "ok   %s\n", #fn); } } while (0)

/* A precondition of the current test: a failed check that also ends it. The data the tests read
 * are part of the repository (tests/data, models), so a missing file is a failure, never a skip. */
#define REQUIRE_MSG(cond, ...) do { if (!(cond)) { CHECK_MSG(cond, __VA_ARGS__); return; } } while (0)

/* Mark the current test as skipped-with-reason (counts as passed; prints why). */
#define SKIP(...) do { fprintf(stderr, "  skip (%s): ", t_cur_name); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); return; } while (0)

static inline int test_summary(void) {
    printf("%d passed, %d failed\n", t_passed, t_failed);
    return t_failed ? 1 : 0;
}

#endif
