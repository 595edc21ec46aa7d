/* SPDX-License-Identifier: MIT */
/* Intrusive circular doubly linked list: an object embeds a CList node per list it is on. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "common/macro.h"

typedef struct CList CList;
struct CList {
        CList *next;
        CList *prev;
};

#define CLIST_INIT(name)                                                                           \
        {                                                                                          \
                &(name), &(name)                                                                   \
        }

static inline void clist_init(CList *l)
{
        l->next = l;
        l->prev = l;
}

static inline bool clist_is_empty(const CList *l)
{
        return l->next == l;
}

/* A node that was initialised and is on no list (or was unlinked). */
static inline bool clist_is_linked(const CList *n)
{
        return n->next != n;
}

static inline void clist_link_before(CList *where, CList *n)
{
        n->prev = where->prev;
        n->next = where;
        where->prev->next = n;
        where->prev = n;
}

static inline void clist_link_tail(CList *list, CList *n)
{
        clist_link_before(list, n);
}

static inline void clist_link_front(CList *list, CList *n)
{
        clist_link_before(list->next, n);
}

/* Unlinks @n from whatever list it is on; safe on an unlinked, initialised node. */
static inline void clist_unlink(CList *n)
{
        n->prev->next = n->next;
        n->next->prev = n->prev;
        clist_init(n);
}

/* Moves every node of @from, in order, to the tail of @to; @from is left empty. */
static inline void clist_splice_tail(CList *to, CList *from)
{
        if (clist_is_empty(from))
                return;
        from->next->prev = to->prev;
        to->prev->next = from->next;
        from->prev->next = to;
        to->prev = from->prev;
        clist_init(from);
}

static inline size_t clist_length(const CList *l)
{
        size_t n = 0;
        for (const CList *i = l->next; i != l; i = i->next)
                n++;
        return n;
}

#define clist_entry(node, type, member) container_of(node, type, member)
#define clist_first_entry(list, type, member)                                                      \
        (clist_is_empty(list) ? NULL : clist_entry((list)->next, type, member))

#define CLIST_FOREACH(var, list, member)                                                           \
        for (var = clist_entry((list)->next, __typeof__(*var), member); &var->member != (list);    \
             var = clist_entry(var->member.next, __typeof__(*var), member))

#define CLIST_FOREACH_SAFE(var, tmp, list, member)                                                 \
        for (var = clist_entry((list)->next, __typeof__(*var), member),                            \
            tmp = clist_entry(var->member.next, __typeof__(*var), member);                         \
             &var->member != (list);                                                               \
             var = tmp, tmp = clist_entry(var->member.next, __typeof__(*var), member))
