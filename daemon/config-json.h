/* SPDX-License-Identifier: MIT */
/* Config as JSON: the effective configuration, as `kvdistctl config` shows it. */
#pragma once

#include "daemon/config.h"

struct json_t;

/*
 * The settings of @c as a JSON object with the keys of the config file (sizes in bytes, the
 * socket mode as an octal string, metrics_listen "" when off), so that the output is itself a
 * valid config file. Returns a new reference, NULL when out of memory.
 */
struct json_t *config_to_json(const Config *c);
