/* SPDX-License-Identifier: MIT */
/* Integration test caches: pattern-filled caches, expected copies and byte-exact checks. */
#include <check.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "tests/integration/it-cache.h"
#include "common/macro.h"

static kvd_cache_desc tcache_desc(uint32_t num_tensors, uint64_t units, uint64_t unit_bytes)
{
        kvd_cache_desc desc = {0};

        ck_assert_msg(unit_bytes % 2 == 0, "unit_bytes %llu is odd",
                      (unsigned long long)unit_bytes);
        desc.num_tensors = num_tensors;
        desc.n_dims = 2;
        desc.shape[0] = (int64_t)units;
        desc.shape[1] = (int64_t)(unit_bytes / 2);
        desc.data_type = KVD_DT_FLOAT16;
        return desc;
}

uint64_t tcache_tensor_off(const TCache *tc, uint32_t t)
{
        if (tc->pool)
                return (uint64_t)t * tc->tensor_size;
        return TC_GUARD + (uint64_t)t * (tc->tensor_size + TC_GUARD);
}

size_t tcache_mem_size(uint32_t num_tensors, uint64_t units, uint64_t unit_bytes)
{
        return TC_GUARD + num_tensors * (units * unit_bytes + TC_GUARD);
}

int tcache_register_at(TCache *tc, kvd_client *c, uint8_t *mem, bool blocks, uint32_t num_tensors,
                       uint64_t units, uint64_t unit_bytes, uint64_t seed,
                       const kvd_cache_key *keys, size_t n_keys, kvd_remote_access access)
{
        kvd_cache_desc desc = tcache_desc(num_tensors, units, unit_bytes);
        int r;

        memset(tc, 0, sizeof(*tc));
        tc->client = c;
        tc->blocks = blocks;
        tc->num_tensors = num_tensors;
        tc->units = units;
        tc->stride = unit_bytes;
        tc->tensor_size = units * unit_bytes;
        tc->seed = seed;
        tc->mem_size = tcache_mem_size(num_tensors, units, unit_bytes);
        if (!mem) {
                void *p = NULL;

                r = kvd_mem_alloc(c, tc->mem_size, &p);
                ck_assert_msg(r == KVD_OK, "kvd_mem_alloc(%zu) = %s: %s", tc->mem_size,
                              kvd_strerror(r), kvd_last_error(c));
                mem = p;
        }
        tc->mem = mem;
        harness_fill_pattern(tc->mem, tc->mem_size, seed);
        for (uint32_t t = 0; t < num_tensors; t++)
                tc->addrs[t] = tc->mem + tcache_tensor_off(tc, t);

        tc->id = UINT64_MAX;
        if (blocks)
                r = kvd_register_blocks_cache(c, &desc, tc->addrs, num_tensors,
                                              n_keys ? keys : NULL, access, &tc->id);
        else
                r = kvd_register_cache(c, &desc, tc->addrs, num_tensors, keys, n_keys, access,
                                       &tc->id);
        return r;
}

int tcache_register(TCache *tc, kvd_client *c, bool blocks, uint32_t num_tensors, uint64_t units,
                    uint64_t unit_bytes, uint64_t seed, const kvd_cache_key *keys, size_t n_keys,
                    kvd_remote_access access)
{
        return tcache_register_at(tc, c, NULL, blocks, num_tensors, units, unit_bytes, seed, keys,
                                  n_keys, access);
}

/* kvd_allocate_cache() or kvd_allocate_blocks_cache() of a TCache, filled with its pattern. */
static int tcache_allocate_kind(TCache *tc, kvd_client *c, bool blocks, uint32_t num_tensors,
                                uint64_t units, uint64_t unit_bytes, uint64_t seed,
                                const kvd_cache_key *keys, size_t n_keys)
{
        kvd_cache_desc desc = tcache_desc(num_tensors, units, unit_bytes);
        int r;

        memset(tc, 0, sizeof(*tc));
        tc->client = c;
        tc->blocks = blocks;
        tc->pool = true;
        tc->num_tensors = num_tensors;
        tc->units = units;
        tc->stride = unit_bytes;
        tc->tensor_size = units * unit_bytes;
        tc->seed = seed;
        tc->id = UINT64_MAX;
        if (blocks)
                r = kvd_allocate_blocks_cache(c, &desc, n_keys ? keys : NULL, &tc->id, tc->addrs);
        else
                r = kvd_allocate_cache(c, &desc, keys, n_keys, &tc->id, tc->addrs);
        if (r < 0)
                return r;
        for (uint32_t t = 0; t < num_tensors; t++)
                harness_fill_pattern_at(tc->addrs[t], tc->tensor_size, seed,
                                        tcache_tensor_off(tc, t));
        return r;
}

int tcache_allocate(TCache *tc, kvd_client *c, uint32_t num_tensors, uint64_t batch,
                    uint64_t unit_bytes, uint64_t seed, const kvd_cache_key *keys, size_t n_keys)
{
        return tcache_allocate_kind(tc, c, false, num_tensors, batch, unit_bytes, seed, keys,
                                    n_keys);
}

int tcache_allocate_blocks(TCache *tc, kvd_client *c, uint32_t num_tensors, uint64_t num_blocks,
                           uint64_t block_bytes, uint64_t seed, const kvd_cache_key *blocks_key)
{
        return tcache_allocate_kind(tc, c, true, num_tensors, num_blocks, block_bytes, seed,
                                    blocks_key, blocks_key ? 1 : 0);
}

void tcopies_free(TCopies *cp)
{
        free(cp->v);
        *cp = (TCopies){};
}

static void tcopies_add(TCopies *cp, uint64_t dst, uint64_t src, uint64_t len, uint64_t seed)
{
        if (cp->n == cp->cap) {
                cp->cap = cp->cap ? cp->cap * 2 : 64;
                cp->v = realloc(cp->v, cp->cap * sizeof(*cp->v));
                if (!cp->v)
                        ck_abort_msg("out of memory");
        }
        cp->v[cp->n++] = (TCopy){dst, src, len, seed};
}

void tcache_layers(const TCache *tc, kvd_layer_range l, uint32_t tpl, uint32_t *first, uint32_t *n)
{
        tpl = tpl ? tpl : 2;
        if (l.count == 0) {
                *first = 0;
                *n = tc->num_tensors;
        } else {
                *first = l.first * tpl;
                *n = l.count * tpl;
        }
}

/* The tensor pairs a transfer touches. */
static uint32_t tensor_pairs(const TCache *src, const TCache *dst, kvd_layer_range sl,
                             kvd_layer_range dl, uint32_t tpl, uint32_t *sf, uint32_t *df)
{
        uint32_t sn, dn;

        tcache_layers(src, sl, tpl, sf, &sn);
        tcache_layers(dst, dl, tpl, df, &dn);
        ck_assert_uint_eq(sn, dn);
        return sn;
}

void tcopies_blocks_sliced(TCopies *cp, const TCache *src, const TCache *dst, kvd_slice ss,
                           kvd_slice ds, const uint64_t *sb, const uint64_t *db, size_t n)
{
        uint64_t len = ss.length ?: src->stride - ss.offset;

        ck_assert_uint_eq(src->num_tensors, dst->num_tensors);
        for (uint32_t t = 0; t < src->num_tensors; t++)
                for (size_t i = 0; i < n; i++)
                        tcopies_add(cp, tcache_tensor_off(dst, t) + db[i] * dst->stride + ds.offset,
                                    tcache_tensor_off(src, t) + sb[i] * src->stride + ss.offset,
                                    len, src->seed);
}

void tcopies_blocks(TCopies *cp, const TCache *src, const TCache *dst, kvd_layer_range sl,
                    kvd_layer_range dl, uint32_t tpl, const uint64_t *sb, const uint64_t *db,
                    size_t n)
{
        uint32_t sf, df, k = tensor_pairs(src, dst, sl, dl, tpl, &sf, &df);

        for (uint32_t t = 0; t < k; t++)
                for (size_t i = 0; i < n; i++)
                        tcopies_add(cp, tcache_tensor_off(dst, df + t) + db[i] * dst->stride,
                                    tcache_tensor_off(src, sf + t) + sb[i] * src->stride,
                                    src->stride, src->seed);
}

void tcopies_item(TCopies *cp, const TCache *src, const TCache *dst, kvd_layer_range sl,
                  kvd_layer_range dl, uint32_t tpl, uint64_t si, uint64_t di, int64_t size)
{
        uint32_t sf, df, k = tensor_pairs(src, dst, sl, dl, tpl, &sf, &df);
        uint64_t len = size < 0 ? src->stride : (uint64_t)size;

        for (uint32_t t = 0; t < k; t++)
                tcopies_add(cp, tcache_tensor_off(dst, df + t) + di * dst->stride,
                            tcache_tensor_off(src, sf + t) + si * src->stride, len, src->seed);
}

void tcopies_item_to_blocks(TCopies *cp, const TCache *src, const TCache *dst, kvd_layer_range sl,
                            kvd_layer_range dl, uint32_t tpl, uint64_t si, const uint64_t *db,
                            size_t n)
{
        uint32_t sf, df, k = tensor_pairs(src, dst, sl, dl, tpl, &sf, &df);

        for (uint32_t t = 0; t < k; t++)
                for (size_t i = 0; i < n; i++) {
                        uint64_t chunk = i * dst->stride;
                        uint64_t len = MIN(dst->stride, src->stride - chunk);

                        tcopies_add(cp, tcache_tensor_off(dst, df + t) + db[i] * dst->stride,
                                    tcache_tensor_off(src, sf + t) + si * src->stride + chunk, len,
                                    src->seed);
                }
}

static int tcopy_cmp(const void *a, const void *b)
{
        const TCopy *x = a, *y = b;

        return x->dst < y->dst ? -1 : x->dst > y->dst;
}

/* The spans of the cache's stream that are memory, with the bytes that hold them. */
typedef struct Span {
        uint64_t off;
        uint64_t len;
        const uint8_t *p;
} Span;

static size_t tcache_spans(const TCache *tc, Span *spans)
{
        if (!tc->pool) {
                spans[0] = (Span){0, tc->mem_size, tc->mem};
                return 1;
        }
        for (uint32_t t = 0; t < tc->num_tensors; t++)
                spans[t] = (Span){tcache_tensor_off(tc, t), tc->tensor_size, tc->addrs[t]};
        return tc->num_tensors;
}

/*
 * Checks [@off, @off + @len) of the stream: the cache's own pattern, or the copy's, or (@either)
 * runs of one or the other. Check's assertions record a location on every call, so the hot
 * loops test first and only abort.
 */
static void check_range(const TCache *tc, const Span *spans, size_t n_spans, uint64_t off,
                        uint64_t len, const TCopy *copy, bool either)
{
        for (size_t s = 0; s < n_spans && len > 0; s++) {
                const Span *sp = &spans[s];
                uint64_t a = MAX(off, sp->off), b = MIN(off + len, sp->off + sp->len);
                const uint8_t *p;
                uint64_t pos;
                ssize_t bad;

                if (a >= b)
                        continue;
                p = sp->p + (a - sp->off);
                if (!copy) {
                        bad = harness_check_pattern_at(p, b - a, tc->seed, a);
                        if (bad >= 0)
                                ck_abort_msg("cache %llu: byte %llu of the region (outside every "
                                             "copy) is 0x%02x, its own pattern says 0x%02x",
                                             (unsigned long long)tc->id,
                                             (unsigned long long)(a + (uint64_t)bad), p[bad],
                                             harness_pattern_byte(tc->seed, a + (uint64_t)bad));
                        continue;
                }
                bad = harness_check_pattern_at(p, b - a, copy->seed, copy->src + (a - copy->dst));
                if (bad < 0)
                        continue;
                if (!either)
                        ck_abort_msg("cache %llu: byte %llu of the region (copy from %llu, "
                                     "%llu bytes) is 0x%02x, want 0x%02x",
                                     (unsigned long long)tc->id,
                                     (unsigned long long)(a + (uint64_t)bad),
                                     (unsigned long long)copy->src, (unsigned long long)copy->len,
                                     p[bad],
                                     harness_pattern_byte(copy->seed, copy->src + (a - copy->dst) +
                                                                              (uint64_t)bad));
                /* Alternating runs of new and old bytes; a byte that is neither is garbage. */
                pos = (uint64_t)bad;
                for (;;) {
                        bad = harness_check_pattern_at(p + pos, b - a - pos, tc->seed, a + pos);
                        if (bad < 0)
                                break;
                        if (bad == 0)
                                ck_abort_msg(
                                        "cache %llu: byte %llu is 0x%02x, neither its old "
                                        "pattern (0x%02x) nor the copied one (0x%02x)",
                                        (unsigned long long)tc->id, (unsigned long long)(a + pos),
                                        p[pos], harness_pattern_byte(tc->seed, a + pos),
                                        harness_pattern_byte(copy->seed,
                                                             copy->src + (a - copy->dst) + pos));
                        pos += (uint64_t)bad;
                        bad = harness_check_pattern_at(p + pos, b - a - pos, copy->seed,
                                                       copy->src + (a - copy->dst) + pos);
                        if (bad < 0)
                                break;
                        pos += (uint64_t)bad;
                }
        }
}

static void verify(const TCache *tc, const TCopies *cp, bool either)
{
        Span spans[KVD_MAX_TENSORS];
        size_t n_spans = tcache_spans(tc, spans);
        uint64_t end = tc->pool ? tc->num_tensors * tc->tensor_size : tc->mem_size;
        uint64_t pos = 0;
        TCopy *sorted = NULL;
        size_t n = cp ? cp->n : 0;

        if (n > 0) {
                sorted = malloc(n * sizeof(*sorted));
                ck_assert(sorted);
                memcpy(sorted, cp->v, n * sizeof(*sorted));
                qsort(sorted, n, sizeof(*sorted), tcopy_cmp);
        }
        for (size_t i = 0; i < n; i++) {
                const TCopy *c = &sorted[i];

                /* The tests never expect two copies into one byte. */
                if (c->dst < pos || c->dst + c->len > end)
                        ck_abort_msg("test bug: expected copy to %llu overlaps another or ends "
                                     "past the cache",
                                     (unsigned long long)c->dst);
                check_range(tc, spans, n_spans, pos, c->dst - pos, NULL, false);
                check_range(tc, spans, n_spans, c->dst, c->len, c, either);
                pos = c->dst + c->len;
        }
        check_range(tc, spans, n_spans, pos, end - pos, NULL, false);
        free(sorted);
}

void tcache_verify(const TCache *tc, const TCopies *cp)
{
        verify(tc, cp, false);
}

void tcache_verify_untouched(const TCache *tc)
{
        verify(tc, NULL, false);
}

void tcache_verify_old_or_new(const TCache *tc, const TCopies *cp)
{
        verify(tc, cp, true);
}

void expect_status_at(kvd_client *c, int r, int want, const char *substr, const char *what,
                      const char *file, int line)
{
        const char *detail = kvd_last_error(c);

        ck_assert_msg(r == want, "%s:%d: %s returned %s (%d), want %s; detail: \"%s\"", file, line,
                      what, kvd_strerror(r), r, kvd_strerror(want), r < 0 ? detail : "");
        if (substr)
                ck_assert_msg(strstr(detail, substr),
                              "%s:%d: %s failed with %s as expected, but its detail \"%s\" does "
                              "not say \"%s\"",
                              file, line, what, kvd_strerror(r), detail, substr);
}

json_t *daemon_status_json(const HarnessDaemon *d)
{
        char *text = NULL;
        json_error_t jerr;
        json_t *root;
        int r;

        r = harness_daemon_status(d, &text);
        ck_assert_msg(r == KVD_OK, "kvd_daemon_status: %s", kvd_strerror(r));
        root = json_loads(text, 0, &jerr);
        ck_assert_msg(root, "status JSON: %s", jerr.text);
        free(text);
        return root;
}

int64_t status_json_int(const char *json, const char *path)
{
        json_error_t jerr;
        json_t *root, *v;
        char *copy, *save = NULL, *tok;
        int64_t result;

        root = json_loads(json, 0, &jerr);
        ck_assert_msg(root, "status JSON does not parse: %s", jerr.text);
        copy = strdup(path);
        ck_assert(copy);
        v = root;
        for (tok = strtok_r(copy, "/", &save); tok; tok = strtok_r(NULL, "/", &save)) {
                v = json_is_array(v) ? json_array_get(v, strtoul(tok, NULL, 10))
                                     : json_object_get(v, tok);
                ck_assert_msg(v, "status JSON has no \"%s\" (in %s)", tok, path);
        }
        ck_assert_msg(json_is_integer(v), "status JSON %s is not an integer", path);
        result = json_integer_value(v);
        free(copy);
        json_decref(root);
        return result;
}

int64_t client_status_int(kvd_client *c, const char *path)
{
        char *json = NULL;
        int64_t v;

        expect_ok(c, kvd_daemon_status(c, &json));
        v = status_json_int(json, path);
        free(json);
        return v;
}
