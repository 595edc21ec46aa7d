/* SPDX-License-Identifier: MIT */
/*
 * Unit tests: what a transport packs for a peer to open a channel (a device's info, one end of
 * a path) and unpacks from a peer, which may send anything: round trips through the ops table,
 * the RDMA transport's exact bytes, and short, long, foreign and garbage input refused without
 * reading past it or writing the result. Transports without channels of their own refuse both.
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/transport/transport-set.h"
#include "daemon/transport/transport.h"

/* The RDMA transport as a daemon builds it; packing needs none of its devices. */
static TransportSet set;
static Transport *t;

static void setup(void)
{
        set = (TransportSet){0};
        ck_assert_int_eq(transport_rdma_new(&set, &t), 0);
}

static void teardown(void)
{
        t = transport_free(t);
}

static TransportDeviceInfo sample_device(void)
{
        TransportDeviceInfo d = {
                .device = "rxe0",
                .address = {0xfe, 0x80, [10] = 0xab, [15] = 1},
                .port = 1,
                .mtu = 1024,
                .lid = 0x1234,
        };

        return d;
}

/*
 * Unpacks @len bytes copied to the very end of a heap buffer, so that ASan catches a read past
 * them; checks that a refusal leaves *@ret as it was.
 */
static int device_unpack_exact(const uint8_t *buf, size_t len, TransportDeviceInfo *ret)
{
        uint8_t *copy = malloc(len > 0 ? len : 1);
        TransportDeviceInfo before = *ret;
        int r;

        ck_assert_ptr_nonnull(copy);
        if (len > 0)
                memcpy(copy, buf, len);
        r = transport_device_unpack(t, copy, len, ret);
        if (r < 0)
                ck_assert_mem_eq(ret, &before, sizeof(before));
        free(copy);
        return r;
}

static int path_unpack_exact(const uint8_t *buf, size_t len, TransportPathInfo *ret)
{
        uint8_t *copy = malloc(len > 0 ? len : 1);
        TransportPathInfo before = *ret;
        int r;

        ck_assert_ptr_nonnull(copy);
        if (len > 0)
                memcpy(copy, buf, len);
        r = transport_path_unpack(t, copy, len, ret);
        if (r < 0)
                ck_assert_mem_eq(ret, &before, sizeof(before));
        free(copy);
        return r;
}

START_TEST(test_device_round_trip)
{
        TransportDeviceInfo d = sample_device(), back;
        uint8_t buf[TRANSPORT_PACKED_MAX];
        int n;

        n = transport_device_pack(t, &d, buf, sizeof(buf));
        ck_assert_int_gt(n, 0);
        ck_assert_int_le(n, TRANSPORT_PACKED_MAX);
        memset(&back, 0x5a, sizeof(back));
        ck_assert_int_eq(device_unpack_exact(buf, (size_t)n, &back), 0);
        ck_assert_str_eq(transport_device_name(&back), "rxe0");
        ck_assert_mem_eq(back.address, d.address, TRANSPORT_ADDRESS_SIZE);
        ck_assert_uint_eq(back.port, 1);
        ck_assert_uint_eq(back.mtu, 1024);
        ck_assert_uint_eq(back.lid, 0x1234);

        /* The longest name a device has (63 characters) fits TRANSPORT_PACKED_MAX. */
        memset(d.device, 'm', sizeof(d.device) - 1);
        d.device[sizeof(d.device) - 1] = '\0';
        d.mtu = 4096;
        n = transport_device_pack(t, &d, buf, sizeof(buf));
        ck_assert_int_gt(n, 0);
        ck_assert_int_le(n, TRANSPORT_PACKED_MAX);
        ck_assert_int_eq(device_unpack_exact(buf, (size_t)n, &back), 0);
        ck_assert_str_eq(back.device, d.device);
        ck_assert_uint_eq(back.mtu, 4096);
}
END_TEST

/* The bytes the peer protocol carries do not change under a peer of another build. */
START_TEST(test_device_wire_form)
{
        static const uint8_t expected[] = {
                0x01, 4,    'r', 'x', 'e', '0',                                  /* format, name */
                0xfe, 0x80, 0,   0,   0,   0,   0, 0, 0, 0, 0xab, 0, 0, 0, 0, 1, /* GID */
                1,                                                               /* port */
                0x00, 0x04, 0,   0,                                              /* MTU 1024 */
                0x34, 0x12,                                                      /* LID */
        };
        static const uint8_t path_expected[] = {0x02, 0x56, 0x34, 0x12, 0, 0x05, 0, 0, 0};
        TransportDeviceInfo d = sample_device();
        TransportPathInfo p = {.qpn = 0x123456, .psn = 5};
        uint8_t buf[TRANSPORT_PACKED_MAX];

        ck_assert_int_eq(transport_device_pack(t, &d, buf, sizeof(buf)), (int)sizeof(expected));
        ck_assert_mem_eq(buf, expected, sizeof(expected));
        ck_assert_int_eq(transport_path_pack(t, &p, buf, sizeof(buf)), (int)sizeof(path_expected));
        ck_assert_mem_eq(buf, path_expected, sizeof(path_expected));
}
END_TEST

/*
 * A descriptor of memory has one form too; it unpacks from exactly its bytes, at the end of a
 * heap buffer (ASan catches a read past them), and from nothing else.
 */
START_TEST(test_desc_wire_form)
{
        static const uint8_t expected[] = {
                0x03,                                     /* format */
                0x00, 0x10, 0x32, 0x54, 0x76, 0x98, 0, 0, /* address */
                0x00, 0x00, 0x01, 0,    0,    0,    0, 0, /* length 64 KiB */
                0x78, 0x56, 0x34, 0x12,                   /* rkey */
        };
        TransportRegion r = {
                .transport = t,
                .addr = (void *)(uintptr_t)UINT64_C(0x987654321000),
                .len = 1 << 20,
                .key = {.lkey = 0xdeadbeef, .rkey = 0x12345678},
        };
        TransportRemote m = {0};
        TransportDesc d;
        uint8_t *copy;

        ck_assert_int_eq(transport_region_desc(&r, r.addr, 1 << 16, &d), 0);
        ck_assert_uint_eq(d.len, sizeof(expected));
        ck_assert_mem_eq(d.bytes, expected, sizeof(expected));

        copy = malloc(sizeof(expected));
        ck_assert_ptr_nonnull(copy);
        memcpy(copy, expected, sizeof(expected));
        ck_assert_int_eq(transport_desc_unpack(t, copy, sizeof(expected), &m), 0);
        ck_assert_uint_eq(m.addr, UINT64_C(0x987654321000));
        ck_assert_uint_eq(m.len, 1 << 16);
        ck_assert_uint_eq(m.key, 0x12345678);
        /* A device's or a path's bytes are not a descriptor, whatever their length. */
        copy[0] = 0x01;
        ck_assert_int_eq(transport_desc_unpack(t, copy, sizeof(expected), &m), -EBADMSG);
        copy[0] = 0x02;
        ck_assert_int_eq(transport_desc_unpack(t, copy, sizeof(expected), &m), -EBADMSG);
        free(copy);
}
END_TEST

START_TEST(test_device_pack_refused)
{
        TransportDeviceInfo d = sample_device();
        uint8_t buf[TRANSPORT_PACKED_MAX];
        int n;

        n = transport_device_pack(t, &d, buf, sizeof(buf));
        ck_assert_int_gt(n, 0);
        /* Every buffer too small by one byte or more. */
        for (int size = 0; size < n; size++)
                ck_assert_int_eq(transport_device_pack(t, &d, buf, (size_t)size), -ENOBUFS);
        ck_assert_int_eq(transport_device_pack(t, &d, buf, (size_t)n), n);
        /* A device with no name is none a peer could name back. */
        d.device[0] = '\0';
        ck_assert_int_eq(transport_device_pack(t, &d, buf, sizeof(buf)), -EINVAL);
}
END_TEST

START_TEST(test_device_unpack_refused)
{
        TransportDeviceInfo d = sample_device(), back = {0};
        uint8_t buf[TRANSPORT_PACKED_MAX + 8], bad[TRANSPORT_PACKED_MAX + 8];
        TransportPathInfo p = {.qpn = 17, .psn = 5};
        int n, m;

        n = transport_device_pack(t, &d, buf, sizeof(buf));
        ck_assert_int_gt(n, 0);

        /* Truncated anywhere, empty, and NULL. */
        for (int len = 0; len < n; len++)
                ck_assert_int_eq(device_unpack_exact(buf, (size_t)len, &back), -EBADMSG);
        ck_assert_int_eq(transport_device_unpack(t, NULL, 0, &back), -EBADMSG);
        ck_assert_int_eq(transport_device_unpack(t, NULL, 12, &back), -EBADMSG);
        /* Oversized: trailing bytes of any kind. */
        memcpy(bad, buf, (size_t)n);
        bad[n] = 0;
        ck_assert_int_eq(device_unpack_exact(bad, (size_t)n + 1, &back), -EBADMSG);
        ck_assert_int_eq(device_unpack_exact(bad, sizeof(bad), &back), -EBADMSG);
        /* A name length that says more or less than there is. */
        memcpy(bad, buf, (size_t)n);
        bad[1] = 5;
        ck_assert_int_eq(device_unpack_exact(bad, (size_t)n, &back), -EBADMSG);
        bad[1] = 3;
        ck_assert_int_eq(device_unpack_exact(bad, (size_t)n, &back), -EBADMSG);
        bad[1] = 0xff;
        ck_assert_int_eq(device_unpack_exact(bad, (size_t)n, &back), -EBADMSG);
        /* Another format: a path's bytes, or an unknown first byte. */
        m = transport_path_pack(t, &p, bad, sizeof(bad));
        ck_assert_int_gt(m, 0);
        ck_assert_int_eq(device_unpack_exact(bad, (size_t)m, &back), -EBADMSG);
        memcpy(bad, buf, (size_t)n);
        bad[0] = 0x7f;
        ck_assert_int_eq(device_unpack_exact(bad, (size_t)n, &back), -EBADMSG);
        /* Values out of range: a NUL inside the name, an MTU no port has. */
        memcpy(bad, buf, (size_t)n);
        bad[3] = '\0';
        ck_assert_int_eq(device_unpack_exact(bad, (size_t)n, &back), -EINVAL);
        d.mtu = 1000;
        ck_assert_int_eq(transport_device_pack(t, &d, bad, sizeof(bad)), n);
        ck_assert_int_eq(device_unpack_exact(bad, (size_t)n, &back), -EINVAL);
        d.mtu = 0;
        ck_assert_int_eq(transport_device_pack(t, &d, bad, sizeof(bad)), n);
        ck_assert_int_eq(device_unpack_exact(bad, (size_t)n, &back), -EINVAL);
        d.mtu = 8192;
        ck_assert_int_eq(transport_device_pack(t, &d, bad, sizeof(bad)), n);
        ck_assert_int_eq(device_unpack_exact(bad, (size_t)n, &back), -EINVAL);
        /* An empty name: the smallest input that parses up to the name. */
        {
                static const uint8_t empty[] = {0x01, 0, [2 + 16] = 1, 0, 4, 0, 0, 0, 0};

                ck_assert_int_eq(device_unpack_exact(empty, sizeof(empty), &back), -EINVAL);
        }
        /* Garbage of every length behind the right first byte (a fixed seed: the same bytes
         * every run). */
        srand(20);
        for (size_t len = 0; len < sizeof(bad); len++) {
                for (size_t k = 0; k < len; k++)
                        bad[k] = (uint8_t)rand();
                if (len > 0)
                        bad[0] = 0x01;
                ck_assert_int_lt(device_unpack_exact(bad, len, &back), 0);
        }
        /* Nothing above wrote the result. */
        ck_assert_uint_eq(back.mtu, 0);
        ck_assert_str_eq(back.device, "");
}
END_TEST

START_TEST(test_path_round_trip)
{
        TransportPathInfo p = {.qpn = 0xffffff, .psn = 0xabcdef}, back = {0};
        uint8_t buf[TRANSPORT_PACKED_MAX];
        int n;

        n = transport_path_pack(t, &p, buf, sizeof(buf));
        ck_assert_int_gt(n, 0);
        ck_assert_int_le(n, TRANSPORT_PACKED_MAX);
        ck_assert_int_eq(path_unpack_exact(buf, (size_t)n, &back), 0);
        ck_assert_uint_eq(back.qpn, 0xffffff);
        ck_assert_uint_eq(back.psn, 0xabcdef);
        p = (TransportPathInfo){0};
        n = transport_path_pack(t, &p, buf, sizeof(buf));
        ck_assert_int_eq(path_unpack_exact(buf, (size_t)n, &back), 0);
        ck_assert_uint_eq(back.qpn, 0);
        ck_assert_uint_eq(back.psn, 0);
}
END_TEST

START_TEST(test_path_refused)
{
        TransportPathInfo p = {.qpn = 17, .psn = 5}, back = {.qpn = 99, .psn = 98};
        TransportDeviceInfo d = sample_device();
        uint8_t buf[TRANSPORT_PACKED_MAX], bad[TRANSPORT_PACKED_MAX];
        int n, m;

        n = transport_path_pack(t, &p, buf, sizeof(buf));
        ck_assert_int_gt(n, 0);
        for (int size = 0; size < n; size++)
                ck_assert_int_eq(transport_path_pack(t, &p, buf, (size_t)size), -ENOBUFS);
        /* Queue pair numbers and PSNs have 24 bits. */
        ck_assert_int_eq(
                transport_path_pack(t, &(TransportPathInfo){1u << 24, 0}, bad, sizeof(bad)),
                -EINVAL);
        ck_assert_int_eq(
                transport_path_pack(t, &(TransportPathInfo){0, 1u << 24}, bad, sizeof(bad)),
                -EINVAL);

        for (int len = 0; len < n; len++)
                ck_assert_int_eq(path_unpack_exact(buf, (size_t)len, &back), -EBADMSG);
        ck_assert_int_eq(transport_path_unpack(t, NULL, 0, &back), -EBADMSG);
        ck_assert_int_eq(transport_path_unpack(t, NULL, 9, &back), -EBADMSG);
        memcpy(bad, buf, (size_t)n);
        bad[n] = 0;
        ck_assert_int_eq(path_unpack_exact(bad, (size_t)n + 1, &back), -EBADMSG);
        /* A device's bytes are no path. */
        m = transport_device_pack(t, &d, bad, sizeof(bad));
        ck_assert_int_gt(m, 0);
        ck_assert_int_eq(path_unpack_exact(bad, (size_t)m, &back), -EBADMSG);
        /* 24 bits each, from a peer too. */
        memcpy(bad, buf, (size_t)n);
        bad[4] = 1; /* the QP number's top byte */
        ck_assert_int_eq(path_unpack_exact(bad, (size_t)n, &back), -EINVAL);
        memcpy(bad, buf, (size_t)n);
        bad[8] = 0x80; /* the PSN's */
        ck_assert_int_eq(path_unpack_exact(bad, (size_t)n, &back), -EINVAL);
        srand(21);
        for (size_t len = 0; len < sizeof(bad); len++) {
                for (size_t k = 0; k < len; k++)
                        bad[k] = (uint8_t)rand();
                if (len > 0)
                        bad[0] = 0x02;
                ck_assert_int_lt(path_unpack_exact(bad, len, &back), 0);
        }
        ck_assert_uint_eq(back.qpn, 99);
        ck_assert_uint_eq(back.psn, 98);
}
END_TEST

/* Transports that open no channels of their own have nothing to pack or unpack. */
START_TEST(test_no_channels_no_packing)
{
        TransportDeviceInfo d = sample_device(), back;
        TransportPathInfo p = {1, 2}, pback;
        uint8_t buf[TRANSPORT_PACKED_MAX] = {0x01};
        TransportSet other = {0};
        Transport *tcp = NULL;

        ck_assert_int_eq(transport_tcp_new(&other, &tcp), 0);
        ck_assert_int_eq(transport_device_pack(tcp, &d, buf, sizeof(buf)), -EOPNOTSUPP);
        ck_assert_int_eq(transport_device_unpack(tcp, buf, sizeof(buf), &back), -EOPNOTSUPP);
        ck_assert_int_eq(transport_path_pack(tcp, &p, buf, sizeof(buf)), -EOPNOTSUPP);
        ck_assert_int_eq(transport_path_unpack(tcp, buf, sizeof(buf), &pback), -EOPNOTSUPP);
        /* No transport at all (a set built without it). */
        ck_assert_int_eq(transport_device_pack(NULL, &d, buf, sizeof(buf)), -EOPNOTSUPP);
        ck_assert_int_eq(transport_device_unpack(NULL, buf, sizeof(buf), &back), -EOPNOTSUPP);
        ck_assert_int_eq(transport_path_pack(NULL, &p, buf, sizeof(buf)), -EOPNOTSUPP);
        ck_assert_int_eq(transport_path_unpack(NULL, buf, sizeof(buf), &pback), -EOPNOTSUPP);
        transport_free(tcp);
}
END_TEST

static Suite *transport_pack_suite(void)
{
        Suite *s = suite_create("transport-pack");
        TCase *tc = tcase_create("device");

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_device_round_trip);
        tcase_add_test(tc, test_device_wire_form);
        tcase_add_test(tc, test_desc_wire_form);
        tcase_add_test(tc, test_device_pack_refused);
        tcase_add_test(tc, test_device_unpack_refused);
        suite_add_tcase(s, tc);

        tc = tcase_create("path");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_path_round_trip);
        tcase_add_test(tc, test_path_refused);
        tcase_add_test(tc, test_no_channels_no_packing);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(transport_pack_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
