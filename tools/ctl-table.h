/* SPDX-License-Identifier: MIT */
/*
 * kvdistctl tables: cells formatted from JSON values with human units, printed as aligned
 * columns. A formatter writes "-" for a key the daemon did not send (or sent as another type),
 * so that an older or newer daemon still gets a readable table.
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* Room for one formatted cell. */
#define CELL_MAX 64
#define TABLE_MAX_COLS 16

/* "512 B", "1.5 KiB", "3.0 GiB". */
void fmt_bytes_value(double v, char *buf);
/* "12.3s", "4m 05s", "2h 03m", "1d 04h"; "-" for a negative value. */
void fmt_duration(double s, char *buf);

/*
 * printf() into a cell; what does not fit is cut and the cell ends in "..." so that a reader sees
 * it was cut.
 */
void cell_printf(char *buf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

bool get_number(const json_t *obj, const char *key, double *ret);
const char *fmt_int(const json_t *obj, const char *key, char *buf);
const char *fmt_str(const json_t *obj, const char *key, char *buf);
/* An id sent as a string ("00ab34...") or as an integer. */
const char *fmt_id(const json_t *obj, const char *key, char *buf);
const char *fmt_bool(const json_t *obj, const char *key, char *buf);
const char *fmt_bytes(const json_t *obj, const char *key, char *buf);
/* The number under @key times @scale, as a duration. */
const char *fmt_age(const json_t *obj, const char *key, double scale, char *buf);
/* "512x16x128" from [512, 16, 128]. */
const char *fmt_shape(const json_t *obj, const char *key, char *buf);

typedef struct Table {
        size_t n_cols;
        size_t n_rows;
        const char *const *headers;
        char (*cells)[CELL_MAX]; /* n_rows * n_cols */
} Table;

/* A table of @n_rows rows under @headers (at most TABLE_MAX_COLS). 0 or -ENOMEM. */
int table_init(Table *t, const char *const *headers, size_t n_cols, size_t n_rows);
char *table_cell(Table *t, size_t row, size_t col);
/* Prints the header and the rows with columns padded to their widest cell. */
void table_print(Table *t);
void table_free(Table *t);

/* Fills row @row of @t from @obj. */
typedef void (*RowFunc)(const json_t *obj, Table *t, size_t row);

/*
 * Prints the array @array (may be NULL: no rows) as a table with one row per element, or
 * @empty when it has none. Returns 0 or -ENOMEM.
 */
int print_table(const json_t *array, const char *const *headers, size_t n_cols, RowFunc row,
                const char *empty);
