/* SPDX-License-Identifier: MIT */
/* Reload (SIGHUP): re-read the configuration, apply what can change, say what cannot. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/config-diff.h"
#include "daemon/config.h"
#include "daemon/daemon.h"
#include "common/log.h"
#include "daemon/reload.h"
#include "daemon/service.h"

int reload_daemon(Daemon *d)
{
        _cleanup_(config_freep) Config *new = NULL;
        _cleanup_free_ ConfigChange *changes = NULL;
        _cleanup_free_ char *error = NULL;
        size_t n = 0, applied = 0;
        int r;

        service_reloading(d->service);
        r = config_new(&new);
        if (r >= 0)
                r = config_parse_argv(new, d->argc, d->argv, &error);
        if (r > 0)
                r = -EINVAL; /* --help or --version: not a configuration */
        if (r < 0) {
                log_error("reload: %s; keeping the running configuration",
                          error ? error : "cannot read the configuration");
                goto done;
        }

        r = config_diff(d->config, new, &changes, &n);
        if (r < 0) {
                log_error_errno(r, "reload: cannot compare the configurations");
                goto done;
        }
        for (size_t i = 0; i < n; i++) {
                const ConfigChange *c = &changes[i];
                bool for_new = strncmp(c->key, "allow_", 6) == 0;

                if (c->runtime) {
                        log_notice("reload: %s: %s -> %s%s", c->key, c->old_value, c->new_value,
                                   for_new ? " (for new connections)" : "");
                        applied++;
                } else
                        log_warning("reload: %s: %s -> %s needs a restart; keeping %s", c->key,
                                    c->old_value, c->new_value, c->old_value);
        }
        r = config_apply_runtime(d->config, new);
        if (r < 0) {
                log_error_errno(r, "reload: cannot apply the configuration");
                goto done;
        }
        log_set_max_level(d->config->log_level);
        if (n == 0)
                log_info("reload: the configuration is unchanged");
        else
                log_notice("reload: %zu change%s applied, %zu need%s a restart", applied,
                           applied == 1 ? "" : "s", n - applied, n - applied == 1 ? "s" : "");
        r = (int)applied;
done:
        /* READY=1 ends the reload for the service manager, whatever came of it. */
        service_ready(d->service);
        return r;
}
