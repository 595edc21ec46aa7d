/* SPDX-License-Identifier: MIT */
/* Comm domains: the registry, a domain's life and state, set-up slots, failures. */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include "daemon/link/cluster.h"
#include "daemon/link/link-root.h"
#include "daemon/domain/domain-internal.h"
#include "daemon/link/link-events.h"
#include "common/log.h"
#include "daemon/link/peer.h"
#include "proto/status-wire.h"
#include "common/status.h"

const char *domain_state_to_string(DomainState s)
{
        static const char *const names[_DOMAIN_STATE_MAX] = {
                [DOMAIN_PREPARING] = "preparing",
                [DOMAIN_OK] = "ok",
                [DOMAIN_FAILED] = "failed",
        };

        return s >= 0 && s < _DOMAIN_STATE_MAX ? names[s] : "invalid";
}

const char *domain_name(const Domain *dom, char *buf, size_t size)
{
        (void)snprintf(buf, size, "comm domain %" PRIu64 " (%s)", dom->id, dom->name);
        return buf;
}

static void domain_set_state(Domain *dom, DomainState state)
{
        assert(state >= 0 && state < _DOMAIN_STATE_MAX);
        /* PREPARING -> OK -> FAILED, or PREPARING -> FAILED; never back. */
        assert(state > dom->state);
        dom->state = state;
}

static void domain_on_drain(evutil_socket_t fd, short what, void *userdata)
{
        domain_call_drain(userdata);
}

static void domain_on_cluster_gone(void *userdata, Cluster *c)
{
        domain_cluster_gone(userdata, c);
}

static int domain_on_explain_no_link(void *userdata, Cluster *c, uint64_t remote_cluster_id,
                                     Error *err)
{
        return domain_explain_no_link(userdata, c, remote_cluster_id, err);
}

static bool domain_on_linking(void *userdata, const Cluster *c, uint64_t remote_cluster_id)
{
        return domain_pair_link_in_progress(userdata, c, remote_cluster_id);
}

/* After the peer's channels went: a pair link that held one finds it gone. */
static void domain_on_peer_flushed(void *userdata, Peer *p, int status)
{
        domain_on_peer_lost(userdata, p, status);
}

/* A link a domain may use went down or away, or an inbound one went. */
static void domain_on_link_down(void *userdata, Link *l, int status)
{
        domain_link_gone(userdata, l->id, status, l->local->id, l->remote_cluster_id);
}

static void domain_on_inlink_gone(void *userdata, InLink *il, int status)
{
        domain_link_gone(userdata, il->id, status, il->remote_cluster_id, il->local->id);
}

/* What domain/ hears from link/. */
static const LinkEvents domain_link_events = {
        .cluster_gone = domain_on_cluster_gone,
        .link_down = domain_on_link_down,
        .inlink_gone = domain_on_inlink_gone,
        .explain_no_link = domain_on_explain_no_link,
        .linking = domain_on_linking,
        .peer_flushed = domain_on_peer_flushed,
};

int domain_registry_new(const DomainRoots *roots, DomainRegistry **ret)
{
        DomainRegistry *reg = calloc(1, sizeof(*reg));

        if (!reg)
                return -ENOMEM;
        reg->roots = *roots;
        reg->peer = &domain_codec_ops;
        clist_init(&reg->domains);
        clist_init(&reg->queue);
        clist_init(&reg->pair_links);
        clist_init(&reg->local_res);
        clist_init(&reg->done);
        reg->drain = event_new(roots->link->base, -1, 0, domain_on_drain, reg);
        if (!reg->drain) {
                free(reg);
                return -ENOMEM;
        }
        link_events_listen(roots->link, &reg->link_hook, &domain_link_events, reg);
        domain_codec_register(reg);
        *ret = reg;
        return 0;
}

static void domain_pump(DomainRegistry *reg);

static void domain_free(Domain *dom)
{
        domain_lanes_free(dom);
        free(dom);
}

void domain_ref(Domain *dom)
{
        dom->refs++;
}

void domain_unref(Domain *dom)
{
        assert(dom->refs > 0);
        if (--dom->refs == 0 && dom->removed)
                domain_free(dom);
}

/* Takes @dom off the registry; it is freed once nothing refers to it. */
static void domain_remove(Domain *dom)
{
        DomainRegistry *reg = dom->reg;

        if (dom->removed)
                return;
        /* Removed first: releasing then cancels every waiter, whatever the state. */
        dom->removed = true;
        for (uint32_t r = 0; r < dom->n_ranks; r++)
                if (dom->ranks[r].local)
                        domain_join_release(dom, r);
        if (dom->setup == SETUP_QUEUED) {
                clist_unlink(&dom->link_queue);
                reg->n_queued--;
        } else if (dom->setup == SETUP_ACTIVE)
                reg->n_active--;
        dom->setup = SETUP_NONE;
        if (dom->deadline)
                event_free(dom->deadline);
        if (dom->tick)
                event_free(dom->tick);
        dom->deadline = dom->tick = NULL;
        clist_unlink(&dom->link_reg);
        reg->n_domains--;
        log_info("%s: removed", DOMAIN_NAME(dom));
        domain_pump(reg);
        domain_registry_changed(dom->reg);
        domain_unref(dom);
}

DomainRegistry *domain_registry_free(DomainRegistry *reg)
{
        Domain *dom, *tmp;
        LocalRes *lr, *ltmp;

        if (!reg)
                return NULL;
        /* The loop runs no more: what the data planes and the copy engine completed last is
         * told here, then every call still running stops. */
        domain_call_drain(reg);
        CLIST_FOREACH_SAFE (dom, tmp, &reg->domains, link_reg) {
                domain_calls_fail(dom, STATUS_DAEMON_UNAVAILABLE, "kvdistd is stopping");
                domain_remove(dom);
        }
        domain_call_drain(reg);
        CLIST_FOREACH_SAFE (lr, ltmp, &reg->local_res, link) {
                clist_unlink(&lr->link);
                free(lr);
        }
        /* Pair links die with their domains; calls with the data planes before us. */
        assert(clist_is_empty(&reg->pair_links));
        assert(reg->n_calls == 0);
        event_free(reg->drain);
        hook_remove(&reg->link_hook);
        free(reg);
        return NULL;
}

Domain *domain_find_id(DomainRegistry *reg, uint64_t id)
{
        Domain *dom;

        CLIST_FOREACH (dom, &reg->domains, link_reg)
                if (dom->id == id)
                        return dom;
        return NULL;
}

Domain *domain_find_name(DomainRegistry *reg, const char *name)
{
        Domain *dom;

        /* A failed domain a new one replaced keeps its name only for its members' comm_id. */
        CLIST_FOREACH (dom, &reg->domains, link_reg)
                if (!dom->replaced && strcmp(dom->name, name) == 0)
                        return dom;
        return NULL;
}

Peer *domain_rank_peer(Domain *dom, uint32_t rank)
{
        DomainRank *r = &dom->ranks[rank];
        Peer *p;

        if (r->local)
                return NULL;
        if (r->peer && r->peer->state == PEER_READY && !r->peer->retiring)
                return r->peer;
        /* Two daemons that dialed each other at once keep one connection for new work. */
        if (r->node_id)
                CLIST_FOREACH (p, &dom->reg->roots.link->peers, link_daemon)
                        if (p->state == PEER_READY && !p->retiring && p->node_id == r->node_id) {
                                r->peer = p;
                                return p;
                        }
        return r->peer && r->peer->state == PEER_READY ? r->peer : NULL;
}

/* Whether a slot-holding set-up still has something to reach out for. */
static bool domain_needs_setup(const Domain *dom)
{
        if (dom->state != DOMAIN_PREPARING || dom->removed)
                return false;
        for (uint32_t r = 0; r < dom->n_ranks; r++)
                if (!dom->ranks[r].local)
                        return true;
        return false;
}

static void domain_on_tick(evutil_socket_t fd, short what, void *userdata)
{
        domain_join_tick(userdata);
}

/* Hands free slots to queued set-ups, oldest first. */
static void domain_pump(DomainRegistry *reg)
{
        while (reg->n_active < DOMAIN_SETUPS_MAX && !clist_is_empty(&reg->queue)) {
                Domain *dom = clist_first_entry(&reg->queue, Domain, link_queue);

                clist_unlink(&dom->link_queue);
                reg->n_queued--;
                dom->setup = SETUP_ACTIVE;
                reg->n_active++;
                log_debug("%s: set-up starts (%u in progress, %u queued)", DOMAIN_NAME(dom),
                          reg->n_active, reg->n_queued);
                domain_join_tick(dom);
        }
}

void domain_setup_update(Domain *dom)
{
        DomainRegistry *reg = dom->reg;

        if (!domain_needs_setup(dom)) {
                if (dom->setup == SETUP_QUEUED) {
                        clist_unlink(&dom->link_queue);
                        reg->n_queued--;
                } else if (dom->setup == SETUP_ACTIVE)
                        reg->n_active--;
                if (dom->tick)
                        event_del(dom->tick);
                dom->setup = SETUP_NONE;
        } else if (dom->setup == SETUP_NONE) {
                dom->setup = SETUP_QUEUED;
                clist_link_tail(&reg->queue, &dom->link_queue);
                reg->n_queued++;
                if (reg->n_active >= DOMAIN_SETUPS_MAX)
                        log_debug("%s: set-up queued at position %u (%d in progress)",
                                  DOMAIN_NAME(dom), reg->n_queued, DOMAIN_SETUPS_MAX);
        }
        domain_pump(reg);
}

int domain_new(DomainRegistry *reg, Domain **ret)
{
        Domain *dom = calloc(1, sizeof(*dom));

        if (!dom)
                return -ENOMEM;
        dom->reg = reg;
        dom->id = id_source_next(reg->roots.link->ids);
        dom->state = DOMAIN_PREPARING;
        dom->created_usec = now_usec(CLOCK_MONOTONIC);
        dom->refs = 1; /* the registry's */
        clist_init(&dom->calls);
        clist_init(&dom->link_queue);
        clist_link_tail(&reg->domains, &dom->link_reg);
        reg->n_domains++;
        *ret = dom;
        return 0;
}

/* Whether member @o called link, as far as this daemon knows. */
static bool rank_called_link(const Domain *dom, uint32_t o)
{
        const DomainRank *r = &dom->ranks[o];

        if (r->local)
                return r->joined || r->left;
        for (uint32_t m = 0; m < dom->n_ranks; m++)
                if (dom->ranks[m].local && dom->ranks[m].pairs[o].joined)
                        return true;
        return false;
}

/* Names the members that kept the domain from forming, for the timeout's reason: those that did
 * not call link, else those that did not finish linking. */
static void domain_format_missing(const Domain *dom, char *buf, size_t size)
{
        size_t len = 0;

        buf[0] = '\0';
        for (int pass = 0; pass < 2 && len == 0; pass++)
                for (uint32_t o = 0; o < dom->n_ranks && len < size; o++) {
                        const DomainRank *r = &dom->ranks[o];

                        if (r->ready || rank_called_link(dom, o) != (pass == 1))
                                continue;
                        len += (size_t)snprintf(buf + len, size - len,
                                                "%srank %" PRIu32 " (cluster %" PRIu64 " at %s) %s",
                                                len ? "; " : "", o, r->cluster_id, r->address,
                                                pass == 0 ? "did not call link"
                                                          : "did not finish linking");
                }
}

static void domain_on_deadline(evutil_socket_t fd, short what, void *userdata)
{
        Domain *dom = userdata;
        char missing[ERROR_MSG_MAX];

        domain_format_missing(dom, missing, sizeof(missing));
        domain_fail(dom, STATUS_TIMEOUT, false,
                    "not formed within link_total_time (%" PRIu32 " ms): %s",
                    *dom->reg->roots.link_total_time_ms, missing);
}

int domain_start(Domain *dom)
{
        uint32_t ms = *dom->reg->roots.link_total_time_ms;
        struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
        int r;

        r = domain_lanes_new(dom);
        if (r < 0)
                return r;
        dom->deadline = evtimer_new(dom->reg->roots.link->base, domain_on_deadline, dom);
        dom->tick = evtimer_new(dom->reg->roots.link->base, domain_on_tick, dom);
        if (!dom->deadline || !dom->tick || evtimer_add(dom->deadline, &tv) < 0)
                return -ENOMEM;
        if (dom->reg->n_domains > DOMAIN_WARN)
                log_warning("%s: %u comm domains on this daemon; more than %d risks running out "
                            "of memory and slows transfers down (at most %d)",
                            DOMAIN_NAME(dom), dom->reg->n_domains, DOMAIN_WARN, DOMAIN_MAX);
        domain_setup_update(dom);
        domain_registry_changed(dom->reg);
        return 0;
}

void domain_fail(Domain *dom, int code, bool quiet, const char *fmt, ...)
{
        va_list ap;

        if (dom->state == DOMAIN_FAILED || dom->removed)
                return;
        domain_set_state(dom, DOMAIN_FAILED);
        dom->fail_code = status_is_valid(code) && code != STATUS_OK ? code : STATUS_FAILED;
        va_start(ap, fmt);
        (void)vsnprintf(dom->reason, sizeof(dom->reason), fmt, ap);
        va_end(ap);
        dom->reg->failed++;
        log_warning("%s: failed (%s): %s", DOMAIN_NAME(dom), status_wire_name(dom->fail_code),
                    dom->reason);
        if (dom->deadline)
                event_del(dom->deadline);
        domain_calls_fail(dom, dom->fail_code, dom->reason);
        for (uint32_t r = 0; r < dom->n_ranks; r++) {
                if (!dom->ranks[r].local)
                        continue;
                if (!quiet && dom->ranks[r].joined)
                        domain_send_leave(dom, r, dom->fail_code, dom->reason);
                domain_join_release(dom, r);
        }
        domain_setup_update(dom);
        domain_registry_changed(dom->reg);
}

void domain_check_ok(Domain *dom)
{
        usec_t now = now_usec(CLOCK_MONOTONIC);
        unsigned n = dom->n_ranks;

        if (dom->state != DOMAIN_PREPARING || dom->removed)
                return;
        for (uint32_t r = 0; r < n; r++)
                if (!dom->ranks[r].ready)
                        return;
        domain_make_links(dom);
        if (dom->state != DOMAIN_PREPARING)
                return;
        domain_lanes_set_transport(dom);
        domain_set_state(dom, DOMAIN_OK);
        dom->ok_usec = now;
        dom->reg->formed++;
        if (dom->deadline)
                event_del(dom->deadline);
        /* The seed's resources per rank: ring 2 threads, 4 notifies, 2 channels; mesh n-1,
         * 2(n-1), n-1. Lanes to and from every other rank carry both. */
        log_info("%s: OK after %" PRIu64 " ms, %u members; resources per rank: ring 2 threads, "
                 "4 notifies, 2 channels; mesh %u threads, %u notifies, %u channels",
                 DOMAIN_NAME(dom), (now - dom->created_usec) / USEC_PER_MSEC, n, n - 1, 2 * (n - 1),
                 n - 1);
        domain_setup_update(dom);
        domain_registry_changed(dom->reg);
}

void domain_member_leave(Domain *dom, uint32_t rank, int code, const char *why)
{
        DomainRank *r = &dom->ranks[rank];
        bool any = false;

        if (!r->local || !r->joined)
                return;
        domain_fail(dom, code, false, "rank %" PRIu32 " (cluster %" PRIu64 ") %s", rank,
                    r->cluster_id, why);
        domain_join_release(dom, rank);
        r->joined = false;
        r->left = true;
        r->cluster = NULL;
        for (uint32_t o = 0; o < dom->n_ranks; o++)
                any = any || (dom->ranks[o].local && dom->ranks[o].joined);
        if (!any)
                domain_remove(dom);
}

void domain_registry_changed(DomainRegistry *reg)
{
        if (reg->roots.changed)
                reg->roots.changed(reg->roots.userdata);
}

void domain_registry_call_ended(DomainRegistry *reg)
{
        if (reg->roots.call_ended)
                reg->roots.call_ended(reg->roots.userdata);
}

void domain_registry_count_error(DomainRegistry *reg, int status)
{
        if (reg->roots.count_error)
                reg->roots.count_error(reg->roots.userdata, status);
}

/* ---- what the rest of the daemon calls ---- */

void domain_stop_all(DomainRegistry *reg)
{
        Domain *dom;

        if (!reg)
                return;
        CLIST_FOREACH (dom, &reg->domains, link_reg)
                domain_calls_fail(dom, STATUS_DAEMON_UNAVAILABLE, "kvdistd is stopping");
}

unsigned domain_calls_in_flight(const DomainRegistry *reg)
{
        return reg ? reg->n_calls : 0;
}

void domain_cluster_gone(DomainRegistry *reg, Cluster *c)
{
        Domain *dom, *tmp;
        LocalRes *lr, *ltmp;

        if (!reg)
                return;
        CLIST_FOREACH_SAFE (dom, tmp, &reg->domains, link_reg)
                for (uint32_t r = 0; r < dom->n_ranks; r++)
                        if (dom->ranks[r].local && dom->ranks[r].cluster == c) {
                                domain_member_leave(dom, r, STATUS_PEER_LOST, "detached");
                                break;
                        }
        CLIST_FOREACH_SAFE (lr, ltmp, &reg->local_res, link)
                if (lr->cluster_id == c->id) {
                        clist_unlink(&lr->link);
                        free(lr);
                }
}

void domain_on_peer_lost(DomainRegistry *reg, Peer *p, int status)
{
        char why[ERROR_MSG_MAX];
        Domain *dom, *tmp;
        PairLink *pl;

        if (!reg)
                return;
        (void)snprintf(why, sizeof(why), "%s",
                       status == STATUS_DAEMON_UNAVAILABLE ? "kvdistd is stopping"
                                                           : "the connection to it was lost");
        CLIST_FOREACH (pl, &reg->pair_links, link_reg)
                if (pl->peer == p) {
                        pl->peer = NULL;
                        /* Its channel went with it. */
                        pl->channel = NULL;
                        if (pl->state == PAIR_LINK_HELD || pl->state == PAIR_LINK_CONNECTING) {
                                link_transport_cancel(&pl->transport);
                                error_set(&pl->err, STATUS_PEER_LOST,
                                          "the daemon of cluster %" PRIu64 " was lost",
                                          pl->remote_cluster_id);
                                pl->state = PAIR_LINK_FAILED;
                        }
                }
        CLIST_FOREACH_SAFE (dom, tmp, &reg->domains, link_reg) {
                domain_lanes_peer_lost(dom, p);
                domain_join_peer_lost(dom, p, status, why);
        }
}

void domain_link_gone(DomainRegistry *reg, uint64_t link_id, int status, uint64_t a, uint64_t b)
{
        char why[ERROR_MSG_MAX];
        Domain *dom, *tmp;
        PairLink *pl;
        bool any = false;

        /* A lost peer or cluster fails the domains on its own path, saying so. */
        if (!reg || status != STATUS_NOT_YET_LINK)
                return;
        (void)snprintf(why, sizeof(why),
                       "link %" PRIu64 " (cluster %" PRIu64 " -> %" PRIu64 ") was unlinked",
                       link_id, a, b);
        /* Failed first: releasing them then frees nothing of the link being freed. */
        CLIST_FOREACH (pl, &reg->pair_links, link_reg)
                if (pl->state == PAIR_LINK_MADE && pl->link_id == link_id) {
                        pl->state = PAIR_LINK_FAILED;
                        pl->owned = false;
                        error_set(&pl->err, STATUS_LINK_FAILED, "%s", why);
                        any = true;
                }
        if (!any)
                return;
        CLIST_FOREACH_SAFE (dom, tmp, &reg->domains, link_reg) {
                bool uses = false;

                if (dom->state == DOMAIN_FAILED || dom->removed)
                        continue;
                for (uint32_t m = 0; m < dom->n_ranks && !uses; m++)
                        for (uint32_t o = 0; o < dom->n_ranks; o++) {
                                const PairLink *x = dom->ranks[m].pairs[o].pl;

                                uses = uses ||
                                       (x && x->state == PAIR_LINK_FAILED && x->link_id == link_id);
                        }
                if (uses)
                        domain_fail(dom, STATUS_LINK_FAILED, false, "%s", why);
        }
}

bool domain_cluster_has_domains(const DomainRegistry *reg, const Cluster *c)
{
        Domain *dom;

        if (!reg)
                return false;
        CLIST_FOREACH (dom, &reg->domains, link_reg)
                for (uint32_t r = 0; r < dom->n_ranks; r++)
                        if (dom->ranks[r].local && dom->ranks[r].joined &&
                            dom->ranks[r].cluster == c)
                                return true;
        return false;
}

bool domain_pair_link_in_progress(DomainRegistry *reg, const Cluster *c, uint64_t remote_cluster_id)
{
        PairLink *pl;

        if (!reg)
                return false;
        pl = domain_pair_link_find(reg, c->id, remote_cluster_id);
        return pl && (pl->state == PAIR_LINK_REQUESTING || pl->state == PAIR_LINK_CONNECTING ||
                      pl->state == PAIR_LINK_HELD);
}

/* Member @c's domain that has @remote_cluster_id as another member, PREPARING ones first. */
static Domain *domain_of_pair(DomainRegistry *reg, const Cluster *c, uint64_t remote_cluster_id)
{
        Domain *dom, *found = NULL;

        CLIST_FOREACH (dom, &reg->domains, link_reg) {
                bool member = false, other = false;

                for (uint32_t r = 0; r < dom->n_ranks; r++) {
                        member = member || (dom->ranks[r].local && dom->ranks[r].joined &&
                                            dom->ranks[r].cluster == c);
                        other = other || (dom->ranks[r].cluster_id == remote_cluster_id &&
                                          remote_cluster_id != c->id);
                }
                if (!member || !other || dom->state == DOMAIN_OK)
                        continue;
                if (dom->state == DOMAIN_PREPARING)
                        return dom;
                found = found ?: dom;
        }
        return found;
}

int domain_explain_no_link(DomainRegistry *reg, const Cluster *c, uint64_t remote_cluster_id,
                           Error *err)
{
        Domain *dom;

        if (!reg)
                return 0;
        dom = domain_of_pair(reg, c, remote_cluster_id);
        if (!dom)
                return 0;
        if (dom->state == DOMAIN_PREPARING)
                return error_set(err, STATUS_NOT_YET_LINK,
                                 "cluster %" PRIu64 " has no link to "
                                 "cluster %" PRIu64 " yet: %s is not ready (PREPARING); its "
                                 "links are made once kvd_domain_status() says OK",
                                 c->id, remote_cluster_id, DOMAIN_NAME(dom));
        return error_set(err, STATUS_NOT_YET_LINK,
                         "cluster %" PRIu64 " has no link to cluster %" PRIu64
                         ": %s failed (%s); kvd_domain_unlink() it and link again",
                         c->id, remote_cluster_id, DOMAIN_NAME(dom), dom->reason);
}

/* ---- local_comm_res ---- */

/* Whether @ip_port (canonical) is where this daemon listens for peers: its listen_ip_info or the
 * address of one of its devices (devices[].address). */
bool domain_address_is_ours(LinkRoot *link, const char *ip_port)
{
        const char *ours = link_root_peer_address(link);
        struct sockaddr_storage a, b;
        struct ifaddrs *ifs = NULL, *i;
        socklen_t alen, blen;
        bool found = false;

        if (!ours[0])
                return false;
        if (strcmp(ours, ip_port) == 0 || link_root_find_device_address(link, ip_port))
                return true;
        if (sockaddr_parse(ours, 0, &a, &alen) < 0 || sockaddr_parse(ip_port, 0, &b, &blen) < 0 ||
            a.ss_family != b.ss_family)
                return false;
        /* A wildcard listener: any address of this host with its port. */
        if (a.ss_family == AF_INET) {
                const struct sockaddr_in *la = (const void *)&a, *lb = (const void *)&b;

                if (la->sin_addr.s_addr != htonl(INADDR_ANY) || la->sin_port != lb->sin_port)
                        return false;
                if ((ntohl(lb->sin_addr.s_addr) >> 24) == 127)
                        return true;
        } else {
                const struct sockaddr_in6 *la = (const void *)&a, *lb = (const void *)&b;

                if (!IN6_IS_ADDR_UNSPECIFIED(&la->sin6_addr) || la->sin6_port != lb->sin6_port)
                        return false;
                if (IN6_IS_ADDR_LOOPBACK(&lb->sin6_addr))
                        return true;
        }
        if (getifaddrs(&ifs) < 0)
                return false;
        for (i = ifs; i && !found; i = i->ifa_next) {
                if (!i->ifa_addr || i->ifa_addr->sa_family != b.ss_family)
                        continue;
                if (b.ss_family == AF_INET)
                        found = ((const struct sockaddr_in *)(const void *)i->ifa_addr)
                                        ->sin_addr.s_addr ==
                                ((const struct sockaddr_in *)(const void *)&b)->sin_addr.s_addr;
                else
                        found = memcmp(&((const struct sockaddr_in6 *)(const void *)i->ifa_addr)
                                                ->sin6_addr,
                                       &((const struct sockaddr_in6 *)(const void *)&b)->sin6_addr,
                                       sizeof(struct in6_addr)) == 0;
        }
        freeifaddrs(ifs);
        return found;
}

int domain_cluster_attach(DomainRegistry *reg, Cluster *c, const char *local_comm_res, Error *err)
{
        LocalRes *lr;
        int r;

        if (!local_comm_res || !local_comm_res[0] || !reg)
                return 0;
        lr = calloc(1, sizeof(*lr));
        if (!lr)
                return error_set(err, STATUS_OUT_OF_MEMORY, "out of memory");
        r = rank_table_parse_fragment(local_comm_res, &lr->dev, err);
        if (r < 0) {
                free(lr);
                return r;
        }
        if (lr->dev.device_id != c->device_id) {
                r = error_set(err, STATUS_PARAM_INVALID,
                              "local_comm_res: device_id %" PRId32
                              " is not this client's device_id %" PRId32,
                              lr->dev.device_id, c->device_id);
                free(lr);
                return r;
        }
        if (link_root_peer_address(c->root)[0] &&
            !domain_address_is_ours(c->root, lr->dev.address)) {
                r = error_set(err, STATUS_PARAM_INVALID,
                              "local_comm_res: %s %s is not "
                              "where this kvdistd accepts peers (%s)",
                              lr->dev.address_key, lr->dev.address,
                              link_root_peer_address(c->root));
                free(lr);
                return r;
        }
        lr->cluster_id = c->id;
        lr->given = true;
        clist_link_tail(&reg->local_res, &lr->link);
        return 0;
}

void domain_local_res(DomainRegistry *reg, const Cluster *c, RankDevice *ret, bool *ret_given)
{
        LocalRes *lr;

        if (reg)
                CLIST_FOREACH (lr, &reg->local_res, link)
                        if (lr->cluster_id == c->id) {
                                *ret = lr->dev;
                                *ret_given = true;
                                return;
                        }
        *ret = (RankDevice){.device_id = c->device_id};
        (void)gethostname(ret->server_id, sizeof(ret->server_id) - 1);
        (void)snprintf(ret->address, sizeof(ret->address), "%s", link_root_peer_address(c->root));
        ret->address_key = "listen address";
        *ret_given = false;
}
