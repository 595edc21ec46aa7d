/* SPDX-License-Identifier: MIT */
/*
 * libkvdist client lifecycle: options, connecting and attaching as a cluster, finalizing, and
 * the per-thread record behind kvd_last_error().
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client-lib/client.h"
#include "common/socket-path.h"

/* The last failure on this thread, and the client it was about (NULL: init/connect). */
static __thread struct {
        bool set;
        const kvd_client *client;
        char msg[ERROR_MSG_MAX];
} last_error;

int client_return(kvd_client *c, const Error *err, int r)
{
        if (r >= 0)
                return r;

        last_error.set = true;
        last_error.client = c;
        if (err && err->code != 0 && err->msg[0])
                (void)snprintf(last_error.msg, sizeof(last_error.msg), "%s", err->msg);
        else
                (void)snprintf(last_error.msg, sizeof(last_error.msg), "%s", kvd_strerror(r));
        return r;
}

void client_set_detail(kvd_client *c, const char *msg)
{
        last_error.set = true;
        last_error.client = c;
        (void)snprintf(last_error.msg, sizeof(last_error.msg), "%s", msg);
}

_public_ const char *kvd_last_error(kvd_client *client)
{
        if (!last_error.set || last_error.client != client)
                return "";
        return last_error.msg;
}

static kvd_client *client_new(void)
{
        pthread_condattr_t attr;
        kvd_client *c;

        c = calloc(1, sizeof(*c));
        if (!c)
                return NULL;
        if (wire_in_init_ahead(&c->rx) < 0) {
                free(c);
                return NULL;
        }

        c->n_ref = 1;
        c->fd = -1;
        c->notify_fd = -1;
        c->next_request_id = 1;
        c->max_payload = CLIENT_MAX_PAYLOAD;
        clist_init(&c->pending);
        clist_init(&c->regions);
        pthread_mutex_init(&c->send_lock, NULL);
        pthread_mutex_init(&c->lock, NULL);
        pthread_mutex_init(&c->pool_lock, NULL);
        pthread_condattr_init(&attr);
        /* Deadlines are CLOCK_MONOTONIC; a wall clock step must not stretch or cut them. */
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        pthread_cond_init(&c->cond, &attr);
        pthread_condattr_destroy(&attr);
        return c;
}

kvd_client *client_ref(kvd_client *c)
{
        __atomic_add_fetch(&c->n_ref, 1, __ATOMIC_RELAXED);
        return c;
}

kvd_client *client_unref(kvd_client *c)
{
        if (!c || __atomic_sub_fetch(&c->n_ref, 1, __ATOMIC_ACQ_REL) > 0)
                return NULL;

        /* Whoever dropped the last reference had no task left, so nothing waits. */
        memory_unmap_all(c, false);
        wire_in_done(&c->rx);
        c->fd = safe_close(c->fd);
        c->notify_fd = safe_close(c->notify_fd);
        pthread_cond_destroy(&c->cond);
        pthread_mutex_destroy(&c->pool_lock);
        pthread_mutex_destroy(&c->lock);
        pthread_mutex_destroy(&c->send_lock);
        free(c);
        return NULL;
}
DEFINE_TRIVIAL_CLEANUP_FUNC(kvd_client, client_unref);

typedef struct ClientOptions {
        const char *socket_path;
        const char *listen_ip_info;
        const char *local_comm_res;  /* NULL: not given (the daemon generates one) */
        int32_t device_id;           /* -1: not given */
        uint32_t sync_kv_timeout_ms; /* 0: not given */
} ClientOptions;

/* Parses a whole decimal integer in [@min, @max]. */
static int parse_int(const char *s, long long min, long long max, long long *ret)
{
        long long v;
        char *end;

        if (!((s[0] >= '0' && s[0] <= '9') || (s[0] == '-' && s[1] >= '0' && s[1] <= '9')))
                return -EINVAL;
        errno = 0;
        v = strtoll(s, &end, 10);
        if (errno != 0 || *end != '\0')
                return -EINVAL;
        if (v < min || v > max)
                return -ERANGE;
        *ret = v;
        return 0;
}

enum {
        OPT_SOCKET_PATH = 1u << 0,
        OPT_DEVICE_ID = 1u << 1,
        OPT_SYNC_KV_TIMEOUT = 1u << 2,
        OPT_LISTEN_IP_INFO = 1u << 3,
        OPT_LOCAL_COMM_RES = 1u << 4,
};

static const struct {
        const char *key;
        unsigned bit;
} option_keys[] = {
        {"socket_path", OPT_SOCKET_PATH},
        {"device_id", OPT_DEVICE_ID},
        {"sync_kv_timeout_ms", OPT_SYNC_KV_TIMEOUT},
        {"listen_ip_info", OPT_LISTEN_IP_INFO},
        {"local_comm_res", OPT_LOCAL_COMM_RES},
};

/* Checks @options against the keys in @allowed and fills @ret; the values stay the caller's. */
static int parse_options(const kvd_option *options, size_t n, unsigned allowed, ClientOptions *ret,
                         Error *err)
{
        ClientOptions o = {.device_id = -1};
        unsigned seen = 0;

        if (n > 0 && !options)
                return error_set(err, KVD_E_PARAM_INVALID, "options is NULL but n_options is %zu",
                                 n);

        for (size_t i = 0; i < n; i++) {
                const char *key = options[i].key, *value = options[i].value;
                unsigned bit = 0;
                long long v;

                if (!key || !value)
                        return error_set(err, KVD_E_PARAM_INVALID, "options[%zu] has a NULL %s", i,
                                         key ? "value" : "key");
                for (size_t k = 0; k < ARRAY_SIZE(option_keys); k++)
                        if (strcmp(key, option_keys[k].key) == 0)
                                bit = option_keys[k].bit;
                if (!(bit & allowed))
                        return error_set(err, KVD_E_PARAM_INVALID, "unknown option \"%s\"", key);
                if (seen & bit)
                        return error_set(err, KVD_E_PARAM_INVALID, "option \"%s\" is given twice",
                                         key);
                seen |= bit;

                switch (bit) {
                case OPT_SOCKET_PATH:
                        if (!value[0])
                                return error_set(err, KVD_E_PARAM_INVALID,
                                                 "option \"socket_path\" is empty");
                        o.socket_path = value;
                        break;
                case OPT_DEVICE_ID:
                        if (parse_int(value, 0, INT32_MAX, &v) < 0)
                                return error_set(err, KVD_E_PARAM_INVALID,
                                                 "option \"device_id\" is \"%s\", not an integer "
                                                 "in [0, %d]",
                                                 value, INT32_MAX);
                        o.device_id = (int32_t)v;
                        break;
                case OPT_SYNC_KV_TIMEOUT:
                        if (parse_int(value, 1, INT32_MAX, &v) < 0)
                                return error_set(err, KVD_E_PARAM_INVALID,
                                                 "option \"sync_kv_timeout_ms\" is \"%s\", not an "
                                                 "integer in [1, %d]",
                                                 value, INT32_MAX);
                        o.sync_kv_timeout_ms = (uint32_t)v;
                        break;
                case OPT_LISTEN_IP_INFO:
                        o.listen_ip_info = value;
                        break;
                case OPT_LOCAL_COMM_RES:
                        /* A rank-table fragment; the daemon parses and checks it. */
                        o.local_comm_res = value;
                        break;
                }
        }

        *ret = o;
        return KVD_OK;
}

int client_parse_listen_ip_info(const kvd_option *options, size_t n, const char **ret, Error *err)
{
        ClientOptions o;
        int r;

        r = parse_options(options, n, OPT_LISTEN_IP_INFO, &o, err);
        if (r < 0)
                return r;
        *ret = o.listen_ip_info;
        return KVD_OK;
}

/* Where the daemon listens: the option, $KVDIST_SOCKET, or the default for our uid. */
static int socket_path_resolve(const char *opt, char *buf, size_t size, Error *err)
{
        const char *env;
        int n;

        env = secure_getenv("KVDIST_SOCKET");
        if (opt)
                n = snprintf(buf, size, "%s", opt);
        else if (env && env[0])
                n = snprintf(buf, size, "%s", env);
        else
                n = socket_path_default(buf, size) < 0 ? -1 : 0;
        if (n < 0 || (size_t)n >= size)
                return error_set(err, KVD_E_PARAM_INVALID, "socket path is longer than %zu bytes",
                                 size - 1);
        return KVD_OK;
}

static int client_hello(kvd_client *c, Error *err)
{
        Kvdist__V1__Hello hello = KVDIST__V1__HELLO__INIT;
        _cleanup_pb_ ProtobufCMessage *reply = NULL;
        const Kvdist__V1__HelloReply *hr;
        int r;

        hello.protocol_version = CLIENT_PROTOCOL_VERSION;
        hello.identity = (char *)CLIENT_IDENTITY;

        r = conn_call(c, KVDIST__V1__MSG_TYPE__MSG_HELLO, &hello.base, NULL, 0,
                      CLIENT_CALL_TIMEOUT_MS, &reply, NULL, err);
        if (r < 0)
                return r;

        hr = (const Kvdist__V1__HelloReply *)reply;
        if (hr->protocol_version != CLIENT_PROTOCOL_VERSION)
                return error_set(err, KVD_E_PROTOCOL_MISMATCH,
                                 "kvdistd at %s speaks protocol %u, libkvdist speaks %u",
                                 c->socket_path, hr->protocol_version, CLIENT_PROTOCOL_VERSION);
        /* A request the daemon would take for a broken frame is refused here instead, so the
         * session survives it. */
        if (hr->max_frame_size > 0 && hr->max_frame_size < CLIENT_MAX_PAYLOAD)
                c->max_payload = hr->max_frame_size;
        return KVD_OK;
}

/* Connects to the daemon and says Hello. */
static int client_open(const ClientOptions *o, kvd_client **ret, Error *err)
{
        _cleanup_(client_unrefp) kvd_client *c = NULL;
        int r;

        c = client_new();
        if (!c)
                return error_set(err, KVD_E_OUT_OF_MEMORY, "out of memory");

        r = socket_path_resolve(o->socket_path, c->socket_path, sizeof(c->socket_path), err);
        if (r < 0)
                return r;

        r = conn_connect(c->socket_path, err);
        if (r < 0)
                return r;
        c->fd = r;

        r = client_hello(c, err);
        if (r < 0)
                return r;

        *ret = TAKE_PTR(c);
        return KVD_OK;
}

static int client_init(kvd_client **ret_client, uint64_t cluster_id, kvd_role role,
                       const kvd_option *options, size_t n_options, Error *err)
{
        Kvdist__V1__ClientInit init = KVDIST__V1__CLIENT_INIT__INIT;
        _cleanup_(client_unrefp) kvd_client *c = NULL;
        _cleanup_pb_ ProtobufCMessage *reply = NULL;
        ClientOptions o;
        uint32_t timeout;
        int r;

        if (!ret_client)
                return error_set(err, KVD_E_PARAM_INVALID, "ret_client is NULL");
        if (role < KVD_ROLE_PROMPT || role > KVD_ROLE_MIX)
                return error_set(err, KVD_E_PARAM_INVALID,
                                 "role %d is not KVD_ROLE_PROMPT, KVD_ROLE_DECODER or KVD_ROLE_MIX",
                                 (int)role);
        r = parse_options(options, n_options,
                          OPT_SOCKET_PATH | OPT_DEVICE_ID | OPT_SYNC_KV_TIMEOUT |
                                  OPT_LISTEN_IP_INFO | OPT_LOCAL_COMM_RES,
                          &o, err);
        if (r < 0)
                return r;
        if (o.device_id < 0)
                return error_set(err, KVD_E_PARAM_INVALID, "option \"device_id\" is required");

        r = client_open(&o, &c, err);
        if (r < 0)
                return r;

        init.cluster_id = cluster_id;
        init.role = (Kvdist__V1__Role)role;
        init.device_id = o.device_id;
        init.sync_kv_timeout_ms = o.sync_kv_timeout_ms;
        init.listen_ip_info = (char *)(o.listen_ip_info ?: "");
        init.local_comm_res = (char *)(o.local_comm_res ?: "");

        r = conn_call(c, KVDIST__V1__MSG_TYPE__MSG_CLIENT_INIT, &init.base, NULL, 0,
                      CLIENT_CALL_TIMEOUT_MS, &reply, NULL, err);
        if (r < 0)
                return r;

        timeout = ((const Kvdist__V1__ClientInitReply *)reply)->sync_kv_timeout_ms;
        if (timeout == 0)
                timeout = o.sync_kv_timeout_ms ?: CLIENT_DEFAULT_SYNC_KV_TIMEOUT_MS;
        c->sync_kv_timeout_ms = timeout;
        c->initialized = true;

        *ret_client = TAKE_PTR(c);
        return KVD_OK;
}

_public_ int kvd_client_init(uint64_t cluster_id, kvd_role role, const kvd_option *options,
                             size_t n_options, kvd_client **ret_client)
{
        Error err = ERROR_INIT;
        int r;

        r = client_init(ret_client, cluster_id, role, options, n_options, &err);
        return client_return(NULL, &err, r);
}

static int client_connect(kvd_client **ret_client, const kvd_option *options, size_t n_options,
                          Error *err)
{
        ClientOptions o;
        int r;

        if (!ret_client)
                return error_set(err, KVD_E_PARAM_INVALID, "ret_client is NULL");
        r = parse_options(options, n_options, OPT_SOCKET_PATH, &o, err);
        if (r < 0)
                return r;
        return client_open(&o, ret_client, err);
}

_public_ int kvd_client_connect(const kvd_option *options, size_t n_options,
                                kvd_client **ret_client)
{
        Error err = ERROR_INIT;
        int r;

        r = client_connect(ret_client, options, n_options, &err);
        return client_return(NULL, &err, r);
}

static int client_finalize(kvd_client *client, bool keep_memory)
{
        Error err = ERROR_INIT;
        bool dead;
        int r = KVD_OK;

        if (!client)
                return KVD_OK;

        pthread_mutex_lock(&client->lock);
        dead = client->dead;
        pthread_mutex_unlock(&client->lock);

        if (client->initialized && !dead) {
                Kvdist__V1__ClientFinalize fin = KVDIST__V1__CLIENT_FINALIZE__INIT;

                r = conn_call(client, KVDIST__V1__MSG_TYPE__MSG_CLIENT_FINALIZE, &fin.base, NULL, 0,
                              CLIENT_CALL_TIMEOUT_MS, NULL, NULL, &err);
        }

        /* Tasks may outlive the client object's owner: they see a dead connection. */
        conn_kill(client, "kvd_client_finalize() closed the connection to kvdistd");
        pthread_mutex_lock(&client->lock);
        client->fd = safe_close(client->fd);
        client->notify_fd = safe_close(client->notify_fd);
        pthread_mutex_unlock(&client->lock);
        memory_unmap_all(client, keep_memory);

        r = client_return(client, &err, r);
        client_unref(client);
        return r;
}

_public_ int kvd_client_finalize(kvd_client *client)
{
        return client_finalize(client, false);
}

_public_ int kvd_client_finalize_keep_memory(kvd_client *client)
{
        return client_finalize(client, true);
}

int client_copy_opts(void *dst, size_t dst_size, size_t v1_size, const void *src, uint32_t src_size,
                     const char *name, Error *err)
{
        size_t n = src_size ?: v1_size;

        memset(dst, 0, dst_size);
        if (!src)
                return 0;
        if (n < v1_size)
                return error_set(err, KVD_E_PARAM_INVALID,
                                 "%s->size is %" PRIu32 ", less than the %zu bytes of its first "
                                 "version (set it to sizeof, or 0)",
                                 name, src_size, v1_size);
        for (size_t i = dst_size; i < n; i++)
                if (((const uint8_t *)src)[i] != 0)
                        return error_set(err, KVD_E_PARAM_INVALID,
                                         "%s->size is %zu and sets fields past the %zu bytes "
                                         "this libkvdist %s knows",
                                         name, n, dst_size, KVDIST_VERSION);
        memcpy(dst, src, MIN(n, dst_size));
        return 0;
}
