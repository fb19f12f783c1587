/* A float32 .npy reader for kiln's C examples and tests: the header's 'descr' must be '<f4'
 * and 'fortran_order' False; the shape is read from it. Not part of the library. */
#ifndef KILN_EXAMPLE_NPY_H
#define KILN_EXAMPLE_NPY_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t sizes[8];
    size_t rank;
    float *data;
    size_t count;
} npy_f32;

/* Reads `path` into `out`; 0 on success, else -1 with a message on stderr. */
static int npy_read_f32(const char *path, npy_f32 *out) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot open\n", path);
        return -1;
    }
    unsigned char pre[10];
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        fprintf(stderr, "%s: not a .npy file\n", path);
        fclose(f);
        return -1;
    }
    size_t hlen;
    if (pre[6] == 1) {
        hlen = (size_t)pre[8] | ((size_t)pre[9] << 8);
    } else {
        unsigned char more[2];
        if (fread(more, 1, 2, f) != 2) {
            fclose(f);
            return -1;
        }
        hlen = (size_t)pre[8] | ((size_t)pre[9] << 8) | ((size_t)more[0] << 16) | ((size_t)more[1] << 24);
    }
    char *header = calloc(hlen + 1, 1);
    if (!header || fread(header, 1, hlen, f) != hlen) {
        fprintf(stderr, "%s: short header\n", path);
        free(header);
        fclose(f);
        return -1;
    }
    if (!strstr(header, "'descr': '<f4'") || !strstr(header, "'fortran_order': False")) {
        fprintf(stderr, "%s: not a C-order float32 array\n", path);
        free(header);
        fclose(f);
        return -1;
    }
    const char *shape = strstr(header, "'shape': (");
    out->rank = 0;
    out->count = 1;
    if (shape) {
        const char *p = shape + strlen("'shape': (");
        while (*p && *p != ')' && out->rank < 8) {
            char *end;
            long long v = strtoll(p, &end, 10);
            if (end == p) {
                break;
            }
            out->sizes[out->rank++] = v;
            out->count *= (size_t)v;
            p = end;
            while (*p == ',' || *p == ' ') {
                p++;
            }
        }
    }
    free(header);
    out->data = malloc(out->count * sizeof(float) + 1);
    if (!out->data || fread(out->data, sizeof(float), out->count, f) != out->count) {
        fprintf(stderr, "%s: short data\n", path);
        free(out->data);
        fclose(f);
        return -1;
    }
    fclose(f);
    return 0;
}

#endif
