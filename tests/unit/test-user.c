/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for per-uid accounting (daemon/memory/user.c): charges up to limits.per_user and
 * not one past, refusals that name the limit and the uid, release, users that come and go.
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "daemon/memory/user.h"

static Limits limits = {
        .per_user =
                {
                        .max_connections = 3,
                        .max_clusters = 2,
                        .max_regions = 4,
                        .max_region_bytes = 1000,
                        .max_inflight = 5,
                        .max_notifies = 6,
                },
};

START_TEST(test_charge_to_limit)
{
        UserRegistry reg;
        User *a = NULL, *b = NULL, *again = NULL;
        Error err = ERROR_INIT;

        user_registry_init(&reg, &limits);
        ck_assert_int_eq(user_registry_ref(&reg, 1000, &a), 0);
        ck_assert_int_eq(user_registry_ref(&reg, 1001, &b), 0);
        ck_assert_int_eq(user_registry_ref(&reg, 1000, &again), 0);
        ck_assert_ptr_eq(a, again);
        ck_assert_uint_eq(reg.n_users, 2);

        for (int i = 0; i < 3; i++)
                ck_assert_int_eq(user_charge(a, USER_SLOT_CONNECTIONS, 1, &err), 0);
        ck_assert_int_eq(user_charge(a, USER_SLOT_CONNECTIONS, 1, &err), STATUS_LIMIT_EXCEEDED);
        ck_assert_msg(strstr(err.msg, "uid 1000") && strstr(err.msg, "max_connections"), "%s",
                      err.msg);
        ck_assert_uint_eq(a->used[USER_SLOT_CONNECTIONS], 3);
        ck_assert_uint_eq(a->refused[USER_SLOT_CONNECTIONS], 1);
        ck_assert_uint_eq(reg.refused[USER_SLOT_CONNECTIONS], 1);

        /* Another uid has its own share. */
        error_clear(&err);
        for (int i = 0; i < 3; i++)
                ck_assert_int_eq(user_charge(b, USER_SLOT_CONNECTIONS, 1, &err), 0);

        /* Bytes are charged as a sum, a charge that does not fit whole is refused whole. */
        ck_assert_int_eq(user_charge(a, USER_SLOT_REGION_BYTES, 900, &err), 0);
        ck_assert_int_eq(user_charge(a, USER_SLOT_REGION_BYTES, 101, &err), STATUS_LIMIT_EXCEEDED);
        ck_assert_uint_eq(a->used[USER_SLOT_REGION_BYTES], 900);
        error_clear(&err);
        ck_assert_int_eq(user_charge(a, USER_SLOT_REGION_BYTES, 100, &err), 0);
        ck_assert_int_eq(user_charge(a, USER_SLOT_REGION_BYTES, UINT64_MAX, &err),
                         STATUS_LIMIT_EXCEEDED);

        /* Released room can be taken again. */
        user_uncharge(a, USER_SLOT_CONNECTIONS, 1);
        error_clear(&err);
        ck_assert_int_eq(user_charge(a, USER_SLOT_CONNECTIONS, 1, &err), 0);

        /* A NULL user is not accounted. */
        ck_assert_int_eq(user_charge(NULL, USER_SLOT_CLUSTERS, 100, &err), 0);
        user_uncharge(NULL, USER_SLOT_CLUSTERS, 100);

        user_uncharge(a, USER_SLOT_CONNECTIONS, 3);
        user_uncharge(a, USER_SLOT_REGION_BYTES, 1000);
        user_uncharge(b, USER_SLOT_CONNECTIONS, 3);
        user_unref(again);
        ck_assert_ptr_eq(user_registry_find(&reg, 1000), a);
        user_unref(a);
        ck_assert_ptr_null(user_registry_find(&reg, 1000));
        user_unref(b);
        ck_assert_uint_eq(reg.n_users, 0);
        user_registry_deinit(&reg);
}
END_TEST

START_TEST(test_limit_follows_reload)
{
        Limits l = limits;
        UserRegistry reg;
        User *u = NULL;
        Error err = ERROR_INIT;

        user_registry_init(&reg, &l);
        ck_assert_int_eq(user_registry_ref(&reg, 7, &u), 0);
        ck_assert_int_eq(user_charge(u, USER_SLOT_CLUSTERS, 2, &err), 0);
        ck_assert_int_eq(user_check(u, USER_SLOT_CLUSTERS, 1, &err), STATUS_LIMIT_EXCEEDED);
        /* Nothing is charged by a check, nor by a refusal. */
        ck_assert_uint_eq(u->used[USER_SLOT_CLUSTERS], 2);
        l.per_user.max_clusters = 3;
        error_clear(&err);
        ck_assert_int_eq(user_check(u, USER_SLOT_CLUSTERS, 1, &err), 0);
        ck_assert_uint_eq(user_slot_limit(&reg, USER_SLOT_CLUSTERS), 3);
        user_uncharge(u, USER_SLOT_CLUSTERS, 2);
        user_unref(u);
        user_registry_deinit(&reg);
}
END_TEST

START_TEST(test_slot_names)
{
        for (UserSlot k = 0; k < _USER_SLOT_MAX; k++) {
                ck_assert_ptr_nonnull(user_slot_to_string(k));
                ck_assert_ptr_nonnull(user_slot_limit_key(k));
        }
        ck_assert_ptr_null(user_slot_to_string(_USER_SLOT_MAX));
        ck_assert_str_eq(user_slot_limit_key(USER_SLOT_NOTIFIES), "max_notifies");
}
END_TEST

static Suite *user_suite(void)
{
        Suite *s = suite_create("user");
        TCase *tc = tcase_create("accounting");

        tcase_add_test(tc, test_charge_to_limit);
        tcase_add_test(tc, test_limit_follows_reload);
        tcase_add_test(tc, test_slot_names);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(user_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
