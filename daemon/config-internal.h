/* SPDX-License-Identifier: MIT */
/*
 * Daemon configuration internals: what config.c (defaults, the JSON file, the shared value
 * parsers) lends to config-args.c (the command line), config-diff.c (reload) and config-json.c
 * (the effective config). Not installed; only the config-*.c files include it.
 */
#pragma once

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/un.h>

#include "daemon/config.h"
#include "common/macro.h"

/* sun_path less its terminating NUL. */
#define SOCKET_PATH_MAX (sizeof(((struct sockaddr_un *)NULL)->sun_path) - 1)
#define COPY_THREADS_MAX 64
/* Room for a key path in messages ("devices[1023].rdma_device"); longer user keys are cut. */
#define PATH_BUF 256

static inline bool streq(const char *a, const char *b)
{
        return strcmp(a, b) == 0;
}

/* Formats a key path for messages into @buf (PATH_BUF bytes), ending in "..." when cut. */
void config_pathf(char *buf, const char *fmt, ...) _printf_(2, 3);

/* Frees @n device entries and the array. */
void config_devices_free(DeviceConfig *devices, size_t n);
/* The longest metrics_listen value: "[" IPv6 "%" interface "]:" port. */
#define METRICS_LISTEN_MAX 64

/*
 * Integer-valued settings, shared by the JSON keys and the flags that set the same thing. A
 * SIZE also takes a size string; its bounds are then printed as sizes.
 */
typedef enum FieldKind {
        FIELD_INT,
        FIELD_SIZE,
} FieldKind;

typedef struct IntField {
        const char *name;
        size_t offset; /* in Config */
        size_t size;   /* 4 or 8 */
        FieldKind kind;
        int64_t min;
        int64_t max;
} IntField;

typedef struct IntFieldTable {
        const IntField *fields;
        size_t n_fields;
} IntFieldTable;

/* The integer settings of the file's top level and of its "limits" object. */
extern const IntFieldTable config_top_fields;
extern const IntFieldTable config_limit_fields;
extern const IntFieldTable config_per_user_fields; /* limits.per_user */
extern const IntFieldTable config_tcp_fields;
extern const IntFieldTable config_rdma_fields;

/*
 * Sets *@ret (freeing what was there) to a copy of the peer listen address @s, checked to be a
 * numeric "ip:port" or "[ipv6]:port"; "" sets NULL (no listener). -EINVAL, -ENODEV, -ENOMEM.
 */
int config_parse_listen(const char *s, char **ret);

/* The entry of @t named @name; NULL when there is none. */
const IntField *config_int_field_find(const IntFieldTable *t, const char *name);

/* The value of @f in @c. */
uint64_t config_int_field_load(const Config *c, const IntField *f);

/* Stores @v, already checked against @f's bounds, in @c's field. */
void config_int_field_store(Config *c, const IntField *f, uint64_t v);

/* *@ret = a malloc'ed copy of the @n elements of @size bytes at @p; NULL when @n is 0. */
int config_memdup_array(const void *p, size_t n, size_t size, void **ret);

/*
 * Records the first error message in *@error (later ones are dropped, the first failure is the
 * one worth reading) and returns @r. Out of memory leaves *@error NULL.
 */
int config_errorf(char **error, int r, const char *fmt, ...) _printf_(3, 4);

/* Hands *@error over to *@ret_error, when the caller wants it (@ret_error not NULL). */
void config_error_give(char **error, char **ret_error);

/*
 * Parses a size: decimal digits, optionally followed by K, M, G or T (binary units, either
 * case) and an optional "iB". No sign, no fraction, no blanks. Returns 0, -EINVAL when it is
 * not a size, -ERANGE when it overflows.
 */
int config_parse_size(const char *s, uint64_t *ret);

/* Writes @v into @buf as "256M" when it is a whole number of K/M/G/T, else as plain bytes. */
const char *config_format_size(uint64_t v, char buf[static 32]);

/* The copy_threads of "auto": min(4, CPUs online). */
unsigned config_default_copy_threads(void);

/* Checks rules between keys (heartbeat timeout against interval); -EINVAL with *@error. */
int config_check(const Config *c, char **error);

/* A deep copy of @c into *@ret: the scratch a load writes into before it replaces @c. */
int config_dup(const Config *c, Config **ret);

/* Moves @scratch's contents into @c and frees what @c held (and @scratch). */
void config_replace(Config *c, Config *scratch);
