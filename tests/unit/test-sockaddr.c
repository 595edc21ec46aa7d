/* SPDX-License-Identifier: MIT */
/* Unit tests for socket address parsing and formatting (sockaddr-util.c). */

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "common/macro.h"
#include "common/sockaddr-util.h"

/* Parses @s, formats the result, and asserts that the text comes back as @want. */
static void assert_round_trip(const char *s, uint16_t default_port, const char *want)
{
        struct sockaddr_storage ss;
        socklen_t len;
        char buf[SOCKADDR_STR_MAX];
        int r;

        r = sockaddr_parse(s, default_port, &ss, &len);
        ck_assert_msg(r == 0, "\"%s\": %s", s, strerror(-r));
        r = sockaddr_format((struct sockaddr *)&ss, len, buf, sizeof(buf));
        ck_assert_msg(r == 0, "\"%s\": %s", s, strerror(-r));
        ck_assert_str_eq(buf, want);
}

/* Asserts that parsing @s fails with @err and leaves the outputs alone. */
static void assert_rejected(const char *s, uint16_t default_port, int err)
{
        struct sockaddr_storage ss, before;
        socklen_t len = 12345;
        int r;

        memset(&ss, 0xa5, sizeof(ss));
        before = ss;
        r = sockaddr_parse(s, default_port, &ss, &len);
        ck_assert_msg(r == err, "\"%s\" (default port %u): got %d, want %d", s ? s : "(null)",
                      default_port, r, err);
        ck_assert(memcmp(&ss, &before, sizeof(ss)) == 0);
        ck_assert_int_eq(len, 12345);
}

START_TEST(test_parse_v4)
{
        struct sockaddr_storage ss;
        struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
        socklen_t len;

        ck_assert_int_eq(sockaddr_parse("127.0.0.1:5000", 0, &ss, &len), 0);
        ck_assert_int_eq(len, sizeof(struct sockaddr_in));
        ck_assert_int_eq(sin->sin_family, AF_INET);
        ck_assert_uint_eq(ntohs(sin->sin_port), 5000);
        ck_assert_uint_eq(ntohl(sin->sin_addr.s_addr), 0x7f000001);

        ck_assert_int_eq(sockaddr_parse("255.255.255.255:65535", 0, &ss, &len), 0);
        ck_assert_uint_eq(ntohs(sin->sin_port), 65535);
        ck_assert_uint_eq(ntohl(sin->sin_addr.s_addr), 0xffffffff);

        ck_assert_int_eq(sockaddr_parse("0.0.0.0:1", 0, &ss, &len), 0);
        ck_assert_uint_eq(ntohs(sin->sin_port), 1);
        ck_assert_uint_eq(sin->sin_addr.s_addr, 0);

        /* No port: the caller's default; a port given wins over it. */
        ck_assert_int_eq(sockaddr_parse("10.1.2.3", 7000, &ss, &len), 0);
        ck_assert_int_eq(sin->sin_family, AF_INET);
        ck_assert_uint_eq(ntohs(sin->sin_port), 7000);
        ck_assert_uint_eq(ntohl(sin->sin_addr.s_addr), 0x0a010203);
        ck_assert_int_eq(sockaddr_parse("10.1.2.3:80", 7000, &ss, &len), 0);
        ck_assert_uint_eq(ntohs(sin->sin_port), 80);

        /* Leading zeros in a port are still a decimal number. */
        ck_assert_int_eq(sockaddr_parse("10.1.2.3:00080", 0, &ss, &len), 0);
        ck_assert_uint_eq(ntohs(sin->sin_port), 80);
}
END_TEST

START_TEST(test_parse_v6)
{
        static const uint8_t db8_1[16] = {0x20, 0x01, 0x0d, 0xb8, [15] = 1};
        struct sockaddr_storage ss;
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
        socklen_t len;

        ck_assert_int_eq(sockaddr_parse("[::1]:5000", 0, &ss, &len), 0);
        ck_assert_int_eq(len, sizeof(struct sockaddr_in6));
        ck_assert_int_eq(sin6->sin6_family, AF_INET6);
        ck_assert_uint_eq(ntohs(sin6->sin6_port), 5000);
        ck_assert(IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr));
        ck_assert_uint_eq(sin6->sin6_scope_id, 0);
        ck_assert_uint_eq(sin6->sin6_flowinfo, 0);

        ck_assert_int_eq(sockaddr_parse("[2001:db8::1]:443", 0, &ss, &len), 0);
        ck_assert(memcmp(&sin6->sin6_addr, db8_1, 16) == 0);
        ck_assert_uint_eq(ntohs(sin6->sin6_port), 443);

        ck_assert_int_eq(sockaddr_parse("[::ffff:192.0.2.1]:80", 0, &ss, &len), 0);
        ck_assert_int_eq(sin6->sin6_family, AF_INET6);
        ck_assert(IN6_IS_ADDR_V4MAPPED(&sin6->sin6_addr));

        ck_assert_int_eq(sockaddr_parse("[::]:9", 0, &ss, &len), 0);
        ck_assert(IN6_IS_ADDR_UNSPECIFIED(&sin6->sin6_addr));
        ck_assert_int_eq(sockaddr_parse("::", 9, &ss, &len), 0);
        ck_assert_int_eq(sin6->sin6_family, AF_INET6);
        ck_assert(IN6_IS_ADDR_UNSPECIFIED(&sin6->sin6_addr));

        /* Without a port, with or without brackets. */
        ck_assert_int_eq(sockaddr_parse("[::1]", 7000, &ss, &len), 0);
        ck_assert_uint_eq(ntohs(sin6->sin6_port), 7000);
        ck_assert_int_eq(sockaddr_parse("::1", 7000, &ss, &len), 0);
        ck_assert_int_eq(sin6->sin6_family, AF_INET6);
        ck_assert_uint_eq(ntohs(sin6->sin6_port), 7000);
        ck_assert(IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr));
        /* A bare address is taken whole: this is ::1:80, not ::1 port 80. */
        ck_assert_int_eq(sockaddr_parse("::1:80", 7000, &ss, &len), 0);
        ck_assert_uint_eq(ntohs(sin6->sin6_port), 7000);
        ck_assert(!IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr));
}
END_TEST

START_TEST(test_parse_scope)
{
        struct sockaddr_storage ss;
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
        socklen_t len;
        unsigned lo = if_nametoindex("lo");

        /* A numeric scope need not name an interface that exists now. */
        ck_assert_int_eq(sockaddr_parse("[fe80::1%3]:5000", 0, &ss, &len), 0);
        ck_assert(IN6_IS_ADDR_LINKLOCAL(&sin6->sin6_addr));
        ck_assert_uint_eq(sin6->sin6_scope_id, 3);
        ck_assert_uint_eq(ntohs(sin6->sin6_port), 5000);
        ck_assert_int_eq(sockaddr_parse("[ff02::1%4294967295]:5000", 0, &ss, &len), 0);
        ck_assert_uint_eq(sin6->sin6_scope_id, 4294967295u);

        if (lo == 0) {
                fprintf(stderr, "sockaddr: no interface \"lo\" here; scope by name not tested\n");
                return;
        }
        ck_assert_int_eq(sockaddr_parse("[fe80::1%lo]:5000", 0, &ss, &len), 0);
        ck_assert_uint_eq(sin6->sin6_scope_id, lo);
        ck_assert_int_eq(sockaddr_parse("fe80::1%lo", 5000, &ss, &len), 0);
        ck_assert_uint_eq(sin6->sin6_scope_id, lo);
        ck_assert_uint_eq(ntohs(sin6->sin6_port), 5000);
}
END_TEST

START_TEST(test_parse_rejects)
{
        static const char *const junk[] = {
                "",
                ":",
                ":::",
                "[]",
                "[]:80",
                ":80",
                "1.2.3.4:",
                "1.2.3.4:0",
                "1.2.3.4:65536",
                "1.2.3.4:99999",
                "1.2.3.4:123456",
                "1.2.3.4:8a",
                "1.2.3.4:-1",
                "1.2.3.4:+80",
                "1.2.3.4: 80",
                " 1.2.3.4:80",
                "1.2.3.4:80 ",
                "1.2.3.4 ",
                "1.2.3.4:80:90",
                "1.2.3.4.5:80",
                "1.2.3.256:80",
                "1.2.3:80",
                "127.1:80",
                "0x7f000001:80",
                "017.0.0.1:80",
                "1.2.3.4%lo:80",
                "localhost:80",
                "localhost",
                "example.com:443",
                "[::1",
                "[::1:80",
                "::1]:80",
                "[::1]80",
                "[::1]:",
                "[::1]]:80",
                "[[::1]:80",
                "[::1]:0",
                "[::1]:65536",
                "[1.2.3.4]:80",
                "[localhost]:80",
                "[::1] :80",
                "[:::1]:80",
                "[1::2::3]:80",
                "[fe80::1%]:80",
                "[fe80::1%0]:80",
                "[fe80::1%4294967296]:80",
                "[2001:db8::1%lo]:80",
                "[::1%lo]:80",
                "[::1%1]:80",
                "[fe80::1%averyveryverylongname]:80",
        };

        assert_rejected(NULL, 80, -EINVAL);
        for (size_t i = 0; i < ARRAY_SIZE(junk); i++)
                assert_rejected(junk[i], 80, -EINVAL);

        /* No port where the caller gave no default. */
        assert_rejected("1.2.3.4", 0, -EINVAL);
        assert_rejected("[::1]", 0, -EINVAL);
        assert_rejected("::1", 0, -EINVAL);

        /* Well-formed, but no such interface. */
        assert_rejected("[fe80::1%kvdnosuch0]:80", 0, -ENODEV);
        assert_rejected("[fe80::1%lo%lo]:80", 0, -ENODEV);
}
END_TEST

START_TEST(test_round_trip_text)
{
        assert_round_trip("127.0.0.1:5000", 0, "127.0.0.1:5000");
        assert_round_trip("0.0.0.0:1", 0, "0.0.0.0:1");
        assert_round_trip("255.255.255.255:65535", 0, "255.255.255.255:65535");
        assert_round_trip("[::1]:5000", 0, "[::1]:5000");
        assert_round_trip("[::]:5000", 0, "[::]:5000");
        assert_round_trip("[2001:db8::1]:65535", 0, "[2001:db8::1]:65535");
        assert_round_trip("[::ffff:192.0.2.1]:80", 0, "[::ffff:192.0.2.1]:80");

        /* Other spellings come back in the canonical form. */
        assert_round_trip("10.0.0.1", 7000, "10.0.0.1:7000");
        assert_round_trip("::1", 7000, "[::1]:7000");
        assert_round_trip("[::1]", 7000, "[::1]:7000");
        assert_round_trip("[2001:DB8:0:0:0:0:0:1]:80", 0, "[2001:db8::1]:80");
        assert_round_trip("1.2.3.4:00080", 0, "1.2.3.4:80");

        /* A scope comes back by interface name where one has the index. */
        assert_round_trip("[fe80::1%4000000000]:5000", 0, "[fe80::1%4000000000]:5000");
        if (if_nametoindex("lo") != 0) {
                char idx[32], want[64];

                assert_round_trip("[fe80::1%lo]:5000", 0, "[fe80::1%lo]:5000");
                snprintf(idx, sizeof(idx), "[fe80::1%%%u]:5000", if_nametoindex("lo"));
                snprintf(want, sizeof(want), "[fe80::1%%lo]:5000");
                assert_round_trip(idx, 0, want);
        }
}
END_TEST

START_TEST(test_round_trip_binary)
{
        uint64_t s = 0x853c49e6748fea9bu;

        for (unsigned round = 0; round < 500; round++) {
                struct sockaddr_storage a = {0}, b;
                socklen_t alen, blen;
                char buf[SOCKADDR_STR_MAX];
                uint16_t port;

                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                port = (uint16_t)(s % 65535 + 1);

                if (round % 2) {
                        struct sockaddr_in *sin = (struct sockaddr_in *)&a;

                        sin->sin_family = AF_INET;
                        sin->sin_port = htons(port);
                        sin->sin_addr.s_addr = (uint32_t)(s >> 32);
                        alen = sizeof(*sin);
                } else {
                        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&a;

                        sin6->sin6_family = AF_INET6;
                        sin6->sin6_port = htons(port);
                        for (unsigned i = 0; i < 16; i++)
                                sin6->sin6_addr.s6_addr[i] =
                                        (uint8_t)(s >> (i % 8 * 8)) ^ (uint8_t)(i * 31 * round);
                        /* Runs of zeros, which print as "::". */
                        if (round % 3 == 0)
                                memset(sin6->sin6_addr.s6_addr + 2, 0, round % 14);
                        alen = sizeof(*sin6);
                }

                ck_assert_int_eq(sockaddr_format((struct sockaddr *)&a, alen, buf, sizeof(buf)), 0);
                ck_assert_msg(sockaddr_parse(buf, 0, &b, &blen) == 0, "\"%s\"", buf);
                ck_assert_int_eq(blen, alen);
                ck_assert_msg(memcmp(&a, &b, alen) == 0, "\"%s\"", buf);
        }
}
END_TEST

START_TEST(test_format_errors)
{
        struct sockaddr_storage ss;
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
        struct sockaddr_un sun = {.sun_family = AF_UNIX};
        socklen_t len;
        char buf[SOCKADDR_STR_MAX], small[8];

        ck_assert_int_eq(sockaddr_format((struct sockaddr *)&sun, sizeof(sun), buf, sizeof(buf)),
                         -EAFNOSUPPORT);

        ck_assert_int_eq(sockaddr_parse("192.168.100.200:5000", 0, &ss, &len), 0);
        ck_assert_int_eq(sockaddr_format((struct sockaddr *)&ss, len - 1, buf, sizeof(buf)),
                         -EINVAL);
        ck_assert_int_eq(sockaddr_format((struct sockaddr *)&ss, 1, buf, sizeof(buf)), -EINVAL);
        ck_assert_int_eq(sockaddr_format(NULL, len, buf, sizeof(buf)), -EINVAL);

        /* Too small: truncated but terminated; exactly enough: fine. */
        ck_assert_int_eq(sockaddr_format((struct sockaddr *)&ss, len, small, sizeof(small)),
                         -ENOSPC);
        ck_assert_str_eq(small, "192.168");
        ck_assert_int_eq(sockaddr_format((struct sockaddr *)&ss, len, buf, 20), -ENOSPC);
        ck_assert_int_eq(sockaddr_format((struct sockaddr *)&ss, len, buf, 21), 0);
        ck_assert_str_eq(buf, "192.168.100.200:5000");
        ck_assert_int_eq(sockaddr_format((struct sockaddr *)&ss, len, buf, 0), -ENOSPC);

        ck_assert_int_eq(sockaddr_parse("[::1]:5000", 0, &ss, &len), 0);
        ck_assert_int_eq(sockaddr_format((struct sockaddr *)&ss, sizeof(struct sockaddr_in), buf,
                                         sizeof(buf)),
                         -EINVAL);

        /* The longest text there is fits in SOCKADDR_STR_MAX. */
        {
                const char *longest = "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff%4294967295]:65535";

                ck_assert_int_eq(sockaddr_parse(longest, 0, &ss, &len), 0);
                ck_assert_uint_eq(sin6->sin6_scope_id, 4294967295u);
                ck_assert_int_eq(sockaddr_format((struct sockaddr *)&ss, len, buf, sizeof(buf)), 0);
                ck_assert_str_eq(buf, longest);
        }
        ck_assert_int_eq(sockaddr_parse("[::ffff:255.255.255.255]:65535", 0, &ss, &len), 0);
        ck_assert_int_eq(sockaddr_format((struct sockaddr *)&ss, len, buf, sizeof(buf)), 0);
        ck_assert_str_eq(buf, "[::ffff:255.255.255.255]:65535");
}
END_TEST

static Suite *sockaddr_suite(void)
{
        Suite *s = suite_create("sockaddr");
        TCase *parse = tcase_create("parse");
        TCase *format = tcase_create("format");

        tcase_add_test(parse, test_parse_v4);
        tcase_add_test(parse, test_parse_v6);
        tcase_add_test(parse, test_parse_scope);
        tcase_add_test(parse, test_parse_rejects);
        suite_add_tcase(s, parse);

        tcase_add_test(format, test_round_trip_text);
        tcase_add_test(format, test_round_trip_binary);
        tcase_add_test(format, test_format_errors);
        suite_add_tcase(s, format);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(sockaddr_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
