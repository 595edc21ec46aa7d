/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for the rank-table parser: the input is a rank table (and, the same bytes, a
 * local_comm_res fragment) as kvd_domain_link() and kvd_client_init() pass them. A table that
 * parses must hold what rank-table.h promises; one that does not must say why. Built for libFuzzer,
 * or with fuzz-main.c to replay a corpus.
 */
#include <stdlib.h>
#include <string.h>

#include <kvdist/kvdist.h>

#include "common/macro.h"
#include "daemon/domain/rank-table.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x)                                                                                   \
        do {                                                                                       \
                if (!(x))                                                                          \
                        abort();                                                                   \
        } while (0)

/* A device as the parser promises it: an id, a canonical address that reads back the same. */
static void check_device(const RankDevice *d)
{
        char again[SOCKADDR_STR_MAX];

        CHECK(d->device_id >= 0);
        CHECK(d->server_id[0] && strlen(d->server_id) < RANK_TABLE_ID_MAX);
        CHECK(rank_table_parse_address(d->address, again, sizeof(again)) == 0);
        CHECK(strcmp(again, d->address) == 0);
        /* The device_ip as given, canonical, or "" when left out. */
        if (d->device_ip[0]) {
                CHECK(rank_table_parse_address(d->device_ip, again, sizeof(again)) == 0);
                CHECK(strcmp(again, d->device_ip) == 0);
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        _cleanup_free_ char *text = NULL;
        Error err = ERROR_INIT;
        RankDevice dev;
        RankTable t;
        int r;

        /* An exact-size NUL-terminated copy, so that reading past the end is an ASan report. */
        text = malloc(size + 1);
        CHECK(text);
        memcpy(text, data, size);
        text[size] = '\0';

        r = rank_table_parse(text, &t, &err);
        if (r == 0) {
                CHECK(t.n_ranks >= 1 && t.n_ranks <= RANK_TABLE_MAX_RANKS);
                CHECK(t.n_servers >= 1 && t.n_servers <= t.n_ranks);
                for (unsigned i = 0; i < t.n_ranks; i++) {
                        CHECK(t.ranks[i].rank == i);
                        check_device(&t.ranks[i]);
                        /* An address names one server's kvdistd; the devices of a server may
                         * each name it by their own address (devices[].address). */
                        for (unsigned k = 0; k < i; k++)
                                CHECK(strcmp(t.ranks[k].address, t.ranks[i].address) != 0 ||
                                      strcmp(t.ranks[k].server_id, t.ranks[i].server_id) == 0);
                }
        } else {
                CHECK(r == STATUS_PARAM_INVALID || r == STATUS_OUT_OF_MEMORY);
                CHECK(err.code == r && err.msg[0]);
        }

        error_clear(&err);
        r = rank_table_parse_fragment(text, &dev, &err);
        if (r == 0)
                check_device(&dev);
        else
                CHECK(err.code == r && err.msg[0]);
        return 0;
}
