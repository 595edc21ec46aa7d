/* SPDX-License-Identifier: MIT */
/*
 * A thread that wakes the event loop must have let go of the lock the loop takes next: a loop
 * woken earlier only waits for that lock, and, raised above the thread (control_nice), takes
 * that thread's core first. A test linked with -Wl,--wrap=write and wake-fixture.c watches
 * every write of 1 to an eventfd (a wake-up) while it asks: another thread runs @take (which
 * takes the lock) and the write waits for it, up to WAKE_CEILING_MS. A wake-up written with
 * the lock held makes @take wait past the ceiling and is counted as blocked; after the first,
 * wake-ups are no longer looked at.
 */
#pragma once

#include <stdbool.h>

/* The most a wake-up waits for @take; readiness ends it at once. */
#define WAKE_CEILING_MS 10000

/* Looks at the next @max wake-ups (of any thread), running @take(@userdata) for each. */
void wake_watch(void (*take)(void *userdata), void *userdata, unsigned max);

/* Stops looking; what was counted stays. */
void wake_unwatch(void);

/* Wake-ups looked at, and those during which @take did not return. */
unsigned wake_looked(void);
unsigned wake_blocked(void);
