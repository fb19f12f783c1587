/* Four C threads, each with its own execution state of one program, executing at once: every
 * output must equal a single-threaded run's, bit for bit (kiln's outputs do not depend on how
 * work is split). Run by crates/kiln-capi/tests/c_programs.rs.
 *
 *   threads_test MODEL.pte INPUT.npy
 * Exits 0 when every output matches, 1 otherwise. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "npy.h"

#define THREADS 4
#define RUNS 3

static KilnProgram *program;
static npy_f32 input;
static float *reference;
static size_t reference_bytes;

/* One state's RUNS executes; the number of mismatching or failed runs. */
static void *worker(void *arg) {
    (void)arg;
    size_t bad = 0;
    KilnMethod *m = NULL;
    if (kiln_method_new(program, "forward", &m) != KILN_OK) {
        fprintf(stderr, "threads_test: %s\n", kiln_last_error());
        return (void *)(size_t)RUNS;
    }
    for (int r = 0; r < RUNS; r++) {
        KilnTensor out;
        if (kiln_method_set_input(m, 0, 6, input.sizes, input.rank, input.data,
                                  input.count * sizeof(float)) != KILN_OK ||
            kiln_method_execute(m) != KILN_OK || kiln_method_output(m, 0, &out) != KILN_OK ||
            out.nbytes != reference_bytes || memcmp(out.data, reference, reference_bytes) != 0) {
            fprintf(stderr, "threads_test: run %d differs (%s)\n", r, kiln_last_error());
            bad++;
        }
    }
    kiln_method_free(m);
    return (void *)bad;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: threads_test MODEL.pte INPUT.npy\n");
        return 2;
    }
    if (npy_read_f32(argv[2], &input) != 0) {
        return 1;
    }
    if (kiln_program_load(argv[1], NULL, &program) != KILN_OK) {
        fprintf(stderr, "threads_test: %s\n", kiln_last_error());
        return 1;
    }
    /* The reference: one state, alone. */
    KilnMethod *m = NULL;
    KilnTensor out;
    if (kiln_method_new(program, "forward", &m) != KILN_OK ||
        kiln_method_set_input(m, 0, 6, input.sizes, input.rank, input.data,
                              input.count * sizeof(float)) != KILN_OK ||
        kiln_method_execute(m) != KILN_OK || kiln_method_output(m, 0, &out) != KILN_OK) {
        fprintf(stderr, "threads_test: %s\n", kiln_last_error());
        return 1;
    }
    reference_bytes = out.nbytes;
    reference = malloc(out.nbytes);
    memcpy(reference, out.data, out.nbytes);
    kiln_method_free(m);

    pthread_t threads[THREADS];
    for (int t = 0; t < THREADS; t++) {
        pthread_create(&threads[t], NULL, worker, NULL);
    }
    size_t bad = 0;
    for (int t = 0; t < THREADS; t++) {
        void *result;
        pthread_join(threads[t], &result);
        bad += (size_t)result;
    }
    kiln_program_free(program);
    free(reference);
    free(input.data);
    if (bad) {
        fprintf(stderr, "threads_test: %zu of %d runs differ\n", bad, THREADS * RUNS);
        return 1;
    }
    printf("threads_test: %d threads x %d runs equal the single-threaded run\n", THREADS, RUNS);
    return 0;
}
