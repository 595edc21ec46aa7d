/* SPDX-License-Identifier: MIT */
/* kvdistctl metrics: a reader of the Prometheus text format that kvdistd writes. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "tools/ctl-prom.h"
#include "common/macro.h"

static bool is_name_char(char c, bool first)
{
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
               (!first && c >= '0' && c <= '9');
}

/* Reads a name at *@p into @buf (@size bytes); false when there is none or it does not fit. */
static bool read_name(const char **p, char *buf, size_t size)
{
        size_t n = 0;

        while (is_name_char((*p)[n], n == 0)) {
                if (n + 1 >= size)
                        return false;
                buf[n] = (*p)[n];
                n++;
        }
        buf[n] = '\0';
        *p += n;
        return n > 0;
}

/* Reads {a="x",b="y"} at *@p (if any) into @labels. */
static bool read_labels(const char **p, json_t *labels)
{
        const char *s = *p;

        if (*s != '{')
                return true;
        s++;
        while (*s != '}') {
                char name[128], *value;
                size_t n = 0;

                if (!read_name(&s, name, sizeof(name)) || *s++ != '=' || *s++ != '"')
                        return false;
                value = malloc(strlen(s) + 1);
                if (!value)
                        return false;
                while (*s && *s != '"') {
                        if (*s == '\\' && s[1]) {
                                value[n++] = s[1] == 'n' ? '\n' : s[1];
                                s += 2;
                        } else
                                value[n++] = *s++;
                }
                value[n] = '\0';
                if (*s++ != '"' || json_object_set_new(labels, name, json_string(value)) < 0) {
                        free(value);
                        return false;
                }
                free(value);
                if (*s == ',')
                        s++;
                else if (*s != '}')
                        return false;
        }
        *p = s + 1;
        return true;
}

static json_t *parse_value(const char *s)
{
        char *end;
        double v;

        if (strcmp(s, "+Inf") == 0 || strcmp(s, "-Inf") == 0 || strcmp(s, "NaN") == 0)
                return json_string(s);
        v = strtod(s, &end);
        if (end == s || *end != '\0' || !isfinite(v))
                return NULL;
        if (v == (double)(json_int_t)v && fabs(v) < 9007199254740992.0)
                return json_integer((json_int_t)v);
        return json_real(v);
}

/* The family a sample belongs to: histogram samples carry _bucket, _sum or _count. */
static const char *family_type(json_t *types, const char *name)
{
        static const char *const suffixes[] = {"_bucket", "_sum", "_count"};
        json_t *t = json_object_get(types, name);
        char base[256];

        if (json_is_string(t))
                return json_string_value(t);
        for (size_t i = 0; i < ARRAY_SIZE(suffixes); i++) {
                size_t len = strlen(name), sl = strlen(suffixes[i]);

                if (len > sl && len - sl < sizeof(base) &&
                    strcmp(name + len - sl, suffixes[i]) == 0) {
                        memcpy(base, name, len - sl);
                        base[len - sl] = '\0';
                        t = json_object_get(types, base);
                        if (json_is_string(t))
                                return json_string_value(t);
                }
        }
        return "untyped";
}

/* One sample line into @samples; false when it is not one. */
static bool parse_sample(const char *line, json_t *types, json_t *samples)
{
        json_t *o = json_object(), *labels = json_object(), *value = NULL;
        const char *p = line;
        char name[256], buf[64];
        size_t n;
        bool ok;

        ok = o && labels && read_name(&p, name, sizeof(name)) && read_labels(&p, labels) &&
             *p++ == ' ';
        if (ok) {
                /* An optional timestamp follows the value. */
                n = strcspn(p, " ");
                ok = n > 0 && n < sizeof(buf);
                if (ok) {
                        memcpy(buf, p, n);
                        buf[n] = '\0';
                        value = parse_value(buf);
                        ok = value != NULL;
                }
        }
        ok = ok && json_object_set_new(o, "name", json_string(name)) == 0 &&
             json_object_set_new(o, "type", json_string(family_type(types, name))) == 0 &&
             json_object_set(o, "labels", labels) == 0 && json_object_set(o, "value", value) == 0 &&
             json_array_append(samples, o) == 0;
        json_decref(value);
        json_decref(labels);
        json_decref(o);
        return ok;
}

json_t *prom_to_json(const char *text, unsigned *ret_line)
{
        json_t *samples = json_array(), *types = json_object();
        unsigned line_no = 0;
        const char *p = text;
        bool ok = samples && types;

        while (ok && *p) {
                size_t len = strcspn(p, "\n");
                char *line = strndup(p, len);

                line_no++;
                if (!line) {
                        line_no = 0;
                        ok = false;
                        break;
                }
                if (strncmp(line, "# TYPE ", 7) == 0) {
                        char *name = line + 7, *type = strchr(name, ' ');

                        if (type) {
                                *type++ = '\0';
                                ok = json_object_set_new(types, name, json_string(type)) == 0;
                        }
                } else if (line[0] != '#' && line[0] != '\0')
                        ok = parse_sample(line, types, samples);
                free(line);
                p += len;
                if (*p == '\n')
                        p++;
        }
        json_decref(types);
        if (!ok) {
                json_decref(samples);
                if (ret_line)
                        *ret_line = line_no;
                return NULL;
        }
        return samples;
}
