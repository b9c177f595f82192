/* test_kv.c — the KV / recurrent state module on its own: row storage (F32 exact, F16 rounded),
 * lengths, tail removal, refused holes, snapshot restore, prefix copies, bad arguments, rows of
 * several heads stored as head-major planes. */
#include "test.h"
#include "core/fp16.h"
#include "kv.h"
#include "quant/quant.h"

static nx_kv *make(int n_seq, int n_ctx, nx_type tk, nx_type tv, int n_rec) {
    int64_t kw[2] = {8, 4}, vw[2] = {8, 6}, conv[2] = {6, 3}, ssm[2] = {16, 5};
    nx_kv_config c = {.n_seq = n_seq, .n_ctx = n_ctx, .type_k = tk, .type_v = tv, .n_attn = 2, .k_width = kw,
                      .v_width = vw, .n_rec = n_rec, .conv_size = conv, .ssm_size = ssm};
    nx_kv *kv = NULL;
    nx_error e = {0};
    if (nx_kv_create(&c, &kv, &e) != NX_OK) fprintf(stderr, "  %s\n", e.msg);
    return kv;
}

static void test_rows(void) {
    for (int f16 = 0; f16 < 2; f16++) {
        nx_kv *kv = make(2, 16, f16 ? NX_TYPE_F16 : NX_TYPE_F32, NX_TYPE_F16, 0);
        CHECK(kv != NULL);
        if (!kv) continue;
        float row[8], tmp[8];
        for (int i = 0; i < 8; i++) row[i] = 0.1f * (float)i + 1.0f / 3.0f;
        nx_kv_put_k(kv, 1, 0, 5, row);
        nx_kv_put_v(kv, 1, 1, 15, row);
        const float *k = nx_kv_get_k(kv, 1, 0, 5, tmp);
        for (int i = 0; i < 8; i++) CHECK(k[i] == (f16 ? nx_half_to_f32(nx_f32_to_half(row[i])) : row[i]));
        const float *v = nx_kv_get_v(kv, 1, 1, 15, tmp);
        for (int i = 0; i < 6; i++) CHECK(v[i] == nx_half_to_f32(nx_f32_to_half(row[i])));
        /* other sequences / positions untouched (zeroed at creation) */
        k = nx_kv_get_k(kv, 0, 0, 5, tmp);
        for (int i = 0; i < 8; i++) CHECK(k[i] == 0.0f);
        const uint8_t *base = nx_kv_k_base(kv, 1, 0);
        CHECK(base + 5 * 8 * (f16 ? 2 : 4) == (const uint8_t *)nx_kv_get_k(kv, 1, 0, 5, tmp) || f16);
        CHECK(nx_kv_bytes(kv) > 0);
        nx_kv_free(kv);
    }
}

static void fill_rec(nx_kv *kv, int seq, int slot, float v) {
    for (int l = 0; l < 2; l++) {
        float *c = nx_kv_conv(kv, seq, l, slot), *s = nx_kv_ssm(kv, seq, l, slot);
        for (int i = 0; i < (l ? 3 : 6); i++) c[i] = v + (float)l;
        for (int i = 0; i < (l ? 5 : 16); i++) s[i] = v + 10.0f + (float)l;
    }
}

static bool rec_is(nx_kv *kv, int seq, float v) {
    bool ok = true;
    for (int l = 0; l < 2; l++) {
        float *c = nx_kv_conv(kv, seq, l, -1), *s = nx_kv_ssm(kv, seq, l, -1);
        for (int i = 0; i < (l ? 3 : 6); i++) ok = ok && c[i] == v + (float)l;
        for (int i = 0; i < (l ? 5 : 16); i++) ok = ok && s[i] == v + 10.0f + (float)l;
    }
    return ok;
}

static void test_seq_rm_and_snapshots(void) {
    nx_kv *kv = make(2, 32, NX_TYPE_F32, NX_TYPE_F32, 2);
    if (!kv) { CHECK(0); return; }
    nx_error e = {0};
    /* a "batch" of 4 tokens at positions 10..13 with snapshots: slots 0..2 + live */
    nx_kv_seq_set_len(kv, 0, 10);
    CHECK(nx_kv_snap_reserve(kv, 0, 3, &e) == NX_OK);
    nx_kv_snap_set(kv, 0, 10, 4);
    for (int t = 0; t < 3; t++) fill_rec(kv, 0, t, 100.0f + (float)t);
    fill_rec(kv, 0, -1, 103.0f);
    nx_kv_seq_set_len(kv, 0, 14);
    CHECK_EQ_INT(nx_kv_seq_rm(kv, 0, 14, -1, &e), NX_OK);         /* nothing removed */
    CHECK(rec_is(kv, 0, 103.0f));
    CHECK_EQ_INT(nx_kv_seq_rm(kv, 0, 5, 8, &e), NX_ERR_UNSUPPORTED);   /* hole */
    CHECK_EQ_INT(nx_kv_seq_rm(kv, 0, 10, -1, &e), NX_ERR_UNSUPPORTED); /* before the batch: no state */
    CHECK(strstr(e.msg, "11..14") != NULL);
    CHECK_EQ_INT(nx_kv_seq_len(kv, 0), 14);
    CHECK(rec_is(kv, 0, 103.0f));
    CHECK_EQ_INT(nx_kv_seq_rm(kv, 0, 13, -1, &e), NX_OK);         /* keep 3 tokens: slot 2 */
    CHECK_EQ_INT(nx_kv_seq_len(kv, 0), 13);
    CHECK(rec_is(kv, 0, 102.0f));
    CHECK_EQ_INT(nx_kv_seq_rm(kv, 0, 11, 100, &e), NX_OK);        /* then 1 token: slot 0 */
    CHECK(rec_is(kv, 0, 100.0f));
    CHECK_EQ_INT(nx_kv_seq_rm(kv, 0, 12, -1, &e), NX_OK);         /* beyond the end: no-op */
    CHECK_EQ_INT(nx_kv_seq_len(kv, 0), 11);
    /* copies: prefix with a live state; partial prefix without a snapshot is refused */
    CHECK_EQ_INT(nx_kv_seq_cp(kv, 0, 1, -1, -1, &e), NX_OK);
    CHECK_EQ_INT(nx_kv_seq_len(kv, 1), 11);
    CHECK(rec_is(kv, 1, 100.0f));
    CHECK_EQ_INT(nx_kv_seq_cp(kv, 0, 1, 0, 5, &e), NX_ERR_UNSUPPORTED);
    CHECK_EQ_INT(nx_kv_seq_cp(kv, 0, 1, 3, -1, &e), NX_ERR_UNSUPPORTED);
    CHECK_EQ_INT(nx_kv_seq_len(kv, 1), 11);
    /* full removal resets: zero state */
    CHECK_EQ_INT(nx_kv_seq_rm(kv, 1, -1, -1, &e), NX_OK);
    CHECK_EQ_INT(nx_kv_seq_len(kv, 1), 0);
    CHECK(nx_kv_conv(kv, 1, 0, -1)[0] == 0.0f && nx_kv_ssm(kv, 1, 1, -1)[4] == 0.0f);
    /* bad sequence ids */
    CHECK_EQ_INT(nx_kv_seq_rm(kv, 2, 0, -1, &e), NX_ERR_INVALID_ARG);
    CHECK_EQ_INT(nx_kv_seq_cp(kv, 0, -1, 0, -1, &e), NX_ERR_INVALID_ARG);
    nx_kv_free(kv);
}

static void test_attention_only_and_copies(void) {
    nx_kv *kv = make(3, 8, NX_TYPE_F16, NX_TYPE_F32, 0);
    if (!kv) { CHECK(0); return; }
    nx_error e = {0};
    float row[8] = {1, 2, 3, 4, 5, 6, 7, 8}, tmp[8];
    for (int p = 0; p < 6; p++) {
        row[0] = (float)p;
        nx_kv_put_k(kv, 0, 1, p, row);
        nx_kv_put_v(kv, 0, 1, p, row);
    }
    nx_kv_seq_set_len(kv, 0, 6);
    CHECK_EQ_INT(nx_kv_seq_rm(kv, 0, 4, -1, &e), NX_OK);   /* tails are free without recurrent layers */
    CHECK_EQ_INT(nx_kv_seq_len(kv, 0), 4);
    CHECK_EQ_INT(nx_kv_seq_cp(kv, 0, 2, 0, 3, &e), NX_OK);
    CHECK_EQ_INT(nx_kv_seq_len(kv, 2), 3);
    CHECK(nx_kv_get_k(kv, 2, 1, 2, tmp)[0] == 2.0f && nx_kv_get_v(kv, 2, 1, 2, tmp)[3] == 4.0f);
    CHECK(nx_kv_get_k(kv, 2, 1, 3, tmp)[0] == 0.0f);   /* beyond the copied prefix */
    nx_kv_free(kv);
}

/* Q8_0 / Q4_0 / BF16 rows: the stored bytes are those of the reference quantizers (llama.cpp's
 * block formats), get dequantizes them, row strides / offsets are the block sizes, ring layers
 * and prefix copies keep whole rows, memory per position counts the block bytes. */
static void test_block_types(void) {
    const nx_type types[] = {NX_TYPE_Q8_0, NX_TYPE_Q4_0, NX_TYPE_BF16};
    const size_t want_rb[] = {2 * 34, 2 * 18, 64 * 2};   /* 64-value rows */
    for (int ti = 0; ti < 3; ti++) {
        const nx_type t = types[ti];
        int64_t kw[2] = {64, 64}, vw[2] = {64, 32};
        int ring[2] = {0, 6}, win[2] = {0, 4};
        nx_kv_config c = {.n_seq = 2, .n_ctx = 16, .type_k = t, .type_v = t, .n_attn = 2, .k_width = kw,
                          .v_width = vw, .ring_cells = ring, .window = win};
        nx_kv *kv = NULL;
        nx_error e = {0};
        CHECK(nx_kv_create(&c, &kv, &e) == NX_OK);
        if (!kv) continue;
        CHECK(nx_kv_row_bytes(kv, 0, false) == want_rb[ti]);
        CHECK(nx_kv_row_bytes(kv, 1, true) == want_rb[ti] / 2);
        CHECK(nx_kv_type_bytes(t, 32) == want_rb[ti] / 2);
        CHECK(nx_kv_bytes_per_pos(kv) == 2 * want_rb[ti]);   /* layer 0 only: layer 1 is a ring */
        CHECK(nx_kv_bytes_fixed(kv) == 6 * (want_rb[ti] + want_rb[ti] / 2) + 6 * sizeof(int32_t));
        CHECK(nx_kv_bytes(kv) == 2 * (16 * nx_kv_bytes_per_pos(kv) + nx_kv_bytes_fixed(kv)));
        float row[64], tmp[64], want[64];
        uint8_t ref[64 * 4];
        for (int p = 0; p < 12; p++) {
            for (int i = 0; i < 64; i++) row[i] = sinf(0.37f * (float)(i + 7 * p)) * (1.0f + (float)(i % 5));
            nx_kv_put_k(kv, 1, 0, p, row);
            nx_kv_put_v(kv, 1, 1, p, row);   /* ring of 6 cells */
            CHECK(nx_quantize_row(t, row, ref, 64) == want_rb[ti]);
            const uint8_t *kb = (const uint8_t *)nx_kv_k_base(kv, 1, 0) + (size_t)p * nx_kv_row_bytes(kv, 0, false);
            CHECK(!memcmp(kb, ref, want_rb[ti]));
            CHECK(nx_dequantize_row(t, ref, want, 64));
            const float *k = nx_kv_get_k(kv, 1, 0, p, tmp);
            CHECK(!memcmp(k, want, sizeof want));
            /* the second half of a row is a head slice at a block offset */
            CHECK(!memcmp(nx_kv_to_f32(t, kb + nx_kv_type_bytes(t, 32), 32, tmp), want + 32, 32 * sizeof(float)));
            const uint8_t *vb = (const uint8_t *)nx_kv_v_base(kv, 1, 1) + (size_t)(p % 6) * nx_kv_row_bytes(kv, 1, true);
            CHECK(!memcmp(vb, ref, want_rb[ti] / 2));   /* 32 values: the first block(s) of the same row */
        }
        nx_kv_seq_set_len(kv, 1, 12);
        CHECK(nx_kv_seq_cp(kv, 1, 0, -1, 10, &e) == NX_OK);
        for (int p = 0; p < 10; p++) {
            float a[64], b[64];
            memcpy(a, nx_kv_get_k(kv, 0, 0, p, tmp), sizeof a);
            memcpy(b, nx_kv_get_k(kv, 1, 0, p, tmp), sizeof b);
            CHECK(!memcmp(a, b, sizeof a));
        }
        /* NaN / Inf never crash the quantizers (codes unspecified) */
        row[3] = NAN;
        row[40] = INFINITY;
        nx_kv_put_k(kv, 0, 0, 15, row);
        (void)nx_kv_get_k(kv, 0, 0, 15, tmp);
        nx_kv_free(kv);
    }
    /* widths that are not whole blocks: a clear error at creation */
    int64_t kw[2] = {48, 64}, vw[2] = {64, 64};
    nx_kv_config c = {.n_seq = 1, .n_ctx = 8, .type_k = NX_TYPE_Q8_0, .type_v = NX_TYPE_F16, .n_attn = 2,
                      .k_width = kw, .v_width = vw};
    nx_kv *kv = NULL;
    nx_error e = {0};
    CHECK(nx_kv_create(&c, &kv, &e) == NX_ERR_UNSUPPORTED && kv == NULL);
    CHECK(strstr(e.msg, "48") && strstr(e.msg, "q8_0"));
    c.type_k = NX_TYPE_Q4_1;
    CHECK(nx_kv_create(&c, &kv, &e) == NX_ERR_UNSUPPORTED && strstr(e.msg, "q4_0"));
    CHECK(!nx_kv_type_ok(NX_TYPE_Q4_1) && nx_kv_type_ok(NX_TYPE_Q4_0) && nx_kv_type_block(NX_TYPE_Q8_0) == 32);
}

/* Rows of 3 heads as planes: a head's position p at nx_kv_head + slot * (row bytes / heads),
 * the quantized bytes those of the head alone, get gathers the row, seq_cp copies each plane. */
static void test_head_planes(void) {
    const nx_type types[3] = {NX_TYPE_F32, NX_TYPE_F16, NX_TYPE_Q8_0};
    for (int ti = 0; ti < 3; ti++) {
        const nx_type t = types[ti];
        int64_t kw[2] = {96, 96}, vw[2] = {96, 96};
        int heads[2] = {3, 3}, ring[2] = {0, 5}, win[2] = {0, 4};
        nx_kv_config c = {.n_seq = 2, .n_ctx = 12, .type_k = t, .type_v = t, .n_attn = 2, .k_width = kw,
                          .v_width = vw, .ring_cells = ring, .window = win, .heads = heads};
        nx_kv *kv = NULL;
        nx_error e = {0};
        CHECK(nx_kv_create(&c, &kv, &e) == NX_OK);
        if (!kv) continue;
        CHECK(nx_kv_heads(kv, 0) == 3 && nx_kv_heads(kv, 1) == 3);
        const size_t hb = nx_kv_row_bytes(kv, 0, false) / 3;
        CHECK(hb == nx_row_size(t, 32));
        float row[96], tmp[96], want[32];
        uint8_t q[256];
        for (int p = 0; p < 8; p++) {
            for (int i = 0; i < 96; i++) row[i] = 0.01f * (float)(i * 7 % 53) - 0.2f + (float)p;
            for (int l = 0; l < 2; l++) {
                nx_kv_put_k(kv, 0, l, p, row);
                nx_kv_put_v(kv, 0, l, p, row);
            }
        }
        nx_kv_seq_set_len(kv, 0, 8);
        CHECK_EQ_INT(nx_kv_seq_cp(kv, 0, 1, -1, -1, &e), NX_OK);
        for (int s = 0; s < 2; s++)
            for (int l = 0; l < 2; l++)
                for (int p = l ? 3 : 0; p < 8; p++) {
                    for (int i = 0; i < 96; i++) row[i] = 0.01f * (float)(i * 7 % 53) - 0.2f + (float)p;
                    const int slot = nx_kv_slot(kv, l, p);
                    for (int h = 0; h < 3; h++) {
                        nx_quantize_row(t, row + 32 * h, q, 32);
                        const uint8_t *kr = (const uint8_t *)nx_kv_head(kv, s, l, h, false) + (size_t)slot * hb;
                        const uint8_t *vr = (const uint8_t *)nx_kv_head(kv, s, l, h, true) + (size_t)slot * hb;
                        CHECK_MSG(!memcmp(kr, q, hb) && !memcmp(vr, q, hb), "type %d seq %d layer %d pos %d head %d", t,
                                  s, l, p, h);
                    }
                    const float *k = nx_kv_get_k(kv, s, l, p, tmp);
                    for (int h = 0; h < 3; h++) {
                        nx_quantize_row(t, row + 32 * h, q, 32);
                        nx_dequantize_row(t, q, want, 32);
                        CHECK(!memcmp(k + 32 * h, want, sizeof want));
                    }
                }
        nx_kv_free(kv);
    }
    /* heads must split the row into whole blocks */
    int64_t kw[1] = {96};
    int heads[1] = {2};
    nx_kv_config c = {.n_seq = 1, .n_ctx = 4, .type_k = NX_TYPE_Q8_0, .type_v = NX_TYPE_Q8_0, .n_attn = 1,
                      .k_width = kw, .v_width = kw, .heads = heads};
    nx_kv *kv = NULL;
    nx_error e = {0};
    CHECK(nx_kv_create(&c, &kv, &e) != NX_OK && kv == NULL);
}

static void test_bad_config(void) {
    nx_kv *kv = NULL;
    nx_error e = {0};
    int64_t w[1] = {8};
    nx_kv_config c = {.n_seq = 1, .n_ctx = 0, .type_k = NX_TYPE_F32, .type_v = NX_TYPE_F32, .n_attn = 1, .k_width = w,
                      .v_width = w};
    CHECK_EQ_INT(nx_kv_create(&c, &kv, &e), NX_ERR_INVALID_ARG);
    c.n_ctx = 4;
    c.type_k = NX_TYPE_Q8_0;
    CHECK_EQ_INT(nx_kv_create(&c, &kv, &e), NX_ERR_UNSUPPORTED);
    CHECK(strstr(e.msg, "q8_0") != NULL);
    c.type_k = NX_TYPE_F32;
    w[0] = 0;
    CHECK_EQ_INT(nx_kv_create(&c, &kv, &e), NX_ERR_INVALID_ARG);
    CHECK(kv == NULL);
}

int main(void) {
    RUN(test_rows);
    RUN(test_seq_rm_and_snapshots);
    RUN(test_attention_only_and_copies);
    RUN(test_block_types);
    RUN(test_head_planes);
    RUN(test_bad_config);
    return test_summary();
}
