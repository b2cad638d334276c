/* hooks.c - the simulator as a platform that calls botgate: POST /_sim/inbound sends a real
 * webhook (platforms.md "Rich messages and webhooks": the platform's body, signed as the
 * platform signs it) for an inbound message, a tap or a receipt, so that tests go platform ->
 * botgate -> subscriber end to end. The webhook is posted synchronously (plain HTTP/1.1 on a
 * blocking socket, a 10 s timeout): the handler answers with botgate's status and body. */
#include "sim.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define HOOK_ANSWER_MAX 65536

static void hex(const unsigned char *d, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", d[i]);
}

/* HMAC-SHA256 of msg with key, as hex (65 bytes). */
static void hmac_hex(const char *key, const char *msg, size_t len, char *out)
{
    unsigned char mac[32];
    unsigned n = 0;

    HMAC(EVP_sha256(), key, (int)strlen(key), (const unsigned char *)msg, len, mac, &n);
    hex(mac, 32, out);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The query WeChat puts on its webhook URLs: signature of the sorted token, timestamp, nonce. */
static void wechat_query(const char *token, char *out, size_t size)
{
    char ts[24], nonce[24], joined[512], sig[41];
    const char *parts[3] = {token, ts, nonce};
    unsigned char md[20];

    snprintf(ts, sizeof(ts), "%lld", (long long)(sim_now_ms() / 1000));
    snprintf(nonce, sizeof(nonce), "%llu", (unsigned long long)sim_next_id());
    qsort(parts, 3, sizeof(parts[0]), cmp_str);
    snprintf(joined, sizeof(joined), "%s%s%s", parts[0], parts[1], parts[2]);
    SHA1((const unsigned char *)joined, strlen(joined), md);
    hex(md, 20, sig);
    snprintf(out, size, "signature=%s&timestamp=%s&nonce=%s", sig, ts, nonce);
}

static char *urlencode(const char *s)
{
    char *out = malloc(strlen(s) * 3 + 1), *o = out;

    for (; out != NULL && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '_' || c == '.' || c == '~')
            *o++ = (char)c;
        else
            o += sprintf(o, "%%%02X", c);
    }
    if (out != NULL)
        *o = '\0';
    return out;
}

/* ---- the platforms' bodies ---- */

static json_t *fb_body(const char *from, const char *text, const json_t *tap, const json_t *rc,
                       int64_t now)
{
    char mid[64];
    json_t *item;

    snprintf(mid, sizeof(mid), "m_sim%llu", (unsigned long long)sim_next_id());
    item = json_pack("{s:{s:s},s:{s:s},s:I}", "sender", "id", from, "recipient", "id", "1234567890",
                     "timestamp", (json_int_t)now);
    if (rc != NULL) {
        const char *status = json_string_value(json_object_get(rc, "status"));
        const char *msg = json_string_value(json_object_get(rc, "messageId"));
        if (status != NULL && strcmp(status, "read") == 0)
            json_object_set_new(item, "read", json_pack("{s:I}", "watermark", (json_int_t)now));
        else
            json_object_set_new(
                item, "delivery",
                json_pack("{s:[s?],s:I}", "mids", msg, "watermark", (json_int_t)now));
    } else if (tap != NULL) {
        json_object_set_new(item, "message",
                            json_pack("{s:s,s:s?,s:{s:s?}}", "mid", mid, "text",
                                      json_string_value(json_object_get(tap, "title")),
                                      "quick_reply", "payload",
                                      json_string_value(json_object_get(tap, "payload"))));
    } else {
        json_object_set_new(item, "message", json_pack("{s:s,s:s}", "mid", mid, "text", text));
    }
    return json_pack("{s:s,s:[{s:s,s:I,s:[o]}]}", "object", "page", "entry", "id", "1234567890",
                     "time", (json_int_t)now, "messaging", item);
}

/* whatsapp: the cloud envelope, or (on-premises) the value object alone. */
static json_t *wa_body(int cloud, const char *from, const char *text, const json_t *tap,
                       const json_t *rc, int64_t now)
{
    char id[64], ts[24];
    json_t *value;

    snprintf(id, sizeof(id), "wamid.sim%llu", (unsigned long long)sim_next_id());
    snprintf(ts, sizeof(ts), "%lld", (long long)(now / 1000));
    value = json_pack("{s:[{s:s,s:{s:s}}]}", "contacts", "wa_id", from, "profile", "name", "Sim");
    if (rc != NULL)
        json_object_set_new(value, "statuses",
                            json_pack("[{s:s?,s:s?,s:s,s:s}]", "id",
                                      json_string_value(json_object_get(rc, "messageId")), "status",
                                      json_string_value(json_object_get(rc, "status")), "timestamp",
                                      ts, "recipient_id", from));
    else if (tap != NULL)
        json_object_set_new(value, "messages",
                            json_pack("[{s:s,s:s,s:s,s:s,s:{s:s,s:{s:s?,s:s?}}}]", "from", from,
                                      "id", id, "timestamp", ts, "type", "interactive",
                                      "interactive", "type", "button_reply", "button_reply", "id",
                                      json_string_value(json_object_get(tap, "payload")), "title",
                                      json_string_value(json_object_get(tap, "title"))));
    else
        json_object_set_new(value, "messages",
                            json_pack("[{s:s,s:s,s:s,s:s,s:{s:s}}]", "from", from, "id", id,
                                      "timestamp", ts, "type", "text", "text", "body", text));
    if (!cloud)
        return value;
    json_object_set_new(value, "messaging_product", json_string("whatsapp"));
    json_object_set_new(value, "metadata", json_pack("{s:s}", "phone_number_id", "1055550000"));
    return json_pack("{s:s,s:[{s:s,s:[{s:s,s:o}]}]}", "object", "whatsapp_business_account",
                     "entry", "id", "2000", "changes", "field", "messages", "value", value);
}

static json_t *slack_body(const char *from, const char *text, const json_t *tap, int64_t now)
{
    char ts[40], ev[40];

    snprintf(ts, sizeof(ts), "%lld.%06llu", (long long)(now / 1000),
             (unsigned long long)(sim_next_id() % 1000000));
    snprintf(ev, sizeof(ev), "Ev%llu", (unsigned long long)sim_next_id());
    if (tap != NULL)
        return json_pack("{s:s,s:{s:s},s:{s:s},s:[{s:s,s:s,s:s?,s:{s:s,s:s?},s:s}]}", "type",
                         "block_actions", "user", "id", "U0SIM", "channel", "id", from, "actions",
                         "type", "button", "action_id", "sim", "value",
                         json_string_value(json_object_get(tap, "payload")), "text", "type",
                         "plain_text", "text", json_string_value(json_object_get(tap, "title")),
                         "action_ts", ts);
    return json_pack("{s:s,s:s,s:s,s:{s:s,s:s,s:s,s:s,s:s}}", "type", "event_callback", "team_id",
                     "T0SIM", "event_id", ev, "event", "type", "message", "channel", from, "user",
                     "U0SIM", "text", text, "ts", ts);
}

/* XML text of one field: CDATA, its "]]>" split so that any text fits. */
static void xml_field(char **out, size_t *len, size_t *cap, const char *name, const char *text)
{
    size_t need = 2 * strlen(name) + 4 * strlen(text) + 32;

    if (*len + need >= *cap) {
        *cap = (*len + need) * 2;
        *out = realloc(*out, *cap);
    }
    *len += (size_t)sprintf(*out + *len, "<%s><![CDATA[", name);
    for (const char *p = text; *p; p++) {
        if (strncmp(p, "]]>", 3) == 0) {
            *len += (size_t)sprintf(*out + *len, "]]]]><![CDATA[>");
            p += 2;
        } else {
            (*out)[(*len)++] = *p;
        }
    }
    *len += (size_t)sprintf(*out + *len, "]]></%s>", name);
}

static char *wechat_body(const char *from, const char *text, const json_t *tap, int64_t now)
{
    size_t len = 0, cap = 256;
    char *out = malloc(cap), num[32];

    len += (size_t)sprintf(out, "<xml>");
    xml_field(&out, &len, &cap, "ToUserName", "gh_sim");
    xml_field(&out, &len, &cap, "FromUserName", from);
    snprintf(num, sizeof(num), "%lld", (long long)(now / 1000));
    xml_field(&out, &len, &cap, "CreateTime", num);
    xml_field(&out, &len, &cap, "MsgType", "text");
    if (tap != NULL) {
        const char *title = json_string_value(json_object_get(tap, "title"));
        const char *payload = json_string_value(json_object_get(tap, "payload"));
        xml_field(&out, &len, &cap, "Content", title ? title : "");
        xml_field(&out, &len, &cap, "bizmsgmenuid", payload ? payload : "");
    } else {
        xml_field(&out, &len, &cap, "Content", text);
    }
    snprintf(num, sizeof(num), "%llu", (unsigned long long)sim_next_id() + 1000000000ULL);
    xml_field(&out, &len, &cap, "MsgId", num);
    strcpy(out + len, "</xml>");
    return out;
}

/* ---- posting ---- */

/* POSTs body to url (http://host:port/path[?query], query_extra appended) with the headers;
 * *status and the answer's body (malloc'd) when an answer came, else -1 with why. */
static int post(const char *url, const char *query_extra, const char *headers, const char *body,
                size_t len, int *status, char **answer, const char **why)
{
    char host[256], port[8] = "80", *req = NULL;
    const char *p, *path;
    struct addrinfo hints = {0}, *ai = NULL;
    struct timeval tv = {10, 0};
    size_t got = 0, n;
    int fd = -1, rc = -1;
    char *buf = NULL;

    *answer = NULL;
    if (strncmp(url, "http://", 7) != 0)
        return *why = "url must be http://host:port/path", -1;
    p = url + 7;
    path = strchr(p, '/');
    n = path ? (size_t)(path - p) : strlen(p);
    if (n == 0 || n >= sizeof(host))
        return *why = "url has no usable host", -1;
    memcpy(host, p, n);
    host[n] = '\0';
    if (strchr(host, ':') != NULL) {
        snprintf(port, sizeof(port), "%s", strchr(host, ':') + 1);
        *strchr(host, ':') = '\0';
    }
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, port, &hints, &ai) != 0)
        return *why = "cannot resolve the url's host", -1;
    fd = socket(ai->ai_family, SOCK_STREAM, 0);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0 ||
        connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        *why = "cannot connect to the url";
        goto out;
    }
    n = strlen(path ? path : "/") + strlen(query_extra) + strlen(host) + strlen(headers) + 256;
    if ((req = malloc(n + len)) == NULL) {
        *why = "out of memory";
        goto out;
    }
    n = (size_t)sprintf(req,
                        "POST %s%s%s HTTP/1.1\r\nHost: %s:%s\r\n%sContent-Length: %zu\r\n"
                        "Connection: close\r\n\r\n",
                        path ? path : "/",
                        query_extra[0] ? (path && strchr(path, '?') ? "&" : "?") : "", query_extra,
                        host, port, headers, len);
    memcpy(req + n, body, len);
    n += len;
    for (size_t off = 0; off < n;) {
        ssize_t w = write(fd, req + off, n - off);
        if (w <= 0) {
            *why = "cannot write the webhook";
            goto out;
        }
        off += (size_t)w;
    }
    buf = malloc(HOOK_ANSWER_MAX + 1);
    while (buf != NULL && got < HOOK_ANSWER_MAX) {
        ssize_t r = read(fd, buf + got, HOOK_ANSWER_MAX - got);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    if (buf == NULL || got < 12 || strncmp(buf, "HTTP/1.1 ", 9) != 0) {
        *why = "no HTTP answer";
        goto out;
    }
    buf[got] = '\0';
    *status = atoi(buf + 9);
    p = strstr(buf, "\r\n\r\n");
    *answer = strdup(p ? p + 4 : "");
    rc = 0;
out:
    free(req);
    free(buf);
    if (fd >= 0)
        close(fd);
    freeaddrinfo(ai);
    return rc;
}

/* POST /_sim/inbound {"platform":"facebook|whatsapp-cloud|whatsapp|slack|wechat","url":
 * "<botgate's /webhooks/<channelId> URL>","secret":"<appSecret | verifyToken | signingSecret |
 * token>","from":"<the user's address>","text":".."|"tap":{"payload","title"}|"receipt":
 * {"status":"delivered|read|failed","messageId":".."}} -> {"status":<botgate's HTTP status>,
 * "answer":"<its body>","sent":"<the webhook's body>"}. */
void sim_hooks_inbound(sim_call_t *c, sim_reply_t *r)
{
    const char *platform = json_string_value(json_object_get(c->body, "platform"));
    const char *url = json_string_value(json_object_get(c->body, "url"));
    const char *secret = json_string_value(json_object_get(c->body, "secret"));
    const char *from = json_string_value(json_object_get(c->body, "from"));
    const char *text = json_string_value(json_object_get(c->body, "text"));
    json_t *tap = json_object_get(c->body, "tap"), *rc = json_object_get(c->body, "receipt");
    char headers[512] = "Content-Type: application/json\r\n", query[512] = "", mac[65];
    char *body = NULL, *answer = NULL;
    const char *why = NULL;
    int64_t now = sim_now_ms();
    json_t *j = NULL;
    int status = 0;

    if (platform == NULL || url == NULL || secret == NULL || from == NULL ||
        (text == NULL && !json_is_object(tap) && !json_is_object(rc))) {
        sim_reply_json(r, 400,
                       json_pack("{s:s}", "error",
                                 "platform, url, secret, from and text, tap or receipt "
                                 "are required"));
        return;
    }
    if (!json_is_object(tap))
        tap = NULL;
    if (!json_is_object(rc))
        rc = NULL;
    if (strcmp(platform, "facebook") == 0)
        j = fb_body(from, text, tap, rc, now);
    else if (strcmp(platform, "whatsapp-cloud") == 0 || strcmp(platform, "whatsapp") == 0)
        j = wa_body(platform[8] == '-', from, text, tap, rc, now);
    else if (strcmp(platform, "slack") == 0)
        j = slack_body(from, text, tap, now);
    else if (strcmp(platform, "wechat") == 0)
        body = wechat_body(from, text, tap, now);
    if (j == NULL && body == NULL) {
        sim_reply_json(r, 400, json_pack("{s:s}", "error", "unknown platform, or no body for it"));
        return;
    }
    if (j != NULL)
        body = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (strcmp(platform, "slack") == 0 && tap != NULL) { /* interactivity: form-encoded */
        char *enc = urlencode(body);
        free(body);
        body = malloc(strlen(enc) + 9);
        sprintf(body, "payload=%s", enc);
        free(enc);
        strcpy(headers, "Content-Type: application/x-www-form-urlencoded\r\n");
    }
    if (strcmp(platform, "facebook") == 0 || strcmp(platform, "whatsapp-cloud") == 0) {
        hmac_hex(secret, body, strlen(body), mac);
        snprintf(headers + strlen(headers), sizeof(headers) - strlen(headers),
                 "X-Hub-Signature-256: sha256=%s\r\n", mac);
    } else if (strcmp(platform, "slack") == 0) {
        char ts[24], *msg;
        snprintf(ts, sizeof(ts), "%lld", (long long)(now / 1000));
        msg = malloc(strlen(body) + 32);
        sprintf(msg, "v0:%s:%s", ts, body);
        hmac_hex(secret, msg, strlen(msg), mac);
        free(msg);
        snprintf(headers + strlen(headers), sizeof(headers) - strlen(headers),
                 "X-Slack-Request-Timestamp: %s\r\nX-Slack-Signature: v0=%s\r\n", ts, mac);
    } else if (strcmp(platform, "wechat") == 0) {
        strcpy(headers, "Content-Type: text/xml\r\n");
        wechat_query(secret, query, sizeof(query));
    } else { /* whatsapp on-premises: the token in the URL */
        char *enc = urlencode(secret);
        snprintf(query, sizeof(query), "token=%s", enc);
        free(enc);
    }
    if (post(url, query, headers, body, strlen(body), &status, &answer, &why) < 0)
        sim_reply_json(r, 502, json_pack("{s:s,s:s}", "error", why, "sent", body));
    else
        sim_reply_json(
            r, 200, json_pack("{s:i,s:s,s:s}", "status", status, "answer", answer, "sent", body));
    free(answer);
    free(body);
}
