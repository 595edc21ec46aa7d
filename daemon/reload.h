/* SPDX-License-Identifier: MIT */
/*
 * Reload (SIGHUP): reads the configuration again from the daemon's command line (the --config
 * file, then the flags over it), applies what a running daemon can take and logs, key by key,
 * what changed and what needs a restart. A configuration that does not parse changes nothing.
 */
#pragma once

typedef struct Daemon Daemon;

/*
 * Reloads @d's configuration from @d->argv. Returns the number of changes applied, -EINVAL when
 * the new configuration is invalid (logged; the running one stays), -ENOMEM.
 */
int reload_daemon(Daemon *d);
