/*
 * kvs_chat_impl: what the chat renderer's files share: the roles as the
 * built-in families see them, and the check every render runs first.
 * Not for use outside kvs_chat*.c.
 *
 * kvs_chat.c recognises templates and checks messages; kvs_chat_render.c
 * renders them.  A render checks every message before it appends a byte,
 * so the families may assume what kvs_chat_check() established (roles
 * known, contents well formed, the family's ordering rules kept).
 */

#ifndef KVS_CHAT_IMPL_H
#define KVS_CHAT_IMPL_H

#include <stddef.h>

#include "kvs_chat.h"


typedef enum {
    KVS_CHAT_SYSTEM = 0,              /* "system" and "developer" */
    KVS_CHAT_USER,
    KVS_CHAT_ASSISTANT,
    KVS_CHAT_TOOL                     /* a tool's result: Jinja only */
} kvs_chat_role_t;

/* indexed by kvs_chat_role_t */
extern const char  *kvs_chat_role_names[];


/* messages[i]'s role; an error names messages[i].role. */
int kvs_chat_role(const json_t *msg, size_t i, kvs_chat_role_t *role,
    kvs_err_t *err);
/* tools (NULL or JSON null: none) is an array of objects, as the
 * templates walk it; KVS_EINVAL naming it otherwise. */
int kvs_chat_check_tools(const json_t *tools, kvs_err_t *err);
/* Checks messages for chat's family; *first: index of the first message
 * after a leading system message. */
int kvs_chat_check(const kvs_chat_t *chat, const json_t *messages,
    size_t *first, kvs_err_t *err);

#endif /* KVS_CHAT_IMPL_H */
