/* SPDX-License-Identifier: MIT */
/* Integration tests: kvdistctl status against a running kvdistd, and with none. */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "it-cache.h"

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
        kvd_cluster_info info = { A_ID, KVD_ROLE_PROMPT, NULL, NULL };
        int r;

        memset(s, 0, sizeof(*s));
        r = harness_daemon_start(&s->d, NULL);
        ck_assert_msg(r == 0, "cannot start kvdistd: %s", strerror(-r));
        expect_ok(NULL, harness_client_init(&s->d, A_ID, KVD_ROLE_PROMPT, &s->a));
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

START_TEST(test_status_human)
{
        Scene s;
        const char *argv[] = { kvdistctl(), "--socket", NULL, "status", NULL };
        char *out = NULL, *err = NULL;
        int r;

        scene_start(&s);
        argv[2] = s.d.socket_path;
        r = harness_run(argv, &out, &err);
        ck_assert_msg(r == 0, "kvdistctl status exited %d: %s", r, err);
        ck_assert_msg(strstr(out, "1001"), "no cluster 1001 in:\n%s", out);
        ck_assert_msg(strstr(out, "2002"), "no cluster 2002 in:\n%s", out);
        ck_assert_msg(strstr(out, "shm"), "no shm transport in:\n%s", out);
        ck_assert_msg(strstr(out, s.d.socket_path), "no socket path in:\n%s", out);
        free(out);
        free(err);

        /* "status" is the default command. */
        argv[3] = NULL;
        r = harness_run(argv, &out, &err);
        ck_assert_msg(r == 0, "kvdistctl exited %d: %s", r, err);
        ck_assert_msg(strstr(out, "1001") && strstr(out, "shm"), "plain kvdistctl:\n%s", out);
        free(out);
        free(err);
        scene_stop(&s);
}
END_TEST

START_TEST(test_status_json)
{
        static const char *const keys[] = { "version", "pid", "uptime_s", "socket", "pool",
                                            "counters", "clusters", "caches", "links",
                                            "transfers" };
        const char *argv[] = { kvdistctl(), "--socket", NULL, "--json", "status", NULL };
        char *out = NULL, *err = NULL;
        json_t *root, *links, *link, *clusters, *c;
        json_error_t jerr;
        bool seen_a = false, seen_b = false;
        size_t i;
        Scene s;
        int r;

        scene_start(&s);
        argv[2] = s.d.socket_path;
        r = harness_run(argv, &out, &err);
        ck_assert_msg(r == 0, "kvdistctl --json exited %d: %s", r, err);
        root = json_loads(out, 0, &jerr);
        ck_assert_msg(root, "kvdistctl --json printed no JSON (%s):\n%s", jerr.text, out);
        for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
                ck_assert_msg(json_object_get(root, keys[i]), "no \"%s\" in:\n%s", keys[i], out);

        ck_assert_int_eq(json_integer_value(json_object_get(root, "pid")), s.d.pid);
        ck_assert_str_eq(json_string_value(json_object_get(root, "socket")), s.d.socket_path);
        ck_assert(json_is_number(json_object_get(root, "uptime_s")));
        ck_assert(json_is_string(json_object_get(root, "version")));
        ck_assert(json_is_object(json_object_get(root, "pool")));
        ck_assert(json_is_object(json_object_get(root, "counters")));
        ck_assert(json_is_array(json_object_get(root, "transfers")));

        clusters = json_object_get(root, "clusters");
        ck_assert_int_eq(json_array_size(clusters), 2);
        json_array_foreach(clusters, i, c) {
                json_int_t id = json_integer_value(json_object_get(c, "cluster_id"));

                seen_a |= id == A_ID;
                seen_b |= id == B_ID;
        }
        ck_assert(seen_a && seen_b);
        ck_assert_int_eq(json_array_size(json_object_get(root, "caches")), 1);
        ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(
                                 json_object_get(root, "caches"), 0), "cache_id")),
                         (json_int_t)s.cache.id);
        links = json_object_get(root, "links");
        ck_assert_int_eq(json_array_size(links), 1);
        link = json_array_get(links, 0);
        ck_assert_str_eq(json_string_value(json_object_get(link, "transport")), "shm");
        ck_assert_int_eq(json_integer_value(json_object_get(link, "local_cluster")), B_ID);
        ck_assert_int_eq(json_integer_value(json_object_get(link, "remote_cluster")), A_ID);

        json_decref(root);
        free(out);
        free(err);
        scene_stop(&s);
}
END_TEST

START_TEST(test_no_daemon)
{
        char dir[] = "/tmp/kvdist-it-ctl-XXXXXX", path[128];
        const char *argv[] = { kvdistctl(), "--socket", path, "status", NULL };
        const char *argv_json[] = { kvdistctl(), "--json", "--socket", path, NULL };
        char *out = NULL, *err = NULL;
        int r;

        ck_assert_ptr_nonnull(mkdtemp(dir));
        (void)snprintf(path, sizeof(path), "%s/kvdist.sock", dir);
        r = harness_run(argv, &out, &err);
        ck_assert_msg(r == 3, "kvdistctl without a daemon exited %d, want 3; stderr: %s", r, err);
        ck_assert_msg(strstr(err, path), "the message does not name the socket: %s", err);
        ck_assert_msg(strstr(err, "no kvdistd"), "the message does not say what is wrong: %s",
                      err);
        ck_assert_str_eq(out, "");
        free(out);
        free(err);

        r = harness_run(argv_json, &out, &err);
        ck_assert_msg(r == 3, "kvdistctl --json without a daemon exited %d, want 3", r);
        free(out);
        free(err);
        ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

START_TEST(test_usage)
{
        const char *argv[] = { kvdistctl(), "frobnicate", NULL };
        char *out = NULL, *err = NULL;
        int r;

        r = harness_run(argv, &out, &err);
        ck_assert_msg(r == 2, "kvdistctl frobnicate exited %d, want 2", r);
        ck_assert_msg(strstr(err, "frobnicate"), "stderr: %s", err);
        free(out);
        free(err);
}
END_TEST

static Suite *kvdistctl_suite(void)
{
        Suite *s = suite_create("integration-kvdistctl");
        TCase *tc = tcase_create("status");

        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_status_human);
        tcase_add_test(tc, test_status_json);
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
