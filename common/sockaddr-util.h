/* SPDX-License-Identifier: MIT */
/* Socket addresses to and from their textual form: "1.2.3.4:5000", "[::1]:5000". */
#pragma once

#include <net/if.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/*
 * Room for the longest text sockaddr_format() writes, "[" address "%" interface "]:" port, and
 * its NUL: the NULs INET6_ADDRSTRLEN and IF_NAMESIZE count pay for the '%' and the final NUL.
 */
#define SOCKADDR_STR_MAX (1 + INET6_ADDRSTRLEN + IF_NAMESIZE + 2 + 5)

/*
 * Parses a numeric socket address into @ret_addr and its length into @ret_len (both written only
 * on success). Accepted forms:
 *   "1.2.3.4:5000"                IPv4, dotted quad only (no "127.1", no hex, no octal)
 *   "[2001:db8::1]:5000"          IPv6
 *   "[fe80::1%eth0]:5000"         IPv6 with a scope, an interface name or index; allowed on
 *                                 link-local unicast and on multicast addresses only
 *   "1.2.3.4", "[::1]", "::1"     no port: @default_port is used; a bare IPv6 address is always
 *                                 taken whole, so "::1:80" is the address ::1:80
 * A port is 1 to 5 decimal digits, 1..65535. Nothing is looked up: host names are refused.
 * Pass 0 as @default_port to require a port.
 * Returns 0; -EINVAL for anything else (NULL, empty, spaces, a missing port or bracket, port 0 or
 * above 65535, a host name, an IPv4 address in brackets); -ENODEV when the scope names an
 * interface that does not exist.
 */
int sockaddr_parse(const char *s, uint16_t default_port, struct sockaddr_storage *ret_addr,
                   socklen_t *ret_len);

/*
 * As sockaddr_parse() for an address to bind to: a port is required, and port 0 ("1.2.3.4:0",
 * "[::1]:0") is accepted, meaning any free port.
 */
int sockaddr_parse_listen(const char *s, struct sockaddr_storage *ret_addr, socklen_t *ret_len);

/*
 * Writes the AF_INET or AF_INET6 address @sa of @len bytes into @buf of @size bytes (room for
 * SOCKADDR_STR_MAX is always enough), in the form sockaddr_parse() reads: "1.2.3.4:5000",
 * "[::1]:5000", "[fe80::1%eth0]:5000" (the scope by interface name, or by index when no
 * interface has it). Port 0 is written as ":0".
 * Returns 0; -EAFNOSUPPORT for another family; -EINVAL when @len is too short for its family;
 * -ENOSPC when @buf is too small (it then holds a truncated, NUL-terminated string).
 */
/*
 * The options of a connected stream socket between daemons (a peer's control connection): no
 * delay for small frames, and keepalive. Failures are ignored (the socket works without them).
 */
void sockaddr_socket_setup(int fd);

int sockaddr_format(const struct sockaddr *sa, socklen_t len, char *buf, size_t size);
