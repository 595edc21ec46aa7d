/* SPDX-License-Identifier: MIT */
/*
 * Integration test: kvdistd under systemd-socket-activate, a real socket-activation launcher
 * (it listens, then execs the daemon with LISTEN_FDS and LISTEN_FDNAMES on the first
 * connection). Clients connect through the passed socket. Skipped when the launcher (Debian
 * package systemd) is not installed.
 */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/harness/harness.h"
#include "tests/integration/it-cache.h"

#define ALL ((kvd_layer_range){0, 0})
#define A_ID 1001
#define B_ID 2002

START_TEST(test_activated)
{
        static const char *const launcher[] = {"systemd-socket-activate", "-l", "@SOCKET@",
                                               "--fdname=kvdist", NULL};
        kvd_cache_key key = kvd_key_blocks(A_ID, 0);
        kvd_cluster_info info = {A_ID, KVD_ROLE_PROMPT, NULL, NULL};
        uint64_t sb[] = {1}, db[] = {0};
        kvd_client *a = NULL, *b = NULL;
        TCache src, dst;
        TCopies cp = {};
        HarnessDaemon d;
        char *text = NULL;
        json_t *root;
        struct stat st;
        int r;

        r = harness_daemon_start_opts(&d, &(HarnessStartOptions){.launcher = launcher});
        ck_assert_msg(r == 0, "cannot start kvdistd under systemd-socket-activate: %s",
                      strerror(-r));
        expect_ok(NULL, harness_server_init(&d, A_ID, KVD_ROLE_PROMPT, "127.0.0.1:0", &a));
        expect_ok(NULL, harness_client_init(&d, B_ID, KVD_ROLE_DECODER, &b));
        expect_ok(a, tcache_register(&src, a, true, 2, 2, 4096, 1, &key, 1, 0));
        expect_ok(b, tcache_register(&dst, b, true, 2, 2, 4096, 2, NULL, 0, 0));
        expect_ok(b, kvd_link_clusters(b, &info, 1, 0, NULL));
        expect_ok(b, kvd_pull_blocks(b, &key, dst.id, sb, 1, db, 1, NULL));
        tcopies_blocks(&cp, &src, &dst, ALL, ALL, 2, sb, db, 1);
        tcache_verify(&dst, &cp);
        tcopies_free(&cp);

        /* The daemon took the launcher's socket instead of making one. */
        ck_assert(harness_daemon_log_contains(&d, "socket activation: listening on"));
        ck_assert(!harness_daemon_log_contains(&d, "is not the client socket"));
        expect_ok(b, kvd_daemon_status(b, &text));
        root = json_loads(text, 0, NULL);
        ck_assert_str_eq(json_string_value(json_object_get(root, "socket")), d.socket_path);
        ck_assert_int_eq(json_integer_value(json_object_get(root, "pid")), d.pid);
        json_decref(root);
        free(text);

        expect_ok(b, kvd_client_finalize(b));
        expect_ok(a, kvd_client_finalize(a));
        ck_assert_int_eq(harness_daemon_stop(&d), 0);
        /* The socket belongs to the launcher (systemd): the daemon leaves its file alone. */
        ck_assert_int_eq(stat(d.socket_path, &st), 0);
        ck_assert(S_ISSOCK(st.st_mode));
        harness_daemon_cleanup(&d);
}
END_TEST

/* Whether @name is an executable in $PATH. */
static bool in_path(const char *name)
{
        const char *path = getenv("PATH");
        char buf[4096], *save, *dir;

        (void)snprintf(buf, sizeof(buf), "%s", path ? path : "/usr/bin:/bin");
        for (dir = strtok_r(buf, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
                char full[4200];

                (void)snprintf(full, sizeof(full), "%s/%s", dir, name);
                if (access(full, X_OK) == 0)
                        return true;
        }
        return false;
}

int main(void)
{
        Suite *s = suite_create("integration-activation");
        TCase *tc = tcase_create("activation");
        SRunner *sr;
        int failed;

        if (!in_path("systemd-socket-activate")) {
                printf("SKIP: systemd-socket-activate is not installed (Debian package systemd; "
                       "scripts/setup-deps installs it)\n");
                return 77;
        }
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_activated);
        suite_add_tcase(s, tc);
        sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
