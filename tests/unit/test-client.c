/* SPDX-License-Identifier: MIT */
/*
 * libkvdist against a fake kvdistd (fake-daemon.c): status names, connecting and the Hello,
 * client options, requests and the last error, memory regions, pool caches and registration
 * checks, and links. Each test gives the fake a script of what the daemon receives and answers,
 * drives the library against it, and checks after fake_stop() what the script recorded.
 * Waiting on replies, and a daemon that goes away, are in test-client-wait.c.
 */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/unit/fake-daemon.h"
#include <kvdist/kvdist.h>
#include "common/macro.h"

/* --- status names ---------------------------------------------------------------------- */

START_TEST(test_strerror_every_code)
{
        for (int s = _KVD_E_MIN; s <= 0; s++) {
                const char *name = kvd_strerror(s);

                ck_assert_ptr_nonnull(name);
                ck_assert_msg(strncmp(name, "KVD_", 4) == 0, "status %d is named \"%s\"", s, name);
                for (int t = _KVD_E_MIN; t < s; t++)
                        ck_assert_str_ne(name, kvd_strerror(t));
        }
        ck_assert_str_eq(kvd_strerror(KVD_OK), "KVD_OK");
        ck_assert_str_eq(kvd_strerror(KVD_E_TIMEOUT), "KVD_E_TIMEOUT");
        ck_assert_str_eq(kvd_strerror(KVD_E_BUSY), "KVD_E_BUSY");
        ck_assert_str_eq(kvd_strerror(1), "unknown status");
        ck_assert_str_eq(kvd_strerror(_KVD_E_MIN - 1), "unknown status");
}
END_TEST

/* --- connecting ------------------------------------------------------------------------ */

START_TEST(test_no_socket)
{
        char dir[] = "/tmp/test-client-XXXXXX", path[108];
        kvd_option opts[] = {{"socket_path", path}, {"device_id", "0"}};
        kvd_client *c = NULL;

        ck_assert_ptr_nonnull(mkdtemp(dir));
        snprintf(path, sizeof(path), "%s/missing.sock", dir);

        ck_assert_int_eq(kvd_client_connect(opts, 1, &c), KVD_E_DAEMON_UNAVAILABLE);
        ck_assert_ptr_null(c);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(NULL), path));

        ck_assert_int_eq(kvd_client_init(1, KVD_ROLE_PROMPT, opts, 2, &c),
                         KVD_E_DAEMON_UNAVAILABLE);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(NULL), path));

        /* $KVDIST_SOCKET is used when no option names a path. */
        setenv("KVDIST_SOCKET", path, 1);
        ck_assert_int_eq(kvd_client_connect(NULL, 0, &c), KVD_E_DAEMON_UNAVAILABLE);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(NULL), path));
        unsetenv("KVDIST_SOCKET");

        rmdir(dir);
}
END_TEST

static void script_hello_error(FakeDaemon *d, int fd)
{
        const Kvdist__V1__Hello *hello;
        FakeFrame f;

        EXPECT(d, fake_recv(d, fd, &f) == 1);
        EXPECT(d, f.h.type == KVDIST__V1__MSG_TYPE__MSG_HELLO);
        hello = (const Kvdist__V1__Hello *)f.msg;
        d->u[0] = f.h.request_id;
        d->u[1] = hello->protocol_version;
        snprintf(d->str, sizeof(d->str), "%s", hello->identity);
        EXPECT(d, fake_error(fd, &f, KVD_E_PROTOCOL_MISMATCH, "kvdistd speaks protocol 7") == 0);
        fake_frame_done(&f);
}

START_TEST(test_hello_mismatch)
{
        FakeDaemon d;
        kvd_client *c = NULL;

        fake_start(&d, script_hello_error);
        ck_assert_int_eq(kvd_client_connect(&(kvd_option){"socket_path", d.path}, 1, &c),
                         KVD_E_PROTOCOL_MISMATCH);
        ck_assert_ptr_null(c);
        ck_assert_str_eq(kvd_last_error(NULL), "kvdistd speaks protocol 7");
        fake_stop(&d);

        ck_assert_uint_eq(d.u[0], 1);
        ck_assert_uint_eq(d.u[1], 1);
        ck_assert_str_eq(d.str, "libkvdist/" KVDIST_VERSION);
}
END_TEST

static void script_hello_version(FakeDaemon *d, int fd)
{
        Kvdist__V1__HelloReply hr = KVDIST__V1__HELLO_REPLY__INIT;
        FakeFrame f;

        EXPECT(d, fake_recv(d, fd, &f) == 1);
        hr.protocol_version = 2;
        EXPECT(d, fake_reply(fd, &f, &hr.base, NULL, 0) == 0);
        fake_frame_done(&f);
}

START_TEST(test_hello_other_version)
{
        FakeDaemon d;
        kvd_client *c = NULL;

        fake_start(&d, script_hello_version);
        ck_assert_int_eq(kvd_client_connect(&(kvd_option){"socket_path", d.path}, 1, &c),
                         KVD_E_PROTOCOL_MISMATCH);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(NULL), "protocol 2"));
        fake_stop(&d);
}
END_TEST

static void script_hello_denied(FakeDaemon *d, int fd)
{
        FakeFrame f;

        EXPECT(d, fake_recv(d, fd, &f) == 1);
        EXPECT(d, fake_status(fd, &f, KVD_E_PERMISSION_DENIED, "uid 1234 is not allowed") == 0);
        fake_frame_done(&f);
}

START_TEST(test_hello_denied)
{
        FakeDaemon d;
        kvd_client *c = NULL;

        fake_start(&d, script_hello_denied);
        ck_assert_int_eq(
                kvd_client_init(3, KVD_ROLE_MIX,
                                (kvd_option[]){{"socket_path", d.path}, {"device_id", "1"}}, 2, &c),
                KVD_E_PERMISSION_DENIED);
        ck_assert_str_eq(kvd_last_error(NULL), "uid 1234 is not allowed");
        fake_stop(&d);
}
END_TEST

/* The daemon refuses the connection and says why, after the Hello came in. */
static void script_farewell_after_hello(FakeDaemon *d, int fd)
{
        FakeFrame f;

        EXPECT(d, fake_recv(d, fd, &f) == 1);
        EXPECT(d, fake_farewell(fd, KVD_E_PERMISSION_DENIED, "kvdistd refuses uid 1234") == 0);
        fake_frame_done(&f);
}

START_TEST(test_hello_farewell)
{
        FakeDaemon d;
        kvd_client *c = NULL;

        fake_start(&d, script_farewell_after_hello);
        ck_assert_int_eq(
                kvd_client_init(3, KVD_ROLE_MIX,
                                (kvd_option[]){{"socket_path", d.path}, {"device_id", "1"}}, 2, &c),
                KVD_E_PERMISSION_DENIED);
        ck_assert_ptr_null(c);
        ck_assert_str_eq(kvd_last_error(NULL), "kvdistd refuses uid 1234");
        fake_stop(&d);
}
END_TEST

/* Hello, then a farewell and the close before the client sends anything else. */
static void script_farewell_later(FakeDaemon *d, int fd)
{
        EXPECT(d, fake_handshake(d, fd, false) == 0);
        EXPECT(d, fake_farewell(fd, KVD_E_LIMIT_EXCEEDED, "kvdistd has 8 connections open") == 0);
}

START_TEST(test_farewell_under_send)
{
        FakeDaemon d;
        kvd_client *c = NULL;
        char *json = NULL;

        fake_start(&d, script_farewell_later);
        ck_assert_int_eq(kvd_client_connect(&(kvd_option){"socket_path", d.path}, 1, &c), KVD_OK);
        /* The fake has closed its end: the request's send fails with EPIPE, and the client reads
         * what the daemon said before it closed. */
        fake_stop(&d);
        ck_assert_int_eq(kvd_daemon_status(c, &json), KVD_E_LIMIT_EXCEEDED);
        ck_assert_str_eq(kvd_last_error(c), "kvdistd has 8 connections open");
        /* The connection is dead for good, for the same reason. */
        ck_assert_int_eq(kvd_daemon_status(c, &json), KVD_E_LIMIT_EXCEEDED);
        ck_assert_str_eq(kvd_last_error(c), "kvdistd has 8 connections open");
        ck_assert_ptr_null(json);
        ck_assert_int_eq(kvd_client_finalize(c), KVD_OK);
}
END_TEST

/* --- options --------------------------------------------------------------------------- */

/* Init with a missing socket: bad options fail with PARAM_INVALID before any connect. */
static int init_with(const char *socket_path, kvd_role role, const char *key, const char *value)
{
        kvd_option opts[] = {{"socket_path", socket_path}, {"device_id", "0"}, {key, value}};
        kvd_client *c = NULL;
        int r;

        /* A key of "device_id" replaces the default one. */
        if (key && strcmp(key, "device_id") == 0)
                r = kvd_client_init(1, role, (kvd_option[]){opts[0], opts[2]}, 2, &c);
        else
                r = kvd_client_init(1, role, opts, key ? 3 : 2, &c);
        ck_assert_ptr_null(c);
        return r;
}

START_TEST(test_options)
{
        const char *path = "/tmp/test-client-nonexistent/kvdist.sock";
        kvd_client *c = NULL;

        /* Valid options get as far as connecting. */
        ck_assert_int_eq(init_with(path, KVD_ROLE_PROMPT, NULL, NULL), KVD_E_DAEMON_UNAVAILABLE);
        ck_assert_int_eq(init_with(path, KVD_ROLE_PROMPT, "sync_kv_timeout_ms", "2147483647"),
                         KVD_E_DAEMON_UNAVAILABLE);
        ck_assert_int_eq(init_with(path, KVD_ROLE_PROMPT, "listen_ip_info", "[::1]:26000"),
                         KVD_E_DAEMON_UNAVAILABLE);

        ck_assert_int_eq(
                kvd_client_init(1, KVD_ROLE_PROMPT, &(kvd_option){"socket_path", path}, 1, &c),
                KVD_E_PARAM_INVALID);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(NULL), "device_id"));

        static const char *const bad_device[] = {"-1", "abc", "1x", "", " 1", "2147483648"};
        for (size_t i = 0; i < ARRAY_SIZE(bad_device); i++) {
                ck_assert_int_eq(init_with(path, KVD_ROLE_PROMPT, "device_id", bad_device[i]),
                                 KVD_E_PARAM_INVALID);
                ck_assert_ptr_nonnull(strstr(kvd_last_error(NULL), "device_id"));
        }

        static const char *const bad_timeout[] = {"0", "-5", "2147483648", "10ms"};
        for (size_t i = 0; i < ARRAY_SIZE(bad_timeout); i++) {
                ck_assert_int_eq(
                        init_with(path, KVD_ROLE_PROMPT, "sync_kv_timeout_ms", bad_timeout[i]),
                        KVD_E_PARAM_INVALID);
                ck_assert_ptr_nonnull(strstr(kvd_last_error(NULL), "sync_kv_timeout_ms"));
        }

        ck_assert_int_eq(init_with(path, KVD_ROLE_PROMPT, "colour", "blue"), KVD_E_PARAM_INVALID);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(NULL), "colour"));
        ck_assert_int_eq(init_with(path, KVD_ROLE_PROMPT, "socket_path", "/x"),
                         KVD_E_PARAM_INVALID);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(NULL), "twice"));
        ck_assert_int_eq(init_with(path, KVD_ROLE_PROMPT, "listen_ip_info", NULL),
                         KVD_E_PARAM_INVALID);

        ck_assert_int_eq(init_with(path, 0, NULL, NULL), KVD_E_PARAM_INVALID);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(NULL), "role"));
        ck_assert_int_eq(init_with(path, 4, NULL, NULL), KVD_E_PARAM_INVALID);

        /* kvd_client_connect() takes only "socket_path". */
        ck_assert_int_eq(kvd_client_connect(
                                 (kvd_option[]){{"socket_path", path}, {"device_id", "0"}}, 2, &c),
                         KVD_E_PARAM_INVALID);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(NULL), "device_id"));
        ck_assert_int_eq(kvd_client_connect(NULL, 0, NULL), KVD_E_PARAM_INVALID);
        ck_assert_int_eq(kvd_client_init(1, KVD_ROLE_PROMPT, NULL, 1, &c), KVD_E_PARAM_INVALID);
}
END_TEST

/* --- init, calls, last error, finalize ------------------------------------------------- */

static void script_init_calls(FakeDaemon *d, int fd)
{
        Kvdist__V1__HelloReply hr = KVDIST__V1__HELLO_REPLY__INIT;
        Kvdist__V1__ClientInitReply ir = KVDIST__V1__CLIENT_INIT_REPLY__INIT;
        Kvdist__V1__DaemonStatusReply sr = KVDIST__V1__DAEMON_STATUS_REPLY__INIT;
        const Kvdist__V1__ClientInit *init;
        FakeFrame f;

        EXPECT(d, fake_recv(d, fd, &f) == 1);
        hr.protocol_version = 1;
        EXPECT(d, fake_reply(fd, &f, &hr.base, NULL, 0) == 0);
        fake_frame_done(&f);

        EXPECT(d, fake_recv(d, fd, &f) == 1);
        EXPECT(d, f.h.type == KVDIST__V1__MSG_TYPE__MSG_CLIENT_INIT);
        init = (const Kvdist__V1__ClientInit *)f.msg;
        d->u[0] = f.h.request_id;
        d->u[1] = init->cluster_id;
        d->u[2] = (uint64_t)init->role;
        d->s[0] = init->device_id;
        d->u[3] = init->sync_kv_timeout_ms;
        snprintf(d->str, sizeof(d->str), "%s", init->listen_ip_info);
        ir.sync_kv_timeout_ms = 1500;
        EXPECT(d, fake_reply(fd, &f, &ir.base, NULL, 0) == 0);
        fake_frame_done(&f);

        EXPECT(d, fake_recv(d, fd, &f) == 1);
        EXPECT(d, f.h.type == KVDIST__V1__MSG_TYPE__MSG_CHECK_LINK_STATUS);
        d->u[4] = f.h.request_id;
        d->u[5] = ((const Kvdist__V1__CheckLinkStatus *)f.msg)->remote_cluster_id;
        EXPECT(d, fake_status(fd, &f, KVD_E_NOT_YET_LINK, "no link to cluster 9") == 0);
        fake_frame_done(&f);

        EXPECT(d, fake_recv(d, fd, &f) == 1);
        EXPECT(d, f.h.type == KVDIST__V1__MSG_TYPE__MSG_DAEMON_STATUS);
        sr.json = (char *)"{\"version\": \"0.1.0\"}";
        EXPECT(d, fake_reply(fd, &f, &sr.base, NULL, 0) == 0);
        fake_frame_done(&f);

        /* An error frame (bare Status) for a request the daemon does not know. */
        EXPECT(d, fake_recv(d, fd, &f) == 1);
        EXPECT(d, f.h.type == KVDIST__V1__MSG_TYPE__MSG_SWITCH_ROLE);
        snprintf(d->str + 128, 128, "%s", ((const Kvdist__V1__SwitchRole *)f.msg)->listen_ip_info);
        d->u[6] = (uint64_t)((const Kvdist__V1__SwitchRole *)f.msg)->role;
        EXPECT(d, fake_error(fd, &f, KVD_E_UNSUPPORTED, "SwitchRole is not supported") == 0);
        fake_frame_done(&f);

        EXPECT(d, fake_finalize(d, fd) == 0);
}

START_TEST(test_init_and_calls)
{
        kvd_option opts[] = {
                {"socket_path", NULL},
                {"device_id", "3"},
                {"sync_kv_timeout_ms", "700"},
                {"listen_ip_info", "127.0.0.1:26000"},
        };
        FakeDaemon d;
        kvd_client *c = NULL;
        char *json = NULL;

        fake_start(&d, script_init_calls);
        opts[0].value = d.path;
        ck_assert_int_eq(kvd_client_init(77, KVD_ROLE_PROMPT, opts, ARRAY_SIZE(opts), &c), KVD_OK);

        ck_assert_int_eq(kvd_check_link_status(c, 9), KVD_E_NOT_YET_LINK);
        ck_assert_str_eq(kvd_last_error(c), "no link to cluster 9");
        /* The record is per client. */
        ck_assert_str_eq(kvd_last_error(NULL), "");
        ck_assert_str_eq(kvd_last_error((kvd_client *)&d), "");

        ck_assert_int_eq(kvd_daemon_status(c, &json), KVD_OK);
        ck_assert_str_eq(json, "{\"version\": \"0.1.0\"}");
        free(json);

        ck_assert_int_eq(
                kvd_switch_role(c, KVD_ROLE_MIX, &(kvd_option){"listen_ip_info", "10.0.0.1:1"}, 1),
                KVD_E_UNSUPPORTED);
        ck_assert_str_eq(kvd_last_error(c), "SwitchRole is not supported");
        /* Library-side checks send nothing. */
        ck_assert_int_eq(kvd_switch_role(c, 9, NULL, 0), KVD_E_PARAM_INVALID);
        ck_assert_int_eq(kvd_switch_role(c, KVD_ROLE_MIX, &(kvd_option){"device_id", "1"}, 1),
                         KVD_E_PARAM_INVALID);

        ck_assert_int_eq(kvd_client_finalize(c), KVD_OK);
        fake_stop(&d);

        ck_assert_uint_eq(d.u[0], 2); /* Hello was request 1 */
        ck_assert_uint_eq(d.u[1], 77);
        ck_assert_uint_eq(d.u[2], KVDIST__V1__ROLE__ROLE_PROMPT);
        ck_assert_int_eq(d.s[0], 3);
        ck_assert_uint_eq(d.u[3], 700);
        ck_assert_str_eq(d.str, "127.0.0.1:26000");
        ck_assert_uint_eq(d.u[4], 3);
        ck_assert_uint_eq(d.u[5], 9);
        ck_assert_str_eq(d.str + 128, "10.0.0.1:1");
        ck_assert_uint_eq(d.u[6], KVDIST__V1__ROLE__ROLE_MIX);
        ck_assert_uint_eq(d.n_types, 6);
}
END_TEST

/* --- memory ---------------------------------------------------------------------------- */

static void script_mem(FakeDaemon *d, int fd)
{
        Kvdist__V1__RegionAddReply ar = KVDIST__V1__REGION_ADD_REPLY__INIT;
        const Kvdist__V1__RegionAdd *add;
        struct stat st;
        uint8_t *map;
        FakeFrame f;

        EXPECT(d, fake_handshake(d, fd, true) == 0);

        EXPECT(d, fake_recv(d, fd, &f) == 1);
        EXPECT(d, f.h.type == KVDIST__V1__MSG_TYPE__MSG_REGION_ADD);
        EXPECT(d, f.n_fds == 1);
        add = (const Kvdist__V1__RegionAdd *)f.msg;
        d->u[0] = add->size;
        d->u[1] = add->client_addr;
        d->s[0] = fcntl(f.fds[0], F_GET_SEALS);
        EXPECT(d, fstat(f.fds[0], &st) == 0);
        d->s[1] = st.st_size;
        /* What the daemon writes, the client sees. */
        map = mmap(NULL, add->size, PROT_READ | PROT_WRITE, MAP_SHARED, f.fds[0], 0);
        EXPECT(d, map != MAP_FAILED);
        map[100] = 0xab;
        munmap(map, add->size);
        ar.region_id = 42;
        EXPECT(d, fake_reply(fd, &f, &ar.base, NULL, 0) == 0);
        fake_frame_done(&f);

        EXPECT(d, fake_recv(d, fd, &f) == 1);
        EXPECT(d, f.h.type == KVDIST__V1__MSG_TYPE__MSG_REGION_REMOVE);
        d->u[2] = ((const Kvdist__V1__RegionRemove *)f.msg)->region_id;
        EXPECT(d, fake_status(fd, &f, KVD_E_BUSY, "cache 3 lies in region 42") == 0);
        fake_frame_done(&f);

        EXPECT(d, fake_recv(d, fd, &f) == 1);
        EXPECT(d, f.h.type == KVDIST__V1__MSG_TYPE__MSG_REGION_REMOVE);
        d->u[3] = ((const Kvdist__V1__RegionRemove *)f.msg)->region_id;
        EXPECT(d, fake_status(fd, &f, KVD_OK, NULL) == 0);
        fake_frame_done(&f);

        EXPECT(d, fake_finalize(d, fd) == 0);
}

START_TEST(test_mem_alloc_free)
{
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        FakeDaemon d;
        kvd_client *c;
        uint8_t *p = NULL;

        fake_start(&d, script_mem);
        c = fake_client_init(&d);

        ck_assert_int_eq(kvd_mem_alloc(c, 0, (void **)&p), KVD_E_PARAM_INVALID);
        ck_assert_int_eq(kvd_mem_alloc(c, 2 * page + 1, (void **)&p), KVD_OK);
        ck_assert_ptr_nonnull(p);
        ck_assert_uint_eq((uintptr_t)p % page, 0);
        ck_assert_uint_eq(p[100], 0xab);
        ck_assert_uint_eq(p[101], 0);
        p[3 * page - 1] = 1; /* rounded up to whole pages */

        ck_assert_int_eq(kvd_mem_free(c, p + 1), KVD_E_PARAM_INVALID);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(c), "kvd_mem_alloc"));
        ck_assert_int_eq(kvd_mem_free(c, p), KVD_E_BUSY);
        ck_assert_str_eq(kvd_last_error(c), "cache 3 lies in region 42");
        ck_assert_uint_eq(p[100], 0xab); /* still mapped */
        ck_assert_int_eq(kvd_mem_free(c, p), KVD_OK);
        ck_assert_int_eq(kvd_mem_free(c, p), KVD_E_PARAM_INVALID);

        ck_assert_int_eq(kvd_client_finalize(c), KVD_OK);
        fake_stop(&d);

        ck_assert_uint_eq(d.u[0], 3 * page);
        ck_assert_uint_eq(d.u[1], (uintptr_t)p);
        ck_assert_int_eq(d.s[0], F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
        ck_assert_int_eq(d.s[1], (int64_t)(3 * page));
        ck_assert_uint_eq(d.u[2], 42);
        ck_assert_uint_eq(d.u[3], 42);
}
END_TEST

/* --- pool caches ----------------------------------------------------------------------- */

#define POOL_SIZE (1u << 20)

static void script_pool(FakeDaemon *d, int fd)
{
        Kvdist__V1__PoolMapReply pr = KVDIST__V1__POOL_MAP_REPLY__INIT;
        Kvdist__V1__AllocateCacheReply ar = KVDIST__V1__ALLOCATE_CACHE_REPLY__INIT;
        const Kvdist__V1__AllocateCache *alloc;
        uint64_t offsets[2] = {4096, 8192};
        _cleanup_close_ int pool = -1;
        uint8_t *map;
        FakeFrame f;

        EXPECT(d, fake_handshake(d, fd, true) == 0);

        EXPECT(d, fake_recv(d, fd, &f) == 1);
        EXPECT(d, f.h.type == KVDIST__V1__MSG_TYPE__MSG_POOL_MAP);
        pool = memfd_create("fake-pool", MFD_CLOEXEC);
        EXPECT(d, pool >= 0 && ftruncate(pool, POOL_SIZE) == 0);
        map = mmap(NULL, POOL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, pool, 0);
        EXPECT(d, map != MAP_FAILED);
        map[8192] = 0x5a;
        munmap(map, POOL_SIZE);
        pr.size = POOL_SIZE;
        pr.page_shift = 12;
        EXPECT(d, fake_reply(fd, &f, &pr.base, &pool, 1) == 0);
        fake_frame_done(&f);

        for (int i = 0; i < 2; i++) {
                EXPECT(d, fake_recv(d, fd, &f) == 1);
                EXPECT(d, f.h.type == KVDIST__V1__MSG_TYPE__MSG_ALLOCATE_CACHE);
                alloc = (const Kvdist__V1__AllocateCache *)f.msg;
                EXPECT(d, alloc->desc && alloc->desc->n_shape == 2);
                d->u[i * 4 + 0] = alloc->desc->num_tensors;
                d->u[i * 4 + 1] = (uint64_t)alloc->desc->shape[1];
                d->u[i * 4 + 2] = alloc->blocks;
                d->u[i * 4 + 3] = alloc->n_keys;
                if (alloc->n_keys == 1 &&
                    alloc->keys[0]->kind_case == KVDIST__V1__CACHE_KEY__KIND_BLOCKS)
                        d->u[8] = alloc->keys[0]->blocks->model_id;
                ar.cache_id = 7 + (uint64_t)i;
                ar.n_pool_offsets = 2;
                ar.pool_offsets = offsets;
                EXPECT(d, fake_reply(fd, &f, &ar.base, NULL, 0) == 0);
                fake_frame_done(&f);
        }

        EXPECT(d, fake_finalize(d, fd) == 0);
}

START_TEST(test_allocate_cache)
{
        kvd_cache_desc desc = {
                .num_tensors = 2, .n_dims = 2, .shape = {4, 512}, .data_type = KVD_DT_FLOAT16};
        kvd_cache_key keys[] = {kvd_key_req(1, 100, 0), kvd_key_req(1, 101, 0)};
        kvd_cache_key bkey = kvd_key_blocks(1, 33);
        void *addrs[2] = {};
        uint64_t id = 0;
        FakeDaemon d;
        kvd_client *c;

        fake_start(&d, script_pool);
        c = fake_client_init(&d);

        /* More keys than batch slots is refused before anything is sent. */
        ck_assert_int_eq(kvd_allocate_cache(c, &desc, keys, 5, &id, addrs), KVD_E_PARAM_INVALID);

        ck_assert_int_eq(kvd_allocate_cache(c, &desc, keys, 2, &id, addrs), KVD_OK);
        ck_assert_uint_eq(id, 7);
        ck_assert_ptr_nonnull(addrs[0]);
        ck_assert_uint_eq((uintptr_t)addrs[1] - (uintptr_t)addrs[0], 4096);
        ck_assert_uint_eq(*(uint8_t *)addrs[1], 0x5a);

        /* The pool is mapped once per client. */
        ck_assert_int_eq(kvd_allocate_blocks_cache(c, &desc, &bkey, &id, NULL), KVD_OK);
        ck_assert_uint_eq(id, 8);

        ck_assert_int_eq(kvd_client_finalize(c), KVD_OK);
        fake_stop(&d);

        ck_assert_uint_eq(d.u[0], 2);
        ck_assert_uint_eq(d.u[1], 512);
        ck_assert_uint_eq(d.u[2], 0);
        ck_assert_uint_eq(d.u[3], 2);
        ck_assert_uint_eq(d.u[6], 1);
        ck_assert_uint_eq(d.u[7], 1);
        ck_assert_uint_eq(d.u[8], 33);
        ck_assert_uint_eq(d.n_types, 6); /* Hello, Init, PoolMap, 2 x Allocate, Finalize */
}
END_TEST

/* Nothing obviously wrong reaches the daemon: the next request it sees is ClientFinalize. */
static void script_only_finalize(FakeDaemon *d, int fd)
{
        EXPECT(d, fake_handshake(d, fd, true) == 0);
        EXPECT(d, fake_finalize(d, fd) == 0);
}

START_TEST(test_register_validation)
{
        kvd_cache_desc desc = {
                .num_tensors = 2, .n_dims = 3, .shape = {16, 8, 64}, .data_type = KVD_DT_BF16};
        kvd_cache_key req = kvd_key_req(1, 5, 0), blocks = kvd_key_blocks(1, 0);
        kvd_cache_desc bad;
        uint8_t buf[64];
        void *addrs[2] = {buf, buf + 32}, *null_addrs[2] = {buf, NULL};
        uint64_t id;
        FakeDaemon d;
        kvd_client *c;

        fake_start(&d, script_only_finalize);
        c = fake_client_init(&d);

        ck_assert_int_eq(kvd_register_cache(c, NULL, addrs, 2, NULL, 0, 0, &id),
                         KVD_E_PARAM_INVALID);
        ck_assert_int_eq(kvd_register_cache(c, &desc, addrs, 1, NULL, 0, 0, &id),
                         KVD_E_PARAM_INVALID);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(c), "n_addrs"));
        ck_assert_int_eq(kvd_register_cache(c, &desc, null_addrs, 2, NULL, 0, 0, &id),
                         KVD_E_PARAM_INVALID);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(c), "addrs[1]"));
        ck_assert_int_eq(kvd_register_cache(c, &desc, NULL, 2, NULL, 0, 0, &id),
                         KVD_E_PARAM_INVALID);

        bad = desc;
        bad.n_dims = 0;
        ck_assert_int_eq(kvd_register_cache(c, &bad, addrs, 2, NULL, 0, 0, &id),
                         KVD_E_PARAM_INVALID);
        bad.n_dims = KVD_MAX_DIMS + 1;
        ck_assert_int_eq(kvd_register_cache(c, &bad, addrs, 2, NULL, 0, 0, &id),
                         KVD_E_PARAM_INVALID);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(c), "n_dims"));
        bad = desc;
        bad.num_tensors = KVD_MAX_TENSORS + 1;
        ck_assert_int_eq(kvd_register_cache(c, &bad, addrs, 2, NULL, 0, 0, &id),
                         KVD_E_PARAM_INVALID);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(c), "num_tensors"));
        bad = desc;
        bad.shape[1] = -8;
        ck_assert_int_eq(kvd_register_cache(c, &bad, addrs, 2, NULL, 0, 0, &id),
                         KVD_E_PARAM_INVALID);
        bad = desc;
        bad.data_type = _KVD_DT_MAX;
        ck_assert_int_eq(kvd_register_cache(c, &bad, addrs, 2, NULL, 0, 0, &id),
                         KVD_E_PARAM_INVALID);

        /* Contiguous caches take request keys, blocks caches a blocks key. */
        ck_assert_int_eq(kvd_register_cache(c, &desc, addrs, 2, &blocks, 1, 0, &id),
                         KVD_E_PARAM_INVALID);
        ck_assert_int_eq(kvd_register_blocks_cache(c, &desc, addrs, 2, &req, 0, &id),
                         KVD_E_PARAM_INVALID);
        ck_assert_int_eq(kvd_register_cache(c, &desc, addrs, 2, NULL, 1, 0, &id),
                         KVD_E_PARAM_INVALID);
        ck_assert_int_eq(kvd_register_cache(c, &desc, addrs, 2, NULL, 0, 9, &id),
                         KVD_E_PARAM_INVALID);
        ck_assert_int_eq(kvd_register_cache(c, &desc, addrs, 2, NULL, 0, 0, NULL),
                         KVD_E_PARAM_INVALID);
        ck_assert_int_eq(kvd_remove_cache_key(c, &(kvd_cache_key){.kind = 9}), KVD_E_PARAM_INVALID);
        ck_assert_int_eq(kvd_pull_cache(c, NULL, 1, 0, -1, NULL), KVD_E_PARAM_INVALID);
        ck_assert_int_eq(kvd_pull_blocks(c, &blocks, 1, NULL, 3, NULL, 0, NULL),
                         KVD_E_PARAM_INVALID);
        ck_assert_int_eq(kvd_mem_free(c, buf), KVD_E_PARAM_INVALID);
        ck_assert_int_eq(kvd_unregister_cache(NULL, 1), KVD_E_PARAM_INVALID);

        ck_assert_int_eq(kvd_client_finalize(c), KVD_OK);
        fake_stop(&d);
        ck_assert_uint_eq(d.n_types, 3);
}
END_TEST

/* --- links ----------------------------------------------------------------------------- */

static void script_link(FakeDaemon *d, int fd)
{
        Kvdist__V1__LinkClustersReply lr = KVDIST__V1__LINK_CLUSTERS_REPLY__INIT;
        Kvdist__V1__Status st = KVDIST__V1__STATUS__INIT;
        const Kvdist__V1__LinkClusters *link;
        int32_t rets[2] = {KVD_OK, KVD_E_LINK_FAILED};
        FakeFrame f;

        EXPECT(d, fake_handshake(d, fd, true) == 0);

        EXPECT(d, fake_recv(d, fd, &f) == 1);
        EXPECT(d, f.h.type == KVDIST__V1__MSG_TYPE__MSG_LINK_CLUSTERS);
        link = (const Kvdist__V1__LinkClusters *)f.msg;
        d->u[0] = link->n_clusters;
        d->u[1] = link->timeout_ms;
        EXPECT(d, link->n_clusters == 2);
        d->u[2] = link->clusters[1]->remote_cluster_id;
        snprintf(d->str, sizeof(d->str), "%s|%s", link->clusters[0]->remote_ip_info,
                 link->clusters[1]->remote_ip_info);
        st.code = KVD_E_LINK_FAILED;
        st.detail = (char *)"cluster 12 did not answer";
        lr.status = &st;
        lr.n_rets = 2;
        lr.rets = rets;
        EXPECT(d, fake_reply(fd, &f, &lr.base, NULL, 0) == 0);
        fake_frame_done(&f);

        EXPECT(d, fake_recv(d, fd, &f) == 1);
        EXPECT(d, f.h.type == KVDIST__V1__MSG_TYPE__MSG_UNLINK_CLUSTERS);
        d->u[3] = ((const Kvdist__V1__UnlinkClusters *)f.msg)->timeout_ms;
        d->u[4] = ((const Kvdist__V1__UnlinkClusters *)f.msg)->force;
        EXPECT(d, fake_status(fd, &f, KVD_OK, NULL) == 0);
        fake_frame_done(&f);

        EXPECT(d, fake_finalize(d, fd) == 0);
}

START_TEST(test_link_clusters)
{
        kvd_cluster_info many[KVD_MAX_LINK_CLUSTERS + 1] = {};
        kvd_cluster_info two[2] = {
                {.remote_cluster_id = 11, .remote_role = KVD_ROLE_PROMPT},
                {.remote_cluster_id = 12,
                 .remote_role = KVD_ROLE_PROMPT,
                 .remote_ip_info = "10.0.0.2:26000"},
        };
        int rets[KVD_MAX_LINK_CLUSTERS + 1];
        FakeDaemon d;
        kvd_client *c;

        fake_start(&d, script_link);
        c = fake_client_init(&d);

        ck_assert_int_eq(kvd_link_clusters(c, two, 0, 0, rets), KVD_E_PARAM_INVALID);
        ck_assert_int_eq(kvd_link_clusters(c, many, ARRAY_SIZE(many), 0, rets),
                         KVD_E_CLUSTER_NUM_EXCEED_LIMIT);
        ck_assert_int_eq(rets[0], KVD_E_CLUSTER_NUM_EXCEED_LIMIT);
        ck_assert_int_eq(rets[KVD_MAX_LINK_CLUSTERS], KVD_E_CLUSTER_NUM_EXCEED_LIMIT);

        ck_assert_int_eq(kvd_link_clusters(c, two, 2, 0, rets), KVD_E_LINK_FAILED);
        ck_assert_int_eq(rets[0], KVD_OK);
        ck_assert_int_eq(rets[1], KVD_E_LINK_FAILED);
        ck_assert_str_eq(kvd_last_error(c), "cluster 12 did not answer");

        ck_assert_int_eq(kvd_unlink_clusters(c, two, 2, 250, true, rets), KVD_OK);
        ck_assert_int_eq(rets[0], KVD_OK);
        ck_assert_int_eq(rets[1], KVD_OK);

        ck_assert_int_eq(kvd_client_finalize(c), KVD_OK);
        fake_stop(&d);

        ck_assert_uint_eq(d.u[0], 2);
        ck_assert_uint_eq(d.u[1], 3000);
        ck_assert_uint_eq(d.u[2], 12);
        ck_assert_str_eq(d.str, "|10.0.0.2:26000");
        ck_assert_uint_eq(d.u[3], 250);
        ck_assert_uint_eq(d.u[4], 1);
}
END_TEST

static Suite *client_suite(void)
{
        Suite *s = suite_create("client");
        TCase *tc;

        tc = tcase_create("names");
        tcase_add_test(tc, test_strerror_every_code);
        /* Generous for sanitizer builds on a loaded machine; nothing here waits on a clock. */
        tcase_set_timeout(tc, 60);
        suite_add_tcase(s, tc);

        tc = tcase_create("connect");
        tcase_add_test(tc, test_no_socket);
        tcase_add_test(tc, test_hello_mismatch);
        tcase_add_test(tc, test_hello_other_version);
        tcase_add_test(tc, test_hello_denied);
        tcase_add_test(tc, test_hello_farewell);
        tcase_add_test(tc, test_farewell_under_send);
        tcase_add_test(tc, test_options);
        tcase_add_test(tc, test_init_and_calls);
        /* Generous for sanitizer builds on a loaded machine; nothing here waits on a clock. */
        tcase_set_timeout(tc, 60);
        suite_add_tcase(s, tc);

        tc = tcase_create("memory");
        tcase_add_test(tc, test_mem_alloc_free);
        tcase_add_test(tc, test_allocate_cache);
        tcase_add_test(tc, test_register_validation);
        /* Generous for sanitizer builds on a loaded machine; nothing here waits on a clock. */
        tcase_set_timeout(tc, 60);
        suite_add_tcase(s, tc);

        tc = tcase_create("link");
        tcase_add_test(tc, test_link_clusters);
        /* Generous for sanitizer builds on a loaded machine; nothing here waits on a clock. */
        tcase_set_timeout(tc, 60);
        suite_add_tcase(s, tc);

        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(client_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
