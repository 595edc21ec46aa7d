/* SPDX-License-Identifier: MIT */
/* A fake kvdistd for the client library's tests: one connection, frames, a script. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "tests/unit/fake-daemon.h"
#include "common/macro.h"

void fake_frame_done(FakeFrame *f)
{
        if (f->msg)
                protobuf_c_message_free_unpacked(f->msg, NULL);
        f->msg = NULL;
        for (size_t i = 0; i < f->n_fds; i++)
                safe_close(f->fds[i]);
        f->n_fds = 0;
}

/* Reads exactly @len bytes, collecting fds; 0 at EOF before anything, -1 on errors. */
static int read_full(int fd, void *buf, size_t len, FakeFrame *f)
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

int fake_recv(FakeDaemon *d, int fd, FakeFrame *f)
{
        uint8_t header[FRAME_HEADER_SIZE];
        _cleanup_free_ uint8_t *payload = NULL;
        const FrameType *ft;
        int r;

        *f = (FakeFrame){};
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

int fake_send_all(int fd, const uint8_t *buf, size_t len, const int *fds, size_t n_fds)
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

int fake_pack_reply(const FakeFrame *req, const ProtobufCMessage *msg, size_t n_fds,
                    uint8_t **ret_buf, size_t *ret_len)
{
        return frame_pack(req->h.type, FRAME_FLAG_REPLY, req->h.request_id, (uint16_t)n_fds, msg,
                          FRAME_MAX_PAYLOAD_DEFAULT, ret_buf, ret_len) < 0
                       ? -1
                       : 0;
}

int fake_reply(int fd, const FakeFrame *req, const ProtobufCMessage *msg, const int *fds,
               size_t n_fds)
{
        _cleanup_free_ uint8_t *buf = NULL;
        size_t len;

        if (fake_pack_reply(req, msg, n_fds, &buf, &len) < 0)
                return -1;
        return fake_send_all(fd, buf, len, fds, n_fds);
}

int fake_error(int fd, const FakeFrame *req, int code, const char *detail)
{
        _cleanup_free_ uint8_t *buf = NULL;
        size_t len;

        if (frame_pack_error(req->h.type, req->h.request_id, code, detail,
                             FRAME_MAX_PAYLOAD_DEFAULT, &buf, &len) < 0)
                return -1;
        return fake_send_all(fd, buf, len, NULL, 0);
}

int fake_farewell(int fd, int code, const char *detail)
{
        _cleanup_free_ uint8_t *buf = NULL;
        size_t len;

        if (frame_pack_error(0, FRAME_CONNECTION_REQUEST_ID, code, detail,
                             FRAME_MAX_PAYLOAD_DEFAULT, &buf, &len) < 0)
                return -1;
        return fake_send_all(fd, buf, len, NULL, 0);
}

int fake_status(int fd, const FakeFrame *req, int code, const char *detail)
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

int fake_transfer_reply(int fd, const FakeFrame *f, int code, const char *detail, uint64_t bytes)
{
        Kvdist__V1__TransferReply tr = KVDIST__V1__TRANSFER_REPLY__INIT;
        Kvdist__V1__Status st = KVDIST__V1__STATUS__INIT;

        st.code = code;
        st.detail = (char *)detail;
        tr.status = &st;
        tr.bytes = bytes;
        return fake_reply(fd, f, &tr.base, NULL, 0);
}

int fake_handshake(FakeDaemon *d, int fd, bool init)
{
        Kvdist__V1__HelloReply hr = KVDIST__V1__HELLO_REPLY__INIT;
        Kvdist__V1__ClientInitReply ir = KVDIST__V1__CLIENT_INIT_REPLY__INIT;
        FakeFrame f;
        int r;

        if (fake_recv(d, fd, &f) <= 0 || f.h.type != KVDIST__V1__MSG_TYPE__MSG_HELLO)
                return -1;
        hr.protocol_version = 1;
        hr.identity = (char *)"kvdistd/fake";
        r = fake_reply(fd, &f, &hr.base, NULL, 0);
        fake_frame_done(&f);
        if (r < 0 || !init)
                return r;

        if (fake_recv(d, fd, &f) <= 0 || f.h.type != KVDIST__V1__MSG_TYPE__MSG_CLIENT_INIT)
                return -1;
        ir.sync_kv_timeout_ms = 250;
        r = fake_reply(fd, &f, &ir.base, NULL, 0);
        fake_frame_done(&f);
        return r;
}

int fake_finalize(FakeDaemon *d, int fd)
{
        FakeFrame f;
        int r;

        if (fake_recv(d, fd, &f) <= 0 || f.h.type != KVDIST__V1__MSG_TYPE__MSG_CLIENT_FINALIZE)
                return -1;
        r = fake_status(fd, &f, KVD_OK, NULL);
        fake_frame_done(&f);
        if (r < 0)
                return r;
        return fake_recv(d, fd, &f) == 0 ? 0 : -1;
}

void fake_wait_go(FakeDaemon *d)
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

void fake_start(FakeDaemon *d, FakeScript script)
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

void fake_go(FakeDaemon *d)
{
        ck_assert_int_eq(write(d->go[1], "x", 1), 1);
}

void fake_stop(FakeDaemon *d)
{
        ck_assert_int_eq(pthread_join(d->thread, NULL), 0);
        close(d->listen_fd);
        close(d->go[0]);
        close(d->go[1]);
        unlink(d->path);
        rmdir(d->dir);
        ck_assert_msg(d->fail_line == 0, "fake daemon expectation at line %d failed", d->fail_line);
}

kvd_client *fake_client_init(FakeDaemon *d)
{
        kvd_option opts[] = {{"socket_path", d->path}, {"device_id", "0"}};
        kvd_client *c = NULL;

        ck_assert_int_eq(kvd_client_init(1, KVD_ROLE_DECODER, opts, 2, &c), KVD_OK);
        ck_assert_ptr_nonnull(c);
        return c;
}
