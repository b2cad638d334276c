/* result.c - building result elements and answers. */
#include "result.h"

#include <stdlib.h>
#include <string.h>

json_t *result_address(const char *addr)
{
    size_t n;

    if (addr == NULL)
        return json_null();
    n = strlen(addr);
    if (n == 0 || n > 15 || strspn(addr, "0123456789") != n || (addr[0] == '0' && n > 1))
        return json_string(addr);
    return json_integer((json_int_t)strtoll(addr, NULL, 10));
}

json_t *result_message_event(const char *from, const char *to, const json_t *response,
                             int64_t timestamp_ms, const char *message_id)
{
    json_t *ev = json_object(), *data = json_deep_copy(response);

    json_object_del(data, "type");
    json_object_del(data, "fallback");
    json_object_set_new(ev, "from", result_address(from));
    json_object_set_new(ev, "to", result_address(to));
    json_object_set_new(ev, "data", data);
    json_object_set(ev, "type", json_object_get(response, "type"));
    json_object_set_new(ev, "timestamp", json_integer(timestamp_ms));
    if (message_id != NULL)
        json_object_set_new(ev, "messageId", json_string(message_id));
    return ev;
}

void result_write_data(jsonw_t *w, const json_t *response)
{
    const char *key;
    json_t *value;
    int first = 1;

    jw_lit(w, "{");
    json_object_foreach((json_t *)response, key, value) {
        /* what was asked: a fallback is the element's fallbackUsed */
        if (strcmp(key, "type") == 0 || strcmp(key, "fallback") == 0)
            continue;
        if (!first)
            jw_lit(w, ",");
        first = 0;
        jw_str(w, key);
        jw_lit(w, ":");
        jw_json(w, value);
    }
    jw_lit(w, "}");
}

/* ---- a response's text (sendResponses keeps it while its platform call is out) ---- */

/* {"type":"T",<data members>}: written from its data, in a block of its own size (the writer's
 * buffer is larger, and thousands wait at once). NULL when out of memory. */
static char *response_text_one(const json_t *r)
{
    const char *type = json_string_value(json_object_get(r, "type"));
    size_t data_at, data_len;
    jsonw_t w;
    char *text;

    jw_init(&w);
    jw_lit(&w, "{\"type\":");
    jw_str(&w, type);
    data_at = w.len;
    result_write_data(&w, r); /* {...}: its members follow the type, or {} none */
    data_len = w.len - data_at;
    if (data_len <= 2)
        w.len = data_at + 1; /* {"type":"T"} */
    if (w.failed || (text = malloc(w.len + 1)) == NULL) {
        jw_free(&w);
        return NULL;
    }
    memcpy(text, w.buf, w.len);
    text[data_at] = data_len > 2 ? ',' : '}';
    text[w.len] = '\0';
    jw_free(&w);
    return text;
}

char *result_response_text(const json_t *r, int fallback)
{
    char *text = response_text_one(r), *alt, *both;
    size_t n, m;

    if (!fallback || text == NULL)
        return text;
    if ((alt = response_text_one(json_object_get(r, "fallback"))) == NULL) {
        free(text);
        return NULL;
    }
    n = strlen(text);
    m = strlen(alt);
    if ((both = realloc(text, n + 1 + m + 1)) == NULL) {
        free(text);
        free(alt);
        return NULL;
    }
    memcpy(both + n + 1, alt, m + 1);
    free(alt);
    return both;
}

/* The same text copied from the body as the client wrote it: a response's members copied as
 * written, but for the blanks, are the bytes result_write_data writes from the parsed value, as
 * long as no string holds an escape (reals and -0 are written again from their value). Copying
 * costs a fraction of walking the parsed value and writing it again. The body was parsed and
 * checked: anything unexpected here only means "write it the other way". Each reader takes the
 * text at p (up to end) and returns where it stopped, NULL when it cannot go on. */

/* jw_raw, but inline while the writer has room: the copies are short and many. */
static void body_put(jsonw_t *w, const char *s, size_t n)
{
    if (w->cap - w->len > n) {
        memcpy(w->buf + w->len, s, n);
        w->len += n;
    } else {
        jw_raw(w, s, n);
    }
}

/* One byte: most of the pieces are a comma or a colon. */
static void body_putc(jsonw_t *w, char c)
{
    if (w->cap - w->len > 1)
        w->buf[w->len++] = c;
    else
        jw_raw(w, &c, 1);
}

static const char *body_blank(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* A string, p at its opening quote: past its closing quote. NULL when it does not end, and
 * when plain is set and it holds an escape. */
static const char *body_string(const char *p, const char *end, int plain)
{
    for (p++; p < end && *p != '"'; p++)
        if (*p == '\\' && (plain || ++p >= end))
            return NULL;
    return p < end ? p + 1 : NULL;
}

/* The value at p (not a blank): copied into w without its blanks, or only passed over when w
 * is NULL. Its end; NULL when it cannot be copied as it is written. */
static const char *body_value(const char *p, const char *end, jsonw_t *w)
{
    const char *run = p, *q;
    int depth = 0, real;

    do {
        if (p >= end)
            return NULL;
        switch (*p) {
        case '"':
            if ((p = body_string(p, end, w != NULL)) == NULL)
                return NULL;
            break;
        case '{':
        case '[':
            depth++;
            p++;
            break;
        case '}':
        case ']':
            if (--depth < 0)
                return NULL;
            p++;
            break;
        case ',':
        case ':':
            p++;
            break;
        case 't':
        case 'n':
        case 'f':
            if (end - p < (*p == 'f' ? 5 : 4))
                return NULL;
            p += *p == 'f' ? 5 : 4;
            break;
        case ' ':
        case '\t':
        case '\n':
        case '\r':
            if (w != NULL)
                body_put(w, run, (size_t)(p - run));
            run = p = body_blank(p, end);
            break;
        default: /* a number */
            real = 0;
            for (q = p; q < end && ((*q >= '0' && *q <= '9') || *q == '-' || *q == '+' ||
                                    *q == '.' || *q == 'e' || *q == 'E');
                 q++)
                real |= *q == '.' || *q == 'e' || *q == 'E';
            if (q == p)
                return NULL;
            /* an integer is written as it is, but -0 (the value is 0); a real as jw_real
             * writes the value it reads as (the parse read it with strtod too) */
            if (w != NULL && (real || (q - p == 2 && p[0] == '-' && p[1] == '0'))) {
                char num[64];
                if ((size_t)(q - p) >= sizeof(num))
                    return NULL;
                memcpy(num, p, (size_t)(q - p));
                num[q - p] = '\0';
                body_put(w, run, (size_t)(p - run));
                if (real)
                    jw_real(w, strtod(num, NULL));
                else
                    body_put(w, "0", 1);
                run = q;
            }
            p = q;
            break;
        }
    } while (depth > 0);
    if (w != NULL)
        body_put(w, run, (size_t)(p - run));
    return p;
}

/* A member's name (*key, quotes included, *key_len long), its colon and the blanks around:
 * where its value starts. */
static const char *body_name(const char *p, const char *end, const char **key, size_t *key_len)
{
    const char *q;

    p = body_blank(p, end);
    if (p >= end || *p != '"' || (q = body_string(p, end, 1)) == NULL)
        return NULL;
    *key = p;
    *key_len = (size_t)(q - p);
    p = body_blank(q, end);
    return p < end && *p == ':' ? body_blank(p + 1, end) : NULL;
}

/* After a member or an element: past the comma that follows (*last 0) or the closing close
 * (*last 1). */
static const char *body_next(const char *p, const char *end, char close, int *last)
{
    p = body_blank(p, end);
    if (p >= end || (*p != ',' && *p != close))
        return NULL;
    *last = *p == close;
    return p + 1;
}

const char *result_body_array(const char *body, size_t len, const char *name)
{
    const char *p = body_blank(body, body + len), *end = body + len, *key, *v;
    size_t n, name_len = strlen(name);
    int last = 0;

    if (p >= end || *p++ != '{')
        return NULL;
    /* a name with an escape is never this one, as written: a repeated name is refused */
    while (!last && (v = body_name(p, end, &key, &n)) != NULL) {
        if (n == name_len + 2 && memcmp(key + 1, name, name_len) == 0)
            return *v == '[' ? v + 1 : NULL;
        if ((p = body_value(v, end, NULL)) == NULL || (p = body_next(p, end, '}', &last)) == NULL)
            return NULL;
    }
    return NULL;
}

/* The object at p: its members but type and fallback into w, each after a comma; *type its
 * type's string (quotes included, *type_len long) and *fallback where its fallback's value
 * starts (NULL when none). Its end. */
static const char *body_members(const char *p, const char *end, jsonw_t *w, const char **type,
                                size_t *type_len, const char **fallback)
{
    int last = 0;

    *type = *fallback = NULL;
    if (p >= end || *p++ != '{')
        return NULL;
    while (!last) {
        const char *key, *v;
        size_t n;
        if ((v = body_name(p, end, &key, &n)) == NULL)
            return NULL;
        if (n == 6 && memcmp(key, "\"type\"", 6) == 0) {
            if (*v != '"' || (p = body_string(v, end, 1)) == NULL)
                return NULL;
            *type = v;
            *type_len = (size_t)(p - v);
        } else if (n == 10 && memcmp(key, "\"fallback\"", 10) == 0) {
            *fallback = v;
            p = body_value(v, end, NULL);
        } else {
            body_putc(w, ',');
            body_put(w, key, n);
            body_putc(w, ':');
            p = body_value(v, end, w);
        }
        if (p == NULL || (p = body_next(p, end, '}', &last)) == NULL)
            return NULL;
    }
    return *type != NULL && !w->failed ? p : NULL;
}

/* {"type":<type>,<members>} and its NUL at out: the bytes written but the NUL. */
static size_t body_join(char *out, const char *type, size_t type_len, const char *members,
                        size_t len)
{
    memcpy(out, "{\"type\":", 8);
    memcpy(out + 8, type, type_len);
    memcpy(out + 8 + type_len, members, len);
    memcpy(out + 8 + type_len + len, "}", 2);
    return 8 + type_len + len + 1;
}

char *result_body_text(const char **p, const char *end, jsonw_t *scratch)
{
    const char *at = body_blank(*p, end), *type, *fallback, *ftype, *ffallback, *next;
    size_t type_len, ftype_len = 0, own;
    char *text = NULL;
    int last = 0;

    scratch->len = 0;
    next = body_members(at, end, scratch, &type, &type_len, &fallback);
    own = scratch->len; /* the fallback's members follow the response's */
    if (next != NULL && (fallback == NULL ||
                         body_members(fallback, end, scratch, &ftype, &ftype_len, &ffallback))) {
        size_t size = 10 + type_len + own + (fallback ? 10 + ftype_len + scratch->len - own : 0);
        if ((text = malloc(size)) != NULL) {
            size_t n = body_join(text, type, type_len, scratch->buf, own);
            if (fallback != NULL)
                body_join(text + n + 1, ftype, ftype_len, scratch->buf + own, scratch->len - own);
        }
    }
    /* passed over either way: the next response starts after it */
    if (next == NULL)
        next = body_value(at, end, NULL);
    if (next == NULL || (next = body_next(next, end, ']', &last)) == NULL)
        *p = NULL;
    else
        *p = last ? end : next;
    return text;
}

static void write_event(jsonw_t *w, const result_event_t *ev)
{
    jw_lit(w, "{\"from\":");
    jw_addr(w, ev->from);
    jw_lit(w, ",\"to\":");
    jw_addr(w, ev->to);
    jw_lit(w, ",\"data\":");
    if (ev->response != NULL) {
        result_write_data(w, ev->response);
        jw_lit(w, ",\"type\":");
        jw_str(w, json_string_value(json_object_get(ev->response, "type")));
    } else {
        const char *data = ev->data ? ev->data : "{}";
        jw_raw(w, data, strlen(data));
        jw_lit(w, ",\"type\":");
        jw_str(w, ev->type);
    }
    jw_lit(w, ",\"timestamp\":");
    jw_int(w, ev->timestamp_ms);
    if (ev->message_id != NULL) {
        jw_lit(w, ",\"messageId\":");
        jw_str(w, ev->message_id);
    }
    jw_lit(w, "}");
}

void result_write_sent(jsonw_t *w, const result_event_t *ev, const char *chat_id,
                       const json_t *meta, const char *api_version)
{
    jw_lit(w, "{\"result\":{\"messages\":[{\"id\":");
    jw_str(w, ev->message_id);
    jw_lit(w, "}],\"meta\":");
    if (json_is_object(meta)) {
        jw_json(w, meta);
    } else {
        jw_lit(w, "{\"api_status\":\"stable\",\"version\":");
        jw_str(w, api_version);
        jw_lit(w, "}");
    }
    jw_lit(w, "},\"messageEvent\":");
    write_event(w, ev);
    jw_lit(w, ",\"chatId\":");
    jw_str(w, chat_id);
    jw_lit(w, "}");
}

void result_write_failed(jsonw_t *w, const result_event_t *ev, const char *chat_id,
                         const bg_error_t *err)
{
    result_write_failed_after(w, ev, chat_id, err, 0);
}

void result_write_failed_after(jsonw_t *w, const result_event_t *ev, const char *chat_id,
                               const bg_error_t *err, int64_t retry_after_ms)
{
    jw_lit(w, "{\"messageEvent\":");
    write_event(w, ev);
    jw_lit(w, ",\"chatId\":");
    jw_str(w, chat_id);
    jw_lit(w, ",\"error\":{\"err_code\":");
    jw_int(w, err->code > 0 ? err->code : BG_ERR_PLATFORM);
    jw_lit(w, ",\"err\":");
    jw_str(w, err->msg);
    if (retry_after_ms > 0) {
        jw_lit(w, ",\"retryAfterMs\":");
        jw_int(w, retry_after_ms);
    }
    jw_lit(w, "}}");
}

/* {"ok":1 or the failure's fields, "member":.., "sendResult":{..}}: the one shape of both. */
static void write_answer(jsonw_t *w, const bg_error_t *err, const char *member_id, int send_ok,
                         const char *elements, size_t len)
{
    if (err == NULL) {
        jw_lit(w, "{\"ok\":1,\"member\":");
    } else {
        jw_lit(w, "{\"ok\":0,\"err_code\":");
        jw_int(w, err->code);
        jw_lit(w, ",\"err\":");
        jw_str(w, err->msg);
        jw_lit(w, ",\"error\":");
        jw_str(w, err->msg);
        jw_lit(w, ",\"member\":");
    }
    jw_str(w, member_id);
    jw_lit(w, send_ok ? ",\"sendResult\":{\"ok\":1,\"member\":"
                      : ",\"sendResult\":{\"ok\":0,\"member\":");
    jw_str(w, member_id);
    jw_lit(w, ",\"result\":[");
    jw_raw(w, elements, len);
    jw_lit(w, "]}}");
}

void result_write_answer(jsonw_t *w, const char *member_id, int send_ok, const char *elements,
                         size_t len)
{
    write_answer(w, NULL, member_id, send_ok, elements, len);
}

void result_write_cut_answer(jsonw_t *w, const bg_error_t *err, const char *member_id,
                             const char *elements, size_t len)
{
    write_answer(w, err, member_id, 0, elements, len);
}

json_t *result_node_element(json_t *event, const bg_error_t *err)
{
    return result_node_element_after(event, err, 0);
}

json_t *result_node_element_after(json_t *event, const bg_error_t *err, int64_t retry_after_ms)
{
    json_t *el = json_object();

    json_object_set_new(el, "ok", json_integer(err == NULL));
    if (event != NULL)
        json_object_set_new(el, "messageEvent", event);
    if (err != NULL) {
        json_t *e = bg_error_element_json(err);
        if (retry_after_ms > 0)
            json_object_set_new(e, "retryAfterMs", json_integer(retry_after_ms));
        json_object_set_new(el, "error", e);
    }
    return el;
}

json_t *result_answer(const char *member_id, int send_ok, json_t *results)
{
    json_t *answer = json_object(), *send = json_object();

    json_object_set_new(send, "ok", json_integer(send_ok ? 1 : 0));
    json_object_set_new(send, "member", json_string(member_id));
    json_object_set_new(send, "result", results);
    json_object_set_new(answer, "ok", json_integer(1));
    json_object_set_new(answer, "member", json_string(member_id));
    json_object_set_new(answer, "sendResult", send);
    return answer;
}
