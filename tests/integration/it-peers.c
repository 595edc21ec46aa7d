/* SPDX-License-Identifier: MIT */
/* Integration tests across daemons: nodes, remote links, status lookups. */
#include <check.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/integration/it-cache.h"
#include "tests/integration/it-peers.h"

#define NODE_MAX_ARGS 32

static json_t *status_lookup(json_t *root, const char *path)
{
        char *copy = strdup(path), *save = NULL, *tok;
        json_t *v = root;

        ck_assert(copy);
        for (tok = strtok_r(copy, "/", &save); tok && v; tok = strtok_r(NULL, "/", &save))
                v = json_object_get(v, tok);
        free(copy);
        ck_assert_msg(v, "status JSON has no %s", path);
        return v;
}

char *status_json_str(const char *json, const char *path)
{
        json_error_t jerr;
        json_t *root, *v;
        char *s;

        root = json_loads(json, 0, &jerr);
        ck_assert_msg(root, "status JSON does not parse: %s", jerr.text);
        v = status_lookup(root, path);
        ck_assert_msg(json_is_string(v), "status JSON %s is not a string", path);
        s = strdup(json_string_value(v));
        ck_assert(s);
        json_decref(root);
        return s;
}

int64_t node_status_int(const Node *n, const char *path)
{
        char *json = NULL;
        int64_t v;
        int r;

        r = harness_daemon_status(&n->d, &json);
        ck_assert_msg(r == KVD_OK, "status of %s: %s", n->d.socket_path, kvd_strerror(r));
        v = status_json_int(json, path);
        free(json);
        return v;
}

size_t node_status_len(const Node *n, const char *path)
{
        json_error_t jerr;
        char *json = NULL;
        json_t *root, *v;
        size_t len;
        int r;

        r = harness_daemon_status(&n->d, &json);
        ck_assert_msg(r == KVD_OK, "status of %s: %s", n->d.socket_path, kvd_strerror(r));
        root = json_loads(json, 0, &jerr);
        ck_assert_msg(root, "status JSON does not parse: %s", jerr.text);
        v = status_lookup(root, path);
        ck_assert_msg(json_is_array(v), "status JSON %s is not an array", path);
        len = json_array_size(v);
        json_decref(root);
        free(json);
        return len;
}

const char *it_transport(void)
{
        const char *dev = getenv("KVDIST_RDMA_DEVICE");

        return dev && dev[0] ? "rdma" : "tcp";
}

/*
 * Writes a config file mapping device_ids 0..3 to the RDMA device @dev with transport rdma (the
 * domain suites put members on devices 1..3 too: all of them share the one device there). The
 * pool is small: a daemon registers (pins) all of it at start, which in the emulated VM takes
 * about a second per 100 MiB and the VM's memory is shared by every daemon of a test. The
 * soft-RoCE VM moves 30-80 MB/s on emulated CPUs, so a transfer of a few tens of MiB can take
 * longer than the default sync_kv_timeout (1 s), and RDMA transfers honour their deadlines:
 * clusters that set no timeout of their own get 60 s there.
 */
static void node_write_rdma_config(Node *n, const char *dev)
{
        char buf[1024];
        int fd, len = 0;

        (void)snprintf(n->config_path, sizeof(n->config_path), "/tmp/kvdist-cfg-XXXXXX");
        fd = mkstemp(n->config_path);
        ck_assert_msg(fd >= 0, "mkstemp: %m");
        len += snprintf(buf + len, sizeof(buf) - (size_t)len,
                        "{\"memory_size\": \"32M\", \"sync_kv_timeout_ms\": 60000, "
                        "\"devices\": [");
        for (int id = 0; id < 4; id++)
                len += snprintf(buf + len, sizeof(buf) - (size_t)len,
                                "%s{\"device_id\": %d, \"transport\": \"rdma\", "
                                "\"rdma_device\": \"%s\"}",
                                id ? ", " : "", id, dev);
        len += snprintf(buf + len, sizeof(buf) - (size_t)len, "]}\n");
        ck_assert_int_lt(len, (int)sizeof(buf));
        ck_assert_int_eq(write(fd, buf, (size_t)len), len);
        close(fd);
}

void node_start_full(Node *n, const char *netns, const char *listen, const char *key,
                     const char *const *extra)
{
        const char *argv[NODE_MAX_ARGS];
        const char *rdma = getenv("KVDIST_RDMA_DEVICE");
        char *json = NULL, *addr;
        size_t k = 0;
        int r;

        memset(n, 0, sizeof(*n));
        if (rdma && rdma[0]) {
                node_write_rdma_config(n, rdma);
                argv[k++] = "--config";
                argv[k++] = n->config_path;
        }
        argv[k++] = "--listen";
        argv[k++] = listen ? listen : "127.0.0.1:0";
        /*
         * Loss within 2 s, for the tests that cut a wire. Over RDMA the tests run in an emulated
         * VM, on CPUs that the host may take away for seconds while the software RoCE device
         * moves a large transfer; a margin there keeps a slow VM from taking links down under
         * tests that are about something else (none of the RDMA suites cuts a wire).
         */
        argv[k++] = "--heartbeat-interval";
        argv[k++] = rdma && rdma[0] ? "500" : "200";
        argv[k++] = "--heartbeat-timeout";
        argv[k++] = rdma && rdma[0] ? "15000" : "2000";
        if (key) {
                int fd;

                (void)snprintf(n->key_path, sizeof(n->key_path), "/tmp/kvdist-key-XXXXXX");
                fd = mkstemp(n->key_path);
                ck_assert_msg(fd >= 0, "mkstemp: %m");
                ck_assert_int_eq(write(fd, key, strlen(key)), (ssize_t)strlen(key));
                close(fd);
                argv[k++] = "--cluster-key-file";
                argv[k++] = n->key_path;
        }
        for (size_t i = 0; extra && extra[i]; i++) {
                ck_assert(k + 1 < NODE_MAX_ARGS);
                argv[k++] = extra[i];
        }
        argv[k] = NULL;
        r = harness_daemon_start_opts(&n->d,
                                      &(HarnessStartOptions){.extra_args = argv, .netns = netns});
        ck_assert_msg(r == 0, "cannot start kvdistd: %s", strerror(-r));
        r = harness_daemon_status(&n->d, &json);
        ck_assert_msg(r == KVD_OK, "status: %s", kvd_strerror(r));
        addr = status_json_str(json, "peer_listen");
        ck_assert_msg(addr[0], "the daemon does not listen for peers");
        (void)snprintf(n->peer_addr, sizeof(n->peer_addr), "%s", addr);
        free(addr);
        free(json);
}

void node_start(Node *n)
{
        node_start_full(n, NULL, NULL, NULL, NULL);
}

void node_stop(Node *n)
{
        int r;

        if (n->d.pid > 0) {
                r = harness_daemon_stop(&n->d);
                ck_assert_msg(r == 0, "kvdistd exited with %d", r);
        }
        harness_daemon_cleanup(&n->d);
        if (n->key_path[0])
                (void)unlink(n->key_path);
        if (n->config_path[0])
                (void)unlink(n->config_path);
}

kvd_client *node_client(Node *n, uint64_t id, kvd_role role)
{
        kvd_client *c = NULL;
        int r;

        r = harness_client_init(&n->d, id, role, &c);
        ck_assert_msg(r == KVD_OK, "kvd_client_init(%llu) = %s: %s", (unsigned long long)id,
                      kvd_strerror(r), kvd_last_error(NULL));
        return c;
}

kvd_client *node_server(Node *n, uint64_t id, kvd_role role)
{
        kvd_client *c = NULL;
        int r;

        r = harness_server_init(&n->d, id, role, n->peer_addr, &c);
        ck_assert_msg(r == KVD_OK, "kvd_client_init(%llu, listen_ip_info %s) = %s: %s",
                      (unsigned long long)id, n->peer_addr, kvd_strerror(r), kvd_last_error(NULL));
        return c;
}

int link_at(kvd_client *c, uint64_t remote, const char *addr, int timeout_ms, int *ret)
{
        kvd_cluster_info info = {remote, KVD_ROLE_PROMPT, addr, NULL};

        *ret = 1;
        return kvd_link_clusters(c, &info, 1, timeout_ms, ret);
}

void link_node(kvd_client *c, uint64_t remote, const Node *n)
{
        char *json = NULL, want[64];
        int ret;

        expect_ok(c, link_at(c, remote, n->peer_addr, 5000, &ret));
        ck_assert_int_eq(ret, KVD_OK);
        /* Every link across nodes uses the transport the suite runs over, and says so. */
        expect_ok(c, kvd_daemon_status(c, &json));
        (void)snprintf(want, sizeof(want), "\"transport\":\"%s\"", it_transport());
        ck_assert_msg(strstr(json, want), "no link over %s in %s", it_transport(), json);
        free(json);
}
