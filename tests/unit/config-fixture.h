/* SPDX-License-Identifier: MIT */
/* Config test fixture: loading and parsing helpers that assert (Check), and deep comparison. */
#pragma once

#include <stdbool.h>

#include "daemon/config.h"

#define KIB (UINT64_C(1) << 10)
#define MIB (UINT64_C(1) << 20)
#define GIB (UINT64_C(1) << 30)
#define TIB (UINT64_C(1) << 40)

/* A config with the built-in defaults. */
Config *new_config(void);

/* Loads @json over @c and asserts it worked. */
void load_ok(Config *c, const char *json);

/* Whether two configs have equal fields, the socket path only when @with_socket_path. */
bool config_equal(const Config *a, const Config *b, bool with_socket_path);

/* Loading @json fails with -EINVAL and exactly @message, leaving a default config as it was. */
void load_fails(const char *json, const char *message);

/* Like load_fails() but only checks that @part occurs in the message. */
void load_fails_with(const char *json, const char *part);

/* Runs config_parse_argv() on a NULL-terminated list of arguments after "kvdistd". */
int parse(Config *c, char **ret_error, ...);

/* parse() fails with -EINVAL and exactly @message (NULL-terminated arguments follow). */
void parse_fails(const char *message, ...);
