/* Conversation windows, as the platforms keep them (platforms.md): the users whose window is
 * closed, set with POST /_sim/windows; a send to one of them is refused as the platform refuses
 * it (sim_window_refused in platforms.c). An inbound message the simulator sends for a user
 * opens the window again (sim_window_open). */
#include "sim.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define SIM_WINDOWS_MAX 100000 /* closed windows kept; a test closes a few */

/* Shared by every server thread; the mutex guards the set (held for one look-up). */
static struct {
    pthread_mutex_t lock;
    json_t *closed; /* "platform\nrecipient" -> true */
} sim_win = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void sim_window_key(char *key, size_t size, sim_platform_t p, const char *recipient)
{
    snprintf(key, size, "%s\n%s", sim_platform_name(p), recipient);
}

static void sim_window_mark(sim_platform_t p, const char *recipient, int closed)
{
    char key[512];

    sim_window_key(key, sizeof(key), p, recipient);
    pthread_mutex_lock(&sim_win.lock);
    if (sim_win.closed == NULL)
        sim_win.closed = json_object();
    if (!closed)
        json_object_del(sim_win.closed, key);
    else if (json_object_size(sim_win.closed) < SIM_WINDOWS_MAX)
        json_object_set_new(sim_win.closed, key, json_true());
    pthread_mutex_unlock(&sim_win.lock);
}

int sim_window_closed(sim_platform_t p, const char *recipient)
{
    char key[512];
    int closed;

    if (recipient == NULL)
        return 0;
    sim_window_key(key, sizeof(key), p, recipient);
    pthread_mutex_lock(&sim_win.lock);
    closed = json_object_get(sim_win.closed, key) != NULL;
    pthread_mutex_unlock(&sim_win.lock);
    return closed;
}

void sim_window_open(sim_platform_t p, const char *recipient)
{
    if (recipient != NULL)
        sim_window_mark(p, recipient, 0);
}

/* {"platform":"whatsapp-cloud","recipient":"852...","closed":true|false}: -1 with a message in
 * err when it is something else. */
int sim_windows_configure(json_t *body, char *err, size_t errlen)
{
    const char *name = json_string_value(json_object_get(body, "platform"));
    const char *recipient = json_string_value(json_object_get(body, "recipient"));
    json_t *closed = json_object_get(body, "closed");
    int p;

    for (p = 0; p < SIM_PLATFORM_HOOK; p++)
        if (name != NULL && strcmp(name, sim_platform_name((sim_platform_t)p)) == 0)
            break;
    if (p == SIM_PLATFORM_HOOK) {
        snprintf(err, errlen, "platform: one of facebook, whatsapp, whatsapp-cloud, wechat...");
        return -1;
    }
    if (recipient == NULL || *recipient == '\0' || strlen(recipient) > 256) {
        snprintf(err, errlen, "recipient: the user's address on the platform (1-256 bytes)");
        return -1;
    }
    if (!json_is_boolean(closed)) {
        snprintf(err, errlen, "closed: true or false");
        return -1;
    }
    sim_window_mark((sim_platform_t)p, recipient, json_is_true(closed));
    return 0;
}

json_t *sim_windows_get(void)
{
    json_t *list = json_array();
    const char *key;
    json_t *v;

    pthread_mutex_lock(&sim_win.lock);
    json_object_foreach(sim_win.closed, key, v) {
        const char *nl = strchr(key, '\n');
        json_array_append_new(list, json_pack("{s:s%,s:s}", "platform", key, (size_t)(nl - key),
                                              "recipient", nl + 1));
    }
    pthread_mutex_unlock(&sim_win.lock);
    return json_pack("{s:o}", "closed", list);
}

void sim_windows_reset(void)
{
    pthread_mutex_lock(&sim_win.lock);
    json_object_clear(sim_win.closed);
    pthread_mutex_unlock(&sim_win.lock);
}

void sim_windows_free(void)
{
    pthread_mutex_lock(&sim_win.lock);
    json_decref(sim_win.closed);
    sim_win.closed = NULL;
    pthread_mutex_unlock(&sim_win.lock);
}
