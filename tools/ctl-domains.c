/* SPDX-License-Identifier: MIT */
/* kvdistctl domains: members, state, algorithm and resources of each comm domain. */
#include <stdio.h>
#include <string.h>

#include "tools/ctl-domains.h"

const char *const domain_cols[N_DOMAIN_COLS] = {"ID",    "NAME",     "RANKS",     "MEMBERS",
                                                "STATE", "CHANNELS", "ALGORITHM", "RESOURCES/RANK",
                                                "CALLS", "SENT",     "RECEIVED",  "AGE"};

/* Room for a whole list before it is cut to a cell: four members with IPv6 addresses. */
#define LIST_MAX 512

/* "0:1001 1:2002@10.0.0.2:7400": rank, cluster, and where it is when not here. */
static void members_cell(const json_t *members, char *buf)
{
        char list[LIST_MAX] = "";
        size_t len = 0, i;
        json_t *m;

        json_array_foreach((json_t *)members, i, m)
        {
                json_t *local = json_object_get(m, "local");
                int n = snprintf(list + len, sizeof(list) - len, "%s%lld:%lld%s%s", i ? " " : "",
                                 (long long)json_integer_value(json_object_get(m, "rank")),
                                 (long long)json_integer_value(json_object_get(m, "cluster_id")),
                                 json_is_true(local) ? "" : "@",
                                 json_is_true(local)
                                         ? ""
                                         : json_string_value(json_object_get(m, "address")) ?: "?");

                if (n < 0 || (size_t)n >= sizeof(list) - len)
                        break;
                len += (size_t)n;
        }
        cell_printf(buf, "%s", list);
}

/* "1:rdma 2:shm": the transport of the channel to each other rank ("-" until it is decided). */
static void channels_cell(const json_t *channels, char *buf)
{
        char list[LIST_MAX] = "";
        size_t len = 0, i;
        json_t *c;

        json_array_foreach((json_t *)channels, i, c)
        {
                const char *tp = json_string_value(json_object_get(c, "transport"));
                int n = snprintf(list + len, sizeof(list) - len, "%s%lld:%s", i ? " " : "",
                                 (long long)json_integer_value(json_object_get(c, "rank")),
                                 tp ? tp : "-");

                if (n < 0 || (size_t)n >= sizeof(list) - len)
                        break;
                len += (size_t)n;
        }
        cell_printf(buf, "%s", list[0] ? list : "-");
}

void domain_row(const json_t *o, Table *t, size_t r)
{
        const json_t *res = json_object_get(o, "resources"), *local, *v;
        const json_t *ring = json_object_get(res, "ring"), *mesh = json_object_get(res, "mesh");
        char *state = table_cell(t, r, 4), *ranks = table_cell(t, r, 2);
        size_t len = 0, i;

        fmt_int(o, "comm_id", table_cell(t, r, 0));
        fmt_str(o, "comm_name", table_cell(t, r, 1));
        local = json_object_get(o, "local_ranks");
        ranks[0] = '\0';
        json_array_foreach((json_t *)local, i, v) len +=
                (size_t)snprintf(ranks + len, len < CELL_MAX ? CELL_MAX - len : 0, "%s%lld",
                                 i ? "," : "", (long long)json_integer_value(v));
        if (!ranks[0])
                snprintf(ranks, CELL_MAX, "-");
        (void)snprintf(table_cell(t, r, 2) + strlen(ranks), CELL_MAX - strlen(ranks), " of %lld",
                       (long long)json_integer_value(json_object_get(o, "ranks")));
        members_cell(json_object_get(o, "members"), table_cell(t, r, 3));
        fmt_str(o, "state", state);
        v = json_object_get(o, "setup");
        if (json_is_string(v) && strcmp(json_string_value(v), "queued") == 0)
                snprintf(state + strlen(state), CELL_MAX - strlen(state), " (queued #%lld)",
                         (long long)json_integer_value(json_object_get(o, "queue_position")));
        else if (json_is_string(json_object_get(o, "status")))
                snprintf(state + strlen(state), CELL_MAX - strlen(state), ": %.40s",
                         json_string_value(json_object_get(o, "reason")));
        channels_cell(json_object_get(o, "channels"), table_cell(t, r, 5));
        v = json_object_get(o, "last_algorithm");
        snprintf(table_cell(t, r, 6), CELL_MAX, "%s",
                 json_is_string(v) ? json_string_value(v) : "auto");
        /* threads/notifies/channels, per the seed's model of each algorithm. */
        snprintf(table_cell(t, r, 7), CELL_MAX, "ring %lld/%lld/%lld mesh %lld/%lld/%lld",
                 (long long)json_integer_value(json_object_get(ring, "threads")),
                 (long long)json_integer_value(json_object_get(ring, "notifies")),
                 (long long)json_integer_value(json_object_get(ring, "channels")),
                 (long long)json_integer_value(json_object_get(mesh, "threads")),
                 (long long)json_integer_value(json_object_get(mesh, "notifies")),
                 (long long)json_integer_value(json_object_get(mesh, "channels")));
        snprintf(table_cell(t, r, 8), CELL_MAX, "%lld ok, %lld failed",
                 (long long)json_integer_value(json_object_get(o, "calls_ok")),
                 (long long)json_integer_value(json_object_get(o, "calls_failed")));
        fmt_bytes(o, "bytes_sent", table_cell(t, r, 9));
        fmt_bytes(o, "bytes_received", table_cell(t, r, 10));
        fmt_age(o, "age_s", 1, table_cell(t, r, 11));
}
