/* SPDX-License-Identifier: MIT */
/* Log journal: journald's native protocol, one datagram per record. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/log-journal.h"
#include "common/macro.h"

#define MAX_FIELDS 12

static pthread_mutex_t journal_lock = PTHREAD_MUTEX_INITIALIZER;
static int journal_fd = -1;
static char journal_path[sizeof(((struct sockaddr_un *)NULL)->sun_path)] = LOG_JOURNAL_SOCKET;

void log_journal_set_socket(const char *path)
{
        pthread_mutex_lock(&journal_lock);
        (void)snprintf(journal_path, sizeof(journal_path), "%s", path ? path : LOG_JOURNAL_SOCKET);
        pthread_mutex_unlock(&journal_lock);
}

/* The socket and the destination, under the lock; the fd stays open for the process. */
static int journal_prepare(struct sockaddr_un *sa, socklen_t *len)
{
        int fd;

        pthread_mutex_lock(&journal_lock);
        if (journal_fd < 0)
                journal_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        fd = journal_fd;
        *sa = (struct sockaddr_un){.sun_family = AF_UNIX};
        memcpy(sa->sun_path, journal_path, sizeof(journal_path));
        *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(sa->sun_path) + 1);
        pthread_mutex_unlock(&journal_lock);
        return fd >= 0 ? fd : -errno;
}

int log_journal_send(int level, int error, const char *file, int line, const char *func,
                     const LogFields *fields, const char *message)
{
        char head[4][96], cluster[48], link[48], errno_buf[32], peer[160];
        struct iovec iov[MAX_FIELDS + 4];
        struct sockaddr_un sa;
        struct msghdr mh = {};
        uint64_t mlen = strlen(message);
        uint8_t le[8];
        size_t n = 0;
        socklen_t salen;
        int fd;

        fd = journal_prepare(&sa, &salen);
        if (fd < 0)
                return fd;

#define ADD(buf, len) iov[n++] = (struct iovec){.iov_base = (void *)(buf), .iov_len = (len)}
#define ADD_STR(s) ADD((s), strlen(s))
        (void)snprintf(head[0], sizeof(head[0]), "PRIORITY=%d\n", level);
        ADD_STR(head[0]);
        ADD_STR("SYSLOG_IDENTIFIER=kvdistd\n");
        (void)snprintf(head[1], sizeof(head[1]), "CODE_FILE=%s\n", file ? file : "");
        ADD_STR(head[1]);
        (void)snprintf(head[2], sizeof(head[2]), "CODE_LINE=%d\n", line);
        ADD_STR(head[2]);
        (void)snprintf(head[3], sizeof(head[3]), "CODE_FUNC=%s\n", func ? func : "");
        ADD_STR(head[3]);
        if (error != 0) {
                (void)snprintf(errno_buf, sizeof(errno_buf), "ERRNO=%d\n", abs(error));
                ADD_STR(errno_buf);
        }
        if (fields && fields->has_cluster) {
                (void)snprintf(cluster, sizeof(cluster), "KVDIST_CLUSTER=%" PRIu64 "\n",
                               fields->cluster);
                ADD_STR(cluster);
        }
        if (fields && fields->has_link) {
                (void)snprintf(link, sizeof(link), "KVDIST_LINK=%" PRIu64 "\n", fields->link);
                ADD_STR(link);
        }
        if (fields && fields->peer && !strchr(fields->peer, '\n')) {
                (void)snprintf(peer, sizeof(peer), "KVDIST_PEER=%s\n", fields->peer);
                ADD_STR(peer);
        }
        /* MESSAGE in the binary-safe form: name, newline, little-endian length, data. */
        for (int i = 0; i < 8; i++)
                le[i] = (uint8_t)(mlen >> (8 * i));
        ADD_STR("MESSAGE\n");
        ADD(le, sizeof(le));
        ADD(message, mlen);
        ADD_STR("\n");
#undef ADD_STR
#undef ADD

        mh.msg_name = &sa;
        mh.msg_namelen = salen;
        mh.msg_iov = iov;
        mh.msg_iovlen = n;
        if (sendmsg(fd, &mh, MSG_NOSIGNAL) < 0)
                return -errno;
        return 0;
}
