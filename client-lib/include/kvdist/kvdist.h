/* SPDX-License-Identifier: MIT */
/*
 * kvdist client library: how an inference worker talks to its node's kvdistd to register KV
 * cache memory, link to other clusters and move KV blocks and caches between them.
 *
 * Every call returns KVD_OK (0) or a negative KVD_E_* status; kvd_strerror() names a status and
 * kvd_last_error() gives the detail of the last failure on a client. A kvd_client may be used
 * from several threads at once, except kvd_client_finalize(), which must run alone.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <kvdist/kvdist-version.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes. The meanings follow LLM-DataDist's LLMStatusCode, plus what a daemon adds. */
enum {
        KVD_OK = 0,
        KVD_E_FAILED = -1,                   /* unclassified failure */
        KVD_E_PARAM_INVALID = -2,            /* an argument is wrong; kvd_last_error() says which */
        KVD_E_TIMEOUT = -3,                  /* the deadline passed; nothing lands after this */
        KVD_E_CACHE_NOT_EXIST = -4,          /* no cache under that id or key */
        KVD_E_NOT_YET_LINK = -5,             /* no link to the cluster named by the key */
        KVD_E_ALREADY_LINK = -6,             /* that link exists already */
        KVD_E_LINK_FAILED = -7,              /* the link could not be made */
        KVD_E_UNLINK_FAILED = -8,            /* the link could not be torn down */
        KVD_E_CLUSTER_NUM_EXCEED_LIMIT = -9, /* more than 16 clusters in one call */
        KVD_E_PROCESSING_LINK = -10,         /* a link set-up for that cluster is under way */
        KVD_E_OUT_OF_MEMORY = -11,           /* pool, region or process memory exhausted */
        KVD_E_EXIST_LINK = -12,              /* refused while links exist */
        KVD_E_FEATURE_NOT_ENABLED = -13,     /* configured off, or not built */
        KVD_E_LINK_BUSY = -14,               /* conflicting concurrent calls on one link */
        KVD_E_CACHE_KEY_ALREADY_EXIST = -15, /* the key names another cache already */
        KVD_E_CACHE_ID_ALREADY_EXIST = -16,
        KVD_E_NOT_INITIALIZED = -17,    /* the client is not a cluster (kvd_client_init) */
        KVD_E_CLUSTER_EXISTS = -18,     /* the cluster id is attached to the daemon already */
        KVD_E_CACHE_INCOMPATIBLE = -19, /* source and destination shapes do not match */
        KVD_E_LIMIT_EXCEEDED = -20,     /* a configured quota (regions, caches, ...) is full */
        KVD_E_UNSUPPORTED = -21,        /* the daemon does not know the request */
        KVD_E_DAEMON_UNAVAILABLE = -22, /* no daemon on the socket, or it went away */
        KVD_E_PEER_LOST = -23,          /* the remote cluster or daemon went away */
        KVD_E_PERMISSION_DENIED =
                -24, /* refused: the allow-list, or a cache a link does not reach */
        KVD_E_PROTOCOL_MISMATCH = -25, /* client and daemon speak different protocols */
        KVD_E_BUSY = -26,              /* the resource is in use (e.g. a cache mid-transfer) */
        KVD_E_IN_PROGRESS = -27,       /* not a failure: the task is still running (wait again) */
        KVD_E_CANCELLED = -28,         /* kvd_task_cancel() stopped the transfer */
        _KVD_E_MIN = -28,
};

/*
 * The version of the libkvdist this process runs with ("1.0.0"), which may be newer than the
 * KVDIST_VERSION a program was compiled against. libkvdist.so.1 keeps its ABI through every
 * 1.x release: symbols are versioned (KVDIST_1.0), and option structs grow only at their end.
 */
const char *kvd_version(void);

/* Returns a static name for @status ("KVD_E_TIMEOUT"), or "unknown status". */
const char *kvd_strerror(int status);

typedef struct kvd_client kvd_client;
typedef struct kvd_task kvd_task;

typedef enum kvd_role {
        KVD_ROLE_PROMPT = 1,
        KVD_ROLE_DECODER = 2,
        KVD_ROLE_MIX = 3,
} kvd_role;

typedef enum kvd_dtype {
        KVD_DT_FLOAT = 0,
        KVD_DT_FLOAT16 = 1,
        KVD_DT_BF16 = 2,
        KVD_DT_INT8 = 3,
        KVD_DT_INT16 = 4,
        KVD_DT_UINT16 = 5,
        KVD_DT_UINT8 = 6,
        KVD_DT_INT32 = 7,
        KVD_DT_INT64 = 8,
        KVD_DT_UINT32 = 9,
        KVD_DT_UINT64 = 10,
        KVD_DT_BOOL = 11,
        KVD_DT_DOUBLE = 12,
        _KVD_DT_MAX,
} kvd_dtype;

/* A key/value option for kvd_client_init(), kvd_client_connect() and kvd_switch_role(). */
typedef struct kvd_option {
        const char *key;
        const char *value;
} kvd_option;

/*
 * Connects to the daemon and attaches this process as cluster @cluster_id with @role.
 * Options: "device_id" (required), "sync_kv_timeout_ms" (default 1000), "listen_ip_info"
 * ("ip:port", "[v6]:port"; numeric, port 0 = any free port): with it the cluster is a server
 * that others link to at that address (the daemon listens there for as long as the cluster is
 * attached, one port per cluster, unless the address is the daemon's own --listen address),
 * without it a client that links out and whose links from others fail with LINK_FAILED (unless
 * the daemon is configured with client_clusters_accept_links); "socket_path" (default
 * $KVDIST_SOCKET, then the daemon's default),
 * "local_comm_res" (a rank-table fragment naming this cluster's server and device, e.g.
 * {"server_list": [{"server_id": "node-a", "device": [{"device_id": "0",
 * "device_ip": "10.0.0.1"}]}]}, or with "version": "1.2" a server's "host_ip" as in
 * kvd_domain_link(); left out, the daemon generates it from its peer address). On success
 * *@ret_client owns the connection until kvd_client_finalize(). Fails with PARAM_INVALID for bad
 * options (a listen_ip_info that does not parse), LINK_FAILED for a listen_ip_info the daemon
 * cannot listen on (another cluster's port, an address in use or not of this host), CLUSTER_EXISTS
 * for a duplicate id, DAEMON_UNAVAILABLE when nothing listens, PERMISSION_DENIED when the daemon
 * refuses us (its allow_uids / allow_gids; the detail names our uid and gid) or when the socket
 * lies in a /tmp/kvdist-UID folder that is a symbolic link, belongs to another uid or is writable
 * by others (nothing is sent there), LIMIT_EXCEEDED when the daemon has as many connections or
 * clusters as it takes, or when this uid's clients hold all that the daemon's limits.per_user
 * lets one uid hold (the detail names the uid and the limit).
 */
int kvd_client_init(uint64_t cluster_id, kvd_role role, const kvd_option *options, size_t n_options,
                    kvd_client **ret_client);

/*
 * Connects without attaching a cluster: only read-only calls work (kvd_daemon_status()).
 * Options: "socket_path". This is what kvdistctl uses. Fails as kvd_client_init() does. The
 * daemon closes such a connection once it has sent no request for its limits.attach_timeout_ms
 * (10 s by default); a later call then fails with TIMEOUT and a detail naming that key.
 */
int kvd_client_connect(const kvd_option *options, size_t n_options, kvd_client **ret_client);

/*
 * Detaches the cluster (the daemon tears down its links, caches and regions), unmaps every
 * region of this client and frees @client. Tasks still pending fail with DAEMON_UNAVAILABLE.
 * Accepts NULL. Returns KVD_OK, or the daemon's status if it refused the orderly detach
 * (the client is freed either way).
 */
int kvd_client_finalize(kvd_client *client);

/*
 * As kvd_client_finalize(), except that memory from kvd_mem_alloc() stays mapped in this
 * process: the daemon forgets it as usual, and each allocation becomes plain shared memory that
 * the caller unmaps with munmap(ptr, size rounded up to the page size) once nothing uses it
 * (kvd_mem_free() no longer applies). For language bindings whose arrays over that memory may
 * outlive the client. The daemon's pool is unmapped as by kvd_client_finalize().
 */
int kvd_client_finalize_keep_memory(kvd_client *client);

/*
 * The detail of the last failure on @client (thread-local per client), "" if none. With NULL:
 * the detail of the last failed kvd_client_init() or kvd_client_connect() on this thread.
 */
const char *kvd_last_error(kvd_client *client);

/*
 * Allocates @size bytes of memory that this process and the daemon both map (a sealed memfd
 * passed to the daemon). KV caches registered with kvd_register_cache*() must live in it.
 * *@ret_ptr is page-aligned and zero-filled. Its pages are allocated now, and kvdistd maps them
 * in the background right after, so that the first transfers take no page faults on them.
 */
int kvd_mem_alloc(kvd_client *client, size_t size, void **ret_ptr);

/*
 * Frees memory from kvd_mem_alloc(). Fails with BUSY while a registered cache lies in it
 * (unregister it first).
 */
int kvd_mem_free(kvd_client *client, void *ptr);

/*
 * As kvd_mem_alloc(), in huge pages where the host has them: *@ret_page_size (may be NULL)
 * says what backs the memory, the huge page size (2 MiB on x86-64) or, when the host has no
 * huge page free (or none configured), the base page size it fell back to. @size is rounded up
 * to that page size. Freed with kvd_mem_free().
 */
int kvd_mem_alloc_huge(kvd_client *client, size_t size, void **ret_ptr, size_t *ret_page_size);

typedef enum kvd_mem_kind {
        KVD_MEM_FILE = 0,   /* host memory in a file the caller maps: a memfd (MFD_HUGETLB too) */
        KVD_MEM_DMABUF = 1, /* device memory exported as a dma-buf, no CPU mapping */
} kvd_mem_kind;

/*
 * Memory the caller owns and maps itself, for kvd_mem_register(). Zero is the default in every
 * field but @fd, @length and @addr; @size as in kvd_transfer_opts.
 */
typedef struct kvd_mem_desc {
        uint32_t size;
        kvd_mem_kind kind;
        int fd;          /* the file; kvdist takes its own reference, the caller keeps @fd */
        uint64_t offset; /* into the file, a multiple of the page size */
        uint64_t length; /* bytes, from @offset */
        void *addr;      /* where the caller mapped [offset, offset + length) of the file */
        uint32_t flags;  /* none yet: 0 */
} kvd_mem_desc;

/*
 * Registers memory the caller allocated and mapped itself (an inference engine's own KV
 * memory), so that caches can be registered in it as in kvd_mem_alloc() memory and both move
 * it: the daemon maps the same file. The file must be a memfd sealed against shrinking
 * (memfd_create() with MFD_ALLOW_SEALING, then F_SEAL_SHRINK; MFD_HUGETLB works): a file that
 * could shrink under the daemon's mapping would make it fault, so others are refused. The
 * caller keeps its mapping for as long as the memory is registered; libkvdist never unmaps it.
 * The pages the file holds when it is registered (those written, or allocated) are mapped by
 * kvdistd in the background right after, so that the first transfers take no page faults on
 * them; pages it does not hold yet are left alone (kvdistd allocates none of the caller's
 * memory). *@ret_mem_id names it for kvd_mem_unregister(). PARAM_INVALID for a bad fd, a file that
 * is not a sealed memfd, a range past the file's end, an offset that is not page-aligned, a range
 * that overlaps registered memory; FEATURE_NOT_ENABLED for KVD_MEM_DMABUF (device memory needs an
 * RDMA device that registers dma-bufs: not built); LIMIT_EXCEEDED as kvd_mem_alloc().
 */
int kvd_mem_register(kvd_client *client, const kvd_mem_desc *desc, uint64_t *ret_mem_id);

/*
 * Forgets memory from kvd_mem_register(); the caller's mapping stays. BUSY while a registered
 * cache lies in it (unregister the cache first), PARAM_INVALID for an unknown id.
 */
int kvd_mem_unregister(kvd_client *client, uint64_t mem_id);

#define KVD_MAX_DIMS 8
#define KVD_MAX_TENSORS 240

typedef struct kvd_cache_desc {
        uint32_t num_tensors;        /* tensors of equal shape (K,V,K,V,... per layer) */
        uint32_t n_dims;             /* entries used in shape[] */
        int64_t shape[KVD_MAX_DIMS]; /* shape[0]: num_blocks (blocks cache) or batch size */
        kvd_dtype data_type;
} kvd_cache_desc;

typedef enum kvd_key_kind {
        KVD_KEY_REQ = 1,      /* CacheKey{cluster_id, req_id | prefix_id, model_id} */
        KVD_KEY_ID_INDEX = 2, /* CacheKeyByIdAndIndex{cluster_id, cache_id, batch_index} */
        KVD_KEY_BLOCKS = 3,   /* BlocksCacheKey{cluster_id, model_id} */
} kvd_key_kind;

#define KVD_ID_NONE UINT64_MAX

typedef struct kvd_cache_key {
        kvd_key_kind kind;
        uint64_t cluster_id;  /* the cluster that owns the cache */
        uint64_t req_id;      /* KVD_KEY_REQ: request id, or KVD_ID_NONE */
        uint64_t prefix_id;   /* KVD_KEY_REQ: prefix id, or KVD_ID_NONE */
        uint64_t model_id;    /* KVD_KEY_REQ, KVD_KEY_BLOCKS */
        uint64_t cache_id;    /* KVD_KEY_ID_INDEX */
        uint32_t batch_index; /* KVD_KEY_ID_INDEX */
} kvd_cache_key;

static inline kvd_cache_key kvd_key_req(uint64_t cluster_id, uint64_t req_id, uint64_t model_id)
{
        kvd_cache_key k = {KVD_KEY_REQ, cluster_id, req_id, KVD_ID_NONE, model_id, 0, 0};
        return k;
}

static inline kvd_cache_key kvd_key_prefix(uint64_t cluster_id, uint64_t prefix_id,
                                           uint64_t model_id)
{
        kvd_cache_key k = {KVD_KEY_REQ, cluster_id, KVD_ID_NONE, prefix_id, model_id, 0, 0};
        return k;
}

static inline kvd_cache_key kvd_key_id_index(uint64_t cluster_id, uint64_t cache_id,
                                             uint32_t batch_index)
{
        kvd_cache_key k = {KVD_KEY_ID_INDEX, cluster_id, KVD_ID_NONE, KVD_ID_NONE, 0,
                           cache_id,         batch_index};
        return k;
}

static inline kvd_cache_key kvd_key_blocks(uint64_t cluster_id, uint64_t model_id)
{
        kvd_cache_key k = {KVD_KEY_BLOCKS, cluster_id, KVD_ID_NONE, KVD_ID_NONE, model_id, 0, 0};
        return k;
}

/*
 * Whether linked peers may read or write a registered cache. DEFAULT: yes when the cluster has no
 * link yet, no afterwards. A link reaches the remote-accessible caches registered before it was
 * made, on both of its clusters (links are two-way: the cluster linked to reaches what the
 * linking cluster exposed, and the other way round); a transfer naming another cache of the
 * other cluster fails with PERMISSION_DENIED, and kvd_last_error() says why (registered with
 * KVD_REMOTE_NO, registered after link N, registered by default while links existed). Pool
 * caches (kvd_allocate_cache()) are reachable through every link, also those made before them.
 */
typedef enum kvd_remote_access {
        KVD_REMOTE_DEFAULT = 0,
        KVD_REMOTE_YES = 1,
        KVD_REMOTE_NO = 2,
} kvd_remote_access;

/*
 * Registers a contiguous cache (shape[0] = batch size) whose @n_addrs == num_tensors tensors
 * start at @addrs, each inside memory from kvd_mem_alloc(). @keys (may be empty) are CacheKeys
 * of kind KVD_KEY_REQ, one per batch slot in order; a key with req_id and prefix_id both
 * KVD_ID_NONE marks an empty slot. At most KVD_MAX_TENSORS addresses per cluster in total.
 * *@ret_cache_id: as in LLM-DataDist, each cluster numbers its caches from 1, in the order it
 * registers or allocates them (kvd_register_*() and kvd_allocate_*() share the count; a call
 * that fails takes no id; an id is not reused while the cluster is attached). Cache ids are per
 * cluster: another cluster's cache 1 is a different cache, named from here by
 * kvd_key_id_index(that cluster, 1, index).
 */
int kvd_register_cache(kvd_client *client, const kvd_cache_desc *desc, void *const *addrs,
                       size_t n_addrs, const kvd_cache_key *keys, size_t n_keys,
                       kvd_remote_access access, uint64_t *ret_cache_id);

/*
 * Registers a blocks cache (paged attention: shape[0] = num_blocks, block i of tensor t at
 * addrs[t] + i * tensor_size / num_blocks). @blocks_key (may be NULL) is a KVD_KEY_BLOCKS key;
 * a later cache registered under the same key replaces this one (last wins).
 */
int kvd_register_blocks_cache(kvd_client *client, const kvd_cache_desc *desc, void *const *addrs,
                              size_t n_addrs, const kvd_cache_key *blocks_key,
                              kvd_remote_access access, uint64_t *ret_cache_id);

/* Unregisters a cache registered or allocated by this client; an unknown id is success. */
int kvd_unregister_cache(kvd_client *client, uint64_t cache_id);

/*
 * Allocates a contiguous cache from the daemon's memory pool; @keys and *@ret_cache_id as for
 * kvd_register_cache().
 * The pool is configured when the daemon starts, so the cache is reachable through every link
 * to this cluster, also one made before it (link once, then allocate per request).
 * The cache stays while its id is held (until kvd_deallocate_cache()) or any key holds it. A
 * successful pull by one of its keys (KVD_KEY_REQ) ends that key: the key names nothing
 * afterwards (a second pull by it fails with CACHE_NOT_EXIST), even while the id still holds the
 * cache, which kvd_deallocate_cache() then releases as usual. kvd_remove_cache_key() ends a key
 * without a pull.
 * @ret_addrs (num_tensors entries, may be NULL) receives where each tensor is mapped here.
 */
int kvd_allocate_cache(kvd_client *client, const kvd_cache_desc *desc, const kvd_cache_key *keys,
                       size_t n_keys, uint64_t *ret_cache_id, void **ret_addrs);

/* As kvd_allocate_cache() for a blocks cache, optionally named by @blocks_key. */
int kvd_allocate_blocks_cache(kvd_client *client, const kvd_cache_desc *desc,
                              const kvd_cache_key *blocks_key, uint64_t *ret_cache_id,
                              void **ret_addrs);

/* Releases the id's hold on a pool cache; its memory is freed once no key holds it either. */
int kvd_deallocate_cache(kvd_client *client, uint64_t cache_id);

/*
 * Drops a key (KVD_KEY_REQ or KVD_KEY_BLOCKS) of one of this client's caches, and its hold on
 * a pool cache. As LLM-DataDist's remove_cache_key, a key that names nothing is a no-op that
 * returns KVD_OK: one a successful pull already ended, one removed already, one whose cache is
 * gone, one never registered. PARAM_INVALID for a key naming another cluster (only the owner
 * removes its keys), a KVD_KEY_ID_INDEX key (never registered, so never removed) and a request
 * key without exactly one of req_id and prefix_id.
 */
int kvd_remove_cache_key(kvd_client *client, const kvd_cache_key *key);

typedef struct kvd_cluster_info {
        uint64_t remote_cluster_id;
        kvd_role remote_role;
        const char *remote_ip_info; /* the remote cluster's listen_ip_info ("ip:port"), or any
                                     * address of its daemon; NULL or "" = a cluster of this
                                     * node (which must be a server too) */
        const char *local_ip_info;  /* optional */
} kvd_cluster_info;

#define KVD_MAX_LINK_CLUSTERS 16

/*
 * Links this cluster to each of @clusters (at most KVD_MAX_LINK_CLUSTERS). @rets, when not
 * NULL, receives one status per cluster; the return value is KVD_OK when all succeeded, else
 * the first failure. @timeout_ms <= 0 means 3000. A remote cluster attached without
 * listen_ip_info (a client) refuses the link with LINK_FAILED.
 *
 * A link is two-way, as in LLM-DataDist: once it is made, both clusters pull and push over it,
 * the linked cluster as well as this one, without a link of its own. Each reaches the other's
 * caches as kvd_remote_access says (registered before the link, remote-accessible; pool caches
 * always), with the same checks either way, over the link's transport (across RDMA daemons the
 * linked cluster's daemon connects queue pairs of its own, its transfers go over TCP until they
 * are connected). A link of this cluster's own to the same cluster, when there is one, carries
 * this cluster's transfers first.
 */
int kvd_link_clusters(kvd_client *client, const kvd_cluster_info *clusters, size_t n,
                      int32_t timeout_ms, int *rets);

/*
 * Tears links down. Either cluster of a link may call it, naming the other: the one linked to
 * ends the link the other made just as that one does, and both directions end (transfers either
 * way fail with NOT_YET_LINK; the link can be made again). With @force only this end goes and
 * the other side is not told (both sides call it after a fault); transfers from the other end
 * then fail with NOT_YET_LINK at this end's daemon (on one daemon the link is one record and
 * goes for both). NOT_YET_LINK when no link joins the two.
 */
int kvd_unlink_clusters(kvd_client *client, const kvd_cluster_info *clusters, size_t n,
                        int32_t timeout_ms, bool force, int *rets);

/*
 * KVD_OK when a working link joins this cluster and @remote_cluster_id, made by either (links
 * are two-way). NOT_YET_LINK when none, or when the other side unlinked the link this cluster
 * made (transfers over it fail with NOT_YET_LINK too; unlink it, or link again, which replaces
 * it). PEER_LOST when the link is down because the remote cluster or its daemon went away
 * (transfers over it fail with PEER_LOST too; unlink or link again). After a forced unlink on
 * the other side of a link across daemons this end still reads KVD_OK until it unlinks too,
 * while transfers fail; on one daemon a link is one record, gone for both.
 */
int kvd_check_link_status(kvd_client *client, uint64_t remote_cluster_id);

#define KVD_LOCAL_INFO_MAX 160

/*
 * This cluster as another engine names it, in *@ret_info (malloc()ed, at most
 * KVD_LOCAL_INFO_MAX bytes with the NUL; free() it): one printable line such as
 * "kvdist1;compat=1f3a9c02;cluster=1001;role=prompt;addr=10.0.0.1:26000", carrying the cluster
 * id, its role, the address others link to (its listen_ip_info as bound, so port 0 is resolved;
 * no addr for a client cluster) and a hash of what two daemons must share to talk (the wire
 * protocol and the ABI version). An engine ships it inside its request metadata; the other side
 * passes it to kvd_link_remote() or as kvd_transfer_opts.remote_info. Its form is for libkvdist
 * to read: do not take it apart.
 */
int kvd_local_info(kvd_client *client, char **ret_info);

/*
 * Links this cluster to the cluster @remote_info describes (what kvd_local_info() gave on its
 * node), as kvd_link_clusters() with its id, role and address; @timeout_ms <= 0 means 3000.
 * PARAM_INVALID for a string that is not such a line (the detail says what), PROTOCOL_MISMATCH
 * when its compat hash is not ours (a libkvdist or daemon that does not speak this protocol),
 * LINK_FAILED for a client cluster (it accepts no links), else as kvd_link_clusters()
 * (ALREADY_LINK when the link exists).
 */
int kvd_link_remote(kvd_client *client, const char *remote_info, int32_t timeout_ms);

/*
 * Changes the role. With option "listen_ip_info" the cluster becomes a server at that address,
 * or moves there (the new port opens before the old one closes; on failure the cluster keeps
 * its role and address: PARAM_INVALID, LINK_FAILED as in kvd_client_init()); without it a server
 * becomes a client and its port closes. Fails with EXIST_LINK while links exist.
 */
int kvd_switch_role(kvd_client *client, kvd_role role, const kvd_option *options, size_t n_options);

/* @count layers from layer @first; count 0 selects every layer (every tensor). */
typedef struct kvd_layer_range {
        uint32_t first;
        uint32_t count;
} kvd_layer_range;

/*
 * Bytes [offset, offset + length) of each block of a blocks transfer; {0, 0} is the whole
 * block, and a length of 0 the rest of the block from the offset. With slices the two caches'
 * block sizes may differ: a decode rank with twice the tensor parallelism of the prefill reads
 * its half of the heads of each prefill block (HND layout: src_slice {half * rank, half}), or
 * gathers the blocks of two prefill ranks into the halves of its own (dst_slice). Each slice
 * must lie inside its block, and both must be of the same length (PARAM_INVALID). Slices of
 * neighbouring blocks are not contiguous, so each block of a sliced transfer is one copy.
 */
typedef struct kvd_slice {
        uint64_t offset;
        uint64_t length;
} kvd_slice;

#define KVD_NOTIFY_MAX 256

/*
 * Options of a transfer. Zero means the default in every field, so a zero-initialised struct
 * (or one with only the fields of interest set: {.timeout_ms = 500}) asks for the defaults.
 * @size makes the struct growable: set it to sizeof(kvd_transfer_opts) (KVD_TRANSFER_OPTS_INIT
 * does) and a later libkvdist that appends fields reads only what this program knows; 0 means
 * the layout of libkvdist 1.0. A larger @size than this libkvdist knows is accepted when the
 * bytes past what it knows are zero, else refused with PARAM_INVALID.
 */
typedef struct kvd_transfer_opts {
        uint32_t size;
        int32_t timeout_ms;            /* <= 0: the client's sync_kv_timeout_ms */
        kvd_layer_range src_layers;    /* count 0: every layer */
        kvd_layer_range dst_layers;    /* count 0: every layer; else as many layers as src_layers */
        uint32_t tensor_num_per_layer; /* with a layer range: tensors per layer, 0 = 2 (K and V);
                                        * it must divide both caches' tensors. Without one every
                                        * tensor moves (caches of 1 or 3 tensors too) */
        /* A message (at most KVD_NOTIFY_MAX bytes, copied) that the other cluster receives
         * (kvd_get_notifies()): a push's destination once every byte of the push has landed, a
         * pull's source once every byte of the pull was read (landed here). A transfer that
         * fails delivers none. NULL with a notify_len is PARAM_INVALID. */
        const void *notify;
        size_t notify_len;
        kvd_slice src_slice; /* *_blocks: of each source block; {0, 0}: all of it */
        kvd_slice dst_slice; /* *_blocks: where in each destination block */
        /* The remote cluster as kvd_local_info() wrote it on its node (it must be the key's
         * cluster): when no link joins the two yet, the call links first (kvd_link_remote()),
         * within the same timeout, before it sends the transfer. NULL: no such thing. */
        const char *remote_info;
} kvd_transfer_opts;

#define KVD_TRANSFER_OPTS_INIT                                                                     \
        {                                                                                          \
                sizeof(kvd_transfer_opts)                                                          \
        }

/*
 * Pulls the remote item named by @src_key (KVD_KEY_REQ or KVD_KEY_ID_INDEX) into batch slot
 * @dst_batch_index of local cache @dst_cache_id. @size is bytes per tensor, -1 for the whole
 * item. A successful pull by KVD_KEY_REQ of a pool cache ends that key (kvd_allocate_cache()).
 * @opts may be NULL (defaults).
 *
 * These transfers fail with NOT_YET_LINK without a link between this cluster and the key's
 * cluster (made by either: links are two-way) or when the other side unlinked it, PEER_LOST
 * when it is down, CACHE_NOT_EXIST when no cache is under the key, PERMISSION_DENIED when the
 * link does not reach it (kvd_remote_access), PARAM_INVALID or CACHE_INCOMPATIBLE for blocks,
 * slots or shapes that do not fit, TIMEOUT past the deadline. A call that returned other than
 * KVD_OK has finished everywhere: nothing of a failed pull lands in the caller's memory afterwards
 * (the daemon answers once its receiver stopped, which it does at the deadline on its own).
 */
int kvd_pull_cache(kvd_client *client, const kvd_cache_key *src_key, uint64_t dst_cache_id,
                   uint32_t dst_batch_index, int64_t size, const kvd_transfer_opts *opts);

/*
 * Pulls blocks into local blocks cache @dst_cache_id. With a KVD_KEY_BLOCKS source, src_blocks[i]
 * goes to dst_blocks[i] (n_src == n_dst). With a KVD_KEY_REQ or KVD_KEY_ID_INDEX source (a
 * contiguous item), @n_src is 0 and the item fills dst_blocks in order.
 */
int kvd_pull_blocks(kvd_client *client, const kvd_cache_key *src_key, uint64_t dst_cache_id,
                    const uint64_t *src_blocks, size_t n_src, const uint64_t *dst_blocks,
                    size_t n_dst, const kvd_transfer_opts *opts);

/* Writes batch slot @src_batch_index of local @src_cache_id into the item @dst_key names. A
 * failed push lands nothing afterwards, as kvd_push_blocks() says. */
int kvd_push_cache(kvd_client *client, const kvd_cache_key *dst_key, uint64_t src_cache_id,
                   uint32_t src_batch_index, int64_t size, const kvd_transfer_opts *opts);

/*
 * Writes local blocks src_blocks[i] into remote blocks dst_blocks[i] of @dst_key (BLOCKS).
 * A push that fails (a timeout too) has finished everywhere when it returns: no byte of it lands
 * in the destination afterwards, and the call still answers promptly. Across daemons over TCP it
 * is answered once the destination daemon said its receiver stopped, or, failing that word, once
 * that daemon's own deadline for the push passed: the remaining timeout less the round trip,
 * held by its I/O threads on its own clock (at most the round trip of the push's request plus
 * 200 ms after this call's deadline). Over RDMA it is answered once its queue pairs were flushed.
 * On PEER_LOST it is answered at once; a destination daemon still running writes nothing of it
 * after that daemon's own deadline. The daemon may read the source a little longer after the
 * answer (it keeps the memory mapped) and never writes into it.
 */
int kvd_push_blocks(kvd_client *client, const kvd_cache_key *dst_key, uint64_t src_cache_id,
                    const uint64_t *src_blocks, size_t n_src, const uint64_t *dst_blocks,
                    size_t n_dst, const kvd_transfer_opts *opts);

/*
 * Asynchronous forms: the request is sent and *@ret_task tracks it. The arrays are copied; the
 * caller's memory regions must stay mapped until the task completes.
 */
int kvd_pull_cache_async(kvd_client *client, const kvd_cache_key *src_key, uint64_t dst_cache_id,
                         uint32_t dst_batch_index, int64_t size, const kvd_transfer_opts *opts,
                         kvd_task **ret_task);
int kvd_pull_blocks_async(kvd_client *client, const kvd_cache_key *src_key, uint64_t dst_cache_id,
                          const uint64_t *src_blocks, size_t n_src, const uint64_t *dst_blocks,
                          size_t n_dst, const kvd_transfer_opts *opts, kvd_task **ret_task);
int kvd_push_cache_async(kvd_client *client, const kvd_cache_key *dst_key, uint64_t src_cache_id,
                         uint32_t src_batch_index, int64_t size, const kvd_transfer_opts *opts,
                         kvd_task **ret_task);
int kvd_push_blocks_async(kvd_client *client, const kvd_cache_key *dst_key, uint64_t src_cache_id,
                          const uint64_t *src_blocks, size_t n_src, const uint64_t *dst_blocks,
                          size_t n_dst, const kvd_transfer_opts *opts, kvd_task **ret_task);

/*
 * Waits up to @timeout_ms (< 0: until the daemon answers; 0: only takes what already arrived)
 * for @task. Returns the transfer's status once it has one (KVD_E_TIMEOUT when the transfer ran
 * past its own deadline, KVD_E_CANCELLED after kvd_task_cancel()), or KVD_E_IN_PROGRESS when
 * this wait ended first and the transfer still runs (wait again later; nothing is wrong).
 * KVD_E_TIMEOUT also when the daemon did not answer within the transfer's timeout plus a grace
 * of 5 s (a stuck daemon). A task that completed keeps its status for later waits.
 */
int kvd_task_wait(kvd_task *task, int32_t timeout_ms);

/*
 * Whether @task has its final status, in *@ret_done: true once a kvd_task_wait() on it returned
 * the transfer's status, false while kvd_task_wait() returns KVD_E_IN_PROGRESS. Does not read
 * from the daemon: call kvd_task_wait(task, 0) first to take an answer that arrived since.
 */
int kvd_task_done(kvd_task *task, bool *ret_done);

/*
 * A file descriptor, in *@ret_fd, for an event loop: it polls readable (POLLIN, level-triggered,
 * poll/epoll/select) whenever kvd_task_wait(task, 0) can make progress: the task's answer arrived
 * (whichever thread read it from the daemon's socket), something else waits to be read from the
 * daemon's socket, or the connection died; and it stays readable once the task has its status.
 * A wake-up may be spurious (another task's answer): call kvd_task_wait(task, 0), which returns
 * KVD_E_IN_PROGRESS then, and poll again. The same fd on every call; it belongs to @task (do not
 * read it or close it): kvd_task_free() closes it. PARAM_INVALID for a NULL @task or @ret_fd.
 */
int kvd_task_fd(kvd_task *task, int *ret_fd);

/*
 * Stops @task's transfer and returns once nothing more of it can land: in this cluster's memory
 * for a pull, at the destination for a push (the daemon aborts it as at its deadline and
 * answers once its transport let go). Returns the task's final status, which later
 * kvd_task_wait() calls return too: KVD_E_CANCELLED when the cancel stopped the transfer; the
 * status it ended with (KVD_OK, KVD_E_TIMEOUT, ...) when it had finished first, in which case
 * nothing changes. A cancelled pull or push may have written any part of its destination blocks
 * (each byte either untouched or the source's), nothing outside them, and nothing after this
 * returns. KVD_E_UNSUPPORTED from a daemon that does not know the cancel request (the transfer
 * goes on; wait for it). PARAM_INVALID for a NULL @task. A batch's task (kvd_transfer_batch())
 * cancels every entry still running: each of them ends KVD_E_CANCELLED, the others keep their
 * status.
 */
int kvd_task_cancel(kvd_task *task);

/*
 * Frees @task, and its fd. A transfer still running is cancelled first, as by kvd_task_cancel(),
 * so once this returns nothing more of it lands. Accepts NULL.
 */
void kvd_task_free(kvd_task *task);

typedef enum kvd_transfer_kind {
        KVD_PULL_CACHE = 1,
        KVD_PULL_BLOCKS = 2,
        KVD_PUSH_CACHE = 3,
        KVD_PUSH_BLOCKS = 4,
} kvd_transfer_kind;

#define KVD_BATCH_MAX_ENTRIES 1024

/*
 * One transfer of a batch: what one of the calls above names, with zero the default in every
 * field but @kind, @key and @cache_id. @key is the remote cache (the source of a pull, the
 * destination of a push), @cache_id the local one. *_BLOCKS: src_blocks[i] and dst_blocks[i]
 * as in kvd_pull_blocks() / kvd_push_blocks(). *_CACHE: @batch_index is the local batch slot,
 * @size bytes per tensor (0 or -1: the whole item). Layer ranges and tensors per layer as in
 * kvd_transfer_opts.
 */
typedef struct kvd_batch_entry {
        kvd_transfer_kind kind;
        kvd_cache_key key;
        uint64_t cache_id;
        const uint64_t *src_blocks;
        size_t n_src;
        const uint64_t *dst_blocks;
        size_t n_dst;
        uint32_t batch_index;
        int64_t size;
        kvd_layer_range src_layers;
        kvd_layer_range dst_layers;
        uint32_t tensor_num_per_layer;
        kvd_slice src_slice; /* *_BLOCKS: as in kvd_transfer_opts */
        kvd_slice dst_slice;
        const char *remote_info; /* as in kvd_transfer_opts: links first when not linked */
} kvd_batch_entry;

/*
 * Submits @n (1..KVD_BATCH_MAX_ENTRIES) transfers as one request, tracked by one task: pulls
 * and pushes, blocks and caches, of several local caches and remote clusters mixed. The daemon
 * starts each entry as a transfer of its own (checked, limited and merged like one: contiguous
 * blocks of an entry move as one segment; each counts towards limits.max_inflight_per_client)
 * and answers once every entry has ended. @opts (may be NULL) gives the timeout of every entry;
 * its layer fields must be zero (each entry has its own) and it carries no notification
 * (PARAM_INVALID). The arrays are copied. Returns at once: PARAM_INVALID for a bad argument
 * (the detail names the entry), else KVD_OK with *@ret_task.
 *
 * kvd_task_wait() on the task returns KVD_OK when every entry succeeded, else the status of
 * the first entry that failed (the detail names it); an entry that failed lands nothing after
 * the task ended, as a single transfer does. kvd_task_entry_status() and
 * kvd_task_failed_blocks() then tell each entry apart. An entry's remote_info that does not
 * parse, is of another protocol or names another cluster refuses the batch (PARAM_INVALID,
 * PROTOCOL_MISMATCH); one whose link cannot be made fails that entry alone, with the link's
 * status. Links made first take from the batch's timeout; the entries get the rest.
 */
int kvd_transfer_batch(kvd_client *client, const kvd_batch_entry *entries, size_t n,
                       const kvd_transfer_opts *opts, kvd_task **ret_task);

/*
 * The status of entry @index of a finished batch task in *@ret_status (KVD_OK or what that
 * entry failed with). KVD_E_IN_PROGRESS while the task runs (wait for it first), PARAM_INVALID
 * for an index past the batch or a task that is not a batch.
 */
int kvd_task_entry_status(kvd_task *task, size_t index, int *ret_status);

/*
 * The local block ids of every entry of a finished batch task that failed: the destination
 * blocks of a failed pull, the source blocks of a failed push, in entry order (vLLM's
 * get_block_ids_with_load_errors()). Copies at most @max into @ret_blocks (may be NULL when
 * @max is 0) and sets *@ret_n to how many there are in all. KVD_E_IN_PROGRESS while the task
 * runs, PARAM_INVALID for a task that is not a batch.
 */
int kvd_task_failed_blocks(kvd_task *task, uint64_t *ret_blocks, size_t max, size_t *ret_n);

/* What moved the bytes a notification tells of. */
typedef enum kvd_notify_kind {
        KVD_NOTIFY_PUSH = 0, /* a cluster pushed into this one's memory */
        KVD_NOTIFY_PULL = 1, /* a cluster pulled from this one's memory: it may be reused */
} kvd_notify_kind;

/*
 * A notification a transfer delivered to this cluster, filled by kvd_get_notifies() (an output
 * struct: fields are only ever appended at its end).
 */
typedef struct kvd_notify {
        uint64_t src_cluster_id; /* the cluster that pushed, or (KVD_NOTIFY_PULL) that pulled */
        size_t len;
        uint8_t data[KVD_NOTIFY_MAX];
        kvd_notify_kind kind; /* push or pull */
} kvd_notify;

/*
 * A file descriptor that is readable (POLLIN) while notifications wait for this cluster; the
 * same fd on every call, owned by @client (do not close it; kvd_client_finalize() does).
 */
int kvd_notify_fd(kvd_client *client, int *ret_fd);

/*
 * Takes up to @max waiting notifications, oldest first, into @out; *@ret_n says how many (0 when
 * none wait). Pushes and pulls share the queue, in the order their notifications were delivered:
 * a push's once its last byte landed, a pull's once its last byte was read. A pull's reaches the
 * source cluster after every byte landed at the puller but not necessarily before the puller's
 * call returned (across daemons it follows the puller's word), and never for a pull that failed.
 */
int kvd_get_notifies(kvd_client *client, kvd_notify *out, size_t max, size_t *ret_n);

/*
 * Comm domains: LLM-DataDist's two-sided link. Every member cluster (2..4) calls kvd_domain_link()
 * with the same comm_name, cluster_rank_info and rank table; the call returns at once and the
 * domain forms in the background on the members' daemons, which find each other through the rank
 * table: a server's host_ip ("1.2" form) or else its devices' device_ip names the member
 * daemon's peer address ("ip" means port 7400, or "ip:port").
 * kvd_domain_status() says when it is OK; then pulls and pushes between the members'
 * caches work as over kvd_link_clusters() links, and so do kvd_domain_batch_send_recv() and the
 * collectives. Memory must be registered before kvd_domain_link(): what is registered later is not
 * exposed to the other members (pool caches are, as over any link).
 */
#define KVD_COMM_NAME_MAX 127
#define KVD_MAX_DOMAIN_MEMBERS 4
#define KVD_MAX_DOMAINS 512

typedef struct kvd_cluster_rank {
        uint64_t cluster_id;
        uint32_t rank_id;
} kvd_cluster_rank;

/*
 * Joins this cluster to comm domain @comm_name (1..KVD_COMM_NAME_MAX characters, unique per
 * daemon). @cluster_rank_info lists the @n members (2..4, this cluster among them) in any order,
 * as the seed's dict does: ranks 0..n-1, each once, no cluster twice. @rank_table_json is an
 * HCCL rank table naming each rank's server, device_id (this cluster's must match its
 * "device_id" option) and the server's kvdistd: "version" "1.0" with each device's device_ip
 * naming it, or "1.2" (what the LLM-DataDist samples build) where a server's host_ip names it
 * and device_ip is the device's own address, checked and optional (a server without host_ip
 * is read as in "1.0"); the other "1.2" keys (super_device_id, device_port, backup_device_ip,
 * backup_device_port, host_port, super_pod_list) are checked for their form and ignored.
 * *@ret_comm_id names the domain in the calls below. Returns
 * at once: PARAM_INVALID (the detail names what is wrong: a rank twice or outside 0..n-1, a
 * cluster twice, ...), ALREADY_LINK, LIMIT_EXCEEDED (KVD_MAX_DOMAINS on this daemon),
 * FEATURE_NOT_ENABLED.
 * The domain is PREPARING until every member called kvd_domain_link() (a member whose domain of
 * that name failed counts only once it links again) and the links are made, or FAILED once
 * link_total_time passed. Linking the name of a domain that FAILED (a member left or was lost,
 * e.g. it restarted) makes a new domain with a new comm_id; the failed one stays FAILED under
 * its own comm_id until this cluster unlinks it. Members already linked by kvd_link_clusters()
 * (made by either of them) use that link and open no other; it stays when the domain goes, and
 * unlinking it fails the domain (LINK_FAILED).
 */
int kvd_domain_link(kvd_client *client, const char *comm_name,
                    const kvd_cluster_rank *cluster_rank_info, size_t n,
                    const char *rank_table_json, uint64_t *ret_comm_id);

typedef enum kvd_mem_status {
        KVD_MEM_STATUS_OK = 0,        /* every member's caches are known to every other */
        KVD_MEM_STATUS_PREPARING = 1, /* members are joining and exchanging descriptors */
        KVD_MEM_STATUS_FAILED = 2,    /* see kvd_last_error(): a member did not call link within
                                       * link_total_time, the rank tables disagree, a member
                                       * left or was lost */
} kvd_mem_status;

/*
 * Where domain @comm_id stands, in *@ret_status. When it is FAILED the call still returns
 * KVD_OK, and kvd_last_error(client) gives the reason.
 */
int kvd_domain_status(kvd_client *client, uint64_t comm_id, kvd_mem_status *ret_status);

/*
 * Leaves domain @comm_id; it fails on every other member (they unlink it too). LINK_BUSY while an
 * operation of this cluster runs in it.
 */
int kvd_domain_unlink(kvd_client *client, uint64_t comm_id);

typedef enum kvd_send_recv_type {
        KVD_SEND = 0,
        KVD_RECV = 1,
} kvd_send_recv_type;

typedef struct kvd_send_recv_item {
        kvd_send_recv_type type;
        void *buf;      /* inside memory from kvd_mem_alloc() */
        uint64_t count; /* elements; 0 = the item is skipped */
        kvd_dtype data_type;
        uint32_t remote_rank; /* this cluster's own rank: a local copy (pair SEND with RECV) */
} kvd_send_recv_item;

/*
 * HcclBatchSendRecv in domain @comm_id: the sends and receives of @items progress independently;
 * each SEND meets the RECV from this rank of the same call order on @remote_rank, which must have
 * the same count and data type (else both fail with PARAM_INVALID and no byte moves). At most one
 * SEND to and one RECV from each rank per call. Every item is done, or failed, when the call
 * returns; nothing is written into @items' buffers afterwards. @timeout_ms <= 0: the client's
 * sync_kv_timeout_ms. Returns KVD_OK or the first item's failure (NOT_YET_LINK before the domain
 * is OK, TIMEOUT, PEER_LOST, ...). An item whose other end gave up on it fails with that end's
 * status: TIMEOUT when the other end's deadline passed.
 */
int kvd_domain_batch_send_recv(kvd_client *client, uint64_t comm_id,
                               const kvd_send_recv_item *items, size_t n, int32_t timeout_ms);

typedef enum kvd_algorithm {
        KVD_ALGO_AUTO = 0, /* ring for large broadcasts among 3 or more members, else mesh */
        KVD_ALGO_RING = 1, /* neighbours only, pipelined chunk by chunk */
        KVD_ALGO_MESH = 2, /* straight to every member */
} kvd_algorithm;

/* Options of a collective; zero means the default in every field, @size as in kvd_transfer_opts. */
typedef struct kvd_collective_opts {
        uint32_t size;
        int32_t timeout_ms;      /* <= 0: the client's sync_kv_timeout_ms */
        kvd_algorithm algorithm; /* 0: KVD_ALGO_AUTO */
        uint64_t chunk_bytes;    /* ring pipeline chunk, 4 KiB..256 MiB; 0 = 1 MiB */
} kvd_collective_opts;

#define KVD_COLLECTIVE_OPTS_INIT                                                                   \
        {                                                                                          \
                sizeof(kvd_collective_opts)                                                        \
        }

/*
 * Broadcast of blocks in domain @comm_id: blocks[i] of every tensor of the root's blocks cache
 * land in blocks[i] of every other member's (each member passes its own cache and block list of
 * the same length; the caches must have the same tensors, block size and data type). Every member
 * calls it with the same @root_rank and options. @opts may be NULL; *@ret_algorithm (may be NULL)
 * receives the algorithm that ran.
 */
int kvd_domain_broadcast(kvd_client *client, uint64_t comm_id, uint32_t root_rank,
                         uint64_t cache_id, const uint64_t *blocks, size_t n_blocks,
                         const kvd_collective_opts *opts, kvd_algorithm *ret_algorithm);

/*
 * All-gather of blocks in domain @comm_id: @blocks holds @n_blocks = n_members * @blocks_per_rank
 * ids; blocks[r * blocks_per_rank ...] hold rank r's part. Each member's own part is the source,
 * and every other member's part lands in it. As kvd_domain_broadcast() otherwise.
 */
int kvd_domain_all_gather(kvd_client *client, uint64_t comm_id, uint64_t cache_id,
                          const uint64_t *blocks, size_t n_blocks, size_t blocks_per_rank,
                          const kvd_collective_opts *opts, kvd_algorithm *ret_algorithm);

/*
 * The daemon's state as a JSON document (what `kvdistctl status --json` prints).
 * *@ret_json is malloc()ed; free() it.
 */
int kvd_daemon_status(kvd_client *client, char **ret_json);

/*
 * The daemon's metrics in the Prometheus text exposition format (what `kvdistctl metrics`
 * prints). *@ret_text is malloc()ed; free() it. A read-only call, like kvd_daemon_status().
 */
int kvd_daemon_metrics(kvd_client *client, char **ret_text);

#ifdef __cplusplus
}
#endif
