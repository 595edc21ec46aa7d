/* SPDX-License-Identifier: MIT */
/* Socket addresses to and from text; numeric only, so parsing never waits on a resolver. */

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "common/sockaddr-util.h"

/* An IPv6 address, '%', an interface name or index, and the NUL. */
#define HOST_MAX (INET6_ADDRSTRLEN + IF_NAMESIZE)

static bool is_digit(char c)
{
        return c >= '0' && c <= '9';
}

/* Parses the decimal port in the @len bytes at @s: 1 to 5 digits, 1..65535. */
static int port_parse(const char *s, size_t len, uint16_t *ret)
{
        unsigned long v = 0;

        if (len == 0 || len > 5)
                return -EINVAL;
        for (size_t i = 0; i < len; i++) {
                if (!is_digit(s[i]))
                        return -EINVAL;
                v = v * 10 + (unsigned long)(s[i] - '0');
        }
        if (v == 0 || v > UINT16_MAX)
                return -EINVAL;
        *ret = (uint16_t)v;
        return 0;
}

/* Parses an IPv6 scope: an interface index (decimal, non-zero) or an interface name. */
static int scope_parse(const char *s, uint32_t *ret)
{
        size_t len = strlen(s);
        unsigned long long v = 0;
        unsigned idx;

        if (len == 0 || len >= IF_NAMESIZE)
                return -EINVAL;
        if (strspn(s, "0123456789") == len) {
                for (size_t i = 0; i < len; i++)
                        v = v * 10 + (unsigned long long)(s[i] - '0');
                if (v == 0 || v > UINT32_MAX)
                        return -EINVAL;
                *ret = (uint32_t)v;
                return 0;
        }
        idx = if_nametoindex(s);
        if (idx == 0)
                return -ENODEV;
        *ret = idx;
        return 0;
}

static int parse_v4(const char *host, uint16_t port, struct sockaddr_storage *ret_addr,
                    socklen_t *ret_len)
{
        struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port)};

        if (inet_pton(AF_INET, host, &sin.sin_addr) != 1)
                return -EINVAL;
        memset(ret_addr, 0, sizeof(*ret_addr));
        memcpy(ret_addr, &sin, sizeof(sin));
        *ret_len = sizeof(sin);
        return 0;
}

/* @host is writable: the '%' before a scope is cut off in place. */
static int parse_v6(char *host, uint16_t port, struct sockaddr_storage *ret_addr,
                    socklen_t *ret_len)
{
        struct sockaddr_in6 sin6 = {.sin6_family = AF_INET6, .sin6_port = htons(port)};
        char *pct = strchr(host, '%');
        int r;

        if (pct)
                *pct = '\0';
        if (inet_pton(AF_INET6, host, &sin6.sin6_addr) != 1)
                return -EINVAL;
        if (pct) {
                /* A scope means something only where the address does not say the link. */
                if (!IN6_IS_ADDR_LINKLOCAL(&sin6.sin6_addr) &&
                    !IN6_IS_ADDR_MULTICAST(&sin6.sin6_addr))
                        return -EINVAL;
                r = scope_parse(pct + 1, &sin6.sin6_scope_id);
                if (r < 0)
                        return r;
        }
        memset(ret_addr, 0, sizeof(*ret_addr));
        memcpy(ret_addr, &sin6, sizeof(sin6));
        *ret_len = sizeof(sin6);
        return 0;
}

int sockaddr_parse(const char *s, uint16_t default_port, struct sockaddr_storage *ret_addr,
                   socklen_t *ret_len)
{
        char host[HOST_MAX];
        const char *host_start, *host_end, *port_start = NULL, *colon;
        bool v6;
        uint16_t port = default_port;
        size_t len;
        int r;

        if (!s || !ret_addr || !ret_len)
                return -EINVAL;
        len = strlen(s);

        if (s[0] == '[') {
                /* "[v6]" or "[v6]:port" */
                host_start = s + 1;
                host_end = strchr(host_start, ']');
                if (!host_end)
                        return -EINVAL;
                if (host_end[1] == ':')
                        port_start = host_end + 2;
                else if (host_end[1] != '\0')
                        return -EINVAL;
                v6 = true;
        } else {
                host_start = s;
                colon = strchr(s, ':');
                if (!colon) {
                        /* "v4" */
                        host_end = s + len;
                        v6 = false;
                } else if (!strchr(colon + 1, ':')) {
                        /* "v4:port" */
                        host_end = colon;
                        port_start = colon + 1;
                        v6 = false;
                } else {
                        /* a bare "v6": with two colons or more it cannot be "v4:port" */
                        host_end = s + len;
                        v6 = true;
                }
        }

        if (port_start) {
                r = port_parse(port_start, strlen(port_start), &port);
                if (r < 0)
                        return r;
        } else if (port == 0)
                return -EINVAL;

        if (host_end == host_start || (size_t)(host_end - host_start) >= sizeof(host))
                return -EINVAL;
        memcpy(host, host_start, (size_t)(host_end - host_start));
        host[host_end - host_start] = '\0';

        return v6 ? parse_v6(host, port, ret_addr, ret_len)
                  : parse_v4(host, port, ret_addr, ret_len);
}

int sockaddr_parse_listen(const char *s, struct sockaddr_storage *ret_addr, socklen_t *ret_len)
{
        char host[HOST_MAX + 2];
        size_t len;
        int r;

        if (!s || !ret_addr || !ret_len)
                return -EINVAL;
        len = strlen(s);
        if (len < 3 || strcmp(s + len - 2, ":0") != 0)
                return sockaddr_parse(s, 0, ret_addr, ret_len);
        /* "host:0": the host alone, in the v4 form (no colon) or the bracketed v6 form. */
        if (len - 2 >= sizeof(host))
                return -EINVAL;
        memcpy(host, s, len - 2);
        host[len - 2] = '\0';
        if (host[0] == '[' ? host[len - 3] != ']' : strchr(host, ':') != NULL)
                return -EINVAL;
        r = sockaddr_parse(host, 1, ret_addr, ret_len);
        if (r < 0)
                return r;
        if (ret_addr->ss_family == AF_INET)
                ((struct sockaddr_in *)ret_addr)->sin_port = 0;
        else
                ((struct sockaddr_in6 *)ret_addr)->sin6_port = 0;
        return 0;
}

int sockaddr_format(const struct sockaddr *sa, socklen_t len, char *buf, size_t size)
{
        char addr[INET6_ADDRSTRLEN];
        char scope[IF_NAMESIZE + 1] = "";
        int n;

        if (!sa || !buf)
                return -EINVAL;
        if (len < (socklen_t)sizeof(sa_family_t))
                return -EINVAL;

        switch (sa->sa_family) {
        case AF_INET: {
                struct sockaddr_in sin;

                if (len < (socklen_t)sizeof(sin))
                        return -EINVAL;
                memcpy(&sin, sa, sizeof(sin));
                if (!inet_ntop(AF_INET, &sin.sin_addr, addr, sizeof(addr)))
                        return -errno;
                n = snprintf(buf, size, "%s:%u", addr, (unsigned)ntohs(sin.sin_port));
                break;
        }
        case AF_INET6: {
                struct sockaddr_in6 sin6;
                char name[IF_NAMESIZE];

                if (len < (socklen_t)sizeof(sin6))
                        return -EINVAL;
                memcpy(&sin6, sa, sizeof(sin6));
                if (!inet_ntop(AF_INET6, &sin6.sin6_addr, addr, sizeof(addr)))
                        return -errno;
                if (sin6.sin6_scope_id != 0) {
                        if (if_indextoname(sin6.sin6_scope_id, name))
                                (void)snprintf(scope, sizeof(scope), "%%%s", name);
                        else
                                (void)snprintf(scope, sizeof(scope), "%%%u",
                                               (unsigned)sin6.sin6_scope_id);
                }
                n = snprintf(buf, size, "[%s%s]:%u", addr, scope, (unsigned)ntohs(sin6.sin6_port));
                break;
        }
        default:
                return -EAFNOSUPPORT;
        }

        if (n < 0)
                return -EINVAL;
        if ((size_t)n >= size)
                return -ENOSPC;
        return 0;
}

void sockaddr_socket_setup(int fd)
{
        int one = 1;

        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
}
