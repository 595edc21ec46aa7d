/* SPDX-License-Identifier: MIT */
/*
 * libkvdist against a fake kvdistd: a thread in the test that accepts one connection on a
 * socket in a temporary directory and speaks frames through proto/frame.c, following a script
 * per test. The script records what it saw; the test checks it after joining the thread.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "frame.h"
#include "kvdist.pb-c.h"
#include "kvdist/kvdist.h"
#include "macro.h"

typedef struct FakeDaemon FakeDaemon;
typedef void (*FakeScript)(FakeDaemon *d, int fd);

struct FakeDaemon {
        char dir[64];
        char path[108];
        int listen_fd;
        pthread_t thread;
        FakeScript script;
        int go[2]; /* the test writes a byte when a script may go on */

        /* What the script saw; read by the test after fake_stop(). */
        int fail_line; /* a script expectation that failed, 0 if none */
        uint64_t u[16];
        int64_t s[16];
        char str[256];
        uint16_t types[16];
        size_t n_types;
};

/* A script expectation: on failure, remember the line and end the script. */
#define EXPECT(d, cond)                                                                            \
        do {                                                                                       \
                if (!(cond)) {                                                                     \
                        (d)->fail_line = __LINE__;                                                 \
                        return;                                                                    \
                }                                                                                  \
        } while (0)

typedef struct Frame {
        FrameHeader h;
        ProtobufCMessage *msg;
        int fds[FRAME_MAX_FDS];
        size_t n_fds;
} Frame;

static void frame_done(Frame *f)
{
        if (f->msg)
                protobuf_c_message_free_unpacked(f->msg, NULL);
        f->msg = NULL;
        for (size_t i = 0; i < f->n_fds; i++)
                safe_close(f->fds[i]);
        f->n_fds = 0;
}

/* Reads exactly @len bytes, collecting fds; 0 at EOF before anything, -1 on errors. */
static int read_full(int fd, void *buf, size_t len, Frame *f)
{
        size_t off = 0;

        while (off < len) {
                size_t got = 0;
                ssize_t n = frame_recvmsg(fd, (uint8_t *)buf + off, len - off, f->fds + f->n_fds,
                                          FRAME_MAX_FDS - f->n_fds, &got);

                if (n <= 0)
                        return n == 0 && off == 0 ? 0 : -1;
                f->n_fds += got;
                off += (size_t)n;
        }
        return 1;
}

/* One request from the client: 1, 0 at EOF, -1 on a bad frame. */
static int fake_recv(FakeDaemon *d, int fd, Frame *f)
{
        uint8_t header[FRAME_HEADER_SIZE];
        _cleanup_free_ uint8_t *payload = NULL;
        const FrameType *ft;
        int r;

        *f = (Frame){};
        r = read_full(fd, header, sizeof(header), f);
        if (r <= 0)
                return r;
        if (frame_header_decode(header, FRAME_MAX_PAYLOAD_DEFAULT, &f->h) < 0)
                return -1;
        payload = malloc(f->h.length + 1);
        if (!payload || (f->h.length > 0 && read_full(fd, payload, f->h.length, f) <= 0))
                return -1;
        ft = frame_type_lookup(f->h.type);
        if (!ft || frame_unpack(ft->request, payload, f->h.length, &f->msg) < 0)
                return -1;
        if (d->n_types < ARRAY_SIZE(d->types))
                d->types[d->n_types++] = f->h.type;
        return 1;
}

static int send_all(int fd, const uint8_t *buf, size_t len, const int *fds, size_t n_fds)
{
        size_t off = 0;

        while (off < len) {
                ssize_t n = frame_sendmsg(fd, buf + off, len - off, off == 0 ? fds : NULL,
                                          off == 0 ? n_fds : 0);
                if (n < 0)
                        return -1;
                off += (size_t)n;
        }
        return 0;
}

static int fake_reply(int fd, const Frame *req, const ProtobufCMessage *msg, const int *fds,
                      size_t n_fds)
{
        _cleanup_free_ uint8_t *buf = NULL;
        size_t len;

        if (frame_pack(req->h.type, FRAME_FLAG_REPLY, req->h.request_id, (uint16_t)n_fds, msg,
                       FRAME_MAX_PAYLOAD_DEFAULT, &buf, &len) < 0)
                return -1;
        return send_all(fd, buf, len, fds, n_fds);
}

static int fake_error(int fd, const Frame *req, int code, const char *detail)
{
        _cleanup_free_ uint8_t *buf = NULL;
        size_t len;

        if (frame_pack_error(req->h.type, req->h.request_id, code, detail,
                             FRAME_MAX_PAYLOAD_DEFAULT, &buf, &len) < 0)
                return -1;
        return send_all(fd, buf, len, NULL, 0);
}

/* Answers a request whose reply is only a Status (the reply type of @req). */
static int fake_status(int fd, const Frame *req, int code, const char *detail)
{
        const FrameType *ft = frame_type_lookup(req->h.type);
        Kvdist__V1__Status st = KVDIST__V1__STATUS__INIT;
        ProtobufCMessage *reply;
        int r;

        /* Every reply is Status (field 1) plus fields left at their defaults. */
        reply = calloc(1, ft->reply->sizeof_message);
        if (!reply)
                return -1;
        protobuf_c_message_init(ft->reply, reply);
        st.code = code;
        st.detail = (char *)detail;
        *(Kvdist__V1__Status **)(void *)((uint8_t *)reply + ft->reply->fields[0].offset) = &st;
        r = fake_reply(fd, req, reply, NULL, 0);
        free(reply);
        return r;
}

/* Hello, then (with @init) ClientInit answered with an effective timeout of 250 ms. */
static int fake_handshake(FakeDaemon *d, int fd, bool init)
{
        Kvdist__V1__HelloReply hr = KVDIST__V1__HELLO_REPLY__INIT;
        Kvdist__V1__ClientInitReply ir = KVDIST__V1__CLIENT_INIT_REPLY__INIT;
        Frame f;
        int r;

        if (fake_recv(d, fd, &f) <= 0 || f.h.type != KVDIST__V1__MSG_TYPE__MSG_HELLO)
                return -1;
        hr.protocol_version = 1;
        hr.identity = (char *)"kvdistd/fake";
        r = fake_reply(fd, &f, &hr.base, NULL, 0);
        frame_done(&f);
        if (r < 0 || !init)
                return r;

        if (fake_recv(d, fd, &f) <= 0 || f.h.type != KVDIST__V1__MSG_TYPE__MSG_CLIENT_INIT)
                return -1;
        ir.sync_kv_timeout_ms = 250;
        r = fake_reply(fd, &f, &ir.base, NULL, 0);
        frame_done(&f);
        return r;
}

/* Expects ClientFinalize, answers it, and expects EOF. */
static int fake_finalize(FakeDaemon *d, int fd)
{
        Frame f;
        int r;

        if (fake_recv(d, fd, &f) <= 0 || f.h.type != KVDIST__V1__MSG_TYPE__MSG_CLIENT_FINALIZE)
                return -1;
        r = fake_status(fd, &f, KVD_OK, NULL);
        frame_done(&f);
        if (r < 0)
                return r;
        return fake_recv(d, fd, &f) == 0 ? 0 : -1;
}

static void fake_wait_go(FakeDaemon *d)
{
        char c;

        while (read(d->go[0], &c, 1) < 0 && errno == EINTR)
                ;
}

static void *fake_thread(void *userdata)
{
        FakeDaemon *d = userdata;
        int fd;

        fd = accept4(d->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
                d->fail_line = __LINE__;
                return NULL;
        }
        d->script(d, fd);
        close(fd);
        return NULL;
}

static void fake_start(FakeDaemon *d, FakeScript script)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};

        *d = (FakeDaemon){.script = script};
        snprintf(d->dir, sizeof(d->dir), "/tmp/test-client-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(d->dir));
        snprintf(d->path, sizeof(d->path), "%s/kvdist.sock", d->dir);
        ck_assert_int_eq(pipe2(d->go, O_CLOEXEC), 0);

        d->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(d->listen_fd, 0);
        memcpy(sa.sun_path, d->path, strlen(d->path) + 1);
        ck_assert_int_eq(bind(d->listen_fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        ck_assert_int_eq(listen(d->listen_fd, 4), 0);
        ck_assert_int_eq(pthread_create(&d->thread, NULL, fake_thread, d), 0);
}

static void fake_go(FakeDaemon *d)
{
        ck_assert_int_eq(write(d->go[1], "x", 1), 1);
}

static void fake_stop(FakeDaemon *d)
{
        ck_assert_int_eq(pthread_join(d->thread, NULL), 0);
        close(d->listen_fd);
        close(d->go[0]);
        close(d->go[1]);
        unlink(d->path);
        rmdir(d->dir);
        ck_assert_msg(d->fail_line == 0, "fake daemon expectation at line %d failed", d->fail_line);
}

static kvd_client *connect_init(FakeDaemon *d)
{
        kvd_option opts[] = {{"socket_path", d->path}, {"device_id", "0"}};
        kvd_client *c = NULL;

        ck_assert_int_eq(kvd_client_init(&c, 1, KVD_ROLE_DECODER, opts, 2), KVD_OK);
        ck_assert_ptr_nonnull(c);
        return c;
}

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

        ck_assert_int_eq(kvd_client_connect(&c, opts, 1), KVD_E_DAEMON_UNAVAILABLE);
        ck_assert_ptr_null(c);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(NULL), path));

        ck_assert_int_eq(kvd_client_init(&c, 1, KVD_ROLE_PROMPT, opts, 2),
                         KVD_E_DAEMON_UNAVAILABLE);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(NULL), path));

        /* $KVDIST_SOCKET is used when no option names a path. */
        setenv("KVDIST_SOCKET", path, 1);
        ck_assert_int_eq(kvd_client_connect(&c, NULL, 0), KVD_E_DAEMON_UNAVAILABLE);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(NULL), path));
        unsetenv("KVDIST_SOCKET");

        rmdir(dir);
}
END_TEST

static void script_hello_error(FakeDaemon *d, int fd)
{
        const Kvdist__V1__Hello *hello;
        Frame f;

        EXPECT(d, fake_recv(d, fd, &f) == 1);
        EXPECT(d, f.h.type == KVDIST__V1__MSG_TYPE__MSG_HELLO);
        hello = (const Kvdist__V1__Hello *)f.msg;
        d->u[0] = f.h.request_id;
        d->u[1] = hello->protocol_version;
        snprintf(d->str, sizeof(d->str), "%s", hello->identity);
        EXPECT(d, fake_error(fd, &f, KVD_E_PROTOCOL_MISMATCH, "kvdistd speaks protocol 7") == 0);
        frame_done(&f);
}

START_TEST(test_hello_mismatch)
{
        FakeDaemon d;
        kvd_client *c = NULL;

        fake_start(&d, script_hello_error);
        ck_assert_int_eq(kvd_client_connect(&c, &(kvd_option){"socket_path", d.path}, 1),
                         KVD_E_PROTOCOL_MISMATCH);
        ck_assert_ptr_null(c);
        ck_assert_str_eq(kvd_last_error(NULL), "kvdistd speaks protocol 7");
        fake_stop(&d);

        ck_assert_uint_eq(d.u[0], 1);
        ck_assert_uint_eq(d.u[1], 1);
        ck_assert_str_eq(d.str, "libkvdist/0.1.0");
}
END_TEST

static void script_hello_version(FakeDaemon *d, int fd)
{
        Kvdist__V1__HelloReply hr = KVDIST__V1__HELLO_REPLY__INIT;
        Frame f;

        EXPECT(d, fake_recv(d, fd, &f) == 1);
        hr.protocol_version = 2;
        EXPECT(d, fake_reply(fd, &f, &hr.base, NULL, 0) == 0);
        frame_done(&f);
}

START_TEST(test_hello_other_version)
{
        FakeDaemon d;
        kvd_client *c = NULL;

        fake_start(&d, script_hello_version);
        ck_assert_int_eq(kvd_client_connect(&c, &(kvd_option){"socket_path", d.path}, 1),
                         KVD_E_PROTOCOL_MISMATCH);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(NULL), "protocol 2"));
        fake_stop(&d);
}
END_TEST

static void script_hello_denied(FakeDaemon *d, int fd)
{
        Frame f;

        EXPECT(d, fake_recv(d, fd, &f) == 1);
        EXPECT(d, fake_status(fd, &f, KVD_E_PERMISSION_DENIED, "uid 1234 is not allowed") == 0);
        frame_done(&f);
}

START_TEST(test_hello_denied)
{
        FakeDaemon d;
        kvd_client *c = NULL;

        fake_start(&d, script_hello_denied);
        ck_assert_int_eq(
                kvd_client_init(&c, 3, KVD_ROLE_MIX,
                                (kvd_option[]){{"socket_path", d.path}, {"device_id", "1"}}, 2),
                KVD_E_PERMISSION_DENIED);
        ck_assert_str_eq(kvd_last_error(NULL), "uid 1234 is not allowed");
        fake_stop(&d);
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
                r = kvd_client_init(&c, 1, role, (kvd_option[]){opts[0], opts[2]}, 2);
        else
                r = kvd_client_init(&c, 1, role, opts, key ? 3 : 2);
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
                kvd_client_init(&c, 1, KVD_ROLE_PROMPT, &(kvd_option){"socket_path", path}, 1),
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
                                 &c, (kvd_option[]){{"socket_path", path}, {"device_id", "0"}}, 2),
                         KVD_E_PARAM_INVALID);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(NULL), "device_id"));
        ck_assert_int_eq(kvd_client_connect(NULL, NULL, 0), KVD_E_PARAM_INVALID);
        ck_assert_int_eq(kvd_client_init(&c, 1, KVD_ROLE_PROMPT, NULL, 1), KVD_E_PARAM_INVALID);
}
END_TEST

/* --- init, calls, last error, finalize ------------------------------------------------- */

static void script_init_calls(FakeDaemon *d, int fd)
{
        Kvdist__V1__HelloReply hr = KVDIST__V1__HELLO_REPLY__INIT;
        Kvdist__V1__ClientInitReply ir = KVDIST__V1__CLIENT_INIT_REPLY__INIT;
        Kvdist__V1__DaemonStatusReply sr = KVDIST__V1__DAEMON_STATUS_REPLY__INIT;
        const Kvdist__V1__ClientInit *init;
        Frame f;

        EXPECT(d, fake_recv(d, fd, &f) == 1);
        hr.protocol_version = 1;
        EXPECT(d, fake_reply(fd, &f, &hr.base, NULL, 0) == 0);
        frame_done(&f);

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
        frame_done(&f);

        EXPECT(d, fake_recv(d, fd, &f) == 1);
        EXPECT(d, f.h.type == KVDIST__V1__MSG_TYPE__MSG_CHECK_LINK_STATUS);
        d->u[4] = f.h.request_id;
        d->u[5] = ((const Kvdist__V1__CheckLinkStatus *)f.msg)->remote_cluster_id;
        EXPECT(d, fake_status(fd, &f, KVD_E_NOT_YET_LINK, "no link to cluster 9") == 0);
        frame_done(&f);

        EXPECT(d, fake_recv(d, fd, &f) == 1);
        EXPECT(d, f.h.type == KVDIST__V1__MSG_TYPE__MSG_DAEMON_STATUS);
        sr.json = (char *)"{\"version\": \"0.1.0\"}";
        EXPECT(d, fake_reply(fd, &f, &sr.base, NULL, 0) == 0);
        frame_done(&f);

        /* An error frame (bare Status) for a request the daemon does not know. */
        EXPECT(d, fake_recv(d, fd, &f) == 1);
        EXPECT(d, f.h.type == KVDIST__V1__MSG_TYPE__MSG_SWITCH_ROLE);
        snprintf(d->str + 128, 128, "%s", ((const Kvdist__V1__SwitchRole *)f.msg)->listen_ip_info);
        d->u[6] = (uint64_t)((const Kvdist__V1__SwitchRole *)f.msg)->role;
        EXPECT(d, fake_error(fd, &f, KVD_E_UNSUPPORTED, "SwitchRole is not supported") == 0);
        frame_done(&f);

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
        ck_assert_int_eq(kvd_client_init(&c, 77, KVD_ROLE_PROMPT, opts, ARRAY_SIZE(opts)), KVD_OK);

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
        Frame f;

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
        frame_done(&f);

        EXPECT(d, fake_recv(d, fd, &f) == 1);
        EXPECT(d, f.h.type == KVDIST__V1__MSG_TYPE__MSG_REGION_REMOVE);
        d->u[2] = ((const Kvdist__V1__RegionRemove *)f.msg)->region_id;
        EXPECT(d, fake_status(fd, &f, KVD_E_BUSY, "cache 3 lies in region 42") == 0);
        frame_done(&f);

        EXPECT(d, fake_recv(d, fd, &f) == 1);
        EXPECT(d, f.h.type == KVDIST__V1__MSG_TYPE__MSG_REGION_REMOVE);
        d->u[3] = ((const Kvdist__V1__RegionRemove *)f.msg)->region_id;
        EXPECT(d, fake_status(fd, &f, KVD_OK, NULL) == 0);
        frame_done(&f);

        EXPECT(d, fake_finalize(d, fd) == 0);
}

START_TEST(test_mem_alloc_free)
{
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        FakeDaemon d;
        kvd_client *c;
        uint8_t *p = NULL;

        fake_start(&d, script_mem);
        c = connect_init(&d);

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
        Frame f;

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
        frame_done(&f);

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
                frame_done(&f);
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
        c = connect_init(&d);

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
        c = connect_init(&d);

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
        Frame f;

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
        frame_done(&f);

        EXPECT(d, fake_recv(d, fd, &f) == 1);
        EXPECT(d, f.h.type == KVDIST__V1__MSG_TYPE__MSG_UNLINK_CLUSTERS);
        d->u[3] = ((const Kvdist__V1__UnlinkClusters *)f.msg)->timeout_ms;
        d->u[4] = ((const Kvdist__V1__UnlinkClusters *)f.msg)->force;
        EXPECT(d, fake_status(fd, &f, KVD_OK, NULL) == 0);
        frame_done(&f);

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
        c = connect_init(&d);

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

/* --- transfers and waiting ------------------------------------------------------------- */

static int transfer_reply(int fd, const Frame *f, int code, const char *detail, uint64_t bytes)
{
        Kvdist__V1__TransferReply tr = KVDIST__V1__TRANSFER_REPLY__INIT;
        Kvdist__V1__Status st = KVDIST__V1__STATUS__INIT;

        st.code = code;
        st.detail = (char *)detail;
        tr.status = &st;
        tr.bytes = bytes;
        return fake_reply(fd, f, &tr.base, NULL, 0);
}

static void script_out_of_order(FakeDaemon *d, int fd)
{
        const Kvdist__V1__Transfer *a, *b;
        Frame fa, fb;

        EXPECT(d, fake_handshake(d, fd, true) == 0);

        EXPECT(d, fake_recv(d, fd, &fa) == 1);
        EXPECT(d, fake_recv(d, fd, &fb) == 1);
        EXPECT(d, fa.h.type == KVDIST__V1__MSG_TYPE__MSG_TRANSFER);
        EXPECT(d, fb.h.type == KVDIST__V1__MSG_TYPE__MSG_TRANSFER);
        EXPECT(d, fb.h.request_id > fa.h.request_id);
        a = (const Kvdist__V1__Transfer *)fa.msg;
        b = (const Kvdist__V1__Transfer *)fb.msg;

        d->u[0] = (uint64_t)a->kind;
        EXPECT(d, a->remote_key && a->remote_key->kind_case == KVDIST__V1__CACHE_KEY__KIND_REQ);
        d->u[1] = a->remote_key->req->req_id;
        d->u[2] = a->remote_key->req->prefix_id;
        d->u[3] = a->local_cache_id;
        d->u[4] = a->local_batch_index;
        d->s[0] = a->size;
        d->u[5] = a->timeout_ms;
        d->u[6] = a->src_layers != NULL;
        d->s[1] = a->dst_layers ? a->dst_layers->first : -100;
        d->s[2] = a->dst_layers ? a->dst_layers->last : -100;
        d->u[7] = a->tensor_num_per_layer;

        d->u[8] = (uint64_t)b->kind;
        EXPECT(d, b->remote_key && b->remote_key->kind_case == KVDIST__V1__CACHE_KEY__KIND_BLOCKS);
        d->u[9] = b->remote_key->blocks->model_id;
        EXPECT(d, b->n_src_blocks == 3 && b->n_dst_blocks == 3);
        d->u[10] = b->src_blocks[2];
        d->u[11] = b->dst_blocks[2];
        d->u[12] = b->timeout_ms;

        /* The later request is answered first. */
        EXPECT(d, transfer_reply(fd, &fb, KVD_E_CACHE_NOT_EXIST, "cache 8 is gone", 0) == 0);
        EXPECT(d, transfer_reply(fd, &fa, KVD_OK, NULL, 4096) == 0);
        frame_done(&fa);
        frame_done(&fb);

        EXPECT(d, fake_finalize(d, fd) == 0);
}

START_TEST(test_out_of_order_replies)
{
        kvd_transfer_opts opts = KVD_TRANSFER_OPTS_INIT;
        kvd_cache_key src = kvd_key_req(2, 900, 0), dst = kvd_key_blocks(2, 5);
        uint64_t src_blocks[3] = {1, 2, 3}, dst_blocks[3] = {7, 8, 9};
        kvd_task *ta = NULL, *tb = NULL;
        FakeDaemon d;
        kvd_client *c;

        fake_start(&d, script_out_of_order);
        c = connect_init(&d);

        opts.timeout_ms = 800;
        opts.dst_layers = (kvd_layer_range){2, 5};
        ck_assert_int_eq(kvd_pull_cache_async(c, &src, 4, 3, 1024, &opts, &ta), KVD_OK);
        ck_assert_int_eq(kvd_push_blocks_async(c, &dst, 6, src_blocks, 3, dst_blocks, 3, NULL, &tb),
                         KVD_OK);
        /* The arrays were copied into the request. */
        src_blocks[2] = dst_blocks[2] = 0;

        ck_assert_int_eq(kvd_task_wait(ta, -1), KVD_OK);
        ck_assert_int_eq(kvd_task_wait(tb, -1), KVD_E_CACHE_NOT_EXIST);
        ck_assert_str_eq(kvd_last_error(c), "cache 8 is gone");
        /* A completed task keeps its status. */
        ck_assert_int_eq(kvd_task_wait(tb, 0), KVD_E_CACHE_NOT_EXIST);
        ck_assert_int_eq(kvd_task_wait(ta, 0), KVD_OK);
        kvd_task_free(ta);
        kvd_task_free(tb);

        ck_assert_int_eq(kvd_client_finalize(c), KVD_OK);
        fake_stop(&d);

        ck_assert_uint_eq(d.u[0], KVDIST__V1__TRANSFER_KIND__TRANSFER_PULL_CACHE);
        ck_assert_uint_eq(d.u[1], 900);
        ck_assert_uint_eq(d.u[2], KVD_ID_NONE);
        ck_assert_uint_eq(d.u[3], 4);
        ck_assert_uint_eq(d.u[4], 3);
        ck_assert_int_eq(d.s[0], 1024);
        ck_assert_uint_eq(d.u[5], 800);
        ck_assert_uint_eq(d.u[6], 0); /* first == -1: the range is left out */
        ck_assert_int_eq(d.s[1], 2);
        ck_assert_int_eq(d.s[2], 5);
        ck_assert_uint_eq(d.u[7], 2);
        ck_assert_uint_eq(d.u[8], KVDIST__V1__TRANSFER_KIND__TRANSFER_PUSH_BLOCKS);
        ck_assert_uint_eq(d.u[9], 5);
        ck_assert_uint_eq(d.u[10], 3);
        ck_assert_uint_eq(d.u[11], 9);
        ck_assert_uint_eq(d.u[12], 0); /* no opts: the daemon's sync_kv_timeout */
}
END_TEST

/* Two threads wait at once; the daemon answers the later request first. */
static void script_two_threads(FakeDaemon *d, int fd)
{
        Frame f[2];

        EXPECT(d, fake_handshake(d, fd, true) == 0);
        EXPECT(d, fake_recv(d, fd, &f[0]) == 1);
        EXPECT(d, fake_recv(d, fd, &f[1]) == 1);
        for (int i = 1; i >= 0; i--) {
                uint64_t remote =
                        ((const Kvdist__V1__CheckLinkStatus *)f[i].msg)->remote_cluster_id;

                /* Cluster 100 + k is answered with status -k. */
                EXPECT(d, fake_status(fd, &f[i], -(int)(remote - 100), "per-cluster") == 0);
                frame_done(&f[i]);
        }
        EXPECT(d, fake_finalize(d, fd) == 0);
}

typedef struct Checker {
        kvd_client *c;
        uint64_t remote;
        int r;
} Checker;

static void *checker_thread(void *userdata)
{
        Checker *k = userdata;

        k->r = kvd_check_link_status(k->c, k->remote);
        return NULL;
}

START_TEST(test_two_threads_waiting)
{
        Checker k[2];
        pthread_t t[2];
        FakeDaemon d;
        kvd_client *c;

        fake_start(&d, script_two_threads);
        c = connect_init(&d);

        k[0] = (Checker){.c = c, .remote = 100 - KVD_E_NOT_YET_LINK};
        k[1] = (Checker){.c = c, .remote = 100 - KVD_E_LINK_BUSY};
        for (int i = 0; i < 2; i++)
                ck_assert_int_eq(pthread_create(&t[i], NULL, checker_thread, &k[i]), 0);
        for (int i = 0; i < 2; i++)
                ck_assert_int_eq(pthread_join(t[i], NULL), 0);
        ck_assert_int_eq(k[0].r, KVD_E_NOT_YET_LINK);
        ck_assert_int_eq(k[1].r, KVD_E_LINK_BUSY);

        ck_assert_int_eq(kvd_client_finalize(c), KVD_OK);
        fake_stop(&d);
}
END_TEST

/* Holds the answers until the test says go; the first task is freed by then. */
static void script_late_replies(FakeDaemon *d, int fd)
{
        Frame fa, fb;

        EXPECT(d, fake_handshake(d, fd, true) == 0);
        EXPECT(d, fake_recv(d, fd, &fa) == 1);
        EXPECT(d, fake_recv(d, fd, &fb) == 1);
        fake_wait_go(d);
        EXPECT(d, transfer_reply(fd, &fa, KVD_E_TIMEOUT, "for a freed task", 0) == 0);
        EXPECT(d, transfer_reply(fd, &fb, KVD_OK, NULL, 1) == 0);
        frame_done(&fa);
        frame_done(&fb);
        EXPECT(d, fake_finalize(d, fd) == 0);
}

START_TEST(test_task_wait_timeout)
{
        kvd_cache_key key = kvd_key_id_index(2, 3, 4);
        kvd_task *ta = NULL, *tb = NULL;
        FakeDaemon d;
        kvd_client *c;

        fake_start(&d, script_late_replies);
        c = connect_init(&d);

        ck_assert_int_eq(kvd_pull_blocks_async(c, &key, 1, NULL, 0, (uint64_t[]){1}, 1, NULL, &ta),
                         KVD_OK);
        ck_assert_int_eq(kvd_push_cache_async(c, &key, 1, 0, -1, NULL, &tb), KVD_OK);

        ck_assert_int_eq(kvd_task_wait(tb, 0), KVD_E_TIMEOUT);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(c), "still running"));
        kvd_task_free(ta);
        fake_go(&d);

        ck_assert_int_eq(kvd_task_wait(tb, -1), KVD_OK);
        kvd_task_free(tb);
        kvd_task_free(NULL);
        ck_assert_int_eq(kvd_task_wait(NULL, 0), KVD_E_PARAM_INVALID);

        ck_assert_int_eq(kvd_client_finalize(c), KVD_OK);
        fake_stop(&d);
}
END_TEST

/* --- a daemon that goes away ----------------------------------------------------------- */

static void script_close_mid_wait(FakeDaemon *d, int fd)
{
        Frame f[2];

        EXPECT(d, fake_handshake(d, fd, true) == 0);
        EXPECT(d, fake_recv(d, fd, &f[0]) == 1);
        EXPECT(d, fake_recv(d, fd, &f[1]) == 1);
        frame_done(&f[0]);
        frame_done(&f[1]);
        /* Returning closes the connection with both transfers unanswered. */
}

START_TEST(test_daemon_closes)
{
        kvd_cache_key key = kvd_key_req(2, 1, 0);
        kvd_task *t = NULL;
        FakeDaemon d;
        kvd_client *c;
        void *p = NULL;

        fake_start(&d, script_close_mid_wait);
        c = connect_init(&d);

        ck_assert_int_eq(kvd_pull_cache_async(c, &key, 1, 0, -1, NULL, &t), KVD_OK);
        ck_assert_int_eq(kvd_pull_cache(c, &key, 1, 1, -1, NULL), KVD_E_DAEMON_UNAVAILABLE);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(c), "kvdistd closed the connection"));
        fake_stop(&d);

        /* Every waiter and every later call fails the same way. */
        ck_assert_int_eq(kvd_task_wait(t, -1), KVD_E_DAEMON_UNAVAILABLE);
        ck_assert_int_eq(kvd_task_wait(t, 0), KVD_E_DAEMON_UNAVAILABLE);
        ck_assert_int_eq(kvd_check_link_status(c, 2), KVD_E_DAEMON_UNAVAILABLE);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(c), "kvdistd closed the connection"));
        ck_assert_int_eq(kvd_mem_alloc(c, 4096, &p), KVD_E_DAEMON_UNAVAILABLE);
        ck_assert_int_eq(kvd_push_cache(c, &key, 1, 0, -1, NULL), KVD_E_DAEMON_UNAVAILABLE);

        /* The task outlives the client; it only sees a dead connection. */
        ck_assert_int_eq(kvd_client_finalize(c), KVD_OK);
        ck_assert_int_eq(kvd_task_wait(t, 0), KVD_E_DAEMON_UNAVAILABLE);
        kvd_task_free(t);
}
END_TEST

static void script_bad_frame(FakeDaemon *d, int fd)
{
        static const uint8_t garbage[FRAME_HEADER_SIZE] = "this is not a frame!!!!";
        Frame f;

        EXPECT(d, fake_handshake(d, fd, true) == 0);
        EXPECT(d, fake_recv(d, fd, &f) == 1);
        frame_done(&f);
        EXPECT(d, send_all(fd, garbage, sizeof(garbage), NULL, 0) == 0);
        /* The client must hang up on us. */
        EXPECT(d, fake_recv(d, fd, &f) == 0);
}

START_TEST(test_malformed_frame)
{
        FakeDaemon d;
        kvd_client *c;

        fake_start(&d, script_bad_frame);
        c = connect_init(&d);
        ck_assert_int_eq(kvd_check_link_status(c, 2), KVD_E_DAEMON_UNAVAILABLE);
        ck_assert_ptr_nonnull(strstr(kvd_last_error(c), "malformed"));
        ck_assert_int_eq(kvd_client_finalize(c), KVD_OK);
        fake_stop(&d);
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

        tc = tcase_create("wait");
        tcase_add_test(tc, test_out_of_order_replies);
        tcase_add_test(tc, test_two_threads_waiting);
        tcase_add_test(tc, test_task_wait_timeout);
        tcase_add_test(tc, test_daemon_closes);
        tcase_add_test(tc, test_malformed_frame);
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
