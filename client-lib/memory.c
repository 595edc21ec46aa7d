/* SPDX-License-Identifier: MIT */
/*
 * libkvdist memory: regions (sealed memfds this process maps and passes to kvdistd) and the
 * mapping of the daemon's pool.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client-lib/client.h"

static int mem_alloc(kvd_client *c, size_t size, void **ret_ptr, Error *err)
{
        Kvdist__V1__RegionAdd add = KVDIST__V1__REGION_ADD__INIT;
        _cleanup_pb_ ProtobufCMessage *reply = NULL;
        _cleanup_free_ ClientRegion *region = NULL;
        _cleanup_close_ int fd = -1;
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        void *addr;
        int r;

        if (!ret_ptr)
                return error_set(err, KVD_E_PARAM_INVALID, "ret_ptr is NULL");
        if (size == 0)
                return error_set(err, KVD_E_PARAM_INVALID, "size is 0");
        if (size > (size_t)INT64_MAX - page)
                return error_set(err, KVD_E_PARAM_INVALID, "size %zu is too large", size);
        size = ALIGN_POW2(size, page);

        region = calloc(1, sizeof(*region));
        if (!region)
                return error_set(err, KVD_E_OUT_OF_MEMORY, "out of memory");

        fd = memfd_create("kvdist-region", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (fd < 0)
                return error_set(err, errno == ENOMEM ? KVD_E_OUT_OF_MEMORY : KVD_E_FAILED,
                                 "memfd_create(): %s", strerror(errno));
        if (ftruncate(fd, (off_t)size) < 0)
                return error_set(err, KVD_E_OUT_OF_MEMORY, "cannot size a memfd to %zu bytes: %s",
                                 size, strerror(errno));
        /* The daemon maps it too: neither side may ever see it shrink under a mapping. */
        if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
                return error_set(err, KVD_E_FAILED, "cannot seal the memfd: %s", strerror(errno));

        addr = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (addr == MAP_FAILED)
                return error_set(err, KVD_E_OUT_OF_MEMORY, "cannot map %zu bytes: %s", size,
                                 strerror(errno));

        add.size = size;
        add.client_addr = (uint64_t)(uintptr_t)addr;
        r = conn_call(c, KVDIST__V1__MSG_TYPE__MSG_REGION_ADD, &add.base, &fd, 1,
                      CLIENT_CALL_TIMEOUT_MS, &reply, NULL, err);
        if (r < 0) {
                (void)munmap(addr, size);
                return r;
        }

        region->region_id = ((const Kvdist__V1__RegionAddReply *)reply)->region_id;
        region->addr = addr;
        region->size = size;
        pthread_mutex_lock(&c->lock);
        clist_link_tail(&c->regions, &TAKE_PTR(region)->link);
        pthread_mutex_unlock(&c->lock);

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
        r = mem_alloc(client, size, ret_ptr, &err);
        return client_return(client, &err, r);
}

static int mem_free(kvd_client *c, void *ptr, Error *err)
{
        Kvdist__V1__RegionRemove rm = KVDIST__V1__REGION_REMOVE__INIT;
        ClientRegion *region = NULL, *i;
        int r;

        pthread_mutex_lock(&c->lock);
        CLIST_FOREACH (i, &c->regions, link)
                if (i->addr == ptr) {
                        region = i;
                        break;
                }
        if (!region)
                r = error_set(err, KVD_E_PARAM_INVALID, "%p is not memory from kvd_mem_alloc()",
                              ptr);
        else if (region->removing)
                r = error_set(err, KVD_E_PARAM_INVALID, "%p is being freed by another thread", ptr);
        else {
                region->removing = true;
                r = KVD_OK;
        }
        pthread_mutex_unlock(&c->lock);
        if (r < 0)
                return r;

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
                (void)munmap(region->addr, region->size);
                free(region);
        }
        return r;
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
                if (!keep_regions)
                        (void)munmap(region->addr, region->size);
                free(region);
        }
        if (c->pool_base)
                (void)munmap(c->pool_base, c->pool_size);
        c->pool_base = NULL;
        c->pool_size = 0;
}
