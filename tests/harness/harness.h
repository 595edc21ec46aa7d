/* SPDX-License-Identifier: MIT */
/*
 * Integration test harness: starts and stops real kvdistd processes, forks client processes,
 * fills and checks seeded byte patterns, and speaks raw frames to a daemon's socket.
 *
 * The daemon binary comes from $KVDISTD. Each daemon gets a fresh mkdtemp() directory holding
 * its socket and its log (stderr, --log-level debug). Daemons die with the thread that started
 * them (PR_SET_PDEATHSIG: start them from the test's main thread); when the test ends without
 * stopping one (a failed Check assertion, a Check timeout), a watcher process prints the tail of
 * the daemon's log to stderr and removes its directory.
 * Everything returns 0 or a negative errno unless it says otherwise.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <kvdist/kvdist.h>

#include "proto/frame.h"

#define HARNESS_PATH_MAX 108 /* sun_path */
/*
 * The ceiling of every wait for something that is expected to happen (a daemon accepting, a
 * child ready, a reply, a close): generous, since the machine may be loaded, and scaled by
 * $KVDIST_TEST_TIMEOUT_MULTIPLIER (else $CK_TIMEOUT_MULTIPLIER). Waits end on readiness; only a
 * broken daemon or test ever waits this long.
 */
#define HARNESS_WAIT_MS 60000

typedef struct HarnessDaemon {
        pid_t pid;    /* 0 once stopped or killed */
        char dir[64]; /* the daemon's own temporary directory */
        char socket_path[HARNESS_PATH_MAX];
        char log_path[HARNESS_PATH_MAX];
        kvd_option options[2]; /* socket_path, device_id "0": for kvd_client_init */
        size_t n_options;
        pid_t watcher_pid; /* reports the log if the test dies first */
        int watcher_fd;
} HarnessDaemon;

/*
 * @ms scaled by $KVDIST_TEST_TIMEOUT_MULTIPLIER, else $CK_TIMEOUT_MULTIPLIER (a number >= 1;
 * anything else counts as 1), capped at INT32_MAX.
 */
int harness_wait_scaled(int ms);

/* harness_wait_scaled(HARNESS_WAIT_MS): the ceiling of a wait for readiness. */
int harness_wait_ms(void);

/*
 * Starts $KVDISTD --socket DIR/kvdist.sock --log-level debug followed by the NULL-terminated
 * extra arguments, and waits up to harness_wait_ms() until the socket accepts a
 * connection. -ENOENT when $KVDISTD is not set, -ECHILD when the daemon exited during start-up
 * (its log is printed), -ETIMEDOUT.
 */
int harness_daemon_start(HarnessDaemon *d, ...) __attribute__((sentinel));

/* The same with the extra arguments as a NULL-terminated array (may be NULL). */
int harness_daemon_startv(HarnessDaemon *d, const char *const *extra_args);

/* How harness_daemon_start_opts() starts the daemon; every list is NULL-terminated or NULL. */
typedef struct HarnessStartOptions {
        const char *const *extra_args; /* after --socket and --log-level */
        const char *const *env;        /* "NAME=value" added to the daemon's environment */
        /*
         * A program that runs the daemon (a socket-activation launcher): these arguments come
         * first (looked up in $PATH), then $KVDISTD and its arguments. "@SOCKET@" in them is
         * replaced by the daemon's socket path.
         */
        const char *const *launcher;
        /*
         * A network namespace (a name under /run/netns, as `ip netns add` makes) to run the
         * daemon in; NULL: this one. The Unix socket is a path: clients in any namespace reach it.
         */
        const char *netns;
} HarnessStartOptions;

/* harness_daemon_startv() with an environment and a launcher. */
int harness_daemon_start_opts(HarnessDaemon *d, const HarnessStartOptions *o);

/*
 * Sends SIGTERM and waits up to harness_wait_ms() for the daemon to exit (then SIGKILL). Returns
 * its exit code, 128 + the signal number when a signal ended it, -EUCLEAN when its log holds a
 * sanitizer report (the log is printed), or another negative errno.
 */
int harness_daemon_stop(HarnessDaemon *d);

/* Sends SIGKILL and reaps the daemon. Returns 0, -EUCLEAN as harness_daemon_stop(), or a
 * negative errno. */
int harness_daemon_kill(HarnessDaemon *d);

/* Whether the daemon process still runs (it is reaped if it exited). */
bool harness_daemon_alive(HarnessDaemon *d);

/* Kills the daemon if it still runs and removes its directory. Accepts a zeroed @d. */
void harness_daemon_cleanup(HarnessDaemon *d);

/* Writes the last @max_bytes of the daemon's log to stderr (0: all of it). */
void harness_daemon_dump_log(const HarnessDaemon *d, size_t max_bytes);

/* Whether the daemon's log contains @needle. */
bool harness_daemon_log_contains(const HarnessDaemon *d, const char *needle);

/*
 * kvd_client_init() on @d's socket as @cluster_id with device_id 0. Returns the library's
 * status (KVD_OK or KVD_E_*).
 */
int harness_client_init(const HarnessDaemon *d, uint64_t cluster_id, kvd_role role,
                        kvd_client **ret);

/*
 * harness_client_init() as a server reachable at @listen_ip_info (LLM-DataDist's option; the
 * daemon's own --listen address, or one of the cluster's own such as "127.0.0.1:0"): the cluster
 * that others link to.
 */
int harness_server_init(const HarnessDaemon *d, uint64_t cluster_id, kvd_role role,
                        const char *listen_ip_info, kvd_client **ret);

/* kvd_daemon_status() of @d through a fresh read-only connection; *@ret_json is malloc()ed. */
int harness_daemon_status(const HarnessDaemon *d, char **ret_json);

/* Milliseconds on CLOCK_MONOTONIC. */
uint64_t harness_now_ms(void);

/* Sleeps @ms milliseconds. */
void harness_sleep_ms(unsigned ms);

/*
 * Seeded pattern: the byte at offset o of the stream @seed is byte o % 8 of
 * xorshift64*(seed, o / 8), so any slice of a stream can be written or checked on its own.
 */
uint8_t harness_pattern_byte(uint64_t seed, uint64_t offset);

/* Fills @buf with bytes [@offset, @offset + @len) of the stream @seed. */
void harness_fill_pattern_at(void *buf, size_t len, uint64_t seed, uint64_t offset);

/* Fills @buf with the start of the stream @seed. */
void harness_fill_pattern(void *buf, size_t len, uint64_t seed);

/*
 * Checks @buf against bytes [@offset, @offset + @len) of the stream @seed. Returns the first
 * offset into @buf that differs, or -1 when every byte matches.
 */
ssize_t harness_check_pattern_at(const void *buf, size_t len, uint64_t seed, uint64_t offset);

/* Checks @buf against the start of the stream @seed; as harness_check_pattern_at(). */
ssize_t harness_check_pattern(const void *buf, size_t len, uint64_t seed);

/* A forked child process (see harness_fork_client()). */
typedef struct HarnessChild {
        pid_t pid;    /* 0 once reaped */
        int ready_fd; /* read end of the readiness pipe */
        int status;   /* exit code, or 128 + signal, once reaped */
} HarnessChild;

typedef int (*harness_child_fn)(void *arg);

/*
 * Forks a child that runs @fn(@arg) and _exit()s with its return value. The child tells the
 * parent it is ready with harness_child_ready(). The child's own Check assertions are not
 * reported; it should return a non-zero code instead.
 */
int harness_fork_client(harness_child_fn fn, void *arg, HarnessChild *ret);

/* In the child: tells the parent it is ready, passing @value. */
void harness_child_ready(uint64_t value);

/*
 * In the parent: waits up to @timeout_ms for the child's harness_child_ready(); *@ret_value
 * (may be NULL) receives its value. -EPIPE when the child exited first, -ETIMEDOUT.
 */
int harness_child_wait_ready(HarnessChild *c, int timeout_ms, uint64_t *ret_value);

/*
 * Waits up to @timeout_ms (< 0: forever) for the child to exit. Returns its exit code (or
 * 128 + signal), -ETIMEDOUT.
 */
int harness_child_wait(HarnessChild *c, int timeout_ms);

/* Sends @sig to the child and reaps it; returns as harness_child_wait(). */
int harness_child_kill(HarnessChild *c, int sig);

/* Raw frames, for malformed and hostile input. */

/* Connects a blocking socket to @path; returns the fd. */
int harness_raw_connect(const char *path);

/* Sends @len bytes (all of them) with @n_fds fds attached to the first byte. */
int harness_raw_send(int fd, const void *buf, size_t len, const int *fds, size_t n_fds);

/*
 * Sends a frame: header with @type, @flags, @request_id and @n_fds, then @msg (may be NULL for
 * an empty payload), with @fds attached.
 */
int harness_raw_send_frame(int fd, uint16_t type, uint16_t flags, uint64_t request_id,
                           const ProtobufCMessage *msg, const int *fds, size_t n_fds);

/* A frame read back from the daemon. */
typedef struct HarnessFrame {
        FrameHeader h;
        uint8_t *payload;
        int fds[FRAME_MAX_FDS];
        size_t n_fds;
} HarnessFrame;

/*
 * Reads one frame within @timeout_ms. Returns 1 with the frame in @ret, 0 when the daemon
 * closed the connection (EOF or reset) before a whole frame came, -ETIMEDOUT, -EBADMSG for a
 * header frame_header_decode() rejects.
 */
int harness_raw_read_frame(int fd, int timeout_ms, HarnessFrame *ret);

/* Frees the payload and closes the fds of @f. */
void harness_frame_deinit(HarnessFrame *f);

/*
 * The Status a reply frame carries: a bare Status for FRAME_FLAG_ERROR, else field 1 of the
 * reply message of its type. *@ret_code receives the code; @detail (may be NULL) the detail.
 * -EBADMSG when the payload does not decode.
 */
int harness_frame_status(const HarnessFrame *f, int *ret_code, char *detail, size_t size);

/*
 * Unpacks the payload of a reply frame with its type's reply descriptor; free the result with
 * protobuf_c_message_free_unpacked().
 */
int harness_frame_unpack_reply(const HarnessFrame *f, ProtobufCMessage **ret);

/* Sends Hello (protocol 1) and checks the HelloReply says KVD_OK. */
int harness_raw_hello(int fd);

/*
 * Waits up to @timeout_ms for the daemon to close @fd, discarding whatever frames come first.
 * Returns 1 when it closed, 0 when it is still open.
 */
int harness_raw_wait_closed(int fd, int timeout_ms);

/*
 * Runs the NULL-terminated @argv (argv[0] is a path) and waits for it. *@ret_stdout and
 * *@ret_stderr (may be NULL) receive what it wrote, malloc()ed and NUL-terminated. Returns its
 * exit code, 128 + signal, or a negative errno.
 */
int harness_run(const char *const *argv, char **ret_stdout, char **ret_stderr);

/* A "kB" field of /proc/@pid/status ("VmPeak", "VmRSS"), or a negative errno. */
long harness_proc_status_kib(pid_t pid, const char *field);

/* One thread of a process, from /proc/PID/task/TID/stat. */
typedef struct HarnessThread {
        pid_t tid;
        char comm[16]; /* its name: "kvdistd" for the main thread, "kvd-copy0" */
        int nice;
} HarnessThread;

/*
 * The threads of @pid into @ret (at most @max). Returns how many, or a negative errno. A thread
 * that ends while they are read is left out.
 */
int harness_proc_threads(pid_t pid, HarnessThread *ret, size_t max);

/*
 * The resident KiB of the mappings of @pid whose path contains @name ("memfd:kv"), from
 * /proc/@pid/smaps: counted over the page tables, so exact at once (the RssShmem of
 * /proc/PID/status lags by up to 64 faults a thread on kernels before 6.2). A negative errno when
 * unreadable.
 */
long harness_proc_mapped_kib(pid_t pid, const char *name);
