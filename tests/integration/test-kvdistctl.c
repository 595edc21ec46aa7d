/* SPDX-License-Identifier: MIT */
/*
 * Integration tests: kvdistctl's commands against a running kvdistd (JSON keys, tables, exit
 * codes, --watch) and against a saved status document (table snapshots).
 */
#include <check.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/harness/harness.h"
#include "tests/integration/it-cache.h"
#include "tests/integration/it-peers.h"

#define A_ID 1001
#define B_ID 2002

static const char *kvdistctl(void)
{
        const char *ctl = getenv("KVDISTCTL");

        ck_assert_msg(ctl && ctl[0], "$KVDISTCTL is not set (run the tests with meson test)");
        return ctl;
}

/* A daemon with two clusters, a cache and a link between them. */
typedef struct Scene {
        HarnessDaemon d;
        kvd_client *a;
        kvd_client *b;
        TCache cache;
} Scene;

static void scene_start(Scene *s)
{
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        kvd_cluster_info info = {A_ID, KVD_ROLE_PROMPT, NULL, NULL};
        int r;

        memset(s, 0, sizeof(*s));
        r = harness_daemon_start(&s->d, NULL);
        ck_assert_msg(r == 0, "cannot start kvdistd: %s", strerror(-r));
        expect_ok(NULL, harness_server_init(&s->d, A_ID, KVD_ROLE_PROMPT, "127.0.0.1:0", &s->a));
        expect_ok(NULL, harness_client_init(&s->d, B_ID, KVD_ROLE_DECODER, &s->b));
        expect_ok(s->a, tcache_register(&s->cache, s->a, true, 4, 16, 512, 1, &key, 1, 0));
        expect_ok(s->b, kvd_link_clusters(s->b, &info, 1, 0, NULL));
}

static void scene_stop(Scene *s)
{
        expect_ok(s->b, kvd_client_finalize(s->b));
        expect_ok(s->a, kvd_client_finalize(s->a));
        ck_assert_int_eq(harness_daemon_stop(&s->d), 0);
        harness_daemon_cleanup(&s->d);
}

/* Runs kvdistctl with @args (NULL-terminated) on the daemon @d; returns stdout, checks exit 0. */
static char *ctl_at(const HarnessDaemon *d, const char *const *args)
{
        const char *argv[16] = {kvdistctl(), "--socket", d->socket_path};
        char *out = NULL, *err = NULL;
        size_t n = 3;
        int r;

        for (size_t i = 0; args[i]; i++)
                argv[n++] = args[i];
        argv[n] = NULL;
        r = harness_run(argv, &out, &err);
        ck_assert_msg(r == 0, "kvdistctl %s exited %d: %s", args[0], r, err);
        free(err);
        return out;
}

static char *ctl(const Scene *s, const char *const *args)
{
        return ctl_at(&s->d, args);
}

static json_t *ctl_json(const Scene *s, const char *command)
{
        const char *args[] = {command, "--json", NULL};
        char *out = ctl(s, args);
        json_error_t jerr;
        json_t *v = json_loads(out, JSON_DECODE_ANY, &jerr);

        ck_assert_msg(v, "kvdistctl %s --json printed no JSON (%s):\n%s", command, jerr.text, out);
        free(out);
        return v;
}

static void expect_keys(const json_t *o, const char *what, const char *const *keys)
{
        ck_assert_msg(json_is_object(o), "%s is not an object", what);
        for (size_t i = 0; keys[i]; i++)
                ck_assert_msg(json_object_get(o, keys[i]), "no \"%s\" in %s", keys[i], what);
}

START_TEST(test_status_summary)
{
        const char *args[] = {"status", NULL}, *none[] = {NULL};
        char *out, want[64];
        json_t *status;
        Scene s;

        scene_start(&s);
        /* the loop's nice as the status document says it, whether or not it could be raised */
        status = ctl_json(&s, "status");
        ck_assert(json_is_integer(json_object_get(status, "control_nice")));
        (void)snprintf(want, sizeof(want), "\nloop nice:   %" JSON_INTEGER_FORMAT "\n",
                       json_integer_value(json_object_get(status, "control_nice")));
        json_decref(status);
        out = ctl(&s, args);
        ck_assert_msg(strstr(out, want), "no \"%s\" in:\n%s", want + 1, out);
        ck_assert_msg(strstr(out, "clusters:    2\n"), "no cluster count in:\n%s", out);
        ck_assert_msg(strstr(out, "links:       1 (1 up)\n"), "no link count in:\n%s", out);
        ck_assert_msg(strstr(out, "peers:       0\n"), "no peer count in:\n%s", out);
        ck_assert_msg(strstr(out, "metrics:     off\n"), "metrics line in:\n%s", out);
        ck_assert_msg(strstr(out, s.d.socket_path), "no socket path in:\n%s", out);
        free(out);

        /* "status" is the default command. */
        out = ctl(&s, none);
        ck_assert_msg(strstr(out, "clusters:    2\n"), "plain kvdistctl:\n%s", out);
        free(out);
        scene_stop(&s);
}
END_TEST

START_TEST(test_tables)
{
        const char *clusters[] = {"clusters", NULL}, *links[] = {"links", NULL};
        const char *caches[] = {"caches", NULL}, *transfers[] = {"transfers", NULL};
        const char *peers[] = {"peers", NULL}, *config[] = {"config", NULL};
        char *out, want[160];
        Scene s;

        scene_start(&s);
        out = ctl(&s, clusters);
        ck_assert_msg(strncmp(out, "ID  ", 4) == 0 && strstr(out, "\n1001  prompt ") &&
                              strstr(out, "\n2002  decoder "),
                      "clusters:\n%s", out);
        /* A (a server on a port of its own) shows where it listens; B is a client. */
        ck_assert_msg(strstr(out, " LISTEN ") && strstr(out, " 127.0.0.1:") &&
                              !strstr(out, "127.0.0.1:0 "),
                      "clusters:\n%s", out);
        free(out);
        out = ctl(&s, links);
        ck_assert_msg(strstr(out, "TRANSPORT") && strstr(out, " shm ") && strstr(out, " up "),
                      "links:\n%s", out);
        free(out);
        out = ctl(&s, caches);
        (void)snprintf(want, sizeof(want), "\n%" PRIu64 " ", s.cache.id);
        ck_assert_msg(strstr(out, want) && strstr(out, "blocks"), "caches:\n%s", out);
        free(out);
        out = ctl(&s, transfers);
        ck_assert_str_eq(out, "no transfers in flight\n");
        free(out);
        out = ctl(&s, peers);
        ck_assert_str_eq(out, "no peers\n");
        free(out);
        out = ctl(&s, config);
        (void)snprintf(want, sizeof(want), "socket_path = \"%s\"\n", s.d.socket_path);
        ck_assert_msg(strstr(out, want) && strstr(out, "limits.max_clients = 64\n") &&
                              strstr(out, "metrics_listen = \"\"\n"),
                      "config:\n%s", out);
        free(out);
        scene_stop(&s);
}
END_TEST

START_TEST(test_json_schema)
{
        static const char *const root_keys[] = {"version",
                                                "pid",
                                                "copy_streaming",
                                                "uptime_s",
                                                "socket",
                                                "pool",
                                                "counters",
                                                "clusters",
                                                "caches",
                                                "links",
                                                "transfers",
                                                "config",
                                                "metrics_address",
                                                "transfers_in_flight",
                                                NULL};
        static const char *const cluster_keys[] = {
                "cluster_id", "role",  "device_id",           "pid", "regions", "region_bytes",
                "caches",     "links", "transfers_in_flight", NULL};
        static const char *const cache_keys[] = {"cache_id",    "cluster_id", "kind",
                                                 "num_tensors", "shape",      "dtype",
                                                 "tensor_size", "pool",       "remote_accessible",
                                                 "keys",        NULL};
        static const char *const link_keys[] = {"link_id",   "local_cluster", "remote_cluster",
                                                "transport", "state",         "age_s",
                                                "transfers", "bytes",         NULL};
        static const char *const config_keys[] = {
                "socket_path",    "socket_mode", "allow_uids",         "allow_gids",
                "memory_size",    "page_shift",  "sync_kv_timeout_ms", "copy_threads",
                "copy_streaming", "log_level",   "metrics_listen",     "devices",
                "limits",         NULL};
        static const char *const sample_keys[] = {"name", "type", "labels", "value", NULL};
        json_t *root, *v, *e;
        bool seen_a = false, seen_b = false, seen_clusters = false;
        size_t i;
        Scene s;

        scene_start(&s);
        root = ctl_json(&s, "status");
        expect_keys(root, "status", root_keys);
        ck_assert_int_eq(json_integer_value(json_object_get(root, "pid")), s.d.pid);
        ck_assert_str_eq(json_string_value(json_object_get(root, "socket")), s.d.socket_path);
        ck_assert(json_is_null(json_object_get(root, "metrics_address")));
        json_decref(root);

        v = ctl_json(&s, "clusters");
        ck_assert_int_eq(json_array_size(v), 2);
        json_array_foreach(v, i, e)
        {
                json_int_t id = json_integer_value(json_object_get(e, "cluster_id"));

                expect_keys(e, "clusters[]", cluster_keys);
                seen_a |= id == A_ID;
                seen_b |= id == B_ID;
        }
        ck_assert(seen_a && seen_b);
        json_decref(v);

        v = ctl_json(&s, "caches");
        ck_assert_int_eq(json_array_size(v), 1);
        expect_keys(json_array_get(v, 0), "caches[]", cache_keys);
        ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(v, 0), "cache_id")),
                         (json_int_t)s.cache.id);
        json_decref(v);

        v = ctl_json(&s, "links");
        ck_assert_int_eq(json_array_size(v), 1);
        e = json_array_get(v, 0);
        expect_keys(e, "links[]", link_keys);
        ck_assert_str_eq(json_string_value(json_object_get(e, "transport")), "shm");
        ck_assert_int_eq(json_integer_value(json_object_get(e, "local_cluster")), B_ID);
        ck_assert_int_eq(json_integer_value(json_object_get(e, "remote_cluster")), A_ID);
        json_decref(v);

        v = ctl_json(&s, "transfers");
        ck_assert(json_is_array(v) && json_array_size(v) == 0);
        json_decref(v);
        v = ctl_json(&s, "peers");
        ck_assert(json_is_array(v));
        json_decref(v);

        v = ctl_json(&s, "config");
        expect_keys(v, "config", config_keys);
        ck_assert_int_eq(
                json_integer_value(json_object_get(json_object_get(v, "limits"), "max_clients")),
                64);
        json_decref(v);

        v = ctl_json(&s, "metrics");
        ck_assert(json_is_array(v) && json_array_size(v) > 0);
        json_array_foreach(v, i, e)
        {
                expect_keys(e, "metrics[]", sample_keys);
                if (strcmp(json_string_value(json_object_get(e, "name")), "kvdist_clusters") == 0) {
                        ck_assert_str_eq(json_string_value(json_object_get(e, "type")), "gauge");
                        ck_assert_int_eq(json_integer_value(json_object_get(e, "value")), 2);
                        seen_clusters = true;
                }
        }
        ck_assert(seen_clusters);
        json_decref(v);
        scene_stop(&s);
}
END_TEST

/* Two daemons: each side's tables show the other (its node id, the link made to it). */
START_TEST(test_across_daemons)
{
        const char *peers[] = {"peers", NULL}, *links[] = {"links", NULL};
        const char *links_json[] = {"links", "--json", NULL};
        char *out, *node;
        kvd_client *a, *b;
        json_t *v, *e;
        json_error_t jerr;
        Node p, d;
        size_t i;
        int in = 0;

        node_start(&p);
        node_start(&d);
        a = node_server(&p, A_ID, KVD_ROLE_PROMPT);
        b = node_client(&d, B_ID, KVD_ROLE_DECODER);
        link_node(b, A_ID, &p);

        /* The peer's node id, as its own status names it. */
        {
                char *json = NULL;

                ck_assert_int_eq(harness_daemon_status(&d.d, &json), KVD_OK);
                node = status_json_str(json, "node_id");
                free(json);
        }
        out = ctl_at(&p.d, peers);
        ck_assert_msg(strstr(out, "\n") && strncmp(strstr(out, "\n") + 1, node, strlen(node)) == 0,
                      "peers of the prefill node do not name node %s:\n%s", node, out);
        free(out);
        free(node);

        /* The prefill node has no link of its own: it shows the one made to it. */
        out = ctl_at(&p.d, links);
        ck_assert_msg(strstr(out, " DIR ") && strstr(out, " in ") && strstr(out, " tcp ") &&
                              strstr(out, " up ") && !strstr(out, "no links"),
                      "links of the prefill node:\n%s", out);
        free(out);
        out = ctl_at(&p.d, links_json);
        v = json_loads(out, 0, &jerr);
        ck_assert_msg(json_is_array(v), "links --json: %s", out);
        json_array_foreach(v, i, e)
        {
                ck_assert_str_eq(json_string_value(json_object_get(e, "direction")), "in");
                ck_assert_int_eq(json_integer_value(json_object_get(e, "local_cluster")), A_ID);
                ck_assert_int_eq(json_integer_value(json_object_get(e, "remote_cluster")), B_ID);
                ck_assert_str_eq(json_string_value(json_object_get(e, "state")), "up");
                in++;
        }
        ck_assert_int_eq(in, 1);
        json_decref(v);
        free(out);
        /* The decode node shows its own, outbound. */
        out = ctl_at(&d.d, links);
        ck_assert_msg(strstr(out, " out ") && !strstr(out, " in "), "links of the decode node:\n%s",
                      out);
        free(out);

        expect_ok(b, kvd_client_finalize(b));
        expect_ok(a, kvd_client_finalize(a));
        node_stop(&d);
        node_stop(&p);
}
END_TEST

/* A device the config names that this host does not have: its link layer is "missing". */
START_TEST(test_devices_missing)
{
        char cfg[] = "/tmp/kvdist-it-ctl-cfg-XXXXXX";
        const char *devices[] = {"devices", NULL};
        static const char text[] = "{\"devices\": [{\"device_id\": 0, \"transport\": \"auto\", "
                                   "\"rdma_device\": \"kvdist-no-such-dev\"}]}\n";
        HarnessDaemon d;
        char *out;
        int fd;

        fd = mkstemp(cfg);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, text, sizeof(text) - 1), (ssize_t)(sizeof(text) - 1));
        close(fd);
        ck_assert_int_eq(harness_daemon_start(&d, "--config", cfg, NULL), 0);
        out = ctl_at(&d, devices);
        if (strcmp(out, "no RDMA devices\n") == 0)
                fprintf(stderr, "SKIP test_devices_missing: kvdistd is built without RDMA\n");
        else
                ck_assert_msg(strstr(out, "kvdist-no-such-dev") && strstr(out, " missing ") &&
                                      !strstr(out, "InfiniBand"),
                              "devices:\n%s", out);
        free(out);
        ck_assert_int_eq(harness_daemon_stop(&d), 0);
        harness_daemon_cleanup(&d);
        ck_assert_int_eq(unlink(cfg), 0);
}
END_TEST

START_TEST(test_watch)
{
        const char *args[] = {"--watch=0.1", "--count", "3", "status", NULL};
        char *out, *p;
        int rounds = 0;
        Scene s;

        scene_start(&s);
        out = ctl(&s, args);
        for (p = out; (p = strstr(p, "version:")); p++)
                rounds++;
        ck_assert_msg(rounds == 3, "%d rounds in:\n%s", rounds, out);
        free(out);
        scene_stop(&s);
}
END_TEST

/* Reads the file @name of the test data directory into a string. */
static char *read_data(const char *name)
{
        const char *dir = getenv("KVDIST_TEST_DATA");
        char path[512], *text = NULL;
        size_t len = 0;
        FILE *f, *m;
        int c;

        ck_assert_msg(dir && dir[0], "$KVDIST_TEST_DATA is not set (run the tests with meson)");
        (void)snprintf(path, sizeof(path), "%s/%s", dir, name);
        f = fopen(path, "re");
        ck_assert_msg(f, "cannot open %s", path);
        m = open_memstream(&text, &len);
        ck_assert_ptr_nonnull(m);
        while ((c = fgetc(f)) != EOF)
                fputc(c, m);
        fclose(f);
        fclose(m);
        return text;
}

START_TEST(test_snapshots)
{
        static const char *const commands[] = {"status", "clusters",  "caches",
                                               "links",  "transfers", "peers",
                                               "config", "domains",   "devices"};
        char input[512], name[64];

        (void)snprintf(input, sizeof(input), "%s/status.json", getenv("KVDIST_TEST_DATA"));
        for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
                const char *argv[] = {kvdistctl(), "--input", input, commands[i], NULL};
                char *out = NULL, *err = NULL, *want;
                int r;

                (void)snprintf(name, sizeof(name), "ctl-%s.expected", commands[i]);
                want = read_data(name);
                r = harness_run(argv, &out, &err);
                ck_assert_msg(r == 0, "kvdistctl --input %s exited %d: %s", commands[i], r, err);
                ck_assert_msg(strcmp(out, want) == 0, "kvdistctl %s printed:\n%s\nwant (%s):\n%s",
                              commands[i], out, name, want);
                free(want);
                free(out);
                free(err);
        }
}
END_TEST

START_TEST(test_peers_absent)
{
        char dir[] = "/tmp/kvdist-it-ctl-XXXXXX", path[128];
        const char *argv[] = {kvdistctl(), "--input", path, "peers", NULL};
        const char *argv_json[] = {kvdistctl(), "--input", path, "--json", "peers", NULL};
        const char *argv_status[] = {kvdistctl(), "--input", path, "status", NULL};
        char *out = NULL, *err = NULL;
        FILE *f;

        /* A daemon from before peers existed: no "peers" key at all. */
        ck_assert_ptr_nonnull(mkdtemp(dir));
        (void)snprintf(path, sizeof(path), "%s/status.json", dir);
        f = fopen(path, "we");
        ck_assert_ptr_nonnull(f);
        fputs("{\"version\": \"0.0.9\", \"clusters\": [], \"links\": []}\n", f);
        fclose(f);
        ck_assert_int_eq(harness_run(argv, &out, &err), 0);
        ck_assert_str_eq(out, "no peers\n");
        free(out);
        free(err);
        ck_assert_int_eq(harness_run(argv_json, &out, &err), 0);
        ck_assert_str_eq(out, "[]\n");
        free(out);
        free(err);
        ck_assert_int_eq(harness_run(argv_status, &out, &err), 0);
        ck_assert_msg(strstr(out, "peers:       0\n") && strstr(out, "pool:        - / -\n"),
                      "status of a sparse document:\n%s", out);
        free(out);
        free(err);
        ck_assert_int_eq(unlink(path), 0);
        ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

START_TEST(test_no_daemon)
{
        char dir[] = "/tmp/kvdist-it-ctl-XXXXXX", path[128];
        const char *argv[] = {kvdistctl(), "--socket", path, "status", NULL};
        const char *argv_json[] = {kvdistctl(), "--json", "--socket", path, NULL};
        const char *argv_metrics[] = {kvdistctl(), "--socket", path, "metrics", NULL};
        char *out = NULL, *err = NULL;
        int r;

        ck_assert_ptr_nonnull(mkdtemp(dir));
        (void)snprintf(path, sizeof(path), "%s/kvdist.sock", dir);
        r = harness_run(argv, &out, &err);
        ck_assert_msg(r == 3, "kvdistctl without a daemon exited %d, want 3; stderr: %s", r, err);
        ck_assert_msg(strstr(err, path), "the message does not name the socket: %s", err);
        ck_assert_msg(strstr(err, "no kvdistd"), "the message does not say what is wrong: %s", err);
        ck_assert_str_eq(out, "");
        free(out);
        free(err);

        r = harness_run(argv_json, &out, &err);
        ck_assert_msg(r == 3, "kvdistctl --json without a daemon exited %d, want 3", r);
        free(out);
        free(err);
        r = harness_run(argv_metrics, &out, &err);
        ck_assert_msg(r == 3, "kvdistctl metrics without a daemon exited %d, want 3", r);
        free(out);
        free(err);
        ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

START_TEST(test_usage)
{
        static const char *const bad[][4] = {
                {"frobnicate"}, {"--count", "2", "status"}, {"--watch=0", "status"},
                {"--watch=x"},  {"status", "links"},        {"--input", "/dev/null", "metrics"},
        };

        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                const char *argv[6] = {kvdistctl()};
                char *out = NULL, *err = NULL;
                int r;

                for (size_t j = 0; j < 4 && bad[i][j]; j++)
                        argv[j + 1] = bad[i][j];
                r = harness_run(argv, &out, &err);
                ck_assert_msg(r == 2, "kvdistctl %s exited %d, want 2", bad[i][0], r);
                ck_assert_msg(err[0] != '\0', "kvdistctl %s: no message", bad[i][0]);
                free(out);
                free(err);
        }
}
END_TEST

static Suite *kvdistctl_suite(void)
{
        Suite *s = suite_create("integration-kvdistctl");
        TCase *tc = tcase_create("status");

        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_status_summary);
        tcase_add_test(tc, test_tables);
        tcase_add_test(tc, test_json_schema);
        tcase_add_test(tc, test_across_daemons);
        tcase_add_test(tc, test_devices_missing);
        tcase_add_test(tc, test_watch);
        tcase_add_test(tc, test_snapshots);
        tcase_add_test(tc, test_peers_absent);
        tcase_add_test(tc, test_no_daemon);
        tcase_add_test(tc, test_usage);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(kvdistctl_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
