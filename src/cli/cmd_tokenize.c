/*
 * cmd_tokenize.c — `nextn tokenize`: text -> token ids with a GGUF's tokenizer.
 *
 *   nextn tokenize -m FILE.gguf [--special] [--no-bos] [--pieces] TEXT|-
 *   nextn tokenize -m FILE.gguf [--special] [--no-bos] --json-in FILE     (array of strings)
 *
 * Prints a JSON array of ids (or of {"id","text","piece"} objects with --pieces); with
 * --json-in, a JSON array of id arrays, one line per input text.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/cli.h"
#include "core/io.h"
#include "tokenizer.h"

#define MAX_INPUT ((size_t)1 << 30)

static void tok_usage(FILE *f) {
    fprintf(f, "usage: nextn tokenize -m FILE.gguf [--special] [--no-bos] [--pieces] TEXT|-\n"
               "       nextn tokenize -m FILE.gguf [--special] [--no-bos] --json-in FILE\n"
               "  --special   parse special-token text (e.g. <|im_start|>) as special tokens\n"
               "              (what Hugging Face tokenizers do by default)\n"
               "  --no-bos    do not add the BOS/EOS tokens the vocabulary asks for\n"
               "  --pieces    print each token's text and decoded bytes too\n"
               "  --json-in F read a JSON array of strings from F ('-' = stdin) and print a\n"
               "              JSON array of id arrays\n");
}

static void print_ids(const nx_tokenizer *t, const nx_token_vec *v, bool pieces) {
    putchar('[');
    for (size_t i = 0; i < v->n; i++) {
        if (i) fputs(pieces ? ",\n " : ",", stdout);
        if (!pieces) { printf("%d", v->ids[i]); continue; }
        size_t tl, pl;
        const char *text = nx_token_text(t, v->ids[i], &tl);
        const char *piece = nx_token_piece(t, v->ids[i], true, &pl);
        printf("{\"id\": %d, \"text\": ", v->ids[i]);
        nx_json_write_string(stdout, text ? text : "", tl);
        fputs(", \"piece\": ", stdout);
        nx_json_write_string(stdout, piece, pl);
        putchar('}');
    }
    puts("]");
}

int nx_cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *json_in = NULL, *text_arg = NULL;
    bool special = false, add_special = true, pieces = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { tok_usage(stdout); return 0; }
        else if (!strcmp(a, "--special")) special = true;
        else if (!strcmp(a, "--no-bos") || !strcmp(a, "--no-add-special")) add_special = false;
        else if (!strcmp(a, "--pieces")) pieces = true;
        else if (!strcmp(a, "-m") || !strcmp(a, "--model") || !strcmp(a, "--json-in")) {
            if (i + 1 >= argc) { fprintf(stderr, "nextn tokenize: %s needs a value\n", a); return 2; }
            if (!strcmp(a, "--json-in")) json_in = argv[++i];
            else model = argv[++i];
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "nextn tokenize: unknown option '%s'\n", a);
            tok_usage(stderr);
            return 2;
        } else if (!text_arg) {
            text_arg = a;
        } else {
            fprintf(stderr, "nextn tokenize: give the text as one argument (quote it) or '-' for stdin\n");
            return 2;
        }
    }
    if (!model || (!text_arg && !json_in) || (text_arg && json_in)) { tok_usage(stderr); return 2; }

    nx_error err = {0};
    nx_tokenizer *t = NULL;
    if (nx_tokenizer_load(model, &t, &err) != NX_OK) {
        fprintf(stderr, "nextn tokenize: %s\n", err.msg);
        return 1;
    }
    unsigned flags = (special ? NX_TOK_PARSE_SPECIAL : 0) | (add_special ? NX_TOK_ADD_SPECIAL : 0);
    int rc = 0;
    char *buf = NULL;
    size_t len = 0;
    nx_token_vec v = {0};
    nx_str_list list = {0};
    if (!json_in) {
        if (!strcmp(text_arg, "-")) {
            if (nx_read_file("-", MAX_INPUT, &buf, &len, &err) != NX_OK) goto fail;
        } else {
            len = strlen(text_arg);
        }
        if (nx_tokenize(t, buf ? buf : text_arg, len, flags, &v, &err) != NX_OK) goto fail;
        print_ids(t, &v, pieces);
    } else {
        if (nx_read_file(json_in, MAX_INPUT, &buf, &len, &err) != NX_OK) goto fail;
        if (nx_json_string_array(buf, len, &list, &err) != NX_OK) { nx_error_prefix(&err, "%s", json_in); goto fail; }
        fputs("[\n", stdout);
        for (size_t i = 0; i < list.n; i++) {
            v.n = 0;
            if (nx_tokenize(t, list.s[i], list.len[i], flags, &v, &err) != NX_OK) { nx_error_prefix(&err, "text %zu", i); goto fail; }
            putchar('[');
            for (size_t k = 0; k < v.n; k++) printf(k ? ",%d" : "%d", v.ids[k]);
            fputs(i + 1 < list.n ? "],\n" : "]\n", stdout);
        }
        fputs("]\n", stdout);
    }
    goto done;
fail:
    fprintf(stderr, "nextn tokenize: %s\n", err.msg);
    rc = 1;
done:
    if (fflush(stdout) != 0) rc = 1;
    nx_str_list_free(&list);
    nx_token_vec_free(&v);
    free(buf);
    nx_tokenizer_free(t);
    return rc;
}
