/* credwait.c - the waiters of one worker for a channel's credential lock, grouped per channel
 * so that a thousand waiters cost Redis what one does. */
#include "credwait.h"

#include "../core/clock.h"
#include "../core/dlist.h"

#include <event2/event.h>
#include <event2/event_struct.h>
#include <stdlib.h>
#include <string.h>

#define WAIT_FALLBACK_MS 1000 /* waiters look again without news (a refresher died) */

/* The waiters of one channel. Owned by the worker's list (*groups); freed by group_free when
 * the last waiter has left. */
typedef struct credwait {
    struct credwait **groups;
    struct credwait *prev, *next; /* *groups */
    store_t *store;
    const credwait_ops_t *ops;
    credwait_waiter_t *first, *last; /* oldest first */
    redisc_sub_t *watch;             /* the lock's release; NULL: the timer alone */
    struct event timer;              /* the fallback */
    store_call_t *call;              /* the group's re-read in flight */
    /* The waiter trying the lock for the group, or NULL. It stays in the group meanwhile, so
     * that the group and its subscription outlive the try: were it the last waiter and the
     * group went, its return would subscribe anew, and the confirmation (news, since a
     * release may have come before it) would send it straight back to the lock, in a loop. */
    credwait_waiter_t *trier;
    unsigned handouts;  /* re-reads handed out so far */
    unsigned again : 1; /* news came during the re-read: read once more */
    unsigned busy : 1;  /* handing out a re-read: not freed when empty */
    char channel_id[];
} credwait_t;

static void group_free(credwait_t *g)
{
    credwait_t *unused_last = NULL;

    if (g->call != NULL)
        store_cancel(g->call);
    store_unwatch(g->watch);
    event_del(&g->timer);
    DLIST_UNLINK(*g->groups, unused_last, g);
    (void)unused_last;
    free(g);
}

void credwait_leave(credwait_waiter_t *w)
{
    credwait_t *g = w->_group;

    if (g->trier == w)
        g->trier = NULL;
    DLIST_UNLINK(g->first, g->last, w);
    w->_group = NULL;
    if (g->first == NULL && !g->busy)
        group_free(g);
}

void credwait_tried(credwait_waiter_t *w)
{
    credwait_t *g = w->_group;

    if (g->trier == w)
        g->trier = NULL;
    w->_seen = g->handouts;
}

static void group_read(credwait_t *g);

static void on_group_news(void *arg, const char *msg, size_t len)
{
    (void)msg;
    (void)len;
    group_read(arg);
}

static void on_group_timer(evutil_socket_t fd, short what, void *arg)
{
    credwait_t *g = arg;
    struct timeval tv = clock_ms_timeval(WAIT_FALLBACK_MS);

    (void)fd;
    (void)what;
    event_add(&g->timer, &tv);
    group_read(g);
}

/* The group's re-read: hands the channel to every waiter; if none went on, the oldest tries the
 * lock, and rejoins (credwait_tried) if it is still held. */
static void on_group_read(void *arg, store_status_t st, json_t *channel)
{
    credwait_t *g = arg;
    unsigned round = ++g->handouts;
    credwait_waiter_t *w;

    g->call = NULL;
    g->busy = 1;
    for (;;) {
        /* from the first again after each one: its callbacks may end others; the trier has
         * its lock call in flight and looks when that answers */
        for (w = g->first; w != NULL && (w->_seen == round || w == g->trier); w = w->next)
            ;
        if (w == NULL)
            break;
        w->_seen = round;
        g->ops->on_read(w, st, channel);
    }
    json_decref(channel);
    g->busy = 0;
    if (g->first == NULL) {
        group_free(g);
    } else if (g->again) {
        g->again = 0;
        group_read(g);
    } else if (g->trier == NULL) {
        g->trier = g->first;
        g->ops->on_try(g->first);
    }
}

static void group_read(credwait_t *g)
{
    store_status_t st;

    if (g->call != NULL) {
        g->again = 1;
        return;
    }
    g->call = store_reread_channel(g->store, g->channel_id, on_group_read, g, &st);
    if (g->call == NULL)
        on_group_read(g, st, NULL); /* every waiter fails as a re-read of its own would */
}

int credwait_join(struct credwait **groups, struct event_base *base, store_t *store,
                  const char *channel_id, const credwait_ops_t *ops, credwait_waiter_t *w)
{
    struct timeval tv = clock_ms_timeval(WAIT_FALLBACK_MS);
    size_t len = strlen(channel_id);
    credwait_t *g, *unused_last = NULL;

    for (g = *groups; g != NULL && strcmp(g->channel_id, channel_id) != 0; g = g->next)
        ;
    if (g == NULL) {
        if ((g = calloc(1, sizeof(*g) + len + 1)) == NULL)
            return -1;
        g->groups = groups;
        g->store = store;
        g->ops = ops;
        memcpy(g->channel_id, channel_id, len + 1);
        evtimer_assign(&g->timer, base, on_group_timer, g);
        event_add(&g->timer, &tv);
        g->watch = store_watch_credential(store, channel_id, on_group_news, g);
        DLIST_PREPEND(*groups, unused_last, g);
        (void)unused_last;
    }
    w->_group = g;
    DLIST_APPEND(g->first, g->last, w);
    w->_seen = g->handouts;
    return 0;
}
