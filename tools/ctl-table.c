/* SPDX-License-Identifier: MIT */
/* kvdistctl tables: human units and aligned columns. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/ctl-table.h"
#include "common/macro.h"

void fmt_bytes_value(double v, char *buf)
{
        static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
        size_t u = 0;

        if (v < 1024) {
                snprintf(buf, CELL_MAX, "%.0f B", v);
                return;
        }
        while (v >= 1024 && u + 1 < ARRAY_SIZE(units)) {
                v /= 1024;
                u++;
        }
        snprintf(buf, CELL_MAX, "%.1f %s", v, units[u]);
}

void fmt_duration(double s, char *buf)
{
        uint64_t t;

        if (s < 0) {
                snprintf(buf, CELL_MAX, "-");
                return;
        }
        if (s < 60) {
                snprintf(buf, CELL_MAX, "%.1fs", s);
                return;
        }
        t = (uint64_t)s;
        if (t < 3600)
                snprintf(buf, CELL_MAX, "%" PRIu64 "m %02" PRIu64 "s", t / 60, t % 60);
        else if (t < 86400)
                snprintf(buf, CELL_MAX, "%" PRIu64 "h %02" PRIu64 "m", t / 3600, t / 60 % 60);
        else
                snprintf(buf, CELL_MAX, "%" PRIu64 "d %02" PRIu64 "h", t / 86400, t / 3600 % 24);
}

void cell_printf(char *buf, const char *fmt, ...)
{
        static const char ellipsis[] = "...";
        va_list ap;
        int n;

        va_start(ap, fmt);
        n = vsnprintf(buf, CELL_MAX, fmt, ap);
        va_end(ap);
        if (n >= CELL_MAX)
                memcpy(buf + CELL_MAX - sizeof(ellipsis), ellipsis, sizeof(ellipsis));
}

bool get_number(const json_t *obj, const char *key, double *ret)
{
        json_t *v = json_object_get(obj, key);

        if (!json_is_number(v))
                return false;
        *ret = json_number_value(v);
        return true;
}

const char *fmt_int(const json_t *obj, const char *key, char *buf)
{
        json_t *v = json_object_get(obj, key);

        if (json_is_integer(v))
                snprintf(buf, CELL_MAX, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        else if (json_is_real(v))
                snprintf(buf, CELL_MAX, "%.0f", json_real_value(v));
        else
                snprintf(buf, CELL_MAX, "-");
        return buf;
}

const char *fmt_str(const json_t *obj, const char *key, char *buf)
{
        json_t *v = json_object_get(obj, key);

        cell_printf(buf, "%s", json_is_string(v) ? json_string_value(v) : "-");
        return buf;
}

const char *fmt_id(const json_t *obj, const char *key, char *buf)
{
        return json_is_string(json_object_get(obj, key)) ? fmt_str(obj, key, buf)
                                                         : fmt_int(obj, key, buf);
}

const char *fmt_bool(const json_t *obj, const char *key, char *buf)
{
        json_t *v = json_object_get(obj, key);

        snprintf(buf, CELL_MAX, "%s", !json_is_boolean(v) ? "-" : json_is_true(v) ? "yes" : "no");
        return buf;
}

const char *fmt_bytes(const json_t *obj, const char *key, char *buf)
{
        double v;

        if (get_number(obj, key, &v))
                fmt_bytes_value(v, buf);
        else
                snprintf(buf, CELL_MAX, "-");
        return buf;
}

const char *fmt_age(const json_t *obj, const char *key, double scale, char *buf)
{
        double v;

        if (get_number(obj, key, &v))
                fmt_duration(v * scale, buf);
        else
                snprintf(buf, CELL_MAX, "-");
        return buf;
}

const char *fmt_shape(const json_t *obj, const char *key, char *buf)
{
        json_t *shape = json_object_get(obj, key), *dim;
        size_t i, off = 0;

        if (!json_is_array(shape) || json_array_size(shape) == 0) {
                snprintf(buf, CELL_MAX, "-");
                return buf;
        }
        json_array_foreach(shape, i, dim)
        {
                int n = snprintf(buf + off, CELL_MAX - off, "%s%" JSON_INTEGER_FORMAT,
                                 i > 0 ? "x" : "", json_integer_value(dim));

                if (n < 0 || (size_t)n >= CELL_MAX - off)
                        break;
                off += (size_t)n;
        }
        return buf;
}

int table_init(Table *t, const char *const *headers, size_t n_cols, size_t n_rows)
{
        if (n_cols > TABLE_MAX_COLS)
                return -EINVAL;
        *t = (Table){.n_cols = n_cols, .n_rows = n_rows, .headers = headers};
        t->cells = calloc(MAX(n_rows, 1u) * n_cols, CELL_MAX);
        return t->cells ? 0 : -ENOMEM;
}

char *table_cell(Table *t, size_t row, size_t col)
{
        return t->cells[row * t->n_cols + col];
}

static void print_row(const size_t *width, size_t n_cols, const char *(*cell)(void *, size_t),
                      void *userdata)
{
        for (size_t c = 0; c < n_cols; c++)
                printf("%-*s%s", c + 1 < n_cols ? (int)width[c] : 0, cell(userdata, c),
                       c + 1 < n_cols ? "  " : "\n");
}

typedef struct RowRef {
        Table *t;
        size_t row;
} RowRef;

static const char *header_cell(void *userdata, size_t c)
{
        return ((Table *)userdata)->headers[c];
}

static const char *body_cell(void *userdata, size_t c)
{
        RowRef *ref = userdata;

        return table_cell(ref->t, ref->row, c);
}

void table_print(Table *t)
{
        size_t width[TABLE_MAX_COLS] = {};

        for (size_t c = 0; c < t->n_cols; c++) {
                width[c] = strlen(t->headers[c]);
                for (size_t r = 0; r < t->n_rows; r++)
                        width[c] = MAX(width[c], strlen(table_cell(t, r, c)));
        }
        print_row(width, t->n_cols, header_cell, t);
        for (size_t r = 0; r < t->n_rows; r++)
                print_row(width, t->n_cols, body_cell, &(RowRef){t, r});
}

void table_free(Table *t)
{
        free(t->cells);
        t->cells = NULL;
}

int print_table(const json_t *array, const char *const *headers, size_t n_cols, RowFunc row,
                const char *empty)
{
        size_t n = json_is_array(array) ? json_array_size(array) : 0, i;
        json_t *o;
        Table t;
        int r;

        if (n == 0) {
                printf("%s\n", empty);
                return 0;
        }
        r = table_init(&t, headers, n_cols, n);
        if (r < 0)
                return r;
        json_array_foreach(array, i, o) row(o, &t, i);
        table_print(&t);
        table_free(&t);
        return 0;
}
