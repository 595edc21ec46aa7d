/* SPDX-License-Identifier: MIT */
/* Daemon configuration keys: applying a parsed JSON document over a configuration. */
#pragma once

#include <jansson.h>

#include "daemon/config.h"

/*
 * Applies every key of @root over @c, which is a scratch copy: it may be left half-written on
 * failure. -EINVAL with *@error naming the key, -ENOMEM.
 */
int config_apply_json(Config *c, json_t *root, char **error);
