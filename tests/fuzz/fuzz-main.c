/* SPDX-License-Identifier: MIT */
/*
 * Replay driver shared by the fuzz targets when they are not built for libFuzzer: runs
 * LLVMFuzzerTestOneInput() over the files and folders named on the command line, and over every
 * prefix and single-bit flip of each, so the seed corpus runs as an ordinary test. With --once
 * first, each file runs once as it is (for targets whose every run costs a daemon).
 */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/macro.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool once;

static int read_file(const char *path, uint8_t **ret_data, size_t *ret_size)
{
        _cleanup_free_ uint8_t *data = NULL;
        size_t size = 0, cap = 0;
        FILE *f;

        f = fopen(path, "re");
        if (!f)
                return -errno;
        for (;;) {
                size_t n;

                if (size == cap) {
                        uint8_t *p;

                        cap = cap ? cap * 2 : 4096;
                        p = realloc(data, cap);
                        if (!p) {
                                fclose(f);
                                return -ENOMEM;
                        }
                        data = p;
                }
                n = fread(data + size, 1, cap - size, f);
                size += n;
                if (n == 0)
                        break;
        }
        if (ferror(f)) {
                fclose(f);
                return -EIO;
        }
        fclose(f);

        *ret_data = TAKE_PTR(data);
        *ret_size = size;
        return 0;
}

/* Runs the target over @data, every prefix of it and every single-bit flip of it (or, --once,
 * over @data alone). */
static void run_one(const uint8_t *data, size_t size)
{
        _cleanup_free_ uint8_t *copy = malloc(size ?: 1);

        if (!copy)
                abort();
        if (once) {
                /* An exact-size copy, so that reading past the end is an ASan report. */
                memcpy(copy, data, size);
                LLVMFuzzerTestOneInput(copy, size);
                return;
        }
        for (size_t l = 0; l <= size; l++) {
                memcpy(copy, data, l);
                LLVMFuzzerTestOneInput(copy, l);
        }
        memcpy(copy, data, size);
        for (size_t i = 0; i < size; i++)
                for (unsigned bit = 0; bit < 8; bit++) {
                        copy[i] ^= (uint8_t)(1u << bit);
                        LLVMFuzzerTestOneInput(copy, size);
                        copy[i] ^= (uint8_t)(1u << bit);
                }
}

static int run_path(const char *path, unsigned *n_inputs)
{
        _cleanup_free_ uint8_t *data = NULL;
        struct stat st;
        size_t size = 0;
        int r;

        if (stat(path, &st) < 0)
                return -errno;

        if (S_ISDIR(st.st_mode)) {
                struct dirent *de;
                DIR *d = opendir(path);

                if (!d)
                        return -errno;
                r = 0;
                while ((de = readdir(d))) {
                        _cleanup_free_ char *child = NULL;

                        if (de->d_name[0] == '.')
                                continue;
                        if (asprintf(&child, "%s/%s", path, de->d_name) < 0) {
                                r = -ENOMEM;
                                break;
                        }
                        r = run_path(child, n_inputs);
                        if (r < 0)
                                break;
                }
                closedir(d);
                return r;
        }

        r = read_file(path, &data, &size);
        if (r < 0)
                return r;
        run_one(data, size);
        (*n_inputs)++;
        return 0;
}

int main(int argc, char **argv)
{
        unsigned n_inputs = 0;
        int first = 1;

        if (argc > 1 && strcmp(argv[1], "--once") == 0) {
                once = true;
                first = 2;
        }
        if (argc <= first) {
                fprintf(stderr, "usage: %s [--once] FILE|DIR...\n", argv[0]);
                return EXIT_FAILURE;
        }
        for (int i = first; i < argc; i++) {
                int r = run_path(argv[i], &n_inputs);

                if (r < 0) {
                        fprintf(stderr, "%s: %s\n", argv[i], strerror(-r));
                        return EXIT_FAILURE;
                }
        }
        printf(once ? "%u inputs run\n"
                    : "%u inputs run (each with every prefix and single-bit "
                      "flip)\n",
               n_inputs);
        return EXIT_SUCCESS;
}
