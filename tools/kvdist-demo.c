/* SPDX-License-Identifier: MIT */
/*
 * kvdist-demo: a prefill/decode hand-off of one prompt's KV blocks, on one node or between two
 * daemons (two nodes), the way an inference engine that used LLM-DataDist does it, with every
 * byte checked.
 *
 * The parent forks a prefill worker (cluster 1, role prompt) and a decode worker (cluster 2,
 * role decoder). Both register a blocks cache of a llama3-8b shape. Prefill "computes" a
 * prompt's KV (a seeded pattern) into scattered blocks and sends the block ids to decode over a
 * pipe; decode links to cluster 1, pulls the blocks into its own block ids, pulls again for a
 * layer range only, pushes one block back, and verifies every byte of its cache each time.
 * With --prefill-socket and --decode-socket on two daemons, decode links to cluster 1 at the
 * prefill daemon's peer address and every block crosses between the daemons over TCP.
 * When both are done the parent runs --status-cmd while the clusters are still attached, then
 * lets them detach.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "kvdist-config.h"
#include <kvdist/kvdist.h>
#include "common/macro.h"
#include "common/time-util.h"

/* llama3-8b: 32 layers of K and V; 16-token blocks of 8 kv heads x 128 dims in fp16. */
#define MODEL_NAME "llama3-8b"
#define N_LAYERS 32u
#define TENSORS_PER_LAYER 2u
#define N_TENSORS (N_LAYERS * TENSORS_PER_LAYER)
#define BLOCK_TOKENS 16u
#define KV_HEADS 8u
#define HEAD_DIM 128u
#define BLOCK_BYTES ((size_t)BLOCK_TOKENS * KV_HEADS * HEAD_DIM * 2)

/* The layer-range pull moves layers [0, RANGE_LAST_LAYER]. */
#define RANGE_LAST_LAYER 15

#define PREFILL_CLUSTER UINT64_C(1)
#define DECODE_CLUSTER UINT64_C(2)
#define MODEL_ID UINT64_C(0)

#define MAX_NUM_BLOCKS 4096u
#define DEFAULT_NUM_BLOCKS 256u
#define DEFAULT_PROMPT_BLOCKS 32u
#define DEFAULT_SEED UINT64_C(20240611)

/* A worker that hangs (a lost peer, a daemon that never answers) is killed after this. */
#define WORKER_TIMEOUT_S 120u

#define HANDOFF_MAGIC UINT32_C(0x6b764831) /* "kvH1" */
#define PUSH_MAGIC UINT32_C(0x6b765031)    /* "kvP1" */

/* Salts that give the decode side's block choice and the pushed block their own patterns. */
#define DECODE_SALT UINT64_C(0x9e3779b97f4a7c15)
#define PUSH_SALT UINT64_C(0xc2b2ae3d27d4eb4f)

enum {
        EXIT_FAILED = 1,
        EXIT_USAGE = 2,
};

typedef struct Options {
        const char *socket_path;     /* NULL: the library's default */
        const char *prefill_socket;  /* the prefill worker's daemon; NULL: socket_path */
        const char *decode_socket;   /* the decode worker's daemon; NULL: socket_path */
        const char *prefill_address; /* the prefill cluster's listen_ip_info; NULL: its daemon's
                                      * peer address, or a port of its own */
        const char *status_cmd;      /* NULL: none */
        uint32_t num_blocks;
        uint32_t prompt_blocks;
        uint64_t seed;
} Options;

#define ADDRESS_MAX 64

/* What prefill tells decode, out of band: which blocks hold the prompt, and where. */
typedef struct HandOff {
        uint32_t magic;
        uint32_t n_blocks; /* block ids that follow the header */
        uint64_t cluster_id;
        uint64_t model_id;
        uint64_t seed;             /* so that decode can check the bytes it pulls */
        uint64_t spare_block;      /* a free prefill block that decode may push into */
        char address[ADDRESS_MAX]; /* where the prefill cluster listens (its listen_ip_info) */
} HandOff;

/* What decode tells prefill after the push: where it wrote and what. */
typedef struct PushNote {
        uint32_t magic;
        uint32_t pad;
        uint64_t dst_block;
        uint64_t seed;
} PushNote;

/* One block's expected content in a worker's cache: a pattern in its first tensors, then 0. */
typedef struct Expect {
        uint64_t seed;
        uint32_t index;     /* pattern index (the prompt's block number) */
        uint32_t n_tensors; /* tensors that hold the pattern; 0 = all zero */
} Expect;

typedef struct Worker {
        const char *name;
        const Options *opts;
        const char *socket; /* its daemon; NULL: the library's default */
        kvd_client *client;
        uint8_t *mem;
        size_t mem_size;
        uint64_t cache_id;
        bool registered;
        Expect *expect; /* num_blocks entries */
} Worker;

static const uint8_t zero_block[BLOCK_BYTES];

static uint64_t splitmix64(uint64_t x)
{
        x += UINT64_C(0x9e3779b97f4a7c15);
        x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
        x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
        return x ^ (x >> 31);
}

/* The bytes of tensor @tensor of pattern block @index under @seed: 8 bytes per counter value. */
static void pattern_fill(uint8_t *p, uint64_t seed, uint32_t tensor, uint32_t index)
{
        uint64_t key = splitmix64(seed ^ ((uint64_t)tensor << 40) ^ ((uint64_t)index << 8));

        for (size_t w = 0; w < BLOCK_BYTES / 8; w++) {
                uint64_t v = splitmix64(key + w);

                memcpy(p + w * 8, &v, 8);
        }
}

/* Fisher-Yates shuffle of 0..n-1 under @seed: a scattered choice of block ids. */
static uint64_t *block_permutation(uint32_t n, uint64_t seed)
{
        uint64_t *perm = calloc(n, sizeof(*perm)), state = seed;

        if (!perm)
                return NULL;
        for (uint32_t i = 0; i < n; i++)
                perm[i] = i;
        for (uint32_t i = n - 1; i > 0; i--) {
                uint32_t j;
                uint64_t t;

                state = splitmix64(state);
                j = (uint32_t)(state % (i + 1));
                t = perm[i];
                perm[i] = perm[j];
                perm[j] = t;
        }
        return perm;
}

static double mib(size_t bytes)
{
        return (double)bytes / (1024.0 * 1024.0);
}

static void format_ids(const uint64_t *ids, size_t n, char *buf, size_t size)
{
        size_t off = 0;

        buf[0] = '\0';
        for (size_t i = 0; i < n && i < 8; i++) {
                int k = snprintf(buf + off, size - off, "%s%" PRIu64, i ? " " : "", ids[i]);

                if (k < 0 || (size_t)k >= size - off)
                        return;
                off += (size_t)k;
        }
        if (n > 8)
                snprintf(buf + off, size - off, " ... (%zu in all)", n);
}

static int write_all(int fd, const void *buf, size_t n)
{
        const uint8_t *p = buf;

        while (n > 0) {
                ssize_t k = write(fd, p, n);

                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                p += k;
                n -= (size_t)k;
        }
        return 0;
}

/* Reads exactly @n bytes; -EPIPE when the writer closed its end first. */
static int read_all(int fd, void *buf, size_t n)
{
        uint8_t *p = buf;

        while (n > 0) {
                ssize_t k = read(fd, p, n);

                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (k == 0)
                        return -EPIPE;
                p += k;
                n -= (size_t)k;
        }
        return 0;
}

/* Blocks until every writer of @fd has closed it. */
static int wait_eof(int fd)
{
        char c;

        for (;;) {
                ssize_t k = read(fd, &c, 1);

                if (k == 0)
                        return 0;
                if (k < 0 && errno != EINTR)
                        return -errno;
        }
}

static int worker_fail(Worker *w, const char *call, int r)
{
        fprintf(stderr, "%s: %s failed: %s: %s\n", w->name, call, kvd_strerror(r),
                kvd_last_error(w->client));
        return -1;
}

static uint8_t *tensor_block(const Worker *w, uint32_t tensor, uint64_t block)
{
        return w->mem + ((size_t)tensor * w->opts->num_blocks + block) * BLOCK_BYTES;
}

/*
 * Attaches as a cluster (a server reachable at @listen, LLM-DataDist's listen_ip_info, or a
 * client when it is NULL), allocates daemon-shared memory and registers the blocks cache in it.
 */
static int worker_setup(Worker *w, uint64_t cluster_id, kvd_role role, const char *listen)
{
        const Options *o = w->opts;
        kvd_option options[3] = {{"device_id", "0"}};
        void *addrs[N_TENSORS], *mem;
        kvd_cache_desc desc = {
                .num_tensors = N_TENSORS,
                .n_dims = 4,
                .shape = {o->num_blocks, BLOCK_TOKENS, KV_HEADS, HEAD_DIM},
                .data_type = KVD_DT_FLOAT16,
        };
        kvd_cache_key key = kvd_key_blocks(cluster_id, MODEL_ID);
        size_t n_options = 1;
        int r;

        if (w->socket)
                options[n_options++] = (kvd_option){"socket_path", w->socket};
        if (listen)
                options[n_options++] = (kvd_option){"listen_ip_info", listen};
        r = kvd_client_init(cluster_id, role, options, n_options, &w->client);
        if (r < 0)
                return worker_fail(w, "kvd_client_init", r);

        w->expect = calloc(o->num_blocks, sizeof(*w->expect));
        if (!w->expect) {
                fprintf(stderr, "%s: out of memory\n", w->name);
                return -1;
        }

        w->mem_size = (size_t)N_TENSORS * o->num_blocks * BLOCK_BYTES;
        r = kvd_mem_alloc(w->client, w->mem_size, &mem);
        if (r < 0)
                return worker_fail(w, "kvd_mem_alloc", r);
        w->mem = mem;
        /* Fault the pages in now, as an engine's KV memory would be, so timings show copies. */
        memset(w->mem, 0, w->mem_size);

        for (uint32_t t = 0; t < N_TENSORS; t++)
                addrs[t] = tensor_block(w, t, 0);
        r = kvd_register_blocks_cache(w->client, &desc, addrs, N_TENSORS, &key, KVD_REMOTE_DEFAULT,
                                      &w->cache_id);
        if (r < 0)
                return worker_fail(w, "kvd_register_blocks_cache", r);
        w->registered = true;

        printf("%s: cluster %" PRIu64 " (%s): registered %u tensors x %u blocks (%.0f MiB) "
               "as cache %" PRIu64 "\n",
               w->name, cluster_id, role == KVD_ROLE_PROMPT ? "prompt" : "decoder", N_TENSORS,
               o->num_blocks, mib(w->mem_size), w->cache_id);
        return 0;
}

/* Unregisters, frees and detaches, in the order LLM-DataDist asks for; best effort on errors. */
static int worker_teardown(Worker *w)
{
        int r, ret = 0;

        if (w->registered) {
                r = kvd_unregister_cache(w->client, w->cache_id);
                if (r < 0)
                        ret = worker_fail(w, "kvd_unregister_cache", r);
                else if (w->mem) {
                        r = kvd_mem_free(w->client, w->mem);
                        if (r < 0)
                                ret = worker_fail(w, "kvd_mem_free", r);
                }
        }
        if (w->client) {
                r = kvd_client_finalize(w->client);
                if (r < 0 && ret == 0) {
                        fprintf(stderr, "%s: kvd_client_finalize failed: %s\n", w->name,
                                kvd_strerror(r));
                        ret = -1;
                }
        }
        w->client = NULL;
        free(w->expect);
        w->expect = NULL;
        return ret;
}

/* Checks every byte of the worker's cache against w->expect; says where the first bad byte is. */
static int worker_verify(Worker *w)
{
        _cleanup_free_ uint8_t *want = malloc(BLOCK_BYTES);

        if (!want) {
                fprintf(stderr, "%s: out of memory\n", w->name);
                return -1;
        }
        for (uint32_t t = 0; t < N_TENSORS; t++)
                for (uint32_t b = 0; b < w->opts->num_blocks; b++) {
                        const Expect *e = &w->expect[b];
                        const uint8_t *have = tensor_block(w, t, b), *exp = zero_block;
                        size_t i;

                        if (t < e->n_tensors) {
                                pattern_fill(want, e->seed, t, e->index);
                                exp = want;
                        }
                        if (memcmp(have, exp, BLOCK_BYTES) == 0)
                                continue;
                        for (i = 0; have[i] == exp[i]; i++)
                                ;
                        fprintf(stderr,
                                "%s: verify failed: tensor %u (layer %u %s) block %u, "
                                "byte %zu is 0x%02x, expected 0x%02x (%s)\n",
                                w->name, t, t / TENSORS_PER_LAYER,
                                t % TENSORS_PER_LAYER ? "V" : "K", b, i, have[i], exp[i],
                                t < e->n_tensors ? "pattern" : "an untouched zero block");
                        return -1;
                }
        return 0;
}

/* Whether the two workers attach to different daemons (so the blocks cross between them). */
static bool two_daemons(const Options *o)
{
        const char *p = o->prefill_socket ?: o->socket_path;
        const char *d = o->decode_socket ?: o->socket_path;

        return (p || d) && (!p || !d || strcmp(p, d) != 0);
}

/*
 * From the status of @w's daemon (through @client): where cluster @cluster_id listens (its
 * listen_ip_info), or with @cluster_id 0 where the daemon accepts peer daemons ("peer_listen"),
 * into @buf; "" when there is none.
 */
static int status_address(Worker *w, kvd_client *client, uint64_t cluster_id, char *buf,
                          size_t size)
{
        _cleanup_free_ char *text = NULL;
        json_t *root, *v = NULL, *c;
        size_t i;
        int r;

        buf[0] = '\0';
        r = kvd_daemon_status(client, &text);
        if (r < 0)
                return worker_fail(w, "kvd_daemon_status", r);
        root = json_loads(text, 0, NULL);
        if (cluster_id == 0)
                v = json_object_get(root, "peer_listen");
        else
                json_array_foreach(
                        json_object_get(root, "clusters"), i,
                        c) if ((uint64_t)json_integer_value(json_object_get(c, "cluster_id")) ==
                               cluster_id) v = json_object_get(c, "listen_ip_info");
        if (json_is_string(v))
                (void)snprintf(buf, size, "%s", json_string_value(v));
        json_decref(root);
        return 0;
}

/*
 * The listen_ip_info the prefill cluster attaches with: --prefill-address, else its daemon's own
 * peer address (the daemon serves the cluster there), else a port of its own on loopback (the
 * decode worker on the same daemon links to it without using the address).
 */
static int prefill_listen_address(Worker *w, char *buf, size_t size)
{
        kvd_option opt = {"socket_path", w->socket};
        kvd_client *c = NULL;
        int r;

        if (w->opts->prefill_address) {
                (void)snprintf(buf, size, "%s", w->opts->prefill_address);
                return 0;
        }
        r = kvd_client_connect(&opt, w->socket ? 1 : 0, &c);
        if (r < 0)
                return worker_fail(w, "kvd_client_connect", r);
        r = status_address(w, c, 0, buf, size);
        (void)kvd_client_finalize(c);
        if (r == 0 && !buf[0])
                (void)snprintf(buf, size, "127.0.0.1:0");
        return r;
}

static int prefill_run(const Options *o, int handoff_fd, int note_fd, int ready_fd, int go_fd)
{
        Worker w = {.name = "prefill", .opts = o, .socket = o->prefill_socket};
        _cleanup_free_ uint64_t *perm = NULL;
        uint32_t n = o->prompt_blocks;
        HandOff h = {
                .magic = HANDOFF_MAGIC,
                .n_blocks = n,
                .cluster_id = PREFILL_CLUSTER,
                .model_id = MODEL_ID,
                .seed = o->seed,
        };
        char ids[160], listen[ADDRESS_MAX];
        PushNote note;
        usec_t t0;
        int r;

        /* Prefill is the server decode links to: LLM-DataDist's listen_ip_info. */
        if (prefill_listen_address(&w, listen, sizeof(listen)) < 0 ||
            worker_setup(&w, PREFILL_CLUSTER, KVD_ROLE_PROMPT, listen) < 0)
                goto fail;
        /* Decode must know where to link to: where the cluster listens (the real port, when it
         * asked for port 0). */
        if (status_address(&w, w.client, PREFILL_CLUSTER, h.address, sizeof(h.address)) < 0)
                goto fail;
        printf("prefill: cluster %" PRIu64 " accepts links at %s\n", PREFILL_CLUSTER, h.address);

        perm = block_permutation(o->num_blocks, o->seed);
        if (!perm) {
                fprintf(stderr, "prefill: out of memory\n");
                goto fail;
        }
        h.spare_block = perm[n];

        t0 = now_usec(CLOCK_MONOTONIC);
        for (uint32_t j = 0; j < n; j++) {
                for (uint32_t t = 0; t < N_TENSORS; t++)
                        pattern_fill(tensor_block(&w, t, perm[j]), o->seed, t, j);
                w.expect[perm[j]] = (Expect){.seed = o->seed, .index = j, .n_tensors = N_TENSORS};
        }
        format_ids(perm, n, ids, sizeof(ids));
        printf("prefill: computed the KV of a %u-token prompt into %u scattered blocks "
               "(%.0f MiB) in %.1f ms: %s\n",
               n * BLOCK_TOKENS, n, mib((size_t)n * N_TENSORS * BLOCK_BYTES),
               (double)(now_usec(CLOCK_MONOTONIC) - t0) / 1000.0, ids);

        r = write_all(handoff_fd, &h, sizeof(h));
        if (r == 0)
                r = write_all(handoff_fd, perm, n * sizeof(*perm));
        if (r < 0) {
                fprintf(stderr, "prefill: cannot send the block ids: %s\n", strerror(-r));
                goto fail;
        }
        printf("prefill: sent the %u block ids to decode out of band (a pipe)\n", n);

        r = read_all(note_fd, &note, sizeof(note));
        if (r < 0 || note.magic != PUSH_MAGIC || note.dst_block != h.spare_block) {
                fprintf(stderr, "prefill: decode did not report its push back (%s)\n",
                        r < 0 ? "it went away" : "bad message");
                goto fail;
        }
        w.expect[note.dst_block] = (Expect){.seed = note.seed, .n_tensors = N_TENSORS};
        if (worker_verify(&w) < 0)
                goto fail;
        printf("prefill: block %" PRIu64 " holds the block decode pushed back; the prompt's "
               "blocks are intact and the rest untouched, verified\n",
               note.dst_block);

        /* Done: the parent may show the daemon's state while we are still attached. */
        if (write_all(ready_fd, "p", 1) < 0)
                goto fail;
        ready_fd = safe_close(ready_fd);
        (void)wait_eof(go_fd);

        /* Keep the blocks until decode has unlinked and detached (it closes its end then). */
        (void)wait_eof(note_fd);
        if (worker_teardown(&w) < 0)
                return -1;
        printf("prefill: unregistered the cache, freed the memory and detached\n");
        return 0;

fail:
        (void)worker_teardown(&w);
        return -1;
}

/* Pulls @src into @dst (all layers, or layers 0..RANGE_LAST_LAYER) and returns the time. */
static int decode_pull(Worker *w, const uint64_t *src, const uint64_t *dst, uint32_t n,
                       bool layer_range, double *ret_ms)
{
        kvd_cache_key key = kvd_key_blocks(PREFILL_CLUSTER, MODEL_ID);
        kvd_transfer_opts opts = KVD_TRANSFER_OPTS_INIT;
        usec_t t0;
        int r;

        if (layer_range) {
                opts.src_layers = (kvd_layer_range){0, RANGE_LAST_LAYER + 1};
                opts.dst_layers = (kvd_layer_range){0, RANGE_LAST_LAYER + 1};
        }
        t0 = now_usec(CLOCK_MONOTONIC);
        r = kvd_pull_blocks(w->client, &key, w->cache_id, src, n, dst, n, &opts);
        *ret_ms = (double)(now_usec(CLOCK_MONOTONIC) - t0) / 1000.0;
        if (r < 0)
                return worker_fail(w, "kvd_pull_blocks", r);
        return 0;
}

/* " = 64 MiB in 12.3 ms (5.4 GB/s)" */
static void print_rate(size_t bytes, double ms)
{
        printf(" = %.0f MiB in %.1f ms (%.1f GB/s)", mib(bytes), ms,
               ms > 0 ? (double)bytes / (ms / 1000.0) / 1e9 : 0.0);
}

static int decode_run(const Options *o, int handoff_fd, int note_fd, int ready_fd, int go_fd)
{
        Worker w = {.name = "decode", .opts = o, .socket = o->decode_socket};
        _cleanup_free_ uint64_t *src = NULL, *perm = NULL;
        kvd_cluster_info peer = {
                .remote_cluster_id = PREFILL_CLUSTER,
                .remote_role = KVD_ROLE_PROMPT,
        };
        kvd_cache_key push_key = kvd_key_blocks(PREFILL_CLUSTER, MODEL_ID);
        const uint64_t *dst, *dst2;
        uint64_t push_src, push_seed = o->seed ^ PUSH_SALT;
        uint32_t n = o->prompt_blocks, range_tensors = (RANGE_LAST_LAYER + 1) * TENSORS_PER_LAYER;
        bool linked = false;
        char ids[160];
        int link_ret = 0, r;
        PushNote note;
        double ms;
        HandOff h;
        usec_t t0;

        if (worker_setup(&w, DECODE_CLUSTER, KVD_ROLE_DECODER, NULL) < 0)
                goto fail;

        /* Register first, link second: memory registered after a link is not exposed by it. */
        r = read_all(handoff_fd, &h, sizeof(h));
        if (r < 0 || h.magic != HANDOFF_MAGIC || h.n_blocks != n) {
                fprintf(stderr, "decode: no block ids from prefill (%s)\n",
                        r < 0 ? "it went away" : "bad message");
                goto fail;
        }
        src = calloc(n, sizeof(*src));
        if (!src || read_all(handoff_fd, src, n * sizeof(*src)) < 0) {
                fprintf(stderr, "decode: cannot read the block ids from prefill\n");
                goto fail;
        }
        format_ids(src, n, ids, sizeof(ids));
        h.address[sizeof(h.address) - 1] = '\0';
        printf("decode: received %u block ids of cluster %" PRIu64 "%s%s: %s\n", n, h.cluster_id,
               h.address[0] ? " at " : "", h.address, ids);

        if (two_daemons(o)) {
                if (!h.address[0]) {
                        fprintf(stderr,
                                "decode: prefill's cluster %" PRIu64 " does not say "
                                "where it listens, so it cannot be linked from another "
                                "daemon\n",
                                PREFILL_CLUSTER);
                        goto fail;
                }
                peer.remote_ip_info = h.address;
        }
        r = kvd_link_clusters(w.client, &peer, 1, 0, &link_ret);
        if (r < 0) {
                worker_fail(&w, "kvd_link_clusters", link_ret < 0 ? link_ret : r);
                goto fail;
        }
        linked = true;
        if (peer.remote_ip_info)
                printf("decode: linked cluster %" PRIu64 " -> cluster %" PRIu64 " on the kvdistd "
                       "at %s: the blocks cross between the daemons over TCP\n",
                       DECODE_CLUSTER, PREFILL_CLUSTER, peer.remote_ip_info);
        else
                printf("decode: linked cluster %" PRIu64 " -> cluster %" PRIu64 " (same node)\n",
                       DECODE_CLUSTER, PREFILL_CLUSTER);

        /* The decode side has its own free-block list: other, scattered ids. */
        perm = block_permutation(o->num_blocks, o->seed ^ DECODE_SALT);
        if (!perm) {
                fprintf(stderr, "decode: out of memory\n");
                goto fail;
        }
        dst = perm;
        dst2 = perm + n;
        push_src = perm[2 * (size_t)n];

        if (decode_pull(&w, src, dst, n, false, &ms) < 0)
                goto fail;
        for (uint32_t j = 0; j < n; j++)
                w.expect[dst[j]] = (Expect){.seed = h.seed, .index = j, .n_tensors = N_TENSORS};
        if (worker_verify(&w) < 0)
                goto fail;
        printf("decode: pulled %u blocks x %u tensors", n, N_TENSORS);
        print_rate((size_t)n * N_TENSORS * BLOCK_BYTES, ms);
        printf(", verified\n");

        if (decode_pull(&w, src, dst2, n, true, &ms) < 0)
                goto fail;
        for (uint32_t j = 0; j < n; j++)
                w.expect[dst2[j]] =
                        (Expect){.seed = h.seed, .index = j, .n_tensors = range_tensors};
        if (worker_verify(&w) < 0)
                goto fail;
        printf("decode: pulled layers 0-%u of %u blocks (%u of %u tensors)", RANGE_LAST_LAYER, n,
               range_tensors, N_TENSORS);
        print_rate((size_t)n * range_tensors * BLOCK_BYTES, ms);
        printf(", verified; layers %u-%u untouched\n", RANGE_LAST_LAYER + 1, N_LAYERS - 1);

        /* A block decode produced (say, the first generated tokens), pushed to prefill's cache. */
        for (uint32_t t = 0; t < N_TENSORS; t++)
                pattern_fill(tensor_block(&w, t, push_src), push_seed, t, 0);
        w.expect[push_src] = (Expect){.seed = push_seed, .n_tensors = N_TENSORS};
        t0 = now_usec(CLOCK_MONOTONIC);
        r = kvd_push_blocks(w.client, &push_key, w.cache_id, &push_src, 1, &h.spare_block, 1, NULL);
        ms = (double)(now_usec(CLOCK_MONOTONIC) - t0) / 1000.0;
        if (r < 0) {
                worker_fail(&w, "kvd_push_blocks", r);
                goto fail;
        }
        printf("decode: pushed block %" PRIu64 " into prefill's block %" PRIu64 " (%u tensors)",
               push_src, h.spare_block, N_TENSORS);
        print_rate((size_t)N_TENSORS * BLOCK_BYTES, ms);
        printf("\n");

        note = (PushNote){.magic = PUSH_MAGIC, .dst_block = h.spare_block, .seed = push_seed};
        if (write_all(note_fd, &note, sizeof(note)) < 0) {
                fprintf(stderr, "decode: cannot tell prefill about the push\n");
                goto fail;
        }

        if (write_all(ready_fd, "d", 1) < 0)
                goto fail;
        ready_fd = safe_close(ready_fd);
        (void)wait_eof(go_fd);

        r = kvd_unlink_clusters(w.client, &peer, 1, 0, false, &link_ret);
        if (r < 0) {
                worker_fail(&w, "kvd_unlink_clusters", link_ret < 0 ? link_ret : r);
                goto fail;
        }
        linked = false;
        if (worker_teardown(&w) < 0)
                return -1;
        printf("decode: unlinked, unregistered the cache, freed the memory and detached\n");
        return 0;

fail:
        if (linked)
                (void)kvd_unlink_clusters(w.client, &peer, 1, 0, true, NULL);
        (void)worker_teardown(&w);
        return -1;
}

static void help(FILE *f)
{
        fprintf(f,
                "Usage: kvdist-demo [OPTIONS]\n"
                "\n"
                "Hands one prompt's KV cache from a prefill worker (cluster 1) to a decode\n"
                "worker (cluster 2) through the node's kvdistd, or across two kvdistd over TCP,\n"
                "checking every byte.\n"
                "\n"
                "Options:\n"
                "  -s, --socket PATH      the daemon's socket (default: $KVDIST_SOCKET, then\n"
                "                         the daemon's default for this user)\n"
                "      --prefill-socket PATH  the prefill worker's daemon (default: --socket)\n"
                "      --decode-socket PATH   the decode worker's daemon (default: --socket);\n"
                "                         on another daemon than prefill's, decode links to\n"
                "                         cluster 1 at the prefill daemon's peer address\n"
                "      --prefill-address IP:PORT  the prefill cluster's listen_ip_info, where\n"
                "                         decode links to (default: the prefill daemon's\n"
                "                         --listen address, or a port of its own when the\n"
                "                         daemon has none)\n"
                "      --status-cmd CMD   run CMD (with /bin/sh -c; $KVDIST_SOCKET,\n"
                "                         $KVDIST_PREFILL_SOCKET and $KVDIST_DECODE_SOCKET set\n"
                "                         as given) after the transfers, while both clusters\n"
                "                         are still attached; its failure fails the demo\n"
                "      --blocks N         prompt length in %u-token blocks (default %u)\n"
                "      --num-blocks N     blocks in each worker's cache, 3..%u (default %u;\n"
                "                         2 MiB each)\n"
                "      --seed N           seed of the KV pattern and the block choice\n"
                "  -h, --help             show this help\n"
                "      --version          show the version\n"
                "\n"
                "Exit status: 0 every transfer succeeded and verified, 1 failure, 2 usage.\n",
                BLOCK_TOKENS, DEFAULT_PROMPT_BLOCKS, MAX_NUM_BLOCKS, DEFAULT_NUM_BLOCKS);
}

static int parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *ret)
{
        unsigned long long v;
        char *end;

        if (s[0] < '0' || s[0] > '9')
                return -EINVAL;
        errno = 0;
        v = strtoull(s, &end, 0);
        if (errno != 0 || *end != '\0' || v < min || v > max)
                return -EINVAL;
        *ret = v;
        return 0;
}

static int parse_args(int argc, char *argv[], Options *o)
{
        enum {
                ARG_STATUS_CMD = 0x100,
                ARG_BLOCKS,
                ARG_NUM_BLOCKS,
                ARG_SEED,
                ARG_VERSION,
                ARG_PREFILL_SOCKET,
                ARG_DECODE_SOCKET,
                ARG_PREFILL_ADDRESS,
        };
        static const struct option options[] = {
                {"socket", required_argument, NULL, 's'},
                {"prefill-socket", required_argument, NULL, ARG_PREFILL_SOCKET},
                {"decode-socket", required_argument, NULL, ARG_DECODE_SOCKET},
                {"prefill-address", required_argument, NULL, ARG_PREFILL_ADDRESS},
                {"status-cmd", required_argument, NULL, ARG_STATUS_CMD},
                {"blocks", required_argument, NULL, ARG_BLOCKS},
                {"num-blocks", required_argument, NULL, ARG_NUM_BLOCKS},
                {"seed", required_argument, NULL, ARG_SEED},
                {"help", no_argument, NULL, 'h'},
                {"version", no_argument, NULL, ARG_VERSION},
                {}};
        bool blocks_set = false;
        uint64_t v;
        int c;

        *o = (Options){.num_blocks = DEFAULT_NUM_BLOCKS,
                       .prompt_blocks = DEFAULT_PROMPT_BLOCKS,
                       .seed = DEFAULT_SEED};
        while ((c = getopt_long(argc, argv, "s:h", options, NULL)) >= 0)
                switch (c) {
                case 's':
                        if (!optarg[0]) {
                                fprintf(stderr, "kvdist-demo: --socket needs a path\n");
                                return -EINVAL;
                        }
                        o->socket_path = optarg;
                        break;
                case ARG_PREFILL_SOCKET:
                case ARG_DECODE_SOCKET:
                        if (!optarg[0]) {
                                fprintf(stderr, "kvdist-demo: --%s-socket needs a path\n",
                                        c == ARG_PREFILL_SOCKET ? "prefill" : "decode");
                                return -EINVAL;
                        }
                        *(c == ARG_PREFILL_SOCKET ? &o->prefill_socket : &o->decode_socket) =
                                optarg;
                        break;
                case ARG_PREFILL_ADDRESS:
                        if (!optarg[0] || strlen(optarg) >= ADDRESS_MAX) {
                                fprintf(stderr,
                                        "kvdist-demo: --prefill-address needs an "
                                        "IP:PORT of fewer than %d characters\n",
                                        ADDRESS_MAX);
                                return -EINVAL;
                        }
                        o->prefill_address = optarg;
                        break;
                case ARG_STATUS_CMD:
                        o->status_cmd = optarg[0] ? optarg : NULL;
                        break;
                case ARG_BLOCKS:
                        if (parse_u64(optarg, 1, MAX_NUM_BLOCKS, &v) < 0) {
                                fprintf(stderr,
                                        "kvdist-demo: --blocks: \"%s\" is not in "
                                        "1..%u\n",
                                        optarg, MAX_NUM_BLOCKS);
                                return -EINVAL;
                        }
                        o->prompt_blocks = (uint32_t)v;
                        blocks_set = true;
                        break;
                case ARG_NUM_BLOCKS:
                        if (parse_u64(optarg, 3, MAX_NUM_BLOCKS, &v) < 0) {
                                fprintf(stderr,
                                        "kvdist-demo: --num-blocks: \"%s\" is not in "
                                        "3..%u\n",
                                        optarg, MAX_NUM_BLOCKS);
                                return -EINVAL;
                        }
                        o->num_blocks = (uint32_t)v;
                        break;
                case ARG_SEED:
                        if (parse_u64(optarg, 0, UINT64_MAX, &v) < 0) {
                                fprintf(stderr, "kvdist-demo: --seed: \"%s\" is not a number\n",
                                        optarg);
                                return -EINVAL;
                        }
                        o->seed = v;
                        break;
                case 'h':
                        help(stdout);
                        exit(0);
                case ARG_VERSION:
                        printf("kvdist-demo %s\n", KVDIST_VERSION);
                        exit(0);
                default:
                        help(stderr);
                        return -EINVAL;
                }
        if (optind < argc) {
                fprintf(stderr, "kvdist-demo: unexpected argument \"%s\"\n", argv[optind]);
                return -EINVAL;
        }
        if (!blocks_set && o->prompt_blocks * 2 + 1 > o->num_blocks)
                o->prompt_blocks = (o->num_blocks - 1) / 2;
        /* Decode needs two sets of prompt blocks and one block to push; prefill one spare. */
        if ((uint64_t)o->prompt_blocks * 2 + 1 > o->num_blocks) {
                fprintf(stderr, "kvdist-demo: --blocks %u needs --num-blocks %u or more\n",
                        o->prompt_blocks, o->prompt_blocks * 2 + 1);
                return -EINVAL;
        }
        return 0;
}

/* Forks a worker that runs @fn with the pipe ends it needs and closes every other one. */
static pid_t spawn_worker(int (*fn)(const Options *, int, int, int, int), const Options *o,
                          int *fds, size_t n_fds, const int keep[4])
{
        pid_t pid;

        fflush(stdout);
        fflush(stderr);
        pid = fork();
        if (pid != 0)
                return pid;

        for (size_t i = 0; i < n_fds; i++) {
                bool kept = false;

                for (size_t k = 0; k < 4; k++)
                        kept = kept || fds[i] == keep[k];
                if (!kept)
                        safe_close(fds[i]);
        }
        alarm(WORKER_TIMEOUT_S);
        /* exit(), not _exit(): stdout is flushed already, and LeakSanitizer checks the worker. */
        exit(fn(o, keep[0], keep[1], keep[2], keep[3]) < 0 ? EXIT_FAILED : 0);
}

static int run_status_cmd(const Options *o)
{
        int r;

        if ((o->socket_path && setenv("KVDIST_SOCKET", o->socket_path, 1) < 0) ||
            (o->prefill_socket && setenv("KVDIST_PREFILL_SOCKET", o->prefill_socket, 1) < 0) ||
            (o->decode_socket && setenv("KVDIST_DECODE_SOCKET", o->decode_socket, 1) < 0))
                return -errno;
        printf("demo: both clusters are still attached; running: %s\n", o->status_cmd);
        fflush(stdout);
        r = system(o->status_cmd);
        if (r == -1 || !WIFEXITED(r) || WEXITSTATUS(r) != 0) {
                fprintf(stderr, "demo: the status command failed (%s %d)\n",
                        r != -1 && WIFEXITED(r) ? "exit status" : "wait status",
                        r == -1        ? -1
                        : WIFEXITED(r) ? WEXITSTATUS(r)
                                       : r);
                return -1;
        }
        return 0;
}

static bool reap(pid_t pid, const char *name)
{
        int status;

        while (waitpid(pid, &status, 0) < 0)
                if (errno != EINTR) {
                        fprintf(stderr, "demo: cannot wait for the %s worker: %m\n", name);
                        return false;
                }
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
                return true;
        if (WIFSIGNALED(status))
                fprintf(stderr, "demo: the %s worker was killed by signal %d%s\n", name,
                        WTERMSIG(status), WTERMSIG(status) == SIGALRM ? " (it timed out)" : "");
        else
                fprintf(stderr, "demo: the %s worker failed (exit status %d)\n", name,
                        WEXITSTATUS(status));
        return false;
}

int main(int argc, char *argv[])
{
        /* handoff: prefill -> decode; note: decode -> prefill; ready: workers -> us; go: us ->
         * workers (closed to say go). */
        int handoff[2] = {-1, -1}, note[2] = {-1, -1}, ready[2] = {-1, -1}, go[2] = {-1, -1};
        int fds[8];
        pid_t prefill = -1, decode = -1;
        bool ok = true, prefill_ok, decode_ok;
        size_t n_ready = 0;
        Options o;
        char c;

        if (parse_args(argc, argv, &o) < 0)
                return EXIT_USAGE;

        setvbuf(stdout, NULL, _IOLBF, 0);
        /* A worker that writes to a pipe whose reader died gets EPIPE, not a signal. */
        signal(SIGPIPE, SIG_IGN);

        if (pipe2(handoff, O_CLOEXEC) < 0 || pipe2(note, O_CLOEXEC) < 0 ||
            pipe2(ready, O_CLOEXEC) < 0 || pipe2(go, O_CLOEXEC) < 0) {
                fprintf(stderr, "demo: cannot create pipes: %m\n");
                return EXIT_FAILED;
        }
        memcpy(fds, handoff, sizeof(handoff));
        memcpy(fds + 2, note, sizeof(note));
        memcpy(fds + 4, ready, sizeof(ready));
        memcpy(fds + 6, go, sizeof(go));

        printf("demo: %s KV cache: %u layers x (K,V) = %u tensors; %u-token blocks of %u kv "
               "heads x %u dims fp16 = %zu KiB per tensor block\n",
               MODEL_NAME, N_LAYERS, N_TENSORS, BLOCK_TOKENS, KV_HEADS, HEAD_DIM,
               BLOCK_BYTES / 1024);

        prefill = spawn_worker(prefill_run, &o, fds, ARRAY_SIZE(fds),
                               (const int[4]){handoff[1], note[0], ready[1], go[0]});
        if (prefill < 0) {
                fprintf(stderr, "demo: cannot fork the prefill worker: %m\n");
                return EXIT_FAILED;
        }
        decode = spawn_worker(decode_run, &o, fds, ARRAY_SIZE(fds),
                              (const int[4]){handoff[0], note[1], ready[1], go[0]});
        if (decode < 0) {
                fprintf(stderr, "demo: cannot fork the decode worker: %m\n");
                (void)kill(prefill, SIGTERM);
                (void)reap(prefill, "prefill");
                return EXIT_FAILED;
        }

        /* Keep only our ends, so that a worker that dies shows up as EOF to the others. */
        safe_close(handoff[0]);
        safe_close(handoff[1]);
        safe_close(note[0]);
        safe_close(note[1]);
        safe_close(ready[1]);
        safe_close(go[0]);

        for (;;) {
                ssize_t k = read(ready[0], &c, 1);

                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        break;
                n_ready++;
        }
        safe_close(ready[0]);

        if (n_ready == 2 && o.status_cmd && run_status_cmd(&o) < 0)
                ok = false;
        safe_close(go[1]);

        prefill_ok = reap(prefill, "prefill");
        decode_ok = reap(decode, "decode");
        ok = ok && n_ready == 2 && prefill_ok && decode_ok;
        if (!ok) {
                printf("demo: FAILED\n");
                return EXIT_FAILED;
        }
        printf("demo: ok: %u blocks (%.0f MiB) of a %u-token prompt handed from prefill to "
               "decode %s, a layer range and a push back, every byte verified\n",
               o.prompt_blocks, mib((size_t)o.prompt_blocks * N_TENSORS * BLOCK_BYTES),
               o.prompt_blocks * BLOCK_TOKENS,
               two_daemons(&o) ? "across two kvdistd over TCP" : "through one kvdistd");
        return 0;
}
