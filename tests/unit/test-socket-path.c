/* SPDX-License-Identifier: MIT */
/* Unit tests for the default socket path and the per-user fallback folder checks
 * (socket-path.c). */

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/macro.h"
#include "common/socket-path.h"

START_TEST(test_default)
{
        char buf[108], want[108];

        ck_assert_int_eq(socket_path_default(buf, sizeof(buf)), 0);
        if (geteuid() == 0)
                ck_assert_str_eq(buf, SOCKET_PATH_DEFAULT_ROOT);
        else if (!getenv("XDG_RUNTIME_DIR")) {
                snprintf(want, sizeof(want), "/tmp/kvdist-%u/kvdist.sock", (unsigned)geteuid());
                ck_assert_str_eq(buf, want);
        }
        ck_assert_int_eq(socket_path_default(buf, 8), -ENAMETOOLONG);
}
END_TEST

/* Paths outside a fallback folder are not its business, and nothing is created for them. */
START_TEST(test_other_paths)
{
        static const char *const paths[] = {
                "/run/kvdist/kvdist.sock",
                "/tmp/kvdist-it-Xy12/kvdist.sock", /* the integration harness's folders */
                "/tmp/kvdist-/kvdist.sock",
                "/tmp/kvdist-12x/kvdist.sock",
                "/tmp/kvdist-12",
                "/tmp/kvdist-99999999999999999999/kvdist.sock", /* no uid is that large */
                "/var/tmp/kvdist-0/kvdist.sock",
                "kvdist.sock",
        };
        char msg[256] = "";

        for (size_t i = 0; i < ARRAY_SIZE(paths); i++)
                ck_assert_msg(socket_path_check_dir(paths[i], true, msg, sizeof(msg)) == 0,
                              "%s: %s", paths[i], msg);
}
END_TEST

/* A uid no account has, per process: tests of several checkouts may run at once. */
static uid_t test_uid(void)
{
        return (uid_t)(2100000000u + (unsigned)getpid() % 100000000u);
}

START_TEST(test_folder_checks)
{
        char dir[64], sock[96], other[64], msg[256];
        uid_t uid = test_uid();
        int fd;

        if (geteuid() != 0) {
                fprintf(stderr, "skipped: making folders of another uid needs root\n");
                return;
        }
        snprintf(dir, sizeof(dir), "/tmp/kvdist-%u", (unsigned)uid);
        snprintf(sock, sizeof(sock), "%s/kvdist.sock", dir);
        snprintf(other, sizeof(other), "/tmp/kvdist-unit-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(other));
        (void)rmdir(dir);
        (void)unlink(dir);

        /* Missing, and not ours to create. */
        ck_assert_int_eq(socket_path_check_dir(sock, true, msg, sizeof(msg)), -ENOENT);
        ck_assert_int_eq(access(dir, F_OK), -1);

        /* Someone else's. */
        ck_assert_int_eq(mkdir(dir, 0700), 0);
        ck_assert_int_eq(socket_path_check_dir(sock, false, msg, sizeof(msg)), -EPERM);
        ck_assert_msg(strstr(msg, "owned by uid 0"), "%s", msg);

        /* Ours, but others may write into it. */
        ck_assert_int_eq(chown(dir, uid, uid), 0);
        ck_assert_int_eq(chmod(dir, 0770), 0);
        ck_assert_int_eq(socket_path_check_dir(sock, false, msg, sizeof(msg)), -EACCES);
        ck_assert_msg(strstr(msg, "writable by group or others (mode 0770)"), "%s", msg);
        ck_assert_int_eq(chmod(dir, 0702), 0);
        ck_assert_int_eq(socket_path_check_dir(sock, false, msg, sizeof(msg)), -EACCES);

        /* Ours and private; read access for others does not matter. */
        ck_assert_int_eq(chmod(dir, 0755), 0);
        ck_assert_int_eq(socket_path_check_dir(sock, false, msg, sizeof(msg)), 0);
        ck_assert_int_eq(rmdir(dir), 0);

        /* A symbolic link to a good folder. */
        ck_assert_int_eq(chown(other, uid, uid), 0);
        ck_assert_int_eq(symlink(other, dir), 0);
        ck_assert_int_eq(socket_path_check_dir(sock, false, msg, sizeof(msg)), -ELOOP);
        ck_assert_msg(strstr(msg, "is a symbolic link"), "%s", msg);
        ck_assert_int_eq(unlink(dir), 0);

        /* Not a folder at all. */
        fd = open(dir, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        ck_assert_int_ge(fd, 0);
        close(fd);
        ck_assert_int_eq(chown(dir, uid, uid), 0);
        ck_assert_int_eq(socket_path_check_dir(sock, false, msg, sizeof(msg)), -ENOTDIR);
        ck_assert_int_eq(unlink(dir), 0);
        ck_assert_int_eq(rmdir(other), 0);
}
END_TEST

static Suite *socket_path_suite(void)
{
        Suite *s = suite_create("socket-path");
        TCase *tc = tcase_create("rules");

        tcase_add_test(tc, test_default);
        tcase_add_test(tc, test_other_paths);
        tcase_add_test(tc, test_folder_checks);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(socket_path_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
