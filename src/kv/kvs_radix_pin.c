/*
 * kvs_radix_pin: client cache breakpoints: pins that hold a cached prefix
 * against eviction until their time-to-live ends (see kvs_radix.h).
 *
 * A pin ends exactly at a node (the node is split when the pinned prefix
 * ends inside its edge), so one prefix has at most one pin, which every
 * later pin of the same prefix refreshes.  Each namespace lists its pins
 * least recently refreshed first, the order in which they are released
 * when the namespace pins more than pin_max blocks.  next_expiry is a
 * lower bound on every pin's end, so expiry scans only when one may be
 * due.
 */

#include <stdlib.h>
#include <string.h>

#include "kvs_radix_impl.h"


static void kvs_radix_pin_unlink(kvs_radix_ns_t *ns, kvs_radix_pin_t *pin);
static void kvs_radix_pin_append(kvs_radix_ns_t *ns, kvs_radix_pin_t *pin);


int
kvs_radix_pin(kvs_radix_t *r, kvs_radix_ns_t *ns, const int32_t *tokens,
    uint32_t n_tokens, uint64_t ttl_ms, uint64_t now, uint32_t *pinned,
    int *created, kvs_err_t *err)
{
    uint32_t           nb, b, j;
    uint64_t           chain;
    kvs_radix_pin_t   *pin;
    kvs_radix_node_t  *x, *c, *upper;

    *pinned = 0;
    *created = 0;

    nb = n_tokens / r->bt;

    if (nb == 0 || r->pin_max == 0) {
        return KVS_OK;
    }

    /* the cached whole blocks of the prefix: x ends after b of them, or
     * c holds them up to its block j */
    b = kvs_radix_walk(r, ns, tokens, nb, &x, &c, &j, &chain);

    /* a pin that alone is over the bound is refused before it makes
     * room by releasing others */
    if (b == 0 || b > r->pin_max) {
        return KVS_OK;
    }

    pin = NULL;

    if (c == NULL && x->pin != NULL) {
        pin = x->pin;

    } else {
        pin = calloc(1, sizeof(kvs_radix_pin_t));
        if (pin == NULL) {
            return kvs_err_set(err, KVS_ENOMEM, "prefix cache: out of "
                               "memory");
        }

        if (c != NULL) {
            if (kvs_radix_split(r, c, j, &upper, err) != KVS_OK) {
                free(pin);
                return err != NULL ? err->code : KVS_ENOMEM;
            }

            x = upper;
        }

        pin->node = x;
        x->pin = pin;
        pin->gnext = r->pins;
        if (r->pins != NULL) {
            r->pins->gprev = pin;
        }
        r->pins = pin;
        r->n_pins++;
        kvs_radix_pins_add(r, x, 1);
        *created = 1;
    }

    if (ttl_ms > pin->ttl) {
        pin->ttl = ttl_ms;
    }

    if (now + ttl_ms > pin->until) {
        pin->until = now + ttl_ms;
    }

    if (pin->until < r->next_expiry) {
        r->next_expiry = pin->until;
    }

    if (!*created) {
        kvs_radix_pin_unlink(ns, pin);
    }

    kvs_radix_pin_append(ns, pin);

    /* over the bound: the least recently refreshed go first, this one
     * too if it alone is too big */
    while (ns->pinned_blocks > r->pin_max && ns->pin_head != NULL) {
        if (ns->pin_head == pin) {
            *created = 0;
            pin = NULL;
        }

        r->released++;
        kvs_radix_pin_release(r, ns->pin_head);
    }

    if (pin != NULL) {
        *pinned = b * r->bt;
    }

    return KVS_OK;
}


void
kvs_radix_pin_touch(kvs_radix_t *r, kvs_radix_pin_t *pin, uint64_t now)
{
    kvs_radix_ns_t  *ns;

    if (now + pin->ttl > pin->until) {
        pin->until = now + pin->ttl;
    }

    ns = pin->node->ns;
    kvs_radix_pin_unlink(ns, pin);
    kvs_radix_pin_append(ns, pin);
}


void
kvs_radix_expire(kvs_radix_t *r, uint64_t now)
{
    uint64_t          next;
    kvs_radix_pin_t  *pin, *gnext;

    if (now < r->next_expiry) {
        return;
    }

    next = UINT64_MAX;

    for (pin = r->pins; pin != NULL; pin = gnext) {
        gnext = pin->gnext;

        if (pin->until <= now) {
            r->expired++;
            kvs_radix_pin_release(r, pin);

        } else if (pin->until < next) {
            next = pin->until;
        }
    }

    r->next_expiry = next;
}


void
kvs_radix_pin_release(kvs_radix_t *r, kvs_radix_pin_t *pin)
{
    kvs_radix_ns_t  *ns;

    ns = pin->node->ns;

    kvs_radix_pin_unlink(ns, pin);

    if (pin->gprev != NULL) {
        pin->gprev->gnext = pin->gnext;
    } else {
        r->pins = pin->gnext;
    }

    if (pin->gnext != NULL) {
        pin->gnext->gprev = pin->gprev;
    }

    pin->node->pin = NULL;
    kvs_radix_pins_add(r, pin->node, -1);
    r->n_pins--;
    free(pin);

    kvs_radix_ns_gc(r, ns);
}


static void
kvs_radix_pin_unlink(kvs_radix_ns_t *ns, kvs_radix_pin_t *pin)
{
    if (pin->prev != NULL) {
        pin->prev->next = pin->next;
    } else {
        ns->pin_head = pin->next;
    }

    if (pin->next != NULL) {
        pin->next->prev = pin->prev;
    } else {
        ns->pin_tail = pin->prev;
    }

    pin->prev = NULL;
    pin->next = NULL;
}


static void
kvs_radix_pin_append(kvs_radix_ns_t *ns, kvs_radix_pin_t *pin)
{
    pin->prev = ns->pin_tail;
    pin->next = NULL;

    if (ns->pin_tail != NULL) {
        ns->pin_tail->next = pin;
    } else {
        ns->pin_head = pin;
    }

    ns->pin_tail = pin;
}
