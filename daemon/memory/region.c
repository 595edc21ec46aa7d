/* SPDX-License-Identifier: MIT */
/* Region: a reference-counted, daemon-mapped memfd (a client's memory or the pool). */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/macro.h"
#include "daemon/memory/region.h"

static int region_new_mapped(int fd, uint64_t offset, uint64_t size, uint64_t page_size,
                             uint64_t id, RegionKind kind, uint64_t client_addr, Region **ret)
{
        _cleanup_free_ Region *r = NULL;
        void *data;

        r = calloc(1, sizeof(*r));
        if (!r)
                return -ENOMEM;

        data = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)offset);
        if (data == MAP_FAILED)
                return -errno;

        r->n_ref = 1;
        r->id = id;
        r->kind = kind;
        r->fd = fd;
        r->data = data;
        r->size = size;
        r->file_offset = offset;
        r->client_addr = client_addr;
        r->page_size = page_size;
        clist_init(&r->link_owner);
        atomic_init(&r->released, false);
        *ret = TAKE_PTR(r);
        return 0;
}

int region_new_from_fd(int fd, uint64_t offset, uint64_t size, uint64_t client_addr, uint64_t id,
                       Region **ret)
{
        uint64_t end, page = (uint64_t)sysconf(_SC_PAGESIZE);
        struct stat st;
        int seals;

        assert(ret);

        if (fstat(fd, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode))
                return -EBADF;

        /* Only memfds (and tmpfs/hugetlbfs files) know seals; other files answer EINVAL. */
        seals = fcntl(fd, F_GET_SEALS);
        if (seals < 0)
                return -EBADF;
        if (!(seals & F_SEAL_SHRINK))
                return -EPERM;

        if (size == 0 || st.st_size < 0 || size > SIZE_MAX || ADD_OVERFLOW(offset, size, &end) ||
            end > (uint64_t)st.st_size || offset > (uint64_t)INT64_MAX)
                return -EINVAL;
        /* A span that wraps past the top of the address space could never be looked up. */
        if (ADD_OVERFLOW(client_addr, size, &end))
                return -EINVAL;
        /* hugetlbfs says its huge page size here, which its mappings must be aligned to. */
        page = MAX(page, (uint64_t)st.st_blksize);
        if (offset % page != 0)
                return -EDOM;

        return region_new_mapped(fd, offset, size, page, id, REGION_CLIENT, client_addr, ret);
}

int region_new_memfd(const char *name, uint64_t size, uint64_t id, Region **ret)
{
        _cleanup_close_ int fd = -1;
        int r;

        assert(name);
        assert(ret);

        if (size == 0 || size > (uint64_t)INT64_MAX || size > SIZE_MAX)
                return -EINVAL;

        fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (fd < 0)
                return -errno;
        if (ftruncate(fd, (off_t)size) < 0)
                return -errno;
        if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
                return -errno;

        r = region_new_mapped(fd, 0, size, (uint64_t)sysconf(_SC_PAGESIZE), id, REGION_POOL, 0,
                              ret);
        if (r < 0)
                return r;
        TAKE_FD(fd);
        return 0;
}

Region *region_ref(Region *r)
{
        if (!r)
                return NULL;
        assert(r->n_ref > 0);
        r->n_ref++;
        return r;
}

Region *region_unref(Region *r)
{
        if (!r)
                return NULL;
        assert(r->n_ref > 0);
        if (--r->n_ref > 0)
                return NULL;

        if (r->data)
                (void)munmap(r->data, (size_t)r->size);
        safe_close(r->fd);
        free(r);
        return NULL;
}

Region *region_release(Region *r)
{
        assert(r);
        clist_unlink(&r->link_owner);
        atomic_store(&r->released, true);
        return region_unref(r);
}

int region_map_resident(Region *r, uint64_t offset, uint64_t len)
{
        /* a page's mincore() byte each: 512 pages, 2 MiB, a call */
        unsigned char in_core[512];
        uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), end;

        assert(r);

        if (r->page_size != page)
                return -EOPNOTSUPP;
        if (ADD_OVERFLOW(offset, len, &end) || end > r->size || offset % page != 0)
                return -EINVAL;

        while (offset < end) {
                size_t n = (size_t)MIN((end - offset + page - 1) / page, ARRAY_SIZE(in_core));
                uint8_t *at = r->data + offset;

                if (mincore(at, n * page, in_core) < 0)
                        return -errno;
                for (size_t i = 0, j; i < n; i = j) {
                        for (j = i; j < n && (in_core[j] & 1) == (in_core[i] & 1); j++)
                                ;
                        if ((in_core[i] & 1) &&
                            madvise(at + i * page, (j - i) * page, MADV_POPULATE_READ) < 0)
                                return errno == EINVAL ? -EOPNOTSUPP : -errno;
                }
                offset += n * page;
        }
        return 0;
}

bool region_contains(const Region *r, uint64_t client_addr, uint64_t len, uint64_t *ret_offset)
{
        uint64_t end, offset;

        assert(r);

        if (ADD_OVERFLOW(client_addr, len, &end))
                return false;
        if (client_addr < r->client_addr)
                return false;
        offset = client_addr - r->client_addr;
        if (offset >= r->size || len > r->size - offset)
                return false;

        if (ret_offset)
                *ret_offset = offset;
        return true;
}

Region *region_find(const CList *regions, uint64_t client_addr, uint64_t len, uint64_t *ret_offset)
{
        Region *r;

        assert(regions);

        CLIST_FOREACH (r, regions, link_owner)
                if (region_contains(r, client_addr, len, ret_offset))
                        return r;
        return NULL;
}
