/* SPDX-License-Identifier: MIT */
/*
 * Region: a span of shared memory (a memfd) that the daemon has mapped and can move bytes in.
 * Client regions come from kvd_mem_alloc() over SCM_RIGHTS; the pool is one region of its own.
 * Regions are reference counted: caches, links and transfers in flight each hold one, so the
 * mapping outlives a client that frees or crashes while bytes still move.
 */
#pragma once

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/clist.h"

typedef struct Region Region;

typedef enum RegionKind {
        REGION_CLIENT, /* a client's memfd, mapped by that client at client_addr */
        REGION_POOL,   /* the daemon's memory pool */
        _REGION_KIND_MAX,
        _REGION_KIND_INVALID = -22,
} RegionKind;

struct Region {
        unsigned n_ref;
        uint64_t id;
        RegionKind kind;
        int fd;
        uint8_t *data; /* the daemon's mapping of all @size bytes */
        uint64_t size;
        uint64_t file_offset; /* where @data starts in the file */
        uint64_t client_addr; /* REGION_CLIENT: the owner's mapping address */
        uint64_t page_size;   /* the file's: the system's, or its huge page size */
        CList link_owner;     /* on the owning cluster's region list (owner's business) */
        atomic_bool released; /* its owner let it go: work on it in the background may stop */
};

/*
 * Wraps @size bytes from @offset of a client's memfd (its own from kvd_mem_alloc(), offset 0, or
 * an engine's from kvd_mem_register()). Checks that @fd is a memfd sealed against shrinking (a
 * client that truncates must never make the daemon fault), that it holds those bytes, and maps
 * them read-write. On success the region owns @fd. -EBADF not a memfd, -EPERM F_SEAL_SHRINK
 * missing, -EINVAL size 0 or beyond the file, -EDOM an offset that is not a multiple of the
 * file's page size, -errno from mmap.
 */
int region_new_from_fd(int fd, uint64_t offset, uint64_t size, uint64_t client_addr, uint64_t id,
                       Region **ret);

/*
 * Creates a memfd of @size bytes (sealed against shrinking and growing) and maps it, as a
 * REGION_POOL region with client_addr 0. -EINVAL size 0, -errno from memfd_create/mmap.
 */
int region_new_memfd(const char *name, uint64_t size, uint64_t id, Region **ret);

/* Takes a reference on @r. Accepts NULL; returns @r. */
Region *region_ref(Region *r);
/* Drops a reference; the last one unmaps and closes. Accepts NULL; returns NULL. */
Region *region_unref(Region *r);

/*
 * The owner lets @r go: unlinks it from the owner's list, tells work on it in the background to
 * stop, and drops the owner's reference. Returns NULL.
 */
Region *region_release(Region *r);

static inline void region_unrefp(Region **r)
{
        if (*r)
                region_unref(*r);
}

/*
 * Maps into the daemon's page tables the pages of [@offset, +@len) of @r that its file holds
 * already (mincore(), then MADV_POPULATE_READ), so that copies into and out of them take no page
 * faults later; a page the file does not hold stays a hole: nothing is allocated, nothing charged
 * to kvdistd. Only system calls on the mapping: callable from any thread while a reference is
 * held. -EOPNOTSUPP for a region of huge pages (a fault per huge page is cheap) or a kernel
 * without MADV_POPULATE_READ (before 5.14); -EINVAL for a range outside the region.
 */
int region_map_resident(Region *r, uint64_t offset, uint64_t len);

/* Whether [@client_addr, +@len) lies inside a client region, with *@ret_offset its offset. */
bool region_contains(const Region *r, uint64_t client_addr, uint64_t len, uint64_t *ret_offset);

/*
 * Finds the region on @regions (linked through link_owner) that holds all of
 * [@client_addr, +@len); NULL when none does (the span is outside shareable memory or straddles
 * two regions).
 */
Region *region_find(const CList *regions, uint64_t client_addr, uint64_t len, uint64_t *ret_offset);
