/* SPDX-License-Identifier: MIT */
/* User: per-uid accounting of what local clients hold, against limits.per_user. */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include "common/log.h"
#include "common/status.h"
#include "daemon/memory/user.h"

static const char *const slot_names[_USER_SLOT_MAX] = {
        [USER_SLOT_CONNECTIONS] = "connections", [USER_SLOT_CLUSTERS] = "clusters",
        [USER_SLOT_REGIONS] = "regions",         [USER_SLOT_REGION_BYTES] = "region_bytes",
        [USER_SLOT_INFLIGHT] = "inflight",       [USER_SLOT_NOTIFIES] = "notifies",
};

static const char *const slot_keys[_USER_SLOT_MAX] = {
        [USER_SLOT_CONNECTIONS] = "max_connections", [USER_SLOT_CLUSTERS] = "max_clusters",
        [USER_SLOT_REGIONS] = "max_regions",         [USER_SLOT_REGION_BYTES] = "max_region_bytes",
        [USER_SLOT_INFLIGHT] = "max_inflight",       [USER_SLOT_NOTIFIES] = "max_notifies",
};

const char *user_slot_to_string(UserSlot slot)
{
        return slot >= 0 && slot < _USER_SLOT_MAX ? slot_names[slot] : NULL;
}

const char *user_slot_limit_key(UserSlot slot)
{
        return slot >= 0 && slot < _USER_SLOT_MAX ? slot_keys[slot] : NULL;
}

void user_registry_init(UserRegistry *reg, const Limits *limits)
{
        *reg = (UserRegistry){.limits = limits};
        clist_init(&reg->users);
}

void user_registry_deinit(UserRegistry *reg)
{
        User *u, *tmp;

        if (!reg->users.next)
                return;
        CLIST_FOREACH_SAFE (u, tmp, &reg->users, link_registry) {
                clist_unlink(&u->link_registry);
                free(u);
        }
        reg->n_users = 0;
}

User *user_registry_find(const UserRegistry *reg, uid_t uid)
{
        User *u;

        CLIST_FOREACH (u, &reg->users, link_registry)
                if (u->uid == uid)
                        return u;
        return NULL;
}

int user_registry_ref(UserRegistry *reg, uid_t uid, User **ret)
{
        User *u = user_registry_find(reg, uid);

        if (!u) {
                u = calloc(1, sizeof(*u));
                if (!u)
                        return -ENOMEM;
                u->registry = reg;
                u->uid = uid;
                clist_link_tail(&reg->users, &u->link_registry);
                reg->n_users++;
        }
        u->n_refs++;
        *ret = u;
        return 0;
}

User *user_ref(User *u)
{
        if (u)
                u->n_refs++;
        return u;
}

User *user_unref(User *u)
{
        if (!u)
                return NULL;
        assert(u->n_refs > 0);
        if (--u->n_refs > 0)
                return NULL;
        for (size_t i = 0; i < _USER_SLOT_MAX; i++)
                assert(u->used[i] == 0);
        clist_unlink(&u->link_registry);
        u->registry->n_users--;
        free(u);
        return NULL;
}

uint64_t user_slot_limit(const UserRegistry *reg, UserSlot slot)
{
        const UserLimits *l = &reg->limits->per_user;

        switch (slot) {
        case USER_SLOT_CONNECTIONS:
                return l->max_connections;
        case USER_SLOT_CLUSTERS:
                return l->max_clusters;
        case USER_SLOT_REGIONS:
                return l->max_regions;
        case USER_SLOT_REGION_BYTES:
                return l->max_region_bytes;
        case USER_SLOT_INFLIGHT:
                return l->max_inflight;
        case USER_SLOT_NOTIFIES:
                return l->max_notifies;
        default:
                return 0;
        }
}

int user_check(User *u, UserSlot slot, uint64_t amount, Error *err)
{
        uint64_t limit, after;

        if (!u)
                return 0;
        limit = user_slot_limit(u->registry, slot);
        if (!ADD_OVERFLOW(u->used[slot], amount, &after) && after <= limit)
                return 0;

        u->refused[slot]++;
        u->registry->refused[slot]++;
        /* One line per episode: a flood of refusals must not flood the log too. */
        if (!u->logged[slot]) {
                u->logged[slot] = true;
                log_warning("uid %u: refused %" PRIu64 " more %s, it holds %" PRIu64 " of %" PRIu64
                            " (limits.per_user.%s); further refusals are counted "
                            "until it is back under",
                            (unsigned)u->uid, amount, slot_names[slot], u->used[slot], limit,
                            slot_keys[slot]);
        } else
                log_debug("uid %u: refused %" PRIu64 " more %s (limits.per_user.%s)",
                          (unsigned)u->uid, amount, slot_names[slot], slot_keys[slot]);
        return error_set(err, STATUS_LIMIT_EXCEEDED,
                         "uid %u holds %" PRIu64 " of its %" PRIu64 " %s, %" PRIu64
                         " more refused (limits.per_user.%s)",
                         (unsigned)u->uid, u->used[slot], limit, slot_names[slot], amount,
                         slot_keys[slot]);
}

int user_charge(User *u, UserSlot slot, uint64_t amount, Error *err)
{
        int r;

        r = user_check(u, slot, amount, err);
        if (r < 0)
                return r;
        user_charge_force(u, slot, amount);
        return 0;
}

void user_charge_force(User *u, UserSlot slot, uint64_t amount)
{
        if (u)
                u->used[slot] += amount;
}

void user_uncharge(User *u, UserSlot slot, uint64_t amount)
{
        if (!u)
                return;
        assert(u->used[slot] >= amount);
        u->used[slot] -= amount;
        if (u->logged[slot] && u->used[slot] < user_slot_limit(u->registry, slot))
                u->logged[slot] = false;
}
