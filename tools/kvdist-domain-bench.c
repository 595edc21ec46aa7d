/* SPDX-License-Identifier: MIT */
/*
 * kvdist-domain-bench: ring against mesh for the comm domain collectives. Starts one kvdistd
 * per member (on loopback, or with --netns as separate hosts in network namespaces on a bridge,
 * each host's link optionally shaped to --rate like a NIC), attaches one cluster per daemon,
 * forms a domain and times broadcast and all-gather of blocks with each algorithm over a range
 * of sizes. With --rdma-device the daemons map device_id 0 to that RDMA device with transport
 * rdma, so the lanes move their bytes by RDMA WRITE (checked in the status before timing).
 * Every run is checked byte for byte. Prints one table (or --json).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <kvdist/kvdist.h>
#include "common/macro.h"

#define MAX_MEMBERS KVD_MAX_DOMAIN_MEMBERS
#define TENSORS 2
#define BLOCK_BYTES (64u << 10)
#define MAX_SIZES 16

typedef struct Options {
        const char *kvdistd;
        unsigned members;
        uint64_t sizes[MAX_SIZES];
        unsigned n_sizes;
        unsigned iterations;
        uint64_t chunk;
        bool broadcast, all_gather;
        bool netns;
        const char *rate;        /* tc rate of each host's link, "" = unshaped */
        const char *rdma_device; /* "" = TCP */
        bool json;
} Options;

typedef struct Member {
        pid_t daemon;
        char dir[64];
        char socket[128];
        char config[128];
        char listen[64];
        char netns[32];
        char veth[32];
        kvd_client *client;
        uint64_t comm_id;
        uint64_t cache_id;
        uint8_t *mem;
        size_t mem_size;
        uint64_t blocks[4096];
        int ret;
        char detail[256];
} Member;

static Options opt;
static Member members[MAX_MEMBERS];
static char ns_switch[32];

static double now_s(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

static void cleanup(void);

static void die(const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        fprintf(stderr, "kvdist-domain-bench: ");
        vfprintf(stderr, fmt, ap);
        fprintf(stderr, "\n");
        va_end(ap);
        cleanup();
        exit(1);
}

/* Runs a command quietly; returns its exit status. */
static int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run(const char *fmt, ...)
{
        char cmd[512];
        va_list ap;
        int r;

        va_start(ap, fmt);
        (void)vsnprintf(cmd, sizeof(cmd), fmt, ap);
        va_end(ap);
        r = system(cmd);
        return WIFEXITED(r) ? WEXITSTATUS(r) : 128;
}

static void netns_teardown(void)
{
        for (unsigned i = 0; i < opt.members; i++)
                if (members[i].netns[0])
                        (void)run("ip netns del %s 2>/dev/null", members[i].netns);
        if (ns_switch[0])
                (void)run("ip netns del %s 2>/dev/null", ns_switch);
        ns_switch[0] = '\0';
}

/* A bridge in a switch namespace and one namespace per host on a veth to it, 10.79.<k>.i. */
static void netns_setup(void)
{
        unsigned k = (unsigned)getpid() % 250 + 1;

        if (geteuid() != 0)
                die("--netns needs root (network namespaces need CAP_SYS_ADMIN)");
        (void)snprintf(ns_switch, sizeof(ns_switch), "kvb-sw-%d", (int)getpid());
        if (run("ip netns add %s && ip -n %s link add br0 type bridge && ip -n %s link set br0 up",
                ns_switch, ns_switch, ns_switch) != 0)
                die("cannot create the switch namespace");
        for (unsigned i = 0; i < opt.members; i++) {
                Member *m = &members[i];

                (void)snprintf(m->netns, sizeof(m->netns), "kvb-h%u-%d", i, (int)getpid());
                (void)snprintf(m->veth, sizeof(m->veth), "kbh%u-%d", i, (int)getpid() % 10000);
                (void)snprintf(m->listen, sizeof(m->listen), "10.79.%u.%u:7400", k, i + 1);
                if (run("ip netns add %s && ip link add %s type veth peer name kbs%u-%d && "
                        "ip link set %s netns %s && ip link set kbs%u-%d netns %s && "
                        "ip -n %s link set kbs%u-%d master br0 up && "
                        "ip -n %s addr add 10.79.%u.%u/24 dev %s && ip -n %s link set %s up && "
                        "ip -n %s link set lo up",
                        m->netns, m->veth, i, (int)getpid() % 10000, m->veth, m->netns, i,
                        (int)getpid() % 10000, ns_switch, ns_switch, i, (int)getpid() % 10000,
                        m->netns, k, i + 1, m->veth, m->netns, m->veth, m->netns) != 0)
                        die("cannot set up host namespace %u", i);
                /* The host's NIC: what it sends is shaped to the rate. */
                if (opt.rate[0] &&
                    run("ip netns exec %s tc qdisc add dev %s root tbf rate %s burst 256kb "
                        "latency 100ms",
                        m->netns, m->veth, opt.rate) != 0)
                        die("cannot shape %s to %s", m->veth, opt.rate);
        }
}

static void cleanup(void)
{
        for (unsigned i = 0; i < opt.members; i++) {
                Member *m = &members[i];

                if (m->client)
                        (void)kvd_client_finalize(m->client);
                m->client = NULL;
                if (m->daemon > 0) {
                        (void)kill(m->daemon, SIGTERM);
                        (void)waitpid(m->daemon, NULL, 0);
                        m->daemon = 0;
                }
                if (m->dir[0]) {
                        (void)run("rm -rf %s", m->dir);
                        m->dir[0] = '\0';
                }
        }
        netns_teardown();
}

/* Starts member @i's daemon and waits until it answers. */
static void daemon_start(unsigned i)
{
        Member *m = &members[i];
        kvd_client *c = NULL;
        char *json = NULL, *p;

        char dir[sizeof(m->dir)] = "/tmp/kvdist-dbench-XXXXXX";

        if (!mkdtemp(dir))
                die("mkdtemp: %m");
        memcpy(m->dir, dir, sizeof(dir));
        (void)snprintf(m->socket, sizeof(m->socket), "%s/kvdist.sock", dir);
        (void)snprintf(m->config, sizeof(m->config), "%s/kvdistd.json", dir);
        {
                FILE *f = fopen(m->config, "we");

                if (!f ||
                    (opt.rdma_device[0]
                             ? fprintf(f,
                                       "{\"devices\": [{\"device_id\": 0, \"transport\": "
                                       "\"rdma\", \"rdma_device\": \"%s\"}]}\n",
                                       opt.rdma_device)
                             : fprintf(f, "{}\n")) < 0 ||
                    fclose(f) != 0)
                        die("cannot write %s: %m", m->config);
        }
        if (!m->listen[0])
                (void)snprintf(m->listen, sizeof(m->listen), "127.0.0.1:0");
        m->daemon = fork();
        if (m->daemon < 0)
                die("fork: %m");
        if (m->daemon == 0) {
                char log[128];

                (void)snprintf(log, sizeof(log), "%s/kvdistd.log", m->dir);
                if (!freopen(log, "w", stderr))
                        _exit(127);
                if (m->netns[0])
                        execlp("ip", "ip", "netns", "exec", m->netns, opt.kvdistd, "--socket",
                               m->socket, "--listen", m->listen, "--log-level", "warning",
                               "--memory-size", "0", "--config", m->config, (char *)NULL);
                else
                        execl(opt.kvdistd, opt.kvdistd, "--socket", m->socket, "--listen",
                              m->listen, "--log-level", "warning", "--memory-size", "0", "--config",
                              m->config, (char *)NULL);
                _exit(127);
        }
        for (int k = 0; k < 500; k++) {
                if (kvd_client_connect(&(kvd_option){"socket_path", m->socket}, 1, &c) == KVD_OK)
                        break;
                usleep(10000);
        }
        if (!c || kvd_daemon_status(c, &json) != KVD_OK)
                die("kvdistd %u did not start (see %s/kvdistd.log)", i, m->dir);
        kvd_client_finalize(c);
        /* "peer_listen":"127.0.0.1:40123" */
        p = strstr(json, "\"peer_listen\":\"");
        if (!p)
                die("kvdistd %u does not say where it listens", i);
        p += strlen("\"peer_listen\":\"");
        (void)snprintf(m->listen, sizeof(m->listen), "%.*s", (int)strcspn(p, "\""), p);
        free(json);
}

static void member_attach(unsigned i, uint64_t max_size)
{
        Member *m = &members[i];
        kvd_option o[2] = {{"socket_path", m->socket}, {"device_id", "0"}};
        uint64_t n_blocks = max_size / (TENSORS * BLOCK_BYTES);
        kvd_cache_desc desc = {.num_tensors = TENSORS,
                               .n_dims = 2,
                               .shape = {(int64_t)n_blocks, BLOCK_BYTES / 2},
                               .data_type = KVD_DT_FLOAT16};
        void *addrs[TENSORS], *mem;

        if (kvd_client_init(1000 + i, KVD_ROLE_MIX, o, 2, &m->client) != KVD_OK)
                die("attach %u: %s", i, kvd_last_error(NULL));
        m->mem_size = n_blocks * BLOCK_BYTES * TENSORS;
        if (kvd_mem_alloc(m->client, m->mem_size, &mem) != KVD_OK)
                die("memory %u: %s", i, kvd_last_error(m->client));
        m->mem = mem;
        for (unsigned t = 0; t < TENSORS; t++)
                addrs[t] = m->mem + t * n_blocks * BLOCK_BYTES;
        if (kvd_register_blocks_cache(m->client, &desc, addrs, TENSORS, NULL, KVD_REMOTE_DEFAULT,
                                      &m->cache_id) != KVD_OK)
                die("cache %u: %s", i, kvd_last_error(m->client));
}

static void domain_form(void)
{
        char table[4096];
        size_t len = 0;
        kvd_cluster_rank info[MAX_MEMBERS];

        len += (size_t)snprintf(table + len, sizeof(table) - len,
                                "{\"version\": \"1.0\", \"server_count\": \"%u\", "
                                "\"status\": \"completed\", \"server_list\": [",
                                opt.members);
        for (unsigned i = 0; i < opt.members; i++) {
                len += (size_t)snprintf(table + len, sizeof(table) - len,
                                        "%s{\"server_id\": \"host%u\", \"device\": [{\"device_id\":"
                                        " \"0\", \"device_ip\": \"%s\", \"rank_id\": \"%u\"}]}",
                                        i ? ", " : "", i, members[i].listen, i);
                info[i] = (kvd_cluster_rank){1000 + i, i};
        }
        (void)snprintf(table + len, sizeof(table) - len, "]}");
        for (unsigned i = 0; i < opt.members; i++)
                if (kvd_domain_link(members[i].client, "bench", info, opt.members, table,
                                    &members[i].comm_id) != KVD_OK)
                        die("link %u: %s", i, kvd_last_error(members[i].client));
        for (unsigned i = 0; i < opt.members; i++) {
                kvd_mem_status st = KVD_MEM_STATUS_PREPARING;

                for (int k = 0; k < 3000 && st == KVD_MEM_STATUS_PREPARING; k++) {
                        if (kvd_domain_status(members[i].client, members[i].comm_id, &st) != KVD_OK)
                                die("query %u: %s", i, kvd_last_error(members[i].client));
                        if (st == KVD_MEM_STATUS_PREPARING)
                                usleep(10000);
                }
                if (st != KVD_MEM_STATUS_OK)
                        die("the domain did not form: %s", kvd_last_error(members[i].client));
        }
        for (unsigned i = 0; i < opt.members; i++) {
                const char *want =
                        opt.rdma_device[0] ? "\"transport\":\"rdma\"" : "\"transport\":\"tcp\"";
                char *json = NULL, *p;

                /* Timing one transport while the daemons use another would mislead. */
                if (kvd_daemon_status(members[i].client, &json) != KVD_OK)
                        die("status %u: %s", i, kvd_last_error(members[i].client));
                p = strstr(json, "\"channels\":");
                if (!p || !strstr(p, want))
                        die("the channels of member %u do not run over %s", i,
                            opt.rdma_device[0] ? "RDMA" : "TCP");
                free(json);
        }
}

/* One timed run. */
typedef struct Run {
        bool gather;
        kvd_algorithm algo;
        size_t n_blocks; /* broadcast: blocks; all-gather: per rank */
        pthread_barrier_t barrier;
        double end[MAX_MEMBERS];
} Run;

typedef struct RunArg {
        Run *run;
        unsigned i;
} RunArg;

static void *member_run(void *p)
{
        RunArg *a = p;
        Run *r = a->run;
        Member *m = &members[a->i];
        kvd_collective_opts o = {
                .algorithm = r->algo, .timeout_ms = 60000, .chunk_bytes = opt.chunk};

        pthread_barrier_wait(&r->barrier);
        if (r->gather)
                m->ret = kvd_domain_all_gather(m->client, m->comm_id, m->cache_id, m->blocks,
                                               r->n_blocks * opt.members, r->n_blocks, &o, NULL);
        else
                m->ret = kvd_domain_broadcast(m->client, m->comm_id, 0, m->cache_id, m->blocks,
                                              r->n_blocks, &o, NULL);
        r->end[a->i] = now_s();
        (void)snprintf(m->detail, sizeof(m->detail), "%s", kvd_last_error(m->client));
        return NULL;
}

/* Fills every member's cache with its own bytes, runs once, checks, returns the seconds. */
static double run_once(bool gather, kvd_algorithm algo, uint64_t size)
{
        /* Broadcast: @size bytes from the root; all-gather: @size bytes gathered, a part each. */
        size_t per = size / (TENSORS * BLOCK_BYTES) / (gather ? opt.members : 1);
        size_t total = gather ? per * opt.members : per;
        pthread_t threads[MAX_MEMBERS];
        RunArg args[MAX_MEMBERS];
        Run r = {.gather = gather, .algo = algo, .n_blocks = per};
        double start, end = 0;

        for (unsigned i = 0; i < opt.members; i++) {
                Member *m = &members[i];

                for (size_t k = 0; k < total; k++)
                        m->blocks[k] = total - 1 - (k + i) % total;
                for (size_t b = 0; b < m->mem_size; b += 4096)
                        memset(m->mem + b, (int)(i * 16 + b / 4096 % 13), 4096);
        }
        pthread_barrier_init(&r.barrier, NULL, opt.members + 1);
        for (unsigned i = 0; i < opt.members; i++) {
                args[i] = (RunArg){&r, i};
                pthread_create(&threads[i], NULL, member_run, &args[i]);
        }
        start = now_s();
        pthread_barrier_wait(&r.barrier);
        for (unsigned i = 0; i < opt.members; i++) {
                pthread_join(threads[i], NULL);
                if (members[i].ret != KVD_OK)
                        die("%s rank %u: %s", gather ? "all-gather" : "broadcast", i,
                            members[i].detail);
                end = r.end[i] > end ? r.end[i] : end;
        }
        pthread_barrier_destroy(&r.barrier);
        /* Check: the bytes of every block each member received are its sender's. */
        for (unsigned i = 0; i < opt.members; i++) {
                uint64_t nb = members[i].mem_size / (TENSORS * BLOCK_BYTES);

                for (unsigned q = 0; q < opt.members; q++) {
                        unsigned src = gather ? q : 0;

                        if ((gather && q == i) || (!gather && (i == 0 || q > 0)))
                                continue;
                        for (size_t k = 0; k < per; k++)
                                for (unsigned t = 0; t < TENSORS; t++) {
                                        size_t kk = (gather ? q * per : 0) + k;
                                        const uint8_t *got =
                                                members[i].mem +
                                                (t * nb + members[i].blocks[kk]) * BLOCK_BYTES;
                                        const uint8_t *want =
                                                members[src].mem +
                                                (t * nb + members[src].blocks[kk]) * BLOCK_BYTES;

                                        if (memcmp(got, want, BLOCK_BYTES) != 0)
                                                die("rank %u holds wrong bytes in block %" PRIu64,
                                                    i, members[i].blocks[kk]);
                                }
                }
        }
        return end - start;
}

static int cmp_double(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;

        return x < y ? -1 : x > y;
}

static int parse_size(const char *s, uint64_t *ret)
{
        char *end;
        unsigned long long v = strtoull(s, &end, 10);

        switch (*end) {
        case 'K':
        case 'k':
                v <<= 10;
                end++;
                break;
        case 'M':
        case 'm':
                v <<= 20;
                end++;
                break;
        case 'G':
        case 'g':
                v <<= 30;
                end++;
                break;
        }
        if (end == s || *end || v == 0)
                return -EINVAL;
        *ret = v;
        return 0;
}

static void usage(FILE *f)
{
        fprintf(f,
                "Usage: kvdist-domain-bench [OPTIONS]\n"
                "\n"
                "Times broadcast and all-gather of blocks in a comm domain, ring against mesh,\n"
                "with one kvdistd per member. Every run is checked byte for byte.\n"
                "\n"
                "  -n, --members N       members (daemons), 2..4 (3)\n"
                "  -s, --sizes LIST      bytes per operation, e.g. 256K,4M,32M (256K,1M,4M,16M)\n"
                "  -i, --iterations N    runs per case; the median is shown (5)\n"
                "      --chunk SIZE      ring pipeline chunk (1M)\n"
                "      --op OP           broadcast, all-gather or both (both)\n"
                "      --netns           run each daemon as a host in its own network\n"
                "                        namespace on a bridge (root)\n"
                "      --rate RATE       with --netns: shape each host's link (tc tbf), e.g.\n"
                "                        1gbit\n"
                "      --rdma-device DEV the daemons move the lanes' bytes by RDMA WRITE on DEV\n"
                "                        (device_id 0, transport rdma)\n"
                "      --kvdistd PATH    the daemon (default $KVDISTD, then next to this tool)\n"
                "      --json            one JSON object per case\n"
                "  -h, --help\n");
}

static void parse_args(int argc, char **argv)
{
        enum {
                ARG_CHUNK = 256,
                ARG_OP,
                ARG_NETNS,
                ARG_RATE,
                ARG_RDMA_DEVICE,
                ARG_KVDISTD,
                ARG_JSON
        };
        static const struct option options[] = {
                {"members", required_argument, NULL, 'n'},
                {"sizes", required_argument, NULL, 's'},
                {"iterations", required_argument, NULL, 'i'},
                {"chunk", required_argument, NULL, ARG_CHUNK},
                {"op", required_argument, NULL, ARG_OP},
                {"netns", no_argument, NULL, ARG_NETNS},
                {"rate", required_argument, NULL, ARG_RATE},
                {"rdma-device", required_argument, NULL, ARG_RDMA_DEVICE},
                {"kvdistd", required_argument, NULL, ARG_KVDISTD},
                {"json", no_argument, NULL, ARG_JSON},
                {"help", no_argument, NULL, 'h'},
                {}};
        static char self_kvdistd[4096];
        int c;

        opt = (Options){.members = 3,
                        .iterations = 5,
                        .chunk = 1u << 20,
                        .broadcast = true,
                        .all_gather = true,
                        .rate = "",
                        .rdma_device = ""};
        opt.sizes[0] = 256u << 10;
        opt.sizes[1] = 1u << 20;
        opt.sizes[2] = 4u << 20;
        opt.sizes[3] = 16u << 20;
        opt.n_sizes = 4;
        while ((c = getopt_long(argc, argv, "n:s:i:h", options, NULL)) >= 0) {
                switch (c) {
                case 'n':
                        opt.members = (unsigned)atoi(optarg);
                        if (opt.members < 2 || opt.members > MAX_MEMBERS)
                                die("--members takes 2..%d", MAX_MEMBERS);
                        break;
                case 's': {
                        char *copy = strdup(optarg), *save = NULL, *tok;

                        opt.n_sizes = 0;
                        for (tok = strtok_r(copy, ",", &save); tok && opt.n_sizes < MAX_SIZES;
                             tok = strtok_r(NULL, ",", &save))
                                if (parse_size(tok, &opt.sizes[opt.n_sizes++]) < 0)
                                        die("--sizes: \"%s\" is not a size", tok);
                        free(copy);
                        break;
                }
                case 'i':
                        opt.iterations = (unsigned)atoi(optarg);
                        if (opt.iterations < 1 || opt.iterations > 1000)
                                die("--iterations takes 1..1000");
                        break;
                case ARG_CHUNK:
                        if (parse_size(optarg, &opt.chunk) < 0)
                                die("--chunk: \"%s\" is not a size", optarg);
                        break;
                case ARG_OP:
                        if (strcmp(optarg, "broadcast") != 0 && strcmp(optarg, "all-gather") != 0 &&
                            strcmp(optarg, "both") != 0)
                                die("--op takes broadcast, all-gather or both");
                        opt.broadcast = strcmp(optarg, "all-gather") != 0;
                        opt.all_gather = strcmp(optarg, "broadcast") != 0;
                        break;
                case ARG_NETNS:
                        opt.netns = true;
                        break;
                case ARG_RATE:
                        opt.rate = optarg;
                        break;
                case ARG_RDMA_DEVICE:
                        if (!optarg[0] || strlen(optarg) > 63 || strpbrk(optarg, "\"\\"))
                                die("--rdma-device takes a device name");
                        opt.rdma_device = optarg;
                        break;
                case ARG_KVDISTD:
                        opt.kvdistd = optarg;
                        break;
                case ARG_JSON:
                        opt.json = true;
                        break;
                case 'h':
                        usage(stdout);
                        exit(0);
                default:
                        usage(stderr);
                        exit(2);
                }
        }
        if (opt.rate[0] && !opt.netns)
                die("--rate shapes the hosts' links: it needs --netns");
        if (!opt.kvdistd)
                opt.kvdistd = getenv("KVDISTD");
        if (!opt.kvdistd) {
                /* The build tree: tools/kvdist-domain-bench next to daemon/kvdistd. */
                ssize_t n = readlink("/proc/self/exe", self_kvdistd, sizeof(self_kvdistd) - 32);

                if (n > 0) {
                        self_kvdistd[n] = '\0';
                        *strrchr(self_kvdistd, '/') = '\0';
                        strcat(self_kvdistd, "/../daemon/kvdistd");
                        opt.kvdistd = self_kvdistd;
                }
        }
        if (!opt.kvdistd || access(opt.kvdistd, X_OK) < 0)
                die("no kvdistd to run; give --kvdistd or $KVDISTD");
        for (unsigned k = 0; k < opt.n_sizes; k++)
                if (opt.sizes[k] < (uint64_t)TENSORS * BLOCK_BYTES * opt.members ||
                    opt.sizes[k] / (TENSORS * BLOCK_BYTES) > 4096 / opt.members)
                        die("sizes run from %u KiB to %u MiB here",
                            TENSORS * BLOCK_BYTES * opt.members >> 10,
                            (4096 / opt.members) * TENSORS * BLOCK_BYTES >> 20);
}

int main(int argc, char **argv)
{
        static const char *const op_names[] = {"broadcast", "all-gather"};
        uint64_t max = 0;

        parse_args(argc, argv);
        (void)signal(SIGPIPE, SIG_IGN);
        if (opt.netns)
                netns_setup();
        for (unsigned i = 0; i < opt.members; i++)
                daemon_start(i);
        for (unsigned k = 0; k < opt.n_sizes; k++)
                max = opt.sizes[k] > max ? opt.sizes[k] : max;
        for (unsigned i = 0; i < opt.members; i++)
                member_attach(i, max);
        domain_form();
        if (!opt.json)
                printf("%u members%s%s%s, %s%s, chunk %" PRIu64 " KiB, median of %u runs, every "
                       "byte checked\n%-11s %10s %10s %10s %10s %10s %7s\n",
                       opt.members, opt.netns ? " on separate hosts" : " on loopback",
                       opt.rate[0] ? " at " : "", opt.rate, opt.rdma_device[0] ? "RDMA on " : "TCP",
                       opt.rdma_device, opt.chunk >> 10, opt.iterations, "op", "bytes", "ring ms",
                       "ring GB/s", "mesh ms", "mesh GB/s", "ring/x");
        for (int op = 0; op < 2; op++) {
                if ((op == 0 && !opt.broadcast) || (op == 1 && !opt.all_gather))
                        continue;
                for (unsigned k = 0; k < opt.n_sizes; k++) {
                        double med[3];

                        for (int a = KVD_ALGO_RING; a <= KVD_ALGO_MESH; a++) {
                                double t[1000];

                                for (unsigned it = 0; it < opt.iterations; it++)
                                        t[it] = run_once(op == 1, (kvd_algorithm)a, opt.sizes[k]);
                                qsort(t, opt.iterations, sizeof(double), cmp_double);
                                med[a] = t[opt.iterations / 2];
                        }
                        if (opt.json)
                                printf("{\"op\": \"%s\", \"members\": %u, \"bytes\": %" PRIu64
                                       ", \"ring_s\": %.6f, \"mesh_s\": %.6f, \"netns\": %s, "
                                       "\"rate\": \"%s\", \"transport\": \"%s\"}\n",
                                       op_names[op], opt.members, opt.sizes[k], med[KVD_ALGO_RING],
                                       med[KVD_ALGO_MESH], opt.netns ? "true" : "false", opt.rate,
                                       opt.rdma_device[0] ? "rdma" : "tcp");
                        else
                                printf("%-11s %10" PRIu64 " %10.2f %10.3f %10.2f %10.3f %7.2f\n",
                                       op_names[op], opt.sizes[k], med[KVD_ALGO_RING] * 1e3,
                                       (double)opt.sizes[k] / med[KVD_ALGO_RING] / 1e9,
                                       med[KVD_ALGO_MESH] * 1e3,
                                       (double)opt.sizes[k] / med[KVD_ALGO_MESH] / 1e9,
                                       med[KVD_ALGO_MESH] / med[KVD_ALGO_RING]);
                        fflush(stdout);
                }
        }
        cleanup();
        return 0;
}
