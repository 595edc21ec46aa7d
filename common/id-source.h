/* SPDX-License-Identifier: MIT */
/*
 * IdSource: the daemon's ids (of regions, peers, links, transfers, connections, ...: unique for
 * the daemon's life, never 0) and the sequence numbers that order registrations against links.
 * One source serves every layer, so an id names one object whatever its kind. Cache ids are not
 * among them: each cluster numbers its own from 1, as LLM-DataDist does (cache_table_next_id()).
 */
#pragma once

#include <stdint.h>

typedef struct IdSource {
        uint64_t last_id;
        uint64_t last_seq;
} IdSource;

/* A new id. */
static inline uint64_t id_source_next(IdSource *s)
{
        return ++s->last_id;
}

/* The next registration/link sequence number. */
static inline uint64_t id_source_next_seq(IdSource *s)
{
        return ++s->last_seq;
}
