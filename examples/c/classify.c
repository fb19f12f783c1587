/* classify MODEL.pte INPUT.npy: runs an image classifier exported with ExecuTorch on a
 * float32 input and prints the indices of its five largest outputs, best first. The input is
 * bound, not copied: the method reads the image where npy_read_f32 put it.
 *
 *   cc examples/c/classify.c -Icrates/kiln-capi/include -Ltarget/release -lkiln -o classify
 *   LD_LIBRARY_PATH=target/release ./classify model.pte input.npy
 * or, installed (tools/capi/install.sh PREFIX):
 *   cc examples/c/classify.c $(pkg-config --cflags --libs kiln) -o classify
 */
#include <stdio.h>
#include <stdlib.h>

#include "kiln.h"
#include "npy.h"

static int fail(const char *what, KilnStatus status) {
    fprintf(stderr, "classify: %s: %s (status %d)\n", what, kiln_last_error(), (int)status);
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: classify MODEL.pte INPUT.npy\n");
        return 2;
    }
    npy_f32 input;
    if (npy_read_f32(argv[2], &input) != 0) {
        return 1;
    }
    KilnProgram *program = NULL;
    KilnStatus s = kiln_program_load(argv[1], NULL, &program);
    if (s != KILN_OK) {
        return fail("loading the program", s);
    }
    KilnMethod *method = NULL;
    s = kiln_method_new(program, "forward", &method);
    if (s != KILN_OK) {
        return fail("loading forward", s);
    }
    /* input.data stays valid and unchanged until the execute below returns. */
    s = kiln_method_bind_input(method, 0, 6 /* float32 */, input.sizes, input.rank, input.data,
                               input.count * sizeof(float));
    if (s == KILN_OK) {
        s = kiln_method_execute(method);
    }
    if (s != KILN_OK) {
        return fail("running forward", s);
    }
    KilnTensor out;
    s = kiln_method_output(method, 0, &out);
    if (s != KILN_OK || out.dtype != 6) {
        return fail("reading its output", s);
    }
    const float *scores = out.data;
    size_t n = out.nbytes / sizeof(float);
    size_t best[5];
    size_t found = 0;
    for (; found < 5 && found < n; found++) {
        size_t pick = 0;
        int any = 0;
        for (size_t i = 0; i < n; i++) {
            int taken = 0;
            for (size_t j = 0; j < found; j++) {
                taken |= best[j] == i;
            }
            if (!taken && (!any || scores[i] > scores[pick])) {
                pick = i;
                any = 1;
            }
        }
        best[found] = pick;
    }
    for (size_t i = 0; i < found; i++) {
        printf("%s%zu", i ? " " : "", best[i]);
    }
    printf("\n");
    kiln_method_free(method);
    kiln_program_free(program);
    free(input.data);
    return 0;
}
