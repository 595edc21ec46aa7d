/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of common/thread-nice: a thread's nice is its own, a new thread takes its creator's,
 * and thread_nice_worker() puts a worker back at the value recorded before the creator was raised.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/resource.h>

#include "common/thread-nice.h"

typedef struct Probe {
        bool call_worker;
        int nice;
} Probe;

static void *probe_thread(void *userdata)
{
        Probe *p = userdata;

        if (p->call_worker)
                thread_nice_worker();
        p->nice = thread_nice_get();
        return NULL;
}

/* The nice of a thread this one starts, with or without thread_nice_worker(). */
static int nice_of_new_thread(bool call_worker)
{
        Probe p = {.call_worker = call_worker, .nice = 100};
        pthread_t t;

        ck_assert_int_eq(pthread_create(&t, NULL, probe_thread, &p), 0);
        ck_assert_int_eq(pthread_join(t, NULL), 0);
        return p.nice;
}

/* Raises the calling thread by @by, or says why it cannot and returns false. */
static bool raise_self(int base, int by)
{
        int r = thread_nice_set(base - by);

        if (r == -EACCES || r == -EPERM) {
                fprintf(stderr, "thread-nice: raising a thread needs CAP_SYS_NICE or RLIMIT_NICE "
                                "here; the raised cases are not run\n");
                return false;
        }
        ck_assert_int_eq(r, 0);
        ck_assert_int_eq(thread_nice_get(), base - by);
        return true;
}

static void *raised_cases(void *userdata)
{
        int base = *(int *)userdata;

        /* this thread stands for the control loop; the test's main thread keeps the base */
        if (!raise_self(base, 5))
                return NULL;
        /* a thread takes its creator's nice: what thread_nice_worker() is for */
        ck_assert_int_eq(nice_of_new_thread(false), base - 5);
        ck_assert_int_eq(nice_of_new_thread(true), base);
        return NULL;
}

START_TEST(test_worker_returns_to_base)
{
        int base = thread_nice_get();
        pthread_t t;

        ck_assert_int_ge(base, -20);
        ck_assert_int_le(base, 19);
        thread_nice_init();
        ck_assert_int_eq(pthread_create(&t, NULL, raised_cases, &base), 0);
        ck_assert_int_eq(pthread_join(t, NULL), 0);
        /* only the raised thread moved */
        ck_assert_int_eq(thread_nice_get(), base);
}
END_TEST

START_TEST(test_lowering_needs_nothing)
{
        int base = thread_nice_get();

        if (base >= 19)
                return;
        /* a forked test process: the change dies with it */
        ck_assert_int_eq(thread_nice_set(base + 1), 0);
        ck_assert_int_eq(thread_nice_get(), base + 1);
}
END_TEST

START_TEST(test_out_of_range)
{
        int base = thread_nice_get();

        ck_assert_int_eq(thread_nice_set(-21), -EINVAL);
        ck_assert_int_eq(thread_nice_set(20), -EINVAL);
        ck_assert_int_eq(thread_nice_get(), base);
}
END_TEST

START_TEST(test_worker_before_init)
{
        int base = thread_nice_get();

        if (base >= 19)
                return;
        /* nothing recorded in this (forked) process: a worker keeps its creator's value */
        ck_assert_int_eq(thread_nice_set(base + 1), 0);
        ck_assert_int_eq(nice_of_new_thread(true), base + 1);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("thread-nice");
        TCase *tc = tcase_create("nice");
        SRunner *sr;
        int failed;

        tcase_add_test(tc, test_worker_returns_to_base);
        tcase_add_test(tc, test_lowering_needs_nothing);
        tcase_add_test(tc, test_out_of_range);
        tcase_add_test(tc, test_worker_before_init);
        suite_add_tcase(s, tc);
        sr = srunner_create(s);
        /* each case changes its process's nice and what thread_nice_init() recorded */
        srunner_set_fork_status(sr, CK_FORK);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? 1 : 0;
}
