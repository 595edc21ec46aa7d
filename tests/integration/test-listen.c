/* SPDX-License-Identifier: MIT */
/*
 * Integration tests: a cluster's listen_ip_info. With it the cluster is a server that others
 * link to at that address (a peer listener of its own, or the daemon's own --listen address);
 * without it a client that refuses links, unless the daemon keeps client_clusters_accept_links;
 * kvd_switch_role() adds, moves and drops the listener. Every transfer checks every byte.
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/harness/harness.h"
#include "tests/integration/it-cache.h"
#include "tests/integration/it-peers.h"
#include "tests/integration/it-world.h"

#define KEY_1 "kvdist-test-key-one-0123456789"
#define KEY_2 "kvdist-test-key-two-9876543210"

/* clusters[] entry @id of @n's status, as a new reference. */
static json_t *cluster_status(const Node *n, uint64_t id)
{
        json_error_t jerr;
        char *text = NULL;
        json_t *root, *e, *ret = NULL;
        size_t i;

        ck_assert_int_eq(harness_daemon_status(&n->d, &text), KVD_OK);
        root = json_loads(text, 0, &jerr);
        ck_assert_msg(root, "status: %s", jerr.text);
        json_array_foreach(json_object_get(root, "clusters"), i,
                           e) if ((uint64_t)json_integer_value(json_object_get(e, "cluster_id")) ==
                                  id) ret = json_incref(e);
        json_decref(root);
        free(text);
        ck_assert_msg(ret, "no cluster %llu in the status", (unsigned long long)id);
        return ret;
}

/* Cluster @id's listen_ip_info in @n's status into @buf ("" for a client); its "listener". */
static void cluster_listen(const Node *n, uint64_t id, char *buf, size_t size,
                           const char *want_listener)
{
        json_t *c = cluster_status(n, id);
        json_t *listen = json_object_get(c, "listen_ip_info");
        json_t *listener = json_object_get(c, "listener");

        (void)snprintf(buf, size, "%s", json_is_string(listen) ? json_string_value(listen) : "");
        if (want_listener)
                ck_assert_msg(json_is_string(listener) &&
                                      strcmp(json_string_value(listener), want_listener) == 0,
                              "cluster %llu: listener is not %s", (unsigned long long)id,
                              want_listener);
        else
                ck_assert(json_is_null(listener) && json_is_null(listen));
        json_decref(c);
}

/* Whether a TCP connection to @addr ("127.0.0.1:port") is refused (nothing listens there). */
static bool nothing_listens(const char *addr)
{
        struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        unsigned port = 0;
        int fd, r;

        ck_assert_msg(sscanf(addr, "127.0.0.1:%u", &port) == 1 && port > 0 && port < 65536,
                      "%s is not a loopback address", addr);
        sin.sin_port = htons((uint16_t)port);
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fd, 0);
        r = connect(fd, (struct sockaddr *)&sin, sizeof(sin));
        close(fd);
        return r < 0 && errno == ECONNREFUSED;
}

/* Attaches @id to @n with the options of the harness plus listen_ip_info @listen. */
static int attach(Node *n, uint64_t id, const char *listen, kvd_client **ret)
{
        return harness_server_init(&n->d, id, KVD_ROLE_PROMPT, listen, ret);
}

/*
 * Pulls 3 scattered blocks of @src (keyed A_ID, model 0) into blocks of @dst that belong to
 * @round alone (@dst has 16 blocks: rounds 0..3) and checks every byte of @dst.
 */
static void pull_and_verify(kvd_client *b, const TCache *src, const TCache *dst, TCopies *cp,
                            unsigned round)
{
        static const uint64_t sb[] = {5, 0, 3};
        uint64_t db[] = {1, 3, 0};
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);

        ck_assert_uint_lt(round, 4);
        for (size_t i = 0; i < 3; i++)
                db[i] += 4 * round;

        expect_ok(b, kvd_pull_blocks(b, &key, dst->id, sb, 3, db, 3, NULL));
        tcopies_blocks(cp, src, dst, ALL, ALL, 2, sb, db, 3);
        tcache_verify(dst, cp);
}

static void switch_listen(kvd_client *c, const char *listen)
{
        kvd_option o = {"listen_ip_info", listen};

        expect_ok(c, kvd_switch_role(c, KVD_ROLE_PROMPT, listen ? &o : NULL, listen ? 1 : 0));
}

/*
 * Two nodes: P with A (the sources, keyed A_ID) and C, D with B (the destination, 16 blocks:
 * four rounds of pull_and_verify()).
 */
typedef struct Duo {
        Node p, d;
        kvd_client *a, *b, *c;
        TCache src, dst;
        TCopies cp;
} Duo;

/* Starts P (with the NULL-terminated flags @extra) and D; A attaches with @listen (NULL: a
 * client), B and C as clients. */
static void duo_start(Duo *w, const char *const *extra, const char *listen)
{
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);

        memset(w, 0, sizeof(*w));
        node_start_full(&w->p, NULL, NULL, NULL, extra);
        node_start(&w->d);
        if (listen)
                expect_ok(NULL, attach(&w->p, A_ID, listen, &w->a));
        else
                w->a = node_client(&w->p, A_ID, KVD_ROLE_PROMPT);
        w->b = node_client(&w->d, B_ID, KVD_ROLE_DECODER);
        w->c = node_client(&w->p, C_ID, KVD_ROLE_DECODER);
        expect_ok(w->a, tcache_register(&w->src, w->a, true, 2, 8, 4096, 0x51, &key, 1, 0));
        expect_ok(w->b, tcache_register(&w->dst, w->b, true, 2, 16, 4096, 0x52, NULL, 0, 0));
}

/* Checks that A's sources were never written, detaches the clusters left and stops both. */
static void duo_stop(Duo *w)
{
        tcopies_free(&w->cp);
        expect_ok(w->c, kvd_client_finalize(w->c));
        expect_ok(w->b, kvd_client_finalize(w->b));
        if (w->a) {
                tcache_verify_untouched(&w->src);
                expect_ok(w->a, kvd_client_finalize(w->a));
        }
        node_stop(&w->d);
        node_stop(&w->p);
}

/* A server on a port of its own: reached there from another daemon; the port goes with it. */
START_TEST(test_own_listener)
{
        char addr[64];
        Duo w;
        int ret;

        duo_start(&w, NULL, "127.0.0.1:0");
        cluster_listen(&w.p, A_ID, addr, sizeof(addr), "own");
        ck_assert_str_ne(addr, w.p.peer_addr);
        ck_assert(strncmp(addr, "127.0.0.1:", 10) == 0 && strcmp(addr, "127.0.0.1:0") != 0);

        /* The link names A's own address, not its daemon's. */
        expect_ok(w.b, link_at(w.b, A_ID, addr, 5000, &ret));
        ck_assert_int_eq(ret, KVD_OK);
        pull_and_verify(w.b, &w.src, &w.dst, &w.cp, 0);
        ck_assert_int_eq(node_status_len(&w.p, "inbound_links"), 1);
        ck_assert_int_eq(node_status_len(&w.d, "peers"), 1);

        /* A finalizes: its port closes with it. */
        tcache_verify_untouched(&w.src);
        expect_ok(w.a, kvd_client_finalize(w.a));
        w.a = NULL;
        ck_assert_msg(nothing_listens(addr), "%s still accepts connections", addr);
        ck_assert(harness_daemon_log_contains(&w.p.d, "no longer reachable at"));
        duo_stop(&w);
}
END_TEST

/* A client refuses links, from other daemons and on its own; the daemon's address serves a
 * server; switch_role adds, moves and drops the listener. */
START_TEST(test_client_and_switch_role)
{
        kvd_cluster_info info = {A_ID, KVD_ROLE_PROMPT, NULL, NULL};
        char first[64], second[64], none[64];
        json_t *st;
        Duo w;
        int ret;

        duo_start(&w, NULL, NULL);
        cluster_listen(&w.p, A_ID, first, sizeof(first), NULL);
        st = cluster_status(&w.p, A_ID);
        ck_assert(json_is_false(json_object_get(st, "accepts_links")));
        json_decref(st);

        /* A client: no link to it, from another daemon or from its own. */
        expect_status(w.b, link_at(w.b, A_ID, w.p.peer_addr, 5000, &ret), KVD_E_LINK_FAILED,
                      "is a client");
        ck_assert_int_eq(ret, KVD_E_LINK_FAILED);
        expect_status(w.c, kvd_link_clusters(w.c, &info, 1, 0, &ret), KVD_E_LINK_FAILED,
                      "without listen_ip_info");
        ck_assert_int_eq(node_status_len(&w.p, "inbound_links"), 0);

        /* A server at its daemon's --listen address: no listener of its own. */
        switch_listen(w.a, w.p.peer_addr);
        cluster_listen(&w.p, A_ID, first, sizeof(first), "daemon");
        ck_assert_str_eq(first, w.p.peer_addr);
        expect_ok(w.b, link_at(w.b, A_ID, w.p.peer_addr, 5000, &ret));
        pull_and_verify(w.b, &w.src, &w.dst, &w.cp, 0);
        expect_ok(w.c, kvd_link_clusters(w.c, &info, 1, 0, &ret));

        /* Links pin it. */
        expect_status(w.a, kvd_switch_role(w.a, KVD_ROLE_PROMPT, NULL, 0), KVD_E_EXIST_LINK,
                      "unlink them first");
        expect_ok(w.b, kvd_unlink_clusters(
                               w.b, &(kvd_cluster_info){A_ID, KVD_ROLE_PROMPT, w.p.peer_addr, NULL},
                               1, 0, false, NULL));
        expect_ok(w.c, kvd_unlink_clusters(w.c, &info, 1, 0, false, NULL));
        for (int i = 0; i < 100 && node_status_len(&w.p, "inbound_links") > 0; i++)
                harness_sleep_ms(20);

        /* Onto a port of its own. */
        switch_listen(w.a, "127.0.0.1:0");
        cluster_listen(&w.p, A_ID, first, sizeof(first), "own");
        expect_ok(w.b, link_at(w.b, A_ID, first, 5000, &ret));
        pull_and_verify(w.b, &w.src, &w.dst, &w.cp, 1);
        expect_ok(w.b,
                  kvd_unlink_clusters(w.b, &(kvd_cluster_info){A_ID, KVD_ROLE_PROMPT, first, NULL},
                                      1, 0, false, NULL));
        for (int i = 0; i < 100 && node_status_len(&w.p, "inbound_links") > 0; i++)
                harness_sleep_ms(20);

        /* Moving: the old port closes, the new one takes links. */
        switch_listen(w.a, "127.0.0.1:0");
        cluster_listen(&w.p, A_ID, second, sizeof(second), "own");
        ck_assert_str_ne(first, second);
        ck_assert_msg(nothing_listens(first), "%s still accepts connections", first);
        expect_ok(w.b, link_at(w.b, A_ID, second, 5000, &ret));
        expect_ok(w.b,
                  kvd_unlink_clusters(w.b, &(kvd_cluster_info){A_ID, KVD_ROLE_PROMPT, second, NULL},
                                      1, 0, false, NULL));
        for (int i = 0; i < 100 && node_status_len(&w.p, "inbound_links") > 0; i++)
                harness_sleep_ms(20);

        /* Back to a client: the port closes and links are refused again. */
        switch_listen(w.a, NULL);
        cluster_listen(&w.p, A_ID, none, sizeof(none), NULL);
        ck_assert_str_eq(none, "");
        ck_assert(nothing_listens(first) && nothing_listens(second));
        expect_status(w.c, kvd_link_clusters(w.c, &info, 1, 0, &ret), KVD_E_LINK_FAILED,
                      "is a client");
        duo_stop(&w);
}
END_TEST

/* client_clusters_accept_links keeps the behaviour from before clusters' listen_ip_info. */
START_TEST(test_clients_accept_links)
{
        static const char *const extra[] = {"--client-clusters-accept-links", "on", NULL};
        kvd_cluster_info info = {A_ID, KVD_ROLE_PROMPT, NULL, NULL};
        json_t *st;
        Duo w;
        int ret;

        duo_start(&w, extra, NULL);
        st = cluster_status(&w.p, A_ID);
        ck_assert(json_is_true(json_object_get(st, "accepts_links")));
        ck_assert(json_is_null(json_object_get(st, "listen_ip_info")));
        json_decref(st);
        expect_ok(w.b, link_at(w.b, A_ID, w.p.peer_addr, 5000, &ret));
        pull_and_verify(w.b, &w.src, &w.dst, &w.cp, 0);
        expect_ok(w.c, kvd_link_clusters(w.c, &info, 1, 0, &ret));
        duo_stop(&w);
}
END_TEST

/* Addresses a cluster cannot listen on: a clear status, and no cluster attached. */
START_TEST(test_listen_errors)
{
        char addr[64], taken[64];
        struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof(sin);
        kvd_client *a, *x = NULL;
        int fd;
        Node p;

        node_start(&p);
        expect_ok(NULL, attach(&p, A_ID, "127.0.0.1:0", &a));
        cluster_listen(&p, A_ID, addr, sizeof(addr), "own");

        expect_status(NULL, attach(&p, B_ID, "localhost:7000", &x), KVD_E_PARAM_INVALID,
                      "is not \"ip:port\"");
        expect_status(NULL, attach(&p, B_ID, "127.0.0.1", &x), KVD_E_PARAM_INVALID, "with a port");
        /* One port per cluster: another cluster's is taken. */
        expect_status(NULL, attach(&p, B_ID, addr, &x), KVD_E_LINK_FAILED, "listens there already");
        /* Not an address of this host (TEST-NET-1), and a port another process holds. */
        expect_status(NULL, attach(&p, B_ID, "192.0.2.1:7000", &x), KVD_E_LINK_FAILED,
                      "cannot listen there");
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
        ck_assert_int_eq(listen(fd, 1), 0);
        ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
        (void)snprintf(taken, sizeof(taken), "127.0.0.1:%u", ntohs(sin.sin_port));
        expect_status(NULL, attach(&p, B_ID, taken, &x), KVD_E_LINK_FAILED,
                      "Address already in use");
        close(fd);
        ck_assert_int_eq(node_status_len(&p, "clusters"), 1);

        /* A failed move keeps the listener the cluster had. */
        expect_status(a,
                      kvd_switch_role(a, KVD_ROLE_MIX,
                                      &(kvd_option){"listen_ip_info", "192.0.2.1:7000"}, 1),
                      KVD_E_LINK_FAILED, "cannot listen there");
        cluster_listen(&p, A_ID, taken, sizeof(taken), "own");
        ck_assert_str_eq(taken, addr);
        ck_assert(!nothing_listens(addr));

        expect_ok(a, kvd_client_finalize(a));
        node_stop(&p);
}
END_TEST

/* A cluster's own listener checks the cluster key as the daemon's does. */
START_TEST(test_own_listener_key)
{
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        char addr[64], *json = NULL;
        kvd_client *a, *b, *b2;
        TCache src, dst;
        TCopies cp = {};
        Node p, d_wrong, d_right;
        int ret;

        node_start_full(&p, NULL, NULL, KEY_1, NULL);
        node_start_full(&d_wrong, NULL, NULL, KEY_2, NULL);
        node_start_full(&d_right, NULL, NULL, KEY_1, NULL);
        expect_ok(NULL, attach(&p, A_ID, "127.0.0.1:0", &a));
        cluster_listen(&p, A_ID, addr, sizeof(addr), "own");
        b = node_client(&d_wrong, B_ID, KVD_ROLE_DECODER);
        b2 = node_client(&d_right, B_ID + 1, KVD_ROLE_DECODER);
        expect_ok(a, tcache_register(&src, a, true, 2, 8, 4096, 0x81, &key, 1, 0));
        expect_ok(b2, tcache_register(&dst, b2, true, 2, 16, 4096, 0x82, NULL, 0, 0));

        expect_status(b, link_at(b, A_ID, addr, 5000, &ret), KVD_E_PERMISSION_DENIED,
                      "cluster key");
        for (int i = 0; i < 100 && node_status_int(&p, "counters/peers_refused") < 1; i++)
                harness_sleep_ms(20);
        ck_assert_int_eq(node_status_int(&p, "counters/peers_refused"), 1);
        ck_assert_int_eq(node_status_len(&p, "peers"), 0);

        expect_ok(b2, link_at(b2, A_ID, addr, 5000, &ret));
        ck_assert_int_eq(harness_daemon_status(&d_right.d, &json), KVD_OK);
        ck_assert_ptr_nonnull(strstr(json, "\"authenticated\":true"));
        free(json);
        pull_and_verify(b2, &src, &dst, &cp, 0);

        tcopies_free(&cp);
        expect_ok(b2, kvd_client_finalize(b2));
        expect_ok(b, kvd_client_finalize(b));
        expect_ok(a, kvd_client_finalize(a));
        node_stop(&d_right);
        node_stop(&d_wrong);
        node_stop(&p);
}
END_TEST

static Suite *listen_suite(void)
{
        Suite *s = suite_create("integration-listen");
        TCase *tc = tcase_create("listen_ip_info");

        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_own_listener);
        tcase_add_test(tc, test_client_and_switch_role);
        tcase_add_test(tc, test_clients_accept_links);
        tcase_add_test(tc, test_listen_errors);
        tcase_add_test(tc, test_own_listener_key);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(listen_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
