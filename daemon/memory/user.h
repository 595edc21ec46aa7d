/* SPDX-License-Identifier: MIT */
/*
 * User: what the clients of one local uid hold together, charged against "limits.per_user"
 * (after dbus-broker's user accounting). Connections, clusters, regions and their bytes,
 * transfers in flight and the push notifications a uid's pushes queued are each a slot. A
 * charge that would take a uid past its limit is refused with LIMIT_EXCEEDED naming the limit
 * and the uid, logged (once per slot until the uid is back under it) and counted; whatever the
 * others of that uid do, another uid's share stays free.
 *
 * A User lives while anything references it (a connection, a cluster, a transfer, a queued
 * notification). Every charge is released by whoever took it; a NULL User (a cluster that no
 * client attached, as in unit tests) charges nothing.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/clist.h"
#include "common/error.h"
#include "common/limits.h"

typedef enum UserSlot {
        USER_SLOT_CONNECTIONS,
        USER_SLOT_CLUSTERS,
        USER_SLOT_REGIONS,
        USER_SLOT_REGION_BYTES,
        USER_SLOT_INFLIGHT,
        USER_SLOT_NOTIFIES,
        _USER_SLOT_MAX,
        _USER_SLOT_INVALID = -22,
} UserSlot;

typedef struct UserRegistry {
        const Limits *limits; /* limits.per_user, read at each charge (a reload changes it) */
        CList users;          /* User.link_registry */
        unsigned n_users;
        uint64_t refused[_USER_SLOT_MAX]; /* charges refused, of every uid, ever */
} UserRegistry;

typedef struct User {
        UserRegistry *registry;
        uid_t uid;
        unsigned n_refs;
        uint64_t used[_USER_SLOT_MAX];
        uint64_t refused[_USER_SLOT_MAX]; /* while this User lives */
        bool logged[_USER_SLOT_MAX];      /* a refusal was logged; again once back under */
        CList link_registry;
} User;

/* Sets up an empty registry reading its limits from @limits (kept, not owned). */
void user_registry_init(UserRegistry *reg, const Limits *limits);

/* Forgets the users still listed (a daemon's teardown); their holders must not use them. */
void user_registry_deinit(UserRegistry *reg);

/*
 * The User of @uid, created with nothing charged when there is none, with a reference the
 * caller owns. Returns 0 or -ENOMEM.
 */
int user_registry_ref(UserRegistry *reg, uid_t uid, User **ret);

/* The User of @uid or NULL; no reference is taken. */
User *user_registry_find(const UserRegistry *reg, uid_t uid);

/* Takes a reference. Accepts NULL; returns @u. */
User *user_ref(User *u);

/* Drops a reference; the last one frees the User (nothing may be charged then). Accepts NULL;
 * returns NULL. */
User *user_unref(User *u);
DEFINE_TRIVIAL_CLEANUP_FUNC(User, user_unref)

/* The limit of @slot for every uid (limits.per_user). */
uint64_t user_slot_limit(const UserRegistry *reg, UserSlot slot);

/*
 * Charges @amount of @slot to @u. When that would take @u past its limit nothing is charged:
 * returns STATUS_LIMIT_EXCEEDED with @err saying the limit, the uid and what it holds, and the
 * refusal is counted and logged. Accepts a NULL @u (charges nothing). Returns 0 otherwise.
 */
int user_charge(User *u, UserSlot slot, uint64_t amount, Error *err);

/* Charges @amount of @slot to @u whatever its limit (what is already there, as a notification
 * whose room was checked when its transfer began). Accepts NULL. */
void user_charge_force(User *u, UserSlot slot, uint64_t amount);

/* Whether @amount more of @slot fits @u's limit; as user_charge() but charging nothing. */
int user_check(User *u, UserSlot slot, uint64_t amount, Error *err);

/* Releases @amount of @slot that user_charge() charged to @u. Accepts NULL. */
void user_uncharge(User *u, UserSlot slot, uint64_t amount);

/* "connections", "clusters", "regions", "region_bytes", "inflight", "notifies". */
const char *user_slot_to_string(UserSlot slot);

/* The key of @slot's limit in limits.per_user ("max_connections", ...). */
const char *user_slot_limit_key(UserSlot slot);
