/* SPDX-License-Identifier: MIT */
/*
 * libkvdist memory: regions (sealed memfds this process maps and passes to kvdistd: its own from
 * kvd_mem_alloc(), in huge pages too, or the caller's from kvd_mem_register()) and the mapping of
 * the daemon's pool.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client-lib/client.h"

/* Sends @fd's [offset, offset + size) mapped at @addr to the daemon; records the region. */
static int region_add(kvd_client *c, int fd, uint64_t offset, size_t size, void *addr,
                      Kvdist__V1__RegionSource source, uint64_t *ret_id, Error *err)
{
        Kvdist__V1__RegionAdd add = KVDIST__V1__REGION_ADD__INIT;
        _cleanup_pb_ ProtobufCMessage *reply = NULL;
        _cleanup_free_ ClientRegion *region = NULL;
        int r;

        region = calloc(1, sizeof(*region));
        if (!region)
                return error_set(err, KVD_E_OUT_OF_MEMORY, "out of memory");
        add.size = size;
        add.client_addr = (uint64_t)(uintptr_t)addr;
        add.file_offset = offset;
        add.source = source;
        r = conn_call(c, KVDIST__V1__MSG_TYPE__MSG_REGION_ADD, &add.base, fd >= 0 ? &fd : NULL,
                      fd >= 0 ? 1 : 0, CLIENT_CALL_TIMEOUT_MS, &reply, NULL, err);
        if (r < 0)
                return r;

        region->region_id = ((const Kvdist__V1__RegionAddReply *)reply)->region_id;
        region->addr = addr;
        region->size = size;
        region->engine = source != KVDIST__V1__REGION_SOURCE__REGION_SOURCE_LIBKVDIST;
        if (ret_id)
                *ret_id = region->region_id;
        pthread_mutex_lock(&c->lock);
        clist_link_tail(&c->regions, &TAKE_PTR(region)->link);
        pthread_mutex_unlock(&c->lock);
        return KVD_OK;
}

/* A sealed memfd of @size bytes (a multiple of the page size), MFD_HUGETLB with @huge. */
static int memfd_sized(size_t size, bool huge, Error *err)
{
        _cleanup_close_ int fd = -1;

        fd = memfd_create("kvdist-region",
                          MFD_CLOEXEC | MFD_ALLOW_SEALING | (huge ? MFD_HUGETLB : 0));
        if (fd < 0)
                return error_set(err, errno == ENOMEM ? KVD_E_OUT_OF_MEMORY : KVD_E_FAILED,
                                 "memfd_create(): %s", strerror(errno));
        if (ftruncate(fd, (off_t)size) < 0)
                return error_set(err, KVD_E_OUT_OF_MEMORY, "cannot size a memfd to %zu bytes: %s",
                                 size, strerror(errno));
        /* The daemon maps it too: neither side may ever see it shrink under a mapping. */
        if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
                return error_set(err, KVD_E_FAILED, "cannot seal the memfd: %s", strerror(errno));
        return TAKE_FD(fd);
}

/*
 * Allocates @size bytes in pages of @page bytes (@huge: MFD_HUGETLB), the pages taken now: a
 * host without free huge pages fails here rather than at first touch, and kvdistd finds them
 * all to map ahead of the first transfer.
 */
static int mem_alloc_pages(kvd_client *c, size_t size, size_t page, bool huge, void **ret_ptr,
                           Error *err)
{
        _cleanup_close_ int fd = -1;
        void *addr;
        int r;

        if (!ret_ptr)
                return error_set(err, KVD_E_PARAM_INVALID, "ret_ptr is NULL");
        if (size == 0)
                return error_set(err, KVD_E_PARAM_INVALID, "size is 0");
        if (size > (size_t)INT64_MAX - page)
                return error_set(err, KVD_E_PARAM_INVALID, "size %zu is too large", size);
        size = ALIGN_POW2(size, page);

        fd = memfd_sized(size, huge, err);
        if (fd < 0)
                return fd;
        /* Every page now: kvdistd maps the pages a region holds when it is registered, so the
         * first transfers fault on none of them, here or there. */
        addr = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
        if (addr == MAP_FAILED)
                return error_set(err, KVD_E_OUT_OF_MEMORY, "cannot map %zu bytes: %s", size,
                                 strerror(errno));
        r = region_add(c, fd, 0, size, addr, KVDIST__V1__REGION_SOURCE__REGION_SOURCE_LIBKVDIST,
                       NULL, err);
        if (r < 0) {
                (void)munmap(addr, size);
                return r;
        }
        *ret_ptr = addr;
        return KVD_OK;
}

_public_ int kvd_mem_alloc(kvd_client *client, size_t size, void **ret_ptr)
{
        Error err = ERROR_INIT;
        int r;

        if (!client)
                return client_return(NULL, &err,
                                     error_set(&err, KVD_E_PARAM_INVALID, "client is NULL"));
        r = mem_alloc_pages(client, size, (size_t)sysconf(_SC_PAGESIZE), false, ret_ptr, &err);
        return client_return(client, &err, r);
}

/* The size of the huge pages MFD_HUGETLB gives, from /proc/meminfo; 0 when none is said. */
static size_t huge_page_size(void)
{
        FILE *f = fopen("/proc/meminfo", "re");
        size_t kib, size = 0;
        char line[128];

        if (!f)
                return 0;
        while (size == 0 && fgets(line, sizeof(line), f))
                if (sscanf(line, "Hugepagesize: %zu kB", &kib) == 1)
                        size = kib * 1024;
        fclose(f);
        return size;
}

_public_ int kvd_mem_alloc_huge(kvd_client *client, size_t size, void **ret_ptr,
                                size_t *ret_page_size)
{
        size_t page = (size_t)sysconf(_SC_PAGESIZE), huge = huge_page_size();
        Error err = ERROR_INIT;
        int r = KVD_E_FAILED;

        if (!client)
                return client_return(NULL, &err,
                                     error_set(&err, KVD_E_PARAM_INVALID, "client is NULL"));
        if (huge > page) {
                r = mem_alloc_pages(client, size, huge, true, ret_ptr, &err);
                /* No huge page free or configured: base pages instead, as said. */
                if (r == KVD_E_OUT_OF_MEMORY || r == KVD_E_FAILED)
                        error_clear(&err);
                else
                        page = huge;
        }
        if (r == KVD_E_OUT_OF_MEMORY || r == KVD_E_FAILED)
                r = mem_alloc_pages(client, size, page, false, ret_ptr, &err);
        if (r == KVD_OK && ret_page_size)
                *ret_page_size = page;
        return client_return(client, &err, r);
}

#define MEM_DESC_V1_SIZE (offsetof(kvd_mem_desc, flags) + sizeof(uint32_t))

_public_ int kvd_mem_register(kvd_client *client, const kvd_mem_desc *desc, uint64_t *ret_mem_id)
{
        Error err = ERROR_INIT;
        kvd_mem_desc d;
        struct stat st;
        int r;

        if (!client)
                return client_return(NULL, &err,
                                     error_set(&err, KVD_E_PARAM_INVALID, "client is NULL"));
        if (!desc || !ret_mem_id)
                return client_return(client, &err,
                                     error_set(&err, KVD_E_PARAM_INVALID, "%s is NULL",
                                               desc ? "ret_mem_id" : "desc"));
        r = client_copy_opts(&d, sizeof(d), MEM_DESC_V1_SIZE, desc, desc->size, "desc", &err);
        if (r == KVD_OK && d.kind == KVD_MEM_DMABUF)
                r = error_set(&err, KVD_E_FEATURE_NOT_ENABLED,
                              "dma-buf memory needs an RDMA device that registers dma-bufs "
                              "(ibv_reg_dmabuf_mr): this build has no such transport");
        else if (r == KVD_OK && d.kind != KVD_MEM_FILE)
                r = error_set(&err, KVD_E_PARAM_INVALID, "desc->kind %d is unknown", (int)d.kind);
        else if (r == KVD_OK && d.flags != 0)
                r = error_set(&err, KVD_E_PARAM_INVALID, "desc->flags 0x%x: none is known",
                              d.flags);
        else if (r == KVD_OK && (d.fd < 0 || fstat(d.fd, &st) < 0))
                r = error_set(&err, KVD_E_PARAM_INVALID, "desc->fd %d is not an open file", d.fd);
        /* kvdistd takes memfds only, and hangs up on a client that passes anything else. */
        else if (r == KVD_OK && !S_ISREG(st.st_mode))
                r = error_set(&err, KVD_E_PARAM_INVALID, "desc->fd %d is not a memfd", d.fd);
        else if (r == KVD_OK && (d.length == 0 || !d.addr || d.length > SIZE_MAX))
                r = error_set(&err, KVD_E_PARAM_INVALID, "desc->%s is %s",
                              d.addr ? "length" : "addr", d.addr ? "0 or too large" : "NULL");
        if (r == KVD_OK)
                r = region_add(client, d.fd, d.offset, (size_t)d.length, d.addr,
                               KVDIST__V1__REGION_SOURCE__REGION_SOURCE_ENGINE, ret_mem_id, &err);
        return client_return(client, &err, r);
}

/* Removes @region (marked removing by the caller) from the daemon, then from @c. */
static int region_remove(kvd_client *c, ClientRegion *region, Error *err)
{
        Kvdist__V1__RegionRemove rm = KVDIST__V1__REGION_REMOVE__INIT;
        int r;

        rm.region_id = region->region_id;
        r = conn_call(c, KVDIST__V1__MSG_TYPE__MSG_REGION_REMOVE, &rm.base, NULL, 0,
                      CLIENT_CALL_TIMEOUT_MS, NULL, NULL, err);

        pthread_mutex_lock(&c->lock);
        /* Unmapped only once the daemon let go of it (BUSY: a cache still lies in it). */
        if (r == KVD_OK)
                clist_unlink(&region->link);
        else
                region->removing = false;
        pthread_mutex_unlock(&c->lock);

        if (r == KVD_OK) {
                if (!region->engine)
                        (void)munmap(region->addr, region->size);
                free(region);
        }
        return r;
}

/* The region @match says, marked removing; NULL with @err set when there is none to remove. */
static ClientRegion *region_take(kvd_client *c, bool (*match)(const ClientRegion *, const void *),
                                 const void *what, const char *name, Error *err)
{
        ClientRegion *region = NULL, *i;

        pthread_mutex_lock(&c->lock);
        CLIST_FOREACH (i, &c->regions, link)
                if (match(i, what)) {
                        region = i;
                        break;
                }
        if (!region)
                error_set(err, KVD_E_PARAM_INVALID, "%s", name);
        else if (region->removing) {
                error_set(err, KVD_E_PARAM_INVALID, "that memory is being freed by another thread");
                region = NULL;
        } else
                region->removing = true;
        pthread_mutex_unlock(&c->lock);
        return region;
}

static bool match_alloc(const ClientRegion *r, const void *ptr)
{
        return !r->engine && r->addr == ptr;
}

static bool match_engine(const ClientRegion *r, const void *id)
{
        return r->engine && r->region_id == *(const uint64_t *)id;
}

static int mem_free(kvd_client *c, void *ptr, Error *err)
{
        char name[96];
        ClientRegion *region;

        (void)snprintf(name, sizeof(name), "%p is not memory from kvd_mem_alloc()", ptr);
        region = region_take(c, match_alloc, ptr, name, err);
        return region ? region_remove(c, region, err) : err->code;
}

_public_ int kvd_mem_unregister(kvd_client *client, uint64_t mem_id)
{
        Error err = ERROR_INIT;
        ClientRegion *region;
        char name[96];
        int r;

        if (!client)
                return client_return(NULL, &err,
                                     error_set(&err, KVD_E_PARAM_INVALID, "client is NULL"));
        (void)snprintf(name, sizeof(name), "memory %" PRIu64 " is not from kvd_mem_register()",
                       mem_id);
        region = region_take(client, match_engine, &mem_id, name, &err);
        r = region ? region_remove(client, region, &err) : err.code;
        return client_return(client, &err, r);
}

_public_ int kvd_mem_free(kvd_client *client, void *ptr)
{
        Error err = ERROR_INIT;
        int r;

        if (!client)
                return client_return(NULL, &err,
                                     error_set(&err, KVD_E_PARAM_INVALID, "client is NULL"));
        r = mem_free(client, ptr, &err);
        return client_return(client, &err, r);
}

int memory_map_pool(kvd_client *c, Error *err)
{
        Kvdist__V1__PoolMap map = KVDIST__V1__POOL_MAP__INIT;
        _cleanup_pb_ ProtobufCMessage *reply = NULL;
        _cleanup_close_ int fd = -1;
        uint64_t size;
        struct stat st;
        void *addr;
        int r = KVD_OK;

        pthread_mutex_lock(&c->pool_lock);
        if (c->pool_base)
                goto out;

        r = conn_call(c, KVDIST__V1__MSG_TYPE__MSG_POOL_MAP, &map.base, NULL, 0,
                      CLIENT_CALL_TIMEOUT_MS, &reply, &fd, err);
        if (r < 0)
                goto out;

        size = ((const Kvdist__V1__PoolMapReply *)reply)->size;
        if (fd < 0) {
                r = error_set(err, KVD_E_FAILED, "kvdistd sent no pool memfd");
                goto out;
        }
        if (size == 0 || size > SIZE_MAX || fstat(fd, &st) < 0 || (uint64_t)st.st_size < size) {
                r = error_set(err, KVD_E_FAILED,
                              "kvdistd sent a pool of %llu bytes that cannot be mapped",
                              (unsigned long long)size);
                goto out;
        }

        addr = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (addr == MAP_FAILED) {
                r = error_set(err, KVD_E_OUT_OF_MEMORY, "cannot map the %llu byte pool: %s",
                              (unsigned long long)size, strerror(errno));
                goto out;
        }
        c->pool_size = (size_t)size;
        c->pool_base = addr;

out:
        pthread_mutex_unlock(&c->pool_lock);
        return r;
}

void memory_unmap_all(kvd_client *c, bool keep_regions)
{
        ClientRegion *region, *tmp;

        CLIST_FOREACH_SAFE (region, tmp, &c->regions, link) {
                clist_unlink(&region->link);
                /* The caller's own memory is the caller's to unmap. */
                if (!keep_regions && !region->engine)
                        (void)munmap(region->addr, region->size);
                free(region);
        }
        if (c->pool_base)
                (void)munmap(c->pool_base, c->pool_size);
        c->pool_base = NULL;
        c->pool_size = 0;
}
