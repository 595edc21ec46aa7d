/* SPDX-License-Identifier: MIT */
/* Daemon configuration: listen addresses (metrics_listen), numeric only, port 0 allowed. */
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <string.h>

#include "daemon/config.h"
#include "common/sockaddr-util.h"

/* The port of "a:0" is set after parsing "a": sockaddr_parse() takes ports 1..65535 only. */
static bool strip_port_zero(const char *s, char *buf, size_t size)
{
        size_t len = strlen(s);

        if (len < 3 || len >= size || strcmp(s + len - 2, ":0") != 0)
                return false;
        memcpy(buf, s, len - 2);
        buf[len - 2] = '\0';
        /* "[v6]:0" or "v4:0"; a bare IPv6 address ("::1:0") is taken whole, as sockaddr_parse(). */
        if (buf[0] == '[' ? buf[len - 3] != ']' : strchr(buf, ':') != NULL)
                return false;
        return true;
}

int config_parse_metrics_listen(const char *s, struct sockaddr_storage *ret_addr,
                                socklen_t *ret_len)
{
        struct sockaddr_storage sa;
        char buf[SOCKADDR_STR_MAX + 8];
        socklen_t len;
        bool zero;
        int r;

        if (!s || !s[0])
                return -EINVAL;
        zero = strip_port_zero(s, buf, sizeof(buf));
        r = sockaddr_parse(zero ? buf : s, CONFIG_METRICS_DEFAULT_PORT, &sa, &len);
        if (r < 0)
                return r;
        if (zero) {
                if (sa.ss_family == AF_INET)
                        ((struct sockaddr_in *)&sa)->sin_port = 0;
                else
                        ((struct sockaddr_in6 *)&sa)->sin6_port = 0;
        }
        *ret_addr = sa;
        *ret_len = len;
        return 0;
}
