/* SPDX-License-Identifier: MIT */
/*
 * Thread priorities (nice values, which Linux keeps per thread). kvdistd raises its control loop
 * above its own workers so that a status call or a new request does not wait for a core behind
 * the copy and data-plane threads; each worker returns to the nice the daemon started with,
 * whichever thread created it, since a new thread takes its creator's value.
 */
#pragma once

/* Records the calling thread's nice as the workers' own. Call once, before any thread starts. */
void thread_nice_init(void);

/* The calling thread's nice value. */
int thread_nice_get(void);

/*
 * Sets the calling thread's nice value: 0, -EINVAL outside [-20, 19], -EACCES or -EPERM where
 * raising it needs CAP_SYS_NICE or RLIMIT_NICE (LimitNICE=), or another -errno.
 */
int thread_nice_set(int nice);

/*
 * Puts the calling worker thread back at the nice thread_nice_init() recorded; nothing before
 * that was called (a test's own threads). Lowering a thread's priority needs no privilege.
 */
void thread_nice_worker(void);
