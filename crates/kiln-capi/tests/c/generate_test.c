/* kiln_generate from C: greedy generation with an exported LLM must give ExecuTorch's tokens;
 * a callback that asks to stop ends it after that token; bad arguments are errors. Run by
 * crates/kiln-capi/tests/c_programs.rs.
 *
 *   generate_test LLM.pte PROMPT EXPECTED NOT_AN_LLM.pte
 * PROMPT and EXPECTED are comma-separated token ids (EXPECTED: ExecuTorch's greedy tokens).
 * Exits 0 when every check holds, 1 otherwise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"

#define MAX_TOKENS 256

typedef struct {
    int64_t tokens[MAX_TOKENS];
    size_t count;
    size_t stop_after; /* 0: never */
} Seen;

static int32_t on_token(int64_t token, void *user) {
    Seen *seen = user;
    if (seen->count < MAX_TOKENS) {
        seen->tokens[seen->count] = token;
    }
    seen->count++;
    return seen->stop_after != 0 && seen->count >= seen->stop_after;
}

static size_t parse(const char *text, int64_t *out) {
    size_t n = 0;
    const char *p = text;
    while (*p && n < MAX_TOKENS) {
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p) {
            break;
        }
        out[n++] = v;
        p = *end == ',' ? end + 1 : end;
    }
    return n;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: generate_test LLM.pte PROMPT EXPECTED NOT_AN_LLM.pte\n");
        return 2;
    }
    int64_t prompt[MAX_TOKENS], expected[MAX_TOKENS];
    size_t np = parse(argv[2], prompt), ne = parse(argv[3], expected);
    int failures = 0;
    KilnProgram *llm = NULL;
    if (kiln_program_load(argv[1], NULL, &llm) != KILN_OK) {
        fprintf(stderr, "generate_test: %s\n", kiln_last_error());
        return 1;
    }
    Seen seen = {{0}, 0, 0};
    size_t generated = 0;
    if (kiln_generate(llm, prompt, np, ne, on_token, &seen, &generated) != KILN_OK) {
        fprintf(stderr, "generate_test: %s\n", kiln_last_error());
        failures++;
    }
    if (generated != ne || seen.count != ne || memcmp(seen.tokens, expected, ne * sizeof(int64_t)) != 0) {
        fprintf(stderr, "generate_test: %zu tokens, not ExecuTorch's %zu:", seen.count, ne);
        for (size_t i = 0; i < seen.count && i < MAX_TOKENS; i++) {
            fprintf(stderr, " %lld", (long long)seen.tokens[i]);
        }
        fprintf(stderr, "\n");
        failures++;
    }
    /* Stopped by the callback after 3 tokens; again with no callback and no count. */
    Seen three = {{0}, 0, 3};
    if (kiln_generate(llm, prompt, np, ne, on_token, &three, &generated) != KILN_OK ||
        generated != 3 || memcmp(three.tokens, expected, 3 * sizeof(int64_t)) != 0) {
        fprintf(stderr, "generate_test: the callback did not stop it after 3 (%zu)\n", generated);
        failures++;
    }
    if (kiln_generate(llm, prompt, np, 2, NULL, NULL, NULL) != KILN_OK) {
        failures++;
    }
    /* Bad arguments, and a program that is not an LLM. */
    if (kiln_generate(llm, NULL, np, 2, NULL, NULL, NULL) != KILN_ERROR_INVALID_ARGUMENT ||
        kiln_generate(llm, prompt, 0, 2, NULL, NULL, NULL) != KILN_ERROR_INVALID_ARGUMENT ||
        kiln_generate(NULL, prompt, np, 2, NULL, NULL, NULL) != KILN_ERROR_INVALID_ARGUMENT) {
        fprintf(stderr, "generate_test: a bad argument was not refused\n");
        failures++;
    }
    KilnProgram *cnn = NULL;
    if (kiln_program_load(argv[4], NULL, &cnn) != KILN_OK ||
        kiln_generate(cnn, prompt, np, 2, NULL, NULL, NULL) == KILN_OK ||
        strlen(kiln_last_error()) == 0) {
        fprintf(stderr, "generate_test: a program that is no LLM generated\n");
        failures++;
    }
    kiln_program_free(cnn);
    kiln_program_free(llm);
    if (failures) {
        return 1;
    }
    printf("generate_test: ExecuTorch's %zu tokens\n", ne);
    return 0;
}
