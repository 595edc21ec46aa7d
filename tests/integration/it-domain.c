/* SPDX-License-Identifier: MIT */
/* Integration tests of comm domains: rank tables, members in parallel, waiting, guarded buffers,
 * status. */
#include <check.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness/harness.h"
#include "tests/integration/it-cache.h"
#include "tests/integration/it-domain.h"
#include "tests/integration/it-peers.h"

void rank_table_build(char *buf, size_t size, const DomMember *m, unsigned n, bool ip_only)
{
        const Node *servers[KVD_MAX_DOMAIN_MEMBERS];
        unsigned n_servers = 0;
        size_t len = 0;

#define PUT(...)                                                                                   \
        do {                                                                                       \
                len += (size_t)snprintf(buf + len, size - len, __VA_ARGS__);                       \
                ck_assert_uint_lt(len, size);                                                      \
        } while (0)

        for (unsigned r = 0; r < n; r++) {
                bool seen = false;

                for (unsigned s = 0; s < n_servers; s++)
                        seen = seen || servers[s] == m[r].node;
                if (!seen)
                        servers[n_servers++] = m[r].node;
        }
        PUT("{\"version\": \"1.0\", \"server_count\": \"%u\", \"status\": \"completed\", "
            "\"server_list\": [",
            n_servers);
        for (unsigned s = 0; s < n_servers; s++) {
                const char *addr = servers[s]->peer_addr;
                char ip[64];
                bool first = true;

                (void)snprintf(ip, sizeof(ip), "%s", addr);
                if (ip_only && strrchr(ip, ':'))
                        *strrchr(ip, ':') = '\0';
                PUT("%s{\"server_id\": \"node-%s\", \"device\": [", s ? ", " : "", addr);
                for (unsigned r = 0; r < n; r++) {
                        if (m[r].node != servers[s])
                                continue;
                        PUT("%s{\"device_id\": \"%d\", \"device_ip\": \"%s\", \"rank_id\": \"%u\"}",
                            first ? "" : ", ", m[r].device_id, ip, r);
                        first = false;
                }
                PUT("]}");
        }
        PUT("]}");
#undef PUT
}

void dom_member_attach(DomMember *m)
{
        char dev[16];
        kvd_option opts[2] = {{"socket_path", m->node->d.socket_path}, {"device_id", dev}};
        int r;

        (void)snprintf(dev, sizeof(dev), "%d", m->device_id);
        r = kvd_client_init(m->cluster_id, KVD_ROLE_MIX, opts, 2, &m->client);
        ck_assert_msg(r == KVD_OK, "kvd_client_init(%llu) = %s: %s",
                      (unsigned long long)m->cluster_id, kvd_strerror(r), kvd_last_error(NULL));
}

int dom_link(DomMember *m, unsigned n, unsigned k, const char *name, const char *table)
{
        kvd_cluster_rank info[KVD_MAX_DOMAIN_MEMBERS];

        for (unsigned r = 0; r < n; r++)
                info[r] = (kvd_cluster_rank){m[r].cluster_id, r};
        return kvd_domain_link(m[k].client, name, info, n, table, &m[k].comm_id);
}

void dom_link_all(DomMember *m, unsigned n, const char *name, const char *table)
{
        for (unsigned k = 0; k < n; k++)
                expect_ok(m[k].client, dom_link(m, n, k, name, table));
}

/* Polls until the status is not PREPARING (@failed: is FAILED) or @timeout_ms passed. */
static kvd_mem_status dom_poll(DomMember *m, int timeout_ms, bool failed)
{
        uint64_t deadline = harness_now_ms() + (uint64_t)timeout_ms;
        kvd_mem_status st = KVD_MEM_STATUS_PREPARING;

        for (;;) {
                expect_ok(m->client, kvd_domain_status(m->client, m->comm_id, &st));
                if ((failed ? st == KVD_MEM_STATUS_FAILED : st != KVD_MEM_STATUS_PREPARING) ||
                    harness_now_ms() >= deadline)
                        return st;
                harness_sleep_ms(5);
        }
}

kvd_mem_status dom_wait(DomMember *m, int timeout_ms)
{
        return dom_poll(m, timeout_ms, false);
}

kvd_mem_status dom_wait_failed(DomMember *m, int timeout_ms)
{
        return dom_poll(m, timeout_ms, true);
}

void dom_wait_ok(DomMember *m, unsigned n)
{
        for (unsigned k = 0; k < n; k++) {
                kvd_mem_status st = dom_wait(&m[k], harness_wait_ms());

                if (st != KVD_MEM_STATUS_OK)
                        harness_daemon_dump_log(&m[k].node->d, 0);
                ck_assert_msg(st == KVD_MEM_STATUS_OK, "member %u (cluster %llu): status %d: %s", k,
                              (unsigned long long)m[k].cluster_id, st, kvd_last_error(m[k].client));
        }
}

typedef struct ParallelArg {
        unsigned i;
        int (*fn)(unsigned i, void *arg);
        void *arg;
        int ret;
} ParallelArg;

static void *parallel_main(void *p)
{
        ParallelArg *a = p;

        a->ret = a->fn(a->i, a->arg);
        return NULL;
}

void dom_parallel(unsigned n, int (*fn)(unsigned i, void *arg), void *arg, int *rets)
{
        pthread_t t[16];
        ParallelArg a[16];

        ck_assert_uint_le(n, 16);
        for (unsigned i = 0; i < n; i++) {
                a[i] = (ParallelArg){i, fn, arg, 0};
                ck_assert_int_eq(pthread_create(&t[i], NULL, parallel_main, &a[i]), 0);
        }
        for (unsigned i = 0; i < n; i++) {
                pthread_join(t[i], NULL);
                rets[i] = a[i].ret;
        }
}

static json_t *lookup(json_t *root, const char *path)
{
        char *copy = strdup(path), *save = NULL, *tok;
        json_t *v = root;

        ck_assert(copy);
        for (tok = strtok_r(copy, "/", &save); tok && v; tok = strtok_r(NULL, "/", &save))
                v = json_is_array(v) ? json_array_get(v, strtoul(tok, NULL, 10))
                                     : json_object_get(v, tok);
        free(copy);
        ck_assert_msg(v, "status JSON has no %s", path);
        return v;
}

static json_t *status_of(const Node *n)
{
        json_error_t jerr;
        char *json = NULL;
        json_t *root;
        int r;

        r = harness_daemon_status(&n->d, &json);
        ck_assert_msg(r == KVD_OK, "status of %s: %s", n->d.socket_path, kvd_strerror(r));
        root = json_loads(json, 0, &jerr);
        ck_assert_msg(root, "status JSON does not parse: %s", jerr.text);
        free(json);
        return root;
}

char *dom_status_str(const Node *n, const char *path)
{
        json_t *root = status_of(n), *v = lookup(root, path);
        char *s;

        ck_assert_msg(json_is_string(v), "status %s is not a string", path);
        s = strdup(json_string_value(v));
        json_decref(root);
        return s;
}

int64_t dom_status_int(const Node *n, const char *path)
{
        json_t *root = status_of(n), *v = lookup(root, path);
        int64_t x;

        ck_assert_msg(json_is_integer(v), "status %s is not an integer", path);
        x = json_integer_value(v);
        json_decref(root);
        return x;
}

size_t dom_status_len(const Node *n, const char *path)
{
        json_t *root = status_of(n), *v = lookup(root, path);
        size_t len;

        ck_assert_msg(json_is_array(v), "status %s is not an array", path);
        len = json_array_size(v);
        json_decref(root);
        return len;
}

void dom_check_channels(const Node *n, bool moved)
{
        json_t *root = status_of(n), *doms = lookup(root, "domains"), *d, *c;
        const char *want = it_transport();
        bool rdma = strcmp(want, "rdma") == 0;
        int64_t total = 0;
        size_t i, k;

        json_array_foreach(doms, i, d)
        {
                const char *state = json_string_value(json_object_get(d, "state"));

                if (!state || strcmp(state, "ok") != 0)
                        continue;
                json_array_foreach(json_object_get(d, "channels"), k, c)
                {
                        const char *tp = json_string_value(json_object_get(c, "transport"));
                        const char *why = json_string_value(json_object_get(c, "transport_reason"));
                        json_int_t rank = json_integer_value(json_object_get(c, "rank"));
                        json_int_t msgs =
                                json_integer_value(json_object_get(c, "messages_sent")) +
                                json_integer_value(json_object_get(c, "messages_received"));
                        json_int_t over = json_integer_value(json_object_get(c, "messages_rdma"));

                        if (tp && strcmp(tp, "shm") == 0)
                                continue;
                        ck_assert_msg(tp && strcmp(tp, want) == 0,
                                      "%s: the channel to rank %lld "
                                      "runs over %s, not %s (%s)",
                                      n->d.socket_path, (long long)rank, tp ? tp : "nothing", want,
                                      why ? why : "");
                        ck_assert_msg(over == (rdma ? msgs : 0),
                                      "%s: the channel to rank %lld moved "
                                      "%lld of its %lld messages over RDMA",
                                      n->d.socket_path, (long long)rank, (long long)over,
                                      (long long)msgs);
                        total += msgs;
                }
        }
        json_decref(root);
        if (moved)
                ck_assert_msg(total > 0, "%s: no domain channel to another node moved a message",
                              n->d.socket_path);
}

void buf_reset(Buf *b)
{
        harness_fill_pattern(b->mem, b->size, b->seed);
        harness_fill_pattern(b->p, b->len, b->seed);
}

void buf_alloc(Buf *b, kvd_client *c, size_t len, uint64_t seed)
{
        void *mem;

        *b = (Buf){.size = len + 2 * BUF_GUARD, .len = len, .seed = seed};
        expect_ok(c, kvd_mem_alloc(c, b->size, &mem));
        b->mem = mem;
        b->p = b->mem + BUF_GUARD;
        buf_reset(b);
}

void buf_expect_n(const Buf *b, uint64_t src, size_t n)
{
        ssize_t at;

        at = harness_check_pattern_at(b->mem, BUF_GUARD, b->seed, 0);
        ck_assert_msg(at < 0, "guard before the buffer changed at %zd", at);
        at = harness_check_pattern(b->p, n, src);
        ck_assert_msg(at < 0, "received byte %zd of %zu differs", at, n);
        at = harness_check_pattern_at(b->p + n, b->len - n, b->seed, n);
        ck_assert_msg(at < 0, "byte %zd after the %zu received changed", at, n);
        at = harness_check_pattern_at(b->p + b->len, BUF_GUARD, b->seed, BUF_GUARD + b->len);
        ck_assert_msg(at < 0, "guard after the buffer changed at %zd", at);
}

void buf_expect(const Buf *b, uint64_t src)
{
        buf_expect_n(b, src, b->len);
}

void buf_untouched(const Buf *b)
{
        buf_expect(b, b->seed);
}

size_t buf_old_or_new(const Buf *b, uint64_t sent)
{
        size_t landed = 0;

        ck_assert_msg(harness_check_pattern_at(b->mem, BUF_GUARD, b->seed, 0) < 0 &&
                              harness_check_pattern_at(b->p + b->len, BUF_GUARD, b->seed,
                                                       BUF_GUARD + b->len) < 0,
                      "a guard around the receive buffer changed");
        for (size_t i = 0; i < b->len; i++) {
                uint8_t old = harness_pattern_byte(b->seed, i);
                uint8_t new_byte = harness_pattern_byte(sent, i);

                /* Not ck_assert per byte: each one marks a point through a pipe. */
                if (b->p[i] != old && b->p[i] != new_byte)
                        ck_abort_msg("receive byte %zu is neither the old one nor the sent one", i);
                landed += b->p[i] == new_byte && new_byte != old;
        }
        return landed;
}
