/* SPDX-License-Identifier: MIT */
/*
 * Hook: listener lists, the way a lower layer tells upper ones about its events without naming
 * them (PipeWire's spa_hook). The lower layer declares a struct of event callbacks and keeps a
 * HookList; an upper layer fills in the callbacks it cares about (the others stay NULL) and adds
 * its Hook, which it embeds and owns, at start. Listeners run in the order they were added.
 */
#pragma once

#include "common/clist.h"

typedef struct Hook {
        CList link;         /* on HookList.hooks */
        const void *events; /* the list's struct of callbacks */
        void *userdata;     /* the first argument of every callback */
} Hook;

typedef struct HookList {
        CList hooks;
} HookList;

static inline void hook_list_init(HookList *l)
{
        clist_init(&l->hooks);
}

/* Adds @h (initialised here) to the end of @l with @events (a struct the list declares). */
static inline void hook_list_append(HookList *l, Hook *h, const void *events, void *userdata)
{
        h->events = events;
        h->userdata = userdata;
        clist_link_tail(&l->hooks, &h->link);
}

/* Takes @h off its list; safe on a hook that was never added (zeroed) or already removed. */
static inline void hook_remove(Hook *h)
{
        if (h->link.next)
                clist_unlink(&h->link);
}

/*
 * Calls @method of every listener of @l whose @type struct has it, with the listener's userdata
 * and the arguments that follow. A callback may remove its own hook, not another one.
 */
#define hook_list_emit(l, type, method, ...)                                                       \
        do {                                                                                       \
                Hook *_h, *_tmp;                                                                   \
                CLIST_FOREACH_SAFE (_h, _tmp, &(l)->hooks, link) {                                 \
                        const type *_e = _h->events;                                               \
                        if (_e->method)                                                            \
                                _e->method(_h->userdata, ##__VA_ARGS__);                           \
                }                                                                                  \
        } while (0)
