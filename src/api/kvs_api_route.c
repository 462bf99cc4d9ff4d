/*
 * kvs_api_route: maps a request path to an API endpoint (see kvs_api.h).
 */

#include <string.h>

#include "kvs_api.h"


void
kvs_api_route(const char *path, size_t len, kvs_route_t *route)
{
    size_t       i, rest;
    const char  *p;

    static const char  models[] = "/v1/models";

    memset(route, 0, sizeof(*route));
    route->kind = KVS_ROUTE_UNKNOWN;

    p = NULL;
    for (i = 0; i + 4 <= len; i++) {
        if (memcmp(path + i, "/v1/", 4) == 0) {
            p = path + i;
            break;
        }
    }

    if (p == NULL) {
        return;
    }

    rest = len - (size_t) (p - path);

    if (rest < sizeof(models) - 1
        || memcmp(p, models, sizeof(models) - 1) != 0)
    {
        return;
    }

    p += sizeof(models) - 1;
    rest -= sizeof(models) - 1;

    if (rest == 0 || (rest == 1 && p[0] == '/')) {
        route->kind = KVS_ROUTE_MODELS;
        return;
    }

    if (p[0] == '/') {
        route->kind = KVS_ROUTE_MODEL;
        route->id = p + 1;
        route->id_len = rest - 1;
    }
}
