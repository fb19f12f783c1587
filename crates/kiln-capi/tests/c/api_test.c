/* Every entry point of kiln.h, its error paths included: a missing file, a hostile file, null
 * pointers, indices out of range, a wrong dtype and a wrong shape, an input not set; an input
 * bound to the caller's memory read in place (changed between two executes, the second reads
 * the change) and, unaligned, copied; with KILN_INSPECT (the full library), kiln_inspect and
 * kiln_verify on a program, a missing file and a truncated one. Run by
 * crates/kiln-capi/tests/c_programs.rs (also under valgrind, on the AVX2 and the portable
 * kernels).
 *
 *   api_test FIXTURES_DIR    (tests/fixtures/pte: tiny_cnn.pte, its input and ExecuTorch's
 *                             output .npy, xnnpack_external.pte/.ptd)
 * Exits 0 when every check holds, 1 naming the first that does not. */
#define _POSIX_C_SOURCE 200809L /* mkstemp, fdopen */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "npy.h"

static int failures = 0;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", __FILE__,  \
                    __LINE__, #cond, kiln_last_error());                             \
            failures++;                                                              \
        }                                                                            \
    } while (0)

static char *join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static unsigned char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)n);
    *len = fread(buf, 1, (size_t)n, f);
    fclose(f);
    return buf;
}

/* Runs forward of `program` on `in` and checks the output against `want` (within 1e-4). */
static void run_and_compare(KilnProgram *program, const npy_f32 *in, const npy_f32 *want) {
    KilnMethod *m = NULL;
    CHECK(kiln_method_new(program, "forward", &m) == KILN_OK);
    if (!m) {
        return;
    }
    size_t n_in = 0, n_out = 0;
    CHECK(kiln_method_input_count(m, &n_in) == KILN_OK && n_in == 1);
    CHECK(kiln_method_output_count(m, &n_out) == KILN_OK && n_out == 1);
    KilnValueInfo info;
    CHECK(kiln_method_input_info(m, 0, &info) == KILN_OK);
    CHECK(info.kind == KILN_VALUE_TENSOR && info.dtype == 6 && info.rank == in->rank);
    for (uint32_t d = 0; d < info.rank && d < in->rank; d++) {
        CHECK(info.sizes[d] == in->sizes[d]);
    }
    CHECK(kiln_method_output_info(m, 0, &info) == KILN_OK && info.kind == KILN_VALUE_TENSOR);
    /* Not set yet, not run yet. */
    CHECK(kiln_method_execute(m) == KILN_ERROR_INPUT);
    CHECK(strstr(kiln_last_error(), "input 0 is not set") != NULL);
    KilnTensor out;
    CHECK(kiln_method_output(m, 0, &out) == KILN_ERROR_INVALID_ARGUMENT);
    /* The right input twice: the same output (the state is reusable). */
    for (int run = 0; run < 2; run++) {
        CHECK(kiln_method_set_input(m, 0, 6, in->sizes, in->rank, in->data,
                                    in->count * sizeof(float)) == KILN_OK);
        CHECK(kiln_method_execute(m) == KILN_OK);
        CHECK(kiln_method_output(m, 0, &out) == KILN_OK);
        CHECK(out.dtype == 6 && out.nbytes == want->count * sizeof(float));
        if (out.nbytes == want->count * sizeof(float)) {
            const float *got = out.data;
            for (size_t i = 0; i < want->count; i++) {
                CHECK(fabsf(got[i] - want->data[i]) <= 1e-4f);
            }
        }
    }
    /* Wrong dtype (int8 bytes for a float input), wrong shape, wrong byte count. */
    CHECK(kiln_method_set_input(m, 0, 1, in->sizes, in->rank, in->data, in->count) == KILN_OK);
    CHECK(kiln_method_execute(m) == KILN_ERROR_INPUT);
    int64_t wrong[8];
    memcpy(wrong, in->sizes, sizeof(wrong));
    wrong[in->rank - 1] += 1;
    size_t wrong_bytes = in->count / (size_t)in->sizes[in->rank - 1] * (size_t)wrong[in->rank - 1] * 4;
    float *bigger = calloc(wrong_bytes, 1);
    CHECK(kiln_method_set_input(m, 0, 6, wrong, in->rank, bigger, wrong_bytes) == KILN_OK);
    CHECK(kiln_method_execute(m) == KILN_ERROR_INPUT);
    free(bigger);
    CHECK(kiln_method_set_input(m, 0, 6, in->sizes, in->rank, in->data, 3) == KILN_ERROR_INPUT);
    /* Arguments out of range or null. */
    CHECK(kiln_method_set_input(m, 5, 6, in->sizes, in->rank, in->data, 4) == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(kiln_method_set_input(m, 0, 99, in->sizes, in->rank, in->data, 4) == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(kiln_method_set_input(m, 0, 6, NULL, in->rank, in->data, 4) == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(kiln_method_set_input(m, 0, 6, in->sizes, 9, in->data, 4) == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(kiln_method_set_input(m, 0, 6, in->sizes, in->rank, NULL, in->count * 4) == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(kiln_method_set_input_int(m, 7, 1) == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(kiln_method_set_input_int(NULL, 0, 1) == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(kiln_method_input_info(m, 3, &info) == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(kiln_method_output_info(m, 3, &info) == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(kiln_method_input_info(m, 0, NULL) == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(kiln_method_input_count(NULL, &n_in) == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(kiln_method_output_count(m, NULL) == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(kiln_method_output(m, 0, NULL) == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(kiln_method_execute(NULL) == KILN_ERROR_INVALID_ARGUMENT);
    kiln_method_free(m);
    kiln_method_free(NULL);
}

/* Binds the input to a buffer of the caller's: the method reads it in place, and a change of
 * the buffer between two executes, without binding again, is what the second reads. An
 * unaligned binding is copied at each execute and gives the same output. */
static void bind_and_change(KilnProgram *program, const npy_f32 *in, const npy_f32 *want) {
    KilnMethod *m = NULL;
    CHECK(kiln_method_new(program, "forward", &m) == KILN_OK);
    if (!m) {
        return;
    }
    size_t nbytes = in->count * sizeof(float);
    float *buf = aligned_alloc(64, (nbytes + 63) / 64 * 64);
    memcpy(buf, in->data, nbytes);
    unsigned char in_place = 7;
    CHECK(kiln_method_input_in_place(m, 0, &in_place) == KILN_OK && in_place == 0);
    CHECK(kiln_method_bind_input(m, 0, 6, in->sizes, in->rank, buf, nbytes) == KILN_OK);
    KilnTensor out;
    CHECK(kiln_method_execute(m) == KILN_OK && kiln_method_output(m, 0, &out) == KILN_OK);
    CHECK(kiln_method_input_in_place(m, 0, &in_place) == KILN_OK && in_place == 1);
    const float *got = out.data;
    for (size_t i = 0; i < want->count && out.nbytes == want->count * sizeof(float); i++) {
        CHECK(fabsf(got[i] - want->data[i]) <= 1e-4f);
    }
    /* The caller's buffer changed, not bound again. */
    memset(buf, 0, nbytes);
    CHECK(kiln_method_execute(m) == KILN_OK && kiln_method_output(m, 0, &out) == KILN_OK);
    float *from_zeros = malloc(out.nbytes);
    memcpy(from_zeros, out.data, out.nbytes);
    size_t differ = 0;
    for (size_t i = 0; i < want->count && out.nbytes == want->count * sizeof(float); i++) {
        differ += fabsf(from_zeros[i] - want->data[i]) > 1e-3f;
    }
    CHECK(differ > 0);
    /* The same zeros copied by set_input give the same output. */
    CHECK(kiln_method_set_input(m, 0, 6, in->sizes, in->rank, buf, nbytes) == KILN_OK);
    CHECK(kiln_method_execute(m) == KILN_OK && kiln_method_output(m, 0, &out) == KILN_OK);
    CHECK(out.nbytes == want->count * sizeof(float) && memcmp(out.data, from_zeros, out.nbytes) == 0);
    /* Unaligned for float32: copied at each execute, the same output as aligned. */
    unsigned char *odd = malloc(nbytes + 1);
    memcpy(odd + 1, in->data, nbytes);
    CHECK(kiln_method_bind_input(m, 0, 6, in->sizes, in->rank, odd + 1, nbytes) == KILN_OK);
    CHECK(kiln_method_execute(m) == KILN_OK && kiln_method_output(m, 0, &out) == KILN_OK);
    CHECK(kiln_method_input_in_place(m, 0, &in_place) == KILN_OK && in_place == 0);
    got = out.data;
    for (size_t i = 0; i < want->count && out.nbytes == want->count * sizeof(float); i++) {
        CHECK(fabsf(got[i] - want->data[i]) <= 1e-4f);
    }
    /* Bad bindings. */
    CHECK(kiln_method_bind_input(m, 0, 6, in->sizes, in->rank, buf, 3) == KILN_ERROR_INPUT);
    CHECK(kiln_method_bind_input(m, 0, 6, in->sizes, in->rank, NULL, nbytes) == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(kiln_method_bind_input(m, 4, 6, in->sizes, in->rank, buf, nbytes) == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(kiln_method_bind_input(NULL, 0, 6, in->sizes, in->rank, buf, nbytes) == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(kiln_method_input_in_place(m, 1, &in_place) == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(kiln_method_input_in_place(m, 0, NULL) == KILN_ERROR_INVALID_ARGUMENT);
    /* Scalar setters on a tensor input: accepted, refused at execute. */
    CHECK(kiln_method_set_input_double(m, 0, 1.5) == KILN_OK);
    CHECK(kiln_method_execute(m) == KILN_ERROR_INPUT);
    CHECK(kiln_method_set_input_bool(m, 0, 1) == KILN_OK);
    CHECK(kiln_method_execute(m) == KILN_ERROR_INPUT);
    CHECK(kiln_method_set_input_double(m, 3, 1.5) == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(kiln_method_set_input_bool(NULL, 0, 1) == KILN_ERROR_INVALID_ARGUMENT);
    kiln_method_free(m);
    free(from_zeros);
    free(odd);
    free(buf);
}

#if defined(KILN_INSPECT)
/* The full library's inspection: a summary and a verdict as JSON, a missing file, a truncated
 * one and null arguments. */
static void inspect_files(const char *pte, const char *missing, const unsigned char *bytes, size_t len) {
    char *json = NULL;
    CHECK(kiln_inspect(pte, &json) == KILN_OK && json != NULL);
    CHECK(json && strstr(json, "\"format\":\"pte\"") != NULL && strstr(json, "\"forward\"") != NULL);
    kiln_string_free(json);
    json = NULL;
    CHECK(kiln_verify(pte, 1, &json) == KILN_OK && json && strstr(json, "\"ok\":true") != NULL);
    kiln_string_free(json);
    CHECK(kiln_verify(pte, 0, NULL) == KILN_OK);
    CHECK(kiln_verify(missing, 0, NULL) == KILN_ERROR_IO);
    CHECK(strstr(kiln_last_error(), "no_such_program.pte") != NULL);
    CHECK(kiln_inspect(missing, &json) == KILN_ERROR_IO);
    char truncated[] = "/tmp/kiln-api-test-XXXXXX";
    int fd = mkstemp(truncated);
    CHECK(fd >= 0);
    if (fd >= 0) {
        FILE *f = fdopen(fd, "wb");
        fwrite(bytes, 1, len / 3, f);
        fclose(f);
        json = NULL;
        CHECK(kiln_verify(truncated, 0, &json) == KILN_ERROR_INVALID_PROGRAM);
        CHECK(json && strstr(json, "\"ok\":false") != NULL);
        kiln_string_free(json);
        CHECK(kiln_inspect(truncated, &json) == KILN_ERROR_INVALID_PROGRAM);
        remove(truncated);
    }
    CHECK(kiln_inspect(NULL, &json) == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(kiln_inspect(pte, NULL) == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(kiln_verify(NULL, 0, NULL) == KILN_ERROR_INVALID_ARGUMENT);
    kiln_string_free(NULL);
}
#endif

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: api_test FIXTURES_DIR\n");
        return 2;
    }
    const char *dir = argv[1];
    CHECK(kiln_abi_version() == KILN_ABI_VERSION);
    CHECK(strlen(kiln_version()) > 0);
    CHECK(strcmp(kiln_last_error(), "") == 0);

    char *pte = join(dir, "tiny_cnn.pte");
    char *in_path = join(dir, "tiny_cnn.forward.in0.npy");
    char *out_path = join(dir, "tiny_cnn.forward.out0.npy");
    npy_f32 in, want;
    if (npy_read_f32(in_path, &in) != 0 || npy_read_f32(out_path, &want) != 0) {
        return 1;
    }

    /* From a path, default options. */
    KilnProgram *program = NULL;
    CHECK(kiln_program_load(pte, NULL, &program) == KILN_OK);
    size_t count = 0;
    CHECK(kiln_program_method_count(program, &count) == KILN_OK && count == 1);
    const char *name = NULL;
    CHECK(kiln_program_method_name(program, 0, &name) == KILN_OK && strcmp(name, "forward") == 0);
    CHECK(kiln_program_method_name(program, 1, &name) == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(kiln_last_error(), "method 1 of a program with 1") != NULL);
    CHECK(kiln_program_method_count(NULL, &count) == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(kiln_program_method_name(program, 0, NULL) == KILN_ERROR_INVALID_ARGUMENT);
    KilnMethod *m = NULL;
    CHECK(kiln_method_new(program, "nope", &m) == KILN_ERROR_NOT_FOUND && m == NULL);
    CHECK(strstr(kiln_last_error(), "forward") != NULL);
    CHECK(kiln_method_new(program, NULL, &m) == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(kiln_method_new(NULL, "forward", &m) == KILN_ERROR_INVALID_ARGUMENT);
    run_and_compare(program, &in, &want);
    bind_and_change(program, &in, &want);

    /* A memory limit under the method's prediction. */
    KilnLoadOptions tight = {1, 4096, NULL};
    KilnProgram *small = NULL;
    CHECK(kiln_program_load(pte, &tight, &small) == KILN_OK);
    CHECK(kiln_method_new(small, "forward", &m) == KILN_ERROR_MEMORY);
    CHECK(strstr(kiln_last_error(), "predicted peak") != NULL);
    kiln_program_free(small);

    /* From the caller's bytes, one thread; the bytes freed right after. */
    size_t len = 0;
    unsigned char *bytes = read_file(pte, &len);
    KilnLoadOptions one = {1, 0, NULL};
    KilnProgram *from_bytes = NULL;
    CHECK(kiln_program_load_bytes(bytes, len, &one, &from_bytes) == KILN_OK);
    free(bytes);
    run_and_compare(from_bytes, &in, &want);
    kiln_program_free(from_bytes);

    /* Hostile bytes: truncated, and with flipped bits: an error, never a crash. */
    bytes = read_file(pte, &len);
    KilnProgram *bad = NULL;
    CHECK(kiln_program_load_bytes(bytes, len / 2, NULL, &bad) == KILN_ERROR_INVALID_PROGRAM && bad == NULL);
    for (size_t i = 0; i < 200; i++) {
        unsigned char *mutated = malloc(len);
        memcpy(mutated, bytes, len);
        size_t at = (i * 2654435761u) % len;
        mutated[at] ^= (unsigned char)(1u << (i % 8));
        KilnProgram *p = NULL;
        KilnStatus s = kiln_program_load_bytes(mutated, len, NULL, &p);
        CHECK(s != KILN_ERROR_INTERNAL);
        if (s == KILN_OK) {
            KilnMethod *pm = NULL;
            if (kiln_method_new(p, "forward", &pm) == KILN_OK) {
                kiln_method_set_input(pm, 0, 6, in.sizes, in.rank, in.data, in.count * 4);
                CHECK(kiln_method_execute(pm) != KILN_ERROR_INTERNAL);
                kiln_method_free(pm);
            }
            kiln_program_free(p);
        }
        free(mutated);
    }
    free(bytes);
    CHECK(kiln_program_load_bytes(NULL, 10, NULL, &bad) == KILN_ERROR_INVALID_ARGUMENT);

    /* Missing files, null arguments, a bad thread count. */
    char *missing = join(dir, "no_such_program.pte");
#if defined(KILN_INSPECT)
    bytes = read_file(pte, &len);
    inspect_files(pte, missing, bytes, len);
    free(bytes);
#endif
    CHECK(kiln_program_load(missing, NULL, &bad) == KILN_ERROR_IO && bad == NULL);
    CHECK(strstr(kiln_last_error(), "no_such_program.pte") != NULL);
    CHECK(kiln_program_load(NULL, NULL, &bad) == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(kiln_program_load(pte, NULL, NULL) == KILN_ERROR_INVALID_ARGUMENT);
    KilnLoadOptions many = {100000, 0, NULL};
    CHECK(kiln_program_load(pte, &many, &bad) == KILN_ERROR_INVALID_ARGUMENT);

    /* External data: an XNNPACK delegate's weights in a .ptd, and the program without it. */
    char *xpte = join(dir, "xnnpack_external.pte");
    char *xptd = join(dir, "xnnpack_external.ptd");
    char *xin = join(dir, "xnnpack_external.forward.in0.npy");
    char *xout = join(dir, "xnnpack_external.forward.out0.npy");
    npy_f32 xi, xw;
    if (npy_read_f32(xin, &xi) == 0 && npy_read_f32(xout, &xw) == 0) {
        KilnLoadOptions with_data = {0, 0, xptd};
        KilnProgram *x = NULL;
        CHECK(kiln_program_load(xpte, &with_data, &x) == KILN_OK);
        run_and_compare(x, &xi, &xw);
        kiln_program_free(x);
        CHECK(kiln_program_load(xpte, NULL, &x) != KILN_OK ||
              (kiln_method_new(x, "forward", &m) != KILN_OK && (kiln_program_free(x), 1)));
        KilnLoadOptions no_file = {0, 0, missing};
        CHECK(kiln_program_load(xpte, &no_file, &x) == KILN_ERROR_IO);
        free(xi.data);
        free(xw.data);
    } else {
        failures++;
    }

    kiln_program_free(program);
    kiln_program_free(NULL);
    free(in.data);
    free(want.data);
    free(pte);
    free(in_path);
    free(out_path);
    free(missing);
    free(xpte);
    free(xptd);
    free(xin);
    free(xout);
    if (failures) {
        fprintf(stderr, "api_test: %d check(s) failed\n", failures);
        return 1;
    }
    printf("api_test: every check holds\n");
    return 0;
}
