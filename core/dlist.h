/* dlist.h - the intrusive doubly linked list: a node type with `prev` and `next` pointers to
 * its own kind, and a list held as a first and a last pointer (last may be a dummy for lists
 * that never append at the end). Appending and unlinking are O(1) and allocate nothing; the
 * owner of the nodes stays the owner. */
#ifndef BOTGATE_CORE_DLIST_H
#define BOTGATE_CORE_DLIST_H

#include <stddef.h>

/* Appends node after last. */
#define DLIST_APPEND(first, last, node)                                                            \
    do {                                                                                           \
        (node)->prev = (last);                                                                     \
        (node)->next = NULL;                                                                       \
        if ((last) != NULL)                                                                        \
            (last)->next = (node);                                                                 \
        else                                                                                       \
            (first) = (node);                                                                      \
        (last) = (node);                                                                           \
    } while (0)

/* Inserts node before first (the last pointer is kept right when the list was empty). */
#define DLIST_PREPEND(first, last, node)                                                           \
    do {                                                                                           \
        (node)->prev = NULL;                                                                       \
        (node)->next = (first);                                                                    \
        if ((first) != NULL)                                                                       \
            (first)->prev = (node);                                                                \
        else                                                                                       \
            (last) = (node);                                                                       \
        (first) = (node);                                                                          \
    } while (0)

/* Takes node out of the list; its own pointers are cleared. */
#define DLIST_UNLINK(first, last, node)                                                            \
    do {                                                                                           \
        if ((node)->prev != NULL)                                                                  \
            (node)->prev->next = (node)->next;                                                     \
        else                                                                                       \
            (first) = (node)->next;                                                                \
        if ((node)->next != NULL)                                                                  \
            (node)->next->prev = (node)->prev;                                                     \
        else                                                                                       \
            (last) = (node)->prev;                                                                 \
        (node)->prev = (node)->next = NULL;                                                        \
    } while (0)

#endif
